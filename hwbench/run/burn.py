"""``hwbench burn``'s coordinator: every selected device loaded at once, one process per device
(and kernel), their series gathered into one results document.

The host and the backends are described in a :class:`~hwbench.run.worker.Worker` (as ``hwbench
run`` does); then each device process (:mod:`hwbench.run.burn_device`) prepares its case and
says ready, and once all are ready every one is told to go, so the loads overlap from the first
second. Points, mismatches and the end of each process arrive as JSON lines; what arrived is
kept whatever happens next: a stop signal (the processes are told to stop, and those that do not
end within :data:`STOP_GRACE_S` are killed), a crash, a hang past the duration.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from hwbench.core.burn_types import BurnEntry, BurnMismatch, BurnPoint
from hwbench.core.errors import UserError
from hwbench.core.records import new_document, now
from hwbench.core.registry import backend_targets
from hwbench.run.burn_device import BurnJob
from hwbench.run.burn_series import event_line, outcome, ready_line, summarize, throttle_reasons
from hwbench.run.runner import PROBE_TIMEOUT_S, describe_all
from hwbench.run.signals import StopSignals
from hwbench.run.worker import Worker, WorkerDied
from hwbench.sensors.health import POLL_S, HealthWatch

#: Seconds a device process may take to prepare its case (compile, first call, check).
PREPARE_TIMEOUT_S = 300.0
#: Seconds the processes get to end after being told to stop.
STOP_GRACE_S = 10.0
#: Seconds past the duration after which a process still burning is taken for hung.
END_GRACE_S = 60.0
#: Default durations, s: any GPU or accelerator selected, else only CPUs.
DEFAULT_DURATION_S = {"gpu": 600.0, "cpu": 120.0}
#: Seconds per point of the series: the default, and the least a user may ask for; a shorter burn
#: than DEFAULT_POINTS * DEFAULT_INTERVAL_S gets DEFAULT_POINTS points by default.
DEFAULT_INTERVAL_S = 5.0
MIN_INTERVAL_S = 0.1
DEFAULT_POINTS = 10
#: Seconds between two snapshots handed to ``progress`` at least (and 10 times what the last took).
PROGRESS_EVERY_S = 1.0

Say = Callable[[str], None]
#: Takes the results document as measured so far (``run.incomplete``, burns in progress).
Progress = Callable[[dict[str, Any]], None]


@dataclass
class BurnPlan:
    """What the user asked to burn."""

    backends: list[str] | None = None  # by name; None: the default (default_backends)
    devices: dict[str, list[int]] | None = None  # backend -> device indices; None: all
    duration_s: float | None = None  # None: by the devices' kind (DEFAULT_DURATION_S)
    interval_s: float | None = None  # None: by the duration (default_interval)
    check_every_s: float | None = 5.0
    check_iterations: int | None = None
    stream: bool = False
    dtype: str | None = None
    impl: str | None = None
    shapes: dict[str, dict[str, int]] = field(default_factory=dict)  # kernel -> shape
    seed: int = 0
    command: list[str] = field(default_factory=list)


def default_duration(devices: list[dict[str, Any]]) -> float:
    """10 minutes where any device is not a CPU, else 2."""
    gpu = any(d.get("kind") != "cpu" for d in devices)
    return DEFAULT_DURATION_S["gpu" if gpu else "cpu"]


def default_interval(duration: float) -> float:
    """:data:`DEFAULT_INTERVAL_S`, or the interval giving :data:`DEFAULT_POINTS` points where that
    gives fewer (not under :data:`MIN_INTERVAL_S`, nor over the duration)."""
    return min(duration, max(MIN_INTERVAL_S, min(DEFAULT_INTERVAL_S, duration / DEFAULT_POINTS)))


def select_devices(plan: BurnPlan, backends: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The devices to burn (as described) and a note for each backend or device asked for by name
    that cannot run."""
    chosen: list[dict[str, Any]] = []
    notes: list[str] = []
    for backend in backends:
        name = backend["name"]
        wanted = (plan.devices or {}).get(name)
        if not backend["available"]:
            if plan.backends is not None:  # asked for by name: say why it burns nothing
                notes.append(f"backend {name} unavailable: {backend['reason']}")
            continue
        indices = [d["index"] for d in backend["devices"]]
        notes += [f"{name} has no device {i} (it has {len(indices)})" for i in sorted(set(wanted or ()) - set(indices))]
        chosen += [d for d in backend["devices"] if wanted is None or d["index"] in wanted]
    return chosen, notes


