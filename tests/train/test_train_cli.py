"""``hwbench train`` end to end on the CPU (the micro preset), and its bad input as one line each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import needs
import pytest

needs.module("torch", "the training workload")

from hwbench.results.files import load  # noqa: E402

ARGS = ["--backend", "cpu", "--preset", "micro", "--steps", "20", "--compile", "off"]


def _hwbench(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwbench", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_a_training_run_writes_cold_and_warm_records_that_train(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    stamped = time.time() - 30.0
    env = dict(os.environ, HWBENCH_SUBMIT_TIME=str(stamped), HWBENCH_SUBMIT_SOURCE="kubernetes manifest stamp")
    done = _hwbench("train", *ARGS, "--data-dir", str(tmp_path), "-o", str(out), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = load(out)  # valid against the schema
    cold, warm = doc["records"]
    assert [r["shape"]["warm_cache"] for r in (cold, warm)] == [0, 1]
    for r in (cold, warm):
        t = r["train"]
        assert r["kernel"] == "train" and r["impl"] == "eager" and r["status"] == "ok", r["reason"]
        assert len(t["losses"]) == 20 and t["loss_ratio"] <= 0.9
        assert r["metrics"]["tflops"] > 0 and 0 < r["metrics"]["pct_peak"] <= 100
        assert t["tokens_per_s"] == pytest.approx(t["tokens_per_step"] / r["timing"]["median_s"])
        assert t["peak_memory_bytes"] > 0 and t["data"]["bytes"] > 0 and t["data"]["shards"] == 4
    assert cold["train"]["submit_source"] == "kubernetes manifest stamp"
    assert cold["train"]["submit_to_first_step_s"] >= 30.0
    assert warm["train"]["submit_source"] == "process launch" and warm["train"]["submit_to_first_step_s"] < 30.0
    assert not list(tmp_path.glob("hwbench-train-*")), "the shards outlived the run"
    assert "tokens/s" in done.stdout and "MFU" in done.stdout
    scored = _hwbench("score", f"cpu={out}", "--json")  # the cold run's submit-to-first-step counts
    assert scored.returncode == 0, scored.stderr
    (platform,) = json.loads(scored.stdout)["platforms"]
    first = platform["dimensions"]["time_to_first_step"]
    assert not first["missing"] and first["source"]["source"] == "training submit-to-first-step"
    assert first["raw"] == pytest.approx(cold["train"]["submit_to_first_step_s"])
    assert first["source"]["submit_source"] == "kubernetes manifest stamp" and first["source"]["cache"] == "cold"


def test_two_ranks_under_torchrun_report_their_scaling(tmp_path: Path) -> None:
    out = tmp_path / "train.json"
    done = _hwbench("train", *ARGS, "--ranks", "1,2", "-o", str(out), "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    records = load(out)["records"]
    assert [r["shape"]["ranks"] for r in records] == [1, 1, 2, 2]
    two = records[2:]
    assert all(r["status"] == "ok" for r in records), [r["reason"] for r in records]
    assert all(r["train"]["tokens_per_step"] == 2 * records[0]["train"]["tokens_per_step"] for r in two)
    assert all(0 < r["train"]["scaling_efficiency"] < 2 for r in two)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--preset", "huge"], "unknown preset 'huge'; known presets: micro, tiny, small, 1b"),
        (["--ranks", "two"], "--ranks takes whole numbers separated by commas"),
        (["--ranks", "0"], "--ranks takes positive numbers of ranks"),
        (["--steps", "1", "--preset", "micro"], "--steps must be at least 2"),
        (["--backend", "opencl"], "backend 'opencl' cannot train"),
        (["--preset", "1b", "--ranks", "64"], "preset 1b needs about"),
        (["--preset", "micro", "--data-dir", "/nonexistent/folder"], "--data-dir /nonexistent/folder is not a folder"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str) -> None:
    done = (
        _hwbench("train", "--backend", "cpu", *args, timeout=300)
        if "--backend" not in args
        else _hwbench("train", *args)
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert line in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr


def test_an_unwritable_data_folder_is_one_line() -> None:
    """/proc is a folder nobody, root included, can make a folder in."""
    done = _hwbench("train", *ARGS, "--data-dir", "/proc")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--data-dir /proc is not writable" in done.stderr and done.stderr.strip().count("\n") == 0
