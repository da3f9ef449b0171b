"""The report's sections after the summary: roofline, overhead, portability, AllReduce, parity, compile."""

from __future__ import annotations

import json
import re
from statistics import median
from typing import Any

from hwbench.decide.catalog import Catalog
from hwbench.report import charts
from hwbench.report.cascade import cascades
from hwbench.report.data import (
    Row,
    Run,
    allreduce_points,
    mem_gbps,
    overhead_rows,
    parity_rows,
    peak_tflops,
    roofline_points,
    shape_text,
)
from hwbench.report.html import Raw, escape, fmt, no_data, note, pair, seconds, table
from hwbench.report.svg import fmt_bytes
from hwbench.results.roofs import achievable, device_roofs, missing_roof_hint
from hwbench.results.tables import speed


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _by_device(rows: list[Any], key: Any = lambda r: r.device) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for row in rows:
        out.setdefault(key(row), []).append(row)
    return out


def roofline(rows: list[Row], catalog: Catalog) -> str:
    """A roofline per device with a table of its points."""
    parts = []
    for device, device_rows in _by_device(rows).items():
        points = roofline_points(device_rows)
        if not points:
            continue
        records = [r.record for r in device_rows]
        dtypes = sorted({p["dtype"] for p in points})
        roofs = {d: v for d in dtypes if (v := peak_tflops(device, d, catalog, records))}
        bw, source = mem_gbps(device, catalog)
        reached = device_roofs(records)
        measured = {d: best["tflops"] for d, best in reached["compute"].items()}
        measured_gbps = reached["bandwidth"]["gbps"] if reached["bandwidth"] else None
        svg = charts.roofline(
            f"roofline-{_slug(device.label)}",
            f"Roofline: {device.label}",
            points,
            roofs,
            bw,
            measured,
            measured_gbps,
        )
        numbers = table(
            ["kernel", "impl", "dtype", "TFLOPS", "% peak", "% achievable", "flop/B", "shape"],
            [
                [
                    p["kernel"],
                    p["impl"],
                    p["dtype"],
                    fmt(p["tflops"], ".3g"),
                    fmt(p["pct_peak"], ".1f"),
                    fmt(achievable(p["record"], reached), ".1f"),
                    fmt(p["ai"], ".3g"),
                    p["shape"],
                ]
                for p in points
            ],
            numeric=(3, 4, 5, 6),
        )
        roof_note = _roof_note(bw, source, reached, dtypes)
        missing = [d for d in dtypes if d not in roofs]
        if missing:
            roof_note += f"; no peak known for {', '.join(missing)}"
        parts.append(f"<h3>{escape(device.label)}</h3>" + pair(svg, numbers, roof_note))
    if not parts:
        return no_data("no case ran with both a throughput and a byte count (no ok GEMM or attention record)")
    return note(
        "Arithmetic intensity = flops / bytes the kernel must move at least once (inputs and output). "
        "Hover a point for its case."
    ) + "\n".join(parts)


def _roof_note(bw: float | None, source: str, reached: dict[str, Any], dtypes: list[str]) -> str:
    """Which roofs are drawn, from where, and what would measure the missing ones."""
    parts = [
        f"datasheet memory roof {bw:.4g} GB/s ({source})"
        if bw
        else "datasheet memory bandwidth unknown for this device: its compute roofs are drawn flat"
    ]
    for dtype, best in sorted(reached["compute"].items()):
        parts.append(
            f"measured {dtype} roof {best['tflops']:.4g} TFLOPS ({best['kernel']} {best['impl']} "
            f"{shape_text(best['shape'])})"
        )
    if reached["bandwidth"]:
        best = reached["bandwidth"]
        where = f"{best['kernel']} {best['impl']} {best['dtype']}"
        parts.append(f"measured bandwidth roof {best['gbps']:.4g} GB/s ({where})")
    hint = missing_roof_hint(reached, dtypes)
    if hint:
        parts.append(hint)
    return "; ".join(parts)