class DeviceProcess:
    """One device process: its job, the events it sent so far, its pipes."""

    def __init__(self, job: BurnJob) -> None:
        self.job = job
        self.ready: dict[str, Any] | None = None
        self.failed: dict[str, Any] | None = None
        self.done: dict[str, Any] | None = None
        self.points: list[BurnPoint] = []
        self.mismatches: list[BurnMismatch] = []
        self.iterations = self.checks = 0
        self.died = ""
        self._buffer = b""
        self._log = tempfile.TemporaryFile()
        read_fd, write_fd = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hwbench.run.burn_device", str(write_fd), str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=self._log,
            pass_fds=(write_fd,),
            start_new_session=True,  # the terminal's Ctrl-C reaches this process only, which stops them
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        os.close(write_fd)
        self.fd: int | None = read_fd
        self.send(json.dumps(asdict(job)))

    @property
    def label(self) -> str:
        where = f"{self.job.backend}:{self.job.device_index}"
        return where if self.job.kernel == "gemm" else f"{where} {self.job.kernel}"

    @property
    def over(self) -> bool:
        """Whether this process will say nothing more."""
        return self.fd is None or self.failed is not None or self.done is not None

    def send(self, line: str) -> None:
        """One line to the process (ignored once it is gone)."""
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass

    def read(self) -> list[dict[str, Any]]:
        """The events that arrived (call when the pipe is readable); at its end, how it died."""
        assert self.fd is not None
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            os.close(self.fd)
            self.fd = None
            if self.done is None and self.failed is None:
                self.died = self._death()
            return []
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        events = [json.loads(line) for line in lines if line.strip()]
        for event in events:
            self._take(event)
        return events

    def _take(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "ready":
            self.ready = event
        elif kind == "failed":
            self.failed = event
        elif kind == "point":
            self.points.append(event["point"])
            self.iterations, self.checks = event["iterations"], event["checks"]
        elif kind == "mismatch":
            self.mismatches.append(event["mismatch"])
        elif kind == "done":
            self.done = event
            self.iterations, self.checks = event["iterations"], event["checks"]

    def _death(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        how = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exited with code {code}"
        self._log.seek(max(0, self._log.seek(0, os.SEEK_END) - 4096))
        lines = [ln for ln in self._log.read().decode(errors="replace").splitlines() if ln.strip()]
        tail = " | ".join(lines[-3:])[-400:]
        return f"the device process {how}" + (f"; last output: {tail}" if tail else "")

    def kill(self) -> None:
        """Kill the process and whatever it started."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def close(self) -> None:
        """Release the pipes and the log (the process is killed if still running)."""
        self.kill()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self._log.close()


def follow(
    procs: list[DeviceProcess],
    until: Callable[[], bool],
    deadline: float,
    say: Say | None,
    on_point: Callable[[], None] | None = None,
) -> None:
    """Read events until ``until()`` holds or ``deadline`` (monotonic) passes, saying each point
    (and calling ``on_point`` after the events that brought one)."""
    while not until():
        live = {p.fd: p for p in procs if p.fd is not None}
        left = deadline - time.monotonic()
        if not live or left <= 0:
            return
        ready, _, _ = select.select(list(live), [], [], min(left, 1.0))
        for fd in ready:
            proc = live[fd]
            events = proc.read()
            for line in filter(None, (event_line(proc.label, e) for e in events)):
                if say is not None:
                    say(line)
            if on_point is not None and any(e.get("event") == "point" for e in events):
                on_point()


def entry(
    proc: DeviceProcess, stopped_by: str | None, health: dict[str, Any] | None = None, running: bool = False
) -> BurnEntry:
    """The document's ``burn`` entry of one device process (``health``: its device's entry over the
    burn; ``running``: the burn goes on, the entry is a snapshot of what was measured so far)."""
    job, ready, done = proc.job, proc.ready or {}, proc.done or {}
    series = proc.points
    elapsed = float(done.get("elapsed_s") or (series[-1]["t_s"] if series else 0.0))
    wrong = int(done.get("wrong_checks") or len(proc.mismatches))
    error = (proc.failed or {}).get("reason") or done.get("error") or proc.died
    if proc.ready is not None and proc.done is None and not error and stopped_by is None and not running:
        error = f"no end within {END_GRACE_S:g} s of the duration: the process was taken for hung and killed"
    how = "running" if running and proc.done is None else stopped_by
    status, reason = outcome(proc.mismatches, wrong, proc.checks, str(error or ""), how, elapsed, job.duration_s)
    return {
        "backend": job.backend,
        "device_index": job.device_index,
        "device": ready.get("device"),
        "kernel": ready.get("kernel", job.kernel),
        "impl": ready.get("impl", job.impl),
        "dtype": ready.get("dtype", job.dtype),
        "shape": ready.get("shape", job.shape),
        "check": ready.get("check"),
        "duration_s": job.duration_s,
        "elapsed_s": elapsed,
        "interval_s": job.interval_s,
        "check_every_s": job.check_every_s,
        "check_every_iterations": job.check_iterations,
        "iterations": proc.iterations,
        "checks": proc.checks,
        "mismatched_checks": wrong,
        "max_check_gap_s": done.get("max_check_gap_s"),
        "check_s": done.get("check_s"),
        "mismatches": proc.mismatches,
        "series": series,
        **summarize(series, elapsed, throttle_reasons(health)),
        "stopped_by": stopped_by,
        "status": status,
        "reason": reason,
        "notes": [n for n in [done.get("sensor_error")] if n],
    }


def _jobs(plan: BurnPlan, devices: list[dict[str, Any]], duration: float, interval: float) -> list[BurnJob]:
    kernels = ["gemm", "stream"] if plan.stream else ["gemm"]
    return [
        BurnJob(
            backend=d["backend"],
            device_index=d["index"],
            kernel=kernel,
            duration_s=duration,
            interval_s=interval,
            check_every_s=plan.check_every_s,
            check_iterations=plan.check_iterations,
            dtype=plan.dtype if kernel == "gemm" else None,
            impl=plan.impl if kernel == "gemm" else None,
            shape=plan.shapes.get(kernel),
            seed=plan.seed,
        )
        for d in devices
        for kernel in kernels
    ]


def describe(plan: BurnPlan, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Describe the host and the backends into ``doc`` (in a worker process); the descriptions."""
    with Worker() as worker:
        try:
            host = worker.request({"op": "host"}, PROBE_TIMEOUT_S)
            doc.update({k: host[k] for k in ("host", "software", "settings")})
            doc["warnings"] = list(host.get("warnings", []))
        except WorkerDied as died:
            doc["warnings"].append(f"host description failed: {died.reason}")
        if plan.backends is not None:
            return describe_all(worker, plan.backends, PROBE_TIMEOUT_S)
        return default_backends(describe_all(worker, list(backend_targets()), PROBE_TIMEOUT_S))


def default_backends(described: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a burn naming no backend loads: the backends of kind gpu, and of kind cpu where no GPU is found."""
    gpus, hosts = ([b for b in described if b.get("kind") == kind] for kind in ("gpu", "cpu"))
    return gpus if any(b["available"] and b["devices"] for b in gpus) else gpus + hosts  # the file says why


def burn_all(
    procs: list[DeviceProcess],
    duration: float,
    say: Say | None,
    stops: StopSignals | None,
    health: HealthWatch,
    on_point: Callable[[], None] | None = None,
) -> str | None:
    """Prepare, start (``health`` watching from then on) and follow every process to its end,
    calling ``on_point`` once they started and after each new point; the stop signal's name if one came."""
    try:
        follow(
            procs, lambda: all(p.ready is not None or p.over for p in procs), time.monotonic() + PREPARE_TIMEOUT_S, say
        )
        going = [p for p in procs if p.ready is not None and not p.over]
        if say is not None:
            for proc in procs:
                said = ready_line(proc.label, proc.job.kernel, proc.failed, proc.ready)
                if said:
                    say(said)
        health.start()
        for proc in procs:
            proc.send("go" if proc in going else "stop")
            if proc.ready is None and proc.failed is None:
                proc.died = proc.died or f"not ready within {PREPARE_TIMEOUT_S:g} s: killed"
                proc.kill()
        if say is not None and going:
            say(f"burn: {len(going)} load(s) running for {duration:g} s; Ctrl-C stops and keeps what was measured")
        if on_point is not None and going:
            on_point()
        follow(going, lambda: all(p.over for p in going), time.monotonic() + duration + END_GRACE_S, say, on_point)
        return None
    except KeyboardInterrupt:
        if stops is not None:
            stops.hold()
        for proc in procs:
            proc.send("stop")
        follow(procs, lambda: all(p.over for p in procs), time.monotonic() + STOP_GRACE_S, None)
        first = stops.first if stops is not None else None
        return signal.Signals(first).name if first else "SIGINT"


def so_far(doc: dict[str, Any], procs: list[DeviceProcess]) -> dict[str, Any]:
    """``doc`` as measured so far: incomplete, every burn's entry as it stands, no health readings yet."""
    run = {**doc["run"], "incomplete": True, "finished": None}
    burns = [entry(p, None, running=True) for p in procs]
    return {**doc, "run": run, "burn": burns, "health": [], "sensors": _sensors(procs)}


def _sensors(procs: list[DeviceProcess]) -> list[dict[str, Any]]:
    return [p.ready["sensors"] for p in procs if p.ready and p.job.kernel == "gemm" and "sensors" in p.ready]


def execute_burn(
    plan: BurnPlan, say: Say | None = None, stops: StopSignals | None = None, progress: Progress | None = None
) -> dict[str, Any]:
    """Burn what ``plan`` says; the results document (``burn`` and ``sensors`` filled, no records).
    A UserError (an interval longer than the devices' default duration) before anything burns.
    ``progress`` gets the document as measured so far (:func:`so_far`) once the loads started and
    then as points arrive, at most every :data:`PROGRESS_EVERY_S`."""
    doc = new_document(plan.command or list(sys.argv), incomplete=True, seed=plan.seed)
    stopped_by: str | None = None
    procs: list[DeviceProcess] = []
    devices: list[dict[str, Any]] = []
    watch: HealthWatch | None = None
    next_at = 0.0

    def on_point() -> None:
        nonlocal next_at
        if progress is not None and time.monotonic() >= next_at:
            start = time.monotonic()
            progress(so_far(doc, procs))
            next_at = time.monotonic() + max(PROGRESS_EVERY_S, 10 * (time.monotonic() - start))

    try:
        backends = describe(plan, doc)
        keys = ("name", "kind", "available", "reason", "devices", "environment")
        doc["backends"] = [{k: b.get(k) for k in keys if k in b} for b in backends]
        devices, notes = select_devices(plan, backends)
        doc["warnings"] += notes
        duration = plan.duration_s or default_duration(devices)
        check_plan(plan, duration, backends)
        watch = HealthWatch({d["backend"] for d in devices}, poll_s=POLL_S)
        interval = plan.interval_s or default_interval(duration)
        procs = [DeviceProcess(job) for job in _jobs(plan, devices, duration, interval)]
        stopped_by = burn_all(procs, duration, say, stops, watch, on_point)
    except KeyboardInterrupt:
        if stops is not None:
            stops.hold()
        stopped_by = signal.Signals(stops.first).name if stops is not None and stops.first else "SIGINT"
    except BaseException:
        if watch is not None:
            watch.close()
        raise
    finally:
        for proc in procs:
            proc.close()
    if stops is not None:
        stops.hold()  # from here on a stop signal is only noted: the file is being made
    doc["health"] = watch.finish([(d["backend"], d["index"], d) for d in devices]) if watch is not None else []
    health = {(h["backend"], h["device_index"]): h for h in doc["health"]}
    doc["burn"] = [entry(p, stopped_by, health.get((p.job.backend, p.job.device_index))) for p in procs]
    doc["sensors"] = _sensors(procs)
    doc["run"]["finished"] = now()
    doc["run"]["incomplete"] = stopped_by is not None
    return doc


def check_plan(plan: BurnPlan, duration: float, backends: list[dict[str, Any]]) -> None:
    """UserError when the series' interval asked for is longer than the duration, or when no
    described backend offers the GEMM implementation asked for."""
    if plan.interval_s is not None and plan.interval_s > duration:
        raise UserError(
            f"--interval {plan.interval_s:g} s is longer than the {duration:g} s burn: give a shorter --interval "
            "or a longer --duration"
        )
    offered = {i["name"]: None for b in backends for i in b.get("implementations", {}).get("gemm", [])}
    if plan.impl is not None and plan.impl not in offered:
        raise UserError(
            f"unknown implementation '{plan.impl}' of gemm on the selected backends; they offer: "
            + (", ".join(offered) or "none")
        )
