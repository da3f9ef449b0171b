"""The one blocked GEMM driver of the host CPU's llvmlite kernels (BLIS/Goto structure).

Every CPU GEMM kernel (fp32/fp64 in :mod:`.llvm`, int8 in :mod:`.llvm_lowp`, bf16 in
:mod:`.llvm_bf16`, int8 and bf16 on AMX tiles in :mod:`.llvm_amx`) supplies only its :class:`Tile`
(the register or tile block, its packed layout and workspace caps), its microkernel and its two
packers (:class:`Parts`). This module owns the rest: one program computes an ``mc x nc`` block of
C; for each ``kc`` slice of K it packs its B block and its A block, then calls the microkernel on
every pair of micro-panels, in the order the tile reuses them, with the number of valid rows and
columns (edge tiles); the cache blocking (:func:`blocking`, derived from the target's description
for every dtype), the launch with its record, the bind and the tuning space.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import storage_dtype
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.llvmir import irutil as iu
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel, default_threads
from hwbench.kernels.llvmir.cpu_launch import prepare as cpu_prepare
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget, host_target

KERNEL = "gemm"
I8 = ir.IntType(8)
BLOCK_KEYS = ("mc", "nc", "kc")
TILE_KEYS = ("MR", "NR_VECTORS")
#: Shares of the caches the blocking gives: L1d to the micro-panel the microkernel reuses (the
#: other one streams past it), L2 to the block re-read for every micro-panel of the other operand.
L1_SHARE, L2_SHARE = 0.5, 0.75
#: A problem under this many flops runs on one worker (waking more costs more than it saves).
ONE_WORKER_FLOPS = 2e6


@dataclass(frozen=True)
class Tile:
    """One kernel's block of C per microkernel call and its packed layout, on one target."""

    dtype: str
    #: The path the target's features choose (``fma``, ``vnni``, ``bf16dp``, ``widening``, ``amx``).
    path: str
    #: How the path multiplies (the record's ``scheme``).
    scheme: str
    mr: int
    nr: int
    #: Vectors of C per row (0: not a vector register tile, e.g. AMX's tiles).
    nr_vectors: int
    #: k values per packed unit (one element of a vector panel, one row of an AMX tile).
    k_unit: int
    #: Bytes of one packed unit per row of A (column of B).
    unit_bytes: int
    #: Upper bounds the workspace holds (``kc`` in k values, a multiple of ``k_unit``).
    max_block: Mapping[str, int]
    #: Whether the microkernel keeps B's micro-panel and streams A's (AMX), not the other way round.
    b_resident: bool = False
    #: Whether the resident micro-panel is read from L1 (not where tiles load straight from L2).
    l1_resident: bool = True
    #: The record's other fields (``instruction``, ``accumulate``, ...).
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: What the tile was derived from (the record's ``derived_from``, beside the blocking's).
    derived: Mapping[str, Any] = field(default_factory=dict)
    #: Whether the inputs travel as their device storage (bf16 as 16-bit patterns).
    device_storage: bool = False

    @property
    def bytes_per_k(self) -> float:
        """Packed bytes per k value and row (or column)."""
        return self.unit_bytes / self.k_unit

    @property
    def defines(self) -> dict[str, int]:
        """The compile-time register tile (none for a fixed tile)."""
        return {"MR": self.mr, "NR_VECTORS": self.nr_vectors} if self.nr_vectors else {}


#: ``micro(module)``: the microkernel ``micro(pa, pb, units, [corr,] c, ldc, mvalid, nvalid, first)``.
Micro = Callable[[ir.Module], ir.Function]
#: ``pack(b, src, ld, dst, kc, rows_or_cols, units, corr)``: one block packed (``corr``: B's only).
Pack = Callable[..., None]


@dataclass(frozen=True)
class Parts:
    """What one kernel supplies: its tile, microkernel and packers, and its arrays' element types."""

    name: str
    tile: Tile
    source: ir.Type
    output: ir.Type
    micro: Micro
    pack_a: Pack
    pack_b: Pack
    #: Whether B's packing fills a per-column i32 correction the microkernel starts from.
    correction: bool = False


