"""The report's charts, built from :mod:`hwbench.report.data` rows with :mod:`hwbench.report.svg`."""

from __future__ import annotations

from typing import Any

from hwbench.report.cascade import Cascade
from hwbench.report.svg import MARKERS, Axis, Plot, color, data_range, fmt_bytes

DTYPE_MARKERS = {"fp32": "circle", "fp64": "square", "fp16": "triangle", "bf16": "diamond", "tf32": "triangle"}
ROOF_DASH = ("", "6 3", "2 3", "8 3 2 3")


def _marker(dtype: str) -> str:
    return DTYPE_MARKERS.get(dtype, MARKERS[sum(map(ord, dtype)) % len(MARKERS)])


def _series_colors(keys: list[str]) -> dict[str, str]:
    return {key: color(i) for i, key in enumerate(dict.fromkeys(keys))}


def roofline(
    ident: str,
    title: str,
    points: list[dict[str, Any]],
    roofs: dict[str, float],
    bandwidth_gbps: float | None,
    measured: dict[str, float] | None = None,
    measured_gbps: float | None = None,
) -> str:
    """Achieved TFLOPS against arithmetic intensity under the datasheet's compute roofs (and memory
    roof), with the roofs measured in the run (best GEMM per dtype, best stream) beside them."""
    measured = measured or {}
    ais = [p["ai"] for p in points]
    ridges = [peak * 1000.0 / bandwidth_gbps for peak in roofs.values()] if bandwidth_gbps else []
    ridges += [peak * 1000.0 / measured_gbps for peak in measured.values()] if measured_gbps else []
    x_lo, x_hi = data_range([min(ais + ridges) / 2, max(ais + ridges) * 2], log=True)
    tops = [p["tflops"] for p in points] + list(roofs.values()) + list(measured.values())
    y_lo, y_hi = data_range([min(tops) / 2, max(tops) * 1.6], log=True)
    plot = Plot(
        ident,
        title,
        Axis("arithmetic intensity (flop/byte)", x_lo, x_hi, log=True),
        Axis("achieved TFLOPS", y_lo, y_hi, log=True),
        legend_width=230,
    )
    for i, (dtype, peak) in enumerate(sorted(roofs.items(), key=lambda kv: -kv[1])):
        dash = ROOF_DASH[i % len(ROOF_DASH)] or None
        if bandwidth_gbps:
            ridge = peak * 1000.0 / bandwidth_gbps
            xs, ys = [x_lo, ridge, x_hi], [bandwidth_gbps * x_lo / 1000.0, peak, peak]
            tip = f"{dtype} roof: {peak:.4g} TFLOPS peak, {bandwidth_gbps:.4g} GB/s, ridge at {ridge:.3g} flop/byte"
        else:
            xs, ys = [x_lo, x_hi], [peak, peak]
            tip = f"{dtype} compute roof: {peak:.4g} TFLOPS (memory bandwidth unknown)"
        plot.line(xs, ys, "#444", tip=tip, dash=dash, width=1.6)
        plot.label(xs[-2] * 1.15, peak, f"{dtype} peak {peak:.3g} TFLOPS", anchor="start")
        plot.add_legend(f"{dtype} roof", "#444", dash=dash)
    _measured_roofs(plot, measured, measured_gbps or bandwidth_gbps, bool(measured_gbps), x_lo, x_hi)
    colors = _series_colors([f"{p['kernel']} {p['impl']}" for p in points])
    for p in points:
        series = f"{p['kernel']} {p['impl']}"
        pct = f", {p['pct_peak']:.1f}% of peak" if p.get("pct_peak") is not None else ""
        tip = (
            f"{series} ({p['kind']}) {p['dtype']} {p['shape']}: {p['tflops']:.4g} TFLOPS{pct}, "
            f"{p['ai']:.4g} flop/byte, {p['gbps']:.4g} GB/s"
        )
        plot.point(p["ai"], p["tflops"], colors[series], tip, _marker(p["dtype"]))
        plot.add_legend(f"{series} {p['dtype']}", colors[series], marker=_marker(p["dtype"]))
    return plot.render()


