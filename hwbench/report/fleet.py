"""The report's fleet section: per case the figure of every node's device, outliers marked, with
the stragglers and the software differences (:mod:`hwbench.decide.fleet` finds them).

Shown when the files come from more than one host and at least one case ran on two or more
of them (files of unrelated machines are compared by the other sections, not as a fleet).
Every text from the files (hosts, devices, reasons, software versions) is made printable
(:func:`hwbench.core.text.printable`) as well as HTML-escaped: the page carries no control
character a terminal showing it would obey.
"""

from __future__ import annotations

import re
from typing import Any, cast

from hwbench.core.results_types import Document
from hwbench.core.text import printable
from hwbench.decide.fleet import analyze
from hwbench.report.data import Run, shape_text
from hwbench.report.html import fmt, no_data, note, pair, table
from hwbench.report.svg import PALETTE, Axis, Plot, data_range

#: Cases drawn (those with outliers or failures first); the rest are in the table of cases.
MAX_CHARTS = 12
#: Below this many members each one is named on the x axis.
NAMED_MEMBERS = 8
#: The y axis of each figure.
AXES = {"busbw_gbps": "busbw (GB/s)", "calls_per_s": "calls per second (1 / median)"}
OUTLIER, MEMBER = PALETTE[1], PALETTE[0]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _title(case: dict[str, Any]) -> str:
    return (
        f"{case['kernel']} {case['impl']} {case['dtype'] or ''} {shape_text(case['shape'])} · "
        f"{case['device']} ({case['backend']})"
    )


def _printable(value: Any) -> Any:
    """``value`` (a fleet document or part of one) with every string made printable."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    return value


def _nodes(case: dict[str, Any]) -> set[str]:
    return {m["node"] for m in case["members"]} | {f["node"] for f in case["failed"]}


def chart(ident: str, case: dict[str, Any]) -> str:
    """Every member's figure, lowest first, outliers marked; the median and the outlier threshold as lines."""
    flagged = {(o["node"], o["device_index"]) for o in case["outliers"]}
    members = sorted(case["members"], key=lambda m: m["value"])
    n = len(members)
    values = [m["value"] for m in members] + [case["threshold"] or case["median"]]
    lo, hi = data_range(values, log=False, include_zero=False)
    one_each = len({m["node"] for m in members}) == n
    names = [m["node"] if one_each else f"{m['node']}:{m['device_index']}" for m in members]
    ticks = list(enumerate(names)) if n <= NAMED_MEMBERS else None
    plot = Plot(
        ident,
        _title(case),
        Axis(f"{n} devices, lowest first" if ticks is None else "", -0.5, n - 0.5, ticks=ticks or [(0, "")]),
        Axis(AXES.get(case["metric"], case["unit"]), lo, hi),
        width=640,
        height=340 if ticks is None else 380,
        legend_width=150,
    )
    plot.line([-0.5, n - 0.5], [case["median"]] * 2, "#333", tip=f"median {case['median']:.4g} {case['unit']}", width=1)
    if case["threshold"] is not None:
        tip = f"outlier threshold {case['threshold']:.4g} {case['unit']}"
        plot.line([-0.5, n - 0.5], [case["threshold"]] * 2, OUTLIER, tip=tip, dash="5 3", width=1)
    if any(o["side"] == "above" for o in case["outliers"]):  # a figure too high to believe: its threshold too
        tip = f"upper outlier threshold {case['upper_threshold']:.4g} {case['unit']}"
        plot.line([-0.5, n - 0.5], [case["upper_threshold"]] * 2, OUTLIER, tip=tip, dash="5 3", width=1)
    for i, m in enumerate(members):
        bad = (m["node"], m["device_index"]) in flagged
        vs = 100.0 * (m["value"] / case["median"] - 1) if case["median"] else 0.0
        tip = (
            f"{m['node']} {case['backend']}:{m['device_index']}: {m['value']:.4g} {case['unit']} ({vs:+.1f}% vs median)"
        )
        plot.point(
            i, m["value"], OUTLIER if bad else MEMBER, tip + (" OUTLIER" if bad else ""), "diamond" if bad else "circle"
        )
    plot.add_legend("device", MEMBER, marker="circle")
    plot.add_legend("outlier", OUTLIER, marker="diamond")
    plot.add_legend("median", "#333")
    plot.add_legend("threshold", OUTLIER, dash="5 3")
    return plot.render()


