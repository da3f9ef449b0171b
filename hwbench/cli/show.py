"""Print a results file (migrated to the current schema) as a table, as CSV, or as JSON.

hwbench show results/hwbench-HOST-TIME.json
hwbench show results/x.json --format table      # AllReduce in the table with the other kernels
hwbench show results/x.json --format csv        # one row per record, as data

Records of kernels that span ranks (AllReduce) print as nccl-tests prints them (``--format
nccl``, the default): one block per backend, implementation, dtype and ranks, one row per
size with time, algbw, busbw and #wrong out of place then in place; every other line, the
table of the other kernels included, starts with ``#``. ``--format csv`` prints the table's
columns as data (:mod:`hwbench.results.flat`), the file's warnings on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwbench.core.text import printable
from hwbench.results.files import load
from hwbench.results.flat import doc_rows, to_csv
from hwbench.results.tables import summary

HELP = "print a results file as a table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench show``."""
    parser.add_argument("file", type=Path)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the (migrated) document as JSON")
    output.add_argument(
        "--format",
        choices=("nccl", "table", "csv"),
        default="nccl",
        help="collective records (AllReduce): nccl-tests' rows per size, every other line a # comment "
        "(nccl, the default), or the table the other kernels print in, its GB/s their busbw (table); "
        "csv: one row per record with the table's columns, as data",
    )


def main(args: argparse.Namespace) -> int:
    """Load the file (one line and exit 2 on a bad one) and print it."""
    doc = load(args.file)
    if args.json:
        print(json.dumps(doc, indent=1))
    elif args.format == "csv":
        for warning in doc.get("warnings", []):
            print(printable(f"hwbench: warning: {warning}"), file=sys.stderr)
        print(to_csv(doc_rows(doc)), end="")
    else:
        print(summary(doc, collective=args.format))
    return 0
