"""A training launch's events as a record of kernel ``train``: time to first step, speed, MFU, losses.

The steady step time is the median of the steps after ``WARMUP_STEPS`` (the first steps allocate,
compile and fill caches); tokens/s and the model FLOPs per second come from it, and MFU is those
FLOPs against the device's peak for the dtype. The loss is rank 0's: the run trains when its
last loss is at most ``LOSS_MARGIN`` times its first, else the record is ``parity_failed``.
"""

from __future__ import annotations

from typing import Any

from hwbench.core.records import failed, new_record
from hwbench.core.results_types import Record
from hwbench.core.train_types import TrainPhases, TrainSection
from hwbench.run.stats import timing_section
from hwbench.train.launch import Launch
from hwbench.train.presets import Preset

#: Steps left out of the steady figures (allocation, compilation, first touches).
WARMUP_STEPS = 5
#: The last loss must be at most this fraction of the first for the run to count as training.
LOSS_MARGIN = 0.9
STEP_TIMER = "time.perf_counter, one optimizer step (batch, forward, backward, AdamW) to its loss on the host"
#: Phases to the first step: (name, the event that ends it).
PHASES = (("imports", "imported"), ("init", "init"), ("model", "model"), ("data", "data"), ("first_step", "step"))


def shape_of(preset: Preset, ranks: int, steps: int, **extra: int) -> dict[str, int]:
    """A training record's shape: the preset's sizes, ranks, steps and ``extra``."""
    return {**preset.as_shape(), "ranks": ranks, "steps": steps, **extra}


def base_record(kernel: str, impl: str, backend: str, device: str | None, dtype: str, shape: dict[str, int]) -> Record:
    """An empty record of the training workload."""
    return new_record(kernel, impl, backend, 0, dtype, shape, impl_kind=None, language="torch", device=device)


def first_attempt_steps(launch: Launch, rank: int = 0) -> list[dict[str, Any]]:
    """The step events of ``rank`` in the launch's first attempt, by step."""
    return sorted(launch.of("step", rank=rank, attempt=0), key=lambda e: e["step"])


def phases(launch: Launch, submit_t: float, queue_s: float | None) -> TrainPhases:
    """Seconds of each phase of rank 0's first attempt, from the submit time to its first step."""
    start = launch.of("start", rank=0, attempt=0)
    found: TrainPhases = {
        "queue": queue_s,
        "launch": start[0]["t_start"] - submit_t - (queue_s or 0.0) if start else None,
    }
    previous = start[0]["t_start"] if start else None
    for name, event in PHASES:
        marks = launch.of(event, rank=0, attempt=0)
        t = marks[0]["t"] if marks else None
        found[name] = t - previous if t is not None and previous is not None else None  # type: ignore[literal-required]
        previous = t
    return found


def train_record(
    launch: Launch,
    preset: Preset,
    *,
    backend: str,
    device: str | None,
    dtype: str,
    ranks: int,
    steps: int,
    compiled: bool,
    warm: bool,
    peak_tflops: float | None,
    peak_source: str,
    submit: tuple[float, str, float | None],
    job: dict[str, Any],
) -> Record:
    """The record of one launch; ``submit`` is (the submit time, what it is, seconds queued) and
    ``peak_tflops`` the peak of every device the ranks use together (one CPU's for ranks sharing it)."""
    record = base_record(
        "train",
        "compiled" if compiled else "eager",
        backend,
        device,
        dtype,
        shape_of(preset, ranks, steps, warm_cache=int(warm)),
    )
    record["wall_s"] = launch.ended_t - launch.launched_t
    steps_done = first_attempt_steps(launch)
    submit_t, submit_source, queue_s = submit
    section: TrainSection = {
        "preset": preset.name,
        "params": preset.params,
        "flops_per_token": preset.flops_per_token,
        "tokens_per_step": preset.tokens_per_step(ranks),
        "compiled": compiled,
        "deterministic": bool(job.get("deterministic")),
        "seed": int(job["seed"]),
        "submit_source": submit_source,
        "memory_estimate_bytes": preset.memory_estimate(),
        "loss_margin": LOSS_MARGIN,
        "losses": [e["loss"] for e in steps_done],
        "step_s": [e["step_s"] for e in steps_done],
    }
    record["train"] = section
    record["config"] = {k: job[k] for k in ("threads", "loader_workers", "deterministic") if k in job}
    if launch.timed_out:
        return failed(
            record, "timeout", f"the training did not finish within its timeout ({len(steps_done)} of {steps} steps)"
        )
    if launch.returncode != 0 or len(steps_done) < steps:
        why = launch.error() or f"the launcher exited with {launch.returncode}"
        return failed(record, "runtime_error", f"training stopped after {len(steps_done)} of {steps} steps: {why}")
    section["submit_to_first_step_s"] = steps_done[0]["t"] - submit_t
    section["phases_s"] = phases(launch, submit_t, queue_s)
    steady = section["step_s"][WARMUP_STEPS:] or section["step_s"]
    record["timing"] = timing_section(steady, timer=STEP_TIMER, flushed=None)
    median = record["timing"]["median_s"]
    assert median is not None
    tokens_per_s = preset.tokens_per_step(ranks) / median
    tflops = preset.flops_per_token * tokens_per_s / 1e12
    section["tokens_per_s"] = tokens_per_s
    section["tokens_per_s_per_rank"] = tokens_per_s / ranks
    done = launch.of("done", rank=0)
    if done:
        section["peak_memory_bytes"] = done[-1]["peak_memory_bytes"]
        section["memory_source"] = done[-1]["memory_source"]
        roof = done[-1].get("gemm_roof_tflops")
        section["gemm_roof_tflops"] = roof
        section["pct_gemm_roof"] = 100.0 * tflops / ranks / roof if roof else None
    metrics = record["metrics"]
    metrics["tflops"] = tflops
    metrics["peak_tflops"] = peak_tflops
    metrics["peak_source"] = peak_source
    metrics["pct_peak"] = 100.0 * tflops / peak_tflops if peak_tflops else None
    first, last = section["losses"][0], section["losses"][-1]
    ratio = last / first if first > 0 else None
    section["loss_first"], section["loss_last"], section["loss_ratio"] = first, last, ratio
    passed = ratio is not None and ratio <= LOSS_MARGIN
    record["parity"] = {
        "max_abs_err": None,
        "max_rel_err": ratio,
        "atol": None,
        "rtol": LOSS_MARGIN,
        "passed": passed,
        "exact": False,
    }
    if not passed:
        return failed(
            record,
            "parity_failed",
            f"the loss did not fall: {last:.4g} after {steps} steps against {first:.4g} at the first "
            f"(ratio {ratio if ratio is None else round(ratio, 3)}, at most {LOSS_MARGIN} trains)",
        )
    return record
