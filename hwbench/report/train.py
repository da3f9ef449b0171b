"""The report's training section, for files ``hwbench train`` and ``hwbench drill`` wrote: each
run's loss curve and step times (one line per ``train`` record), and each drill's timeline
(launch, steps, checkpoints, the kill, the restart and the resume on a time axis) with its
resumed losses against the uninterrupted run's, each chart with a table of its figures."""

from __future__ import annotations

import math
from typing import Any

from hwbench.report.data import Row, Run, num, rows, sub
from hwbench.report.html import escape, fmt, no_data, note, seconds, table
from hwbench.report.svg import Axis, Plot, color, data_range, fmt_bytes

#: The timeline's rows, top to bottom; an event of another name gets a row below them.
EVENTS = ("launch", "step", "checkpoint", "kill", "restart", "resume", "done")
#: The row of the bar from the kill to the first step after resuming.
DOWN = "down (time to resume)"
KILL_COLOR, DOWN_COLOR, DIFF_COLOR = "#b3261e", "#E69F00", "#b3261e"
#: Above this many points a line is drawn without a marker per point (its tooltip names the line).
MAX_MARKERS = 120


def _numbers(value: Any) -> list[float]:
    """The finite numbers of a list (anything else as an empty list)."""
    found = [num(v) for v in value] if isinstance(value, list) else []
    return [v for v in found if v is not None]


def _label(row: Row) -> str:
    """The run's name in legends and tables: preset, impl, dtype, ranks and cache state."""
    r = row.record
    shape = sub(r, "shape")
    cache = {0: " cold", 1: " warm"}.get(shape.get("warm_cache", -1), "")
    ranks = f" ×{shape['ranks']}" if isinstance(shape.get("ranks"), int) else ""
    preset = sub(r, "train").get("preset") or sub(r, "drill").get("preset") or ""
    return f"{preset} {r.get('impl')} {r.get('dtype') or ''}{ranks}{cache}".strip()


def _found(runs: list[Run], kernel: str) -> list[tuple[str, Row]]:
    """``(label, row)`` of every record of ``kernel`` with its section (``train`` or ``drill``); the
    label names the device where the records are on several."""
    found = [row for row in rows(runs) if row.record.get("kernel") == kernel and sub(row.record, kernel)]
    several = len({row.device.label for row in found}) > 1
    return [(_label(row) + (f" · {row.device.label}" if several else ""), row) for row in found]


def train_sections(runs: list[Run]) -> dict[str, str]:
    """The report's ``train`` section where a file of ``runs`` has train or drill records; none elsewhere."""
    trains, drills = _found(runs, "train"), _found(runs, "drill")
    return {"train": train_section(trains, drills)} if trains or drills else {}


def _step_axis(steps: int) -> Axis:
    """The step axis from 0 to half a step past ``steps`` (the last marker whole), ticks on whole
    steps of 1, 2 or 5 times a power of ten."""
    raw = max(steps, 1) / 5
    magnitude = 10 ** math.floor(math.log10(max(raw, 1.0)))
    every = next(int(f * magnitude) for f in (1, 2, 5, 10) if raw <= f * magnitude)
    ticks = [(float(k), str(k)) for k in range(0, steps + 1, every)]
    return Axis("step", 0.0, steps + 0.5, ticks=ticks)


def _value_range(values: list[float], log: bool) -> tuple[float, float]:
    """Axis limits with a little room above and below the values (the extreme markers whole)."""
    finite = [v for v in values if v > 0 or not log]
    if not finite:
        return data_range([], log=log)
    lo, hi = min(finite), max(finite)
    if log:
        return data_range([lo / 1.2, hi * 1.2], log=True)
    room = 0.04 * ((hi - lo) or abs(hi) or 1.0)
    return data_range([lo - room, hi + room], log=False)


def _figures(*svgs: str) -> str:
    """Charts side by side."""
    return '<div class="pair">' + "".join(f"<figure>{svg}</figure>" for svg in svgs) + "</div>"


def _series_chart(ident: str, title: str, axis: str, lines: list[tuple[str, list[float]]], log: bool) -> str:
    """One line per (label, values) against the step (1, 2, ...)."""
    values = [v for _, ys in lines for v in ys]
    steps = max(len(ys) for _, ys in lines)
    y_lo, y_hi = _value_range(values, log)
    plot = Plot(ident, title, _step_axis(steps), Axis(axis, y_lo, y_hi, log=log), width=640, legend_width=220)
    for i, (label, ys) in enumerate(lines):
        c, xs = color(i), list(range(1, len(ys) + 1))
        plot.line(xs, ys, c, tip=label)
        if len(ys) <= MAX_MARKERS:
            for x, y in zip(xs, ys, strict=True):
                plot.point(x, y, c, f"{label}: step {x}, {y:.5g} {axis}")
        plot.add_legend(label, c)
    return plot.render()


