"""Writable folders for hwbench's own files and for the caches of the compilers and runtimes its
backends drive.

hwbench's cache folder is the first writable one of ``$HWBENCH_CACHE_DIR`` (else
``$XDG_CACHE_HOME/hwbench``, else ``~/.cache/hwbench``), ``<sys.prefix>/var/hwbench`` and
``<temporary folder>/hwbench-cache-<uid>`` (:func:`cache_root`).

A tool's cache (:data:`TOOLS`) stays where the user's setting, else the tool's own default, puts
it while that folder is writable. Where it is not (a read-only HOME) the tool fails or, as PoCL
does, quietly lists no device; :func:`ensure_caches` then points the tool's variable at a folder
under hwbench's cache folder and says so in each :class:`CacheChoice`'s ``note``.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ["HOME"]) if environ.get("HOME") else Path(os.path.expanduser("~"))


def _xdg(environ: Mapping[str, str]) -> Path:
    return Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else _home(environ) / ".cache"


@dataclass(frozen=True)
class CacheTool:
    """One tool's cache: the variable that moves it and the folder it uses when that is unset."""

    label: str
    variable: str
    subfolder: str  # its folder's name under hwbench's cache folder when hwbench moves it
    default: Callable[[Mapping[str, str]], Path]


#: The caches hwbench's backends use, by name. ``xdg`` is the user's cache home, where PoCL
#: (``pocl/kcache``), pyopencl's compiler cache and its invoker cache (pytools) go by default.
TOOLS: dict[str, CacheTool] = {
    "xdg": CacheTool(
        "the cache folder of PoCL and pyopencl", "XDG_CACHE_HOME", "xdg", lambda env: _home(env) / ".cache"
    ),
    "pocl": CacheTool("PoCL's kernel cache", "POCL_CACHE_DIR", "pocl", lambda env: _xdg(env) / "pocl" / "kcache"),
    "triton": CacheTool(
        "Triton's cache",
        "TRITON_CACHE_DIR",
        "triton",
        lambda env: Path(env.get("TRITON_HOME") or _home(env)) / ".triton" / "cache",
    ),
    "cuda": CacheTool("CUDA's JIT cache", "CUDA_CACHE_PATH", "cuda", lambda env: _home(env) / ".nv" / "ComputeCache"),
    "cupy": CacheTool(
        "CuPy's kernel cache", "CUPY_CACHE_DIR", "cupy", lambda env: _home(env) / ".cupy" / "kernel_cache"
    ),
}


def writable(folder: Path) -> bool:
    """Whether files can be made in ``folder`` (made, with its parents, when missing): tried, not
    read from permission bits, which root ignores."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hwbench-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError:
        return False
    return True


def _temp_root() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"hwbench-cache-{uid}"


def _private(folder: Path) -> bool:
    """``folder`` made (mode 0700) or found, a folder of this user's and not a link, and writable."""
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError:
        return False
    mine = not hasattr(os, "getuid") or info.st_uid == os.getuid()
    return stat.S_ISDIR(info.st_mode) and mine and writable(folder)


def cache_roots(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """hwbench's cache folder, then the fallbacks where it is not writable (the last one, in the
    temporary folder, is used only when it is this user's own)."""
    first = Path(environ["HWBENCH_CACHE_DIR"]) if environ.get("HWBENCH_CACHE_DIR") else _xdg(environ) / "hwbench"
    return [first, Path(sys.prefix) / "var" / "hwbench", _temp_root()]


def cache_root(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The first writable of :func:`cache_roots` (made where missing); None if none is."""
    *roots, temp = cache_roots(environ)
    found = next((root for root in roots if writable(root)), None)
    return found if found is not None else temp if _private(temp) else None


@dataclass(frozen=True)
class CacheChoice:
    """Where one tool's cache goes: ``folder`` (None when nothing is writable); ``moved_from``, the
    unwritable folder it would have used, when hwbench chose another (else None)."""

    tool: str
    folder: Path | None
    moved_from: Path | None = None
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        """The choice as a record's environment entry."""
        return {
            "variable": TOOLS[self.tool].variable,
            "folder": None if self.folder is None else str(self.folder),
            "moved_from": None if self.moved_from is None else str(self.moved_from),
            "note": self.note,
        }


def choose(tool: str, environ: Mapping[str, str] = os.environ) -> CacheChoice:
    """Where ``tool``'s cache goes: the user's setting or the tool's default while writable, else a
    folder under hwbench's cache folder. Makes the folder; changes no environment."""
    spec = TOOLS[tool]
    own = environ.get(spec.variable)
    wanted = Path(own) if own else spec.default(environ)
    if writable(wanted):
        return CacheChoice(tool, wanted)
    setting = f"{spec.variable}={own}" if own else f"{wanted} ({spec.variable} unset)"
    root = cache_root(environ)
    folder = None if root is None else root / spec.subfolder
    if folder is None or not writable(folder):
        tried = ", ".join(str(r) for r in cache_roots(environ))
        note = f"{spec.label}: {setting} is not writable, nor is any cache folder of hwbench's ({tried})"
        return CacheChoice(tool, None, wanted, note)
    return CacheChoice(tool, folder, wanted, f"{spec.label}: {setting} is not writable; {spec.variable}={folder}")


#: This process's choices: each tool reads its variable when it starts, so hwbench chooses once.
_CHOSEN: dict[str, CacheChoice] = {}


def ensure_caches(tools: Iterable[str], environ: MutableMapping[str, str] = os.environ) -> list[CacheChoice]:
    """Choose each tool's cache in order (once per process) and set the variable of those moved;
    call before the tool starts. Returns the choices, the ones moved with a note."""
    choices = []
    for tool in tools:
        if tool not in _CHOSEN:
            choice = choose(tool, environ)
            if choice.moved_from is not None and choice.folder is not None:
                environ[TOOLS[tool].variable] = str(choice.folder)
            _CHOSEN[tool] = choice
        choices.append(_CHOSEN[tool])
    return choices


def cache_notes(choices: Iterable[CacheChoice]) -> list[str]:
    """The notes of the choices hwbench had to make (a tool's own folder was not writable)."""
    return [c.note for c in choices if c.note]
