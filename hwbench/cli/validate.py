"""Check results files against the JSON Schema (closed records, figures never negative, RFC 3339
times) and for finite numbers: an older file against the schema of its own version, then as
migrated; the rule every command that reads a results file applies. Every problem of an
invalid file is listed, and each file's own version, and whether it is migrated on load.

  hwbench validate results/*.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.text import printable
from hwbench.results.files import SCHEMA_VERSION, read_document, validate, version

HELP = "check results files against the JSON Schema"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench validate``."""
    parser.add_argument("files", type=Path, nargs="+")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object: per file whether it is valid, its problems, its schema_version and the one "
        "it is migrated to on load (null when none)",
    )


def main(args: argparse.Namespace) -> int:
    """One line per file: valid, or what is wrong with it (every problem listed); 1 when any file is invalid.

    The rule is the one every command applies when it reads a results file.
    """
    verdicts = [_verdict(path) for path in args.files]
    if args.json:
        print(json.dumps({"files": verdicts}, indent=1))
    else:
        for verdict in verdicts:
            _print(verdict)
    return 1 if any(not v["valid"] for v in verdicts) else 0


def _verdict(path: Path) -> dict[str, Any]:
    """Whether ``path`` is a valid results file, with every problem found, its own version and the one it loads as."""
    try:
        doc = read_document(path)
        try:
            own = version(doc)
        except UserError as exc:  # a version this hwbench does not read: the line the loader says
            raise UserError(f"{path}: {exc}") from None
    except UserError as exc:
        unread = {"valid": False, "readable": False, "problems": [str(exc)], "records": None}
        return {"path": str(path), **unread, "schema_version": None, "migrated_to": None}
    problems = validate(doc)
    return {
        "path": str(path),
        "valid": not problems,
        "readable": True,
        "problems": problems,
        "schema_version": own,
        "migrated_to": SCHEMA_VERSION if own != SCHEMA_VERSION else None,
        "records": len(doc["records"]) if isinstance(doc.get("records"), list) else None,
    }


def _print(verdict: dict[str, Any]) -> None:
    path, problems = verdict["path"], verdict["problems"]
    own, older = f"schema_version {verdict['schema_version']}", verdict["migrated_to"] is not None
    if verdict["valid"]:
        migrated = f", migrated to {verdict['migrated_to']} on load" if older else ""
        print(printable(f"{path}: valid ({own}{migrated}, {verdict['records']} records)"))
    elif not verdict["readable"]:  # not readable as a results file at all: its one line
        print(printable(problems[0]), file=sys.stderr)
    else:  # an older file's problems are those of its own version's schema (or of it migrated)
        of = f" ({own})" if older else ""
        print(printable(f"{path}: invalid results file{of}: {len(problems)} problem(s)"), file=sys.stderr)
        for problem in problems:
            print(f"  {printable(problem)}", file=sys.stderr)
