"""Tuned kernel configurations kept between runs, in hwbench's cache folder (``tuning/``).

``hwbench tune`` (:mod:`hwbench.run.tune`) times every candidate of a portable kernel's
configuration space on a device and files the fastest that passed parity under a
:class:`TuningKey`: the device (backend, name, architecture, driver, runtime and library
versions its description carries), the software (hwbench's version, a hash of the kernel's and
its lowering's source files, and what the backend names: llvmlite and LLVM, triton, torch,
pyopencl, the cores a CPU kernel runs on, an ISA restriction), the kernel, implementation,
dtype and **shape class**: per dimension, the power of two at or above it (M=1000 and M=1024
share a class; 0 and 1 stay themselves), so one tuning serves the nearby shapes a run times.
A changed kernel, library or device finds no old entry.

Each entry is one JSON file named by the key's hash, written to a temporary name and renamed,
in a folder of this user's alone (``0700``); a file that does not parse or validate is a miss.
Backends read it in ``prepare`` (:func:`chosen`); ``HWBENCH_TUNING=0`` makes every run use the
derived configurations. An export is one JSON document of entries (never overwriting a file);
an import validates every entry before it merges any.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwbench.core.backend import DeviceInfo, Implementation
from hwbench.core.binary_cache import binary_key
from hwbench.core.caches import cache_root
from hwbench.core.errors import UserError
from hwbench.core.host import package_version

SUBFOLDER = "tuning"
#: The format of an entry file and of an export (raised when their meaning changes).
FORMAT = 1
EXPORT_KIND = "hwbench-tuning"


def shape_class(shape: Mapping[str, int]) -> dict[str, int]:
    """Per dimension, the power of two at or above it (values under 2 stay as they are)."""
    return {name: int(v) if int(v) < 2 else 1 << (int(v) - 1).bit_length() for name, v in sorted(shape.items())}


def _pairs(mapping: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in mapping.items() if v is not None))


@dataclass(frozen=True)
class TuningKey:
    """What a tuned configuration is valid for (see the module's docstring)."""

    backend: str
    device: str
    arch: str
    driver: str
    runtime: str
    libraries: tuple[tuple[str, str], ...]
    software: tuple[tuple[str, str], ...]
    kernel: str
    impl: str
    dtype: str
    shape_class: tuple[tuple[str, int], ...]

    def as_json(self) -> dict[str, Any]:
        """The key as plain JSON (mappings for the pairs)."""
        return {
            "backend": self.backend,
            "device": self.device,
            "arch": self.arch,
            "driver": self.driver,
            "runtime": self.runtime,
            "libraries": dict(self.libraries),
            "software": dict(self.software),
            "kernel": self.kernel,
            "impl": self.impl,
            "dtype": self.dtype,
            "shape_class": dict(self.shape_class),
        }

    @classmethod
    def from_json(cls, data: Any) -> TuningKey:
        """The key ``data`` holds; ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("a key is not an object")
        texts = ("backend", "device", "arch", "driver", "runtime", "kernel", "impl", "dtype")
        bad = [name for name in texts if not isinstance(data.get(name), str)]
        maps = ("libraries", "software", "shape_class")
        bad += [name for name in maps if not isinstance(data.get(name), dict)]
        if bad:
            raise ValueError(f"a key lacks {', '.join(bad)}")
        dims = data["shape_class"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in dims.values()):
            raise ValueError("a key's shape_class is not a mapping of non-negative integers")
        return cls(
            backend=data["backend"],
            device=data["device"],
            arch=data["arch"],
            driver=data["driver"],
            runtime=data["runtime"],
            libraries=_pairs(data["libraries"]),
            software=_pairs(data["software"]),
            kernel=data["kernel"],
            impl=data["impl"],
            dtype=data["dtype"],
            shape_class=tuple(sorted((str(k), int(v)) for k, v in dims.items())),
        )

    def digest(self) -> str:
        """The hash an entry's file is named by."""
        return binary_key(json.dumps(self.as_json(), sort_keys=True))

    def label(self) -> str:
        """``backend kernel impl dtype class`` for tables and messages."""
        dims = ",".join(f"{k}={v}" for k, v in self.shape_class)
        return f"{self.backend} {self.device} {self.kernel} {self.impl} {self.dtype} class {dims}"


#: The source digests of this process, by package (the files do not change while it runs).
_DIGESTS: dict[tuple[str, ...], str] = {}


def sources_digest(*packages: str) -> str:
    """A hash of the ``.py`` and ``.cl`` files of each package's folder and its subfolders (found
    without importing its modules), so an entry tuned for other kernel code is never used."""
    if packages not in _DIGESTS:
        h = hashlib.sha256()
        for package in packages:
            spec = importlib.util.find_spec(package)
            folders = list(spec.submodule_search_locations or []) if spec else []
            for folder in map(Path, folders):
                for path in sorted(p for p in folder.rglob("*") if p.suffix in (".py", ".cl")):
                    if "__pycache__" not in path.parts:
                        h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
        _DIGESTS[packages] = h.hexdigest()[:16]
    return _DIGESTS[packages]


def key_for(
    device: DeviceInfo,
    impl: Implementation,
    dtype: str,
    shape: Mapping[str, int],
    software: Mapping[str, Any],
    packages: Iterable[str] = (),
) -> TuningKey:
    """The key of a case: ``software`` is what the backend says matters (library versions, cores),
    ``packages`` the kernel's and its lowering's packages, whose sources are hashed."""
    kernel_package = impl.entry.rpartition(".")[0]
    owned = {
        "hwbench": package_version("hwbench") or "unknown",
        "sources": sources_digest(kernel_package, *packages),
        **software,
    }
    return TuningKey(
        device.backend,
        device.name,
        device.arch,
        device.driver,
        device.runtime,
        _pairs(device.libraries),
        _pairs(owned),
        impl.kernel,
        impl.name,
        dtype,
        tuple(shape_class(shape).items()),
    )


@dataclass(frozen=True)
class Space:
    """A case's configuration space as a backend offers it: its key and the candidates (the first
    is the derived configuration, the one a run without a tuned entry uses)."""

    key: TuningKey
    candidates: list[dict[str, Any]]
    note: str = ""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Entry:
    """One tuned configuration: the fastest candidate that passed parity, its median and the
    derived configuration's (None where the derived one failed), when it was tuned, by what
    budget, how many candidates were timed of how many, the shape timed and the candidates dropped."""

    key: TuningKey
    config: dict[str, Any]
    median_s: float
    derived_median_s: float | None
    at: str
    budget_s: float
    candidates: int
    of: int
    shape: dict[str, int]
    dropped: int = 0
    derived: dict[str, Any] = field(default_factory=dict)

    def speedup(self) -> float | None:
        """The derived configuration's median over the tuned one's."""
        return None if not self.derived_median_s else self.derived_median_s / self.median_s

    def section(self) -> dict[str, Any]:
        """What a record's ``config.tuning`` says of a case run in this configuration."""
        speedup = self.speedup()
        return {
            "source": "tuned",
            "at": self.at,
            "budget_s": self.budget_s,
            "candidates": self.candidates,
            "of": self.of,
            "shape": dict(self.shape),
            "speedup_vs_derived": None if speedup is None else round(speedup, 4),
        }

    def as_json(self) -> dict[str, Any]:
        """The entry as plain JSON."""
        return {
            "key": self.key.as_json(),
            "config": self.config,
            "median_s": self.median_s,
            "derived_median_s": self.derived_median_s,
            "at": self.at,
            "budget_s": self.budget_s,
            "candidates": self.candidates,
            "of": self.of,
            "shape": self.shape,
            "dropped": self.dropped,
            "derived": self.derived,
        }

    @classmethod
    def from_json(cls, data: Any) -> Entry:
        """The entry ``data`` holds; ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("an entry is not an object")
        key = TuningKey.from_json(data.get("key"))
        if not isinstance(data.get("config"), dict) or not isinstance(data.get("shape"), dict):
            raise ValueError("an entry lacks its config or shape")
        if not (_number(data.get("median_s")) and data["median_s"] > 0 and _number(data.get("budget_s"))):
            raise ValueError("an entry's median_s or budget_s is not a positive number")
        derived = data.get("derived_median_s")
        if derived is not None and not (_number(derived) and derived > 0):
            raise ValueError("an entry's derived_median_s is not a positive number")
        counts = [data.get(name, 0) for name in ("candidates", "of", "dropped")]
        if not all(isinstance(c, int) and c >= 0 for c in counts) or not isinstance(data.get("at"), str):
            raise ValueError("an entry's candidates, of, dropped or at is malformed")
        return cls(
            key,
            dict(data["config"]),
            float(data["median_s"]),
            None if derived is None else float(derived),
            data["at"],
            float(data["budget_s"]),
            counts[0],
            counts[1],
            {str(k): int(v) for k, v in data["shape"].items()},
            counts[2],
            dict(data.get("derived") or {}),
        )


def _own(path: Path) -> bool:
    """Whether ``path`` is this user's and writable by nobody else."""
    info = os.lstat(path)
    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return mine and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class TuningStore:
    """The entries in ``folder`` (default: ``tuning/`` in hwbench's cache folder)."""

    def __init__(self, folder: Path | None = None, environ: Mapping[str, str] = os.environ) -> None:
        root = cache_root(environ) if folder is None else None
        self.folder = folder if folder is not None else (None if root is None else root / SUBFOLDER)

    def _usable(self, make: bool) -> Path | None:
        """The folder where it is this user's alone (made, ``0700``, where ``make``); else None."""
        if self.folder is None:
            return None
        try:
            if make:
                self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            return self.folder if self.folder.is_dir() and _own(self.folder) else None
        except OSError:
            return None

    def get(self, key: TuningKey) -> Entry | None:
        """The entry filed under ``key``, or None (absent, unreadable, malformed or not its key)."""
        folder = self._usable(make=False)
        if folder is None:
            return None
        entry = _read(folder / f"{key.digest()}.json")
        return entry if entry is not None and entry.key == key else None

    def entries(self) -> list[Entry]:
        """Every readable entry, by label."""
        folder = self._usable(make=False)
        found = [] if folder is None else [_read(p) for p in sorted(folder.glob("*.json"))]
        return sorted((e for e in found if e is not None), key=lambda e: (e.key.label(), e.at))

    def put(self, entry: Entry) -> Path:
        """File ``entry`` under its key (replacing the one there); UserError where nothing can be written."""
        folder = self._usable(make=True)
        if folder is None:
            raise UserError(f"the tuning cache folder {self.folder} is not writable, or not this user's alone")
        path = folder / f"{entry.key.digest()}.json"
        text = json.dumps({"format": FORMAT, "entry": entry.as_json()}, indent=1, sort_keys=True)
        temp: str | None = None
        try:
            handle, temp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=folder)
            with os.fdopen(handle, "w") as out:
                out.write(text + "\n")
            os.replace(temp, path)
        except OSError as exc:
            if temp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(temp)
            raise UserError(f"cannot write the tuning cache entry {path}: {exc.strerror or exc}") from exc
        return path

    def delete(self, match: Callable[[Entry], bool] = lambda entry: True) -> list[Entry]:
        """Remove the entries ``match`` accepts (every one by default); returns them."""
        removed = []
        for entry in self.entries():
            if match(entry) and self.folder is not None:
                with contextlib.suppress(FileNotFoundError):
                    (self.folder / f"{entry.key.digest()}.json").unlink()
                removed.append(entry)
        return removed


