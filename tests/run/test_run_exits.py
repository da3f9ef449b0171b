"""``hwbench run``'s exit status, input checks before anything runs, stop signals while the
file is written, and the rescue of a results file that cannot be written where asked."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import hwbench_cmd

from hwbench.cli import run as run_command
from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.results import files as results
from hwbench.run.runner import Plan, execute
from hwbench.run.signals import StopSignals
from hwbench.run.timing import TimingConfig

TINY = ["--shape", "gemm:M=8,N=8,K=8", "--budget", "0.01", "--quiet"]


def _run(tmp_path: Path, *args: str) -> tuple[int, Path]:
    out = tmp_path / "r.json"
    return main(["run", *args, "--out", str(out)]), out


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_an_unknown_implementation_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(tmp_path, "--backend", "cpu", "--kernel", "gemm", "--impl", "nonexistent", *TINY)
    assert code == 2 and not out.exists()
    line = _one_line(capsys.readouterr().err)
    assert "unknown implementation 'nonexistent' of gemm; known implementations: " in line
    assert "numpy" in line and "llvm" in line


def test_a_known_implementation_the_backend_lacks_exits_1_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _run(tmp_path, "--backend", "cpu", "--kernel", "gemm", "--impl", "triton", *TINY)
    assert code == 1
    captured = capsys.readouterr()
    assert "no case ran: every case was skipped" in captured.err
    assert "cpu has none of the selected implementations (triton) of gemm; it has: " in captured.out
    assert [r["status"] for r in json.loads(out.read_text())["records"]] == ["skipped"]


def test_a_named_backend_that_cannot_run_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = _run(tmp_path, "--backend", "cuda", "--kernel", "gemm", *TINY)
    assert code == 1
    captured = capsys.readouterr()
    assert "skipped: cuda gemm: backend cuda unavailable" in captured.out
    assert "no case ran" in captured.err


def test_the_backends_that_run_make_it_a_success(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(tmp_path, "--backend", "cpu,cuda", "--kernel", "gemm", "--impl", "numpy", *TINY)
    assert code == 0
    assert "skipped: cuda gemm: backend cuda unavailable" in capsys.readouterr().out
    assert {r["backend"]: r["status"] for r in json.loads(out.read_text())["records"]} == {
        "cpu": "ok",
        "cuda": "skipped",
    }


def test_a_repeated_shape_runs_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(
        tmp_path, "--backend", "cpu", "--impl", "numpy", "--dtype", "fp32", "--shape", "gemm:M=8,N=8,K=8", *TINY
    )
    assert code == 0
    assert "--shape 'gemm:M=8,N=8,K=8' repeats a shape given before; it runs once" in capsys.readouterr().err
    assert len(json.loads(out.read_text())["records"]) == 1


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--timeout", "1e-6", "--timeout must be at least 1 s"),
        ("--timeout", "inf", "--timeout"),
        ("--timeout", "nan", "--timeout"),
        ("--budget", "inf", "--budget"),
        ("--price-per-hour", "inf", "price"),
    ],
)
def test_numbers_that_are_not_usable_are_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, says: str
) -> None:
    code, out = _run(tmp_path, "--backend", "cpu", "--kernel", "gemm", "--shape", "gemm:M=8,N=8,K=8", flag, value)
    assert code == 2 and not out.exists()
    assert says in _one_line(capsys.readouterr().err)


def test_an_unwritable_out_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_run(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(run_command, "execute", no_run)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = main(["run", "--backend", "cpu", "--kernel", "gemm", *TINY, "--out", str(blocker / "r.json")])
    assert code == 2
    assert str(blocker) in _one_line(capsys.readouterr().err)


def test_a_failed_write_saves_the_results_elsewhere_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The disk filled up (or the folder went read-only) while the cases ran: the results are not lost."""
    monkeypatch.chdir(tmp_path)
    real_save, calls = results.save, []

    def full_disk(doc: dict[str, Any], path: Path, next_free: bool = False) -> Path:
        calls.append(path)
        if len(calls) == 1:
            raise UserError(f"cannot write {path}: [Errno 28] No space left on device")
        return real_save(doc, path, next_free=next_free)

    monkeypatch.setattr(results, "save", full_disk)
    code, out = _run(tmp_path / "sub", "--backend", "cpu", "--kernel", "gemm", "--impl", "numpy", *TINY)
    assert code == 0 and not out.exists()
    rescued = calls[1]
    assert rescued != out and json.loads(Path(rescued).read_text())["records"][0]["status"] == "ok"
    err = capsys.readouterr().err
    assert "No space left on device" in err and f"the results go to {rescued} instead" in err


