"""Training on a GPU backend, planned and recorded here without one: ``choose`` and the plan read a
CUDA or ROCm backend described as hwbench's torch backend describes an H200 or an MI300X (faked
descriptions), and the launches return the events such ranks write (faked launches). What is
checked is what hwbench decides for a GPU: the defaults (small, bf16), one rank per device, NCCL's
``cuda`` device for ROCm too, nondeterministic losses, MFU against the bf16 peak of every device
the ranks use, and a model refused before allocating when it does not fit the device's memory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import needs
import pytest
from launches import launch_of

from hwbench.cli import train as cli_train
from hwbench.core.errors import UserError
from hwbench.train import session, target
from hwbench.train.presets import PRESETS

GIB = 2**30
H200 = {"name": "NVIDIA H200", "memory_bytes": 141 * GIB, "bf16": 989.4, "fp32": 66.9}
MI300X = {"name": "AMD Instinct MI300X", "memory_bytes": 192 * GIB, "bf16": 1307.4, "fp32": 163.4}


def _described(backend: str, gpu: dict[str, Any], devices: int) -> dict[str, Any]:
    """A GPU backend as ``hwbench list --json`` describes it: available, ``devices`` alike."""
    device = {
        "kind": "gpu",
        "name": gpu["name"],
        "memory_bytes": gpu["memory_bytes"],
        "peak": {"tflops": {"bf16": gpu["bf16"], "fp32": gpu["fp32"]}, "method": "datasheet (dense)"},
    }
    return {"name": backend, "available": True, "reason": "", "kind": "gpu", "devices": [device] * devices}


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Backends by name as ``target.describe`` returns them; cpu is there too, and a test sets the GPUs."""
    backends: dict[str, dict[str, Any]] = {
        "cpu": {"name": "cpu", "available": True, "kind": "cpu", "devices": [{"kind": "cpu", "name": "a CPU"}]},
        "cuda": {"name": "cuda", "available": False, "reason": "no CUDA device", "devices": []},
        "rocm": {"name": "rocm", "available": False, "reason": "no ROCm device", "devices": []},
    }
    monkeypatch.setattr(target, "describe", lambda name: backends[name])
    return backends


def _args(**kw: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_train.add_arguments(parser)
    args = parser.parse_args([])
    vars(args).update(kw)
    return args


def test_auto_chooses_the_gpu_with_its_defaults_and_memory(gpus: dict[str, dict[str, Any]]) -> None:
    needs.module("torch", "hwbench train checks for torch before it plans")
    gpus["cuda"] = _described("cuda", H200, devices=8)
    args = _args()
    where, entry = cli_train.resolve_target(args)
    assert (where.backend, where.kind, where.device, where.devices) == ("cuda", "gpu", "NVIDIA H200", 8)
    assert where.memory_bytes == 141 * GIB and where.peak_tflops["bf16"] == 989.4  # the device's, not the host's
    assert (args.preset, args.dtype) == ("small", "bf16") and entry["kind"] == "gpu"


def test_without_a_gpu_auto_falls_back_to_the_cpu(gpus: dict[str, dict[str, Any]]) -> None:
    needs.module("torch", "hwbench train checks for torch before it plans")
    args = _args()
    where, _ = cli_train.resolve_target(args)
    assert where.backend == "cpu" and (args.preset, args.dtype) == ("tiny", "fp32")
    with pytest.raises(UserError, match="backend cuda is unavailable here: no CUDA device"):
        cli_train.resolve_target(_args(backend="cuda"))


def test_a_model_too_large_or_too_many_ranks_is_refused_before_allocating(gpus: dict[str, dict[str, Any]]) -> None:
    small = {**H200, "name": "a 16 GiB GPU", "memory_bytes": 16 * GIB}
    gpus["cuda"] = _described("cuda", small, devices=2)
    where, _ = target.choose("cuda")
    need = PRESETS["1b"].memory_estimate() / GIB
    with pytest.raises(UserError, match=rf"preset 1b needs about {need:.1f} GiB .* 16.0 GiB memory of a 16 GiB GPU"):
        session.check_fits(PRESETS["1b"], where, 1)
    session.check_fits(PRESETS["small"], where, 2)  # per device: ranks on GPUs do not add up
    with pytest.raises(UserError, match=r"--ranks 4 needs 4 devices \(one per rank\), cuda has 2 here"):
        session.check_fits(PRESETS["small"], where, 4)


@pytest.mark.parametrize(("backend", "gpu"), [("cuda", H200), ("rocm", MI300X)])
def test_the_plan_on_gpus_launches_nccl_ranks_and_counts_every_device(
    gpus: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str, gpu: dict[str, Any]
) -> None:
    gpus[backend] = _described(backend, gpu, devices=2)
    where, _ = target.choose(backend)
    launched: list[tuple[dict[str, Any], int]] = []
    losses = [6.0 - 0.1 * step for step in range(12)]

    def fake_launch(job: dict[str, Any], folder: Path, ranks: int, *rest: Any) -> Any:
        launched.append((job, ranks))
        return launch_of(losses, step_s=0.02 * ranks, ranks=ranks)

    monkeypatch.setattr(session, "launch", fake_launch)
    plan = session.Plan(PRESETS["micro"], "bf16", len(losses), [1, 2], [False], 0, 60.0, 0)
    records = session.run_plan(plan, where, tmp_path, lambda _: None)
    assert [ranks for _, ranks in launched] == [1, 1, 2, 2]  # cold then warm caches per rank count
    for job, _ in launched:  # torch's ROCm build drives AMD GPUs as "cuda" devices (NCCL's API: RCCL)
        assert job["device"] == "cuda" and job["dtype"] == "bf16"
        assert job["deterministic"] is False and job["threads"] is None
    assert [r["status"] for r in records] == ["ok"] * 4
    for record in records:
        ranks = record["shape"]["ranks"]
        assert record["backend"] == backend and record["device"] == gpu["name"] and record["dtype"] == "bf16"
        assert record["metrics"]["peak_tflops"] == pytest.approx(gpu["bf16"] * ranks)  # every device the ranks use
        assert record["metrics"]["pct_peak"] == pytest.approx(100 * record["metrics"]["tflops"] / (gpu["bf16"] * ranks))
        assert record["train"]["deterministic"] is False
    two = [r for r in records if r["shape"]["ranks"] == 2]
    assert all(r["train"]["scaling_efficiency"] == pytest.approx(0.5) for r in two)  # steps twice as long
