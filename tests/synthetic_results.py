"""Small valid results documents with chosen figures, for hand-computed score and PP tests.

Host, software and run metadata come from the frozen ``tests/data/cpu-base.json``; the
records and devices are whatever a test asks for.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hwbench.results.files import dumps, migrate, validate

DATA = Path(__file__).resolve().parent / "data"
TEMPLATE = json.loads((DATA / "cpu-base.json").read_text())


def device(backend: str, name: str, kind: str, index: int = 0, peak: dict[str, float] | None = None) -> dict[str, Any]:
    """A device entry of ``backends[].devices``."""
    return {
        "backend": backend,
        "index": index,
        "name": name,
        "vendor": "test",
        "kind": kind,
        "peak": {"tflops": peak, "method": "test"} if peak else None,
    }


def record(
    kernel: str,
    impl: str,
    dtype: str | None,
    shape: dict[str, int],
    median: float | None = 1e-3,
    *,
    backend: str = "cpu",
    device: str = "Test CPU",
    index: int = 0,
    status: str = "ok",
    impl_kind: str | None = "portable",
    samples: list[float] | None = None,
    **metrics: Any,
) -> dict[str, Any]:
    """One record; ``metrics`` (tflops=..., pct_peak=..., iops=...) fill its metrics."""
    samples = samples if samples is not None else ([median] if median else [])
    return {
        "kernel": kernel,
        "impl": impl,
        "impl_kind": impl_kind,
        "language": None,
        "backend": backend,
        "device": device,
        "device_index": index,
        "dtype": dtype,
        "shape": dict(shape),
        "status": status,
        "reason": "" if status == "ok" else f"{status} on purpose",
        "parity": {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None},
        "timing": {
            "median_s": median if status == "ok" else None,
            "iqr_s": None,
            "cv": None,
            "n": len(samples) if status == "ok" else 0,
            "timer": "test",
            **({"samples_s": samples} if status == "ok" else {}),
        },
        "metrics": {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None, **metrics},
        "config": {},
        "warnings": [],
    }


def document(records: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A valid results document holding ``records`` (devices grouped into their backends)."""
    doc = copy.deepcopy(TEMPLATE)
    devices = devices if devices is not None else [device("cpu", "Test CPU", "cpu")]
    backends: dict[str, list[dict[str, Any]]] = {}
    for entry in devices:
        backends.setdefault(entry["backend"], []).append(entry)
    doc["backends"] = [
        {"name": name, "available": True, "reason": "", "devices": items} for name, items in backends.items()
    ]
    doc["records"] = records
    doc["warnings"] = ["synthetic test document"]
    problems = validate(json.loads(dumps(doc)))
    assert not problems, problems
    return doc


