"""STREAM triad figures on this machine, all from one run: hwbench's triads against a STREAM C triad.

    .venv/bin/python tests/benchmarks/bench_stream.py [--n 80000000] [--reps 20]

Writes a dozen lines of STREAM-style C (OpenMP, ``-O3 -march=native -fopenmp``, all cores) into
a temporary folder it removes, compiles it with gcc and runs it on ``--n`` doubles; then, on
arrays of the same size and interleaved call by call, the cpu backend's llvmlite triad (with and without non-temporal
stores), its natives (torch's one-pass ``add(alpha=)``, NumPy's two passes) and the opencl
backend's OpenCL C triad on every OpenCL device, each prepared as ``hwbench run`` prepares it.
Every figure is the best of ``--reps`` calls (STREAM's convention), in GB/s as BabelStream
counts bytes (triad: 3 arrays); the C triad runs before and after them (the better counts). /proc/loadavg is
printed before and after: other work on the machine lowers every figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

STREAM_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
int main(int argc, char **argv) {
    long n = atol(argv[1]); int reps = atoi(argv[2]);
    double *a = malloc(n * 8), *b = malloc(n * 8), *c = malloc(n * 8), best = 1e30, s = 0.375;
    #pragma omp parallel for
    for (long i = 0; i < n; i++) { a[i] = 1.0; b[i] = 2.0; c[i] = 0.5; }
    for (int r = 0; r < reps; r++) {
        double t = omp_get_wtime();
        #pragma omp parallel for
        for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
        t = omp_get_wtime() - t; if (t < best) best = t;
    }
    printf("%.6f %d %g\n", 3.0 * 8 * n / best / 1e9, omp_get_max_threads(), a[n / 2]);
    return a[n / 2] != 2.1875;
}
"""


def stream_c(n: int, reps: int) -> float:
    """GB/s of the C triad's best call (compiled and run in a temporary folder, then removed)."""
    folder = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    try:
        (folder / "triad.c").write_text(STREAM_C)
        gcc = ["gcc", "-O3", "-march=native", "-fopenmp", "triad.c", "-o", "triad"]
        subprocess.run(gcc, cwd=folder, check=True)
        done = subprocess.run([str(folder / "triad"), str(n), str(reps)], capture_output=True, text=True, check=True)
        gbps, threads, _ = done.stdout.split()
        print(f"  STREAM C: {' '.join(gcc)}; OMP threads {threads}")
        return float(gbps)
    finally:
        shutil.rmtree(folder)


def interleaved_best(cases: dict[str, tuple[Any, Any]], nbytes: float, reps: int) -> dict[str, float]:
    """GB/s of each case's best of ``reps`` calls, taken in rounds of one call per case so that
    load from other work falls on every case alike (each called once untimed first)."""
    for prepared, _ in cases.values():
        prepared.run()
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(reps):
        for name, (prepared, timer) in cases.items():
            best[name] = min(best[name], timer.time(prepared.run))
    return {name: nbytes / t / 1e9 for name, t in best.items()}


def hwbench_cases(n: int, op: int) -> tuple[dict[str, tuple[Any, Any]], float]:
    """Every implementation of ``op`` on ``n`` doubles on the cpu and opencl backends, prepared
    and checked against the exact result, with its backend's timer; and the bytes one call moves."""
    from hwbench.core.registry import get_backend
    from hwbench.kernels.llvmir import cpu_launch
    from hwbench.kernels.llvmir.target import host_target
    from hwbench.kernels.stream import llvm
    from hwbench.kernels.stream.spec import KERNEL, op_name

    shape, dtype = {"op": op, "n": n}, "fp64"
    inputs = KERNEL.make_inputs(shape, dtype, 0)
    reference = KERNEL.reference(inputs, shape)
    cases: dict[str, tuple[Any, Any]] = {}
    cpu = get_backend("cpu")
    device = cpu.devices()[0]
    threads = cpu_launch.default_threads()
    for nt in (True, False):
        plan = llvm.launch(shape, dtype, host_target(), threads, nontemporal=nt)
        kernel = cpu_launch.prepare(llvm.build, inputs, dtype, plan, threads, host_target())
        cases[f"cpu llvm {op_name(op)} ({'non-temporal' if nt else 'cached'} stores)"] = (kernel, cpu.timer(device))
    for impl in cpu.implementations("stream"):
        if impl.kind == "native" and cpu.supports(impl, dtype, device).ok:
            prepared = cpu.prepare(impl, KERNEL, inputs, shape, dtype, device)
            cases[f"cpu {impl.name} {op_name(op)}"] = (prepared, cpu.timer(device))
    ocl = get_backend("opencl")
    if ocl.probe().ok:
        impl = next(i for i in ocl.implementations("stream") if i.name == "opencl")
        for dev in ocl.devices():
            if ocl.supports(impl, dtype, dev).ok:
                prepared = ocl.prepare(impl, KERNEL, inputs, shape, dtype, dev)
                cases[f"opencl {dev.name} opencl {op_name(op)}"] = (prepared, ocl.timer(dev))
    for name, (prepared, _) in cases.items():
        prepared.run()
        got = prepared.output if hasattr(prepared, "output") else prepared.result()
        assert np.array_equal(got, reference), f"{name}: the result differs from the exact one"
    return cases, KERNEL.bytes_moved(shape, dtype)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=80_000_000, help="doubles per array (STREAM's 80 M)")
    parser.add_argument("--reps", type=int, default=20, help="calls per figure; the best counts")
    args = parser.parse_args()
    print(f"loadavg before: {Path('/proc/loadavg').read_text().strip()}; cores {os.cpu_count()}", flush=True)
    start = time.perf_counter()
    before = stream_c(args.n, args.reps)
    cases, nbytes = hwbench_cases(args.n, 3)
    figures = interleaved_best(cases, nbytes, args.reps)
    del cases
    after = stream_c(args.n, args.reps)
    c = max(before, after)
    print(f"  STREAM C triad: {before:.2f} GB/s before, {after:.2f} GB/s after; the better counts", flush=True)
    native = max(v for k, v in figures.items() if k.startswith("cpu ") and "llvm" not in k)
    for name, gbps in figures.items():
        extra = f"  {gbps / native:.3f}x best native" if name.startswith("cpu llvm") else ""
        print(f"  {name}: {gbps:.2f} GB/s  {gbps / c:.3f}x STREAM C{extra}", flush=True)
    print(f"loadavg after: {Path('/proc/loadavg').read_text().strip()}; {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
