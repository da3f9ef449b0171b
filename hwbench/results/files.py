"""Results files: one versioned JSON document per run.

``schema_version`` is an integer kept apart from the package version. Files are written
atomically and never overwrite an existing file (:func:`write_new`, for every command that
writes); the loader checks an older version against its own schema (every version it reads
has one shipped, ``schema/results-vN.json``), migrates it, and refuses newer ones.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import gc
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any, cast

from hwbench.core.errors import UserError
from hwbench.core.records import KIND, SCHEMA_VERSION, STATUSES, finite  # defined with the records; read from here too
from hwbench.core.results_types import Document
from hwbench.core.text import MAX_RESULTS_BYTES, read_regular_text
from hwbench.results.schema.validator import Validator
from hwbench.results.schema.values import show

_orjson: Any
try:  # a faster parser, for the documents it reads as json does (see parse)
    import orjson as _orjson
except ImportError:  # json reads every document, slower
    _orjson = None
#: orjson's writer, for :func:`_keys_unique` (where orjson parses).
_orjson_dumps: Callable[[Any], bytes] | None = None if _orjson is None else _orjson.dumps

__all__ = [
    "KIND",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "STATUSES",
    "check_new",
    "check_writable",
    "dumps",
    "fallback_path",
    "finite",
    "free_path",
    "load",
    "migrate",
    "parse",
    "read",
    "read_document",
    "save",
    "schema",
    "schema_shipped",
    "validate",
    "version",
    "write_new",
]


def _from_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added the status ``implausible``: a version 1 document reads as it is."""
    return doc


#: Upgrades from version N to N + 1, applied in order by :func:`migrate`.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _from_v1}


def _schema_file(version: int) -> Any:
    return resources.files("hwbench.results.schema").joinpath(f"results-v{version}.json")


def schema(version: int | None = None) -> dict[str, Any]:
    """The JSON Schema of the results format ``version`` (default: the current one)."""
    return json.loads(_schema_file(SCHEMA_VERSION if version is None else version).read_text())


def schema_shipped(version: int) -> bool:
    """Whether the JSON Schema of ``version`` is shipped (each version the loader reads has one)."""
    return _schema_file(version).is_file()


@functools.cache
def _validator(version: int) -> Validator:
    """The validator of one schema version, compiled once per process (a cache of generated code)."""
    return Validator(schema(version))


def validate(doc: Any) -> list[str]:
    """Every problem of ``doc`` as a line ``PATH: WHAT`` (empty when valid): the one validity rule.

    The schema (closed records, figures never negative, RFC 3339 times, a reason for every
    status but ok) and numbers finite as doubles wherever they are; :func:`load`, and so
    every command that reads a results file, applies the same. An older document is checked
    against the schema of its own version, then as :func:`load` reads it: migrated (on a copy).
    """
    with _no_collection():
        if isinstance(doc, dict):
            older = doc.get("schema_version")
            if isinstance(older, int) and not isinstance(older, bool) and older < SCHEMA_VERSION:
                own = _validator(older).errors(doc) if schema_shipped(older) else []
                if own:
                    return own
                try:
                    doc = migrate(copy.deepcopy(doc))
                except UserError as exc:
                    return [f"schema_version: {exc}"]
        return _validator(SCHEMA_VERSION).errors(doc)


def version(doc: dict[str, Any]) -> int:
    """The ``schema_version`` of ``doc`` when this hwbench reads it (migrating an older one); UserError otherwise."""
    found = doc.get("schema_version")
    if not isinstance(found, int) or isinstance(found, bool):
        raise UserError("not an hwbench results file: 'schema_version' is missing or not an integer")
    if found > SCHEMA_VERSION:
        raise UserError(
            f"results file has schema_version {found}, newer than this hwbench reads "
            f"({SCHEMA_VERSION}): upgrade hwbench to read it"
        )
    missing = [v for v in range(found, SCHEMA_VERSION) if v not in MIGRATIONS]
    if missing:
        raise UserError(f"results file has schema_version {missing[0]}, which this hwbench cannot migrate")
    return found


def migrate(doc: dict[str, Any]) -> dict[str, Any]:
    """Bring an older document up to :data:`SCHEMA_VERSION`; refuse a newer one (:func:`version`)."""
    at = version(doc)
    while at < SCHEMA_VERSION:
        doc = MIGRATIONS[at](doc)
        at = doc["schema_version"] = at + 1
    return doc


