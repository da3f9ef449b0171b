"""What collective runs leave behind and how it goes: owned names, the sweep of a killed run's
debris (dead owners only), clean-up that a second interrupt cannot cut short, and timeouts that
name the ranks that fell behind and the user's --timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import needs
import pytest
from conftest import hwbench_cmd

from hwbench.collective import debris, mpi
from hwbench.collective import launch as launching
from hwbench.collective import run as collective
from hwbench.collective.debris import PREFIX, SHM_DIR, owner, owner_alive, owner_token, start_time, sweep_stale
from hwbench.collective.launch import Launch, Outcome
from hwbench.collective.rank import Progress
from hwbench.collective.shm import segment_name
from hwbench.run.case import CaseRequest


def _dead_pid() -> tuple[int, int]:
    """The pid and start time of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["sleep", "30"])
    start = start_time(proc.pid)
    assert start is not None
    proc.kill()
    proc.wait()
    return proc.pid, start


def test_names_carry_their_owner_and_a_reused_pid_or_a_zombie_is_not_it() -> None:
    token = owner_token()
    assert owner(f"{PREFIX}-{token}-n0-abcdef12") == (os.getpid(), start_time(os.getpid()))
    assert owner(f"{PREFIX}-{token}") == owner(f"{PREFIX}-{token}-mpi") == (os.getpid(), start_time(os.getpid()))
    assert owner(f"{PREFIX}-0123456789ab-n0-abcdef12") is None  # no owner in the name
    me, started = os.getpid(), start_time(os.getpid())
    assert started is not None and owner_alive(me, started)
    assert not owner_alive(me, started + 1)  # the same pid, another process
    assert not owner_alive(*_dead_pid())
    zombie = subprocess.Popen(["true"])
    zombie_start = start_time(zombie.pid)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert zombie_start is not None and not owner_alive(zombie.pid, zombie_start)
    zombie.wait()


def test_the_sweep_removes_what_dead_owners_left_and_nothing_else(tmp_path: Path) -> None:
    temp, shm = tmp_path / "tmp", tmp_path / "shm"
    temp.mkdir()
    shm.mkdir()
    pid, start = _dead_pid()
    dead = f"{PREFIX}-{pid}-{start}-0badf00d"
    live = f"{PREFIX}-{owner_token()}"
    mine = start_time(os.getpid())
    assert mine is not None
    reused = f"{PREFIX}-{os.getpid()}-{mine + 1}-0badf00d"  # this pid, but not this process
    made = {
        temp / dead: "dir",
        shm / f"{dead}-mpi": "dir",
        shm / f"{dead}-n0-12345678": "file",
        temp / live: "dir",
        shm / f"{live}-n0-12345678": "file",
        shm / f"{reused}-n0-12345678": "file",
        shm / f"{PREFIX}-0123456789ab-n0-12345678": "file",  # no owner in the name: left alone
        temp / "unrelated": "dir",
    }
    for path, kind in made.items():
        if kind == "dir":
            path.mkdir()
            (path / "inner").write_bytes(b"x" * 1000)
        else:
            path.write_bytes(b"\0" * 4096)
    others = shm / f"{dead}-n1-12345678"
    others.write_bytes(b"")
    if os.getuid() == 0:  # another user's debris is theirs to sweep
        os.chown(others, 65534, 65534)
    removed = sweep_stale([temp, shm])
    gone = {temp / dead, shm / f"{dead}-mpi", shm / f"{dead}-n0-12345678", shm / f"{reused}-n0-12345678"}
    assert set(removed) == gone
    for path in made:
        assert path.exists() == (path not in gone), path
    assert others.exists() == (os.getuid() == 0)
    assert sweep_stale([temp, shm]) == []


