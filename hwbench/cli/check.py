"""Accept or reject a node: every check of its results files against the floors, PASS/FAIL/MISSING.

Give every file of the node (hwbench run, hwbench burn). Per device: the best GEMM of each
dtype >= a share of the device's peak (the datasheet's for GPUs, the measured one for CPUs),
the best stream triad >= GB/s, burn decay <= %, no wrong result (burn mismatches, records
that failed parity), health readings clean; per host and backend: AllReduce busbw >= GB/s and
small-message latency <= us (the interconnect's figures: set them in your floors file).
Default floors per device model ship in hwbench/decide/data/floors.toml, each with its
reason; --floors FILE (same layout) overrides them. A burn that did not happen in full (errored,
stopped early, or killed before it finished its file) FAILs its device's burn checks. Exit
status: 0 all PASS, 1 any FAIL or MISSING (--allow-missing passes over absent measurements, never
over a burn that did not happen), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from hwbench.cli.options import check_out, print_document
from hwbench.core.text import printable
from hwbench.decide.acceptance import FAIL, MISSING, PASS, judge
from hwbench.decide.floors import Floors
from hwbench.results.checked import load_checked
from hwbench.results.tables import table
from hwbench.run.parity import NOT_VERIFIED

HELP = "accept or reject a node: its results against floors (GEMM, stream, AllReduce, burn, health)"
EXIT_REJECTED = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench check``."""
    parser.add_argument("files", type=Path, nargs="+", metavar="FILE", help="results files of the node (run, burn)")
    parser.add_argument(
        "--floors",
        type=Path,
        default=None,
        help="TOML floors over the shipped ones ([default], [cpu], [gpu], [devices.KEY]; see README)",
    )
    parser.add_argument(
        "--allow-missing", action="store_true", help="pass over checks whose measurement is absent (MISSING)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdict document as JSON instead of the table")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="also write the verdict document (JSON) to this new file (never overwritten; '-': stdout, "
        "the table then on stderr)",
    )


def _amount(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "clean" if value else "problems"
    if isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def _floor(row: dict[str, Any]) -> str:
    if row["floor"] is True:
        return "clean"
    return f"{row['op']} {_amount(row['floor'], row['unit'])}"


def _what(row: dict[str, Any]) -> str:
    return row["label"] + (f" {row['dtype']}" if row.get("dtype") else "")


def _device(row: dict[str, Any]) -> str:
    where = f"{row['backend']}:{row['device_index']}" if row["device_index"] is not None else f"{row['backend']} node"
    return f"{row['device']} ({where})"


def render(doc: dict[str, Any]) -> str:
    """The verdict table, then why each check failed or is missing, the figures not judged and the total;
    every text from the files (hosts, devices, reasons) escaped for the terminal."""
    hosts = len(doc["hosts"]) > 1
    headers = (*(("host",) if hosts else ()), "device", "check", "figure", "floor", "verdict")
    rows = [
        (
            *((r["host"],) if hosts else ()),
            _device(r),
            _what(r),
            _amount(r["figure"], r["unit"]),
            _floor(r),
            r["verdict"],
        )
        for r in doc["checks"]
    ]
    head = table(rows, headers) if rows else "nothing to judge: no record, burn or health entry names a device"
    lines: list[str] = []  # one line each, escaped below (the table's cells are escaped by table())
    for r in doc["checks"]:
        if r["verdict"] == PASS:
            if NOT_VERIFIED in str(r["detail"]):  # passed on a figure whose timed calls were not re-checked
                lines.append(f"note: {r['host']} {_device(r)} {_what(r)}: {r['detail']}")
            continue
        lines.append(f"{r['verdict']}: {r['host']} {_device(r)} {_what(r)}: {r['detail']}")
        if r.get("unfinished"):
            sources = ", ".join(u["source"] for u in r["unfinished"])
            lines.append(f"  the burn did not happen in full, whatever the floor ({sources})")
        elif r["verdict"] == FAIL:
            why = f": {r['floor_reason']}" if r["floor_reason"] else ""
            lines.append(f"  floor {_floor(r)}{why} ({r['floor_origin']})")
    for r in doc["not_judged"]:
        lines.append(
            f"not judged: {r['host']} {_device(r)} {_what(r)} {_amount(r['figure'], r['unit'])}: "
            f"no floor (set {r['check']} in --floors)"
        )
    counts = doc["summary"]
    verdict = "PASS" if doc["passed"] else "FAIL"
    passed_over = " (MISSING passed over: --allow-missing)" if doc["allow_missing"] and counts[MISSING] else ""
    cut = {u["source"] for r in doc["checks"] for u in r.get("unfinished", [])}
    not_done = f" ({len(cut)} burn(s) did not happen in full: errored or stopped early)" if cut else ""
    lines.append(
        f"check: {counts[PASS]} PASS, {counts[FAIL]} FAIL, {counts[MISSING]} MISSING: {verdict}{not_done}"
        f"{passed_over}; floors: {', '.join(doc['floors'])}"
    )
    return "\n".join([head, "", *(printable(line) for line in lines)])


def main(args: argparse.Namespace) -> int:
    """Judge the files; 0 when every check passes, 1 on any FAIL or MISSING, 2 on bad input."""
    check_out(args.out)
    floors = Floors.load(args.floors)
    doc = judge([load_checked(path) for path in args.files], floors, args.allow_missing)
    text = json.dumps(doc, indent=1)
    print_document(text, render(doc), args.out, args.json, "verdict document")
    return 0 if doc["passed"] else EXIT_REJECTED
