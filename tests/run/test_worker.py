"""A kernel that crashes, hangs, raises or computes wrong results becomes a record; the run goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import hwbench_cmd

from hwbench.decide.catalog import Catalog
from hwbench.results.derive import add_metrics
from hwbench.run.runner import Plan, execute
from hwbench.run.timing import TimingConfig
from hwbench.run.worker import Worker, WorkerDied

SHAPE = {"M": 33, "N": 17, "K": 9}
EXPECTED = {
    "good": "ok",
    "segfault": "crashed",
    "abort": "crashed",
    "hang": "timeout",
    "wrong": "parity_failed",
    "raise": "runtime_error",
    "compile_error": "compile_error",
    "nan": "parity_failed",
}


@pytest.fixture(scope="module")
def faulty_doc() -> dict:
    from hwbench.core.registry import get_backend

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HWBENCH_BACKENDS", "faulty=fakes.backend:faulty")
        patch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH", "")]))
        patch.syspath_prepend(str(Path(__file__).parents[1]))
        get_backend.cache_clear()
        yield _run_faulty()
    get_backend.cache_clear()


def _run_faulty() -> dict:
    plan = Plan(
        backends=["faulty"],
        kernels=["gemm"],
        shapes={"gemm": [SHAPE]},
        timeout_s=4.0,
        timing=TimingConfig(warmup_s=0.0, budget_s=0.02, min_samples=3),
    )
    return execute(plan, {"gemm": ("fp32",)}, {"gemm": [SHAPE]}, finish=lambda doc: add_metrics(doc, Catalog.load()))


def test_every_misbehaviour_becomes_its_record(faulty_doc: dict) -> None:
    statuses = {r["impl"]: r["status"] for r in faulty_doc["records"]}
    assert statuses == EXPECTED
    assert faulty_doc["run"]["incomplete"] is False


def test_reasons_say_what_happened(faulty_doc: dict) -> None:
    reasons = {r["impl"]: r["reason"] for r in faulty_doc["records"]}
    assert "SIGSEGV" in reasons["segfault"]
    assert "SIGABRT" in reasons["abort"]
    assert "4 s timeout" in reasons["hang"]
    assert "device lost" in reasons["raise"]
    assert "expected ';'" in reasons["compile_error"]
    assert "1 of 561 elements" in reasons["wrong"]
    assert reasons["good"] == ""


def test_crashed_records_still_name_their_device_and_kind(faulty_doc: dict) -> None:
    by_impl = {r["impl"]: r for r in faulty_doc["records"]}
    for name in ("segfault", "hang"):
        assert by_impl[name]["device"] == "Faulty Device"
        assert by_impl[name]["impl_kind"] == "portable" and by_impl[name]["language"] == "test"


def test_failed_parity_is_never_timed(faulty_doc: dict) -> None:
    by_impl = {r["impl"]: r for r in faulty_doc["records"]}
    for name in ("wrong", "nan"):
        assert by_impl[name]["parity"]["passed"] is False
        assert by_impl[name]["timing"]["n"] == 0
        assert by_impl[name]["metrics"]["tflops"] is None
    assert by_impl["nan"]["parity"]["nonfinite"] == 1
    assert by_impl["good"]["timing"]["n"] >= 3
    assert by_impl["good"]["metrics"]["tflops"] > 0


def test_worker_restarts_after_a_crash(faulty_env: dict[str, str]) -> None:
    with Worker() as worker:
        case = {
            "kernel": "gemm",
            "impl": "segfault",
            "backend": "faulty",
            "device_index": 0,
            "dtype": "fp32",
            "shape": SHAPE,
            "timing": {"budget_s": 0.01, "warmup_s": 0.0},
        }
        with pytest.raises(WorkerDied) as died:
            worker.request({"op": "case", "case": case}, timeout=30)
        assert died.value.status == "crashed"
        answer = worker.request({"op": "case", "case": {**case, "impl": "good"}}, timeout=30)
        assert answer["record"]["status"] == "ok"


def _marked_processes(marker: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize(
    ("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["INT", "TERM", "HUP"]
)
def test_a_stop_signal_saves_finished_cases_and_leaves_no_process(
    faulty_env: dict[str, str], tmp_path: Path, stop: signal.Signals, status: int
) -> None:
    out = tmp_path / "interrupted.json"
    marker = f"HWBENCH_TEST_MARKER={uuid.uuid4().hex}"
    env = dict(faulty_env, HWBENCH_TEST_MARKER=marker.split("=", 1)[1])
    proc = subprocess.Popen(
        hwbench_cmd(
            "run",
            "--backend",
            "faulty",
            "--kernel",
            "gemm",
            "--impl",
            "good,hang",
            "--shape",
            "gemm:M=33,N=17,K=9",
            "--budget",
            "0.02",
            "--timeout",
            "120",
            "--out",
            str(out),
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A background shell starts children with SIGINT ignored; a terminal user's hwbench has it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the good case is done and the hang has started
        line = proc.stderr.readline()
        if "[1/2 " in line or not line:
            break
    time.sleep(1.0)
    proc.send_signal(stop)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == status
    doc = json.loads(out.read_text())
    assert doc["run"]["incomplete"] is True
    assert [r["impl"] for r in doc["records"]] == ["good"]
    assert doc["records"][0]["status"] == "ok"
    assert "INCOMPLETE" in stdout
    time.sleep(0.2)
    assert _marked_processes(marker) == []


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet is not running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


PARENT = """
import sys
from hwbench.run.worker import Worker
worker = Worker()
worker.request({"op": "host"}, 120)
print(worker._proc.pid, flush=True)
case = {"kernel": "gemm", "impl": "hang", "backend": "faulty", "device_index": 0, "dtype": "fp32",
        "shape": {"M": 8, "N": 8, "K": 8}, "timing": {"budget_s": 0.01, "warmup_s": 0.0}}
worker.request({"op": "case", "case": case}, None)
"""


def test_the_worker_dies_with_its_parent_even_when_hung(faulty_env: dict[str, str]) -> None:
    """SIGKILL of the parent (no clean-up runs) still ends the worker, in the middle of a hung kernel."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], env=faulty_env, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    time.sleep(1.0)  # the hang has started
    assert _alive(worker)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)


def test_worker_ignores_driver_output_on_stdout(faulty_env: dict[str, str]) -> None:
    # The answer channel is a dedicated fd: text a library prints to stdout cannot corrupt it.
    with Worker() as worker:
        answer = worker.request({"op": "host"}, timeout=60)
    assert "host" in answer and answer["host"]["cpu"]["cores"] >= 1
    assert os.environ.get("HWBENCH_BACKENDS", "").startswith("faulty=")