def _measured_roofs(
    plot: Plot, measured: dict[str, float], gbps: float | None, gbps_measured: bool, x_lo: float, x_hi: float
) -> None:
    """The roofs the run reached, in orange: per dtype the best GEMM, sloped by the best stream result
    (or by the datasheet's bandwidth where the run has no stream result)."""
    hue = "#c60"
    for i, (dtype, top) in enumerate(sorted(measured.items(), key=lambda kv: -kv[1])):
        dash = ROOF_DASH[i % len(ROOF_DASH)] or None
        if gbps:
            ridge = top * 1000.0 / gbps
            xs, ys = [x_lo, ridge, x_hi], [gbps * x_lo / 1000.0, top, top]
            what = "measured" if gbps_measured else "datasheet"
            tip = f"{dtype} measured roof: {top:.4g} TFLOPS (best GEMM), {gbps:.4g} GB/s ({what}), ridge {ridge:.3g}"
        else:
            xs, ys = [x_lo, x_hi], [top, top]
            tip = f"{dtype} measured compute roof: {top:.4g} TFLOPS (best GEMM of the run)"
        plot.line(xs, ys, hue, tip=tip, dash=dash, width=1.6)
        plot.label(xs[-2] * 1.15, top, f"{dtype} measured {top:.3g} TFLOPS", anchor="start")
        plot.add_legend(f"{dtype} measured roof", hue, dash=dash)
    if gbps and gbps_measured and not measured:  # a bandwidth roof alone: its slope up to the plot's top
        plot.line([x_lo, x_hi], [gbps * x_lo / 1000.0, gbps * x_hi / 1000.0], hue, tip=f"measured {gbps:.4g} GB/s")
        plot.add_legend("measured bandwidth roof", hue)


def fmt_ratio(value: float) -> str:
    """A speed ratio as an axis label: ``0.1x``, ``1x``, ``10x``."""
    return f"{value:g}x"


def overhead(ident: str, title: str, rows: list[dict[str, Any]]) -> str:
    """Horizontal bars of each case's speed against its native, t_native / t_portable, on a log
    axis from 1x (left of it: slower than the native, right: faster), with the overhead in the tips."""
    values = [r["ratio"] for r in rows]
    lo, hi = data_range([*values, 1.0], log=True)
    n = len(rows)
    ticks = [(n - 1 - i, f"{r['kernel']} {r['impl']} {r['dtype']} {r['shape']}") for i, r in enumerate(rows)]
    plot = Plot(
        ident,
        title,
        Axis(
            "speed against the native, t_native / t_portable (log; right of 1x: faster)",
            lo,
            hi,
            log=True,
            fmt=fmt_ratio,
        ),
        Axis("", -0.6, n - 0.4, ticks=ticks),
        width=700,
        height=max(200, 90 + 22 * n),
        margin_left=330,
        legend_width=130,
    )
    colors = _series_colors([r["kernel"] for r in rows])
    plot.line([1.0, 1.0], [-0.6, n - 0.4], "#333", width=1)
    for i, r in enumerate(rows):
        y = n - 1 - i
        tip = (
            f"{r['kernel']} {r['impl']} vs {r['native']} {r['dtype']} {r['shape']}: {r['ratio']:.3g}x the native's "
            f"speed (overhead {r['overhead'] * 100:+.1f}%)"
        )
        plot.bar(1.0, y - 0.32, r["ratio"], y + 0.32, colors[r["kernel"]], tip)
        plot.add_legend(str(r["kernel"]), colors[r["kernel"]], marker="square")
    return plot.render()


