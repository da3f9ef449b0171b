"""One case, end to end, in the one pipeline every caller uses: resolve, inputs, prepare, first
output, parity against float64, timing.

The worker (:class:`CaseRunner`, turning each step's failure into a record's status), the
pytest plugin and the startup probe's child each call these steps; they differ only in what
they do between them (the plugin times through pytest-benchmark, the probe stamps the clock).
"""

from __future__ import annotations

import math
import time
import traceback
import weakref
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from hwbench.core.backend import Backend, DeviceInfo, Implementation, Prepared, listed_devices
from hwbench.core.errors import NotApplicable, UserError
from hwbench.core.host import memory_available
from hwbench.core.kernel import Kernel
from hwbench.core.records import failed, new_record
from hwbench.core.registry import get_backend, get_kernel
from hwbench.core.results_types import Energy as EnergySection
from hwbench.core.results_types import Parity as ParitySection
from hwbench.core.results_types import Record, TimingSection
from hwbench.run import parity as parity_mod
from hwbench.run.parity import Guard, poison, unverified_warning
from hwbench.run.stats import stability_warnings, summarize, timing_section
from hwbench.run.timing import Timing, TimingConfig, measure
from hwbench.sensors.base import Sensors
from hwbench.sensors.devices import DeviceSensors
from hwbench.sensors.energy import Energy, EnergyConfig, measure_energy, method_of


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


__all__ = ["Case", "CaseFailed", "CaseRequest", "CaseRunner", "CaseSkipped", "Pipeline", "base_record", "failed"]


class CaseSkipped(Exception):
    """The case cannot run here; the message says why (a ``skipped`` record)."""


