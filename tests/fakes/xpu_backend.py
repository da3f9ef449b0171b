"""A GPU-like test backend, "xpu": a pretend vendor's GPU runtime whose devices compute with NumPy.

Registered as a third-party backend would be, without touching hwbench:
``HWBENCH_BACKENDS=xpu=fakes.xpu_backend:XpuBackend`` with ``tests/`` on ``PYTHONPATH``. It says
it is of kind ``gpu`` (:attr:`~hwbench.core.backend.Backend.kind`) and describes devices of kind
``gpu`` with memory of their own: ``prepare`` copies the inputs into the device's memory (arrays
of its own), a call computes from there into the device's output, ``result`` copies the output
back to the host (a new array each time) and ``clear_output`` fills the device's output with NaN,
so that the check after the timed calls sees what they computed. Its natives are its own
(:meth:`XpuBackend.natives`: ``xpu_gemm`` and ``xpu_stream``, called as ``fn(device_arrays, out,
shape, dtype)``, the convention of the cuda and rocm backends' natives), not lines in the
kernels' natives tables.

Each device's peak is what its pretend datasheet says (:func:`datasheet`): a bound, from the host's
cores, that NumPy stays under, as a GPU's library stays under its datasheet's peak.

Configured by the environment (the commands' worker and device processes inherit it):

- ``HWBENCH_XPU_DEVICES``: how many devices (default 2);
- ``HWBENCH_XPU_SLOW``: ``INDEX:FACTOR``, a device that does every call's work ``FACTOR`` times
  (the same answer, ``FACTOR`` times slower): a slow node's GPU for ``hwbench fleet`` to find.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Kernel, Peak, Prepared, Shape
from hwbench.core.loading import load_callable

DEVICES_VARIABLE = "HWBENCH_XPU_DEVICES"
SLOW_VARIABLE = "HWBENCH_XPU_SLOW"
#: The device model every xpu device is (``hwbench fleet`` groups devices by it).
MODEL = "XPU-T1 NumPy GPU"
VENDOR = "Xpu Devices"
#: Each device's memory, bytes (the pretend datasheet's).
MEMORY_BYTES = 16 * 2**30
DTYPES = ("fp32", "fp64")
#: The stream operations (BabelStream's, as ``kernels/stream``): 0 copy, 1 mul, 2 add, 3 triad, 4 dot.
STREAM_SCALAR = 0.375
COPY, MUL, ADD, TRIAD, DOT = range(5)

Call = tuple[Callable[[], Any], Mapping[str, Any]]


def device_count() -> int:
    """How many xpu devices there are (``HWBENCH_XPU_DEVICES``, default 2)."""
    return int(os.environ.get(DEVICES_VARIABLE) or 2)


def slowness(index: int) -> int:
    """How many times device ``index`` does each call's work (``HWBENCH_XPU_SLOW``; 1 by default)."""
    said = os.environ.get(SLOW_VARIABLE) or ""
    slow, _, factor = said.partition(":")
    return int(factor or 1) if said and int(slow) == index else 1


#: The pretend datasheet's FLOP per cycle of each compute unit (one of the host's cores), per dtype:
#: two FMA pipes of 16 fp32 (8 fp64) lanes, more than any host core's NumPy reaches.
FLOP_PER_CYCLE = {"fp32": 64, "fp64": 32}
#: The pretend datasheet's clock, GHz.
CLOCK_GHZ = 5.0


def datasheet(compute_units: int) -> Peak:
    """The devices' pretend datasheet peak: ``compute_units`` (the host's cores, which NumPy computes
    on) x :data:`FLOP_PER_CYCLE` x :data:`CLOCK_GHZ`, a bound the NumPy calls stay under."""
    tflops = {dtype: compute_units * flop * CLOCK_GHZ / 1e3 for dtype, flop in FLOP_PER_CYCLE.items()}
    return Peak(tflops, "the xpu datasheet (a test device: the host's cores at 5 GHz, 2 x 16-lane FMA)")


