"""The vendor calls a user would make instead of hwbench's GEMM, one per backend.

Each function follows the native convention of the backend it is declared for (see
``spec.py``): on ``cpu`` it takes the host inputs; on ``opencl`` the queue, the input
buffers and the output buffer; on ``cuda``/``rocm`` the device tensors and the output
tensor. It returns the call to time and what the record's ``config`` says of it. Each
imports its library when called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hwbench.core.dtypes import device_numpy, torch_dtype
from hwbench.core.host import blas_label, package_version
from hwbench.core.kernel import Shape
from hwbench.kernels.cupy_compat import cupy_stream

Call = tuple[Callable[[], Any], dict[str, Any]]


def numpy_matmul(inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str) -> Call:
    """cpu: ``np.matmul(A, B, out=C)`` on NumPy's BLAS."""
    a, b = inputs["A"], inputs["B"]
    out = np.empty((shape["M"], shape["N"]), dtype=a.dtype)
    return (lambda: np.matmul(a, b, out=out)), {"library": blas_label()}


def clblast(queue: Any, buffers: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> Call:
    """opencl: CLBlast's xGEMM through pyclblast, timed from a marker before it to its last
    kernel (it may run several)."""
    import pyclblast
    import pyopencl as cl
    import pyopencl.array  # noqa: F401  (cl.array)

    m, n, k = shape["M"], shape["N"], shape["K"]
    kind = device_numpy(dtype)
    views = [
        cl.array.Array(queue, dims, kind, data=buf)
        for dims, buf in (((m, k), buffers["A"]), ((k, n), buffers["B"]), ((m, n), out))
    ]

    def enqueue() -> tuple[Any, Any]:
        first = cl.enqueue_marker(queue)
        last = pyclblast.gemm(queue, m, n, k, *views, a_ld=k, b_ld=n, c_ld=n)
        return first, last

    config = {"library": f"CLBlast (pyclblast {package_version('pyclblast')})", "timed": "marker to last event"}
    return enqueue, config


def torch_blas() -> str:
    """Which BLAS ``torch.matmul`` calls on this GPU build, with the library torch prefers."""
    import torch

    name = "rocBLAS/hipBLASLt" if torch.version.hip else "cuBLAS"
    try:
        preferred = str(torch.backends.cuda.preferred_blas_library()).rsplit(".", 1)[-1]
    except Exception:  # older torch: no preference to report
        preferred = ""
    return f"{name} ({preferred})" if preferred else name


def torch_matmul(tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> Call:
    """cuda, rocm: ``torch.matmul(A, B, out=C)`` on cuBLAS / rocBLAS or hipBLASLt."""
    import torch

    a, b = tensors["A"], tensors["B"]
    return (lambda: torch.matmul(a, b, out=out)), {"library": torch_blas(), "tf32": dtype == "tf32"}


def cupy_matmul(tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> Call:
    """cuda: ``cupy.matmul`` on the same device memory, on torch's current stream."""
    import cupy
    import torch

    a, b, c = (cupy.from_dlpack(t) for t in (tensors["A"], tensors["B"], out))
    stream = cupy_stream(cupy, torch.cuda.current_stream())

    def call() -> Any:
        with stream:
            cupy.matmul(a, b, out=c)
        return out

    return call, {"library": f"cupy {cupy.__version__} (cuBLAS)"}


def _host_tensors(inputs: Mapping[str, np.ndarray], dtype: str) -> tuple[Any, Any]:
    """A and B as CPU tensors of ``dtype`` (bf16 rounded from their float32 storage: exact, the
    values are bf16's)."""
    import torch

    kind = torch_dtype(dtype)
    return tuple(torch.from_numpy(np.ascontiguousarray(inputs[n])).to(kind) for n in ("A", "B"))  # type: ignore[return-value]


def torch_library() -> str:
    """The CPU library torch's low-precision matmuls run on (oneDNN where torch was built with it)."""
    import torch

    onednn = torch.backends.mkldnn.is_available()
    return f"torch {torch.__version__} ({'oneDNN' if onednn else 'ATen'})"


def torch_int_mm(inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str) -> Call:
    """cpu: ``torch._int_mm(A, B)``, int8 x int8 summed in int32 (into a preallocated C)."""
    import torch

    a, b = _host_tensors(inputs, dtype)
    out = torch.empty((shape["M"], shape["N"]), dtype=torch.int32)
    return (lambda: torch._int_mm(a, b, out=out)), {"library": torch_library(), "call": "torch._int_mm"}


def torch_matmul_cpu(inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str) -> Call:
    """cpu: ``torch.matmul(A, B, out=C)`` on bf16 tensors (C in bf16, as a user's call returns it)."""
    import torch

    a, b = _host_tensors(inputs, dtype)
    out = torch.empty((shape["M"], shape["N"]), dtype=a.dtype)
    return (lambda: torch.matmul(a, b, out=out)), {"library": torch_library(), "call": "torch.matmul"}
