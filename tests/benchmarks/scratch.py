"""What the training benchmarks share: the machine's load, and a scratch folder whose compile
caches start empty and go with it."""

from __future__ import annotations

import os
from pathlib import Path

#: Cache folders pointed into the scratch folder, so the first launch compiles everything.
CACHES = ("HWBENCH_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME")


def loadavg() -> str:
    """/proc/loadavg, or ``unknown``."""
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def scratch_env(folder: Path) -> dict[str, str]:
    """This environment with every compile cache in ``folder``; ``data`` and ``checkpoints`` made there."""
    for name in ("data", "checkpoints"):
        (folder / name).mkdir()
    return {**os.environ, **{name: str(folder / name.lower()) for name in CACHES}}
