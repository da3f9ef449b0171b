"""The llvmlite CPU GEMM against NumPy/OpenBLAS at one ISA level, derived and searched, in one run.

    python tests/benchmarks/bench_cpu_gemm_isa.py [--isa x86-64-v3] [--dtype fp32] [--reps 5] [--rounds 3]

For each shape (1024^3, 2048^3, 333x517x259), the kernel with the configuration derived from the
target's description, and the best of its ``tuning_space`` (each candidate timed for a few calls,
the fastest three timed again beside the native), against ``A @ B``. ``--isa`` compiles for a
smaller CPU than the host (``HWBENCH_CPU_ISA``'s levels). To compare like with like, hold
OpenBLAS to the same level for this one command (``OPENBLAS_CORETYPE=Haswell`` for x86-64-v3,
``Nehalem`` for v2), or unset ``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` for the host's own
kernel; the BLAS kernel threadpoolctl reports is printed. Every output is checked against the
float64 reference first. Targets (issue): derived >= 0.8x OpenBLAS at 2048^3; searched >= 0.9x at
1024^3 and 2048^3, >= 0.7x at 333x517x259.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from bench_llvm_vs_native import compare, time_calls

from hwbench.kernels.gemm import llvm as gemm
from hwbench.kernels.gemm.spec import KERNEL as GEMM
from hwbench.kernels.llvmir import cpu_launch
from hwbench.kernels.llvmir.target import CPUTarget
from hwbench.run.parity import check

SHAPES = ((1024, 1024, 1024), (2048, 2048, 2048), (333, 517, 259))


def _blas() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # optional: the kernel name is then not printed
        return "threadpoolctl not installed"
    return ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')}" for i in threadpool_info())


def _bind(inputs: dict[str, np.ndarray], shape: dict[str, int], dtype: str, target: CPUTarget, config: dict | None):
    threads = cpu_launch.default_threads()
    plan = gemm.launch(shape, dtype, target, threads, config=config)
    kernel = cpu_launch.prepare(gemm.build, inputs, dtype, plan, threads, target)
    return kernel


def _search(inputs, shape, dtype, target, ref, seconds: float) -> tuple[dict, float]:
    """The fastest candidate of the space within ``seconds`` (each checked against the reference)."""
    deadline = time.perf_counter() + seconds
    best: tuple[float, dict] | None = None
    for config in gemm.tuning_space(target, dtype, shape):
        if time.perf_counter() > deadline:
            break
        kernel = _bind(inputs, shape, dtype, target, config)
        kernel.run()
        if not check(kernel.output, ref, GEMM.tolerance(dtype, shape)).passed:
            print(f"  candidate {config} fails parity: left out")
            continue
        times = time_calls(kernel.run, 5, 0.1)
        while sum(times) < 0.15:
            times += time_calls(kernel.run, 5)
        median = float(np.median(times))
        if best is None or median < best[0]:
            best = (median, config)
    assert best is not None
    return best[1], best[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default=None, help="ISA level to compile for (default: the host's)")
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "fp64"))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--search-s", type=float, default=20.0, help="search time per shape")
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES), help="MxNxK,...")
    parser.add_argument("--warm-s", type=float, default=0.3, help="untimed calls before each timed block")
    args = parser.parse_args()
    target = CPUTarget(isa_level=args.isa)
    desc = target.description
    print(
        f"target {target.name}: {desc.vector_registers} x {desc.vector_bytes * 8}-bit registers, tile "
        f"{gemm.register_tile(target, args.dtype)}, caches L1d {desc.caches.l1d >> 10} KiB "
        f"L2 {desc.caches.l2 >> 10} KiB"
    )
    print(f"BLAS: {_blas()}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')}")
    print(
        f"{'shape':<16} {'derived':>9} {'searched':>9} {'numpy':>9}  GFLOPS   derived/np searched/np  searched config"
    )
    for m, n, k in (tuple(int(v) for v in text.split("x")) for text in args.shapes.split(",")):
        shape = {"M": m, "N": n, "K": k}
        inputs = GEMM.make_inputs(shape, args.dtype, seed=1)
        ref = GEMM.reference(inputs, shape)
        derived = _bind(inputs, shape, args.dtype, target, None)
        derived.run()
        assert check(derived.output, ref, GEMM.tolerance(args.dtype, shape)).passed, (
            "derived configuration fails parity"
        )
        best_config, _ = _search(inputs, shape, args.dtype, target, ref, args.search_s)
        searched = _bind(inputs, shape, args.dtype, target, best_config)
        a, b = inputs["A"], inputs["B"]
        medians = compare(
            {"derived": derived.run, "searched": searched.run, "numpy": lambda a=a, b=b: a @ b},
            args.reps,
            args.rounds,
            0.05,
            args.warm_s,
        )
        flops = 2.0 * m * n * k
        g = {name: flops / t / 1e9 for name, t in medians.items()}
        print(
            f"{m}x{n}x{k:<8} {g['derived']:9.1f} {g['searched']:9.1f} {g['numpy']:9.1f}          "
            f"{medians['numpy'] / medians['derived']:5.2f}x     {medians['numpy'] / medians['searched']:5.2f}x     "
            f"{best_config}"
        )


if __name__ == "__main__":
    main()
