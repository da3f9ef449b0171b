"""Low-precision GEMM on this CPU, in one run: llvmlite int8 and bf16 against llvmlite fp32 (and torch).

    python tests/benchmarks/bench_lowprec.py [--isa x86-64-v3] [--size 2048] [--reps 10] [--rounds 3]

int8: the llvmlite kernel a run takes (AMX tiles where the CPU has them, else vpdpbusd, else
``vpmaddwd`` on int16 pairs) against the llvmlite fp32 GEMM on the same target, in operations per
second; bf16: the same choice (AMX, vdpbf16ps, widening to fp32) likewise. ``--isa`` compiles
every llvmlite kernel for a smaller x86-64 level than the host's (``x86-64-v2``, ``x86-64-v3``,
``x86-64-v4``; the host's features above it switched off), to preview a smaller CPU. torch's
``_int_mm`` and bf16 ``matmul`` are timed beside them on the unrestricted host only (a library
keeps its own ISA). Where AMX runs, the vector dot-product kernels are timed beside it too.
Contenders run in alternating rounds with a pause between them (torch's OpenMP workers spin a
while after a call); medians are compared. Every output is checked against the float64
reference first (int8 exactly). Targets (issue 28): llvm int8 >= 1.0x llvm fp32 without VNNI
(the widening path), >= 2x with VNNI; bf16 widened ~1.0x fp32; against torch, int8 >= 1.0x and
bf16 >= 0.8x.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from bench_llvm_vs_native import compare

from hwbench.kernels.gemm import llvm as gemm
from hwbench.kernels.gemm.cpu import bf16 as llvm_bf16
from hwbench.kernels.gemm.cpu import lowp as llvm_lowp
from hwbench.kernels.gemm.spec import KERNEL as GEMM
from hwbench.kernels.llvmir.target import CPUTarget, host_target
from hwbench.run.parity import check

#: int8 against fp32 GEMM, by the int8 path: the issue's figures (AMX: the earlier issue's).
INT8_OVER_FP32 = {"widening": 1.0, "vnni": 2.0, "amx": 2.5}


def _llvm(
    calls: dict[str, Callable[[], object]], notes: dict[str, str], n: int, threads: int, target: CPUTarget
) -> dict[str, str]:
    """The llvmlite kernels on ``target``, each checked once; returns each dtype's path."""
    shape = {"M": n, "N": n, "K": n}
    paths = {}
    for dtype, vector in (("int8", llvm_lowp), ("bf16", llvm_bf16), ("fp32", None)):
        inputs = GEMM.make_inputs(shape, dtype, seed=1)
        ref = GEMM.reference(inputs, shape)
        kernel = gemm.prepare_cpu(inputs, shape, dtype, threads=threads, target=target)  # the path a run takes
        kernel.run()
        assert check(kernel.output, ref, GEMM.tolerance(dtype, shape)).passed, f"llvm {dtype} fails parity"
        config = kernel.config
        paths[dtype] = str(config.get("path", "fma"))
        calls[f"llvm {dtype}"] = kernel.run
        blk = "/".join(str(config.get(key)) for key in ("mc", "nc", "kc"))
        notes[f"llvm {dtype}"] = f"{paths[dtype]}, MR {config.get('MR')} x NR {config.get('NR')}, mc/nc/kc {blk}"
        if vector is not None and paths[dtype] == "amx":  # the vector dot products beside the tiles
            other = vector.prepare_cpu(inputs, shape, threads=threads, target=target)
            other.run()
            assert check(other.output, ref, GEMM.tolerance(dtype, shape)).passed, f"llvm {dtype} vector fails"
            calls[f"llvm {dtype} vec"] = other.run
            notes[f"llvm {dtype} vec"] = str(other.config["path"])
        if dtype == "int8":
            print(f"  int8 scheme: {config.get('scheme', paths[dtype])}")
    return paths


def _torch(calls: dict[str, Callable[[], object]], notes: dict[str, str], n: int) -> None:
    """torch's int8 and bf16 GEMM, each checked once."""
    import torch

    shape = {"M": n, "N": n, "K": n}
    for dtype in ("int8", "bf16"):
        inputs = GEMM.make_inputs(shape, dtype, seed=1)
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
        ref = GEMM.reference(inputs, shape)
        assert check(got, ref, GEMM.tolerance(dtype, shape)).passed, f"torch {dtype} fails parity"
        notes[f"torch {dtype}"] = f"torch {torch.__version__}, {torch.get_num_threads()} threads"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", help="compile for this x86-64 level (x86-64-v2, x86-64-v3, x86-64-v4) below the host's")
    ap.add_argument("--size", type=int, default=2048, help="M = N = K")
    ap.add_argument("--reps", type=int, default=10, help="timed runs per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    ap.add_argument("--pause", type=float, default=0.5, help="seconds between contenders")
    ap.add_argument("--no-torch", action="store_true", help="leave torch out")
    args = ap.parse_args()
    threads = len(os.sched_getaffinity(0))
    target = CPUTarget(isa_level=args.isa) if args.isa else host_target()
    desc = target.description.as_config()
    print(f"target {target.name}: {desc['isa_level']}, {desc['vector_bits']}-bit x {desc['vector_registers']}")
    calls: dict[str, Callable[[], object]] = {}
    notes: dict[str, str] = {}
    paths = _llvm(calls, notes, args.size, threads, target)
    if not args.isa and not args.no_torch:
        try:
            _torch(calls, notes, args.size)
        except ImportError:
            print("  torch is not installed: llvm alone")
    medians = compare(calls, args.reps, args.rounds, args.pause)
    ops = 2.0 * args.size**3
    print(f"GEMM {args.size}^3 on {threads} cores, load average {os.getloadavg()[0]:.2f}")
    for name, seconds in medians.items():
        unit = "GOPS" if "int8" in name else "GFLOPS"
        print(f"  {name:<15} {seconds * 1e3:9.2f} ms {ops / seconds / 1e9:9.1f} {unit:<6}  ({notes[name]})")
    ratios = [
        (f"llvm int8 / llvm fp32 ({paths['int8']})", "llvm int8", "llvm fp32", INT8_OVER_FP32.get(paths["int8"], 1.0)),
        (
            f"llvm bf16 / llvm fp32 ({paths['bf16']})",
            "llvm bf16",
            "llvm fp32",
            0.9 if paths["bf16"] == "widening" else 1.0,
        ),
        ("llvm int8 / torch int8", "llvm int8", "torch int8", 1.0),
        ("llvm bf16 / torch bf16", "llvm bf16", "torch bf16", 0.8),
    ]
    for label, mine, theirs, want in ratios:
        if theirs in medians:
            ratio = medians[theirs] / medians[mine]
            print(f"  {label:<34} {ratio:5.2f}x  (target >= {want}x: {'met' if ratio >= want else 'NOT met'})")
    print(f"  medians of {args.rounds} rounds x {args.reps} runs per contender")


if __name__ == "__main__":
    main()
