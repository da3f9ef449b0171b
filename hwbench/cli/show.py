"""Print a results file (migrated to the current schema) as a table, or as JSON.

hwbench show results/hwbench-HOST-TIME.json
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
    parser.add_argument("--json", action="store_true", help="print the (migrated) document as JSON")


def main(args: argparse.Namespace) -> int:
    """Load the file (one line and exit 2 on a bad one) and print it."""
    doc = load(args.file)
    print(json.dumps(doc, indent=1) if args.json else summary(doc))
    return 0
