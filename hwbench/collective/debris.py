"""Names that say who owns them, and the sweep of what killed runs left behind.

Everything a collective run creates outside its own memory (the launch folder under the
temporary directory, shared segments and Open MPI's folder in /dev/shm) is named
``hwbench-ar-<pid>-<start>-<random>...``: the pid of the owning process and its start
time (``/proc/<pid>/stat`` field 22, clock ticks since boot), so a reused pid is not
taken for the owner. A run cleans up after itself; what a SIGKILL left is removed by
:func:`sweep_stale` at the start of the next collective run, once its owner is gone. An
entry whose owner is alive, that belongs to another user, or whose name carries no owner
is left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path

SHM_DIR = Path("/dev/shm")
#: Every file and folder a collective run creates starts with this.
PREFIX = "hwbench-ar"
_OWNED = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-[0-9a-f]{{8}}(?:-|$)")


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), or None when there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return int(fields[19])  # field 22; the list starts at field 3 (state)


def owner_token(pid: int | None = None) -> str:
    """A fresh name part owned by ``pid`` (this process by default): ``<pid>-<start>-<random>``."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{start_time(pid) or 0}-{uuid.uuid4().hex[:8]}"


def owner(name: str) -> tuple[int, int] | None:
    """The (pid, start time) a name says owns it, or None for a name without an owner."""
    found = _OWNED.match(name)
    return (int(found.group(1)), int(found.group(2))) if found else None


def owner_alive(pid: int, start: int) -> bool:
    """Whether the process that started as ``pid`` at ``start`` still runs (a zombie does not).

    Where /proc cannot say (no permission), the owner counts as alive: nothing is removed.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return True
    try:
        fields = text.rsplit(")", 1)[1].split()
        return fields[0] != "Z" and int(fields[19]) == start
    except (IndexError, ValueError):
        return True


def sweep_stale(folders: Iterable[Path] | None = None) -> list[Path]:
    """Remove this user's entries in ``folders`` (/dev/shm and the temporary directory by
    default) whose owner is gone; return what was removed."""
    if not Path("/proc/self/stat").exists():  # no way to tell a live owner from a dead one
        return []
    removed = []
    for folder in folders if folders is not None else (SHM_DIR, Path(tempfile.gettempdir())):
        try:
            entries = list(folder.glob(f"{PREFIX}-*"))
        except OSError:
            continue
        for entry in entries:
            who = owner(entry.name)
            if who is None or owner_alive(*who):
                continue
            try:
                if entry.lstat().st_uid != os.getuid():
                    continue
            except OSError:  # another run swept it first
                continue
            remove(entry)
            if not os.path.lexists(entry):
                removed.append(entry)
    return removed


def remove(path: Path) -> None:
    """Remove a file or folder tree, as far as this user may; nothing when it is not there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
        return
    try:
        path.unlink()
    except OSError:
        pass
