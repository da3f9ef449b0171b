"""Training and drill records from launches' events: the figures, and each way a run can fail."""

from __future__ import annotations

from typing import Any

import pytest
from launches import T0
from launches import launch_of as _launch

from hwbench.core.host import describe_host
from hwbench.core.records import build_document
from hwbench.results.files import validate
from hwbench.train.drill import DrillSetting, KillPoint, drill_record, kill_point
from hwbench.train.launch import Launch
from hwbench.train.presets import PRESETS
from hwbench.train.records import LOSS_MARGIN, WARMUP_STEPS, train_record

PRESET = PRESETS["micro"]
HOST = describe_host()


def validate_record(record: Any) -> None:
    """``record`` in a results document is valid against the schema."""
    doc = build_document(["hwbench", "train"], host=HOST)
    doc["records"] = [record]
    assert validate(doc) == []


def _record(launch: Launch, steps: int, **kw: Any) -> Any:
    args: dict[str, Any] = dict(
        backend="cpu",
        device="a CPU",
        dtype="fp32",
        ranks=1,
        steps=steps,
        compiled=False,
        warm=True,
        peak_tflops=0.2,
        peak_source="measured",
        submit=(T0, "process launch", None),
        job={"seed": 0, "threads": 2, "deterministic": True, "loader_workers": 0},
    )
    args.update(kw)
    return train_record(launch, PRESET, **args)


def test_a_run_whose_loss_falls_is_ok_with_its_figures() -> None:
    losses = [6.0 - 0.1 * i for i in range(20)]
    record = _record(_launch(losses, step_s=0.1), steps=20)
    assert record["status"] == "ok", record["reason"]
    t = record["train"]
    assert t["submit_to_first_step_s"] == pytest.approx(5.5 + 0.3)
    assert t["phases_s"]["launch"] == pytest.approx(0.5) and t["phases_s"]["first_step"] == pytest.approx(1.3)
    assert record["timing"]["n"] == 20 - WARMUP_STEPS and record["timing"]["median_s"] == pytest.approx(0.1)
    tokens = PRESET.batch * PRESET.seq
    assert t["tokens_per_s"] == pytest.approx(tokens / 0.1)
    tflops = PRESET.flops_per_token * tokens / 0.1 / 1e12
    assert record["metrics"]["tflops"] == pytest.approx(tflops)
    assert record["metrics"]["pct_peak"] == pytest.approx(100 * tflops / 0.2)
    assert t["loss_ratio"] == pytest.approx(losses[-1] / losses[0]) and record["parity"]["passed"]
    assert t["peak_memory_bytes"] == 2**28 and t["pct_gemm_roof"] == pytest.approx(100 * tflops / 0.1)
    validate_record(record)


def test_a_run_whose_loss_does_not_fall_trained_nothing() -> None:
    record = _record(_launch([6.0] * 10 + [5.9] * 10), steps=20)
    assert record["status"] == "parity_failed"
    assert "the loss did not fall" in record["reason"] and f"at most {LOSS_MARGIN}" in record["reason"]
    validate_record(record)


def test_a_run_that_stopped_early_says_where_and_why() -> None:
    launch = _launch([6.0, 5.0, 4.0], returncode=1)
    launch.events.append({"event": "error", "t": T0 + 9, "rank": 0, "attempt": 0, "reason": "RuntimeError: boom"})
    record = _record(launch, steps=20)
    assert record["status"] == "runtime_error"
    assert record["reason"] == "training stopped after 3 of 20 steps: RuntimeError: boom"
    validate_record(record)


def test_the_scheduler_submit_time_counts_the_queue() -> None:
    record = _record(_launch([6.0 - 0.2 * i for i in range(10)]), steps=10, submit=(T0 - 30, "slurm submit time", 25.0))
    t = record["train"]
    assert t["submit_source"] == "slurm submit time"
    assert t["submit_to_first_step_s"] == pytest.approx(35.5 + 0.3)
    assert t["phases_s"]["queue"] == 25.0 and t["phases_s"]["launch"] == pytest.approx(5.5)


SETTING = DrillSetting(PRESET, "torchrun", "cpu", "a CPU", "fp32", 2, 12, 4, 3, 0, deterministic=True)
LOSSES = [6.0 - 0.1 * i for i in range(12)]


