"""``hwbench drill`` end to end: two CPU ranks under torchrun, one SIGKILLed at the seeded step,
resumed from its checkpoint with every loss equal to the uninterrupted run's; bad input as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import needs
import pytest

needs.module("torch", "the training workload")

from hwbench.results.files import load  # noqa: E402
from hwbench.train.drill import kill_point  # noqa: E402

ARGS = ["--backend", "cpu", "--preset", "micro", "--ranks", "2", "--steps", "16", "--checkpoint-every", "4"]


def _hwbench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hwbench", *args], capture_output=True, text=True, timeout=timeout)


def _pids_alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if Path(f"/proc/{pid}").exists()]


def test_the_drill_resumes_with_identical_losses(tmp_path: Path) -> None:
    out = tmp_path / "drill.json"
    done = _hwbench("drill", *ARGS, "--seed", "3", "--checkpoint-dir", str(tmp_path), "-o", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = load(out)["records"]
    assert record["kernel"] == "drill" and record["impl"] == "torchrun" and record["status"] == "ok", record["reason"]
    d = record["drill"]
    point = kill_point(3, 16, 4, 2)
    assert (d["kill_step"], d["killed_rank"]) == (point.step, point.rank)
    # the kill falls right after the step, before that step's checkpoint (if it has one)
    assert (
        d["resumed_from_step"] == (point.step - 1) // 4 * 4 and d["steps_lost"] == point.step - d["resumed_from_step"]
    )
    assert d["restarts"] == 1 and 0 < d["detect_s"] < d["time_to_resume_s"]
    assert d["losses"] == d["reference_losses"] and len(d["losses"]) == 16
    assert record["parity"]["exact"] and record["parity"]["mismatches"] == 0
    events = [m["event"] for m in d["timeline"]]
    assert events.index("kill") < events.index("restart") < events.index("resume")
    assert not list(tmp_path.glob("hwbench-drill-*")), "the checkpoints outlived the drill"
    pids = [
        int(line)
        for line in subprocess.run(
            ["pgrep", "-f", "hwbench.train.worker"], capture_output=True, text=True
        ).stdout.split()
    ]
    assert not _pids_alive(pids), "a rank outlived the drill"
    assert "bit for bit" in done.stdout
    scored = _hwbench("score", f"cpu={out}", "--json")  # the drill's file is the recovery dimension's figure
    assert scored.returncode == 0, scored.stderr
    (platform,) = json.loads(scored.stdout)["platforms"]
    recovery = platform["dimensions"]["recovery"]
    assert not recovery["missing"] and recovery["source"]["source"] == "drill time to resume"
    assert recovery["raw"] == pytest.approx(d["time_to_resume_s"] / 60) and recovery["score"] == 100.0


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--checkpoint-dir", "/proc"], "--checkpoint-dir /proc is not writable"),
        (["--checkpoint-dir", "/nonexistent"], "--checkpoint-dir /nonexistent is not a folder"),
        (["--max-restarts", "0"], "--max-restarts must be at least 1"),
        (["--steps", "5"], "--steps 5 leaves no step to kill after the first checkpoint (step 4)"),
        (["--checkpoint-every", "0"], "--checkpoint-every must be at least 1 step"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str) -> None:
    done = _hwbench("drill", *ARGS, *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert line in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
