"""One configurable test backend, :class:`FakeBackend`: a device that computes GEMM with NumPy
and misbehaves on purpose as its configuration says: it fails, hangs or crashes, computes wrong
results, cheats (computes once, lies about time or peak), reuses its first answer, starts
flipping a bit during a burn, or answers a device list that breaks the backend contract.

A configuration (:class:`Config`) names the backend's implementations, each an :class:`Impl`: how
its calls compute, the fault it injects and how it hands its output back. The configurations the
tests register, each a factory of this module (``HWBENCH_BACKENDS=NAME=fakes.backend:FACTORY``
with ``tests/`` on ``PYTHONPATH``):

- ``faulty``: one implementation per fault: ``good``, ``segfault``, ``abort``, ``hang``,
  ``wrong``, ``raise``, ``compile_error``, ``nan``;
- ``cheat``: ``honest``, ``lazy`` (computes on its first call only), ``stale`` (the same, its output
  cannot be cleared), ``decays`` (right on its first call, wrong afterwards); its timer, peak and
  device name come from the environment (below);
- ``reuse``: kernels that compute on their first call and reuse that answer (KernelBench's
  adversarial case), none clearing its output, beside honest ones: ``reuses``, ``copies``,
  ``frozen``, ``honest``, ``fresh``; fp32 and int8 (int32 output);
- ``burnfaulty``: ``good`` and ``flip``, whose calls flip the lowest significand bit of one
  element from the call ``HWBENCH_BURN_FAULT_AT`` on (calls counted from 0, so call k is a burn's
  iteration k), or on that call only with ``HWBENCH_BURN_FAULT_MODE=once``: one ulp, which a
  tolerance passes and an exact check does not;
- ``burnbad``: ``burnfaulty``'s GEMM, but ``devices()`` answers dicts, not ``DeviceInfo``.

Beside it, :class:`FaultyOpenCL` is the real OpenCL backend launching its GEMM out of its buffers.

What the environment sets, read in the process that runs the backend (a worker, a burn's device
process): ``HWBENCH_CHEAT_TIMER``, what the timer returns (seconds, e.g. ``-1``, ``0``,
``1e-12``; ``noisy``: 1 ms and 3 ms in turn; unset: the wall clock); ``HWBENCH_CHEAT_PEAK``, the
device's fp32 peak (TFLOPS or ``nan``; unset: none); ``HWBENCH_CHEAT_DEVICE``, its name; and the
burn fault's two variables above.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hwbench.backend import (
    Availability,
    Backend,
    DeviceInfo,
    Implementation,
    Kernel,
    Peak,
    Prepared,
    Shape,
    Timer,
    WallTimer,
)
from hwbench.backends.opencl import OpenCLBackend

TIMER = "HWBENCH_CHEAT_TIMER"
PEAK = "HWBENCH_CHEAT_PEAK"
DEVICE = "HWBENCH_CHEAT_DEVICE"
FAULT_AT = "HWBENCH_BURN_FAULT_AT"
FAULT_MODE = "HWBENCH_BURN_FAULT_MODE"

#: How a call computes: every call, the first call only, or a new read-only array each call.
COMPUTES = ("every", "first", "fresh")
#: Faults an implementation injects: before computing (``segfault`` reads address 0, ``abort``,
#: ``hang``, ``raise``), in ``prepare`` (``compile_error``), or into its answer (``wrong``: +1 at
#: [0, 0]; ``nan`` at [-1, -1]; ``decays``: x1.5 after the first call; ``flip``: see the module).
FAULTS = ("", "segfault", "abort", "hang", "raise", "compile_error", "wrong", "nan", "decays", "flip")
#: How ``result()`` hands the output back: ``same`` (the one writable array each time, which the
#: pipeline fills itself), ``frozen`` (the same array, read-only after the first call), ``copy``
#: (a new copy each time, nothing clears it), ``cleared`` (a new copy, ``clear_output`` fills NaN).
OUTPUTS = ("same", "frozen", "copy", "cleared")


class CompileFailure(Exception):
    """What this backend's pretend compiler raises."""


@dataclass(frozen=True)
class Impl:
    """One GEMM implementation of a configuration and how it behaves."""

    name: str
    kind: str  # "native" or "portable"
    description: str
    compute: str = "every"
    fault: str = ""
    output: str = "same"


