"""Compiled code kept between runs, in hwbench's cache folder (:func:`hwbench.core.caches.cache_root`).

A binary is filed under the hash of everything that made it (:func:`binary_key`: the source
text, the compiler, its version and the code that drives it, the target and its options), so a
changed kernel, compiler or device never finds an old one. Each file holds a header with the
hash of its contents, and a file that does not match it is ignored: a torn or damaged file is a
miss. Files are written to a temporary name beside them and renamed, so concurrent runs never
see half a file. The cached code is run, so only a folder of this user's that nobody else may
write is used (made ``0700``), and only files of this user's are loaded. ``HWBENCH_BINARY_CACHE=0``
turns the cache off; the ``binaries`` folder may be deleted at any time.

Kinds: ``cpu`` (llvmlite's machine code for the host), ``spirv`` (validated SPIR-V modules),
``opencl`` (OpenCL program binaries, per device and driver).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

from hwbench.core.caches import cache_root

SUBFOLDER = "binaries"
MAGIC = b"hwbench-binary-1\n"
_DIGEST = 32


def binary_key(*parts: object) -> str:
    """The hash that names a binary: of every part, each length-prefixed (bytes as they are,
    anything else as its text)."""
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


#: This process's cache folder, by the variables that choose it (found once: finding it writes a probe).
_ROOTS: dict[tuple[str | None, ...], Path | None] = {}
_ROOT_VARIABLES = ("HWBENCH_CACHE_DIR", "XDG_CACHE_HOME", "HOME")


def _folder(kind: str, environ: Mapping[str, str]) -> Path | None:
    """The folder of ``kind``'s binaries, made where missing; None where the cache is off or the
    folder is not this user's alone."""
    if environ.get("HWBENCH_BINARY_CACHE", "1") == "0":
        return None
    chosen_by = tuple(environ.get(v) for v in _ROOT_VARIABLES)
    if chosen_by not in _ROOTS:
        _ROOTS[chosen_by] = cache_root(environ)
    root = _ROOTS[chosen_by]
    if root is None:
        return None
    folder = root / SUBFOLDER / kind
    try:
        for part in (root / SUBFOLDER, folder):
            part.mkdir(mode=0o700, exist_ok=True)
        return folder if _own(root / SUBFOLDER) and _own(folder) else None
    except OSError:
        return None


def _own(path: Path) -> bool:
    """Whether ``path`` is this user's and writable by nobody else."""
    info = os.lstat(path)
    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return mine and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def load(kind: str, key: str, environ: Mapping[str, str] = os.environ) -> bytes | None:
    """The binary filed under ``key``, or None (absent, unreadable, or not what was written)."""
    folder = _folder(kind, environ)
    if folder is None:
        return None
    try:
        if not _own(folder / key):
            return None
        data = (folder / key).read_bytes()
    except OSError:
        return None
    head = len(MAGIC) + _DIGEST
    if len(data) < head or not data.startswith(MAGIC):
        return None
    body = data[head:]
    return body if hashlib.sha256(body).digest() == data[len(MAGIC) : head] else None


def store(kind: str, key: str, body: bytes, environ: Mapping[str, str] = os.environ) -> bool:
    """File ``body`` under ``key``; False where the cache folder cannot be written (nothing is
    left behind then)."""
    folder = _folder(kind, environ)
    if folder is None:
        return False
    temp: str | None = None
    try:
        handle, temp = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=folder)
        with os.fdopen(handle, "wb") as out:
            out.write(MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(temp, folder / key)
    except OSError:
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
        return False
    return True
