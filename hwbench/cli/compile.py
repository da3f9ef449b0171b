"""Compile every GPU kernel for GPU architectures without a GPU, and record what the compilers say.

For each target (``sm_90``, ``sm_80``: NVIDIA; ``gfx942``, ``gfx90a``: AMD) every Triton
kernel (each dtype, default configuration) and every llvmlite kernel is compiled: PTX is
assembled by ``ptxas -v`` for the architecture, AMDGCN is linked into a code object and its
metadata read. One record per kernel variant and target goes into the ``compile`` section
of a results file: status (ok, skipped, compile_error, crashed) and the compiler's error,
registers, spills, shared memory (LDS), private memory, tensor-core instruction counts
(mma, wgmma, mfma) and compile time. Compilations run in child processes: a compiler that
crashes becomes a record.

  hwbench compile --target sm_90,sm_80,gfx942,gfx90a
  hwbench compile --target local --kernel gemm --impl triton --out results/compile.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from hwbench.cli.options import add_out, add_quiet, emit, fresh_out, to_stdout
from hwbench.compile.jobs import IMPLS, compile_document, compiled_kernels, parse_targets, plan_jobs, run_jobs
from hwbench.compile.stats import summary_lines
from hwbench.core.records import now
from hwbench.core.registry import parse_names
from hwbench.results.files import check_writable

HELP = "compile every GPU kernel for GPU architectures (no GPU needed) and record registers, spills, memory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench compile``."""
    parser.add_argument(
        "--target",
        default="sm_90,gfx942",
        help="comma list of architectures: sm_NN (NVIDIA), gfxNNN (AMD), or 'local' for this "
        "machine's GPU (default: sm_90,gfx942)",
    )
    parser.add_argument("--kernel", default=None, help="comma list: gemm,attention (default: both)")
    parser.add_argument("--impl", default=None, help="comma list: triton,llvm (default: both)")
    add_out(parser, "hwbench-compile-HOST-TIME.json")
    parser.add_argument("--jobs", type=int, default=0, help="parallel compiler processes (default: cores)")
    add_quiet(parser)


def main(args: argparse.Namespace) -> int:
    """Entry point of ``hwbench compile``: 0 when everything compiled (or was skipped), 1 otherwise."""
    targets = parse_targets(args.target)
    kernels = parse_names(args.kernel, compiled_kernels(), "--kernel", known_label="known")
    impls = parse_names(args.impl, list(IMPLS), "--impl", known_label="known")
    out = None if to_stdout(args.out) else fresh_out(args.out, "compile")
    if out is not None:
        check_writable(out)
    started = now()
    t0 = time.perf_counter()
    jobs = plan_jobs(targets, kernels, impls)
    workers = args.jobs if args.jobs and args.jobs > 0 else min(len(jobs), os.cpu_count() or 1)
    records = run_jobs(jobs, max(1, workers), progress=not args.quiet)
    path, stream = emit(compile_document(records, started, ["hwbench", *sys.argv[1:]]), out)
    for line in summary_lines(records):
        print(line, file=stream)
    where = f"wrote {path}" if path else "wrote the document to stdout"
    print(f"{where} ({len(records)} compile records, {time.perf_counter() - t0:.1f} s)", file=stream)
    return 1 if any(r["status"] in ("compile_error", "crashed", "timeout") for r in records) else 0
