"""Merge results from many nodes: per case the distribution across the fleet and its outlier nodes.

Give results files or folders (a folder means its *.json results files; other JSON documents
in it, such as a fleet or check document, are passed over with a note). A file that cannot be
read as a results file (not JSON, invalid, a dangling or looping link, gone) is named as
missing, and the others are analysed. A node is a host: its files are merged. Per case
(kernel, impl, backend, device model, dtype, shape), in the one unit of the case: median, MAD,
min, max and n across the fleet's devices, and the outliers: off the median, below or above,
by more than --mad-k robust standard deviations (1.4826 x MAD, at least 0.5 % of the median;
default 3.5) and by more than --below-pct percent (default 5). Also: devices whose case failed, AllReduce
stragglers (a rank whose median is well above the others', from timing.rank_p50_s), and nodes
whose software stack (hwbench, kernel, Python packages, BLAS, drivers, runtimes, settings)
differs from the majority. Exit status: 0, or 1 with --fail-on-outlier when anything is found
(a missing file too); 2 on bad input (no file readable at all among those given).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from hwbench.cli.options import check_out, print_document
from hwbench.core.errors import UserError
from hwbench.core.results_types import Document
from hwbench.core.text import MAX_RESULTS_BYTES, aligned, printable, read_regular_text
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
        help="exit 1 when an outlier, a failed case, a straggler, a software difference or a missing file is found",
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
    """Whether ``path`` holds another of hwbench's JSON documents (``kind`` ``hwbench-fleet``,
    ``hwbench-check``...), not a results file."""
    try:
        doc = results.parse(read_regular_text(path, MAX_RESULTS_BYTES, "results file"))
    except (UserError, ValueError, RecursionError):
        return False
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return isinstance(kind, str) and kind.startswith("hwbench-") and kind != results.KIND


def _load(path: Path, runs: list[tuple[Path, Document]], missing: list[dict[str, str]] | None) -> None:
    """Load one file into ``runs``; another hwbench document is passed over with a note, and an
    unreadable file goes to ``missing`` (UserError where that is None)."""
    try:
        runs.append((path, results.load(path)))
    except UserError as exc:
        if _other_document(path):
            print(printable(f"hwbench: note: {path} is not a results file; passed over"), file=sys.stderr)
            return
        if missing is None:
            raise
        missing.append({"file": str(path), "reason": str(exc)})
        print(printable(f"hwbench: warning: {exc}; the node is counted as missing"), file=sys.stderr)


def load_all(paths: list[Path], missing: list[dict[str, str]] | None = None) -> list[tuple[Path, Document]]:
    """Every results file named or in a named folder, loaded and checked.

    A folder's every ``*.json`` entry that is not a folder is read, links that lead nowhere
    too. A file that cannot be read as a results file is UserError, or, given a ``missing``
    list, is appended to it (``{"file": ..., "reason": ...}``) and the others are read: a
    fleet is analysed without its unreadable nodes, which are named. UserError when no
    file at all could be read."""
    runs: list[tuple[Path, Document]] = []
    for path in paths:
        if not path.is_dir():
            _load(path, runs, missing)
            continue
        found = sorted(p for p in path.glob("*.json") if not p.is_dir())
        if not found:
            raise UserError(f"{path} holds no *.json results file; give files or a folder of them")
        for item in found:
            _load(item, runs, missing)
    if not runs:
        first = f": {missing[0]['reason']}" if missing else ""
        raise UserError(f"no readable results file among the paths given{first}")
    return runs


#: Characters that JSON text may carry raw and a terminal would obey or reorder (DEL, C1 controls,
#: bidirectional marks); JSON's encoders already escape the C0 controls.
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _json_escaped(text: str) -> str:
    """JSON ``text`` with those characters written as ``\\uXXXX``: the same document, safe to print.
    They can only stand inside strings, where the escape means the same character."""
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dumps(doc: dict[str, Any]) -> str:
    """The fleet document as indented JSON (orjson where installed: the same document), printable
    on a terminal as it is."""
    if _orjson is not None:
        return _json_escaped(_orjson.dumps(doc, option=_orjson.OPT_INDENT_2).decode())
    return _json_escaped(json.dumps(doc, indent=1))


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


def _named(path: str, reason: str) -> str:
    """``reason`` with the file it is about in front, unless it names it already."""
    return reason if path in reason else f"{path}: {reason}"


def _off(outlier: dict[str, Any]) -> str:
    """How far an outlier is from the median: ``12.0% below``, ``1e+08% above``."""
    pct = outlier["below_pct"]
    return outlier["side"] if pct is None else f"{abs(pct):.4g}% {outlier['side']}"


def _findings(doc: dict[str, Any]) -> list[str]:
    lines = [f"missing: {_named(m['file'], m['reason'])}" for m in doc["missing"]]
    for c in doc["cases"]:
        for o in c["outliers"]:
            lines.append(
                f"outlier: {o['node']} {c['backend']}:{o['device_index']} {_case(c)}: {o['value']:.4g} {c['unit']}, "
                f"{_off(o)} the median {c['median']:.4g}"
                + ("" if o["robust_z"] is None else f" (robust z {abs(o['robust_z']):.1f})")
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
    lines = _findings(doc)
    rule, s = doc["rule"], doc["summary"]
    lines.append(
        f"outlier: off the median, below or above, by more than {rule['mad_k']:g} x 1.4826 MAD (at least "
        f"{MIN_SPREAD_PCT:g} % of the median) and by more than {rule['below_pct']:g} %; "
        f"{rule['min_members']}+ devices per case, each case in one unit"
    )
    nodes = f": {_names(s['outlier_nodes'])}" if s["outlier_nodes"] else ""
    split = f", {s['software_split']} split field(s)" if s["software_split"] else ""
    gone = [m["file"] for m in doc["missing"]]
    missing = f", {len(gone)} file(s) missing: {_names(gone)}" if gone else ""
    lines.append(
        f"fleet: {s['nodes']} node(s), {s['files']} file(s){missing}, {s['cases']} case(s); "
        f"{s['outliers']} outlier(s), {s['failed']} failed, {s['stragglers']} straggler(s), "
        f"{s['software_outliers']} software difference(s){split}; "
        f"{len(s['outlier_nodes'])} node(s) flagged{nodes}"
    )
    # Names, reasons and values come from the files: every line escaped (the table escapes its cells).
    head = table(rows, headers) if rows else "no case with a device in these files"
    return "\n".join([head, "", *(printable(line) for line in lines)])


def main(args: argparse.Namespace) -> int:
    """Analyse the fleet; 1 when --fail-on-outlier finds anything, 2 on bad input, else 0."""
    rule = finite_rule(args.mad_k, args.below_pct)
    if isinstance(rule, str):
        raise UserError(rule)
    check_out(args.out)
    missing: list[dict[str, str]] = []
    doc = analyze(load_all(args.paths, missing), rule, missing)
    text = dumps(doc) if args.out or args.json else ""  # 256 nodes: megabytes, made only when asked
    print_document(text, render(doc), args.out, args.json, "fleet document")
    if args.fail_on_outlier and doc["summary"]["found"]:
        gone = f", {len(missing)} file(s) missing" if missing else ""
        print(f"hwbench: fleet: {len(doc['summary']['outlier_nodes'])} node(s) flagged{gone}", file=sys.stderr)
        return EXIT_OUTLIER
    return 0
