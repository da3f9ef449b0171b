"""Cases run in a child process, so a segfault, abort or hang is a record, not the end.

The parent talks to one long-lived child over pipes (JSON lines); the child answers on a
dedicated file descriptor, so whatever a driver prints cannot corrupt the protocol. When
the child dies or a request outlives its timeout, the parent kills the child's whole
process group, turns the request into a ``crashed`` or ``timeout`` answer, and starts a
fresh child for the next one.

Besides whole cases the child answers the tuner's requests (:mod:`hwbench.run.tune`, which drives
it): a case's space, its inputs and reference, and one candidate prepared, checked and timed
(:func:`tune_answer`), so that a candidate that crashes or hangs takes only the child with it.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from hwbench.core.errors import NotApplicable
from hwbench.core.records import finite
from hwbench.core.registry import get_backend
from hwbench.core.tuning import Space
from hwbench.run.case import Case, CaseFailed, CaseRequest, CaseRunner, CaseSkipped, Pipeline, error_line
from hwbench.run.describe import describe_backend, describe_host, remeasured_peak
from hwbench.run.stats import summarize
from hwbench.run.timing import TimingConfig

#: Exit code a child uses for "asked to stop".
_CLEAN_EXIT = 0
#: prctl option: the signal a process gets when its parent ends (linux/prctl.h).
PR_SET_PDEATHSIG = 1


class WorkerDied(Exception):
    """The child ended or was killed before answering; ``status`` is crashed or timeout."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Worker:
    """Parent-side handle of one child process; restarts it after a crash or timeout."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._answers: int | None = None
        self._stderr: Any = None
        self._buffer = b""

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        self._stderr = tempfile.TemporaryFile()
        env = dict(os.environ if self._env is None else self._env, PYTHONUNBUFFERED="1")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "hwbench.run.worker", str(write_fd), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=self._stderr,
            stderr=self._stderr,
            pass_fds=(write_fd,),
            start_new_session=True,
            env=env,
        )
        os.close(write_fd)
        self._answers = read_fd
        self._buffer = b""

    def request(self, message: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """Send one request and wait for its answer; WorkerDied on crash or timeout."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message).encode() + b"\n")
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # the child is already gone: reading its answer reports how it died
        return self._read_answer(timeout)

    def _read_answer(self, timeout: float | None) -> dict[str, Any]:
        assert self._answers is not None and self._proc is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                self.kill()
                raise WorkerDied("timeout", f"no result within the {timeout:g} s timeout; the worker was killed")
            ready, _, _ = select.select([self._answers], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise WorkerDied("crashed", self._death_reason())
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _death_reason(self) -> str:
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self._proc.returncode
        how = f"killed by {_signal_name(code)}" if code is not None and code < 0 else f"exited with code {code}"
        tail = self._stderr_tail()
        self.close()
        return f"the worker process {how}" + (f"; last output: {tail}" if tail else "")

    def _stderr_tail(self, limit: int = 400) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 4096))
        lines = [ln for ln in self._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        return " | ".join(lines[-3:])[-limit:]

    def kill(self) -> None:
        """Kill the child and everything it started."""
        if self._proc is not None and self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._proc.wait()
        self.close()

    def close(self) -> None:
        """Ask the child to exit (killing it if it does not) and release the pipes."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                try:
                    assert proc.stdin is not None
                    proc.stdin.write(b'{"op": "exit"}\n')
                    proc.stdin.close()
                    proc.wait(timeout=5)
                except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait()
            elif proc.stdin is not None:
                proc.stdin.close()
        if self._answers is not None:
            os.close(self._answers)
            self._answers = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def _handle(message: dict[str, Any], runner: Any) -> dict[str, Any]:
    """Answer one request inside the child."""

    op = message.get("op")
    try:
        if op == "describe":
            return describe_backend(message["backend"])
        if op == "host":
            return describe_host()
        if op == "case":
            return {"record": runner.run(CaseRequest(**message["case"]))}
        if op == "remeasure_peak":
            backend = get_backend(message["backend"])
            device = next(d for d in runner.devices(backend) if d.index == message["index"])
            return remeasured_peak(backend, device)
        if op in ("tune_space", "tune_ready", "tune_candidate"):
            return tune_answer(message, runner.pipeline)
        if op == "sensors":
            devices = [(d["backend"], d["device_index"], d.get("device")) for d in message["devices"]]
            return {"sensors": [runner.sensors.entry(*device) for device in devices]}
    except Exception as exc:  # an unexpected failure is an answer, not a dead worker
        return {"error": error_line(exc)}
    return {"error": f"unknown request {op!r}"}


def die_with_parent(parent: int) -> None:
    """Be killed when the process ``parent`` ends, however it ends (SIGKILL included), even in
    the middle of a hung kernel: Linux's parent-death signal, else a watching thread."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        armed = False
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    if armed:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="hwbench-parent-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    """Child entry point: read requests on stdin, answer on the fd named in argv; the second
    argument is the parent's pid, whose end kills this process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C
    if len(argv) > 1:
        die_with_parent(int(argv[1]))
    answers = os.fdopen(int(argv[0]), "wb", buffering=0)
    runner = CaseRunner()
    for line in sys.stdin.buffer:
        message = json.loads(line)
        if message.get("op") == "exit":
            break
        answers.write(json.dumps(finite(_handle(message, runner)), allow_nan=False).encode() + b"\n")
    runner.close()
    return _CLEAN_EXIT


def describe_sensors(worker: Worker, doc: dict[str, Any], timeout: float) -> list[dict[str, Any]] | str:
    """The results file's ``sensors`` section: for each device a case was timed on, what the
    worker's readers of it read (the same readers its cases used) or why nothing; the reason
    when the worker cannot say."""
    timed = {(r["backend"], r.get("device_index")) for r in doc.get("records", []) if (r.get("timing") or {}).get("n")}
    devices = [
        {"backend": b["name"], "device_index": d["index"], "device": d}
        for b in doc.get("backends", [])
        for d in b.get("devices", [])
        if (b["name"], d["index"]) in timed
    ]
    if not devices:
        return []
    try:
        answer = worker.request({"op": "sensors", "devices": devices}, timeout)
    except WorkerDied as died:
        return f"the sensors were not described: {died.reason}"
    sensors: list[dict[str, Any]] | None = answer.get("sensors")
    return sensors if sensors is not None else f"the sensors were not described: {answer.get('error')}"


# --- the child's side of tuning (hwbench.run.tune drives it and keeps the budget) ---


@dataclass(frozen=True)
class Tried:
    """One candidate: its configuration and median, or why it was dropped."""

    config: dict[str, Any]
    median_s: float | None
    reason: str = ""
    wall_s: float = 0.0
    #: Whether it crashed the worker or hung (the worker was killed).
    died: bool = False


def time_candidate(pipeline: Pipeline, case: Case, config: dict[str, Any], timing: TimingConfig) -> Tried:
    """Prepare ``case`` in ``config``, check its first output, time it, check it again."""
    start = time.perf_counter()

    def dropped(why: str) -> Tried:
        return Tried(config, None, why, time.perf_counter() - start)

    inputs = pipeline.inputs(case)
    try:
        prepare: Any = case.backend.prepare  # a tunable backend's prepare takes a candidate
        prepared = prepare(case.impl, case.kernel, inputs, case.shape, case.dtype, case.device, config=config)
    except NotApplicable as exc:
        return dropped(f"not applicable: {exc}")
    except Exception as exc:
        return dropped(f"preparing failed: {error_line(exc)}")
    try:
        _, why = pipeline.parity(case, pipeline.first_output(prepared))
        if why:
            return dropped(f"wrong result: {why}")
        cleared = pipeline.clear(prepared)
        samples = pipeline.time(case, prepared, timing).samples
        _, why = pipeline.recheck(case, prepared, cleared)
    except CaseFailed as fail:
        return dropped(fail.reason)
    if why:
        return dropped(why)
    return Tried(config, summarize(samples).median, "", time.perf_counter() - start)


def space_of(case: Case) -> Space | str:
    """The case's space, or why it has none (a string)."""
    offer = getattr(case.backend, "tuning_space", None)
    if case.impl.kind == "native":
        return "a native library chooses its own configuration"
    if offer is None:
        return f"the {case.backend.name} backend offers no tuning space"
    space: Space | None = offer(case.impl, case.kernel, case.shape, case.dtype, case.device)
    if space is None or not space.candidates:
        return (
            space.note if space is not None else ""
        ) or f"{case.impl.name} has no tuning space on {case.backend.name}"
    return space


def tune_answer(message: dict[str, Any], pipeline: Pipeline) -> dict[str, Any]:
    """The worker's answer to one tuning request (``tune_space``, ``tune_ready`` or
    ``tune_candidate``); every failure but a crash or a hang is an answer."""
    request = CaseRequest(**message["case"])
    try:
        if message["op"] == "tune_space":
            space = space_of(pipeline.resolve(request, probe=True))
            if isinstance(space, str):
                return {"status": "untunable", "reason": space}
            return {"status": "ok", "key": space.key.as_json(), "candidates": space.candidates, "note": space.note}
        case = pipeline.resolve(request)
        if message["op"] == "tune_ready":
            pipeline.reference(case)
            return {"status": "ok"}
        tried = time_candidate(pipeline, case, dict(message["config"]), TimingConfig(**message["timing"]))
        return {"status": "ok", "tried": asdict(tried)}
    except (CaseSkipped, NotApplicable) as skip:
        return {"status": "skipped", "reason": str(skip)}
    except Exception as exc:
        return {"status": "failed", "reason": f"{message['op']} failed: {error_line(exc)}"}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