def overhead(rows: list[Row]) -> str:
    """Porting overhead per backend and kernel: a summary table, then a chart per device."""
    found = overhead_rows(rows)
    if not found:
        return no_data("no portable case has an ok native twin on the same device, shape and dtype")
    groups = _by_device(found, key=lambda r: (r["backend"], r["kernel"], r["impl"], r["native"]))
    summary = table(
        ["backend", "kernel", "portable", "vs native", "cases", "median speed", "slowest", "fastest"],
        [
            [
                b,
                k,
                i,
                n,
                len(g),
                speed(median(x["ratio"] for x in g)),
                speed(min(x["ratio"] for x in g)),
                speed(max(x["ratio"] for x in g)),
            ]
            for (b, k, i, n), g in groups.items()
        ],
        numeric=(4, 5, 6, 7),
    )
    parts = [
        note(
            "Speed against the native = t_native / t_portable on the same device, shape and dtype: 1x is as "
            "fast as the vendor library, 0.5x half its speed, 5x five times as fast (the results files also "
            "keep the porting overhead, 1 − that ratio)."
        ),
        summary,
    ]
    for device, items in _by_device(found, key=lambda r: r["device"]).items():
        svg = charts.overhead(f"overhead-{_slug(device.label)}", f"Porting overhead: {device.label}", items)
        numbers = table(
            ["kernel", "impl", "dtype", "vs native", "overhead", "portable", "native", "shape"],
            [
                [
                    r["kernel"],
                    r["impl"],
                    r["dtype"],
                    speed(r["ratio"]),
                    fmt(r["overhead"] * 100, "+.1f", "%"),
                    seconds(r["median_s"]),
                    f"{seconds(r['native_median_s'])} ({r['native']})",
                    r["shape"],
                ]
                for r in items
            ],
            numeric=(3, 4, 5, 6),
        )
        parts.append(f"<h3>{escape(device.label)}</h3>" + pair(svg, numbers))
    return "\n".join(parts)


def portability(rows: list[Row]) -> str:
    """The cascade per kernel, with its table."""
    found = cascades(rows)
    if not found:
        return no_data("no portable implementation ran beside a native one")
    parts = [
        note(
            "Efficiency on a device = t_native / t_portable (capped at 1), harmonic mean over the cases; "
            "a failed case counts 0, a device where the implementation never ran counts 0. PP is the "
            "harmonic mean of the efficiencies over the first k devices (Pennycook), devices best first."
        )
    ]
    for kernel, items in _by_device(found, key=lambda c: c.kernel).items():
        svg = charts.cascade(f"cascade-{_slug(kernel)}", f"Performance-portability cascade: {kernel}", items)
        numbers = table(
            ["impl", "k", "device", "efficiency", "cases", "PP of first k"],
            [
                [c.impl, s.rank, s.device.label, fmt(s.efficiency, ".3f"), s.cases, fmt(s.pp, ".3f")]
                for c in items
                for s in c.steps
            ],
            numeric=(1, 3, 4, 5),
            bad=[s.efficiency == 0 for c in items for s in c.steps],
        )
        devices = max(len(c.steps) for c in items)
        caption = (
            ""
            if devices > 1
            else ("one device: PP equals its efficiency; report several results files (one per device) for a cascade")
        )
        parts.append(f"<h3>{escape(kernel)}</h3>" + pair(svg, numbers, caption))
    return "\n".join(parts)


def allreduce(rows: list[Row], runs: list[Run]) -> str:
    """AllReduce busbw and latency against message size, with the numbers."""
    points = allreduce_points(rows)
    if not points:
        reasons = sorted(
            {
                f"{r.get('backend')}: {r.get('reason')}"
                for run in runs
                for r in run.doc.get("records") or []
                if r.get("kernel") == "allreduce" and r.get("reason")
            }
        )
        why = "no AllReduce record ran" + (f" ({'; '.join(reasons)})" if reasons else " (none in these files)")
        return no_data(why)
    numbers = table(
        ["device", "impl", "dtype", "ranks", "variant", "size", "p50", "p99", "algbw GB/s", "busbw GB/s"],
        [
            [
                p["device"].label,
                p["impl"],
                p["dtype"],
                p["ranks"],
                p["variant"] or "–",
                fmt_bytes(p["bytes"]),
                seconds(p["p50_s"]),
                seconds(p["p99_s"]),
                fmt(p["algbw"]),
                fmt(p["busbw"]) + (" *" if p["derived"] else ""),
            ]
            for p in points
        ],
        numeric=(3, 5, 6, 7, 8, 9),
    )
    derived = any(p["derived"] for p in points)
    caption = "busbw = algbw · 2(ranks − 1)/ranks, algbw = message bytes / p50 time (nccl-tests)" + (
        "; * derived here from the record's size and median" if derived else ""
    )
    figures = "".join(
        f"<figure>{svg}</figure>"
        for svg in (charts.busbw("allreduce-busbw", points), charts.latency("allreduce-latency", points))
    )
    return f'<div class="pair">{figures}</div>' + note(caption) + numbers


