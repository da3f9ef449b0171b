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
import datetime as dt
import os
import re
import socket
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.host import hwbench_info, package_version
from hwbench.core.registry import parse_names
from hwbench.results.files import KIND, SCHEMA_VERSION, save

HELP = "compile every GPU kernel for GPU architectures (no GPU needed) and record registers, spills, memory"
KERNELS = ("gemm", "attention")
IMPLS = ("triton", "llvm")
LLVM_DTYPES = ("fp32", "fp64")
_ARCH = re.compile(r"^(sm_\d{2,3}a?|gfx[0-9a-f]{3,4})$")


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
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results file to write (never overwritten; default: results/hwbench-compile-HOST-TIME.json)",
    )
    parser.add_argument("--jobs", type=int, default=0, help="parallel compiler processes (default: cores)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")


def local_arch() -> str:
    """Architecture of this machine's first GPU through torch; UserError when there is none."""
    try:
        import torch
    except ImportError:
        raise UserError(
            "--target local needs torch with CUDA or ROCm to find the GPU; name the target instead, e.g. --target sm_90"
        ) from None
    if not torch.cuda.is_available():
        raise UserError("--target local: torch sees no GPU here; name the target instead, e.g. --target sm_90")
    props = torch.cuda.get_device_properties(0)
    arch = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
    return arch.split(":")[0]


def parse_targets(text: str) -> list[str]:
    """Validated, de-duplicated architecture names."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UserError("--target is empty; give architectures such as sm_90,gfx942")
    out = []
    for name in names:
        name = local_arch() if name == "local" else name
        if not _ARCH.match(name):
            raise UserError(
                f"unknown --target '{name}': use sm_NN for NVIDIA (sm_80, sm_90) or gfxNNN for AMD (gfx90a, gfx942)"
            )
        out.append(name)
    return list(dict.fromkeys(out))


def plan_jobs(targets: list[str], kernels: list[str], impls: list[str]) -> list[dict[str, Any]]:
    """One job per (target, kernel, implementation, variant); Triton variants are listed in the child."""
    jobs = []
    for arch in targets:
        for kernel in kernels:
            if "triton" in impls:
                jobs.append({"arch": arch, "kernel": kernel, "impl": "triton", "variant": None})
            if "llvm" in impls:
                jobs.extend({"arch": arch, "kernel": kernel, "impl": "llvm", "variant": d} for d in LLVM_DTYPES)
    return jobs


def _child_env() -> None:
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="hwbench-triton-cache-"))
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # a cache hit would hide the compile time
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def run_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Compile one job in this (child) process; returns its records."""
    _child_env()
    from hwbench.compile import stats as compile_stats

    if job["impl"] == "triton":
        return compile_stats.triton_records(job["arch"], job["kernel"])
    return [compile_stats.llvm_record(job["arch"], job["kernel"], job["variant"])]


def _crashed(job: dict[str, Any], reason: str) -> dict[str, Any]:
    from hwbench.compile.stats import base_record

    record = base_record(job["kernel"], job["impl"], job["arch"], job["variant"] or "*", job["variant"])
    record.update(status="crashed", reason=reason)
    return record


def run_jobs(jobs: list[dict[str, Any]], workers: int, progress: bool = False) -> list[dict[str, Any]]:
    """Run jobs in child processes; a job whose child dies is a ``crashed`` record, the rest go on."""
    done: dict[int, list[dict[str, Any]]] = {}
    pending = list(range(len(jobs)))
    while pending:
        broken: list[int] = []
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(run_job, jobs[i]): i for i in pending}
            for future in as_completed(futures):
                i = futures[future]
                try:
                    done[i] = future.result()
                except BrokenProcessPool:
                    broken.append(i)
                except Exception as exc:  # a bug in the job itself: recorded, never fatal
                    done[i] = [_crashed(jobs[i], f"{type(exc).__name__}: {exc}")]
                if progress and i in done:
                    for r in done[i]:
                        print(
                            f"  {r['target']:<7} {r['kernel']:<9} {r['impl']:<6} {r['variant']:<28} {r['status']}",
                            file=sys.stderr,
                        )
        broken.sort()
        if broken and workers == 1:
            done[broken[0]] = [_crashed(jobs[broken[0]], "the compiler process died (signal or abort)")]
            broken = broken[1:]
        workers = 1  # isolate the culprit: one job at a time from here
        pending = broken
    return [r for i in sorted(done) for r in done[i]]


def _document(records: list[dict[str, Any]], started: str, command: list[str]) -> dict[str, Any]:
    from hwbench.run.describe import describe_host

    host = describe_host()
    software = dict(host["software"])
    software.update({"triton": package_version("triton"), "llvmlite": package_version("llvmlite")})
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "run": {
            "id": uuid.uuid4().hex,
            "started": started,
            "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "incomplete": False,
            "command": command,
            "profile": None,
            "seed": 0,
            "hwbench": hwbench_info(),
        },
        "host": host["host"],
        "software": software,
        "settings": host["settings"],
        "warnings": host["warnings"],
        "backends": [],
        "records": [],
        "compile": records,
    }


def default_out() -> Path:
    """``results/hwbench-compile-HOST-TIME.json``."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"hwbench-compile-{socket.gethostname().split('.')[0]}-{stamp}.json"


def main(args: argparse.Namespace) -> int:
    """Entry point of ``hwbench compile``: 0 when everything compiled (or was skipped), 1 otherwise."""
    targets = parse_targets(args.target)
    kernels = parse_names(args.kernel, list(KERNELS), "--kernel", known_label="known")
    impls = parse_names(args.impl, list(IMPLS), "--impl", known_label="known")
    out = args.out or default_out()
    if out.exists():
        raise UserError(f"{out} already exists; hwbench never overwrites a results file: choose another --out")
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    jobs = plan_jobs(targets, kernels, impls)
    workers = args.jobs if args.jobs and args.jobs > 0 else min(len(jobs), os.cpu_count() or 1)
    records = run_jobs(jobs, max(1, workers), progress=not args.quiet)
    path = save(_document(records, started, ["hwbench", *sys.argv[1:]]), out)
    from hwbench.compile.stats import summary_lines

    for line in summary_lines(records):
        print(line)
    print(f"wrote {path} ({len(records)} compile records, {time.perf_counter() - t0:.1f} s)")
    return 1 if any(r["status"] in ("compile_error", "crashed", "timeout") for r in records) else 0
