"""Wall time of the default quick run (``hwbench run``, every backend, kernel, dtype and device
found here), first with empty caches (hwbench's binaries, PoCL's and pyopencl's kernel caches,
Triton's, CUDA's and CuPy's: every compiler's first build) and then again with the caches that
run left. Intel's OpenCL CPU compiler and CLBlast keep no cache of their own: they compile anew
in every run.

    .venv/bin/python tests/benchmarks/bench_quick_run.py [--warm N]

The cache folders and the results files live in a temporary folder this script removes.
Prints each run's seconds, exit status and record count, and /proc/loadavg before and after
(other work on the machine lengthens every run).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _loadavg() -> str:
    try:
        return Path("/proc/loadavg").read_text().strip()
    except OSError:
        return "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=1, help="runs after the first (default 1)")
    args = parser.parse_args()
    hwbench = [sys.executable, "-m", "hwbench"]
    print(f"loadavg before: {_loadavg()}")
    folder = Path(tempfile.mkdtemp(prefix="hwbench-bench-quick-"))
    try:
        caches = ("HWBENCH_CACHE_DIR", "XDG_CACHE_HOME", "POCL_CACHE_DIR", "TRITON_CACHE_DIR", "CUDA_CACHE_PATH")
        env = {**os.environ, **{name: str(folder / name.lower()) for name in (*caches, "CUPY_CACHE_DIR")}}
        for number in range(1 + args.warm):
            out = folder / f"run{number}.json"
            start = time.perf_counter()
            proc = subprocess.run([*hwbench, "run", "-q", "-o", str(out)], env=env, capture_output=True, text=True)
            wall = time.perf_counter() - start
            records = len(json.loads(out.read_text())["records"]) if out.exists() else 0
            label = "cold (empty caches)" if number == 0 else f"warm {number}"
            print(f"{label}: {wall:.1f} s, exit status {proc.returncode}, {records} records")
            if proc.returncode not in (0, 1):
                print(proc.stderr.strip()[-2000:], file=sys.stderr)
                return 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"loadavg after: {_loadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
