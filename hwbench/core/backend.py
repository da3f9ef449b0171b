"""What a backend must provide: probe, devices, prepare, timer and flush; what it offers.

A backend moves buffers, compiles the languages it names in :attr:`Backend.languages`,
launches what a kernel's bindings describe, and times on its own clock. What it offers of
a kernel comes from the kernel's folder: the natives declared for the backend's name, then
the portable sources in its languages; a third-party backend adds natives of its own by
overriding :meth:`Backend.natives`. A backend module imports its SDK only inside its
methods, so listing backends never loads a driver. Third-party backends subclass
:class:`Backend` and register through the ``hwbench.backends`` entry-point group.

What hwbench does differently per backend follows from what the backend says of itself, never
from its name: its :attr:`Backend.kind` (one of :data:`BACKEND_KINDS`) and the readers that
observe each of its devices (:meth:`Backend.observers`, by default :func:`default_observers`:
by the device's kind and vendor).
"""

from __future__ import annotations

import importlib.util
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwbench.core.kernel import Kernel, Native, Shape, Source, get_kernel

#: What a backend's :attr:`Backend.kind` may say, and what each kind means to hwbench.
BACKEND_KINDS: Mapping[str, str] = {
    "cpu": "the host's CPU cores, computed on in hwbench's own processes: every device is the host CPU, "
    "read by the host's sensors and health readers",
    "gpu": "a GPU runtime (CUDA, HIP, a new vendor's): devices with memory and streams of their own, numbered "
    "as the vendor's runtime numbers them; hwbench burn burns them when no backend is named, AllReduce runs "
    "there on the device collectives the allreduce kernel declares for the backend",
    "portable": "a portable runtime (OpenCL) over devices of any kind: each device's own kind and vendor say "
    "what applies (the kind of a backend that says none)",
}


@dataclass(frozen=True)
class Observers:
    """What observes a device's power, energy, temperature, clocks and health, and how it finds the
    device: the answer of :meth:`Backend.observers` (read by ``hwbench.sensors``)."""

    #: hwbench's readers of the device: ``cpu`` (the host's RAPL, cpufreq, hwmon, EDAC and machine
    #: checks), ``nvml`` (an NVIDIA GPU), ``amdsmi`` (an AMD GPU), or empty for none.
    readers: str = ""
    #: Whether the device's index is its vendor runtime's (CUDA's, HIP's, the visible-devices
    #: variables followed), so that a vendor reader may find it by index where its description names
    #: no UUID or PCI bus id; else it is found by its name.
    by_index: bool = False
    #: The backend's own readers of the device's power, energy, temperature and clocks, in place of
    #: ``readers``'s (the health readings stay ``readers``'s): called once per process, it returns a
    #: ``hwbench.sensors.base.Sensors`` or the one-line reason none are readable.
    sensors: Callable[[], object] | None = None


def default_observers(kind: str, device: Mapping[str, Any] | None) -> Observers:
    """The readers of a device of a backend of ``kind``, ``device`` its description (a
    :class:`DeviceInfo` as results files write it): the host's for the host CPU (a ``cpu``
    backend's devices, a device of kind ``cpu``, one that says it is the host CPU), NVML for an
    NVIDIA device, amdsmi for an AMD one (found by index on a ``gpu`` backend), none otherwise."""
    device = device or {}
    vendor = str(device.get("vendor") or "").casefold()
    if kind == "cpu" or device.get("kind") == "cpu" or (device.get("extra") or {}).get("host_cpu"):
        return Observers("cpu")
    if "nvidia" in vendor:
        return Observers("nvml", by_index=kind == "gpu")
    if "amd" in vendor or "advanced micro" in vendor:
        return Observers("amdsmi", by_index=kind == "gpu")
    return Observers()


def described_kind(description: Mapping[str, Any]) -> str:
    """The kind of a backend as a results file describes it: its ``kind``; in a file written before
    backends said their kind, the one its devices show (``portable`` where they say whether they are
    the host CPU, as OpenCL's do; ``cpu`` or ``gpu`` where all are of that kind), else empty."""
    if description.get("kind"):
        return str(description["kind"])
    devices = [d for d in description.get("devices") or [] if isinstance(d, Mapping)]
    if not devices:
        return ""
    if any("host_cpu" in (d.get("extra") or {}) for d in devices):
        return "portable"
    kinds = {d.get("kind") for d in devices}
    return str(kinds.pop()) if len(kinds) == 1 and kinds <= {"cpu", "gpu"} else ""


@dataclass(frozen=True)
class Availability:
    """Whether something can run here; ``reason`` says why not (or notes a caveat)."""

    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class Peak:
    """Peak throughput of a device in TFLOPS per dtype, and how it was obtained."""

    tflops: Mapping[str, float]
    method: str
    mem_gbps: float | None = None


