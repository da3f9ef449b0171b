"""Wall time of the default quick run (``hwbench run``, every backend, kernel, dtype and device
found here), first with an empty cache folder (every compiler's first build: PoCL, Intel's
OpenCL compiler, llvmlite, CLBlast) and then again with the caches that run left.

    .venv/bin/python tests/benchmarks/bench_quick_run.py [--warm N]

The cache folder (``HWBENCH_CACHE_DIR``) and the results files live in a temporary folder this
script removes. Prints each run's seconds, exit status and record count, and /proc/loadavg
before and after (other work on the machine lengthens every run).
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
        env = {**os.environ, "HWBENCH_CACHE_DIR": str(folder / "cache")}
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
