"""Merge results from many nodes: per case the distribution across the fleet and its outlier nodes.

Give results files or folders (a folder means its *.json results files; other JSON documents
in it, such as a fleet or check document, are passed over with a note). A node is a host: its
files are merged. Per case (kernel, impl, backend, device model, dtype, shape): median, MAD,
min, max and n across the fleet's devices, and the outliers: below the median by more than
--mad-k robust standard deviations (1.4826 x MAD, at least 0.5 % of the median; default 3.5)
and by more than --below-pct percent (default 5). Also: devices whose case failed, AllReduce
stragglers (a rank whose median is well above the others', from timing.rank_p50_s), and nodes
whose software stack (hwbench, kernel, Python packages, BLAS, drivers, runtimes, settings)
differs from the majority. Exit status: 0, or 1 with --fail-on-outlier when anything is found;
2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hwbench.cli.options import check_out, print_document
from hwbench.core.errors import UserError
from hwbench.core.text import MAX_RESULTS_BYTES, aligned, read_regular_text
from hwbench.decide.fleet import DEFAULT_BELOW_PCT, DEFAULT_MAD_K, MIN_SPREAD_PCT, analyze, finite_rule
from hwbench.results import files as results

_orjson: Any
try:  # a faster writer: 256 nodes' document is megabytes, which json's indenting encoder takes a second for
    import orjson as _orjson
except ImportError:  # json writes it, slower
    _orjson = None

HELP = "merge many nodes' results: distribution per case, outlier nodes, stragglers, software differences"
EXIT_OUTLIER = 1
#: Names listed in one line before "and N more".
LISTED = 6


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench fleet``."""
    parser.add_argument("paths", type=Path, nargs="+", metavar="FILE_OR_DIR", help="results files, or folders of them")
    parser.add_argument(
        "--mad-k",
        type=float,
        default=DEFAULT_MAD_K,
        help=f"an outlier is this many robust standard deviations (1.4826 x MAD) below the median "
        f"(default {DEFAULT_MAD_K:g}; 0: the percentage alone)",
    )
    parser.add_argument(
        "--below-pct",
        type=float,
        default=DEFAULT_BELOW_PCT,
        help=f"... and more than this percentage below it (default {DEFAULT_BELOW_PCT:g}; 0: the MAD rule alone)",
    )
    parser.add_argument(
        "--fail-on-outlier",
        action="store_true",
        help="exit 1 when an outlier, a failed case, a straggler or a software difference is found",
    )
    parser.add_argument("--json", action="store_true", help="print the fleet document as JSON instead of the table")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="also write the fleet document (JSON) to this new file (never overwritten; '-': stdout, "
        "the table then on stderr)",
    )