@dataclass(frozen=True)
class DeviceInfo:
    """One device a backend can run on."""

    backend: str
    index: int
    name: str
    vendor: str
    kind: str  # "cpu", "gpu" or "accelerator"
    arch: str = ""
    compute_units: int | None = None
    memory_bytes: int | None = None
    driver: str = ""
    runtime: str = ""
    libraries: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    peak: Peak | None = None

    @property
    def label(self) -> str:
        """``backend:index`` as used by ``--device``."""
        return f"{self.backend}:{self.index}"


class ContractBroken(Exception):
    """A backend answered something the backend contract does not allow (the message names the
    backend, the method and what it returned)."""


def listed_devices(backend: Backend) -> list[DeviceInfo]:
    """``backend.devices()`` held to the contract, a list of :class:`DeviceInfo`; ContractBroken
    naming the backend and what it returned otherwise."""
    found = backend.devices()
    where = f"backend '{backend.name}' ({type(backend).__module__}.{type(backend).__qualname__})"
    if not isinstance(found, (list, tuple)):
        raise ContractBroken(
            f"{where} broke the backend contract: devices() returned a {type(found).__name__}, "
            "not a list of hwbench.backend.DeviceInfo"
        )
    for number, device in enumerate(found):
        if not isinstance(device, DeviceInfo):
            raise ContractBroken(
                f"{where} broke the backend contract: devices()[{number}] is a {type(device).__name__}, "
                "not a hwbench.backend.DeviceInfo"
            )
    return list(found)


@dataclass(frozen=True)
class Implementation:
    """One way to compute a kernel on a backend: a portable source or a vendor library."""

    kernel: str
    name: str
    kind: str  # "portable" or "native"
    language: str  # "llvmlite", "opencl-c", "triton", or the library's name
    description: str
    dtypes: tuple[str, ...]
    #: Where its code lives: a source's module, a native's ``module:function`` (absolute).
    entry: str = ""
    #: Modules it needs, each with the hint shown when it is missing.
    requires: Mapping[str, str] = field(default_factory=dict)
    #: Of ``dtypes``, those run only when asked for (``--dtype``), not in a run that names none.
    on_request: tuple[str, ...] = ()


def source_implementation(kernel: Kernel, source: Source, note: str = "") -> Implementation:
    """The implementation a kernel's portable ``source`` is (``note`` says how a backend runs it)."""
    description = f"{source.description}; {note}" if note else source.description
    return Implementation(
        kernel.name, source.impl, "portable", source.language, description, source.dtypes, kernel.entry(source.module)
    )


def native_implementation(kernel: Kernel, native: Native) -> Implementation:
    """The implementation a kernel's ``native`` is: the dtypes whose answer it is known to put
    outside the tolerance (its ``accuracy`` notes) run only on request."""
    entry = kernel.entry(native.call) if native.call else ""
    return Implementation(
        kernel.name,
        native.impl,
        "native",
        native.library,
        native.description,
        native.dtypes,
        entry,
        dict(native.requires),
        on_request=tuple(d for d in native.dtypes if d in native.accuracy),
    )


def present(module: str) -> bool:
    """Whether ``module`` can be imported here (checked without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing or broken
        return False


def missing_modules(*modules: str) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (checked without importing them)."""
    return [m for m in modules if not present(m)]


def declared_natives(kernel: Kernel, backend: str) -> list[Implementation]:
    """The natives ``kernel``'s folder declares for ``backend`` that are listed here (see
    :class:`~hwbench.core.kernel.Native`)."""
    return [
        native_implementation(kernel, n)
        for n in kernel.natives.get(backend, ())
        if all(present(m) for m in n.listed_with) and not any(present(m) for m in n.unless)
    ]


def rank_implementations(backend: str, kernel: Kernel) -> list[Implementation]:
    """What ``kernel``, a kernel that spans ranks, declares for ``backend``: its natives there,
    then the sources that name the backend (``hwbench.collective`` runs them)."""
    return declared_natives(kernel, backend) + [
        source_implementation(kernel, s) for s in kernel.sources if backend in s.backends
    ]


class Prepared(ABC):
    """A case ready to run: inputs on the device, code compiled, output allocated."""

    compile_s: float = 0.0
    config: Mapping[str, Any] = {}

    @abstractmethod
    def run(self) -> None:
        """Run the kernel once; no allocation, compilation or host transfer."""

    @abstractmethod
    def result(self) -> np.ndarray:
        """The output of the last run, on the host."""

    def clear_output(self) -> bool:
        """Fill the output with NaN (a sentinel for integers) where it lives, so the output after
        the timed calls shows that they computed it; False (the default) where this case cannot.
        Then the pipeline fills the array :meth:`result` hands back where that is the same
        writable array each time; where :meth:`result` returns a new copy each time, the record
        says its timed calls were not verified (a call that returns a new output object each time
        is verified by that object's identity)."""
        return False


