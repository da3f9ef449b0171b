"""The report's burn section: throughput and clock over time for every device burned (the
mismatches marked where they were found), and each burn's figures: checks, decay, clock, throttling."""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median
from typing import Any, cast

from hwbench.core.burn_types import BurnEntry
from hwbench.report.data import Run, num, shape_text
from hwbench.report.html import fmt, no_data, note, table
from hwbench.report.svg import Axis, Plot, color, data_range

#: The colour and marker of a mismatch on the throughput chart.
MISMATCH_COLOR, MISMATCH_MARKER = "#b3261e", "diamond"


def entries(runs: list[Run]) -> list[tuple[str, BurnEntry]]:
    """Every burn entry of ``runs``, with the label it is drawn under (the file's name too when several)."""
    found: list[tuple[str, BurnEntry]] = []
    for run in runs:
        section = run.doc.get("burn")
        for item in section if isinstance(section, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("series"), list):
                continue
            label = f"{item.get('backend')}:{item.get('device_index')} {item.get('kernel')}"
            found.append((label + (f" · {run.path.name}" if len(runs) > 1 else ""), cast(BurnEntry, item)))
    return found


def _points(entry: BurnEntry, key: str) -> list[tuple[float, float]]:
    out = []
    for point in entry["series"]:
        t, value = num(point.get("t_s") if isinstance(point, dict) else None), None
        if isinstance(point, dict):
            value = num(point.get(key))
        if t is not None and value is not None:
            out.append((t, value))
    return out


def _rate_key(entry: BurnEntry) -> str:
    return "gbps" if any(isinstance(p, dict) and num(p.get("gbps")) for p in entry["series"]) else "tflops"


def _mark_mismatches(plot: Plot, label: str, entry: BurnEntry, line: list[tuple[float, float]]) -> None:
    """A marker on ``line`` at each mismatch's time (at the value of the interval it fell in)."""
    for m in entry.get("mismatches") or []:
        t = num(m.get("t_s")) if isinstance(m, dict) else None
        if t is None or not line:
            continue
        y = next((v for end, v in line if end >= t), line[-1][1])
        tip = f"{label}: mismatch at iteration {m.get('iteration')} ({t:.3g} s): {m.get('count')} element(s) wrong"
        plot.point(t, y, MISMATCH_COLOR, tip, marker=MISMATCH_MARKER)


def chart(ident: str, title: str, unit: str, key: str, items: Sequence[tuple[int, str, BurnEntry]]) -> str:
    """``key`` of each entry's series over time, one line per entry; mismatches marked on rate charts."""
    lines = {label: _points(entry, key) for _, label, entry in items}
    values = [v for line in lines.values() for _, v in line]
    times = [t for line in lines.values() for t, _ in line]
    x_lo, x_hi = data_range([0.0, *times], log=False, include_zero=True)
    y_lo, y_hi = data_range([*values, 1.05 * max(values, default=0.0)], log=False, include_zero=True)  # headroom
    plot = Plot(ident, title, Axis("time since the start (s)", x_lo, x_hi), Axis(unit, y_lo, y_hi), width=640)
    marked = False
    for i, label, entry in items:
        line = lines[label]
        if not line:
            continue
        c = color(i)
        plot.line([t for t, _ in line], [v for _, v in line], c, tip=label)
        for t, v in line:
            plot.point(t, v, c, f"{label}: {v:.4g} {unit} at {t:.4g} s")
        plot.add_legend(label, c, marker="circle")
        if key != "clock_mhz" and entry.get("mismatches"):
            _mark_mismatches(plot, label, entry, line)
            marked = True
    if marked:
        plot.add_legend("mismatch", MISMATCH_COLOR, marker=MISMATCH_MARKER)
    return plot.render()


def _row(label: str, entry: BurnEntry) -> list[Any]:
    key = _rate_key(entry)
    rates = [v for _, v in _points(entry, key)]
    unit = "GB/s" if key == "gbps" else "TFLOPS"
    reasons = entry.get("throttle_reasons") or []
    flag = entry.get("throttled")
    throttled = "yes" if flag is True else "no" if flag is False else "–"
    return [
        label,
        entry.get("device") or "–",
        f"{entry.get('impl') or '?'} {entry.get('dtype') or '?'} {shape_text(entry.get('shape'))}",
        entry.get("check") or "–",
        entry.get("status") or "–",
        f"{fmt(entry.get('elapsed_s'), '.4g')} / {fmt(entry.get('duration_s'), '.4g')} s",
        fmt(entry.get("iterations"), "d"),
        fmt(entry.get("checks"), "d"),
        fmt(entry.get("mismatched_checks", len(entry.get("mismatches") or [])), "d"),
        f"{median(rates):.4g} {unit}" if rates else "–",
        f"{fmt(entry.get('decay_pct'), '.1f', ' %')} ({fmt(entry.get('decay_window_s'), '.3g', ' s')} windows)",
        f"{fmt(entry.get('clock_first_mhz'), '.0f')} → {fmt(entry.get('clock_last_mhz'), '.0f')} MHz",
        throttled + (f": {'; '.join(str(r) for r in reasons)}" if reasons else ""),
        entry.get("reason") or "",
    ]


def burn_sections(runs: list[Run]) -> dict[str, str]:
    """The report's ``burn`` section where a file of ``runs`` has burns; none where none does."""
    return {"burn": burn_section(runs)} if entries(runs) else {}


def burn_section(runs: list[Run]) -> str:
    """Throughput and clock over time for every burn in ``runs``, and a table of their figures."""
    found = entries(runs)
    if not found:
        return no_data("no burn section in these files (hwbench burn writes one)")
    items = [(i, label, entry) for i, (label, entry) in enumerate(found)]
    parts = [
        note(
            "Each device under sustained load: throughput per interval over its wall time, and the clock the "
            "sensors read. Decay compares the median of the last window with the first; a red diamond is a "
            "check that found wrong results."
        )
    ]
    gemm = [item for item in items if _rate_key(item[2]) == "tflops"]
    stream = [item for item in items if _rate_key(item[2]) == "gbps"]
    if gemm:
        parts.append(chart("burn-tflops", "Throughput over time", "TFLOPS", "tflops", gemm))
    if stream:
        parts.append(chart("burn-gbps", "Memory bandwidth over time", "GB/s", "gbps", stream))
    clocked = [item for item in items if _points(item[2], "clock_mhz")]
    if clocked:
        parts.append(chart("burn-clock", "Clock over time", "MHz", "clock_mhz", clocked))
    else:
        parts.append(note("No clock was readable on these devices."))
    headers = ["burn", "device", "what", "check", "status", "elapsed / asked", "iterations", "checks", "wrong"]
    headers += ["median", "decay", "clock first → last", "throttled", "reason"]
    rows = [_row(label, entry) for label, entry in found]
    bad = [entry.get("status") not in ("ok", None) for _, entry in found]
    parts.append(f'<div class="scroll">{table(headers, rows, numeric=[6, 7, 8, 9], bad=bad)}</div>')
    return "\n".join(parts)
