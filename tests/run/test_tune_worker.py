"""Tuning runs its candidates in the worker process: a candidate that segfaults, aborts or hangs is a
dropped candidate saying why, the command goes on and keeps the fastest good one, within its budget.

``tunecrash`` (below) is ``test_tune``'s sleeping fake whose candidates may also crash or hang in
their first call, as a JIT kernel may.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_tune import HERE, TESTS, TunableFake, _Sleeping

from hwbench.core.registry import get_backend
from hwbench.run.case import CaseRequest
from hwbench.run.tune import tune_cases

SHAPE = {"M": 24, "N": 20, "K": 16}
#: The derived candidate first; the fastest good one (1 ms) comes after a segfault and an abort,
#: and the one after the hang (faster still) is never reached: the hang takes the rest of the budget.
SPACE = [
    {"delay_us": 3000},
    {"delay_us": 100, "crash": 1},
    {"delay_us": 100, "crash": 2},
    {"delay_us": 1000},
    {"delay_us": 100, "crash": 3},
    {"delay_us": 500},
]
BUDGET_S = 5.0


class _Crashing(_Sleeping):
    def __init__(self, a: np.ndarray, b: np.ndarray, config: Mapping[str, Any]) -> None:
        super().__init__(a, b, config)
        self.crash = int(config.get("crash", 0))

    def run(self) -> None:
        if self.crash == 1:
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if self.crash == 2:
            os.kill(os.getpid(), signal.SIGABRT)
        while self.crash == 3:
            time.sleep(1)
        super().run()


class CrashingFake(TunableFake):
    """GEMM in sleeping configurations, some of which crash or hang."""

    name = "tunecrash"
    prepared_type = _Crashing


@pytest.fixture
def crashing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The crashing fake registered (for this process and the worker), hwbench's cache in ``tmp_path``."""
    monkeypatch.setenv("HWBENCH_BACKENDS", "tunecrash=test_tune_worker:CrashingFake")
    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TUNEFAKE_SPACE", json.dumps(SPACE))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    get_backend.cache_clear()
    yield dict(os.environ)
    get_backend.cache_clear()


def test_crashes_and_a_hang_are_dropped_and_the_best_good_candidate_kept(crashing: dict[str, str]) -> None:
    request = CaseRequest("gemm", "sleepy", "tunecrash", 0, "fp32", dict(SHAPE))
    start = time.monotonic()
    (result,), interrupted = tune_cases([request], BUDGET_S)
    spent = time.monotonic() - start
    assert not interrupted and spent < BUDGET_S + 3.0, spent
    assert result.status == "tuned", result.reason
    assert result.entry is not None and result.entry.config == {"delay_us": 1000}
    reasons = {t.config.get("crash"): t.reason for t in result.dropped}
    assert set(reasons) == {1, 2, 3}, reasons
    assert "crashed" in reasons[1] and "SIGSEGV" in reasons[1]
    assert "crashed" in reasons[2] and "SIGABRT" in reasons[2]
    assert "timeout" in reasons[3] and "killed" in reasons[3]
    assert len(result.tried) == 5 and result.of == 6  # the hang took what was left


def test_the_command_goes_on_reports_them_and_the_next_run_uses_the_tuned_entry(crashing: dict[str, str]) -> None:
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "hwbench", "tune", "--backend", "tunecrash", "--shape", "gemm:M=24,N=20,K=16"]
        + ["--budget", str(BUDGET_S), "--json"],
        capture_output=True,
        text=True,
        env=crashing,
        timeout=60,
    )
    spent = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert spent < BUDGET_S + 6.0, spent  # the budget, the interpreter's start and the listing
    (summary,) = json.loads(done.stdout)
    assert summary["status"] == "tuned" and summary["config"] == {"delay_us": 1000}
    dropped = {d["config"].get("crash"): d["reason"] for d in summary["dropped"]}
    assert "SIGSEGV" in dropped[1] and "SIGABRT" in dropped[2] and "timeout" in dropped[3]
    ran = subprocess.run(
        [sys.executable, "-m", "hwbench", "run", "--backend", "tunecrash", "--shape", "gemm:M=24,N=20,K=16"]
        + ["--budget", "0.05", "-q", "--out", str(Path(crashing["HWBENCH_CACHE_DIR"]).parent / "r.json")],
        capture_output=True,
        text=True,
        env=crashing,
        timeout=60,
    )
    doc = json.loads(Path(crashing["HWBENCH_CACHE_DIR"]).parent.joinpath("r.json").read_text())
    (record,) = [r for r in doc["records"] if r["impl"] == "sleepy"]
    assert record["status"] == "ok", (record["reason"], ran.stderr)
    assert record["config"]["tuning"]["source"] == "tuned" and record["config"]["delay_us"] == 1000, record