def cascade(ident: str, title: str, items: list[Cascade]) -> str:
    """Efficiency of each implementation on its k-th best device (markers) and PP of the first k (lines)."""
    n = max(len(c.steps) for c in items)
    plot = Plot(
        ident,
        title,
        Axis("devices, best first (k)", 0.5, n + 0.5, ticks=[(k, str(k)) for k in range(1, n + 1)]),
        Axis("efficiency vs native / PP", 0.0, 1.05, ticks=[(v / 5, f"{v / 5:.1f}") for v in range(6)]),
    )
    for i, item in enumerate(items):
        c, shift = color(i), (i - (len(items) - 1) / 2) * 0.06  # side by side where values coincide
        ks, pps = [s.rank + shift for s in item.steps], [s.pp for s in item.steps]
        plot.line(ks, pps, c, tip=f"{item.kernel} {item.impl}: PP over the first k devices")
        for s in item.steps:
            plot.point(
                s.rank + shift,
                s.efficiency,
                c,
                f"{item.kernel} {item.impl} on {s.device.label}: efficiency "
                f"{s.efficiency:.3f} over {s.cases} case(s); PP of the first {s.rank}: {s.pp:.3f}",
            )
        plot.add_legend(f"{item.kernel} {item.impl}", c, marker="circle")
    plot.add_legend("line: PP of first k", "#666")
    return plot.render()


def _allreduce_series(points: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    series: dict[str, list[dict[str, Any]]] = {}
    for p in points:
        variant = f" {p['variant']}" if p["variant"] else ""
        series.setdefault(f"{p['impl']} {p['dtype']} ×{p['ranks']}{variant} · {p['device'].label}", []).append(p)
    return series


def busbw(ident: str, points: list[dict[str, Any]]) -> str:
    """AllReduce bus bandwidth against message size (log-log)."""
    series = _allreduce_series(points)
    x_lo, x_hi = data_range([p["bytes"] for p in points], log=True)
    bws = [p["busbw"] for p in points if p["busbw"]]
    y_lo, y_hi = data_range(bws or [1.0], log=True)
    plot = Plot(
        ident,
        "AllReduce bus bandwidth",
        Axis("message size per rank", x_lo, x_hi, log=True, fmt=fmt_bytes),
        Axis("busbw (GB/s)", y_lo, y_hi, log=True),
        width=600,
        legend_width=210,
    )
    for i, (name, items) in enumerate(series.items()):
        c = color(i)
        good = [p for p in items if p["busbw"]]
        plot.line([p["bytes"] for p in good], [p["busbw"] for p in good], c, tip=name)
        for p in good:
            plot.point(
                p["bytes"],
                p["busbw"],
                c,
                f"{name}: {fmt_bytes(p['bytes'])}, busbw {p['busbw']:.4g} GB/s, algbw {p['algbw']:.4g} GB/s",
            )
        plot.add_legend(name, c, marker="circle")
    return plot.render()


def latency(ident: str, points: list[dict[str, Any]]) -> str:
    """AllReduce p50 (solid) and p99 (dashed) latency against message size (log-log)."""
    series = _allreduce_series(points)
    x_lo, x_hi = data_range([p["bytes"] for p in points], log=True)
    times = [p["p50_s"] * 1e6 for p in points] + [p["p99_s"] * 1e6 for p in points if p["p99_s"]]
    y_lo, y_hi = data_range(times, log=True)
    plot = Plot(
        ident,
        "AllReduce latency",
        Axis("message size per rank", x_lo, x_hi, log=True, fmt=fmt_bytes),
        Axis("latency (µs)", y_lo, y_hi, log=True),
        width=600,
        legend_width=210,
    )
    for i, (name, items) in enumerate(series.items()):
        c = color(i)
        plot.line([p["bytes"] for p in items], [p["p50_s"] * 1e6 for p in items], c, tip=f"{name} p50")
        tail = [p for p in items if p["p99_s"]]
        if tail:
            plot.line([p["bytes"] for p in tail], [p["p99_s"] * 1e6 for p in tail], c, tip=f"{name} p99", dash="5 3")
        for p in items:
            p99 = f", p99 {p['p99_s'] * 1e6:.4g} µs" if p["p99_s"] else ""
            plot.point(
                p["bytes"], p["p50_s"] * 1e6, c, f"{name}: {fmt_bytes(p['bytes'])}, p50 {p['p50_s'] * 1e6:.4g} µs{p99}"
            )
        plot.add_legend(name, c, marker="circle")
    plot.add_legend("solid p50, dashed p99", "#666", dash="5 3")
    return plot.render()