class CaseFailed(Exception):
    """A step of the case failed: ``status`` is compile_error or runtime_error, ``reason`` says how."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Case:
    """A request resolved against its backend: what the steps work with."""

    request: CaseRequest
    backend: Backend
    kernel: Kernel
    impl: Implementation
    device: DeviceInfo

    @property
    def shape(self) -> dict[str, int]:
        return self.request.shape

    @property
    def dtype(self) -> str:
        return self.request.dtype


def base_record(case: CaseRequest, impl: Implementation | None, device: DeviceInfo | None) -> Record:
    """The record of ``case`` with its coordinates and its kernel's inputs version filled and every
    measurement empty (no inputs version when no kernel has the case's name)."""
    try:
        inputs_version: int | None = get_kernel(case.kernel).inputs_version
    except UserError:
        inputs_version = None
    return new_record(
        case.kernel,
        case.impl,
        case.backend,
        case.device_index,
        case.dtype,
        case.shape,
        impl_kind=impl.kind if impl else None,
        language=impl.language if impl else None,
        device=device.name if device else None,
        inputs_version=inputs_version,
    )


def error_line(exc: BaseException) -> str:
    """One line for an exception: its type, message and where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    message = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {message[:600]}{where}"


def timing_fields(timing: Timing) -> TimingSection:
    """A record's ``timing`` section from timed samples."""
    return timing_section(
        timing.samples,
        timer=timing.timer,
        resolution_s=timing.resolution_s,
        flushed=timing.flushed,
        flush=timing.flush_method,
        warmup=timing.warmup,
        stopped_by=timing.stopped_by,
    )


def library_accuracy(case: Case) -> str:
    """What the case's native library is known to do to this dtype's accuracy (empty if nothing)."""
    if case.impl.kind != "native":
        return ""
    natives = case.kernel.natives.get(case.backend.name, ())
    native = next((n for n in natives if n.impl == case.impl.name), None)
    return native.accuracy.get(case.dtype, "") if native is not None else ""


class Pipeline:
    """The steps of a case; devices, inputs and the reference are kept for the next case."""

    def __init__(self) -> None:
        self._devices: dict[str, list[DeviceInfo]] = {}
        self._inputs: tuple[tuple[Any, ...], dict[str, np.ndarray]] | None = None
        self._reference: tuple[tuple[Any, ...], np.ndarray] | None = None
        #: The guard of the case cleared last: its prepared's id, a weak reference to it, the guard.
        self._guard: tuple[int, Any, Guard] | None = None

    def devices(self, backend: Backend) -> list[DeviceInfo]:
        """The backend's devices (listed once)."""
        if backend.name not in self._devices:
            self._devices[backend.name] = listed_devices(backend)
        return self._devices[backend.name]

    def resolve(self, request: CaseRequest, probe: bool = False, by_kind: bool = False) -> Case:
        """The backend, kernel, implementation and device of ``request``; CaseSkipped when one is
        missing or cannot run the dtype. ``probe`` checks the backend is available first;
        ``by_kind`` lets ``request.impl`` be ``portable`` or ``native`` (the first listed)."""
        backend, kernel = get_backend(request.backend), get_kernel(request.kernel)
        if probe:
            available = backend.probe()
            if not available.ok:
                raise CaseSkipped(f"backend {request.backend} unavailable: {available.reason}")
        impls = backend.implementations(request.kernel)
        impl = next((i for i in impls if i.name == request.impl), None)
        if impl is None and by_kind:
            impl = next((i for i in impls if i.kind == request.impl), None)
        if impl is None:
            names = ", ".join(f"{i.name} ({i.kind})" for i in impls) or "none"
            raise CaseSkipped(
                f"{request.backend} has no implementation '{request.impl}' of {request.kernel}; it has: {names}"
            )
        devices = self.devices(backend)
        if not 0 <= request.device_index < len(devices):
            raise CaseSkipped(f"{request.backend} has no device {request.device_index} (it has {len(devices)})")
        device = devices[request.device_index]
        support = backend.supports(impl, request.dtype, device)
        if not support.ok:
            raise CaseSkipped(support.reason)
        return Case(request, backend, kernel, impl, device)

    def native_twin(self, case: Case) -> Case | None:
        """The case of the first native the backend lists, where it can run the same dtype."""
        twin = next((i for i in case.backend.implementations(case.kernel.name) if i.kind == "native"), None)
        if twin is None or case.dtype in twin.on_request or not case.backend.supports(twin, case.dtype, case.device).ok:
            return None  # none, or one known to miss the tolerance in this dtype: no baseline
        return Case(
            CaseRequest(**{**asdict(case.request), "impl": twin.name}), case.backend, case.kernel, twin, case.device
        )

    def inputs(self, case: Case) -> dict[str, np.ndarray]:
        """The case's inputs (shared with the previous case when the same); CaseSkipped when
        host memory cannot hold them and their float64 reference."""
        key = case.request.key()
        if self._inputs is None or self._inputs[0] != key:
            need, free = case.kernel.memory_bytes(case.shape, case.dtype), memory_available()
            if free is not None and need > free:
                raise CaseSkipped(
                    f"needs about {need / 2**30:.1f} GiB of host memory, {free / 2**30:.1f} GiB available"
                )
            self._inputs = self._reference = None  # free the old arrays before making new ones
            try:
                self._inputs = (key, case.kernel.make_inputs(case.shape, case.dtype, case.request.seed))
            except MemoryError:
                raise CaseSkipped("out of host memory building inputs and the float64 reference") from None
        return self._inputs[1]

    def reference(self, case: Case) -> np.ndarray:
        """The float64 reference of the case's inputs (computed once per inputs)."""
        key = case.request.key()
        if self._reference is None or self._reference[0] != key:
            try:
                self._reference = (key, case.kernel.reference(self.inputs(case), case.shape))
            except MemoryError:
                raise CaseSkipped("out of host memory building inputs and the float64 reference") from None
        return self._reference[1]

    def prepare(self, case: Case) -> Prepared:
        """Inputs on the device, code compiled, output allocated; CaseFailed on rejection."""
        inputs = self.inputs(case)
        try:
            return case.backend.prepare(case.impl, case.kernel, inputs, case.shape, case.dtype, case.device)
        except NotApplicable as exc:
            raise CaseSkipped(str(exc)) from exc
        except case.backend.compile_errors() as exc:
            raise CaseFailed("compile_error", error_line(exc)) from exc
        except Exception as exc:
            raise CaseFailed("runtime_error", f"preparing the case failed: {error_line(exc)}") from exc

    @staticmethod
    def first_output(prepared: Prepared) -> np.ndarray:
        """Run once and bring the output to the host; CaseFailed when that fails."""
        try:
            prepared.run()
            return prepared.result()
        except Exception as exc:
            raise CaseFailed("runtime_error", error_line(exc)) from exc

    def parity(self, case: Case, output: np.ndarray) -> tuple[ParitySection, str]:
        """The record's ``parity`` section for ``output``, and why it failed (empty when it passed)."""
        tolerance = case.kernel.tolerance(case.dtype, case.shape)
        result = parity_mod.check(output, self.reference(case), tolerance)
        found: ParitySection = {
            "max_abs_err": result.max_abs_err,
            "max_rel_err": result.max_rel_err,
            "atol": result.atol,
            "rtol": result.rtol,
            "mismatches": result.mismatches,
            "nonfinite": result.nonfinite,
            "elements": result.elements,
            "passed": result.passed,
            "exact": tolerance.exact,
        }
        why = result.reason
        if result.passed:
            return found, ""
        known = library_accuracy(case)
        return found, f"{why}; {known}" if known else why

    def clear(self, prepared: Prepared) -> bool:
        """Clear the output before the timed calls: the backend's ``Prepared.clear_output``, else
        the pipeline fills the one writable array ``result()`` hands back each time (NaN, or a
        sentinel integer); True when either did. :meth:`recheck` says what was done (a
        :class:`Guard`); CaseFailed when clearing fails."""
        try:
            guard = Guard("cleared") if prepared.clear_output() else self._fill(prepared)
        except Exception as exc:
            raise CaseFailed("runtime_error", f"clearing the output failed: {error_line(exc)}") from exc
        try:
            ref: Any = weakref.ref(prepared)
        except TypeError:  # a prepared class without weak references: its id alone
            ref = None
        self._guard = (id(prepared), ref, guard)
        return guard.how in ("cleared", "poisoned")

    def _fill(self, prepared: Prepared) -> Guard:
        """The pipeline's own clearing: see :func:`~hwbench.run.parity.poison`."""
        first, again = prepared.result(), prepared.result()
        return poison(first, again, list(self._inputs[1].values()) if self._inputs is not None else [])

    def guard(self, prepared: Prepared, cleared: bool) -> Guard:
        """What :meth:`clear` did to ``prepared``'s output; where it did not see this one,
        ``cleared`` says whether the caller cleared it."""
        if self._guard is not None:
            key, ref, guard = self._guard
            if key == id(prepared) and (ref is None or ref() is prepared):
                return guard
        return Guard("cleared" if cleared else "")

    @staticmethod
    def time(case: Case, prepared: Prepared, config: TimingConfig) -> Timing:
        """Timed calls on the backend's timer after its flush; CaseFailed when a call fails or the
        timer returns a time that is not a positive number of seconds."""
        try:
            flush = case.backend.case_flush(case.device, prepared) if config.flush else None
            timing = measure(prepared.run, case.backend.timer(case.device), flush, config)
        except Exception as exc:
            raise CaseFailed("runtime_error", f"while timing: {error_line(exc)}") from exc
        if flush is not None and timing.flushed:
            timing = replace(timing, flush_method=flush.method)
        bad = next((s for s in timing.samples if not (math.isfinite(s) and s > 0)), None)
        if bad is not None or not timing.samples:
            what = f"returned {bad!r} s" if bad is not None else "returned no samples"
            raise CaseFailed("runtime_error", f"the {timing.timer} timer {what}: not a time hwbench can use")
        return timing

    def recheck(self, case: Case, prepared: Prepared, cleared: bool) -> tuple[ParitySection, str]:
        """Parity of the output the timed calls left, and why it failed: a kernel right on its first
        call and wrong, or idle, afterwards fails here wherever the output was cleared before them
        (:meth:`clear`; ``cleared`` where the caller cleared it itself). ``after_timing`` says how
        the output was left for them, or why the timed calls could not be verified."""
        guard = self.guard(prepared, cleared)
        self._guard = None  # what it held is not kept past the check
        output = self.last_output(prepared)
        found, why = self.parity(case, output)
        found["after_timing"] = guard.after(output)
        del output
        if why:
            how = {
                "cleared": " (the output was cleared before them)",
                "poisoned": f" (the output was filled with {guard.fill} before them)",
            }.get(guard.how, "")
            why = f"wrong after the timed calls{how}: {why}"
        return found, why

    @staticmethod
    def last_output(prepared: Prepared) -> np.ndarray:
        """The output of the last timed call, on the host; CaseFailed when reading it fails."""
        try:
            return prepared.result()
        except Exception as exc:
            raise CaseFailed("runtime_error", f"reading the output after timing: {error_line(exc)}") from exc

    @staticmethod
    def energy(case: Case, prepared: Prepared, timing: Timing, sensors: Sensors, budget_s: float) -> EnergySection:
        """The record's ``energy`` section: the prepared call run again in windows of its own after
        the timing (the timed samples are untouched), each window ended by the backend's timer
        timing nothing, which waits for the device (torch's events synchronize; CPU and OpenCL
        calls return when done)."""
        try:
            timer = case.backend.timer(case.device)
        except Exception as exc:  # no timer to wait with: the reason, not a failed case
            why = f"measuring energy failed: {error_line(exc)}"
            return Energy(sensors.source, method_of(sensors), None, None, 0.0, 0, None, why).section()

        def sync() -> None:
            timer.time(_nothing)

        median = summarize(timing.samples).median
        return measure_energy(sensors, prepared.run, sync, median, EnergyConfig(budget_s=budget_s)).section()


def _nothing() -> None:
    """A call that does nothing (timed to wait for the device)."""


def device_mapping(device: DeviceInfo) -> dict[str, Any]:
    """What the sensor layer matches a device by: name, kind, vendor and extra facts."""
    return {"name": device.name, "kind": device.kind, "vendor": device.vendor, "extra": dict(device.extra)}


class CaseRunner:
    """Runs cases in the worker process: each step of the :class:`Pipeline`, every failure a status."""

    def __init__(self, sensors: DeviceSensors | None = None) -> None:
        self.pipeline = Pipeline()
        #: Each device's sensors, opened once in this process (on the first timed case).
        self.sensors = sensors if sensors is not None else DeviceSensors()

    def devices(self, backend: Backend) -> list[DeviceInfo]:
        """The backend's devices (listed once)."""
        return self.pipeline.devices(backend)

    def energy(self, case: Case, prepared: Prepared, timing: Timing, budget_s: float) -> EnergySection | None:
        """The record's ``energy`` section where the device's energy is readable; None where it is
        not or ``budget_s`` is 0 (the results file's ``sensors`` section says why, once per device)."""
        if budget_s <= 0:
            return None
        sensors = self.sensors.get(case.backend.name, case.device.index, device_mapping(case.device))
        if isinstance(sensors, str) or not sensors.energy_readable:
            return None
        return self.pipeline.energy(case, prepared, timing, sensors, budget_s)

    def close(self) -> None:
        """Close the devices' sensors."""
        self.sensors.close()

    def run(self, request: CaseRequest) -> Record:
        """The record of ``request``; every failure becomes a status, never an exception."""
        steps = self.pipeline
        backend = get_backend(request.backend)
        impl = next((i for i in backend.implementations(request.kernel) if i.name == request.impl), None)
        devices = steps.devices(backend)
        device = devices[request.device_index] if 0 <= request.device_index < len(devices) else None
        record = base_record(request, impl, device)
        start = time.perf_counter()
        try:
            case = steps.resolve(request)
            prepared = steps.prepare(case)
            record["compile_s"], record["config"] = prepared.compile_s, dict(prepared.config)
            record["parity"], why = steps.parity(case, steps.first_output(prepared))
            if why:
                return failed(record, "parity_failed", why)
            cleared = steps.clear(prepared)
            config = TimingConfig(**request.timing)
            timing = steps.time(case, prepared, config)
            record["timing"] = timing_fields(timing)
            record["parity"], why = steps.recheck(case, prepared, cleared)
            if why:
                return failed(record, "parity_failed", why)
            energy = self.energy(case, prepared, timing, config.energy_s)
            if energy is not None:
                record["energy"] = energy
        except CaseSkipped as skip:
            return failed(record, "skipped", str(skip))
        except CaseFailed as fail:
            return failed(record, fail.status, fail.reason)
        record["warnings"] = stability_warnings(summarize(timing.samples), timing.resolution_s)
        unverified = unverified_warning(record["parity"])
        if unverified:
            record["warnings"].append(unverified)
        record["wall_s"] = time.perf_counter() - start
        return record
