"""Burns whose file survives (a failed final write rescued, points kept on disk as the burn goes,
a user's file in the way never overwritten), verdicts that do not pass a burn that did not happen
(errored or incomplete), a backend that broke the device contract named, ``burn --duration``
alone, and text from results files escaped in ``check``'s output."""

from __future__ import annotations

import copy
import errno
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS, hwbench_cmd
from synthetic_results import write

from hwbench.cli import burn as burn_cli
from hwbench.cli.main import main
from hwbench.core.registry import get_backend
from hwbench.results import files as results

DATA = TESTS / "data" / "acceptance"
PASS, PASS_BURN, MISSING = (DATA / n for n in ("pass.json", "pass-burn.json", "missing.json"))
BACKENDS = "burnfaulty=fakes.backend:burnfaulty,burnbad=fakes.backend:burnbad"
TINY = ["--shape", "gemm:M=24,N=16,K=32"]
CPU_TINY = ["--backend", "cpu", "--shape", "gemm:M=64,N=64,K=64"]


@pytest.fixture
def test_backends(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The test-only 'burnfaulty' and 'burnbad' backends, here and in the processes a burn starts."""
    monkeypatch.setenv("HWBENCH_BACKENDS", BACKENDS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    get_backend.cache_clear()
    yield monkeypatch
    get_backend.cache_clear()


def _burning(out: Path, *args: str) -> subprocess.Popen[str]:
    """A burn of the 'good' test GEMM for 60 s, a point every 0.2 s, into ``out``."""
    command = hwbench_cmd("burn", "--backend", "burnfaulty", "--impl", "good", *TINY, *args, "-o", str(out))
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _points_on_disk(out: Path, at_least: int, timeout_s: float = 60.0) -> dict[str, Any]:
    """The document at ``out`` once its first burn entry holds ``at_least`` points."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            doc = json.loads(out.read_text())
            if doc["burn"] and len(doc["burn"][0]["series"]) >= at_least:
                return doc
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"{out} did not gain {at_least} point(s) within {timeout_s:g} s")


# Item 2: a finished burn is never lost.