@dataclass(frozen=True)
class Config:
    """A fake backend: its description, its device's name, its GEMM implementations and dtypes, and
    whether its ``devices()`` breaks the contract."""

    name: str
    description: str
    device: str
    impls: tuple[Impl, ...]
    dtypes: tuple[str, ...] = ("fp32",)
    dict_devices: bool = False


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """A @ B as the GEMM kernel's reference rounds it (int8 summed exactly in int32), into ``out``
    where given."""
    if a.dtype == np.int8:
        a, b = a.astype(np.int32), b.astype(np.int32)
    return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)


class FakePrepared(Prepared):
    """A GEMM case on the fake device, computing and faulting as its :class:`Impl` says."""

    def __init__(self, impl: Impl, a: np.ndarray, b: np.ndarray, fault_at: int | None, once: bool) -> None:
        self.impl, self.a, self.b, self.fault_at, self.once = impl, a, b, fault_at, once
        self.out = np.zeros((a.shape[0], b.shape[1]), dtype=np.int32 if a.dtype == np.int8 else a.dtype)
        self.calls = 0

    def run(self) -> None:
        call, self.calls = self.calls, self.calls + 1
        fault = self.impl.fault
        if fault == "segfault":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        if fault == "abort":
            os.kill(os.getpid(), signal.SIGABRT)
        if fault == "hang":
            while True:
                time.sleep(1)
        if fault == "raise":
            raise RuntimeError("device lost")
        if self.impl.compute == "fresh":
            self.out = _product(self.a, self.b)
            self.out.setflags(write=False)
        elif call == 0 or self.impl.compute == "every":
            _product(self.a, self.b, self.out)
            if self.impl.output == "frozen":
                self.out.setflags(write=False)
        self._corrupt(call)

    def _corrupt(self, call: int) -> None:
        fault = self.impl.fault
        if fault == "wrong":
            self.out[0, 0] += 1
        elif fault == "nan":
            self.out[-1, -1] = np.nan
        elif fault == "decays" and call > 0:
            self.out *= 1.5
        elif fault == "flip" and self.fault_at is not None:
            if call == self.fault_at or (not self.once and call > self.fault_at):
                where = (self.out.shape[0] // 2, self.out.shape[1] // 2)
                bits = self.out.view(np.uint32 if self.out.dtype == np.float32 else np.uint64)
                bits[where] ^= 1

    def result(self) -> np.ndarray:
        return self.out.copy() if self.impl.output in ("copy", "cleared") else self.out

    def clear_output(self) -> bool:
        if self.impl.output != "cleared":
            return False
        self.out.fill(np.nan)
        return True


class FixedTimer(Timer):
    """Runs the call and says it took ``seconds``."""

    name = "fixed"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def time(self, fn: Callable[[], None]) -> float:
        fn()
        return self.seconds


class NoisyTimer(Timer):
    """1 ms and 3 ms in turn: a coefficient of variation of about 50 %."""

    name = "noisy"

    def __init__(self) -> None:
        self.calls = 0

    def time(self, fn: Callable[[], None]) -> float:
        fn()
        self.calls += 1
        return 1e-3 if self.calls % 2 else 3e-3


class FakeBackend(Backend):
    """GEMM only, on one device of kind accelerator; what it does is its :class:`Config`'s."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.name, self.description = config.name, config.description

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        name = os.environ.get(DEVICE, self.config.device)
        if self.config.dict_devices:
            return [{"backend": self.name, "index": 0, "name": name}]  # type: ignore[list-item]
        peak = os.environ.get(PEAK)
        return [
            DeviceInfo(
                backend=self.name,
                index=0,
                name=name,
                vendor="test",
                kind="accelerator",
                peak=None if peak is None else Peak({"fp32": float(peak)}, "test"),
            )
        ]

    def implementations(self, kernel: str) -> list[Implementation]:
        if kernel != "gemm":
            return []
        return [
            Implementation("gemm", i.name, i.kind, "test", i.description, self.config.dtypes) for i in self.config.impls
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
        chosen = next(i for i in self.config.impls if i.name == impl.name)
        if chosen.fault == "compile_error":
            raise CompileFailure("error: expected ';' at line 3")
        at = os.environ.get(FAULT_AT) if chosen.fault == "flip" else None
        once = os.environ.get(FAULT_MODE, "from") == "once"
        return FakePrepared(chosen, inputs["A"], inputs["B"], None if at is None else int(at), once)

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        return (CompileFailure,)

    def timer(self, device: DeviceInfo) -> Timer:
        fixed = os.environ.get(TIMER)
        if fixed == "noisy":
            return NoisyTimer()
        return WallTimer() if fixed is None else FixedTimer(float(fixed))


FAULTY = Config(
    "faulty",
    "test backend that misbehaves on purpose",
    "Faulty Device",
    tuple(
        Impl(b, "native" if b == "good" else "portable", f"behaves: {b}", fault="" if b == "good" else b)
        for b in ("good", "segfault", "abort", "hang", "wrong", "raise", "compile_error", "nan")
    ),
)
CHEAT = Config(
    "cheat",
    "test backend whose kernels, timer or peak cheat on purpose",
    "Cheating Device",
    (
        Impl("honest", "native", "cheats: honest", output="cleared"),
        Impl("lazy", "portable", "cheats: lazy", compute="first", output="cleared"),
        Impl("stale", "portable", "cheats: stale", compute="first", output="copy"),
        Impl("decays", "portable", "cheats: decays", fault="decays", output="cleared"),
    ),
)
REUSE = Config(
    "reuse",
    "test backend whose kernels reuse their first answer",
    "Reusing Device",
    (
        Impl("reuses", "portable", "output: reuses", compute="first"),
        Impl("copies", "portable", "output: copies", compute="first", output="copy"),
        Impl("frozen", "portable", "output: frozen", compute="first", output="frozen"),
        Impl("honest", "portable", "output: honest"),
        Impl("fresh", "portable", "output: fresh", compute="fresh"),
    ),
    dtypes=("fp32", "int8"),
)
BURN_FAULTY = Config(
    "faulty",
    "test backend whose GEMM starts flipping a bit at a chosen call",
    "Flaky Device",
    (
        Impl("good", "native", "NumPy matmul", output="cleared"),
        Impl("flip", "portable", "flips a bit from a chosen call on", fault="flip", output="cleared"),
    ),
    dtypes=("fp32", "fp64"),
)
BURN_BAD = replace(
    BURN_FAULTY,
    name="burnbad",
    description="test backend whose devices() returns dicts, not DeviceInfo",
    device="Dict Device",
    dict_devices=True,
)


def faulty() -> FakeBackend:
    """The ``faulty`` configuration (:data:`FAULTY`)."""
    return FakeBackend(FAULTY)


def cheat() -> FakeBackend:
    """The ``cheat`` configuration (:data:`CHEAT`)."""
    return FakeBackend(CHEAT)


def reuse() -> FakeBackend:
    """The ``reuse`` configuration (:data:`REUSE`)."""
    return FakeBackend(REUSE)


def burnfaulty() -> FakeBackend:
    """The ``burnfaulty`` configuration (:data:`BURN_FAULTY`)."""
    return FakeBackend(BURN_FAULTY)


def burnbad() -> FakeBackend:
    """The ``burnbad`` configuration (:data:`BURN_BAD`)."""
    return FakeBackend(BURN_BAD)


class FaultyOpenCL(OpenCLBackend):
    """The real OpenCL backend whose OpenCL C GEMM is launched with sizes that do not match its
    buffers, so that the driver crashes the process (a ``crashed`` record, the run going on):
    ``HWBENCH_BACKENDS=opencl_faulty=fakes.backend:FaultyOpenCL``. Importing it imports no OpenCL
    SDK (the backend imports pyopencl in its methods)."""

    name = "opencl_faulty"

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        wrong = {"M": 1 << 22, "N": 16, "K": 1 << 12}  # row 2**22 of A lies 64 GiB past its buffer
        return super().prepare(impl, kernel, inputs, wrong, dtype, device)

    def implementations(self, kernel: str) -> list[Implementation]:
        return [i for i in super().implementations(kernel) if i.name == "opencl"]

    def environment(self) -> dict[str, Any]:
        return {}
