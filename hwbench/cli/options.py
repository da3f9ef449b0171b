"""Checks of options that several commands share; each failure is one UserError line."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from hwbench.core.errors import UserError
from hwbench.core.records import default_out


def add_out(parser: argparse.ArgumentParser, default_name: str) -> None:
    """``--out FILE``: the results file to write, never overwritten (``default_name`` in results/)."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"results file to write (never overwritten; default: results/{default_name})",
    )


def positive_seconds(value: float, flag: str) -> float:
    """``value`` when it is a positive, finite number of seconds; UserError naming ``flag`` otherwise."""
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{flag} must be a positive, finite number of seconds, got {value}")
    return value


def fresh_out(out: Path | None, kind: str | None = None) -> Path:
    """The results file to write: ``out`` or the default for ``kind``, refused if it already exists."""
    path = out or default_out(kind)
    if path.exists():
        raise UserError(f"{path} already exists; hwbench never overwrites a results file: choose another --out")
    return path
