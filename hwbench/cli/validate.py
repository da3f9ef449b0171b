"""Check results files against the JSON Schema (closed records, figures never negative, RFC 3339
times) and for finite numbers, after migrating them: the rule every command that reads a
results file applies. Every problem of an invalid file is listed.

  hwbench validate results/*.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hwbench.core.errors import UserError
from hwbench.core.text import printable
from hwbench.results.files import read, validate

HELP = "check results files against the JSON Schema"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench validate``."""
    parser.add_argument("files", type=Path, nargs="+")


def main(args: argparse.Namespace) -> int:
    """One line per file: valid, or what is wrong with it (every problem listed); 1 when any file is invalid.

    The rule is the one every command applies when it reads a results file.
    """
    bad = 0
    for path in args.files:
        try:
            doc = read(path)
        except UserError as exc:
            bad += 1
            print(printable(exc), file=sys.stderr)
            continue
        problems = validate(doc)
        if problems:
            bad += 1
            print(printable(f"{path}: invalid results file: {len(problems)} problem(s)"), file=sys.stderr)
            for problem in problems:
                print(f"  {printable(problem)}", file=sys.stderr)
            continue
        print(printable(f"{path}: valid (schema_version {doc['schema_version']}, {len(doc['records'])} records)"))
    return 1 if bad else 0
