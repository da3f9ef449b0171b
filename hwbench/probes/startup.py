"""Startup probe: time from launching a fresh process to the end of its first GEMM step.

Each sample is a new ``python -m hwbench.probes.first_step`` process that imports hwbench,
initialises the backend (probe and devices), builds the inputs, compiles the GEMM and
runs it once; the figure is the time from launch to the end of that step. *Cold* samples
get empty compile caches each (Triton, CUDA, PoCL, CuPy, TorchInductor, XDG caches point
to a new folder); *warm* samples share one folder that an untimed first run has filled.
The operating system's file cache is not dropped (that needs root and is not what a job
on a warm node sees).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hwbench.core.records import failed, new_record
from hwbench.core.results_types import Parity, Record
from hwbench.run.stats import summarize, timing_section

CACHE_VARS = (
    "TRITON_CACHE_DIR",
    "CUDA_CACHE_PATH",
    "POCL_CACHE_DIR",
    "PYOPENCL_CACHE_DIR",
    "CUPY_CACHE_DIR",
    "TORCHINDUCTOR_CACHE_DIR",
    "XDG_CACHE_HOME",
    "MIOPEN_USER_DB_PATH",
    "MIOPEN_CUSTOM_CACHE_DIR",
)
PHASES = (
    ("launch", "t_start"),
    ("import", "t_imported"),
    ("init", "t_initialised"),
    ("inputs", "t_inputs"),
    ("compile", "t_compiled"),
    ("first_step", "t_first_step"),
)


def _launch(request: dict[str, Any], cache: Path, timeout: float) -> dict[str, Any]:
    """One fresh process; its answer with ``sample_s`` (launch to first step) and phase times."""
    env = dict(os.environ, **{var: str(cache / var.lower()) for var in CACHE_VARS})
    with tempfile.TemporaryDirectory(prefix="hwbench-first-step-") as tmp:
        answer_path = Path(tmp) / "answer.json"
        start = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "hwbench.probes.first_step", json.dumps(request), str(answer_path)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"status": "timeout", "reason": f"no first step within the {timeout:g} s timeout"}
        wall = time.monotonic() - start
        if not answer_path.exists():
            tail = " | ".join([ln for ln in done.stderr.splitlines() if ln.strip()][-3:])[-400:]
            how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exited with {done.returncode}"
            return {
                "status": "crashed",
                "reason": f"the process {how} before its first step" + (f": {tail}" if tail else ""),
            }
        answer = json.loads(answer_path.read_text())
    answer["process_s"] = wall
    if answer.get("status") == "ok":
        answer["sample_s"] = answer["t_first_step"] - start
        marks = [("t_launch", start)] + [(key, answer[key]) for _, key in PHASES]
        answer["phases_s"] = {name: marks[i + 1][1] - marks[i][1] for i, (name, _) in enumerate(PHASES)}
    return answer


def measure(
    request: dict[str, Any], warm: bool, repeat: int, timeout: float
) -> tuple[list[dict[str, Any]], float | None]:
    """``repeat`` answers with cold (fresh) or warm (shared, primed) caches, and the priming run's time."""
    answers: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hwbench-startup-cache-") as shared:
        prime_s = None
        if warm:
            prime = _launch(request, Path(shared), timeout)
            if prime.get("status") != "ok":
                return [prime], None
            prime_s = prime["sample_s"]
        for _ in range(repeat):
            if warm:
                answer = _launch(request, Path(shared), timeout)
            else:
                with tempfile.TemporaryDirectory(prefix="hwbench-startup-cold-") as fresh:
                    answer = _launch(request, Path(fresh), timeout)
            answers.append(answer)
            if answer.get("status") != "ok":
                break
    return answers, prime_s


def startup_record(request: dict[str, Any], device: str | None, warm: bool, repeat: int, timeout: float) -> Record:
    """The record of one cache state: samples in seconds, phases of the median sample, parity."""
    shape = {**request["shape"], "warm_cache": int(warm)}
    record = new_record(
        "startup",
        request["impl"],
        request["backend"],
        request["device_index"],
        request["dtype"],
        shape,
        impl_kind=request.get("impl_kind"),
        language=request.get("language"),
        device=device,
    )
    answers, prime_s = measure(request, warm, repeat, timeout)
    record["config"] = {
        "cache": "warm" if warm else "cold",
        "cache_vars": list(CACHE_VARS),
        "repeat": repeat,
        "priming_run_s": prime_s,
        "process_s": [a.get("process_s") for a in answers],
    }
    failure = next((a for a in answers if a.get("status") != "ok"), None)
    if failure is not None:
        return failed(record, failure.get("status", "runtime_error"), failure.get("reason") or "failed")
    samples = [a["sample_s"] for a in answers]
    summary = summarize(samples)
    record["timing"] = timing_section(
        samples, timer="CLOCK_MONOTONIC, process launch to end of first step", flushed=None
    )
    median_answer = min(answers, key=lambda a: abs(a["sample_s"] - summary.median))
    record["config"]["phases_s"] = median_answer["phases_s"]
    parity: Parity = median_answer["parity"]
    record["parity"] = {**parity, "exact": False}
    record["compile_s"] = median_answer.get("compile_s")
    return record
