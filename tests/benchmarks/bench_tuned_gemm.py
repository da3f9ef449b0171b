"""The llvm SGEMM against NumPy/OpenBLAS as ``hwbench run`` reports them, derived and after ``hwbench tune``.

    python tests/benchmarks/bench_tuned_gemm.py [--isa x86-64-v3] [--budget 120] [--run-budget 1.0] [--repeat 5]

In a tuning cache of its own (a temporary ``XDG_CACHE_HOME``): ``hwbench tune --budget S`` over
the llvm GEMMs at 1024^3, 2048^3 and 333x517x259, then ``--repeat`` pairs of ``hwbench run`` of
the llvm and numpy GEMMs, one with the derived configurations (``HWBENCH_TUNING=0``) and one
using what was tuned, in alternating order; each run's own medians (flushed, re-checked after
timing) give the ratio ``t_numpy / t_llvm``, and the table shows each ratio's median over the
runs with its range (a busy or shared machine moves single runs by tens of percent).
``--isa`` sets ``HWBENCH_CPU_ISA`` for every command; hold OpenBLAS to
the same level in that command to compare like with like (``OPENBLAS_CORETYPE=Haswell`` for
x86-64-v3). Targets (issue): tuned >= 0.9x at 1024^3 and 2048^3 and >= 0.7x at 333x517x259;
derived >= 0.8x at 2048^3.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = ("gemm:M=1024,N=1024,K=1024", "gemm:M=2048,N=2048,K=2048", "gemm:M=333,N=517,K=259")


def _hwbench(env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "hwbench", *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"hwbench {args[0]} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return time.perf_counter() - start


def _ratios(path: Path) -> dict[str, tuple[float, str, dict]]:
    doc = json.loads(path.read_text())
    medians: dict[tuple[str, str], dict] = {}
    for record in doc["records"]:
        if record["status"] == "ok":
            shape = "x".join(str(record["shape"][d]) for d in "MNK")
            medians[(shape, record["impl"])] = record
    out = {}
    for (shape, impl), record in medians.items():
        if impl == "llvm" and (shape, "numpy") in medians:
            ratio = medians[(shape, "numpy")]["timing"]["median_s"] / record["timing"]["median_s"]
            config = record.get("config") or {}
            tile = {k: config.get(k) for k in ("MR", "NR_VECTORS", "mc", "nc", "kc")}
            out[shape] = (ratio, (config.get("tuning") or {}).get("source", "?"), tile)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default=None)
    parser.add_argument("--budget", type=float, default=120.0, help="hwbench tune --budget")
    parser.add_argument("--run-budget", type=float, default=1.0, help="hwbench run --budget (timed s per case)")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each configuration, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hwbench-tuned-") as folder:
        env = dict(os.environ, XDG_CACHE_HOME=folder)
        if args.isa:
            env["HWBENCH_CPU_ISA"] = args.isa
        shapes = [item for shape in SHAPES for item in ("--shape", shape)]
        common = ["--backend", "cpu", "--kernel", "gemm", "--dtype", args.dtype, *shapes]
        run = [*common, "--impl", "llvm,numpy", "--budget", str(args.run_budget), "-q"]
        tune_s = _hwbench(env, "tune", *common, "--impl", "llvm", "--budget", str(args.budget), "-q")
        derived: dict[str, list[float]] = {}
        tuned: dict[str, list[float]] = {}
        configs: dict[str, tuple[str, dict]] = {}
        for turn in range(args.repeat):
            for tuning in ("0", "1") if turn % 2 == 0 else ("1", "0"):
                out = Path(folder) / f"run-{turn}-{tuning}.json"
                _hwbench({**env, "HWBENCH_TUNING": tuning}, "run", *run, "-o", str(out))
                for shape, (ratio, source, tile) in _ratios(out).items():
                    (tuned if tuning == "1" else derived).setdefault(shape, []).append(ratio)
                    if tuning == "1":
                        configs[shape] = (source, tile)
    print(f"isa {args.isa or 'host'}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}; "
          f"hwbench tune --budget {args.budget:g} took {tune_s:.1f} s; {args.repeat} runs each")  # fmt: skip
    print(f"{'shape':<16} {'derived/np (range)':>20} {'tuned/np (range)':>20}  tuned configuration")
    for shape, ratios in derived.items():
        source, tile = configs.get(shape, ("?", {}))
        print(f"{shape:<16} {_spread(ratios):>20} {_spread(tuned.get(shape, [])):>20}  {source}: {tile}")


def _spread(ratios: list[float]) -> str:
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


if __name__ == "__main__":
    main()