def _other_document(path: Path) -> bool:
    """Whether ``path`` holds a JSON document that is not a results file (hwbench's other outputs)."""
    try:
        doc = results.parse(read_regular_text(path, MAX_RESULTS_BYTES, "results file"))
    except (UserError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("kind") != results.KIND


def load_all(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every results file named or in a named folder, loaded and checked (UserError on a bad one)."""
    runs = []
    for path in paths:
        if not path.is_dir():
            runs.append((path, results.load(path)))
            continue
        found = sorted(p for p in path.glob("*.json") if p.is_file())
        if not found:
            raise UserError(f"{path} holds no *.json results file; give files or a folder of them")
        for item in found:
            try:
                runs.append((item, results.load(item)))
            except UserError:
                if not _other_document(item):
                    raise
                print(f"hwbench: note: {item} is not a results file; passed over", file=sys.stderr)
    if not runs:
        raise UserError("no results file among the paths given")
    return runs


def dumps(doc: dict[str, Any]) -> str:
    """The fleet document as indented JSON (orjson where installed: the same document)."""
    if _orjson is not None:
        return str(_orjson.dumps(doc, option=_orjson.OPT_INDENT_2).decode())
    return json.dumps(doc, indent=1)


def _names(items: list[str]) -> str:
    more = f" and {len(items) - LISTED} more" if len(items) > LISTED else ""
    return ", ".join(items[:LISTED]) + more


def _case(c: dict[str, Any]) -> str:
    shape = ",".join(f"{k}={v}" for k, v in c["shape"].items()) or "-"
    return f"{c['backend']} {c['device']} {c['kernel']} {c['impl']} {c['dtype'] or '-'} {shape}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


#: Columns of the case table aligned right.
NUMBERS = frozenset({"n", "median", "MAD", "min", "max", "out"})


def table(rows: list[tuple[str, ...]], headers: tuple[str, ...]) -> str:
    """Rows aligned under headers, numbers right-aligned. Not hwbench.results.tables': importing
    the run table's kernels costs a third of a second of the fleet's budget."""
    return aligned(rows, headers, NUMBERS)


def _case_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            c["backend"],
            str(c["device"]),
            c["kernel"],
            c["impl"],
            c["dtype"] or "-",
            ",".join(f"{k}={v}" for k, v in c["shape"].items()) or "-",
            str(c["n"]),
            _num(c["median"]),
            _num(c["mad"]),
            _num(c["min"]),
            _num(c["max"]),
            c["unit"],
            str(len(c["outliers"]) + len(c["failed"])) if c["outliers"] or c["failed"] else "",
        )
        for c in doc["cases"]
    ]


def _findings(doc: dict[str, Any]) -> list[str]:
    lines = []
    for c in doc["cases"]:
        for o in c["outliers"]:
            lines.append(
                f"outlier: {o['node']} {c['backend']}:{o['device_index']} {_case(c)}: {o['value']:.4g} {c['unit']}, "
                f"{o['below_pct']:.1f}% below the median {c['median']:.4g} (robust z {o['robust_z']:.1f})"
            )
        for f in c["failed"]:
            lines.append(
                f"failed: {f['node']} {c['backend']}:{f['device_index']} {_case(c)}: {f['status']}: {f['reason']}"
            )
        if c["absent"]:
            lines.append(f"absent: {_case(c)} on {len(c['absent'])} node(s): {_names(c['absent'])}")
    for s in doc["stragglers"]:
        worst = s["worst"]
        lines.append(
            f"straggler: {s['file']} rank {s['rank']} (host {s['rank_host'] or '?'}, {s['rank_device'] or '?'}): "
            f"median {s['worst_above_pct']:.1f}% above the other ranks' ({worst['impl']} {worst['shape']}), "
            f"slow in {s['slow_records']} of {s['records']} AllReduce records"
        )
    for f in doc["software"]:
        if f["split"]:
            values = ", ".join(f"{v} ({n})" for v, n in f["values"].items())
            lines.append(f"software: {f['field']} has no majority: {values}")
        else:
            odd = [f"{o['node']} ({o['value']})" for o in f["outliers"]]
            lines.append(f"software: {f['field']} is {f['majority']} on most nodes; differs on {_names(odd)}")
    return lines


def render(doc: dict[str, Any]) -> str:
    """The table of cases, then outliers, failures, stragglers, software differences and the summary."""
    headers = (
        "backend",
        "device",
        "kernel",
        "impl",
        "dtype",
        "shape",
        "n",
        "median",
        "MAD",
        "min",
        "max",
        "unit",
        "out",
    )
    rows = _case_rows(doc)
    lines = [table(rows, headers) if rows else "no case with a device in these files", "", *_findings(doc)]
    rule, s = doc["rule"], doc["summary"]
    lines.append(
        f"outlier: below the median by more than {rule['mad_k']:g} x 1.4826 MAD (at least {MIN_SPREAD_PCT:g} % "
        f"of the median) and by more than {rule['below_pct']:g} %; {rule['min_members']}+ devices per case"
    )
    nodes = f": {_names(s['outlier_nodes'])}" if s["outlier_nodes"] else ""
    split = f", {s['software_split']} split field(s)" if s["software_split"] else ""
    lines.append(
        f"fleet: {s['nodes']} node(s), {s['files']} file(s), {s['cases']} case(s); {s['outliers']} outlier(s), "
        f"{s['failed']} failed, {s['stragglers']} straggler(s), {s['software_outliers']} software difference(s)"
        f"{split}; "
        f"{len(s['outlier_nodes'])} node(s) flagged{nodes}"
    )
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    """Analyse the fleet; 1 when --fail-on-outlier finds anything, 2 on bad input, else 0."""
    rule = finite_rule(args.mad_k, args.below_pct)
    if isinstance(rule, str):
        raise UserError(rule)
    check_out(args.out)
    doc = analyze(load_all(args.paths), rule)
    text = dumps(doc) if args.out or args.json else ""  # 256 nodes: megabytes, made only when asked
    print_document(text, render(doc), args.out, args.json, "fleet document")
    if args.fail_on_outlier and doc["summary"]["found"]:
        print(f"hwbench: fleet: {len(doc['summary']['outlier_nodes'])} node(s) flagged", file=sys.stderr)
        return EXIT_OUTLIER
    return 0
