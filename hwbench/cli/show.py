"""Print a results file (migrated to the current schema) as a table, or as JSON.

hwbench show results/hwbench-HOST-TIME.json
hwbench show results/x.json --format table      # AllReduce in the table with the other kernels

Records of kernels that span ranks (AllReduce) print as nccl-tests prints them (``--format
nccl``, the default): one block per backend, implementation, dtype and ranks, one row per
size with time, algbw, busbw and #wrong out of place then in place.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hwbench.results.files import load
from hwbench.results.tables import summary

HELP = "print a results file as a table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench show``."""
    parser.add_argument("file", type=Path)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the (migrated) document as JSON")
    output.add_argument(
        "--format",
        choices=("nccl", "table"),
        default="nccl",
        help="collective records (AllReduce): nccl-tests' rows per size (nccl, the default) "
        "or the table the other kernels print in, its GB/s their busbw (table)",
    )


def main(args: argparse.Namespace) -> int:
    """Load the file (one line and exit 2 on a bad one) and print it."""
    doc = load(args.file)
    print(json.dumps(doc, indent=1) if args.json else summary(doc, collective=args.format))
    return 0