def _read(path: Path) -> Entry | None:
    try:
        if not _own(path):
            return None
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            return None
        return Entry.from_json(data.get("entry"))
    except (OSError, ValueError, TypeError):
        return None


def chosen(key: TuningKey, given: Mapping[str, Any] | None = None) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The configuration a backend's ``prepare`` uses and what the record's ``config.tuning`` says:
    ``given`` (a candidate the tuner times), else the tuned entry of ``key``, else None (the
    derived configuration; also with ``HWBENCH_TUNING=0``)."""
    if given is not None:
        return dict(given), {"source": "candidate"}
    entry = None if os.environ.get("HWBENCH_TUNING", "1") == "0" else TuningStore().get(key)
    if entry is None:
        return None, {"source": "derived"}
    return dict(entry.config), entry.section()


def export(entries: list[Entry], path: Path) -> None:
    """Write ``entries`` as one export document at ``path``, which must not exist (UserError)."""
    text = json.dumps({"kind": EXPORT_KIND, "format": FORMAT, "entries": [e.as_json() for e in entries]}, indent=1)
    try:
        with open(path, "x") as out:
            try:
                out.write(text + "\n")
            except OSError:
                path.unlink(missing_ok=True)  # a partial export would block the next one
                raise
    except FileExistsError:
        raise UserError(f"{path} already exists; hwbench never overwrites a file: choose another --export") from None
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from exc


def read_export(path: Path) -> list[Entry]:
    """The entries of the export at ``path``, every one validated; UserError naming the first fault."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise UserError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("kind") != EXPORT_KIND or not isinstance(data.get("entries"), list):
        raise UserError(f"{path} is not a tuning export of hwbench's (kind {EXPORT_KIND!r}, entries)")
    if data.get("format") != FORMAT:
        raise UserError(f"{path} is a tuning export of format {data.get('format')!r}; this hwbench reads {FORMAT}")
    entries = []
    for number, item in enumerate(data["entries"]):
        try:
            entries.append(Entry.from_json(item))
        except (ValueError, TypeError) as exc:
            raise UserError(f"{path}: entry {number} is malformed: {exc}") from None
    return entries


def merge(store: TuningStore, entries: Iterable[Entry]) -> tuple[int, int]:
    """File each of ``entries`` unless the store holds a newer one of its key; (filed, kept)."""
    filed = kept = 0
    for entry in entries:
        there = store.get(entry.key)
        if there is not None and there.at > entry.at:
            kept += 1
            continue
        store.put(entry)
        filed += 1
    return filed, kept
