"""One device's burn, in a process of its own: the case prepared once through the
:class:`~hwbench.run.case.Pipeline`, then run back to back for the duration.

The loop runs batches of iterations, each short (:data:`BATCH_S`) and ended by waiting for the
device (timing a call that does nothing on the backend's timer: a device timer must wait for the
work queued before it). At a batch's end it checks the output when a check is due, reads the
sensors, and closes the series' interval when it is over. A check reads the output of the
iteration just run (batches end on the iterations ``--check-iterations`` names), compares it with
the float64 reference, then clears it where the backend can (NaN), so that the next check sees
only what later iterations wrote. Iteration 0 is the first call, checked before the burn starts.

    python -m hwbench.run.burn_device FD PARENT_PID

reads one :class:`BurnJob` (JSON) on stdin, answers events as JSON lines on the file descriptor
FD (``ready`` or ``failed``, then ``point``, ``mismatch``..., ``done``), starts burning on the line
``go`` and stops early on ``stop`` (or when stdin closes); it dies with the process PARENT_PID.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwbench.core.backend import DeviceInfo, Prepared
from hwbench.core.burn_types import BurnMismatch
from hwbench.core.dtypes import is_integer
from hwbench.core.host import memory_available
from hwbench.core.kernel import Kernel, Tolerance
from hwbench.core.records import finite
from hwbench.core.registry import get_backend, get_kernel
from hwbench.run import parity
from hwbench.run.burn_series import (
    MAX_MISMATCHES_KEPT,
    Interval,
    close_interval,
    exact_gemm_inputs,
    exact_k_limit,
    significand_bits,
)
from hwbench.run.case import Case, CaseFailed, CaseRequest, CaseSkipped, Pipeline, error_line
from hwbench.run.describe import device_dict
from hwbench.run.worker import die_with_parent
from hwbench.sensors.base import Sample, Sensors
from hwbench.sensors.devices import DeviceSensors

#: Seconds of one batch of iterations at most (each ends with a wait for the device).
BATCH_S = 0.05
#: Seconds between two sensor readings within an interval, at least.
SAMPLE_EVERY_S = 1.0
#: GEMM shapes a burn runs by default: the CPU's; a GPU's M = N (K at most that, and at most
#: what keeps the exact answer exact in the dtype).
CPU_GEMM = {"M": 2048, "N": 2048, "K": 2048}
GPU_GEMM = 8192
#: Elements per stream array by default (triad), by device kind.
STREAM_N = {"cpu": 2**24}
GPU_STREAM_N = 2**26
#: The dtypes tried on a device without peaks, widest significand first among equal peaks.
FALLBACK_DTYPES = ("fp16", "bf16", "tf32", "fp32", "fp64")

Emit = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class BurnJob:
    """What one device process burns, for how long, and how often it checks."""

    backend: str
    device_index: int
    kernel: str = "gemm"
    duration_s: float = 120.0
    interval_s: float = 5.0
    #: seconds between checks at most (None: no checks by time, only at the end)
    check_every_s: float | None = 5.0
    #: also check every this many iterations (None: by time only)
    check_iterations: int | None = None
    dtype: str | None = None
    impl: str | None = None
    shape: dict[str, int] | None = None
    seed: int = 0


#: The smallest K up to which a dtype burn chooses by itself must keep exact checks (bf16's 256;
#: fp8's 4 significand bits hold an exact sum only up to K = 16, so it burns only when --dtype says).
MIN_EXACT_K = 256


def ranked_dtypes(kernel: Kernel, device: DeviceInfo) -> list[str]:
    """The kernel's dtypes, best first: fp32 on a CPU; elsewhere the highest peak, ties to the
    widest significand (whose exact checks hold at larger K), then those without a peak in the
    order of :data:`FALLBACK_DTYPES`."""
    peaks = dict(device.peak.tflops) if device.peak is not None else {}
    order = {d: i for i, d in enumerate(FALLBACK_DTYPES)}

    def rank(dtype: str) -> tuple[float, int]:
        peak = peaks.get(dtype)
        if isinstance(peak, (int, float)) and math.isfinite(peak) and peak > 0:
            return (-float(peak), -significand_bits(dtype))
        return (math.inf, order.get(dtype, len(order)))

    # Its checks are for floats, exact where the significand holds the sums (:data:`MIN_EXACT_K`).
    burnable = [d for d in kernel.dtypes if not is_integer(d) and exact_k_limit(d) >= MIN_EXACT_K]
    ranked = sorted(burnable, key=rank)
    if device.kind == "cpu" and "fp32" in ranked:
        ranked.remove("fp32")
        ranked.insert(0, "fp32")
    return ranked


def burn_shape(kernel: Kernel, dtype: str, device: DeviceInfo, given: dict[str, int] | None) -> dict[str, int]:
    """The shape a device burns: the one given, else its kind's default for the kernel."""
    if given:
        return dict(given)
    if kernel.name == "gemm":
        if device.kind == "cpu":
            return dict(CPU_GEMM)
        return {"M": GPU_GEMM, "N": GPU_GEMM, "K": min(GPU_GEMM, exact_k_limit(dtype))}
    if kernel.name == "stream":
        return kernel.complete({"n": STREAM_N.get(device.kind, GPU_STREAM_N)})
    return kernel.shapes("quick")[0]


