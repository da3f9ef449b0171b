"""Run mypy over hwbench as it is installed: ``hwbench/`` with ``kernels/`` and ``backends/``
mapped to ``hwbench.kernels`` and ``hwbench.backends`` (the layout pyproject.toml installs).

mypy cannot follow setuptools' editable-install finder, so this lays the installed layout
out as symlinks in a temporary folder, checks it there and reports repository paths.
Exit status: mypy's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"kernels": ROOT / "kernels", "backends": ROOT / "backends"}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="hwbench-mypy-") as tmp:
        package = Path(tmp) / "hwbench"
        package.mkdir()
        for entry in (ROOT / "hwbench").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for name, target in MAPPED.items():
            (package / name).symlink_to(target)
        command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "-p", "hwbench"]
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, env={**os.environ, "MYPYPATH": tmp})
    out = done.stdout + done.stderr
    for name in MAPPED:
        out = out.replace(f"hwbench/{name}/", f"{name}/")
    print(out, end="")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
