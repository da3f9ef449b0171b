"""What a backend must provide: probe, devices, implementations, prepare, timer and flush.

A backend module imports its SDK only inside its methods, so listing backends never loads
a driver. Third-party backends subclass :class:`Backend` and register through the
``hwbench.backends`` entry-point group.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwbench.core.kernel import Kernel, Shape


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


@dataclass(frozen=True)
class Implementation:
    """One way to compute a kernel on a backend: a portable source or a vendor library."""

    kernel: str
    name: str
    kind: str  # "portable" or "native"
    language: str  # "llvmlite", "opencl-c", "triton", or the library's name
    description: str
    dtypes: tuple[str, ...]


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

    @abstractmethod
    def probe(self) -> Availability:
        """Whether this backend can run here; never raises, imports its SDK inside."""

    @abstractmethod
    def devices(self) -> list[DeviceInfo]:
        """The devices available (called only after a successful probe)."""

    @abstractmethod
    def implementations(self, kernel: str) -> list[Implementation]:
        """Every implementation of ``kernel`` this backend knows, available here or not.

        Porting overhead is measured against the first native implementation listed.
        """

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        """Whether ``impl`` can run ``dtype`` on ``device``; the reason when it cannot."""
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

    def environment(self) -> dict[str, Any]:
        """Versions and settings of this backend's software stack, for run metadata."""
        return {}
