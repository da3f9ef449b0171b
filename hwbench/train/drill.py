"""The recovery drill: one rank of a checkpointed training run SIGKILLed, its launcher resuming it.

An uninterrupted run of the same seed comes first (the reference losses). Then the same training
checkpoints every ``checkpoint_every`` steps through ``torch.distributed.checkpoint`` under a
launcher that restarts it (torchrun ``--max-restarts``; a Slurm job that requeues itself); the
rank chosen by the seed SIGKILLs itself as soon as it has finished the step chosen by the seed
(from inside, so the kill falls exactly there however short a step is). The drill
measures the time from the kill to the end of the first step completed after resuming, the steps
lost (finished before the kill, not in the checkpoint resumed from: at most the interval), and
that every loss equals the reference's (bit for bit in deterministic CPU mode, within
``GPU_LOSS_RTOL`` on GPUs, whose reductions are not deterministic).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.records import failed
from hwbench.core.results_types import Record
from hwbench.core.train_types import DrillEvent, DrillSection
from hwbench.run.stats import timing_section
from hwbench.train.launch import Launch
from hwbench.train.presets import Preset
from hwbench.train.records import base_record, shape_of

#: Relative tolerance of a resumed loss against the reference on GPUs.
GPU_LOSS_RTOL = 1e-2
RESUME_TIMER = "CLOCK_REALTIME, the SIGKILL to the end of the first step completed after resuming"
#: Timeline events kept from the ranks' events (every rank's start; rank 0's others).
RANK_EVENTS = ("start", "resume", "step", "checkpoint", "kill", "done")


@dataclass(frozen=True)
class KillPoint:
    """Where the drill strikes: after ``rank`` has finished ``step``."""

    step: int
    rank: int


def kill_point(seed: int, steps: int, checkpoint_every: int, ranks: int) -> KillPoint:
    """The seeded kill: a step after the first checkpoint and before the last step, and a rank."""
    if checkpoint_every < 1:
        raise UserError(f"--checkpoint-every must be at least 1 step, got {checkpoint_every}")
    if steps < checkpoint_every + 2:
        raise UserError(
            f"--steps {steps} leaves no step to kill after the first checkpoint (step {checkpoint_every}): "
            f"give at least {checkpoint_every + 2} steps"
        )
    rng = random.Random(seed)
    return KillPoint(rng.randint(checkpoint_every + 1, steps - 1), rng.randrange(ranks))


def losses_by_step(launch: Launch, rank: int = 0) -> dict[int, float]:
    """Rank ``rank``'s loss at each step, the latest attempt's where a step ran twice."""
    found: dict[int, float] = {}
    for e in sorted(launch.of("step", rank=rank), key=lambda e: (e["attempt"], e["t"])):
        found[e["step"]] = e["loss"]
    return found


def timeline(launch: Launch) -> list[DrillEvent]:
    """The drill's moments, seconds since the launch: starts, checkpoints, steps, the kill, the resume."""
    t0 = launch.launched_t
    moments: list[DrillEvent] = [{"t_s": 0.0, "event": "launch", "step": None, "rank": None}]
    for e in launch.events:
        if e["event"] in RANK_EVENTS and (e["rank"] == 0 or e["event"] in ("start", "kill")):
            name = "restart" if e["event"] == "start" and e["attempt"] > 0 else e["event"]
            t = e["t_start"] if e["event"] == "start" else e["t"]
            moments.append({"t_s": t - t0, "event": name, "step": e.get("step"), "rank": e["rank"]})
    return sorted(moments, key=lambda m: m["t_s"])


def compare(losses: dict[int, float], reference: dict[int, float], rtol: float) -> tuple[dict[str, Any], str]:
    """The parity of the drill's losses against the reference's, and why it failed ('' when it passed)."""
    steps = sorted(reference)
    missing = [s for s in steps if s not in losses]
    diffs = [abs(losses[s] - reference[s]) for s in steps if s in losses]
    rels = [abs(losses[s] - reference[s]) / abs(reference[s]) for s in steps if s in losses and reference[s]]
    bad = [s for s in steps if s in losses and abs(losses[s] - reference[s]) > rtol * abs(reference[s])]
    parity = {
        "max_abs_err": max(diffs, default=None),
        "max_rel_err": max(rels, default=None),
        "atol": 0.0,
        "rtol": rtol,
        "exact": rtol == 0.0,
        "mismatches": len(bad) + len(missing),
        "elements": len(steps),
        "passed": not bad and not missing,
    }
    if missing:
        return parity, f"steps {missing[0]}..{missing[-1]} never ran after the kill"
    if bad:
        how = "bit for bit" if rtol == 0.0 else f"within {rtol:g} relative"
        return parity, (
            f"the resumed run's loss differs from the uninterrupted run's at {len(bad)} of {len(steps)} steps "
            f"(first at step {bad[0]}: {losses[bad[0]]!r} against {reference[bad[0]]!r}; they must agree {how})"
        )
    return parity, ""