def current_document(records: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """:func:`document` at the current schema version (records of ``train`` and ``drill`` need it)."""
    doc = document([], devices)
    doc = migrate(doc)
    doc["records"] = records
    problems = validate(json.loads(dumps(doc)))
    assert not problems, problems
    return doc


def write(path: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` (as hwbench would) and return the path."""
    path.write_text(dumps(doc))
    return path


#: The shape of a synthetic training run (the ``tiny`` preset's figures are the test's own).
TRAIN_SHAPE = {"layers": 2, "d_model": 64, "heads": 4, "seq": 32, "batch": 4, "vocab": 256, "ranks": 1, "steps": 8}


def train_record(
    submit_to_first_step_s: float | None = 12.0,
    *,
    impl: str = "eager",
    warm_cache: int = 0,
    losses: list[float] | None = None,
    step_s: list[float] | None = None,
    status: str = "ok",
    preset: str = "tiny",
    submit_source: str = "process launch",
    **where: Any,
) -> dict[str, Any]:
    """A record of kernel ``train`` (``hwbench train``) as the schema declares it; ``where`` gives
    ``backend``, ``device``, ``index``."""
    losses = losses if losses is not None else [5.5, 5.2, 4.9, 4.6, 4.4, 4.3, 4.1, 4.0]
    step_s = step_s if step_s is not None else [1.5, 0.2, 0.21, 0.19, 0.2, 0.2, 0.22, 0.2]
    steady = step_s[2:] or step_s or [0.2]  # a record without step times still has its timing
    out = record(
        "train",
        impl,
        "fp32",
        {**TRAIN_SHAPE, "steps": len(losses), "warm_cache": warm_cache},
        sorted(steady)[len(steady) // 2],
        status=status,
        impl_kind=None,
        samples=steady,
        tflops=0.5,
        pct_peak=20.0,
        **where,
    )
    out["language"] = "torch"
    ratio = losses[-1] / losses[0] if losses and losses[0] else None
    out["parity"] = {
        "max_abs_err": None,
        "max_rel_err": ratio,
        "atol": None,
        "rtol": 0.9,
        "passed": True,
        "exact": False,
    }
    out["train"] = {
        "preset": preset,
        "params": 123456,
        "flops_per_token": 7.4e5,
        "tokens_per_step": 128,
        "compiled": impl == "compiled",
        "deterministic": True,
        "seed": 0,
        "submit_to_first_step_s": submit_to_first_step_s,
        "submit_source": submit_source,
        "phases_s": {"launch": 0.1, "imports": 2.0, "init": 0.5, "data": 0.3, "model": 0.2, "first_step": 1.5},
        "tokens_per_s": 640.0,
        "tokens_per_s_per_rank": 640.0,
        "losses": losses,
        "step_s": step_s,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "loss_ratio": ratio,
        "loss_margin": 0.9,
    }
    return out


def drill_record(
    time_to_resume_s: float | None = 18.0,
    *,
    launcher: str = "torchrun",
    status: str = "ok",
    losses: list[float] | None = None,
    reference_losses: list[float] | None = None,
    **where: Any,
) -> dict[str, Any]:
    """A record of kernel ``drill`` (``hwbench drill``): a rank killed at step 5 of 10, checkpoints
    every 4 steps, resumed from step 4 ``time_to_resume_s`` seconds after the kill."""
    losses = losses if losses is not None else [5.5, 5.2, 4.9, 4.6, 4.4, 4.3, 4.1, 4.0, 3.9, 3.8]
    reference_losses = reference_losses if reference_losses is not None else list(losses)
    resume = time_to_resume_s if time_to_resume_s is not None else 1.0
    shape = {k: v for k, v in TRAIN_SHAPE.items() if k != "steps"}
    out = record(
        "drill",
        launcher,
        "fp32",
        {**shape, "ranks": 2, "steps": len(losses), "checkpoint_every": 4},
        resume,
        status=status,
        impl_kind=None,
        **where,
    )
    out["language"] = "torch"
    out["timing"]["timer"] = "CLOCK_REALTIME, SIGKILL to the end of the first step after resuming"
    out["parity"] = {
        "max_abs_err": 0.0,
        "max_rel_err": 0.0,
        "atol": 0.0,
        "rtol": 0.0,
        "exact": True,
        "mismatches": 0,
        "elements": len(losses),
        "passed": True,
    }
    kill_at = 10.0
    timeline: list[dict[str, Any]] = [{"t_s": 0.0, "event": "launch", "step": None, "rank": None}]
    timeline += [{"t_s": 2.0 + s, "event": "step", "step": s, "rank": 0} for s in range(1, 6)]
    timeline += [{"t_s": 6.1, "event": "checkpoint", "step": 4, "rank": 0}]
    timeline += [
        {"t_s": kill_at, "event": "kill", "step": 5, "rank": 1},
        {"t_s": kill_at + resume / 3, "event": "restart", "step": None, "rank": None},
        {"t_s": kill_at + resume * 0.9, "event": "resume", "step": 4, "rank": 0},
    ]
    timeline += [{"t_s": kill_at + resume + (s - 5), "event": "step", "step": s, "rank": 0} for s in range(5, 11)]
    timeline += [{"t_s": kill_at + resume + 6.0, "event": "done", "step": 10, "rank": None}]
    out["drill"] = {
        "launcher": launcher,
        "preset": "tiny",
        "seed": 0,
        "steps": len(losses),
        "checkpoint_every": 4,
        "max_restarts": 1,
        "kill_step": 5,
        "killed_rank": 1,
        "last_step_before_kill": 5,
        "resumed_from_step": 4,
        "steps_lost": 1,
        "restarts": 1,
        "time_to_resume_s": time_to_resume_s,
        "detect_s": resume / 3,
        "checkpoint_s": 0.1,
        "losses": losses,
        "reference_losses": reference_losses,
        "timeline": timeline,
    }
    return out