def parity(rows: list[Row]) -> str:
    """Max errors against tolerance for every checked record, failures first."""
    found = parity_rows(rows)
    if not found:
        return no_data("no record was checked against the float64 reference")
    failed = sum(not p["passed"] for p in found)
    verdict = (
        f'<p><span class="fail">{failed} of {len(found)} failed parity</span></p>'
        if failed
        else f'<p><span class="ok">all {len(found)} checked cases within tolerance</span></p>'
    )
    body = table(
        [
            "device",
            "kernel",
            "impl",
            "dtype",
            "shape",
            "max abs err",
            "atol",
            "err/atol",
            "max rel err",
            "rtol",
            "mismatches",
            "verdict",
        ],
        [
            [
                p["device"].label,
                p["kernel"],
                p["impl"],
                p["dtype"],
                p["shape"],
                fmt(p["max_abs_err"], ".2e"),
                fmt(p["atol"], ".2e"),
                fmt(p["ratio"], ".3f"),
                fmt(p["max_rel_err"], ".2e"),
                fmt(p["rtol"], ".2e"),
                fmt(p["mismatches"]),
                Raw('<span class="ok">ok</span>' if p["passed"] else '<span class="fail">FAIL</span>')
                if not p["exact"]
                else Raw('<span class="ok">exact</span>' if p["passed"] else '<span class="fail">FAIL (exact)</span>'),
            ]
            for p in found
        ],
        numeric=(5, 6, 7, 8, 9, 10),
        bad=[not p["passed"] for p in found],
    )
    return (
        verdict
        + note(
            "A case passes when every element is within atol + rtol·|reference| (exact checks "
            "count wrong elements); a case failing parity is never timed."
        )
        + f'<div class="scroll">{body}</div>'
    )


COMPILE_COLUMNS = (
    "kernel",
    "impl",
    "target",
    "variant",
    "status",
    "registers",
    "sgprs",
    "spill_stores_bytes",
    "spill_loads_bytes",
    "vgpr_spills",
    "sgpr_spills",
    "shared_bytes",
    "private_bytes",
    "tensor_core",
    "compile_s",
    "reason",
)
HIDDEN = ("config", "assembler", "language", "vendor", "dtype", "spilled")


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return fmt(value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items()) or "none"
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, list) else str(value)
    return text if len(text) <= 160 else text[:159] + "…"


def compile_section(runs: list[Run]) -> str:
    """The compile-only records of each run (registers, spills, shared memory, tensor-core use)."""
    parts = []
    for run in runs:
        section = run.doc.get("compile")
        items = section.get("records") if isinstance(section, dict) else section
        items = [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
        if not items:
            continue
        seen = list(dict.fromkeys(k for i in items for k in i))
        columns = [c for c in COMPILE_COLUMNS if c in seen] + [
            c for c in seen if c not in COMPILE_COLUMNS and c not in HIDDEN
        ]
        title = f"<h3>{escape(run.path.name)}</h3>" if len(runs) > 1 else ""
        spilled = [bool(i.get("spilled")) or i.get("status") not in (None, "ok") for i in items]
        parts.append(
            title
            + table(
                [c.replace("_bytes", " (B)").replace("_", " ") for c in columns],
                [[_cell(i.get(c)) for c in columns] for i in items],
                numeric=[
                    j
                    for j, c in enumerate(columns)
                    if c not in ("kernel", "impl", "target", "variant", "status", "reason", "tensor_core")
                ],
                bad=spilled,
            )
        )
    if not parts:
        return no_data("no compile-only section in these files (hwbench compile writes one)")
    return note(
        "Compiled without running: what the compiler reports per kernel variant and target. Rows with "
        "spills or a failed compile are marked."
    ) + "\n".join(parts)