def _owned_by(marker: str) -> dict[int, str]:
    """Live rank and mpirun processes whose environment carries ``marker``: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker.encode() not in (entry / "environ").read_bytes():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def _ranks_of(marker: str) -> list[int]:
    return [pid for pid, line in _owned_by(marker).items() if "hwbench.collective.rank" in line]


def test_sigkill_of_the_run_kills_its_ranks_and_the_next_run_sweeps_what_it_left(tmp_path: Path) -> None:
    needs.module("torch.distributed")
    needs.module("llvmlite")
    temp = tmp_path / "tmp"
    temp.mkdir()
    marker = f"sigkill{time.monotonic_ns()}"
    impl = "mpi" if not mpi.missing() else "llvm_shm"  # mpi leaves a folder in /dev/shm too
    env = dict(os.environ, TMPDIR=str(temp), HWBENCH_TEST_MARKER=marker, HWBENCH_AR_FAULT="1:0:hang")
    common = ("run", "--backend", "cpu", "--kernel", "allreduce", "--ranks", "2", "--budget", "0.02", "--quiet")
    run = subprocess.Popen(
        hwbench_cmd(*common, "--impl", impl, "--shape", "allreduce:count=64", "--out", str(tmp_path / "a.json")),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_ranks_of(marker)) < 2:
            assert time.monotonic() < deadline and run.poll() is None, "the ranks did not start"
            time.sleep(0.1)
        left = [p.name for p in temp.glob(f"{PREFIX}-*")]
        assert len(left) == 1 and owner(left[0]) == (run.pid, start_time(run.pid))
        mpi_folder = SHM_DIR / f"{left[0]}-mpi"
        assert mpi_folder.exists() == (impl == "mpi")
        run.send_signal(signal.SIGKILL)
        run.wait()
        deadline = time.monotonic() + 20
        while _ranks_of(marker):
            assert time.monotonic() < deadline, f"ranks outlived their launcher: {_owned_by(marker)}"
            time.sleep(0.1)
        assert (temp / left[0]).exists()  # nothing could clean up after a SIGKILL
        again = subprocess.run(
            hwbench_cmd(*common, "--impl", "gloo", "--shape", "allreduce:count=1", "--out", str(tmp_path / "b.json")),
            capture_output=True,
            text=True,
            env=dict(env, HWBENCH_AR_FAULT=""),
            cwd=tmp_path,
            timeout=180,
        )
        assert again.returncode == 0, again.stdout + again.stderr
        assert list(temp.glob(f"{PREFIX}-*")) == [] and not mpi_folder.exists()
    finally:
        for pid in _owned_by(marker):  # whatever of this test's run survived (none should)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class _Scripted(Launch):
    """A launch whose "ranks" are sleeping processes; the test writes what real ranks would."""

    def __init__(self, timeout_s: float, script: Any) -> None:
        super().__init__({"cases": []}, 2, timeout_s, lambda event: None)
        self.script = script

    def _spawn(self) -> None:
        for rank in range(self.ranks):
            self.procs.append(self._popen(["sleep", "60"], dict(self.env), f"rank{rank}.log"))
        self.script(self.dir)


def _progress(folder: Path, rank: int, *phases: str) -> None:
    progress = Progress(folder / f"rank{rank}.progress")
    for phase in phases:
        progress(phase)


def _events(folder: Path, *events: dict[str, Any]) -> None:
    with open(folder / "events.jsonl", "a") as sink:
        sink.writelines(json.dumps(e) + "\n" for e in events)


CASE_0 = ("joining", "setup", "case:0", "setup:gloo", "case:0:buffers", "case:0:check")


def _in_case_0(rank_1_phases: tuple[str, ...]) -> Any:
    def script(folder: Path) -> None:
        _events(folder, {"event": "ready", "participants": []}, {"event": "start", "index": 0, "impl": "gloo"})
        _progress(folder, 0, *CASE_0)
        _progress(folder, 1, *rank_1_phases)

    return script


def test_a_stuck_case_names_the_users_timeout_and_only_the_rank_that_did_not_arrive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launching, "GRACE_S", 0.0)
    started = time.monotonic()
    outcome = _Scripted(0.3, _in_case_0(CASE_0[:3])).run()
    assert outcome.status == "timeout" and outcome.in_flight == 0
    assert outcome.reason == (
        "the case did not finish within --timeout 0.3 s: rank 1 did not arrive (still in case 0); "
        "rank 0 waited in case 0 (check)"
    )
    assert time.monotonic() - started < 10


def test_a_case_every_rank_is_still_in_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launching, "GRACE_S", 0.0)
    outcome = _Scripted(0.3, _in_case_0(CASE_0)).run()
    assert outcome.reason == "the case did not finish within --timeout 0.3 s: ranks 0, 1 still in case 0 (check)"


def test_a_start_up_timeout_names_the_rank_that_never_joined(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launching, "GRACE_S", 0.0)
    monkeypatch.setattr(launching, "INIT_TIMEOUT_S", 0.2)

    def script(folder: Path) -> None:
        _progress(folder, 0, "joining")  # rank 1 wrote nothing yet: still importing torch

    outcome = _Scripted(0.2, script).run()
    assert outcome.status == "timeout" and not outcome.ready
    assert outcome.reason == (
        "the ranks did not start within 0.2 s: rank 1 did not arrive (still in start-up); "
        "rank 0 waited in the rendezvous"
    )


def test_a_second_interrupt_during_the_clean_up_does_not_stop_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C (or SIGTERM made Stopped) while the ranks run, then another while the launch sweeps."""
    launch = _Scripted(60.0, lambda folder: (SHM_DIR / f"{PREFIX}-{launch.token}-n0-12345678").write_bytes(b"x"))

    def interrupted() -> None:
        raise KeyboardInterrupt

    calls: list[Path] = []
    real_remove = debris.remove

    def remove_once_interrupted(path: Path) -> None:
        calls.append(path)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the second signal, right in the sweep
        real_remove(path)

    monkeypatch.setattr(launch, "_watch", interrupted)
    monkeypatch.setattr(launching, "remove", remove_once_interrupted)
    try:
        outcome = launch.run()
    except KeyboardInterrupt:
        pytest.fail("the second interrupt cut the clean-up short")
    assert outcome.interrupted
    assert all(proc.poll() is not None for proc in launch.procs)
    assert not launch.dir.exists()
    assert list(SHM_DIR.glob(f"{PREFIX}-{launch.token}-*")) == []
    assert len(calls) >= 3  # the interrupted removal was made again


