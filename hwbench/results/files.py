"""Results files: one versioned JSON document per run.

``schema_version`` is an integer kept apart from the package version. Files are written
atomically and never overwrite an existing file; the loader migrates older versions and
refuses newer ones.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.records import KIND, SCHEMA_VERSION, STATUSES, finite  # defined with the records; read from here too

__all__ = [
    "KIND",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STATUSES",
    "dumps",
    "finite",
    "free_path",
    "load",
    "migrate",
    "save",
    "schema",
    "validate",
]


def _from_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added the status ``implausible``: a version 1 document reads as it is."""
    return doc


#: Upgrades from version N to N + 1, applied in order by :func:`migrate`.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1}


def schema() -> dict[str, Any]:
    """The JSON Schema of the current results format."""
    text = resources.files("hwbench.results.schema").joinpath(f"results-v{SCHEMA_VERSION}.json").read_text()
    return json.loads(text)


def validate(doc: Any) -> list[str]:
    """Schema violations of ``doc`` as human lines (empty when valid).

    An older document is checked as :func:`load` reads it: migrated first (on a copy).
    """
    import jsonschema

    if isinstance(doc, dict):
        version = doc.get("schema_version")
        if isinstance(version, int) and not isinstance(version, bool) and version < SCHEMA_VERSION:
            try:
                doc = migrate(copy.deepcopy(doc))
            except UserError as exc:
                return [f"schema_version: {exc}"]

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}" for e in errors]


def migrate(doc: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to :data:`SCHEMA_VERSION`; refuse a newer one."""
    version = doc.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise UserError("not an hwbench results file: 'schema_version' is missing or not an integer")
    if version > SCHEMA_VERSION:
        raise UserError(
            f"results file has schema_version {version}, newer than this hwbench reads "
            f"({SCHEMA_VERSION}): upgrade hwbench to read it"
        )
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise UserError(f"results file has schema_version {version}, which this hwbench cannot migrate")
        doc = MIGRATIONS[version](doc)
        version = doc["schema_version"] = version + 1
    return doc


def load(path: str | Path) -> dict[str, Any]:
    """Read, migrate and validate a results file; UserError with one line on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    if not text.strip():
        raise UserError(f"{path}: the file is empty, not an hwbench results file")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); the file may be truncated"
        ) from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not an hwbench results file (top level is not an object)")
    try:
        doc = migrate(doc)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    problems = validate(doc)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise UserError(f"{path}: invalid results file: {problems[0]}{more}; `hwbench validate` lists all")
    return doc


def dumps(doc: dict[str, Any]) -> str:
    """Serialise a results document (non-finite numbers become null)."""
    return json.dumps(finite(doc), indent=1, allow_nan=False) + "\n"


def save(doc: dict[str, Any], path: str | Path) -> Path:
    """Write ``doc`` to ``path`` atomically; never replace an existing file.

    The document goes to a temporary file in the same folder, is flushed to disk, then
    hard-linked to its name, which fails if a file of that name appeared meanwhile.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(doc)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a results file is as readable as any other
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise UserError(
                f"{path} already exists; hwbench never overwrites a results file: choose another --out"
            ) from None
        except OSError:  # a file system without hard links: exclusive create, then replace
            try:
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                raise UserError(
                    f"{path} already exists; hwbench never overwrites a results file: choose another --out"
                ) from None
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def free_path(path: str | Path) -> Path:
    """``path`` if free, else the first ``stem.N.json`` beside it that is (for late clashes)."""
    path = Path(path)
    n = 1
    candidate = path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
        n += 1
    return candidate
