"""One case, end to end: inputs, compile, run, parity against float64, then timing.

This runs inside the worker process; everything it returns is plain JSON-ready data.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

from hwbench.core.backend import Backend, DeviceInfo, Implementation
from hwbench.core.host import memory_available
from hwbench.core.kernel import Kernel
from hwbench.core.registry import get_backend, get_kernel
from hwbench.run import parity as parity_mod
from hwbench.run.stats import stability_warnings, summarize
from hwbench.run.timing import TimingConfig, measure


@dataclass(frozen=True)
class CaseRequest:
    """What to run: the coordinates of one record, plus seed and timing budget."""

    kernel: str
    impl: str
    backend: str
    device_index: int
    dtype: str
    shape: dict[str, int]
    seed: int = 0
    timing: dict[str, Any] = field(default_factory=dict)

    def key(self) -> tuple[Any, ...]:
        """Identity of the inputs this case uses (cases sharing it share inputs and reference)."""
        return (self.kernel, tuple(sorted(self.shape.items())), self.dtype, self.seed)


def empty_parity() -> dict[str, Any]:
    return {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None}


def empty_timing() -> dict[str, Any]:
    return {"median_s": None, "iqr_s": None, "cv": None, "n": 0, "timer": None}


def empty_metrics() -> dict[str, Any]:
    return {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None}


def base_record(case: CaseRequest, impl: Implementation | None, device: DeviceInfo | None) -> dict[str, Any]:
    """A record with coordinates filled and every measurement empty."""
    return {
        "kernel": case.kernel,
        "impl": case.impl,
        "impl_kind": impl.kind if impl else None,
        "language": impl.language if impl else None,
        "backend": case.backend,
        "device": device.name if device else None,
        "device_index": case.device_index,
        "dtype": case.dtype,
        "shape": dict(case.shape),
        "status": "ok",
        "reason": "",
        "parity": empty_parity(),
        "timing": empty_timing(),
        "metrics": empty_metrics(),
        "compile_s": None,
        "config": {},
        "warnings": [],
    }


def failed(record: dict[str, Any], status: str, reason: str) -> dict[str, Any]:
    """Mark ``record`` with a non-ok status and its human reason."""
    record["status"], record["reason"] = status, reason
    return record


def error_line(exc: BaseException) -> str:
    """One line for an exception: its type, message and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    message = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {message[:600]}{where}"


class CaseRunner:
    """Runs cases in this process, reusing inputs and the reference across implementations."""

    def __init__(self) -> None:
        self._cached_key: tuple[Any, ...] | None = None
        self._cached: tuple[dict[str, Any], Any] | None = None
        self._devices: dict[str, list[DeviceInfo]] = {}

    def devices(self, backend: Backend) -> list[DeviceInfo]:
        if backend.name not in self._devices:
            self._devices[backend.name] = backend.devices()
        return self._devices[backend.name]

    def _inputs(self, kernel: Kernel, case: CaseRequest) -> tuple[dict[str, Any], Any]:
        if self._cached_key != case.key():
            self._cached = None  # free the old arrays before making new ones
            inputs = kernel.make_inputs(case.shape, case.dtype, case.seed)
            self._cached = (inputs, kernel.reference(inputs, case.shape))
            self._cached_key = case.key()
        assert self._cached is not None
        return self._cached

    def run(self, case: CaseRequest) -> dict[str, Any]:
        """The record of ``case``; every failure becomes a status, never an exception."""
        backend, kernel = get_backend(case.backend), get_kernel(case.kernel)
        impl = next((i for i in backend.implementations(case.kernel) if i.name == case.impl), None)
        devices = self.devices(backend)
        device = devices[case.device_index] if case.device_index < len(devices) else None
        record = base_record(case, impl, device)
        if impl is None or device is None:
            return failed(
                record, "skipped", f"{case.backend} has no implementation '{case.impl}' or device {case.device_index}"
            )
        support = backend.supports(impl, case.dtype, device)
        if not support.ok:
            return failed(record, "skipped", support.reason)
        need, free = kernel.memory_bytes(case.shape, case.dtype), memory_available()
        if free is not None and need > free:
            return failed(
                record,
                "skipped",
                f"needs about {need / 2**30:.1f} GiB of host memory, {free / 2**30:.1f} GiB available",
            )
        try:
            inputs, reference = self._inputs(kernel, case)
        except MemoryError:
            return failed(record, "skipped", "out of host memory building inputs and the float64 reference")
        return self._run_prepared(record, backend, kernel, impl, device, case, inputs, reference)

    def _run_prepared(
        self,
        record: dict[str, Any],
        backend: Backend,
        kernel: Kernel,
        impl: Implementation,
        device: DeviceInfo,
        case: CaseRequest,
        inputs: Any,
        reference: Any,
    ) -> dict[str, Any]:
        start = time.perf_counter()
        try:
            prepared = backend.prepare(impl, kernel, inputs, case.shape, case.dtype, device)
        except backend.compile_errors() as exc:
            return failed(record, "compile_error", error_line(exc))
        except Exception as exc:
            return failed(record, "runtime_error", f"preparing the case failed: {error_line(exc)}")
        record["compile_s"] = prepared.compile_s
        record["config"] = dict(prepared.config)
        try:
            prepared.run()
            output = prepared.result()
        except Exception as exc:
            return failed(record, "runtime_error", error_line(exc))
        result = parity_mod.check(output, reference, kernel.tolerance(case.dtype, case.shape))
        record["parity"] = {**asdict(result)}
        record["parity"].pop("reason")
        record["parity"]["exact"] = kernel.tolerance(case.dtype, case.shape).exact
        if not result.passed:
            return failed(record, "parity_failed", result.reason)
        try:
            timing = measure(prepared.run, backend.timer(device), backend.flush(device), TimingConfig(**case.timing))
        except Exception as exc:
            return failed(record, "runtime_error", f"while timing: {error_line(exc)}")
        summary = summarize(timing.samples)
        record["timing"] = {
            "median_s": summary.median,
            "iqr_s": summary.iqr,
            "q1_s": summary.q1,
            "q3_s": summary.q3,
            "mean_s": summary.mean,
            "std_s": summary.std,
            "cv": summary.cv,
            "min_s": summary.min,
            "max_s": summary.max,
            "p99_s": summary.p99,
            "n": summary.n,
            "timer": timing.timer,
            "resolution_s": timing.resolution_s,
            "flushed": timing.flushed,
            "warmup": timing.warmup,
            "stopped_by": timing.stopped_by,
            "samples_s": timing.samples,
        }
        record["warnings"] = stability_warnings(summary, timing.resolution_s)
        record["wall_s"] = time.perf_counter() - start
        return record