@dataclass
class DrillSetting:
    """What the drill ran: the model, the launcher and the kill."""

    preset: Preset
    launcher: str
    backend: str
    device: str | None
    dtype: str
    ranks: int
    steps: int
    checkpoint_every: int
    max_restarts: int
    seed: int
    deterministic: bool


def drill_record(setting: DrillSetting, point: KillPoint, reference: Launch, drilled: Launch) -> Record:
    """The record of one drill from its reference launch and the drilled launch."""
    s = setting
    kills = drilled.of("kill", rank=point.rank, attempt=0)
    killed_t = kills[0]["t"] if kills else None
    shape = shape_of(s.preset, s.ranks, s.steps, checkpoint_every=s.checkpoint_every)
    record = base_record("drill", s.launcher, s.backend, s.device, s.dtype, shape)
    record["wall_s"] = (reference.ended_t - reference.launched_t) + (drilled.ended_t - drilled.launched_t)
    ref_losses = losses_by_step(reference)
    losses = losses_by_step(drilled)
    section: DrillSection = {
        "launcher": s.launcher,
        "preset": s.preset.name,
        "seed": s.seed,
        "steps": s.steps,
        "checkpoint_every": s.checkpoint_every,
        "max_restarts": s.max_restarts,
        "kill_step": point.step,
        "killed_rank": point.rank,
        "losses": [losses[k] for k in sorted(losses)],
        "reference_losses": [ref_losses[k] for k in sorted(ref_losses)],
        "timeline": timeline(drilled),
    }
    record["drill"] = section
    saves = sorted(e["save_s"] for e in drilled.of("checkpoint", rank=0))
    section["checkpoint_s"] = saves[len(saves) // 2] if saves else None
    if reference.returncode != 0 or len(ref_losses) < s.steps:
        return failed(
            record, "runtime_error", f"the uninterrupted run failed: {reference.error() or reference.returncode}"
        )
    if killed_t is None:
        return failed(record, "runtime_error", f"rank {point.rank} never reached step {point.step}: {drilled.error()}")
    before = [e["step"] for e in drilled.events if e["event"] == "step" and e["attempt"] == 0]
    last_before = max(before, default=0)
    section["last_step_before_kill"] = last_before
    resumed = [e for e in drilled.of("resume", rank=0) if e["attempt"] > 0]
    restarts = [e for e in drilled.of("start", rank=0) if e["attempt"] > 0]
    section["restarts"] = max((e["attempt"] for e in drilled.events), default=0)
    if restarts:
        section["detect_s"] = restarts[0]["t_start"] - killed_t
    after = sorted((e for e in drilled.of("step", rank=0) if e["attempt"] > 0), key=lambda e: e["t"])
    if drilled.timed_out or not after:
        why = "the drill timed out" if drilled.timed_out else f"the launcher did not resume the run: {drilled.error()}"
        return failed(record, "timeout" if drilled.timed_out else "runtime_error", why)
    resumed_from = int(resumed[0]["step"]) if resumed else 0
    lost = last_before - resumed_from
    to_resume = float(after[0]["t"]) - killed_t
    section["resumed_from_step"], section["steps_lost"], section["time_to_resume_s"] = resumed_from, lost, to_resume
    record["timing"] = timing_section([to_resume], timer=RESUME_TIMER, flushed=None)
    parity, why = compare(losses, ref_losses, 0.0 if s.deterministic else GPU_LOSS_RTOL)
    first_attempt = {e["step"]: e["loss"] for e in drilled.of("step", rank=0, attempt=0)}
    early, early_why = compare(first_attempt, {k: ref_losses[k] for k in first_attempt}, parity["rtol"])
    record["parity"] = parity  # type: ignore[typeddict-item]
    if drilled.returncode != 0:
        return failed(record, "runtime_error", f"the resumed run did not finish: {drilled.error()}")
    if lost > s.checkpoint_every:
        return failed(
            record,
            "runtime_error",
            f"{lost} steps lost, more than the checkpoint interval of {s.checkpoint_every}",
        )
    if why or early_why:
        return failed(record, "parity_failed", why or f"before the kill: {early_why}")
    return record


def run_drill(
    setting: DrillSetting,
    launch_job: Callable[[KillPoint | None], Launch],
    say: Callable[[str], None],
) -> Record:
    """The reference run, then the drilled one: ``launch_job(None)`` launches the job uninterrupted,
    ``launch_job(point)`` checkpointed and restartable, its rank killed at ``point``."""
    point = kill_point(setting.seed, setting.steps, setting.checkpoint_every, setting.ranks)
    say(f"drill: the uninterrupted run ({setting.ranks} rank(s), {setting.steps} steps)")
    reference = launch_job(None)
    say(
        f"drill: checkpoints every {setting.checkpoint_every} steps, rank {point.rank} killed after step {point.step}, "
        f"{setting.launcher} restarts it"
    )
    drilled = launch_job(point)
    return drill_record(setting, point, reference, drilled)
