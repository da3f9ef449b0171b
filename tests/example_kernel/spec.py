"""axpy: ``out = alpha*x + y`` over ``n`` elements, written to a separate output.

Everything a backend needs to know about the kernel, and nothing about any device: its shape,
dtypes, work, inputs, float64 reference and tolerance, and which sources and natives it has.

The values make every result exact in fp32 and fp64, so parity is checked for equality:
``x`` and ``y`` hold ``1 + k/1024`` (11 significant bits) and ``alpha = 0.375`` adds 2, so
``alpha*x + y`` needs at most 15 bits, under fp32's 24, whether a source rounds after the
multiply or fuses it into an FMA.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hwbench.core.dtypes import DTYPE_BYTES, storage_dtype
from hwbench.core.kernel import Kernel, Native, Shape, ShapeParam, Source, Tolerance

#: The scalar: exactly representable in every dtype the kernel runs.
ALPHA = 0.375
#: Period of the input values (prime: no vector width divides it, so tails are exercised).
PERIOD = 1021


def values(n: int, salt: int, seed: int) -> np.ndarray:
    """``1 + k/1024`` with ``k`` running through 0..PERIOD-1 from an offset of ``salt`` and ``seed``."""
    k = (np.arange(n) * 7 + salt * 337 + seed * 101) % PERIOD
    return 1.0 + k / 1024.0


class Axpy(Kernel):
    """``out = alpha*x + y``: a bandwidth-bound kernel of one loop."""

    name = "axpy"  # what --kernel and --shape axpy:n=... call it (and HWBENCH_KERNELS registers)
    description = "worked example: out = alpha*x + y (alpha = 0.375), a separate output"
    params = (ShapeParam("n", "elements of x, y and out", default=2**22, aliases=("N",)),)
    dtypes = ("fp32", "fp64")
    # Bound by memory: records get their GB/s as a share of the device's memory bandwidth.
    bandwidth_bound = True
    profiles = {
        "quick": ({"n": 2**22},),
        "standard": ({"n": 2**26},),
        "full": ({"n": 2**27},),
    }

    # Portable sources, one per language: impl name, language, the module beside this file that holds
    # it and its bindings, dtypes, description. Every backend that compiles the language offers it,
    # unless ``backends`` names the only ones that do: the llvmlite source here is a host CPU (SIMD
    # program) kernel only, and without ``backends`` the opencl backend, which lowers llvmlite
    # work-group kernels to SPIR-V, would list it and skip it ("has no work-group (SIMT) kernel").
    sources = (
        Source("llvm", "llvmlite", "llvm", dtypes, "llvmlite IR: one vector loop and a scalar tail", backends=("cpu",)),
        Source("opencl", "opencl-c", "opencl", dtypes, "OpenCL C: one element per work-item"),
    )
    # Natives per backend name: the call a user would make instead (``module:function`` beside this
    # file; the first of a backend is the baseline of the portable sources' porting overhead).
    # ``example`` is the pretend device of tests/example_backend.py, which calls natives as cpu does.
    natives = {
        "cpu": (Native("numpy", "numpy", "NumPy: multiply(out=), then add(out=)", dtypes, call="natives:numpy_axpy"),),
        "example": (Native("numpy", "numpy", "NumPy on the pretend device", dtypes, call="natives:numpy_axpy"),),
    }

    def output_shape(self, shape: Shape) -> tuple[int, ...]:
        return (shape["n"],)

    def flops(self, shape: Shape) -> float:
        return 2.0 * shape["n"]  # one multiply and one add per element

    def bytes_moved(self, shape: Shape, dtype: str) -> float:
        return 3.0 * shape["n"] * DTYPE_BYTES[dtype]  # read x and y, write out

    def make_inputs(self, shape: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        host = storage_dtype(dtype)  # the NumPy dtype the host holds ``dtype`` in
        return {"x": values(shape["n"], 1, seed).astype(host), "y": values(shape["n"], 2, seed).astype(host)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Shape) -> np.ndarray:
        return ALPHA * inputs["x"].astype(np.float64) + inputs["y"].astype(np.float64)

    def tolerance(self, dtype: str, shape: Shape) -> Tolerance:
        return Tolerance(atol=0.0, rtol=0.0, exact=True)  # exact by the choice of values (see above)


#: What ``HWBENCH_KERNELS=axpy=example_kernel.spec:KERNEL`` names.
KERNEL = Axpy()