class OnXpu(Prepared):
    """A case on an xpu device: its inputs and output in the device's memory, a call bound to them."""

    def __init__(self, call: Callable[[], Any], config: Mapping[str, Any], out: np.ndarray, repeat: int) -> None:
        self._call, self._out, self._repeat = call, out, repeat
        self.config = dict(config)

    def run(self) -> None:
        for _ in range(self._repeat):
            self._call()

    def result(self) -> np.ndarray:
        """The device's output copied to the host (a new array: the host never sees device memory)."""
        return np.array(self._out, copy=True)

    def clear_output(self) -> bool:
        """Fill the device's output with NaN."""
        self._out.fill(np.nan)
        return True


def xpu_gemm(arrays: Mapping[str, np.ndarray], out: np.ndarray, shape: Shape, dtype: str) -> Call:
    """xpu: ``C = A @ B`` into the device's output."""
    a, b = arrays["A"], arrays["B"]
    return (lambda: np.matmul(a, b, out=out)), {"library": f"xpublas (numpy {np.__version__})"}


def xpu_stream(arrays: Mapping[str, np.ndarray], out: np.ndarray, shape: Shape, dtype: str) -> Call:
    """xpu: BabelStream's operation ``shape['op']`` into the device's output (dot into a 0-d array)."""
    op, x = shape["op"], arrays
    s = out.dtype.type(STREAM_SCALAR)
    config = {"library": f"xpublas (numpy {np.__version__})", "op": op}
    if op == COPY:
        return (lambda: np.copyto(out, x["a"])), config
    if op == MUL:
        return (lambda: np.multiply(s, x["c"], out=out)), config
    if op == ADD:
        return (lambda: np.add(x["a"], x["b"], out=out)), config
    if op == TRIAD:

        def triad() -> None:
            np.multiply(s, x["c"], out=out)
            np.add(out, x["b"], out=out)

        return triad, config

    def dot() -> None:
        out[()] = np.dot(x["a"], x["b"])

    return dot, config


#: The natives this backend declares itself, per kernel: (impl, description, function).
NATIVES = {
    "gemm": ("xpu_gemm", "xpublas GEMM on the xpu device", xpu_gemm),
    "stream": ("xpu_stream", "xpublas copy, scal, axpy and dot on the xpu device", xpu_stream),
}


class XpuBackend(Backend):
    """A new vendor's GPU runtime: ``HWBENCH_XPU_DEVICES`` devices of kind gpu, NumPy computing."""

    name = "xpu"
    description = "test backend: a pretend vendor's GPU runtime computing with NumPy"
    kind = "gpu"

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        units = os.cpu_count() or 1
        return [
            DeviceInfo(
                backend=self.name,
                index=index,
                name=MODEL,
                vendor=VENDOR,
                kind="gpu",
                arch="xpu1",
                compute_units=units,
                memory_bytes=MEMORY_BYTES,
                driver="xpu-driver 1.0",
                runtime=f"xpu-runtime 1.0 (numpy {np.__version__})",
                libraries={"xpublas": np.__version__},
                peak=datasheet(units),
            )
            for index in range(device_count())
        ]

    def natives(self, kernel: Kernel) -> list[Implementation]:
        """The backend's own vendor calls (:data:`NATIVES`), not the kernel folder's."""
        if kernel.name not in NATIVES:
            return []
        impl, description, function = NATIVES[kernel.name]
        entry = f"{function.__module__}:{function.__name__}"
        return [Implementation(kernel.name, impl, "native", "xpublas", description, DTYPES, entry)]

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        """Copy the inputs into the device's memory, allocate the output there and bind the native."""
        on_device = {name: np.array(array, copy=True) for name, array in inputs.items()}
        host = next(iter(on_device.values())).dtype
        out = np.full(kernel.output_shape(shape), np.nan, dtype=host)
        call, config = load_callable(impl.entry)(on_device, out, shape, dtype)
        return OnXpu(call, config, out, slowness(device.index))
