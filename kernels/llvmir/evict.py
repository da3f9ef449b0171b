"""Evict given host memory from every cache level: ``clflushopt`` (or ``clflush``) on each of
its 64-byte lines, then a fence, as a JIT-compiled loop.

A timed call on a CPU must start with its inputs and output out of the caches. Writing a buffer
twice the last-level cache does that, but costs as much as the cache is large (about 27 ms per
call for a 105 MiB L3); flushing the lines of the inputs and output costs what they are large,
and evicts them from the whole hierarchy (the instruction is defined that way, in every core's
caches). Scratch an implementation keeps to itself is left as its last call left it, for
hwbench's kernels and libraries alike. x86-64 only; elsewhere :func:`line_evictor` is None.
"""

from __future__ import annotations

import ctypes
import platform
from collections.abc import Iterable, Mapping, Sequence
from functools import cache, partial

import numpy as np

#: Bytes of a cache line (every x86-64 CPU); lines are flushed at this stride.
LINE_BYTES = 64

Regions = Sequence[tuple[int, int]]


def _build(instruction: str):  # -> llvmlite.ir.Module
    from llvmlite import ir

    # The IR helpers import llvmlite, which is optional: this module is imported without it.
    from hwbench.kernels.llvmir.irutil import I64, PTR, VOID, elem_ptr, for_range, i64, load

    module = ir.Module(name="evict")
    module.triple = ""
    flush = ir.Function(module, ir.FunctionType(VOID, [PTR]), name=f"llvm.x86.{instruction}")
    fence = ir.Function(module, ir.FunctionType(VOID, []), name="llvm.x86.sse2.mfence")
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64]), name="evict")
    regions, count = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with for_range(b, i64(0), count, name="region") as r:
        pair = b.mul(r, i64(2))
        start = load(b, elem_ptr(b, regions, I64, pair), I64)
        size = load(b, elem_ptr(b, regions, I64, b.add(pair, i64(1))), I64)
        first = b.and_(start, i64(-LINE_BYTES))
        end = b.add(start, size)
        lines = b.udiv(b.add(b.sub(end, first), i64(LINE_BYTES - 1)), i64(LINE_BYTES))
        with for_range(b, i64(0), lines, name="line") as line:
            address = b.add(first, b.mul(line, i64(LINE_BYTES)))
            b.call(flush, [b.inttoptr(address, PTR)])
    b.call(fence, [])
    b.ret_void()
    return module


class LineEvictor:
    """``evict(regions)``: flush every line of each ``(address, bytes)`` region from all cache
    levels, then fence."""

    def __init__(self, instruction: str, features: str) -> None:
        from hwbench.kernels.llvmir.jit import compile_module  # needs llvmlite (see _build)

        #: The instruction each line takes (``clflushopt`` where the CPU has it, else ``clflush``).
        self.instruction = instruction.rsplit(".", 1)[-1]
        self._compiled = compile_module(_build(instruction), features=features)  # keeps the code alive
        address = self._compiled.function_address("evict")
        self._entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(address)

    def __call__(self, regions: Regions) -> None:
        table = np.ascontiguousarray(np.asarray(regions, dtype=np.int64).reshape(-1, 2))
        self._entry(table.ctypes.data, len(table))


@cache
def line_evictor() -> LineEvictor | None:
    """The host's :class:`LineEvictor`; None where the host is not x86-64 or llvmlite is
    missing (built once per process)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        import llvmlite.binding as llvm

        from hwbench.kernels.llvmir.target import enabled_features  # needs llvmlite (see _build)
    except ImportError:
        return None
    try:
        features = llvm.get_host_cpu_features().flatten()
        instruction = "clflushopt" if "clflushopt" in enabled_features(features) else "sse2.clflush"
        return LineEvictor(instruction, features)
    except Exception:  # no evictor: the callers flush the whole cache instead
        return None


def region_of(value: object) -> tuple[int, int] | None:
    """``(address, bytes)`` spanning a NumPy array's elements or a CPU torch tensor's storage;
    None for anything else (and for empty ones)."""
    if isinstance(value, np.ndarray):
        if not value.size or not value.itemsize:
            return None
        extents = [s * (n - 1) for s, n in zip(value.strides, value.shape, strict=True)]
        low = value.ctypes.data + sum(e for e in extents if e < 0)
        high = value.ctypes.data + sum(e for e in extents if e > 0) + value.itemsize
        return low, high - low
    if type(value).__module__.startswith("torch") and hasattr(value, "untyped_storage"):
        if str(getattr(value, "device", "")) != "cpu":
            return None
        try:
            storage = value.untyped_storage()
            start, size = int(storage.data_ptr()), int(storage.nbytes())
        except Exception:  # a tensor without plain storage (sparse, mkldnn): not memory to flush
            return None
        return (start, size) if size else None
    return None


#: How deep :func:`held_regions` looks into containers and closures.
HELD_DEPTH = 3


def held_regions(values: object, depth: int = HELD_DEPTH) -> list[tuple[int, int]]:
    """The memory of every array and CPU tensor reachable from ``values``: through mappings,
    lists and tuples, the variables a function closes over and a ``functools.partial``'s
    arguments, ``depth`` levels down. Call it while the objects are alive: a freed array's
    memory may be unmapped, and flushing an unmapped line faults."""
    found: dict[tuple[int, int], None] = {}

    def walk(value: object, level: int) -> None:
        region = region_of(value)
        if region is not None:
            found[region] = None
            return
        if level == 0:
            return
        if isinstance(value, Mapping):
            children: Iterable[object] = value.values()
        elif isinstance(value, list | tuple):
            children = value
        elif isinstance(value, partial):
            children = [*value.args, *value.keywords.values(), value.func]
        else:
            children = [cell.cell_contents for cell in getattr(value, "__closure__", None) or () if _filled(cell)]
        for child in children:
            walk(child, level - 1)

    walk(values, depth + 1)
    return list(found)


def _filled(cell: object) -> bool:
    try:
        _ = cell.cell_contents  # type: ignore[attr-defined]
    except ValueError:  # a closure variable not yet assigned
        return False
    return True


def evict_method(evictor: LineEvictor, regions: Regions) -> str:
    """What a record says of a flush by ``evictor`` of ``regions`` (the case's inputs and output)."""
    total = sum(size for _, size in regions)
    return (
        f"{evictor.instruction} on every line of the case's inputs and output "
        f"({len(regions)} regions, {total / 2**20:.1f} MiB)"
    )
