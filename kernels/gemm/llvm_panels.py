"""What the int8 and bf16 packed-panel CPU kernels (:mod:`.llvm_lowp`, :mod:`.llvm_bf16`) share:
the micro-panel loops over a packed block, the cache blocking, the launch and the bind; and what
they share with the fp32/fp64 kernel (:mod:`.llvm`), the microkernel's masked store of C.

Both lay a packed A panel out as one i32 per row and k group, a packed B panel as one i32 per
column and k group, and run an ``MR x NR`` microkernel over every pair of panels; they differ in
the group (4 int8 or 2 bf16 per i32), the dot product and the accumulator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import storage_dtype
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel, default_threads
from hwbench.kernels.llvmir.cpu_launch import prepare as cpu_prepare
from hwbench.kernels.llvmir.irutil import (
    I32,
    ceil_div,
    elem_ptr,
    for_range,
    i64,
    imin,
    lane_mask,
    masked_load,
    masked_store,
)
from hwbench.kernels.llvmir.target import CPUTarget, LLVMTarget, host_target


@dataclass(frozen=True)
class Panels:
    """One dtype's packed-panel geometry."""

    dtype: str
    mr: int
    nr_vectors: int
    #: k values per i32 lane of a packed panel.
    group: int
    #: Upper bounds baked into the workspace (``kc`` in k values, a multiple of ``group``).
    max_block: Mapping[str, int]
    #: The default slice of K (k values).
    kc: int
    #: The path the target's features choose (``vnni``, ``bf16dp``, ``widening``).
    path: Callable[[CPUTarget], str]
    #: The dtype the target's vector width is counted in (one i32 or fp32 lane per column).
    lane_dtype: str = "int32"

    def nr(self, target: CPUTarget) -> int:
        """Columns of C one microkernel computes on ``target``."""
        return self.nr_vectors * target.vector_width(self.lane_dtype)


def emit_micro_loops(
    b: ir.IRBuilder,
    panels: Panels,
    nr: int,
    micro: ir.Function,
    packed: tuple[ir.Value, ir.Value],
    c_blk: ir.Value,
    c_elem: ir.Type,
    sizes: tuple[ir.Value, ir.Value, ir.Value, ir.Value],
    first: ir.Value,
    corr: ir.Value | None = None,
) -> None:
    """``micro(pa, pb, kg, [corr,] c, ldc, mvalid, nvalid, first)`` over every pair of micro-panels
    of the packed block ``packed`` (A, B); ``sizes`` is (kg, mc, nc, ldc)."""
    pack_a, pack_b = packed
    kg, mc, nc, ldc = sizes
    with for_range(b, i64(0), ceil_div(b, mc, panels.mr), name="ir") as ir_:
        row = b.mul(ir_, i64(panels.mr))
        pa = elem_ptr(b, pack_a, I32, b.mul(row, kg))
        mvalid = imin(b, i64(panels.mr), b.sub(mc, row))
        with for_range(b, i64(0), ceil_div(b, nc, nr), name="jr") as jr:
            col = b.mul(jr, i64(nr))
            args = [pa, elem_ptr(b, pack_b, I32, b.mul(col, kg)), kg]
            if corr is not None:
                args.append(elem_ptr(b, corr, I32, col))
            args += [elem_ptr(b, c_blk, c_elem, b.add(b.mul(row, ldc), col)), ldc, mvalid]
            b.call(micro, args + [imin(b, i64(nr), b.sub(nc, col)), first])


def store_micro_tile(
    b: ir.IRBuilder,
    acc: list[ir.Value],
    c: ir.Value,
    ldc: ir.Value,
    valid: tuple[ir.Value, ir.Value],
    first: ir.Value,
    mr: int,
    vw: int,
) -> None:
    """The ``mr x len(acc)/mr`` vectors of a microkernel's accumulators stored into C (added to it
    unless ``first``), rows below ``valid[0]`` and columns below ``valid[1]`` only."""
    mvalid, nvalid = valid
    vty = acc[0].type
    per_row = len(acc) // mr
    masks = [lane_mask(b, vw, v * vw, nvalid) for v in range(per_row)]
    integer = isinstance(vty.element, ir.IntType)
    for r in range(mr):
        with b.if_then(b.icmp_signed(">", mvalid, i64(r)), likely=True):
            crow = b.mul(i64(r), ldc)
            for v in range(per_row):
                p = elem_ptr(b, c, vty.element, b.add(crow, i64(v * vw)))
                old = masked_load(b, p, vty, masks[v])
                total = b.add(acc[r * per_row + v], old) if integer else b.fadd(acc[r * per_row + v], old)
                masked_store(b, b.select(first, acc[r * per_row + v], total), p, masks[v])