class _SignallingWorker:
    """A worker whose case request is hit by Ctrl-C and whose clean-up is hit by a second one: the
    interrupts land where they once lost the file."""

    def request(self, message: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        if message["op"] == "host":
            return {"host": {}, "software": {}, "settings": {}, "warnings": []}
        if message["op"] == "describe":
            return {
                "name": "cpu",
                "available": True,
                "reason": "",
                "devices": [{"index": 0, "name": "CPU"}],
                "implementations": {
                    "gemm": [{"name": "numpy", "kind": "native", "language": "numpy", "dtypes": ["fp32"]}]
                },
            }
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("the first Ctrl-C did not stop the run")

    def kill(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # the second Ctrl-C, while the run winds down


def test_a_second_ctrl_c_while_winding_down_does_not_lose_the_file(tmp_path: Path) -> None:
    plan = Plan(backends=["cpu"], kernels=["gemm"], timing=TimingConfig(budget_s=0.01))
    out = tmp_path / "r.json"

    def finish(doc: dict[str, Any]) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # and a third stop while the metrics are derived

    with StopSignals() as stops:
        doc = execute(
            plan,
            {"gemm": ("fp32",)},
            {"gemm": [{"M": 8, "N": 8, "K": 8}]},
            worker=_SignallingWorker(),
            finish=finish,
            stops=stops,
        )
        saved = results.save(doc, out, next_free=True)
    assert stops.first == signal.SIGINT and stops.later == 2
    assert json.loads(saved.read_text())["run"]["incomplete"] is True


def test_sigterm_during_allreduce_writes_the_file_and_sweeps(tmp_path: Path) -> None:
    """SIGTERM while the ranks run: exit 143, the finished cases saved, no segment or folder left."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = tmp_path / "ar.json"
    shm = Path("/dev/shm")
    before = set(shm.iterdir()) if shm.is_dir() else set()
    proc = subprocess.Popen(
        hwbench_cmd(
            "run",
            "--backend",
            "cpu",
            "--kernel",
            "allreduce",
            "--shape",
            "allreduce:count=65536,ranks=2",
            "--budget",
            "2",
            "--out",
            str(out),
        ),
        env=dict(os.environ, TMPDIR=str(scratch)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the first case finished; the next one's ranks are running
    assert line.startswith("[1/"), line
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    doc = json.loads(out.read_text())
    assert doc["run"]["incomplete"] is True and "ok" in [r["status"] for r in doc["records"]]
    assert (set(shm.iterdir()) if shm.is_dir() else set()) == before
    assert list(scratch.iterdir()) == []


def test_the_memory_check_counts_the_ranks_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """2**26 fp32 per rank fits 2 ranks here; 64 ranks need far more than the host has: refused first."""
    out = tmp_path / "r.json"
    args = ["run", "--kernel", "allreduce", "--shape", f"allreduce:count={2**26}", "--dtype", "fp32"]
    assert main([*args, "--ranks", "64", "--out", str(out)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "ranks=64" in line and "GiB of host memory" in line and not out.exists()


def test_sizes_sweep_allreduce_in_bytes_as_nccl_tests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run(tmp_path, "--backend", "cpu", "--sizes", "8:64:x2", "--impl", "llvm_shm", "--budget", "0.05", "-q")
    assert code == 0
    records = [r for r in json.loads(out.read_text())["records"] if r["status"] == "ok"]
    assert sorted({r["shape"]["count"] for r in records}) == [2, 4, 8, 16]  # fp32: 8, 16, 32, 64 bytes
    assert "#       size         count      type   redop" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "says"),
    [(["--sizes", "8:1M:x2", "--dtype", "fp32,fp16"], "give one --dtype"), (["--sizes", "8:1M:x1"], "--sizes")],
)
def test_bad_sizes_are_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], says: str
) -> None:
    code, out = _run(tmp_path, "--backend", "cpu", *extra)
    assert code == 2 and not out.exists()
    assert says in _one_line(capsys.readouterr().err)


def test_device_alone_runs_only_that_devices_backend(tmp_path: Path) -> None:
    code, out = _run(tmp_path, "--device", "cpu:0", "--kernel", "gemm", "--impl", "numpy", "--dtype", "fp32", *TINY)
    assert code == 0
    assert {r["backend"] for r in json.loads(out.read_text())["records"]} == {"cpu"}