class BurnPipeline(Pipeline):
    """The case pipeline with a burn's inputs: GEMM's integers of exact answer (see
    :mod:`hwbench.run.burn_series`) where they exist, every other kernel's own inputs."""

    def __init__(self) -> None:
        super().__init__()
        self._exact: tuple[tuple[Any, ...], dict[str, np.ndarray] | None] | None = None

    def _gemm_inputs(self, case: Case) -> dict[str, np.ndarray] | None:
        key = case.request.key()
        if self._exact is None or self._exact[0] != key:
            need, free = case.kernel.memory_bytes(case.shape, case.dtype), memory_available()
            if free is not None and need > free:
                raise CaseSkipped(
                    f"needs about {need / 2**30:.1f} GiB of host memory, {free / 2**30:.1f} GiB available"
                )
            self._exact = (key, exact_gemm_inputs(case.shape, case.dtype, case.request.seed))
        return self._exact[1]

    def inputs(self, case: Case) -> dict[str, np.ndarray]:
        """GEMM's exact inputs where the shape and dtype allow them, else the kernel's own."""
        found = self._gemm_inputs(case) if case.kernel.name == "gemm" else None
        return found if found is not None else super().inputs(case)

    def exact(self, case: Case) -> bool:
        """Whether the case's output must equal its reference exactly."""
        if case.kernel.name == "gemm":
            return self._gemm_inputs(case) is not None
        return case.kernel.tolerance(case.dtype, case.shape).exact


def choose_case(pipeline: Pipeline, job: BurnJob) -> Case:
    """The case a job burns: its dtype (the best the device runs, unless given) and the first
    implementation (natives first) that runs it; CaseSkipped saying why when none does."""
    backend, kernel = get_backend(job.backend), get_kernel(job.kernel)
    available = backend.probe()
    if not available.ok:
        raise CaseSkipped(f"backend {job.backend} unavailable: {available.reason}")
    devices = pipeline.devices(backend)
    if not 0 <= job.device_index < len(devices):
        raise CaseSkipped(f"{job.backend} has no device {job.device_index} (it has {len(devices)})")
    device = devices[job.device_index]
    impls = [i for i in backend.implementations(job.kernel) if job.impl is None or i.name == job.impl]
    if not impls:
        raise CaseSkipped(f"{job.backend} has no implementation '{job.impl}' of {job.kernel}")
    dtypes = [job.dtype] if job.dtype else ranked_dtypes(kernel, device)
    reasons: list[str] = []
    for dtype in dtypes:
        for impl in impls:
            support = backend.supports(impl, dtype, device)
            if support.ok:
                shape = burn_shape(kernel, dtype, device, job.shape)
                request = CaseRequest(job.kernel, impl.name, job.backend, job.device_index, dtype, shape, job.seed)
                return pipeline.resolve(request)
            reasons.append(support.reason)
    why = "; ".join(dict.fromkeys(reasons)) or "none offered"
    raise CaseSkipped(f"no implementation of {job.kernel} runs {', '.join(dtypes)} on {device.label}: {why}")


@dataclass
class Checker:
    """Compares outputs with the reference: for equality where ``exact``, else within ``tolerance``."""

    reference: np.ndarray
    tolerance: Tolerance
    exact: bool
    _expected: np.ndarray | None = field(default=None, repr=False)

    def wrong(self, output: np.ndarray, iteration: int, t_s: float) -> BurnMismatch | None:
        """None when ``output`` (of ``iteration``, ``t_s`` seconds into the burn) is right; else the
        mismatch: how many elements are wrong and by how much at most (``max_abs_err`` None where a
        NaN or infinity is among them)."""
        if self.exact and output.shape == self.reference.shape:
            if self._expected is None or self._expected.dtype != output.dtype:
                self._expected = self.reference.astype(output.dtype)
            if np.array_equal(output, self._expected):
                return None
        found = parity.check(output, self.reference, self.tolerance)
        if found.passed:
            return None
        worst = None if found.nonfinite or found.max_abs_err is None else found.max_abs_err
        return {
            "iteration": iteration,
            "t_s": t_s,
            "count": found.mismatches,
            "max_abs_err": worst,
            "nonfinite": found.nonfinite,
        }