def _drilled(point: KillPoint, resumed_from: int, losses: list[float] = LOSSES, restart: bool = True) -> Launch:
    events: list[dict[str, Any]] = []
    t = T0
    for rank in range(2):
        events.append({"event": "start", "t": t + 1, "t_start": t + 1, "pid": 10 + rank, "rank": rank, "attempt": 0})
    t += 3
    for step in range(1, point.step + 1):
        t += 0.1
        for rank in range(2):
            events.append(
                {
                    "event": "step",
                    "t": t,
                    "step": step,
                    "loss": LOSSES[step - 1],
                    "step_s": 0.1,
                    "rank": rank,
                    "attempt": 0,
                }
            )
        if step % SETTING.checkpoint_every == 0:
            events.append({"event": "checkpoint", "t": t + 0.01, "step": step, "save_s": 0.01, "rank": 0, "attempt": 0})
    events.append({"event": "kill", "t": t + 0.02, "step": point.step, "rank": point.rank, "attempt": 0})
    killed = t + 0.02
    if restart:
        for rank in range(2):
            events.append(
                {"event": "start", "t": killed + 1, "t_start": killed + 1, "pid": 20 + rank, "rank": rank, "attempt": 1}
            )
        events.append({"event": "resume", "t": killed + 4, "step": resumed_from, "rank": 0, "attempt": 1})
        t = killed + 4
        for step in range(resumed_from + 1, SETTING.steps + 1):
            t += 0.1
            for rank in range(2):
                events.append(
                    {
                        "event": "step",
                        "t": t,
                        "step": step,
                        "loss": losses[step - 1],
                        "step_s": 0.1,
                        "rank": rank,
                        "attempt": 1,
                    }
                )
    return Launch(
        events=sorted(events, key=lambda e: e["t"]), returncode=0 if restart else 1, launched_t=T0, ended_t=t + 1
    )


def _reference() -> Launch:
    events = [
        {"event": "step", "t": T0 + s, "step": s, "loss": LOSSES[s - 1], "step_s": 0.1, "rank": 0, "attempt": 0}
        for s in range(1, 13)
    ]
    return Launch(events=events, returncode=0, launched_t=T0, ended_t=T0 + 13)


def test_a_drill_that_resumed_with_equal_losses_is_ok() -> None:
    point = KillPoint(step=6, rank=1)
    record = drill_record(SETTING, point, _reference(), _drilled(point, resumed_from=4))
    assert record["status"] == "ok", record["reason"]
    d = record["drill"]
    assert d["steps_lost"] == 2 and d["resumed_from_step"] == 4 and d["restarts"] == 1
    assert d["time_to_resume_s"] == pytest.approx(4.1) and d["detect_s"] == pytest.approx(1.0)
    assert record["timing"]["median_s"] == pytest.approx(4.1)
    assert record["parity"]["exact"] and record["parity"]["elements"] == 12 and record["parity"]["mismatches"] == 0
    events = [m["event"] for m in d["timeline"]]
    assert events[0] == "launch" and "kill" in events and "restart" in events and "resume" in events
    validate_record(record)


def test_a_resumed_loss_one_ulp_off_fails_the_drill() -> None:
    import math

    point = KillPoint(step=6, rank=0)
    off = list(LOSSES)
    off[8] = math.nextafter(off[8], 0.0)
    record = drill_record(SETTING, point, _reference(), _drilled(point, resumed_from=4, losses=off))
    assert record["status"] == "parity_failed"
    assert "at 1 of 12 steps (first at step 9" in record["reason"] and "bit for bit" in record["reason"]


def test_losing_more_than_the_interval_fails_the_drill() -> None:
    point = KillPoint(step=10, rank=1)
    record = drill_record(SETTING, point, _reference(), _drilled(point, resumed_from=0))
    assert (
        record["status"] == "runtime_error"
        and "10 steps lost, more than the checkpoint interval of 4" in record["reason"]
    )


def test_a_run_never_restarted_is_a_failed_drill() -> None:
    point = KillPoint(step=6, rank=1)
    record = drill_record(SETTING, point, _reference(), _drilled(point, resumed_from=4, restart=False))
    assert record["status"] == "runtime_error" and "did not resume" in record["reason"]
    validate_record(record)


def test_the_kill_point_is_seeded_and_after_the_first_checkpoint() -> None:
    points = {kill_point(seed, 30, 5, 2) for seed in range(50)}
    assert all(6 <= p.step <= 29 and p.rank in (0, 1) for p in points) and len(points) > 10
    assert kill_point(7, 30, 5, 2) == kill_point(7, 30, 5, 2)


def test_a_drill_too_short_to_kill_after_a_checkpoint_is_one_line() -> None:
    from hwbench.core.errors import UserError

    with pytest.raises(UserError, match="--steps 6 leaves no step to kill after the first checkpoint"):
        kill_point(0, 6, 5, 2)


def test_without_torch_training_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import importlib.util

    from hwbench.cli.train import resolve_target
    from hwbench.core.errors import UserError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(UserError, match="training needs torch, which is not installed: pip install torch==2.13.0"):
        resolve_target(argparse.Namespace(preset=None, backend="cpu"))
