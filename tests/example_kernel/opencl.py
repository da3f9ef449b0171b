"""Bindings of the OpenCL C axpy (``opencl.cl`` beside this file): its grid and its arguments.

The opencl backend builds :data:`SOURCE` for the case's dtype with the :class:`Launch`'s
``defines`` (none here), binds the arguments in order (buffers by input name, the output, typed
scalars) and enqueues ``grid`` work-groups of ``local`` work-items. ``kind`` (``cpu`` or ``gpu``)
and ``lanes`` (the device's vector lanes for the dtype) let a kernel pick its blocking; this one
takes neither into account.
"""

from __future__ import annotations

from example_kernel.spec import ALPHA
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, ceil_div, i64, output, real

SOURCE = "opencl.cl"
ENTRY = "axpy"
#: Work-items per work-group.
WORK_GROUP = 64


def launch(shape: Shape, dtype: str, kind: str, lanes: int) -> Launch:
    """``axpy(x, y, out, alpha, n)``: one work-item per element, in groups of :data:`WORK_GROUP`."""
    n = int(shape["n"])
    args = (buffer("x"), buffer("y"), output(), real(ALPHA, dtype), i64(n))
    groups = ceil_div(n, WORK_GROUP)
    config = {"work_group": WORK_GROUP, "global_size": [groups * WORK_GROUP]}
    return Launch(ENTRY, args, (groups,), (n,), local=(WORK_GROUP,), config=config)
