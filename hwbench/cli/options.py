"""Checks of options that several commands share; each failure is one UserError line."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO

from hwbench.core.errors import UserError
from hwbench.core.records import default_out
from hwbench.results import files as results


class Options(Protocol):
    """A parser or an argument group of one: what takes options."""

    def add_argument(self, *names: str, **how: Any) -> Any: ...


#: ``--out -``: the document goes to stdout (and what is usually printed there, to stderr).
STDOUT = Path("-")


def add_out(parser: Options, default_name: str) -> None:
    """``-o/--out FILE``: the results file to write, never overwritten (``default_name`` in
    results/); ``-`` writes the document to stdout instead."""
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help=f"results file to write (never overwritten; default: results/{default_name}; '-': stdout)",
    )


def add_quiet(parser: Options) -> None:
    """``-q/--quiet``: no progress lines."""
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines")


def to_stdout(out: Path | None) -> bool:
    """Whether ``--out`` asks for the document on stdout (``-``)."""
    return out == STDOUT


def positive_seconds(value: float, flag: str) -> float:
    """``value`` when it is a positive, finite number of seconds; UserError naming ``flag`` otherwise."""
    if not (math.isfinite(value) and value > 0):
        raise UserError(f"{flag} must be a positive, finite number of seconds, got {value}")
    return value


#: The largest ``--seed``: the inputs' generator takes any whole number from 0, and a results
#: file's ``run.seed`` stays a 64-bit integer for the tools that read it.
MAX_SEED = 2**63 - 1


def seed(value: int, flag: str = "--seed") -> int:
    """``value`` when it is a seed the inputs' generator takes (0 to :data:`MAX_SEED`); UserError
    naming ``flag`` otherwise."""
    if not 0 <= value <= MAX_SEED:
        raise UserError(f"{flag} must be a whole number from 0 to 2**63-1 (inputs are generated from it), got {value}")
    return value


def fresh_out(out: Path | None, kind: str | None = None) -> Path:
    """The results file to write: ``out`` or the default for ``kind``, refused if it already exists."""
    path = out or default_out(kind)
    if path.exists():
        raise UserError(f"{path} already exists; hwbench never overwrites a results file: choose another --out")
    return path


def emit(doc: Mapping[str, Any], out: Path | None) -> tuple[Path | None, TextIO]:
    """Write a results document where ``--out`` says: stdout for ``-``, else the file ``out``
    (the next free name if it was taken meanwhile). Returns the path written (None for stdout)
    and the stream the human-readable output then goes to (stderr when stdout holds the document)."""
    if out is None or to_stdout(out):
        print(results.dumps(doc), end="", flush=True)
        return None, sys.stderr
    return results.save(doc, out, next_free=True), sys.stdout


def check_out(out: Path | None) -> None:
    """Refuse, before any work, an ``-o`` file that already exists (``-`` and none pass)."""
    if out is not None and not to_stdout(out):
        results.check_new(out)


def print_document(text: str, rendered: str, out: Path | None, as_json: bool, what: str) -> None:
    """A decision document (score, TCO, verdict, fleet) where ``-o``/``--json`` say: with ``-o -``
    the JSON on stdout and the tables on stderr; with ``-o FILE`` the JSON written to that new
    file; then the tables, or the JSON with ``--json``, on stdout."""
    if out is not None and to_stdout(out):
        print(text)
        print(rendered, file=sys.stderr)
        return
    if out is not None:
        results.write_new(out, text + "\n", what=what)
    print(text if as_json else rendered)


def save_or_rescue(doc: Mapping[str, Any], out: Path) -> Path:
    """Save ``doc`` at ``out`` (or the next free name); where that fails (a full disk, a folder
    become read-only), at :func:`hwbench.results.files.fallback_path`, said on stderr: finished work
    is never dropped. UserError only when the fallback cannot be written either."""
    try:
        return results.save(doc, out, next_free=True)
    except UserError as exc:
        rescue = results.fallback_path(out)
        print(f"hwbench: error: {exc}; the results go to {rescue} instead", file=sys.stderr)
        return results.save(doc, rescue, next_free=True)
