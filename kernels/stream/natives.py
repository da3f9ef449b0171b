"""The calls a user would make instead of hwbench's STREAM, one per backend.

Each follows its backend's native convention (see ``spec.py``) and returns the call to time
and what the record's ``config`` says of it; each imports its library when called. The
operation is the shape's ``op``: every native does all five.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hwbench.core.dtypes import device_numpy
from hwbench.core.host import package_version
from hwbench.core.kernel import Shape
from hwbench.kernels.stream.spec import ADD, COPY, DOT, MUL, SCALAR, TRIAD, op_name

Call = tuple[Callable[[], Any], dict[str, Any]]


def numpy_stream(inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str) -> Call:
    """cpu: ``np.copyto``, ``np.multiply(out=)``, ``np.add(out=)``, triad in two passes
    (``np.multiply(s, c, out=a)`` then ``np.add(a, b, out=a)``), ``np.dot``."""
    op, n = shape["op"], shape["n"]
    config = {"library": f"numpy {np.__version__}", "op": op_name(op), "passes": 2 if op == TRIAD else 1}
    if op == DOT:
        a, b = inputs["a"], inputs["b"]
        return (lambda: np.dot(a, b)), config
    ref = next(iter(inputs.values()))
    out = np.empty(n, dtype=ref.dtype)
    s = ref.dtype.type(SCALAR)
    if op == COPY:
        a = inputs["a"]

        def copy() -> np.ndarray:
            np.copyto(out, a)
            return out

        return copy, config
    if op == MUL:
        c = inputs["c"]
        return (lambda: np.multiply(s, c, out=out)), config
    if op == ADD:
        a, b = inputs["a"], inputs["b"]
        return (lambda: np.add(a, b, out=out)), config
    b, c = inputs["b"], inputs["c"]

    def triad() -> np.ndarray:
        np.multiply(s, c, out=out)
        return np.add(out, b, out=out)

    return triad, config


def _torch_ops(tensors: Mapping[str, Any], out: Any, op: int) -> Callable[[], Any]:
    """The torch call of ``op`` writing ``out``: ``copy_``, ``mul(out=)``, ``add(out=)``,
    ``add(alpha=s, out=)`` (triad in one pass), ``dot(out=)``."""
    import torch

    t = tensors
    if op == COPY:
        return lambda: out.copy_(t["a"])
    if op == MUL:
        return lambda: torch.mul(t["c"], SCALAR, out=out)
    if op == ADD:
        return lambda: torch.add(t["a"], t["b"], out=out)
    if op == TRIAD:
        return lambda: torch.add(t["b"], t["c"], alpha=SCALAR, out=out)
    return lambda: torch.dot(t["a"], t["b"], out=out)


def torch_host(inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str) -> Call:
    """cpu: the torch calls on the host arrays (shared, not copied), on torch's threads."""
    import torch

    tensors = {name: torch.from_numpy(array) for name, array in inputs.items()}
    kind = next(iter(tensors.values())).dtype
    out = torch.empty(() if shape["op"] == DOT else (shape["n"],), dtype=kind)
    config = {
        "library": f"torch {torch.__version__}",
        "op": op_name(shape["op"]),
        "threads": torch.get_num_threads(),
    }
    return _torch_ops(tensors, out, shape["op"]), config


def torch_device(tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> Call:
    """cuda, rocm: the torch calls on the device tensors."""
    import torch

    return _torch_ops(tensors, out, shape["op"]), {"library": f"torch {torch.__version__}", "op": op_name(shape["op"])}


def opencl_stream(queue: Any, buffers: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> Call:
    """opencl: ``clEnqueueCopyBuffer`` for copy; mul, add and triad as that copy of the array
    the result starts from and CLBlast's xSCAL or xAXPY on it (two passes, as a BLAS user
    writes them); CLBlast's xDOT for dot. Timed from the first command to the last."""
    import pyclblast
    import pyopencl as cl
    import pyopencl.array  # noqa: F401  (cl.array)

    op, n = shape["op"], shape["n"]
    kind = device_numpy(dtype)
    view = {name: cl.array.Array(queue, (n,), kind, data=buf) for name, buf in buffers.items()}
    # pyclblast takes dot's result as a 1 x 1 matrix
    result = cl.array.Array(queue, (1, 1) if op == DOT else (n,), kind, data=out)
    config = {"library": f"clEnqueueCopyBuffer, CLBlast (pyclblast {package_version('pyclblast')})"}
    config["op"] = op_name(op)

    def enqueue() -> tuple[Any, Any]:
        if op == DOT:
            first = cl.enqueue_marker(queue)
            return first, pyclblast.dot(queue, n, view["a"], view["b"], result)
        source = {COPY: "a", MUL: "c", ADD: "a", TRIAD: "b"}[op]
        first = cl.enqueue_copy(queue, out, buffers[source])
        if op == COPY:
            return first, first
        if op == MUL:
            return first, pyclblast.scal(queue, n, result, alpha=SCALAR)
        x = view["b"] if op == ADD else view["c"]
        return first, pyclblast.axpy(queue, n, x, result, alpha=1.0 if op == ADD else SCALAR)

    return enqueue, config
