"""Low-precision GEMM on this CPU, in one run: llvmlite int8 and bf16 against torch and llvmlite fp32.

    python tests/benchmarks/bench_lowprec.py [--size 2048] [--reps 10] [--rounds 3]

int8: the llvmlite kernel a run takes (AMX tiles where the CPU has them, else vpdpbusd, else
the widening fallback) against ``torch._int_mm`` and against the llvmlite fp32 GEMM, in
operations per second; bf16: the same choice (AMX, vdpbf16ps, widening) against ``torch.matmul``
in bf16. Where AMX runs, the vector dot-product kernels are timed beside it too. Contenders
run in alternating rounds with a pause between them (torch's OpenMP workers spin a while
after a call); medians are compared.
Every output is checked against the float64 reference first (int8 exactly). Targets (issue):
int8 >= 1.0x torch int8 and >= 2.5x llvmlite fp32; bf16 >= 0.8x torch bf16.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from bench_llvm_vs_native import compare

from hwbench.kernels.gemm import llvm as gemm
from hwbench.kernels.gemm import llvm_bf16, llvm_lowp
from hwbench.kernels.gemm.spec import KERNEL as GEMM
from hwbench.run.parity import check


def _contenders(n: int, threads: int) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """The calls to time, each checked once against the reference; and each one's path/library."""
    import torch

    shape = {"M": n, "N": n, "K": n}
    calls: dict[str, Callable[[], object]] = {}
    notes: dict[str, str] = {}
    for dtype, vector in (("int8", llvm_lowp), ("bf16", llvm_bf16), ("fp32", None)):
        inputs = GEMM.make_inputs(shape, dtype, seed=1)
        ref = GEMM.reference(inputs, shape)
        kernel = gemm.prepare_cpu(inputs, shape, dtype, threads=threads)  # the path a run takes
        kernel.run()
        assert check(kernel.output, ref, GEMM.tolerance(dtype, shape)).passed, f"llvm {dtype} fails parity"
        calls[f"llvm {dtype}"] = kernel.run
        notes[f"llvm {dtype}"] = str(kernel.config.get("path", "fma"))
        if vector is None:
            continue
        if kernel.config.get("path") == "amx":  # the vector dot products beside the tiles
            other = vector.prepare_cpu(inputs, shape, threads=threads)
            other.run()
            assert check(other.output, ref, GEMM.tolerance(dtype, shape)).passed, f"llvm {dtype} vector fails"
            calls[f"llvm {dtype} vec"] = other.run
            notes[f"llvm {dtype} vec"] = str(other.config["path"])
        kind = torch.int8 if dtype == "int8" else torch.bfloat16
        a, b = (torch.from_numpy(inputs[x]).to(kind) for x in ("A", "B"))
        if dtype == "int8":
            out = torch.empty((n, n), dtype=torch.int32)
            calls["torch int8"] = lambda a=a, b=b, out=out: torch._int_mm(a, b, out=out)
            got = torch._int_mm(a, b).numpy()
        else:
            out = torch.empty((n, n), dtype=torch.bfloat16)
            calls["torch bf16"] = lambda a=a, b=b, out=out: torch.matmul(a, b, out=out)
            got = torch.matmul(a, b).float().numpy()
        assert check(got, ref, GEMM.tolerance(dtype, shape)).passed, f"torch {dtype} fails parity"
        notes[f"torch {dtype}"] = f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    return calls, notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2048, help="M = N = K")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between contenders")
    args = ap.parse_args()
    threads = len(os.sched_getaffinity(0))
    calls, notes = _contenders(args.size, threads)
    medians = compare(calls, args.reps, args.rounds, args.pause)
    ops = 2.0 * args.size**3
    print(f"GEMM {args.size}^3 on {threads} cores, load average {os.getloadavg()[0]:.2f}")
    for name, seconds in medians.items():
        unit = "GOPS" if "int8" in name else "GFLOPS"
        print(f"  {name:<15} {seconds * 1e3:9.2f} ms {ops / seconds / 1e9:9.1f} {unit:<6}  ({notes[name]})")
    ratios = (
        ("llvm int8 / torch int8", "llvm int8", "torch int8", 1.0),
        ("llvm int8 / llvm fp32", "llvm int8", "llvm fp32", 2.5),
        ("llvm bf16 / torch bf16", "llvm bf16", "torch bf16", 0.8),
    )
    for label, mine, theirs, target in ratios:
        ratio = medians[theirs] / medians[mine]
        print(f"  {label:<24} {ratio:5.2f}x  (target >= {target}x: {'met' if ratio >= target else 'NOT met'})")
    print(f"  medians of {args.rounds} rounds x {args.reps} runs per contender")


if __name__ == "__main__":
    main()