def _train_row(label: str, row: Row) -> list[Any]:
    record = row.record
    train, m = sub(record, "train"), sub(record, "metrics")
    first, last = num(train.get("loss_first")), num(train.get("loss_last"))
    ratio, margin = num(train.get("loss_ratio")), num(train.get("loss_margin"))
    memory = num(train.get("peak_memory_bytes"))
    return [
        label,
        row.device.label,
        record.get("status") or "–",
        seconds(num(train.get("submit_to_first_step_s"))),
        train.get("submit_source") or "–",
        fmt(num(train.get("tokens_per_s")), ".4g"),
        fmt(num(m.get("pct_peak")), ".1f", " %"),
        fmt(num(train.get("pct_gemm_roof")), ".1f", " %"),
        f"{fmt(first, '.4g')} → {fmt(last, '.4g')} ({fmt(ratio, '.3g')} ≤ {fmt(margin, '.3g')})",
        fmt_bytes(memory) if memory is not None else "–",
        fmt(num(train.get("scaling_efficiency")), ".3g"),
        record.get("reason") or "",
    ]


def _trains(trains: list[tuple[str, Row]]) -> list[str]:
    """The loss and step-time charts of the train records, then their table."""
    losses = [(label, _numbers(sub(row.record, "train").get("losses"))) for label, row in trains]
    losses = [(label, ys) for label, ys in losses if ys]
    steps = [(label, _numbers(sub(row.record, "train").get("step_s"))) for label, row in trains]
    steps = [(label, ys) for label, ys in steps if ys]
    headers = ["run", "device", "status", "submit → first step", "submit time from", "tokens/s", "MFU", "% GEMM roof"]
    headers += ["loss first → last (ratio ≤ margin)", "peak memory", "scaling efficiency", "reason"]
    numbers = table(
        headers,
        [_train_row(label, row) for label, row in trains],
        numeric=(3, 5, 6, 7, 10),
        bad=[row.record.get("status") != "ok" for _, row in trains],
    )
    charts = []
    if losses:
        charts.append(_series_chart("train-loss", "Training loss", "loss", losses, log=False))
    if steps:
        charts.append(_series_chart("train-step", "Step time (the first step included)", "s", steps, log=True))
    if not charts:
        return [no_data("the train records have no losses or step times"), numbers]
    return [_figures(*charts), f'<div class="scroll">{numbers}</div>']


def _events(drill: dict[str, Any]) -> list[tuple[float, str, Any, Any]]:
    """``(t_s, event, step, rank)`` of the timeline's events that have a time."""
    timeline = drill.get("timeline")
    out = []
    for event in timeline if isinstance(timeline, list) else []:
        t = num(event.get("t_s")) if isinstance(event, dict) else None
        if t is not None:
            out.append((t, str(event.get("event")), event.get("step"), event.get("rank")))
    return out


def timeline(ident: str, title: str, drill: dict[str, Any]) -> str:
    """The drill's events on a time axis, a row per kind of event, and the bar from the kill to the
    first step completed after resuming."""
    events = _events(drill)
    kinds = [*EVENTS, *dict.fromkeys(e[1] for e in events if e[1] not in EVENTS)]
    kill = next((t for t, kind, _, _ in events if kind == "kill"), None)
    resume = num(drill.get("time_to_resume_s"))
    names = [*kinds, DOWN] if kill is not None and resume is not None else kinds
    row = {kind: len(names) - 1 - i for i, kind in enumerate(names)}
    ends = [t for t, *_ in events] + ([kill + resume] if kill is not None and resume is not None else [])
    x_lo, x_hi = data_range([0.0, *ends], log=False, include_zero=True)
    plot = Plot(
        ident,
        title,
        Axis("seconds since the launch", x_lo, x_hi),
        Axis("", -0.6, len(names) - 0.4, ticks=[(y, kind) for kind, y in row.items()]),
        height=max(240, 90 + 26 * len(names)),
        margin_left=150,
        legend_width=0,
    )
    if kill is not None and resume is not None:
        y = row[DOWN]
        tip = f"time to resume: {resume:.4g} s from the kill at {kill:.4g} s to the first step after resuming"
        plot.bar(kill, y - 0.3, kill + resume, y + 0.3, DOWN_COLOR, tip)
        plot.line([kill, kill], [-0.6, len(names) - 0.4], KILL_COLOR, tip=f"kill at {kill:.4g} s", dash="4 3", width=1)
    for t, kind, step, rank in events:
        where = "".join([f", step {step}" if step is not None else "", f", rank {rank}" if rank is not None else ""])
        hue = KILL_COLOR if kind == "kill" else color(EVENTS.index(kind) if kind in EVENTS else len(EVENTS))
        plot.point(t, row[kind], hue, f"{kind} at {t:.4g} s{where}", marker="diamond" if kind == "kill" else "circle")
    return plot.render()