def _nothing() -> None:
    """The call timed to wait for the device: nothing of its own."""


class DeviceBurn:
    """One device's burn: :meth:`prepare` once, then :meth:`run` until the duration or a stop."""

    def __init__(
        self, job: BurnJob, sensors: Sensors | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.job, self.sensors, self.clock = job, sensors, clock
        self.pipeline = BurnPipeline()
        self.iterations = self.checks = self.wrong_checks = 0
        self.sensor_error = ""
        self._sampled_at = 0.0
        #: the longest time between two checks (the first call's counted at the burn's start), s
        self.max_check_gap_s = 0.0
        #: seconds spent checking during the burn (reading the output, comparing, clearing)
        self.check_s = 0.0
        self._last_check = (0.0, 0)  # (t_s, iteration) of the latest check
        self.first_wrong: BurnMismatch | None = None

    def prepare(self) -> dict[str, Any]:
        """Choose and prepare the case and check its first call (iteration 0): the ``ready`` event.
        CaseSkipped or CaseFailed when it cannot run."""
        self.case = choose_case(self.pipeline, self.job)
        self.prepared: Prepared = self.pipeline.prepare(self.case)
        exact = self.pipeline.exact(self.case)
        tolerance = (
            Tolerance(0.0, 0.0, exact=True) if exact else self.case.kernel.tolerance(self.case.dtype, self.case.shape)
        )
        self.checker = Checker(self.pipeline.reference(self.case), tolerance, exact)
        start = self.clock()
        first = self.pipeline.first_output(self.prepared)
        self.per_iteration_s = max(self.clock() - start, 1e-9)
        self.first_wrong = self.checker.wrong(first, 0, 0.0)
        self.checks = 1
        self.pipeline.clear(self.prepared)
        kernel, shape = self.case.kernel, self.case.shape
        return {
            "event": "ready",
            "kernel": kernel.name,
            "impl": self.case.impl.name,
            "dtype": self.case.dtype,
            "shape": dict(shape),
            "device": self.case.device.name,
            "check": "exact" if exact else "tolerance",
            "flops": kernel.flops(shape),
            "bytes": kernel.bytes_moved(shape, self.case.dtype) if kernel.bandwidth_bound else None,
        }

    def _sample(self) -> Sample | None:
        if self.sensors is None:
            return None
        try:
            return self.sensors.sample()
        except Exception as exc:  # a reader that fails mid-burn: no readings, said once
            self.sensor_error = self.sensor_error or f"reading the sensors failed: {error_line(exc)}"
            return None

    def _open(self, t_s: float) -> Interval:
        sample = self._sample()
        interval = Interval(t_s, self.iterations, sample.energy_j if sample else None)
        self._sampled_at = t_s
        return interval

    def _batch(self, now: float, interval: Interval) -> int:
        """Iterations of the next batch: about :data:`BATCH_S`, ending by the next check, interval
        end or the deadline, and exactly on the next iteration ``check_iterations`` names."""
        job = self.job
        horizon = min(BATCH_S, job.duration_s - now, interval.t0_s + job.interval_s - now)
        if job.check_every_s is not None:
            horizon = min(horizon, self._last_check[0] + job.check_every_s - now)
        count = max(1, min(1 << 20, int(horizon / self.per_iteration_s)))
        if job.check_iterations:
            count = min(count, job.check_iterations - self.iterations % job.check_iterations)
        return count

    def _check_due(self, now: float) -> bool:
        job, (checked_s, checked_at) = self.job, self._last_check
        by_time = job.check_every_s is not None and now - checked_s >= job.check_every_s
        by_count = bool(job.check_iterations) and self.iterations % (job.check_iterations or 1) == 0
        return by_time or (by_count and self.iterations != checked_at)

    def check(self, now: float, emit: Emit) -> None:
        """Compare the output of the iteration just run with the reference; then clear it."""
        start = self.clock()
        found = self.checker.wrong(self.pipeline.last_output(self.prepared), self.iterations, now)
        self.checks += 1
        self.max_check_gap_s = max(self.max_check_gap_s, now - self._last_check[0])
        self._last_check = (now, self.iterations)
        if found is not None:
            self.wrong_checks += 1
            if self.wrong_checks <= MAX_MISMATCHES_KEPT:
                emit({"event": "mismatch", "mismatch": found})
        self.pipeline.clear(self.prepared)
        self.check_s += self.clock() - start

    def run(self, stop: threading.Event, emit: Emit) -> dict[str, Any]:
        """Burn until the duration is over or ``stop`` is set; events go to ``emit``; the ``done`` event."""
        if self.first_wrong is not None:  # said once, by the first run
            emit({"event": "mismatch", "mismatch": self.first_wrong})
            self.wrong_checks, self.first_wrong = self.wrong_checks + 1, None
        timer = self.case.backend.timer(self.case.device)
        kernel, shape = self.case.kernel, self.case.shape
        flops = kernel.flops(shape)
        moved = kernel.bytes_moved(shape, self.case.dtype) if kernel.bandwidth_bound else None
        t0, error, now = self.clock(), "", 0.0
        self._last_check = (0.0, self.iterations)
        interval = self._open(0.0)
        try:
            while True:
                count, before = self._batch(now, interval), self.clock()
                for _ in range(count):
                    self.prepared.run()
                timer.time(_nothing)  # waits for the device: the batch is done
                self.iterations += count
                now = self.clock() - t0
                self.per_iteration_s = max((now - (before - t0)) / count, 1e-9)
                stopping = stop.is_set() or now >= self.job.duration_s
                if stopping or self._check_due(now):
                    self.check(now, emit)
                if now - self._sampled_at >= SAMPLE_EVERY_S:
                    self._read_into(interval, now)
                if stopping or now - interval.t0_s >= self.job.interval_s:
                    interval = self._close(interval, now, flops, moved, emit)
                if stopping:
                    break
        except Exception as exc:  # a call that fails mid-burn ends this device's burn
            now = self.clock() - t0
            error = exc.reason if isinstance(exc, CaseFailed) else f"iteration {self.iterations + 1}: {error_line(exc)}"
            if self.iterations > interval.iterations0:
                self._close(interval, now, flops, moved, emit)
        return {
            "event": "done",
            "elapsed_s": now,
            "iterations": self.iterations,
            "checks": self.checks,
            "wrong_checks": self.wrong_checks,
            "max_check_gap_s": self.max_check_gap_s,
            "check_s": self.check_s,
            "stopped": stop.is_set(),
            "error": error,
            "sensor_error": self.sensor_error,
        }

    def _read_into(self, interval: Interval, now: float) -> Sample | None:
        sample = self._sample()
        self._sampled_at = now
        if sample is not None:
            interval.add(sample.clock_mhz, sample.temp_c, sample.power_w)
        return sample

    def _close(self, interval: Interval, now: float, flops: float, moved: float | None, emit: Emit) -> Interval:
        sample = self._read_into(interval, now)
        point = close_interval(interval, now, self.iterations, sample.energy_j if sample else None, flops, moved)
        emit({"event": "point", "point": point, "iterations": self.iterations, "checks": self.checks})
        return Interval(now, self.iterations, sample.energy_j if sample else None)


def open_device_sensors(
    readers: DeviceSensors, job: BurnJob, device: DeviceInfo
) -> tuple[Sensors | None, dict[str, Any]]:
    """The device's sensors (None where unreadable) and its entry of the document's ``sensors``."""
    described = device_dict(device)
    found = readers.get(job.backend, job.device_index, described)
    return (None if isinstance(found, str) else found), readers.entry(job.backend, job.device_index, described)


def _watch_stdin(stop: threading.Event) -> None:
    """Set ``stop`` on a ``stop`` line or when the parent closes stdin."""
    for line in sys.stdin:
        if line.strip() == "stop":
            break
    stop.set()


def serve(job: BurnJob, emit: Emit) -> None:
    """Prepare, say ready, wait for ``go``, burn, say done: one device process's life."""
    burn = DeviceBurn(job)
    try:
        ready = burn.prepare()
    except CaseSkipped as skip:
        emit({"event": "failed", "status": "skipped", "reason": str(skip)})
        return
    except CaseFailed as fail:
        emit({"event": "failed", "status": fail.status, "reason": fail.reason})
        return
    except Exception as exc:  # anything else in preparing is this device's failure, not the process's
        emit({"event": "failed", "status": "runtime_error", "reason": error_line(exc)})
        return
    readers = DeviceSensors()
    try:
        burn.sensors, ready["sensors"] = open_device_sensors(readers, job, burn.case.device)
        emit(ready)
        stop = threading.Event()
        if sys.stdin.readline().strip() != "go":
            stop.set()
        else:
            threading.Thread(target=_watch_stdin, args=(stop,), name="hwbench-burn-stop", daemon=True).start()
        emit(burn.run(stop, emit))
    finally:
        readers.close()


def main(argv: list[str]) -> int:
    """Entry point of a device process: ``FD PARENT_PID``, the job on stdin's first line."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C
    die_with_parent(int(argv[1]))
    answers = os.fdopen(int(argv[0]), "wb", buffering=0)

    def emit(event: dict[str, Any]) -> None:
        answers.write(json.dumps(finite(event), allow_nan=False).encode() + b"\n")

    serve(BurnJob(**json.loads(sys.stdin.readline())), emit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
