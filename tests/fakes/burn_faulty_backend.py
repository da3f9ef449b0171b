"""A test-only backend whose GEMM flips one bit of its output from a chosen call on, as a device
that starts corrupting silently would.

Registered through ``HWBENCH_BACKENDS=burnfaulty=fakes.burn_faulty_backend:BurnFaultyBackend``. Its
implementations: ``good`` (NumPy's matmul) and ``flip``, which after computing the right answer
flips the lowest significand bit of one element on every call from ``HWBENCH_BURN_FAULT_AT``
on (calls counted from 0, the first call; so call k is the burn's iteration k), or on that
call only with ``HWBENCH_BURN_FAULT_MODE=once``. One ulp: a tolerance would pass it, an exact
check does not. ``BadDevicesBackend`` (``burnbad``) breaks the backend contract instead: its
``devices()`` answers dicts, not ``DeviceInfo``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Kernel, Prepared, Shape

FAULT_AT = "HWBENCH_BURN_FAULT_AT"
FAULT_MODE = "HWBENCH_BURN_FAULT_MODE"


class _Prepared(Prepared):
    def __init__(self, a: np.ndarray, b: np.ndarray, fault_at: int | None, once: bool) -> None:
        self.a, self.b, self.fault_at, self.once = a, b, fault_at, once
        self.out = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)
        self.calls = 0

    def run(self) -> None:
        call, self.calls = self.calls, self.calls + 1
        np.matmul(self.a, self.b, out=self.out)
        if self.fault_at is not None and (call == self.fault_at or (not self.once and call > self.fault_at)):
            where = (self.out.shape[0] // 2, self.out.shape[1] // 2)
            bits = self.out.view(np.uint32 if self.out.dtype == np.float32 else np.uint64)
            bits[where] ^= 1

    def result(self) -> np.ndarray:
        return self.out.copy()

    def clear_output(self) -> bool:
        self.out.fill(np.nan)
        return True


class BurnFaultyBackend(Backend):
    """GEMM only, in fp32 and fp64: ``good`` and ``flip``."""

    name = "burnfaulty"
    description = "test backend whose GEMM starts flipping a bit at a chosen call"

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(backend=self.name, index=0, name="Flaky Device", vendor="test", kind="accelerator")]

    def implementations(self, kernel: str) -> list[Implementation]:
        if kernel != "gemm":
            return []
        return [
            Implementation("gemm", "good", "native", "test", "NumPy matmul", ("fp32", "fp64")),
            Implementation("gemm", "flip", "portable", "test", "flips a bit from a chosen call on", ("fp32", "fp64")),
        ]

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        at = os.environ.get(FAULT_AT) if impl.name == "flip" else None
        once = os.environ.get(FAULT_MODE, "from") == "once"
        return _Prepared(inputs["A"], inputs["B"], None if at is None else int(at), once)


class BadDevicesBackend(BurnFaultyBackend):
    """The same GEMM, but ``devices()`` answers plain dicts instead of ``DeviceInfo``: a third-party
    backend that broke the contract (``HWBENCH_BACKENDS=burnbad=fakes.burn_faulty_backend:BadDevicesBackend``)."""

    name = "burnbad"
    description = "test backend whose devices() returns dicts, not DeviceInfo"

    def devices(self) -> list[DeviceInfo]:
        return [{"backend": self.name, "index": 0, "name": "Dict Device"}]  # type: ignore[list-item]
