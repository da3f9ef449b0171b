"""Compare two results files case by case (kernel, impl, backend, device, dtype, shape).

Each matched case is faster, slower or same: slower/faster only when a two-sided
Mann-Whitney U test on the timing samples gives p < --alpha (default 0.05) and the median
moved by more than --noise (default 2%). A case that is ok in BASE and fails in NEW is
broken. With --fail-on STAT:N% (STAT median, mean or min; repeatable) the exit status is
1 when a case got significantly slower by more than N% on STAT, or broke, and when nothing
could be compared (no case ok on both sides: NEW empty, a burn file...). Warns when the
hosts, software stacks or settings differ; lists cases present on one side only; notes on
stderr each kernel whose inputs changed between the two files (its inputs version differs).
Text from the files (host names, devices, versions, reasons) is printed escaped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hwbench.core.text import printable
from hwbench.decide.compare import compare, parse_fail_on, parse_percent
from hwbench.results.checked import load_checked
from hwbench.results.tables import seconds, table

HELP = "compare two results files: faster, slower or same per case, with a significance test"
EXIT_REGRESSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench compare``."""
    parser.add_argument("base", type=Path, help="results file of the baseline")
    parser.add_argument("new", type=Path, help="results file to judge against it")
    parser.add_argument(
        "--fail-on",
        action="append",
        default=[],
        metavar="STAT:N%",
        help="exit 1 when a case regresses by more than N%% on STAT (median, mean, min), or breaks, or when no "
        "case could be compared; e.g. median:5%%",
    )
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the test (default 0.05)")
    parser.add_argument("--noise", default="2%", help="median changes up to this are 'same' (default 2%%)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON instead of the table")


def _shape(shape: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items()) or "-"


def _row(case: dict[str, Any]) -> tuple[str, ...]:
    change = "-" if case["change"] is None else f"{case['change']:+.1%}"
    p = "-" if case["p"] is None else f"{case['p']:.2g}"
    verdict = case["verdict"] + (" REGRESSION" if case["regression"] else "")
    return (
        case["backend"],
        case["kernel"],
        case["impl"],
        case["dtype"] or "-",
        _shape(case["shape"]),
        seconds(case["base"]["median_s"]),
        seconds(case["new"]["median_s"]),
        change,
        p,
        verdict,
    )


def render(doc: dict[str, Any]) -> str:
    """Table of matched cases, then one-sided cases, reasons and warnings."""
    headers = ("backend", "kernel", "impl", "dtype", "shape", "base", "new", "change", "p", "verdict")
    head = [f"base {doc['base']}", f"new  {doc['new']}"]
    head += [f"warning: {w}" for w in doc["warnings"]]
    cases = table((_row(c) for c in doc["cases"]), headers) if doc["cases"] else "no case in common"
    lines: list[str] = []
    for case in doc["cases"]:
        if case.get("reason"):
            lines.append(
                f"{case['verdict']}: {case['backend']} {case['kernel']} {case['impl']} "
                f"{_shape(case['shape'])}: {case['reason']}"
            )
    for side in ("only_base", "only_new"):
        for key in doc[side]:
            lines.append(
                f"only in {side[5:]}: {key['backend']} {key['kernel']} {key['impl']} "
                f"{key['dtype'] or '-'} {_shape(key['shape'])} ({key['device']})"
            )
    summary = ", ".join(f"{n} {v}" for v, n in doc["summary"].items()) or "nothing matched"
    lines += ["", f"{summary}; slower/faster need p < {doc['alpha']:g} and a median change > {doc['noise']:.0%}"]
    if doc["gate"] is not None:
        verdict = f"{doc['regressions']} regression(s)" if doc["compared"] else doc["gate"]["reason"]
        lines.append(f"fail-on {', '.join(doc['fail_on'])}: {verdict}" + ("" if doc["gate"]["passed"] else ": FAIL"))
    # Names, versions and reasons come from the files: every line escaped (the table escapes its cells).
    return "\n".join([*(printable(line) for line in head), "", cases, *(printable(line) for line in lines)])


def main(args: argparse.Namespace) -> int:
    """Compare; 1 when --fail-on finds a regression, 2 on bad input, else 0."""
    thresholds = [parse_fail_on(text) for text in args.fail_on]
    noise = parse_percent(args.noise, "--noise")
    doc = compare(load_checked(args.base), load_checked(args.new), args.alpha, noise, thresholds)
    for entry in doc["inputs_versions"]:
        print(printable(f"hwbench: note: {entry['note']}"), file=sys.stderr)
    # json escapes every control and non-ASCII character but DEL, which a terminal is then shown escaped too.
    print(json.dumps(doc, indent=1).replace("\x7f", "\\u007f") if args.json else render(doc))
    verdict = doc["gate"]
    if verdict is not None and not verdict["passed"]:
        if doc["regressions"]:
            print(
                f"hwbench: {doc['regressions']} case(s) regressed beyond {', '.join(doc['fail_on'])}", file=sys.stderr
            )
        else:
            print(
                printable(
                    f"hwbench: compare: --fail-on {', '.join(doc['fail_on'])} fails: {verdict['reason']} between "
                    f"{doc['base']} and {doc['new']}; a gate needs cases that ran in both files"
                ),
                file=sys.stderr,
            )
        return EXIT_REGRESSION
    return 0
