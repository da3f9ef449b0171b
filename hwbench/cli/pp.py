"""Performance portability of each implementation across the devices of several results files.

Per problem (kernel, dtype, shape) and implementation: application efficiency on each
device (t_native / t_impl, against the fastest native there), architectural efficiency
(achieved / peak), and Pennycook's PP, the harmonic mean over every device that ran the
problem (0 when the implementation is missing or failing on any of them). --json adds
cascade-plot data; --csv writes the p3-analysis-library's problem,platform,application,fom
rows (fom = median seconds, lower is better; empty when skipped or failed) with status,
the capped efficiency against the fastest native and the raw ratio, one row per key (the
fastest ok record of several, said on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hwbench.decide.portability import P3Csv, p3_csv, portability
from hwbench.results.checked import load_checked
from hwbench.results.files import check_new, write_new
from hwbench.results.tables import table

HELP = "performance portability (Pennycook PP) of each implementation across devices; p3 CSV export"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench pp``."""
    parser.add_argument("files", type=Path, nargs="+", help="results files (one or more devices each)")
    parser.add_argument("--json", action="store_true", help="print the document (with cascade data) as JSON")
    parser.add_argument(
        "--csv",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the p3-analysis-library CSV (problem,platform,application,fom, status, native eff, "
        "native speedup) to this new file (never overwritten; '-': stdout)",
    )


def _eff(value: float | None, status: str) -> str:
    if status != "ok":
        return status
    return "?" if value is None else f"{value:.2f}"


def _pp(value: float | None, why: str) -> str:
    return f"? ({why})" if value is None else f"{value:.2f}"


def render(doc: dict[str, Any]) -> str:
    """One block per problem: implementations by device, then their PP."""
    blocks = []
    for problem in doc["problems"]:
        devices = problem["platforms"]
        headers = ("impl", *(f"{d} app/arch" for d in devices), "PP app", "PP arch")
        rows = [
            (
                a["application"],
                *(
                    f"{_eff(a['app_efficiency'][d], a['status'][d])}/{_eff(a['arch_efficiency'][d], a['status'][d])}"
                    for d in devices
                ),
                _pp(a["pp_app"], a["pp_app_unknown"]),
                _pp(a["pp_arch"], a["pp_arch_unknown"]),
            )
            for a in problem["applications"]
        ]
        blocks.append(f"{problem['problem']}\n{table(rows, headers)}")
    blocks.append(
        "app = t_native / t_impl on the device; arch = achieved / peak; PP = harmonic mean over the "
        "devices (0 if missing or failing on any)"
    )
    return "\n\n".join(blocks)


def duplicates_note(exported: P3Csv) -> str:
    """One line saying which keys had several records and which one the CSV kept ('' if none)."""
    if not exported.duplicates:
        return ""
    problem, platform, application, origins = exported.duplicates[0]
    others = len(exported.duplicates) - 1
    more = f"; and {others} more" if others else ""
    return (
        f"hwbench: note: {len(exported.duplicates)} (problem, platform, application) keys have more than one "
        f"record ({application} on {platform} for {problem}: {', '.join(origins)}{more}); the CSV keeps the "
        "fastest ok record of each (else the first), as the PP table does"
    )


def main(args: argparse.Namespace) -> int:
    """Print the portability table (or JSON) and write the CSV when asked."""
    to_stdout = args.csv is not None and str(args.csv) == "-"
    if args.csv is not None and not to_stdout:
        check_new(args.csv, "--csv")
    files = [load_checked(path) for path in args.files]
    if args.csv is not None:
        exported = p3_csv(files)
        note = duplicates_note(exported)
        if note:
            print(note, file=sys.stderr)
        if to_stdout:
            print(exported.text, end="")
            return 0
        write_new(args.csv, exported.text, what="CSV file", option="--csv")
    doc = portability(files)
    print(json.dumps(doc, indent=1) if args.json else render(doc))
    return 0
