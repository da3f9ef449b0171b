"""Bindings of the OpenCL C STREAM (``opencl.cl`` beside this file): vectors, grid, arguments.

Writing operations: on a CPU device :data:`CPU_WORK_ITEMS` work-items each stream a run of
consecutive vectors of the device's lanes; on a GPU work-groups of 256 take consecutive
16-byte vectors and stride over the array by the grid. dot: OpenCL C 1.2 has no memory that
outlives a work-group within one launch (program-scope variables are OpenCL C 2.0), so its
one launch is one work-group of :data:`DOT_WG` work-items that halves its sums in local memory.
"""

from __future__ import annotations

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, ceil_div, i64, output
from hwbench.kernels.stream.spec import DOT, READS, op_name

SOURCE = "opencl.cl"
ENTRY = "stream"
CPU_WORK_ITEMS = 256
GPU_WG, GPU_GROUPS = 256, 8192
DOT_WG = 256


def vector_width(kind: str, lanes: int, dtype: str) -> int:
    """Elements per vector: the device's lanes on a CPU, 16 bytes on a GPU (at least 2)."""
    if kind == "cpu":
        return max(2, lanes)
    return 4 if dtype == "fp32" else 2


def launch(shape: Shape, dtype: str, kind: str, lanes: int) -> Launch:
    """``stream(inputs..., out, n, per)`` as the module docstring says."""
    op, n = int(shape["op"]), int(shape["n"])
    vw = vector_width(kind, lanes, dtype)
    vectors = n // vw
    blocked = int(kind == "cpu")
    defines = {"OP": op, "VW": vw, "BLOCKED": blocked, "WG": DOT_WG}
    if op == DOT:
        grid, local, per = (1,), (DOT_WG,), 0
    elif blocked:
        items = max(1, min(CPU_WORK_ITEMS, vectors))
        grid, local, per = (items,), (1,), ceil_div(vectors, items)
    else:
        grid, local, per = (max(1, min(GPU_GROUPS, ceil_div(vectors, GPU_WG))),), (GPU_WG,), 0
    config = {
        "op": op_name(op),
        "VW": vw,
        "distribution": "one work-group" if op == DOT else ("blocked" if blocked else "grid-stride"),
        "global_size": [grid[0] * local[0]],
        "work_group": local[0],
    }
    args = (*(buffer(name) for name in READS[op]), output(), i64(n), i64(per))
    return Launch(
        ENTRY, args, grid if n else (0,), () if op == DOT else (n,), local=local, defines=defines, config=config
    )