@contextlib.contextmanager
def _no_collection() -> Iterator[None]:
    """Cyclic garbage collection held off: parsing and checking a document make millions of
    objects and no cycle, and collections triggered by them would double the time a large
    file takes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


#: Bytes as :func:`_long_integer` sees them: each digit a 0, what may come before a number a space.
_NUMBER_VIEW = bytes.maketrans(b"123456789\t\n\r:,[-", b"0" * 9 + b" " * 7)
#: A number of 19 digits or more (never a fraction's, after a point, nor an exponent's, after an e).
_LONG = b" " + b"0" * 19
_SCAN_CHUNK = 1 << 22


def _long_integer(text: str) -> bool:
    """Whether ``text`` may hold an integer beyond 64 bits, which orjson would read as a float.

    Such an integer has 19 digits or more after a space, colon, comma, bracket or minus sign;
    so may a string (then json reads the document: slower, the same)."""
    if text[:1].isdigit():  # a number at the very start
        return True
    for start in range(0, len(text), _SCAN_CHUNK):
        chunk = text[start : start + _SCAN_CHUNK + len(_LONG) - 1].encode("utf-8", "surrogatepass")
        if _LONG in chunk.translate(_NUMBER_VIEW):
            return True
    return False


def parse(text: str) -> Any:
    """The JSON value of ``text`` exactly as :func:`json.loads` reads it, and its errors.

    orjson reads it when installed, except where it would read a document otherwise: one
    it refuses (NaN or Infinity, which json reads and the validity rule then names, a number
    beyond a double, nesting deeper than 1024, a lone surrogate, any JSON error) is read
    again by json, which reads it or says what is wrong as it always did; one that may hold
    an integer beyond 64 bits (orjson reads a float) is read by json alone.
    """
    if _orjson is not None and not _long_integer(text):
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(text)


#: A key whose closing quote a space parts from its colon (or a string that holds such text).
_SPACED_KEY = re.compile(r'"[ \t\n\r]+:')


def _keys_unique(text: str, doc: Any) -> bool:
    """Whether no object of the JSON ``text`` (parsed: ``doc``) repeats a key, where counting proves it.

    Each ``":`` of ``text`` ends a key or opens a string starting with a colon, unless a key
    is spaced from its colon, a quote escaped before a colon (``\\":``) or a colon escaped
    (``\\u003a``). orjson writes ``doc`` compact, strings as they are: without ``\\":`` there,
    its count is ``doc``'s keys and such strings, never more than the text's, so the same
    count means no key was dropped. False where counting cannot tell (:func:`_duplicate_key` reads it)."""
    escaped = "\\" in text
    if _orjson is None or _orjson_dumps is None or _SPACED_KEY.search(text):
        return False
    if escaped and ('\\":' in text or "\\u003a" in text or "\\u003A" in text):
        return False
    try:
        written = _orjson_dumps(doc)
    except TypeError:  # orjson's JSONEncodeError: an integer beyond 64 bits
        return False
    if escaped and b'\\":' in written:
        return False
    return text.count('":') == written.count(b'":')


def _duplicate_key(text: str) -> str | None:
    """The first key found given twice in one object of the JSON ``text`` (read as json reads it), if any."""
    found: list[str] = []

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) != len(pairs) and not found:
            counts = collections.Counter(key for key, _ in pairs)
            found.append(next(key for key, _ in pairs if counts[key] > 1))
        return obj

    json.loads(text, object_pairs_hook=unique)
    return found[0] if found else None


def read_document(path: str | Path) -> dict[str, Any]:
    """The JSON object of a results file as written: neither migrated nor validated; UserError (one line) otherwise.

    A UTF-8 byte order mark before it is passed over (editors on Windows write one); a key
    given twice in one object is refused (json would keep the last value silently)."""
    path = Path(path)
    text = read_regular_text(path, MAX_RESULTS_BYTES, "results file").removeprefix("\ufeff")
    if not text or text.isspace():
        raise UserError(f"{path}: the file is empty, not an hwbench results file")
    try:
        with _no_collection():
            doc = parse(text)
            key = None if not isinstance(doc, dict) or _keys_unique(text, doc) else _duplicate_key(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); the file may be truncated"
        ) from None
    except (ValueError, RecursionError) as exc:  # a number of too many digits, arrays nested too deep
        raise UserError(f"{path}: not a JSON document hwbench can read ({exc.__class__.__name__}: {exc})") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: not an hwbench results file (top level is not an object)")
    if key is not None:
        raise UserError(
            f"{path}: the key {show(key)} is given twice in one object, so which value counts is unclear: keep one"
        )
    return doc


def read(path: str | Path) -> dict[str, Any]:
    """Read, parse and migrate a results file, without validating it; UserError (one line) on any problem."""
    doc = read_document(path)
    try:
        return migrate(doc)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None


def load(path: str | Path) -> Document:
    """Read, validate (:func:`validate`: an older file against its own version's schema too) and
    migrate a results file; UserError with one line on any problem."""
    with _no_collection():  # one window for all: no collection between them either
        doc = read_document(path)
        try:
            own = version(doc)
        except UserError as exc:
            raise UserError(f"{path}: {exc}") from None
        problems = validate(doc)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        of = f" (schema_version {own})" if own != SCHEMA_VERSION else ""
        raise UserError(f"{path}: invalid results file{of}: {problems[0]}{more}; `hwbench validate` lists all")
    return cast(Document, migrate(doc))  # valid against the schema the Document declares


def dumps(doc: Mapping[str, Any]) -> str:
    """Serialise a results document (a :class:`~hwbench.core.results_types.Document`, or the plain
    dict of a command that does not build one yet; non-finite numbers become null)."""
    return json.dumps(finite(doc), indent=1, allow_nan=False) + "\n"


#: How many next free names :func:`write_new` tries before giving up (each taken meanwhile).
MAX_NAME_TRIES = 1000


def _cannot_write(path: Path, exc: OSError, option: str) -> UserError:
    return UserError(f"cannot write {path}: {exc.strerror or exc}; choose another {option}")


def _link_new(tmp: str, target: Path) -> bool:
    """Give the written file ``tmp`` the name ``target`` unless that name exists (then False)."""
    try:
        os.link(tmp, target)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: exclusive create, then replace
        try:
            os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        os.replace(tmp, target)
        return True


def write_new(
    path: str | Path, text: str, *, next_free: bool = False, what: str = "file", option: str = "--out"
) -> Path:
    """Write ``text`` to ``path`` atomically and never replace a file; the path written.

    The text goes to a temporary file in the same folder, is flushed to disk, then
    hard-linked to its name, which fails if a file of that name appeared meanwhile: then
    UserError, or with ``next_free`` the next free ``stem.N`` name beside it, so that
    finished work is never dropped. A failed write (read-only folder, full disk) is
    UserError with one line; no temporary file is left behind. ``what`` and ``option``
    name the file and the option that chose it in messages.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder: give {option} a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _cannot_write(path, exc, option) from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; the file is as readable as any other
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        target = free_path(path) if next_free else path
        for _ in range(MAX_NAME_TRIES):
            if _link_new(tmp, target):
                return target
            if not next_free:
                raise UserError(f"{path} already exists; hwbench never overwrites a {what}: choose another {option}")
            target = free_path(path)
        raise UserError(f"{path}: {MAX_NAME_TRIES} free names beside it were taken meanwhile; choose another {option}")
    except OSError as exc:
        raise _cannot_write(path, exc, option) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save(doc: Mapping[str, Any], path: str | Path, next_free: bool = False) -> Path:
    """Write ``doc`` to ``path`` as :func:`write_new` does; the path written.

    Without ``next_free`` an existing ``path`` is refused; with it the first free
    ``stem.N.json`` beside it is taken, even one that another process took meanwhile.
    """
    return write_new(path, dumps(doc), next_free=next_free, what="results file")


def free_path(path: str | Path) -> Path:
    """``path`` if free, else the first ``stem.N.json`` beside it that is (for late clashes)."""
    path = Path(path)
    n = 1
    candidate = path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
        n += 1
    return candidate


def _nearest_folder(path: Path) -> Path:
    """The nearest folder of ``path`` that exists (or the file in the way of creating one)."""
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _probe_write(folder: Path) -> None:
    """Create and remove a file in ``folder``; OSError when that cannot be done."""
    fd, probe = tempfile.mkstemp(prefix=".hwbench-probe-", dir=folder)
    os.close(fd)
    os.unlink(probe)


def check_writable(path: str | Path, option: str = "--out") -> None:
    """UserError (one line) when ``path``'s folder cannot be created or written.

    Checked by writing: a file is created and removed in the nearest existing folder,
    which holds for root too (a read-only file system refuses everyone).
    """
    path = Path(path)
    folder = _nearest_folder(path)
    if not folder.is_dir():
        raise UserError(f"cannot write {path}: {folder} is a file, not a folder; choose another {option}")
    try:
        _probe_write(folder)
    except OSError as exc:
        raise UserError(
            f"cannot write {path}: folder {folder} is not writable ({exc.strerror or exc}); choose another {option}"
        ) from None


def check_new(path: str | Path, option: str = "--out") -> None:
    """Refuse ``path`` before any work: UserError when it exists, is a folder or cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder: give {option} a file name")
    if path.exists() or path.is_symlink():
        raise UserError(f"{path} already exists; hwbench never overwrites a file: choose another {option}")
    check_writable(path, option)


def fallback_path(path: str | Path) -> Path:
    """Where to put a results file that could not be written at ``path``.

    ``hwbench-rescued-STEM-PID.json`` in the current folder when it is writable (and not
    the folder that failed), else in the system's temporary folder; UserError when
    neither can be written.
    """
    path = Path(path)
    name = f"hwbench-rescued-{path.stem}-{os.getpid()}.json"
    for folder in (Path("."), Path(tempfile.gettempdir())):
        try:
            if os.path.samefile(folder, path.parent):
                continue
        except OSError:  # the folder that failed does not exist (or cannot be looked at): not the same
            pass
        try:
            _probe_write(folder)
        except OSError:
            continue
        return folder.absolute() / name
    raise UserError(
        f"cannot rescue the results of {path}: neither the current folder nor {tempfile.gettempdir()} is writable"
    )
