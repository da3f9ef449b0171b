"""A test-only backend whose implementations crash, hang, fail, or compute wrong results on purpose.

Registered through ``HWBENCH_BACKENDS=faulty=fakes.faulty_backend:FaultyBackend``; its GEMM
implementations are named for what they do.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Mapping

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Kernel, Prepared, Shape

BEHAVIOURS = ("good", "segfault", "abort", "hang", "wrong", "raise", "compile_error", "nan")


class CompileFailure(Exception):
    """What this backend's pretend compiler raises."""


class _Prepared(Prepared):
    def __init__(self, behaviour: str, a: np.ndarray, b: np.ndarray) -> None:
        self.behaviour, self.a, self.b = behaviour, a, b
        self.out = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)

    def run(self) -> None:
        if self.behaviour == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if self.behaviour == "abort":
            os.kill(os.getpid(), signal.SIGABRT)
        if self.behaviour == "hang":
            while True:
                time.sleep(1)
        if self.behaviour == "raise":
            raise RuntimeError("device lost")
        np.matmul(self.a, self.b, out=self.out)
        if self.behaviour == "wrong":
            self.out[0, 0] += 1.0
        if self.behaviour == "nan":
            self.out[-1, -1] = np.nan

    def result(self) -> np.ndarray:
        return self.out


class FaultyBackend(Backend):
    """GEMM only; one implementation per misbehaviour."""

    name = "faulty"
    description = "test backend that misbehaves on purpose"

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(backend=self.name, index=0, name="Faulty Device", vendor="test", kind="accelerator")]

    def implementations(self, kernel: str) -> list[Implementation]:
        if kernel != "gemm":
            return []
        return [
            Implementation("gemm", b, "native" if b == "good" else "portable", "test", f"behaves: {b}", ("fp32",))
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
        if impl.name == "compile_error":
            raise CompileFailure("error: expected ';' at line 3")
        return _Prepared(impl.name, inputs["A"], inputs["B"])

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        return (CompileFailure,)
