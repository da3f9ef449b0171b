"""Write one self-contained HTML report (opens offline) from one or more results files.

The page holds a summary (runs, host, devices, software stack, skipped and failed cases
with their reasons), a roofline per device, porting overhead per backend and kernel, the
performance-portability cascade across devices, AllReduce bus bandwidth and latency
against message size, and a parity table, each chart with its numbers beside it. A
section the files have no data for says so.

  hwbench report results/a.json results/b.json -o report.html
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, cast

from hwbench.cli.options import to_stdout
from hwbench.decide.tco_model import load_model
from hwbench.report import build
from hwbench.results import files as results

HELP = "write a self-contained HTML report (plots and tables) from results files"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench report``."""
    parser.add_argument("files", type=Path, nargs="+", metavar="RESULTS", help="results files (hwbench run --out)")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=Path("report.html"),
        help="HTML file to write (default: report.html; never overwritten; '-': stdout)",
    )
    parser.add_argument("--title", default="hwbench report", help="title of the page")
    parser.add_argument(
        "--tco",
        type=Path,
        default=None,
        metavar="MODEL.toml",
        help="add a TCO section (owning against renting) from this cost model (see hwbench tco)",
    )


def main(args: argparse.Namespace) -> int:
    """Refuse an existing -o, load every file (one line and exit 2 on a bad one), build the page, write it."""
    if not to_stdout(args.out):
        results.check_new(args.out, "-o")
    model = load_model(args.tco) if args.tco is not None else None
    runs = [(path, cast(dict[str, Any], results.load(path))) for path in args.files]  # the report reads plain dicts
    page = build(runs, title=args.title, tco=model)
    if to_stdout(args.out):
        sys.stdout.write(page)
        print(f"report: stdout ({len(page) / 1024:.0f} KiB, {len(runs)} results file(s))", file=sys.stderr)
        return 0
    results.write_new(args.out, page, what="report", option="-o")
    print(f"report: {args.out} ({len(page) / 1024:.0f} KiB, {len(runs)} results file(s))")
    return 0