@dataclass(frozen=True)
class Flush:
    """A cache flush run before each timed call, and how it evicts (said in each record)."""

    run: Callable[[], None]
    method: str

    def __call__(self) -> None:
        self.run()


class Timer(ABC):
    """Times one call on the device's own clock."""

    name: str = "timer"
    resolution_s: float = 1e-9

    @abstractmethod
    def time(self, fn: Callable[[], None]) -> float:
        """Seconds that ``fn()`` took, on this timer."""


class WallTimer(Timer):
    """``time.perf_counter_ns`` around the call: the right timer for host-synchronous work."""

    name = "perf_counter"

    def __init__(self) -> None:
        self.resolution_s = _perf_counter_granularity()

    def time(self, fn: Callable[[], None]) -> float:
        start = time.perf_counter_ns()
        fn()
        return (time.perf_counter_ns() - start) * 1e-9


def _perf_counter_granularity() -> float:
    """Smallest step two back-to-back perf_counter_ns calls show (the practical resolution)."""
    steps = []
    for _ in range(200):
        a = time.perf_counter_ns()
        b = time.perf_counter_ns()
        while b == a:
            b = time.perf_counter_ns()
        steps.append(b - a)
    return min(steps) * 1e-9


class Backend(ABC):
    """A place kernels run: the CPU, an OpenCL platform, CUDA, ROCm, a new vendor's runtime."""

    name: str = ""
    description: str = ""
    #: What kind of device runtime this is (a key of :data:`BACKEND_KINDS`): ``cpu``, ``gpu`` or
    #: ``portable``; hwbench branches on it, never on the backend's name.
    kind: str = "portable"
    #: Source languages this backend compiles and launches (``llvmlite``, ``opencl-c``, ``triton``).
    languages: tuple[str, ...] = ()
    #: How this backend runs a source of each language, added to its description.
    lowering: Mapping[str, str] = {}

    @abstractmethod
    def probe(self) -> Availability:
        """Whether this backend can run here; never raises, imports its SDK inside."""

    @abstractmethod
    def devices(self) -> list[DeviceInfo]:
        """The devices available (called only after a successful probe)."""

    def implementations(self, kernel: str) -> list[Implementation]:
        """Every implementation of ``kernel`` this backend can prepare, available here or not:
        :meth:`natives` first (porting overhead is measured against the first), then the
        kernel's sources in :attr:`languages`. None of a kernel that spans ranks: those run in
        ``hwbench.collective``, not through :meth:`prepare`."""
        spec = get_kernel(kernel)
        if spec.spans_ranks:
            return []
        sources = [
            source_implementation(spec, s, self.lowering.get(s.language, ""))
            for s in spec.sources
            if s.language in self.languages and (not s.backends or self.name in s.backends)
        ]
        return self.natives(spec) + sources

    def natives(self, kernel: Kernel) -> list[Implementation]:
        """The vendor calls a user would make instead on this backend: the kernel folder's natives
        for this backend's name; a third-party backend extends the list with its own."""
        return declared_natives(kernel, self.name)

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        """Whether ``impl`` can run ``dtype`` on ``device``; the reason when it cannot."""
        missing = next((hint for module, hint in impl.requires.items() if not present(module)), None)
        if missing is not None:
            return Availability(False, missing)
        if dtype not in impl.dtypes:
            return Availability(False, f"{impl.name} has no {dtype} variant on {self.name}")
        return Availability(True)

    @abstractmethod
    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        """Move inputs to ``device``, compile ``impl`` and allocate its output."""

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        """Exception types ``prepare`` raises for a compiler's rejection (a compile_error record)."""
        return ()

    def timer(self, device: DeviceInfo) -> Timer:
        """The timer for this device; wall clock unless the backend has device events."""
        return WallTimer()

    def flush(self, device: DeviceInfo) -> Callable[[], None] | None:
        """A callable that evicts caches before a timed call, or None when there is none."""
        return None

    def case_flush(self, device: DeviceInfo, prepared: Prepared) -> Flush | None:
        """The flush before each timed call of ``prepared``: by default :meth:`flush`, the same
        for every case; a backend that can evict exactly a case's memory overrides this."""
        run = self.flush(device)
        return Flush(run, "the backend's cache flush") if run is not None else None

    def environment(self) -> dict[str, Any]:
        """Versions and settings of this backend's software stack, for run metadata."""
        return {}

    def observers(self, device: Mapping[str, Any] | None) -> Observers:
        """What observes ``device`` (its description, a :class:`DeviceInfo` as results files write
        it): by default hwbench's readers for its kind and vendor (:func:`default_observers`); a
        backend with readers of its own returns them in :attr:`Observers.sensors`."""
        return default_observers(self.kind, device)

    def remeasure_peak(self, device: DeviceInfo) -> Peak | None:
        """The device's peak measured again, more thoroughly, before a vendor library's record above
        the peak it reported is refused; None where the backend cannot (its peak stands)."""
        return None
