"""How a kernel's bindings tell a backend to launch a compiled program.

A binding (``kernels/<name>/llvm.py``, ``opencl.py``) turns a shape, a dtype and what it
may know of the target into a :class:`Launch`: the entry point, the arguments in order
(buffers named by input, the output, and typed scalars), the grid of programs
(work-groups, GPU blocks, CPU tasks) and the work-items of each, the output's shape,
compile-time definitions and the tiling to record. Backends move buffers, compile and
launch what it says; they never read a shape's dimensions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The name a binding gives the output buffer in :attr:`Arg.buffer`.
OUTPUT = "out"
#: Scalar C types a binding may pass.
SCALAR_TYPES = ("i32", "i64", "f32", "f64")


@dataclass(frozen=True)
class Arg:
    """One kernel argument: a buffer (an input's name, or :data:`OUTPUT`) or a typed scalar."""

    buffer: str | None = None
    value: int | float = 0
    ctype: str = ""

    def __post_init__(self) -> None:
        if (self.buffer is None) == (not self.ctype):
            raise ValueError("an argument is either a buffer or a scalar with a C type")
        if self.ctype and self.ctype not in SCALAR_TYPES:
            raise ValueError(f"scalar type {self.ctype!r} is not one of {', '.join(SCALAR_TYPES)}")


def buffer(name: str) -> Arg:
    """The input buffer ``name`` (or the output, :data:`OUTPUT`)."""
    return Arg(buffer=name)


def output() -> Arg:
    """The output buffer."""
    return Arg(buffer=OUTPUT)


def i32(value: int) -> Arg:
    """A 32-bit integer scalar."""
    return Arg(value=int(value), ctype="i32")


def i64(value: int) -> Arg:
    """A 64-bit integer scalar."""
    return Arg(value=int(value), ctype="i64")


def real(value: float, dtype: str) -> Arg:
    """A floating-point scalar: double for fp64, float for every narrower dtype."""
    return Arg(value=float(value), ctype="f64" if dtype == "fp64" else "f32")


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for non-negative integers."""
    return -(-a // b)


@dataclass(frozen=True)
class Launch:
    """One launch of a compiled program for one case.

    ``grid`` counts programs along each axis; a grid without programs means the output is
    all zeros (e.g. GEMM with K = 0), which backends produce without launching anything.
    ``local`` is the work-items of one program (1 for the CPU's SIMD programs).
    """

    entry: str
    args: tuple[Arg, ...]
    grid: tuple[int, ...]
    output: tuple[int, ...]
    local: tuple[int, ...] = (1,)
    #: Compile-time definitions (OpenCL C ``-DNAME=VALUE``).
    defines: Mapping[str, int] = field(default_factory=dict)
    #: What the record's ``config`` says of this launch (tiles, blocking).
    config: Mapping[str, Any] = field(default_factory=dict)
    #: At most this many host workers (CPU): 1 where waking more costs more than it saves.
    workers: int | None = None
    #: Whether the CPU kernel takes its inputs in the dtype's own storage (bf16: its 16-bit
    #: patterns, as a library is handed bf16 tensors) rather than the host's (float32).
    device_storage: bool = False

    @property
    def programs(self) -> int:
        """Programs in the whole grid."""
        return math.prod(self.grid)

    @property
    def global_size(self) -> tuple[int, ...]:
        """Work-items along each axis (OpenCL's global work size)."""
        local = tuple(self.local) + (1,) * (len(self.grid) - len(self.local))
        return tuple(g * w for g, w in zip(self.grid, local, strict=True))

    def buffers(self) -> list[str]:
        """Names of the buffers the arguments use, in order."""
        return [a.buffer for a in self.args if a.buffer is not None]
