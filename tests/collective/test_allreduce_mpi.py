"""AllReduce's MPI native: ranks started by mpirun, exact on 2 and 4 ranks beside gloo and llvm_shm,
dead, stuck and interrupted MPI ranks as records with nothing left behind, and the skip reasons."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import needs
import pytest
from conftest import hwbench_cmd
from test_allreduce import _rank_processes, _run, _segments, needs_torch

from hwbench.collective import mpi
from hwbench.results.files import validate

needs.module("llvmlite")
needs_mpi = pytest.mark.skipif(bool(mpi.missing()), reason=mpi.missing() or "MPI is available")


@needs_torch
@needs_mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_mpi_is_exact_beside_gloo_and_llvm_shm(tmp_path: Path, ranks: int) -> None:
    before = _segments()
    code, doc, text = _run(
        tmp_path,
        "--ranks",
        str(ranks),
        "--impl",
        "gloo,mpi,llvm_shm",
        "--shape",
        "allreduce:count=200",
        "--shape",
        "allreduce:count=70000",
    )
    assert code == 0, text
    assert validate(doc) == []
    records = [r for r in doc["records"] if r["impl"] != "*"]
    assert len(records) == 3 * 2 * 2
    for r in records:
        assert r["status"] == "ok", r
        assert r["parity"]["exact"] and r["parity"]["mismatches"] == 0
        assert r["parity"]["elements"] == r["shape"]["count"] * ranks
        assert r["timing"]["n"] >= 5 and r["timing"]["median_s"] > 0
        if r["impl"] == "mpi":
            assert r["impl_kind"] == "native" and r["config"]["library"].startswith("Open MPI")
            assert r["config"]["in_place" if r["shape"]["in_place"] else "out_of_place"]
        if r["impl"] == "llvm_shm":  # the porting overhead appears against both natives
            assert set(r["metrics"]["porting_overheads"]) == {"gloo", "mpi"}
    assert doc["collective"]["impls"]["mpi"]["small_message_latency_s"] > 0
    assert _segments() <= before


@needs_torch
@needs_mpi
@pytest.mark.parametrize(
    "fault,status,words",
    [
        ("1:0:kill", "crashed", "rank 1 was killed by SIGKILL"),
        ("1:0:hang", "timeout", "still running without an error: rank 1"),
    ],
)
def test_a_dead_or_stuck_mpi_rank_is_a_record(tmp_path: Path, fault: str, status: str, words: str) -> None:
    marker = f"mpifault{time.monotonic_ns()}"
    env = dict(os.environ, HWBENCH_AR_FAULT=fault, HWBENCH_TEST_MARKER=marker)
    before = _segments()
    code, doc, text = _run(
        tmp_path, "--ranks", "2", "--impl", "mpi", "--timeout", "3", "--shape", "allreduce:count=64", env=env
    )
    assert code == 1, text
    first, rest = [r for r in doc["records"] if r["impl"] != "*"]
    assert first["status"] == status and words in first["reason"], first
    assert first["impl_kind"] == "native" and first["device"]
    assert rest["status"] == "ok"  # fresh ranks, a fresh mpirun
    assert validate(doc) == []
    assert _rank_processes(marker) == []
    assert _segments() <= before


@needs_torch
@needs_mpi
def test_ctrl_c_leaves_no_mpirun_and_no_rank(tmp_path: Path) -> None:
    marker = f"mpictrlc{time.monotonic_ns()}"
    env = dict(os.environ, HWBENCH_AR_FAULT="1:1:hang", HWBENCH_TEST_MARKER=marker)
    before = _segments()
    out = tmp_path / "c.json"
    proc = subprocess.Popen(
        hwbench_cmd(
            "run",
            "--backend",
            "cpu",
            "--kernel",
            "allreduce",
            "--ranks",
            "2",
            "--impl",
            "mpi",
            "--budget",
            "0.02",
            "--shape",
            "allreduce:count=64",
            "--out",
            str(out),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 120
    while len(_rank_processes(marker)) < 4 and time.monotonic() < deadline:  # run, worker, mpirun, ranks
        time.sleep(0.2)
    time.sleep(2)
    proc.send_signal(signal.SIGINT)
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, text
    time.sleep(0.5)
    assert _rank_processes(marker) == []
    assert _segments() <= before
    assert json.loads(out.read_text())["run"]["incomplete"] is True


def test_mpirun_reports_become_per_rank_codes() -> None:
    killed = "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n"
    exited = (
        "the job to be terminated. The first process to do so was:\n\n  Process name: [[29071,1],2]\n"
        "  Exit code:    3\n"
    )
    assert mpi.exit_codes(killed, 3) == [None, -9, None]
    assert mpi.exit_codes(exited, 3) == [None, None, 3]
    assert mpi.exit_codes("", 2) == [None, None]


def test_without_mpirun_the_cases_are_skipped_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    why = mpi.missing()
    assert why.startswith("mpi4py is not installed") or why.startswith("mpirun is not on PATH")
    from hwbench.backends.cpu import CPUBackend
    from hwbench.collective.dispatch import support
    from hwbench.core.registry import implementations

    backend = CPUBackend()
    impl = next(i for i in implementations(backend, "allreduce") if i.name == "mpi")
    verdict = support(impl, "fp32", backend.name)
    assert not verdict.ok and verdict.reason == why


def test_under_torchrun_mpi_cases_are_skipped_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.collective.run import _support
    from hwbench.run.case import CaseRequest

    for key, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(key, value)
    case = CaseRequest("allreduce", "mpi", "cpu", 0, "fp32", {"count": 4, "ranks": 2, "in_place": 0})
    backends = [{"name": "cpu", "devices": [{"index": 0, "name": "cpu", "vendor": "", "kind": "cpu"}]}]
    assert "not MPI processes" in (_support(case, backends) or "")