def drill_losses(ident: str, title: str, drill: dict[str, Any], rtol: float) -> str:
    """The resumed run's losses (solid) against the uninterrupted run's (dashed); a red diamond
    where they differ by more than ``rtol`` (0: any difference)."""
    resumed, reference = _numbers(drill.get("losses")), _numbers(drill.get("reference_losses"))
    y_lo, y_hi = _value_range([*resumed, *reference], log=False)
    steps = max(len(resumed), len(reference))
    plot = Plot(ident, title, _step_axis(steps), Axis("loss", y_lo, y_hi), width=560, legend_width=160)
    if reference:
        plot.line(range(1, len(reference) + 1), reference, "#7F7F7F", tip="uninterrupted run", dash="6 3")
        plot.add_legend("uninterrupted run", "#7F7F7F", dash="6 3")
    if resumed:
        plot.line(range(1, len(resumed) + 1), resumed, color(0), tip="resumed run")
        plot.add_legend("resumed run", color(0))
    differ = False
    for step, (a, b) in enumerate(zip(resumed, reference, strict=False), 1):
        if abs(a - b) > rtol * abs(b):
            differ = True
            plot.point(step, a, DIFF_COLOR, f"step {step}: resumed {a:.7g}, uninterrupted {b:.7g}", "diamond")
        elif len(resumed) <= MAX_MARKERS:
            plot.point(step, a, color(0), f"step {step}: {a:.7g} (the uninterrupted run's too)")
    if differ:
        plot.add_legend("differs", DIFF_COLOR, marker="diamond")
    return plot.render()


def _drill_row(label: str, row: Row) -> list[Any]:
    record = row.record
    drill, parity = sub(record, "drill"), sub(record, "parity")
    compared = f"{fmt(parity.get('mismatches'), 'd')} of {fmt(parity.get('elements'), 'd')} differ"
    return [
        label,
        row.device.label,
        record.get("status") or "–",
        drill.get("launcher") or "–",
        f"step {fmt(drill.get('kill_step'), 'd')}, rank {fmt(drill.get('killed_rank'), 'd')}",
        fmt(drill.get("last_step_before_kill"), "d"),
        fmt(drill.get("resumed_from_step"), "d"),
        f"{fmt(drill.get('steps_lost'), 'd')} (checkpoint every {fmt(drill.get('checkpoint_every'), 'd')})",
        fmt(drill.get("restarts"), "d"),
        seconds(num(drill.get("detect_s"))),
        seconds(num(drill.get("time_to_resume_s"))),
        seconds(num(drill.get("checkpoint_s"))),
        compared + (" (exact)" if parity.get("exact") else f" (rtol {fmt(num(parity.get('rtol')), '.3g')})"),
        record.get("reason") or "",
    ]


def _drills(drills: list[tuple[str, Row]]) -> list[str]:
    headers = ["drill", "device", "status", "launcher", "killed at", "last step before", "resumed from", "steps lost"]
    headers += ["restarts", "detected", "time to resume", "checkpoint save", "losses", "reason"]
    parts = [
        table(
            headers,
            [_drill_row(label, row) for label, row in drills],
            numeric=(5, 6, 8, 9, 10, 11),
            bad=[row.record.get("status") != "ok" for _, row in drills],
        )
    ]
    for i, (label, row) in enumerate(drills):
        drill = sub(row.record, "drill")
        parts.append(f"<h3>Drill: {escape(label)}</h3>")
        charts = [timeline(f"drill-timeline-{i}", "Drill timeline", drill)] if _events(drill) else []
        if _numbers(drill.get("losses")) or _numbers(drill.get("reference_losses")):
            rtol = num(sub(row.record, "parity").get("rtol")) or 0.0
            charts.append(drill_losses(f"drill-losses-{i}", "Resumed against uninterrupted", drill, rtol))
        if not _events(drill):
            parts.append(no_data("the drill record has no timeline"))
        if charts:
            parts.append(_figures(*charts))
    return parts


def train_section(trains: list[tuple[str, Row]], drills: list[tuple[str, Row]]) -> str:
    """Loss curves, step times and a table of the train records; each drill's timeline and losses."""
    parts = []
    if trains:
        parts.append(
            note(
                "Each training run (hwbench train): the loss per optimizer step and each step's seconds, the first "
                "step (compilation included) too. Submit → first step is the score's time to first step; MFU is "
                "the model FLOPs per second in % of the device's peak for the dtype."
            )
        )
        parts += _trains(trains)
    if drills:
        parts.append(
            note(
                "Each drill (hwbench drill): one rank SIGKILLed at a seeded step, restarted by its launcher, resumed "
                "from the last checkpoint. Time to resume (the kill to the end of the first step after resuming) is "
                "the score's recovery figure; the resumed losses are compared with an uninterrupted run of the same "
                "seed."
            )
        )
        parts += _drills(drills)
    return "\n".join(parts)