def test_a_burn_whose_file_cannot_be_written_at_the_end_is_rescued_with_the_works_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, here = tmp_path / "results", tmp_path / "here"
    folder.mkdir()
    here.mkdir()
    monkeypatch.chdir(here)
    out = folder / "b.json"
    full = {"now": False}
    real_mkstemp, real_execute = results.tempfile.mkstemp, burn_cli.execute_burn

    def mkstemp(*args: Any, **kwargs: Any) -> tuple[int, str]:
        if full["now"] and Path(kwargs.get("dir") or ".").resolve() == folder.resolve():
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_mkstemp(*args, **kwargs)

    def execute(*args: Any, **kwargs: Any) -> dict[str, Any]:
        doc = real_execute(*args, **kwargs)
        full["now"] = True  # the disk fills as the burn ends
        return doc

    monkeypatch.setattr(results.tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(burn_cli, "execute_burn", execute)
    assert main(["burn", *CPU_TINY, "--duration", "1", "--interval", "0.25", "-q", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    (rescued,) = here.glob("hwbench-rescued-b-*.json")
    assert f"the results go to {rescued}" in err and "No space left on device" in err
    doc = json.loads(rescued.read_text())
    assert results.validate(doc) == [] and doc["run"]["incomplete"] is False
    (entry,) = doc["burn"]
    assert entry["status"] == "ok" and len(entry["series"]) == 4


def test_the_points_are_on_disk_as_the_burn_goes_and_survive_sigkill(
    test_backends: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "b.json"
    proc = _burning(out, "--duration", "60", "--interval", "0.2")
    try:
        early = _points_on_disk(out, 1)
        assert results.validate(early) == [] and early["run"]["incomplete"] is True
        _points_on_disk(out, len(early["burn"][0]["series"]) + 2)  # the file gains points as it goes
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    doc = json.loads(out.read_text())
    assert results.validate(doc) == [] and doc["run"]["incomplete"] is True and doc["run"]["finished"] is None
    (entry,) = doc["burn"]
    assert entry["status"] == "interrupted" and len(entry["series"]) >= 3 and entry["iterations"] > 0
    assert "in progress" in entry["reason"]
    # and a node judged on what a killed burn left fails its burn checks
    assert main(["check", str(PASS), str(out), "--allow-missing"]) == 1


def test_a_file_a_user_put_at_the_burns_name_meanwhile_is_never_overwritten(
    test_backends: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "b.json"
    proc = _burning(out, "--duration", "60", "--interval", "0.2")
    try:
        _points_on_disk(out, 1)
        mine = tmp_path / "mine.tmp"
        mine.write_text("mine")
        os.replace(mine, out)  # the user's own file now has the name
        time.sleep(1.5)  # a few intervals: the burn must not write over it
        assert out.read_text() == "mine"
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert out.read_text() == "mine"
    doc = json.loads((tmp_path / "b.1.json").read_text())
    assert results.validate(doc) == [] and doc["burn"][0]["status"] == "interrupted"
    assert doc["burn"][0]["stopped_by"] == "SIGTERM" and doc["burn"][0]["series"]


# Item 3: a burn that did not happen does not pass.


def _burn_file(tmp_path: Path, name: str, **changes: Any) -> Path:
    doc = json.loads(PASS_BURN.read_text())
    entry = doc["burn"][0]
    for key, value in changes.items():
        if key == "incomplete":
            doc["run"]["incomplete"] = value
        else:
            entry[key] = value
    assert results.validate(json.loads(results.dumps(doc))) == []
    return write(tmp_path / name, doc)


def _rows(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, dict[tuple[Any, str], dict[str, Any]]]:
    status = main(["check", *map(str, args), "--json"])
    doc = json.loads(capsys.readouterr().out)
    return status, {(r["device_index"], r["check"]): r for r in doc["checks"]}


ERRORED = {
    "status": "error",
    "reason": "the device process exited with code 1",
    "iterations": 0,
    "checks": 0,
    "elapsed_s": 0.0,
    "series": [],
    "decay_ratio": None,
    "decay_pct": None,
    "throttled": None,
}


def test_an_errored_burn_fails_its_checks_even_with_allow_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    errored = _burn_file(tmp_path, "errored.json", **ERRORED)
    status, rows = _rows(capsys, PASS, errored, "--allow-missing")
    assert status == 1
    for check in ("burn_decay_pct", "mismatches"):
        assert rows[(0, check)]["verdict"] == "FAIL", rows[(0, check)]
        assert "burn error" in rows[(0, check)]["detail"] and "exited with code 1" in rows[(0, check)]["detail"]
    assert rows[(1, "burn_decay_pct")]["verdict"] == "PASS"  # the other device burned
    assert main(["check", str(PASS), str(errored), "--allow-missing"]) == 1
    text = capsys.readouterr().out
    assert "FAIL: h100-node NVIDIA H100 80GB HBM3 (cuda:0) wrong results: burn error" in text
    assert "did not happen" in text.splitlines()[-1] and ": FAIL" in text.splitlines()[-1]


def test_an_incomplete_burn_fails_burn_decay_and_wrong_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped = _burn_file(
        tmp_path,
        "sighup.json",
        incomplete=True,
        status="interrupted",
        stopped_by="SIGHUP",
        elapsed_s=2.4,
        duration_s=60.0,
        reason="stopped by SIGHUP after 2.4 of 60 s",
    )
    status, rows = _rows(capsys, PASS, stopped, "--allow-missing")
    assert status == 1
    for check in ("burn_decay_pct", "mismatches"):
        assert rows[(0, check)]["verdict"] == "FAIL"
        assert "burn interrupted: stopped by SIGHUP after 2.4 of 60 s" in rows[(0, check)]["detail"]
    # an entry marked ok in a file whose run is incomplete (a burn killed mid-write) is not complete either
    cut = _burn_file(tmp_path, "cut.json", incomplete=True)
    _, rows = _rows(capsys, PASS, cut)
    assert rows[(0, "burn_decay_pct")]["verdict"] == "FAIL" and "incomplete" in rows[(0, "burn_decay_pct")]["detail"]


# Item 15: a backend that broke the device contract is named with the contract.


def test_a_backend_whose_devices_are_not_deviceinfo_is_named_with_the_contract(
    test_backends: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b.json"
    assert main(["burn", "--backend", "burnbad", "--duration", "1", "--interval", "0.5", "-q", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "asdict" not in err and "Traceback" not in err, err
    assert "burnbad" in err and "devices()" in err and "DeviceInfo" in err and "dict" in err, err


# Item 16: --duration alone.


def test_a_short_duration_alone_burns_with_a_shorter_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b.json"
    assert main(["burn", *CPU_TINY, "--duration", "2", "-q", "-o", str(out)]) == 0, capsys.readouterr().err
    (entry,) = json.loads(out.read_text())["burn"]
    assert entry["interval_s"] < 2 and len(entry["series"]) >= 4
    assert main(["burn", *CPU_TINY, "--duration", "2", "--interval", "5", "-o", str(out)]) == 2
    assert "--interval 5 s is longer than --duration 2 s" in capsys.readouterr().err


# Item 6: text from results files is escaped.


def test_check_escapes_terminal_sequences_from_results_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(MISSING.read_text())
    doc["host"]["hostname"] = "node\x1b]0;owned\x07"
    evil = copy.deepcopy(doc)
    for section in ("records", "health", "burn"):
        for entry in evil.get(section) or []:
            entry["device"] = "GPU\x1b[2J"
    path = write(tmp_path / "evil.json", evil)
    assert main(["check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "node\\x1b]0;owned\\x07" in out and "GPU\\x1b[2J" in out


def test_a_seed_numpy_refuses_is_bad_input_to_burn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.json"
    assert main(["burn", *CPU_TINY, "--seed", "-1", "--duration", "1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--seed must be a whole number" in err and "Traceback" not in err and not out.exists()
