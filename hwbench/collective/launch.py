"""Start N local ranks, watch them, and turn whatever happens into records.

Each rank is ``python -m hwbench.collective.rank JOB`` in a process group of its own, with the
environment torchrun would give it (TCP store on 127.0.0.1, a free port). The launcher
reads rank 0's events, enforces a deadline on start-up and on every case, and when a rank
dies, fails or stalls it kills every rank's process group, records the case in flight as
``crashed``/``timeout``/``runtime_error`` naming the rank, and starts fresh ranks for the
cases left. Ranks die with their launcher (PR_SET_PDEATHSIG), shared segments are
unlinked as soon as they are mapped, and any left by a rank killed in between are swept,
even when a second interrupt arrives during the sweep. Every name a launch creates says
which process owns it (:mod:`.debris`), so what a killed launcher left is swept by the next.
When time runs out, each rank's progress file says which ranks fell behind.
When the cases include the ``mpi`` native, one ``mpirun`` starts the ranks instead
(:mod:`.mpi`): the same deadlines apply to it, per-rank exit codes come from its report.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwbench.collective import mpi
from hwbench.collective.debris import PREFIX, SHM_DIR, owner_token, remove
from hwbench.collective.rank import EXIT_COLLECTIVE_ERROR
from hwbench.collective.rendezvous import INIT_TIMEOUT_S
from hwbench.collective.topology import TOKEN_ENV

POLL_S = 0.02
#: Seconds a launcher waits past a rank's own timeout before killing the ranks itself.
GRACE_S = 10.0
#: Seconds a launch keeps removing what a rank still exiting writes into its shared-memory folders.
SWEEP_S = 2.0

OnEvent = Callable[[dict[str, Any]], None]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@dataclass
class Outcome:
    """What one launch of the ranks produced."""

    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    participants: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int | None = None
    failed_impl: str | None = None  # set when the failure was in an implementation's set-up
    status: str | None = None
    reason: str = ""
    ready: bool = False
    interrupted: bool = False


class Launch:
    """One group of ``ranks`` local processes running ``job``."""

    def __init__(
        self,
        job: dict[str, Any],
        ranks: int,
        timeout_s: float,
        on_event: OnEvent,
        env: dict[str, str] | None = None,
        use_mpi: bool = False,
    ) -> None:
        self.job, self.ranks, self.timeout_s, self.on_event = job, ranks, timeout_s, on_event
        self.use_mpi = use_mpi
        self.env = dict(os.environ if env is None else env)
        self.token = owner_token()
        self.dir = Path(tempfile.gettempdir()) / f"{PREFIX}-{self.token}"  # made by run()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outcome = Outcome()
        self._offset = 0

    def _spawn(self) -> None:
        job_path = self.dir / "job.json"
        job_path.write_text(json.dumps({**self.job, "parent_pid": os.getpid()}))
        argv = [sys.executable, "-m", "hwbench.collective.rank", str(job_path)]
        common = dict(
            self.env,
            WORLD_SIZE=str(self.ranks),
            LOCAL_WORLD_SIZE=str(self.ranks),
            GROUP_RANK="0",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(free_port()),
            PYTHONUNBUFFERED="1",
            OMP_NUM_THREADS="1",
        )
        common[TOKEN_ENV] = self.token
        if self.use_mpi:
            self._spawn_mpirun(argv, common)
            return
        for rank in range(self.ranks):
            self.procs.append(self._popen(argv, dict(common, RANK=str(rank), LOCAL_RANK=str(rank)), f"rank{rank}.log"))

    def _popen(
        self, argv: list[str], env: dict[str, str], log_name: str, die_with_launcher: bool = False
    ) -> subprocess.Popen[bytes]:
        # A process group of its own (killed as one), but the launcher's session: a session
        # apiece would put each rank in its own scheduler autogroup and slow every wake-up.
        new_group = sys.version_info < (3, 11)  # older Pythons have no process_group argument

        def setup() -> None:
            if new_group:
                os.setpgrp()
            if die_with_launcher:
                _pdeathsig()

        group: dict[str, Any] = {} if new_group else {"process_group": 0}
        with open(self.dir / log_name, "wb") as log:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                preexec_fn=setup if new_group or die_with_launcher else None,
                **group,
            )

    def _spawn_mpirun(self, argv: list[str], env: dict[str, str]) -> None:
        """One mpirun for all ranks; Open MPI's session and shared-memory files stay in this launch's folders."""
        shm = SHM_DIR / f"{PREFIX}-{self.token}-mpi"
        shm.mkdir(mode=0o700)
        (self.dir / "ompi").mkdir()
        env[mpi.MPI_ENV] = "1"
        command = mpi.command(self.ranks, argv, str(self.dir / "ompi"), str(shm))
        self.procs.append(self._popen(command, env, "mpirun.log", die_with_launcher=True))

    def _codes(self) -> list[int | None]:
        """Each rank's exit status (None: running, or killed by mpirun without a word)."""
        if not self.use_mpi:
            return [p.poll() for p in self.procs]
        status = self.procs[0].poll()
        if status is None or status == 0:
            return [status] * self.ranks
        codes = mpi.exit_codes(self._log("mpirun.log"), self.ranks)
        return [EXIT_COLLECTIVE_ERROR if c is None and r in self._errors() else c for r, c in enumerate(codes)]

    def _alive(self) -> list[int]:
        if not self.use_mpi:
            return [r for r, p in enumerate(self.procs) if p.poll() is None]
        return [r for r in range(self.ranks) if _running(self._rank_pid(r))]

    def _rank_pid(self, rank: int) -> int | None:
        try:
            return int((self.dir / f"rank{rank}.pid").read_text())
        except (OSError, ValueError):
            return None

    def _log(self, name: str) -> str:
        try:
            return (self.dir / name).read_text(errors="replace")
        except OSError:
            return ""

    def _read_events(self) -> None:
        path = self.dir / "events.jsonl"
        if not path.exists():
            return
        with open(path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            event = json.loads(line)
            kind = event["event"]
            if kind == "ready":
                self.outcome.ready = True
                self.outcome.participants = event["participants"]
            elif kind == "start":
                self.outcome.in_flight = event["index"]
                self._case_started = time.monotonic()
            elif kind == "record":
                self.outcome.records[event["index"]] = event["record"]
                self.outcome.in_flight = None
            self.on_event(event)

    def run(self) -> Outcome:
        """Run the ranks to the end of the job or the first failure; always cleans up, to the end
        even when interrupted (again) meanwhile."""
        try:
            self.dir.mkdir(mode=0o700)
            self._spawn()
            self._watch()
        except KeyboardInterrupt:
            self.outcome.interrupted = True
        finally:
            for step in (self._kill, self._read_events, self._sweep):
                self._to_the_end(step)
        return self.outcome

    def _to_the_end(self, step: Callable[[], None]) -> None:
        """Run a clean-up step (each may run again) until it completes; an interrupt only marks the outcome."""
        while True:
            try:
                step()
                return
            except KeyboardInterrupt:
                self.outcome.interrupted = True

    def _watch(self) -> None:
        started = self._case_started = time.monotonic()
        startup = max(self.timeout_s, INIT_TIMEOUT_S)  # what the ranks allow themselves; the launcher adds GRACE_S
        while True:
            time.sleep(POLL_S)
            self._read_events()
            codes = self._codes()
            if all(c == 0 for c in codes):
                return
            if any(c not in (None, 0) for c in codes) or (self.use_mpi and self.procs[0].poll() is not None):
                time.sleep(0.5)  # let the other ranks write what they saw
                self._read_events()
                self._failure(self._codes())
                return
            now = time.monotonic()
            if not self.outcome.ready and now - started > startup + GRACE_S:
                self._timed_out(f"the ranks did not start within {startup:g} s")
                return
            if self.outcome.in_flight is not None and now - self._case_started > self.timeout_s + GRACE_S:
                self._timed_out(f"the case did not finish within --timeout {self.timeout_s:g} s")
                return

    def _errors(self) -> dict[int, dict[str, Any]]:
        found = {}
        for rank in range(self.ranks):
            path = self.dir / f"rank{rank}.error.json"
            if path.exists():
                found[rank] = {**json.loads(path.read_text()), "at": path.stat().st_mtime_ns}
        return found

    def _last_line(self, rank: int) -> str:
        name = "mpirun.log" if rank < 0 else f"rank{rank}.log"  # rank -1: mpirun itself
        lines = [line for line in self._log(name).strip().splitlines() if line.strip("- ")]
        return lines[-1].strip()[:300] if lines else ""

    def _failure(self, codes: list[int | None]) -> None:
        errors = self._errors()
        if self.use_mpi and not errors and all(c is None for c in codes):
            self._set("crashed", f"mpirun exited with status {self.procs[0].poll()}: {self._last_line(-1)}", None)
            return
        # The root cause is a rank that died without reporting; a reported error comes next.
        silent = [r for r, c in enumerate(codes) if c not in (None, 0, EXIT_COLLECTIVE_ERROR) and r not in errors]
        if silent:
            rank, code = silent[0], codes[silent[0]]
            assert code is not None
            how = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with status {code}"
            last = self._last_line(rank)
            self._set("crashed", f"rank {rank} {how}" + (f": {last}" if last and code > 0 else ""), None)
            return
        # The first rank to fail names the cause; the others mostly report the lost connection.
        rank = min(errors, key=lambda r: (errors[r]["at"], r)) if errors else 0
        error = errors.get(rank, {"status": "crashed", "message": self._last_line(rank), "phase": ""})
        phase = str(error.get("phase", ""))
        # A set-up that failed by itself fails every case of that implementation; a timeout
        # there is another rank's doing, so only the case in flight is blamed.
        impl = phase.split(":", 1)[1] if phase.startswith("setup:") and error["status"] != "timeout" else None
        stuck = [r for r, c in enumerate(codes) if c is None and r not in errors]
        where = ", ".join(f"rank {r} (in {_phase_text(self._progress(r)[1])})" for r in stuck)
        self._set(
            error["status"],
            f"rank {rank}: {error['message']}" + (f"; still running without an error: {where}" if stuck else ""),
            impl,
        )

    def _progress(self, rank: int) -> tuple[int, str]:
        """The step and phase rank ``rank`` last reported ((-1, "") before its first report)."""
        try:
            seen = json.loads((self.dir / f"rank{rank}.progress").read_text())
            return int(seen["step"]), str(seen["phase"])
        except (OSError, ValueError, KeyError, TypeError):
            return -1, ""

    def _timed_out(self, what: str) -> None:
        errors = self._errors()
        detail = "".join(f"; rank {r}: {e['message']}" for r, e in errors.items())
        self._set("timeout", f"{what}: {self._stragglers()}{detail}", None)

    def _stragglers(self) -> str:
        """Which live ranks fell behind the others, and where each is."""
        seen = {r: self._progress(r) for r in self._alive()}
        if not seen:
            return "no rank is running"
        ahead = max(step for step, _ in seen.values())
        behind: dict[str, list[int]] = {}
        waiting: dict[str, list[int]] = {}
        for r, (step, phase) in sorted(seen.items()):
            (behind if step < ahead else waiting).setdefault(_phase_text(phase), []).append(r)
        if not behind:
            return "; ".join(f"{_ranks(rs)} still in {phase}" for phase, rs in waiting.items())
        late = "; ".join(f"{_ranks(rs)} did not arrive (still in {phase})" for phase, rs in behind.items())
        return late + "".join(f"; {_ranks(rs)} waited in {phase}" for phase, rs in waiting.items())

    def _set(self, status: str, reason: str, impl: str | None) -> None:
        self.outcome.status, self.outcome.reason, self.outcome.failed_impl = status, reason, impl

    def _kill(self) -> None:
        if self.use_mpi:  # ranks are process groups of mpirun's making: kill them by pid, then mpirun
            for rank in range(self.ranks):
                pid = self._rank_pid(rank)
                if _running(pid):
                    assert pid is not None
                    _kill_group(pid)
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.procs:
            proc.wait()
            try:  # anything the rank started lives in its process group
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _sweep(self) -> None:
        """Remove this launch's segments and folder. A rank that is still exiting may write into
        Open MPI's shared-memory folder while it is removed (the removal then leaves it behind,
        not empty), so what is left is removed again once the ranks are gone, for a bounded time."""
        deadline = time.monotonic() + SWEEP_S
        while True:
            left = list(SHM_DIR.glob(f"{PREFIX}-{self.token}-*"))
            for leftover in left:
                remove(leftover)
            if not any(os.path.lexists(p) for p in left) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        remove(self.dir)


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _phase_text(phase: str) -> str:
    """A rank's phase as the reason says it: ``case:3:timing`` is "case 3 (timing)"."""
    kind, _, rest = phase.partition(":")
    if kind == "case":
        index, _, step = rest.partition(":")
        return f"case {index}" + (f" ({step})" if step else "")
    if kind == "setup":
        return f"the set-up of {rest}" if rest else "set-up"
    return {"": "start-up", "init": "start-up", "joining": "the rendezvous", "done": "the end"}.get(kind, phase)


def _pdeathsig() -> None:
    """In the child before exec: SIGKILL it when the launcher dies (mpirun would outlive it otherwise)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _running(pid: int | None) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    if pid is None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _kill_group(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
            return
        except (ProcessLookupError, PermissionError):
            continue
