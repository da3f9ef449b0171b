"""Plan and run the compile jobs of ``hwbench compile``, and write their results document.

One job is one (target, kernel, implementation, variant); each runs in a child process, so
a compiler that crashes or aborts becomes a ``crashed`` record and the other jobs go on.
Triton compiles into the user's ``TRITON_CACHE_DIR`` where one is set, else into one temporary
folder for the whole run, removed when the run ends.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any

from hwbench.compile import stats as compile_stats
from hwbench.core.dtypes import is_integer
from hwbench.core.errors import UserError
from hwbench.core.host import arch_of, describe_host
from hwbench.core.kernel import get_kernel, kernel_targets
from hwbench.core.records import failed, new_document, now
from hwbench.core.text import printable

#: The implementations compiled for GPU targets, and the language of each.
LANGUAGES = {"triton": "triton", "llvm": "llvmlite"}
IMPLS = tuple(LANGUAGES)
_ARCH = re.compile(r"^(sm_\d{2,3}a?|gfx[0-9a-f]{3,4})$")


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
    return arch_of(torch.cuda.get_device_properties(0), hip=bool(torch.version.hip))


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


def compiled_kernels() -> list[str]:
    """Kernels with a Triton or llvmlite source that one device runs (not a collective)."""
    return [
        name
        for name in kernel_targets()
        if not get_kernel(name).spans_ranks and any(get_kernel(name).source_in(lang) for lang in LANGUAGES.values())
    ]


def plan_jobs(targets: list[str], kernels: list[str], impls: list[str]) -> list[dict[str, Any]]:
    """One job per (target, kernel, implementation, variant): each dtype of an llvmlite source;
    a Triton source's variants are listed in the child."""
    jobs = []
    for arch in targets:
        for kernel in kernels:
            spec = get_kernel(kernel)
            triton, llvm = spec.source_in("triton"), spec.source_in("llvmlite")
            if "triton" in impls and triton is not None:
                jobs.append({"arch": arch, "kernel": kernel, "impl": "triton", "variant": None})
            if "llvm" in impls and llvm is not None:
                simt = [d for d in llvm.dtypes if not is_integer(d)]  # no integer work-group kernels
                jobs.extend({"arch": arch, "kernel": kernel, "impl": "llvm", "variant": d} for d in simt)
    return jobs


@contextmanager
def triton_cache() -> Iterator[str]:
    """The Triton cache folder of one compile run: the user's ``TRITON_CACHE_DIR``, else a
    temporary folder that is removed (with what Triton wrote there) when the run ends."""
    if os.environ.get("TRITON_CACHE_DIR"):
        yield os.environ["TRITON_CACHE_DIR"]
        return
    with tempfile.TemporaryDirectory(prefix="hwbench-triton-cache-") as folder:
        yield folder


def child_env(cache: str) -> None:
    """Set up a compile child process: Triton's cache in ``cache``, every variant compiled anew."""
    os.environ["TRITON_CACHE_DIR"] = cache
    os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # a cache hit would hide the compile time
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def run_job(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Compile one job in this (child) process, set up by :func:`child_env`; returns its records."""
    if job["impl"] == "triton":
        return compile_stats.triton_records(job["arch"], job["kernel"])
    return [compile_stats.llvm_record(job["arch"], job["kernel"], job["variant"])]


def _crashed(job: dict[str, Any], reason: str) -> dict[str, Any]:
    """The record of a job whose child died or raised."""
    record = compile_stats.base_record(job["kernel"], job["impl"], job["arch"], job["variant"] or "*", job["variant"])
    return failed(record, "crashed", reason)


def run_jobs(jobs: list[dict[str, Any]], workers: int, progress: bool = False) -> list[dict[str, Any]]:
    """Run jobs in child processes; a job whose child dies is a ``crashed`` record, the rest go on."""
    with triton_cache() as cache:
        return _run_pools(jobs, workers, progress, cache)


def _run_pools(jobs: list[dict[str, Any]], workers: int, progress: bool, cache: str) -> list[dict[str, Any]]:
    done: dict[int, list[dict[str, Any]]] = {}
    pending = list(range(len(jobs)))
    while pending:
        broken: list[int] = []
        spawn = get_context("spawn")
        with ProcessPoolExecutor(workers, spawn, initializer=child_env, initargs=(cache,)) as pool:
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
                        line = f"  {r['target']:<7} {r['kernel']:<9} {r['impl']:<6} {r['variant']:<28} {r['status']}"
                        print(printable(line), file=sys.stderr)
        broken.sort()
        if broken and workers == 1:
            done[broken[0]] = [_crashed(jobs[broken[0]], "the compiler process died (signal or abort)")]
            broken = broken[1:]
        workers = 1  # isolate the culprit: one job at a time from here
        pending = broken
    return [r for i in sorted(done) for r in done[i]]


def compile_document(records: list[dict[str, Any]], started: str, command: Sequence[str]) -> dict[str, Any]:
    """The results document of a compile run: no kernel records, the compile records in ``compile``."""
    doc = new_document(command, host=describe_host(), started=started, finished=now())
    doc["compile"] = records
    return doc