def _numbers(case: dict[str, Any]) -> str:
    flagged = {(o["node"], o["device_index"]) for o in case["outliers"]}
    members = sorted(case["members"], key=lambda m: m["value"])
    rows = [
        [
            m["node"],
            f"{case['backend']}:{m['device_index']}",
            fmt(m["value"]),
            fmt(100.0 * (m["value"] / case["median"] - 1) if case["median"] else None, "+.1f", "%"),
            "outlier" if (m["node"], m["device_index"]) in flagged else "",
        ]
        for m in members
    ]
    rows += [
        [f["node"], f"{case['backend']}:{f['device_index']}", "–", "–", f"{f['status']}: {f['reason']}"]
        for f in case["failed"]
    ]
    bad = [r[4] != "" for r in rows]
    return table(["node", "device", case["unit"], "vs median", ""], rows, numeric=(2, 3), bad=bad)


def _findings(doc: dict[str, Any]) -> list[str]:
    parts = []
    if doc["stragglers"]:
        rows = [
            [
                s["file"],
                s["rank"],
                s["rank_host"] or "?",
                s["rank_device"] or "?",
                fmt(s["worst_above_pct"], ".1f", "%"),
                f"{s['slow_records']} of {s['records']}",
            ]
            for s in doc["stragglers"]
        ]
        parts.append("<h3>AllReduce stragglers</h3>")
        parts.append(
            table(["file", "rank", "host", "device", "median above the ranks'", "slow records"], rows, numeric=(1, 4))
        )
    if doc["software"]:
        rows = [
            [
                f["field"],
                f["majority"] or "no majority",
                ", ".join(f"{o['node']} ({o['value']})" for o in f["outliers"])
                or ", ".join(f"{v} ({n})" for v, n in f["values"].items()),
            ]
            for f in doc["software"]
        ]
        parts.append("<h3>Software stack</h3>")
        parts.append(table(["field", "majority", "differs on"], rows, bad=[True] * len(rows)))
    return parts


def section(runs: list[Run]) -> dict[str, str]:
    """``{"fleet": html}`` when the runs form a fleet (two or more hosts sharing a case), else ``{}``."""
    if len({run.host for run in runs}) < 2:
        return {}
    try:
        doc = _printable(analyze([(run.path, cast(Document, run.doc)) for run in runs]))  # each by results.load
    except (KeyError, TypeError, AttributeError) as exc:
        why = printable(f"{exc.__class__.__name__}: {exc}")
        return {"fleet": no_data(f"the files cannot be compared as a fleet ({why})")}
    shared = [c for c in doc["cases"] if len(_nodes(c)) >= 2]
    if not shared:
        return {}
    s, rule = doc["summary"], doc["rule"]
    parts = [
        note(
            f"{s['nodes']} nodes, {len(shared)} cases run on two or more: {s['outliers']} outlier(s), "
            f"{s['failed']} failed, {s['stragglers']} straggler(s), {s['software_outliers']} software "
            f"difference(s); flagged: {', '.join(s['outlier_nodes']) or 'none'}"
        ),
        note(
            f"outlier: off the median, below or above, by more than {rule['mad_k']:g} x 1.4826 MAD (at least "
            f"{rule['min_spread_pct']:g} % of the median) and by more than {rule['below_pct']:g} %"
        ),
    ]
    drawn = [c for c in shared if c["members"]][:MAX_CHARTS]
    for i, case in enumerate(drawn):
        parts.append(pair(chart(f"fleet-{i}-{_slug(case['kernel'] + case['impl'])}", case), _numbers(case)))
    if len(shared) > len(drawn):
        parts.append(note(f"{len(shared) - len(drawn)} more case(s) without a chart: `hwbench fleet` lists them all"))
    parts += _findings(doc)
    return {"fleet": "\n".join(parts)}
