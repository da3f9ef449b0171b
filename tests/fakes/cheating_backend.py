"""A test-only backend that cheats: kernels that stop working after their first call, a timer
that lies, a device whose peak is not a number.

Registered through ``HWBENCH_BACKENDS=cheat=fakes.cheating_backend:CheatingBackend``. What the
timer returns comes from ``HWBENCH_CHEAT_TIMER`` (seconds, e.g. ``-1``, ``0``, ``1e-12``;
``noisy``: 1 ms and 3 ms in turn; unset: the wall clock), the device's fp32 peak from
``HWBENCH_CHEAT_PEAK`` (TFLOPS or ``nan``; unset: none), its name from ``HWBENCH_CHEAT_DEVICE``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Kernel, Prepared, Shape
from hwbench.core.backend import Peak, Timer, WallTimer

#: honest: computes every call; lazy: computes on its first call only (its output can be
#: cleared); stale: the same, but its output cannot be cleared; decays: right on its first
#: call, wrong afterwards.
BEHAVIOURS = ("honest", "lazy", "stale", "decays")


class _Prepared(Prepared):
    def __init__(self, behaviour: str, a: np.ndarray, b: np.ndarray) -> None:
        self.behaviour, self.a, self.b, self.calls = behaviour, a, b, 0
        self.out = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)

    def run(self) -> None:
        self.calls += 1
        if self.calls == 1 or self.behaviour in ("honest", "decays"):
            np.matmul(self.a, self.b, out=self.out)
        if self.behaviour == "decays" and self.calls > 1:
            self.out *= 1.5

    def result(self) -> np.ndarray:
        return self.out.copy()

    def clear_output(self) -> bool:
        if self.behaviour == "stale":
            return False
        self.out.fill(np.nan)
        return True


class _FixedTimer(Timer):
    name = "fixed"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def time(self, fn: Callable[[], None]) -> float:
        fn()
        return self.seconds


class _NoisyTimer(Timer):
    """1 ms and 3 ms in turn: a coefficient of variation of about 50 %."""

    name = "noisy"

    def __init__(self) -> None:
        self.calls = 0

    def time(self, fn: Callable[[], None]) -> float:
        fn()
        self.calls += 1
        return 1e-3 if self.calls % 2 else 3e-3


class CheatingBackend(Backend):
    """GEMM only; one implementation per way of cheating."""

    name = "cheat"
    description = "test backend whose kernels, timer or peak cheat on purpose"

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        peak = os.environ.get("HWBENCH_CHEAT_PEAK")
        return [
            DeviceInfo(
                backend=self.name,
                index=0,
                name=os.environ.get("HWBENCH_CHEAT_DEVICE", "Cheating Device"),
                vendor="test",
                kind="accelerator",
                peak=None if peak is None else Peak({"fp32": float(peak)}, "test"),
            )
        ]

    def implementations(self, kernel: str) -> list[Implementation]:
        if kernel != "gemm":
            return []
        return [
            Implementation("gemm", b, "native" if b == "honest" else "portable", "test", f"cheats: {b}", ("fp32",))
            for b in BEHAVIOURS
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
        return _Prepared(impl.name, inputs["A"], inputs["B"])

    def timer(self, device: DeviceInfo) -> Timer:
        fixed = os.environ.get("HWBENCH_CHEAT_TIMER")
        if fixed == "noisy":
            return _NoisyTimer()
        return WallTimer() if fixed is None else _FixedTimer(float(fixed))