def blocking(panels: Panels, shape: Shape, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc: the MR x kc A micro-panel in L1, the nc x kc B block in L2/L3, mc evened out so
    that every worker gets whole, equal programs."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    nr, mr, group = panels.nr(target), panels.mr, panels.group
    kc = min(panels.kc, -(-k // group) * group)
    nc = min(panels.max_block["nc"] // nr * nr, -(-n // nr) * nr)
    blocks_n = -(-n // nc)
    blocks_m = max(-(-m // (20 * mr)), -(-2 * workers // blocks_n) if m >= 2 * mr * workers else 1)
    rows = -(-m // blocks_m)
    return {"mc": min(panels.max_block["mc"], -(-rows // mr) * mr), "nc": nc, "kc": max(kc, group)}


def check_blocking(panels: Panels, blk: Mapping[str, int], nr: int) -> None:
    """The workspace is sized for ``max_block``; kc must hold whole groups, nc whole panels."""
    for key in ("mc", "nc", "kc"):
        if not 1 <= int(blk[key]) <= panels.max_block[key]:
            raise ValueError(f"blocking {key}={blk[key]} outside [1, {panels.max_block[key]}] for {panels.dtype}")
    if blk["kc"] % panels.group or blk["nc"] % nr:
        raise ValueError(
            f"{panels.dtype} blocking needs kc a multiple of {panels.group} and nc of {nr}, got {dict(blk)}"
        )


def launch(
    panels: Panels,
    shape: Shape,
    target: LLVMTarget,
    workers: int = 1,
    blocks: Mapping[str, int] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))``
    programs; the record's config says which path the code takes (and ``extra``)."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no {panels.dtype} GEMM lowering for {type(target).__name__}")
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    workers = 1 if 2.0 * m * n * k < 2e6 else workers
    blk = dict(blocks) if blocks else blocking(panels, shape, target, workers)
    nr = panels.nr(target)
    check_blocking(panels, blk, nr)
    grid = (-(-n // blk["nc"]), -(-m // blk["mc"])) if m and n and k else (0, 0)
    args = (buffer("A"), buffer("B"), output()) + tuple(
        i64_arg(v) for v in (m, n, k, k, n, n, blk["mc"], blk["nc"], blk["kc"])
    )
    vw = target.vector_width(panels.lane_dtype)
    record: dict[str, Any] = {
        "kernel": "gemm",
        "dtype": panels.dtype,
        "target": target.name,
        "path": panels.path(target),
    }
    record.update({"MR": panels.mr, "NR": nr, "VW": vw, "k_group": panels.group}, **(extra or {}), **blk)
    return Launch("gemm", args, grid, (m, n), config=record, workers=workers)


def prepare(
    panels: Panels,
    build: Callable[[LLVMTarget, str], ir.Module],
    inputs: dict[str, np.ndarray],
    shape: Mapping[str, int],
    threads: int | None = None,
    blocks: Mapping[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind ``C = A @ B`` of ``panels.dtype`` for the host CPU, or ``target`` (another feature set,
    for tests); ``blocks`` overrides the cache blocking."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    a, bm = inputs["A"], inputs["B"]
    held = storage_dtype(panels.dtype)
    if a.shape != (m, k) or bm.shape != (k, n) or a.dtype != held or bm.dtype != held:
        raise ValueError(f"expected A ({m},{k}) and B ({k},{n}) of {held.name} holding {panels.dtype} values")
    target = target or host_target()
    threads = threads or default_threads()
    plan = launch(panels, dict(shape), target, threads, blocks)
    return cpu_prepare(build, inputs, panels.dtype, plan, threads, target)
