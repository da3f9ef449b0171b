"""Check results files against the JSON Schema, after migrating them; every schema problem
of an invalid file is listed.

  hwbench validate results/*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hwbench.core.errors import UserError
from hwbench.results.files import load, validate

HELP = "check results files against the JSON Schema"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench validate``."""
    parser.add_argument("files", type=Path, nargs="+")


def main(args: argparse.Namespace) -> int:
    """One line per file: valid, or what is wrong with it; 1 when any file is invalid."""
    bad = 0
    for path in args.files:
        try:
            doc = load(path)
        except UserError as exc:
            bad += 1
            print(f"{exc}", file=sys.stderr)
            try:  # list every schema problem, not just the first
                for problem in validate(json.loads(Path(path).read_text()))[1:]:
                    print(f"  {problem}", file=sys.stderr)
            except Exception:  # unreadable or not JSON: the one line above says so
                pass
            continue
        print(f"{path}: valid (schema_version {doc['schema_version']}, {len(doc['records'])} records)")
    return 1 if bad else 0