def _round_down(value: float, step: int) -> int:
    return max(step, int(value) // step * step)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _even(total: int, most: int, step: int) -> int:
    """The size of the fewest equal blocks of at most ``most`` (a multiple of ``step``) covering
    ``total``, rounded up to ``step``: no last block much shorter than the rest."""
    blocks = -(-max(total, 1) // most)
    return _round_up(-(-max(total, 1) // blocks), step)


def blocking(tile: Tile, target: CPUTarget, shape: Shape, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc for every CPU GEMM kernel from the target's caches: BLIS's analytical model (Low et
    al. 2016) for the loop order the tile reuses its micro-panels in.

    kc: the resident micro-panel (A's ``MR x kc``, or B's ``kc x NR``) within ``L1_SHARE`` of L1d,
    the other streaming past it (where tiles load straight from L2, AMX, the workspace's kc): the
    deepest kc passes over C the fewest times, which on a 512 KiB L2 (Zen 2 and 3) beat keeping
    the re-read block as wide as deep by about 8 % at 1024^3 and 2048^3; the re-read block (B's
    ``kc x nc``, or A's ``mc x kc``) within ``L2_SHARE`` of L2, packed once
    per kc slice by each program; the other side as long as it can be, so that the re-read block's
    packing is amortised over the most work (the program packs and multiplies it a
    workspace-long piece at a time), split only so that every worker gets two programs. Each size
    is evened over the blocks it makes."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    caches, per_k, lim = target.description.caches, tile.bytes_per_k, tile.max_block
    resident, reread = (tile.nr, ("mc", tile.mr, m)) if tile.b_resident else (tile.mr, ("nc", tile.nr, n))
    other = ("nc", tile.nr, n) if tile.b_resident else ("mc", tile.mr, m)
    kc: float = lim["kc"]
    if tile.l1_resident:
        kc = min(kc, L1_SHARE * caches.l1d / (resident * per_k))
    kc = _even(k, _round_down(kc, tile.k_unit), tile.k_unit)
    key, step, total = reread
    side = _round_down(min(L2_SHARE * caches.l2 / (kc * per_k), lim[key]), step)
    blk = {"kc": kc, key: min(_even(total, side, step), lim[key])}
    blocks = -(-max(total, 1) // blk[key])
    key, step, total = other
    parts = -(-2 * workers // blocks) if total >= 2 * step * workers else 1
    blk[key] = _round_up(-(-max(total, 1) // parts), step)
    return blk


def describe_blocking(tile: Tile, workers: int) -> str:
    """How :func:`blocking` chose (the record's ``derived_from.blocking``)."""
    resident, reread = ("B's kc x NR", "A's mc x kc") if tile.b_resident else ("A's MR x kc", "B's kc x nc")
    l1 = f"{resident} within {L1_SHARE} of L1d" if tile.l1_resident else "the workspace's (tiles load from L2)"
    return f"kc: {l1}; {reread} within {L2_SHARE} of L2; the other side split over {workers} workers"


def check_blocking(tile: Tile, blk: Mapping[str, int]) -> None:
    """The workspace is sized for ``max_block`` of the re-read block and kc (the other side is
    packed a workspace-long piece at a time, so any length goes); kc must hold whole units, nc
    whole panels."""
    longest = "nc" if tile.b_resident else "mc"
    for key in BLOCK_KEYS:
        most = None if key == longest else tile.max_block[key]
        if int(blk[key]) < 1 or (most is not None and int(blk[key]) > most):
            bound = f"[1, {most}]" if most is not None else "[1, ...)"
            raise ValueError(f"blocking {key}={blk[key]} outside {bound} for {tile.dtype}")
    if blk["kc"] % tile.k_unit or (tile.nr_vectors and blk["nc"] % tile.nr):
        step = f" and nc of {tile.nr}" if tile.nr_vectors else ""
        raise ValueError(f"{tile.dtype} blocking needs kc a multiple of {tile.k_unit}{step}, got {dict(blk)}")


def emit_panel_loops(
    b: ir.IRBuilder,
    parts: Parts,
    micro: ir.Function,
    packed: tuple[ir.Value, ir.Value, ir.Value | None],
    c_blk: ir.Value,
    sizes: tuple[ir.Value, ir.Value, ir.Value, ir.Value],
    first: ir.Value,
) -> None:
    """``micro`` over every pair of micro-panels of the packed block ``packed`` (A, B, the
    correction): A's outer and B's inner, or the other way round where B's is the resident one;
    ``sizes`` is (units, mc, nc, ldc)."""
    tile = parts.tile
    pack_a, pack_b, corr = packed
    units, mc, nc, ldc = sizes
    panel = b.mul(units, iu.i64(tile.unit_bytes))
    loops = [("ir", mc, tile.mr), ("jr", nc, tile.nr)]
    outer, inner = loops[::-1] if tile.b_resident else loops
    with iu.for_range(b, iu.i64(0), iu.ceil_div(b, outer[1], outer[2]), name=outer[0]) as o:
        with iu.for_range(b, iu.i64(0), iu.ceil_div(b, inner[1], inner[2]), name=inner[0]) as i:
            rows, cols = (i, o) if tile.b_resident else (o, i)
            row, col = b.mul(rows, iu.i64(tile.mr)), b.mul(cols, iu.i64(tile.nr))
            args = [iu.elem_ptr(b, pack_a, I8, b.mul(row, panel)), iu.elem_ptr(b, pack_b, I8, b.mul(col, panel))]
            args.append(units)
            if corr is not None:
                args.append(iu.elem_ptr(b, corr, iu.I32, col))
            args += [iu.elem_ptr(b, c_blk, parts.output, b.add(b.mul(row, ldc), col)), ldc]
            args += [iu.imin(b, iu.i64(tile.mr), b.sub(mc, row)), iu.imin(b, iu.i64(tile.nr), b.sub(nc, col)), first]
            b.call(micro, args)


def build(target: LLVMTarget, parts: Parts) -> ir.Module:
    """The kernel module: entry ``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over
    ``(ceil(N/nc), ceil(M/mc))`` programs; the blocking within the tile's ``max_block``."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no {parts.tile.dtype} GEMM lowering for {type(target).__name__}")
    tile, src = parts.tile, parts.source
    lim = tile.max_block
    module = target.new_module(parts.name)
    micro = parts.micro(module)
    units_max = -(-lim["kc"] // tile.k_unit)

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        a, bm, c, m, n, k, lda, ldb, ldc, mc_max, nc_max, kc_max = args
        b = ctx.builder
        pack_a = ctx.local_array(I8, _round_up(lim["mc"], tile.mr) * units_max * tile.unit_bytes)
        pack_b = ctx.local_array(I8, _round_up(lim["nc"], tile.nr) * units_max * tile.unit_bytes)
        corr = ctx.local_array(iu.I32, _round_up(lim["nc"], tile.nr)) if parts.correction else None
        i0 = b.mul(ctx.program_id(1), mc_max)
        j0 = b.mul(ctx.program_id(0), nc_max)
        mc = iu.imin(b, mc_max, b.sub(m, i0))
        nc = iu.imin(b, nc_max, b.sub(n, j0))
        c_blk = iu.elem_ptr(b, c, parts.output, b.add(b.mul(i0, ldc), j0))
        # The re-read block is packed once per kc slice; the other side's block, which may be
        # longer than the workspace, is packed and multiplied a workspace-long piece at a time.
        span, piece = (nc, lim["nc"]) if tile.b_resident else (mc, lim["mc"])
        with iu.for_range(b, iu.i64(0), k, iu.imin(b, kc_max, iu.i64(lim["kc"])), name="pc") as p0:
            kc = iu.imin(b, kc_max, b.sub(k, p0))
            units = iu.ceil_div(b, kc, tile.k_unit)
            first = b.icmp_signed("==", p0, iu.i64(0))

            def pack_b_at(col: ir.Value, cols: ir.Value) -> None:
                b_src = iu.elem_ptr(b, bm, src, b.add(b.mul(p0, ldb), b.add(j0, col)))
                parts.pack_b(b, b_src, ldb, pack_b, kc, cols, units, corr)

            def pack_a_at(row: ir.Value, rows: ir.Value) -> None:
                a_src = iu.elem_ptr(b, a, src, b.add(b.mul(b.add(i0, row), lda), p0))
                parts.pack_a(b, a_src, lda, pack_a, kc, rows, units, None)

            if tile.b_resident:
                pack_a_at(iu.i64(0), mc)
            else:
                pack_b_at(iu.i64(0), nc)
            with iu.for_range(b, iu.i64(0), span, iu.i64(piece), name="piece") as at:
                length = iu.imin(b, iu.i64(piece), b.sub(span, at))
                if tile.b_resident:
                    pack_b_at(at, length)
                    c_at, sizes = iu.elem_ptr(b, c_blk, parts.output, at), (units, mc, length, ldc)
                else:
                    pack_a_at(at, length)
                    c_at, sizes = iu.elem_ptr(b, c_blk, parts.output, b.mul(at, ldc)), (units, length, nc, ldc)
                emit_panel_loops(b, parts, micro, (pack_a, pack_b, corr), c_at, sizes, first)

    target.define_kernel(module, KERNEL, [iu.PTR] * 3 + [iu.I64] * 9, body)
    return module


def launch(tile: Tile, shape: Shape, target: LLVMTarget, workers: int = 1, *given: Mapping[str, Any] | None) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))``
    programs; the first of ``given`` (a test's blocks, a tuned configuration) that holds mc/nc/kc
    overrides :func:`blocking`; the record says the path, its tile and blocking and what they were
    derived from."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no {tile.dtype} GEMM lowering for {type(target).__name__}")
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    workers = 1 if 2.0 * m * n * k < ONE_WORKER_FLOPS else workers
    chosen = next((g for g in given if g and all(key in g for key in BLOCK_KEYS)), None)
    blk = {key: int(chosen[key]) for key in BLOCK_KEYS} if chosen else blocking(tile, target, shape, workers)
    check_blocking(tile, blk)
    grid = (-(-n // blk["nc"]), -(-m // blk["mc"])) if m and n and k else (0, 0)
    args = (buffer("A"), buffer("B"), output()) + tuple(
        i64_arg(v) for v in (m, n, k, k, n, n, blk["mc"], blk["nc"], blk["kc"])
    )
    record: dict[str, Any] = {"kernel": KERNEL, "dtype": tile.dtype, "target": target.name, "path": tile.path}
    record.update(scheme=tile.scheme, MR=tile.mr, NR=tile.nr)
    if tile.nr_vectors:  # a vector register tile: its vectors and k values per packed element
        record.update(NR_VECTORS=tile.nr_vectors, VW=tile.nr // tile.nr_vectors, k_group=tile.k_unit)
    record.update(**tile.extra, **blk)
    how = "given" if chosen else describe_blocking(tile, workers)
    record["derived_from"] = dict(target.description.as_config(), **tile.derived, blocking=how)
    return Launch(
        KERNEL,
        args,
        grid,
        (m, n),
        defines=tile.defines,
        config=record,
        workers=workers,
        device_storage=tile.device_storage,
    )


def prepare(
    tile_for: Callable[[CPUTarget], Tile],
    build_fn: Callable[..., ir.Module],
    inputs: dict[str, np.ndarray],
    shape: Mapping[str, int],
    threads: int | None = None,
    blocks: Mapping[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind ``C = A @ B`` with the tile ``tile_for`` gives the host CPU, or ``target`` (another
    feature set or ISA level, for tests); ``blocks`` overrides the cache blocking."""
    target = target or host_target()
    tile = tile_for(target)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    a, bm = inputs["A"], inputs["B"]
    held = storage_dtype(tile.dtype)
    if a.shape != (m, k) or bm.shape != (k, n) or a.dtype != held or bm.dtype != held:
        raise ValueError(f"expected A ({m},{k}) and B ({k},{n}) of {held.name} holding {tile.dtype} values")
    threads = threads or default_threads()
    plan = launch(tile, dict(shape), target, threads, blocks)
    return cpu_prepare(build_fn, inputs, tile.dtype, plan, threads, target)


def tuning_space(
    tile: Tile, target: CPUTarget, shape: Shape, other: Callable[[int, int], Tile] | None = None
) -> list[dict[str, int]]:
    """Candidates for ``shape``, the derived one first: ``tile`` with its blocking, kc and the
    re-read side halved and doubled; then, where ``other(MR, NR_VECTORS)`` makes the kernel with
    another register tile, every tile the registers hold with its own blocking."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    workers = 1 if 2.0 * m * n * k < ONE_WORKER_FLOPS else default_threads()
    base = blocking(tile, target, shape, workers)
    key, step, total = ("mc", tile.mr, m) if tile.b_resident else ("nc", tile.nr, n)
    lim = tile.max_block
    found: list[dict[str, int]] = []

    def add(config: dict[str, int]) -> None:
        if config not in found:
            found.append(config)

    add({**tile.defines, **base})
    for kc_scale, side_scale in ((0.5, 1), (2, 1), (1, 0.5), (1, 2), (0.5, 2), (2, 0.5)):
        kc = min(_round_down(lim["kc"], tile.k_unit), _round_up(max(k, 1), tile.k_unit))
        kc = min(kc, _round_down(base["kc"] * kc_scale, tile.k_unit))
        side = min(
            _round_down(lim[key], step), _round_up(max(total, 1), step), _round_down(base[key] * side_scale, step)
        )
        add({**tile.defines, **base, "kc": kc, key: side})
    if other is None:
        return found
    registers = target.description.vector_registers
    for nv in range(1, 5):
        most = (registers - 2 - nv) // nv
        for mr in (most, most - 2):
            if mr >= 2 and (mr, nv) != (tile.mr, tile.nr_vectors):
                again = other(mr, nv)
                add({**again.defines, **blocking(again, target, shape, workers)})
    return found
