"""A default ``hwbench run`` at the host's ISA level and at every lower x86-64 level it can emulate.

    python tests/benchmarks/bench_isa_levels.py [--backend cpu] [--levels host,x86-64-v4,x86-64-v3,x86-64-v2]

For each level, one ``hwbench run`` (quick profile; ``HWBENCH_CPU_ISA`` set for the emulated
ones) in a fresh process, then from its results file: the exit status, the records that are
``implausible`` (vendor libraries and portable kernels apart), the fp32 peak the portable
kernels are gated on, the FMAs per cycle its loop measured and the clock, and the peak's share of
``cores x lanes x 2 x FMA pipes x clock`` with the pipes the microarchitecture table gives for the
core (or, where the table does not know it, the whole FMA units counted). Targets (issue): exit 0,
no vendor record implausible, fp32 peak within 10 % of that product.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _run(level: str, backend: str | None, out: Path) -> tuple[int, float]:
    env = dict(os.environ)
    env.pop("HWBENCH_CPU_ISA", None)
    if level != "host":
        env["HWBENCH_CPU_ISA"] = level
    cmd = [sys.executable, "-m", "hwbench", "run", "-q", "-o", str(out)]
    if backend:
        cmd += ["--backend", backend]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        print(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "", file=sys.stderr)
    return done.returncode, time.perf_counter() - start


def _summary(doc: dict[str, Any]) -> dict[str, Any]:
    cpu = next(d for b in doc["backends"] if b["name"] == "cpu" for d in b.get("devices") or [])
    extra = cpu.get("extra") or {}
    portable = extra.get("portable_peak") or {}
    peak = (portable.get("tflops") or cpu["peak"]["tflops"])["fp32"]
    per_cycle = portable.get("fma_per_cycle_measured", extra.get("fma_per_cycle_measured"))
    bits = portable.get("vector_bits", extra.get("vector_bits"))
    clock = portable.get("clock_ghz", extra.get("clock_ghz"))
    pipes = portable.get("fma_units", extra.get("fma_units"))
    cores = cpu.get("compute_units")
    formula = cores * (bits // 32) * 2 * pipes * clock / 1e3 if all((cores, bits, pipes, clock)) else None
    bad = [r for r in doc["records"] if r["status"] == "implausible"]
    return {
        "isa": extra.get("isa_level"),
        "peak": peak,
        "per_cycle": per_cycle,
        "clock": clock,
        "share": peak / formula if formula else None,
        "implausible_native": sum(1 for r in bad if r.get("impl_kind") == "native"),
        "implausible_portable": sum(1 for r in bad if r.get("impl_kind") != "native"),
        "records": len(doc["records"]),
        "failed": sum(1 for r in doc["records"] if r["status"] not in ("ok", "skipped")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default=None, help="as hwbench run --backend (default: every backend)")
    parser.add_argument("--levels", default="host,x86-64-v4,x86-64-v3,x86-64-v2")
    args = parser.parse_args()
    print(f"{'level':<11} {'exit':>4} {'wall s':>7} {'records':>7} {'failed':>6} {'impl. native':>12} "
          f"{'impl. portable':>14} {'fp32 peak':>9} {'FMA/cyc':>7} {'GHz':>5} {'of formula':>10}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="hwbench-isa-") as folder:
        for level in args.levels.split(","):
            out = Path(folder) / f"{level}.json"
            status, wall = _run(level, args.backend, out)
            if not out.exists():
                print(f"{level:<11} {status:>4} {wall:7.1f}  (no results file: the level is not one this CPU runs?)")
                continue
            s = _summary(json.loads(out.read_text()))
            share = f"{s['share']:.3f}" if s["share"] else "n/a"
            print(
                f"{level:<11} {status:>4} {wall:7.1f} {s['records']:>7} {s['failed']:>6} {s['implausible_native']:>12} "
                f"{s['implausible_portable']:>14} {s['peak']:9.4f} {s['per_cycle'] or 0:7.2f} {s['clock'] or 0:5.2f} "
                f"{share:>10}"
            )


if __name__ == "__main__":
    main()