def test_a_launch_names_its_folder_and_segments_after_its_owner(tmp_path: Path) -> None:
    launch = Launch({"cases": []}, 1, 1.0, lambda event: None)
    here = (os.getpid(), start_time(os.getpid()))
    assert owner(launch.dir.name) == here and owner(f"{PREFIX}-{launch.token}-mpi") == here
    assert not launch.dir.exists()  # made by run(), swept by it
    assert owner(segment_name(None, 0)) == here  # a torchrun rank's own segments: this process owns them


def test_an_interrupt_between_launches_keeps_the_records_so_far(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.collective.launch import Outcome

    cases = [
        CaseRequest("allreduce", "gloo", "cpu", 0, "fp32", {"count": 4, "ranks": 2, "in_place": f}) for f in (0, 1)
    ]
    backends = [
        {"name": "cpu", "implementations": {}, "devices": [{"index": 0, "name": "cpu", "vendor": "", "kind": "cpu"}]}
    ]

    class FirstThenCrash:
        """Case 0 ran; the ranks crashed in case 1."""

        def __init__(self, job: dict[str, Any], *args: Any, **kwargs: Any) -> None:
            self.job = job

        def run(self) -> Outcome:
            first = self.job["cases"][0]
            return Outcome(records={0: dict(first["record"], status="ok")}, in_flight=1, status="crashed", ready=True)

    def sink(event: dict[str, Any]) -> None:
        raise KeyboardInterrupt  # Ctrl-C while the crash is being recorded

    monkeypatch.setattr(collective, "Launch", FirstThenCrash)
    try:
        records, interrupted, _ = collective._run_local(cases, 2, backends, 5.0, sink)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped, and the records with it")
    assert interrupted and records[0]["status"] == "ok"
