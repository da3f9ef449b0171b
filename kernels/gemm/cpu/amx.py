"""int8 and bf16 GEMM ``C = A @ B`` on the host CPU's AMX tiles, in llvmlite IR.

Intel AMX (Sapphire Rapids and later) multiplies 16 x 64-byte tiles held in eight tile
registers: ``tdpbssd`` adds a 16 x 64 int8 tile times a 64 x 16 one (signed by signed, so no
offset correction) into a 16 x 16 int32 tile; ``tdpbf16ps`` does the same for bf16 pairs into
fp32. The loops, blocking, launch and bind are :mod:`.llvm_driver`'s; this module supplies the
microkernel, a 32 x 32 block of C in four tiles fed by two A tiles and two B tiles (all eight
registers), and the packing: per ``kc`` slice a program packs its A block row-major with K padded
to whole tiles, and its B block into 32-column panels laid out as the tile instructions read them (per
group of 4 int8 or 2 bf16 k values, each column's group side by side), zero past K, M and N.
Interior blocks of C are loaded and stored as tiles; edge blocks go through a 32 x 32 scratch
tile and masked vector stores. The A tiles of the next step along K are prefetched into L1.

LLVM's ``*.internal`` AMX intrinsics take the tile shapes as operands and insert the tile
configuration (``ldtilecfg``) themselves. Linux hands a process the AMX state only on request
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``): :func:`usable` asks once and the
path is taken only when the kernel granted it.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch
from hwbench.kernels.gemm.cpu import driver
from hwbench.kernels.gemm.cpu.driver import Tile
from hwbench.kernels.gemm.cpu.lowp import interleave
from hwbench.kernels.llvmir.irutil import (
    F32,
    I1,
    I32,
    I64,
    PTR,
    VOID,
    ceil_div,
    elem_ptr,
    for_range,
    i64,
    imin,
    intrinsic,
    lane_mask,
    load_vec,
    loop_carry,
    masked_load,
    masked_store,
    store_vec,
)
from hwbench.kernels.llvmir.target import CPUTarget, LLVMTarget, enabled_features, host_target

KERNEL = "gemm"
DTYPES = ("int8", "bf16")
I8, I16 = ir.IntType(8), ir.IntType(16)
ROWS, ROW_BYTES = 16, 64  # one tile: 16 rows of 64 bytes
BLOCK = 2 * ROWS  # a 32 x 32 block of C: 2 x 2 tiles
TILE_BYTES = ROWS * ROW_BYTES
STEP_BYTES = 2 * TILE_BYTES  # a panel's two tiles for one step along K
#: Steps along K ahead that the A tiles are prefetched into L1 (A streams from L2 while a B panel
#: stays in L1; the hardware prefetchers leave tile loads waiting, measured 15-35 % slower without).
PREFETCH_STEPS = 1
#: Upper bounds baked into the workspace, and the default blocking: rows of A / columns of B per
#: program, K bytes per slice.
MAX_BLOCK = {"mc": 512, "nc": 1024, "kc_bytes": 2048}
#: Linux's arch_prctl: its syscall number on x86-64, the request and the tile-data feature.
SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 158, 0x1023, 18


@dataclass(frozen=True)
class Kind:
    """One dtype's tile arithmetic."""

    dtype: str
    #: Packed element type and bytes, and k values per 32-bit lane of a B tile row.
    element: ir.Type
    element_bytes: int
    group: int
    #: Source element type (bf16 arrives as its 16-bit patterns: ``Launch.device_storage``) and accumulator.
    source: ir.Type
    accumulator: ir.Type
    instruction: str
    features: tuple[str, ...]

    @property
    def k_per_tile(self) -> int:
        """k values one tile row of A holds."""
        return ROW_BYTES // self.element_bytes


KINDS = {
    "int8": Kind("int8", I8, 1, 4, I8, I32, "llvm.x86.tdpbssd.internal", ("amx-tile", "amx-int8")),
    "bf16": Kind("bf16", I16, 2, 2, I16, F32, "llvm.x86.tdpbf16ps.internal", ("amx-tile", "amx-bf16")),
}


class TileType(ir.Type):
    """LLVM's ``x86_amx``: one tile register's value (llvmlite has no name for it)."""

    def _to_string(self) -> str:
        return "x86_amx"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TileType)

    def __hash__(self) -> int:
        return hash("x86_amx")


TILE = TileType()


@functools.lru_cache(maxsize=1)
def amx_granted() -> bool:
    """Whether this process may use AMX tile data: asks Linux once (x86-64 Linux 5.16+)."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) == 0


def has_features(target: CPUTarget, dtype: str) -> bool:
    """Whether ``target``'s features include the AMX extensions ``dtype`` needs."""
    enabled = enabled_features(target.features)
    return dtype in KINDS and set(KINDS[dtype].features) <= enabled


def usable(target: LLVMTarget, dtype: str) -> bool:
    """Whether the AMX kernel runs for ``dtype`` on ``target``: a CPU with the features whose
    kernel granted this process the tile state."""
    return isinstance(target, CPUTarget) and has_features(target, dtype) and amx_granted()


def _tiles(module: ir.Module, kind: Kind) -> dict[str, ir.Function]:
    return {
        "zero": intrinsic(module, "llvm.x86.tilezero.internal", TILE, [I16, I16]),
        "load": intrinsic(module, "llvm.x86.tileloadd64.internal", TILE, [I16, I16, PTR, I64]),
        "store": intrinsic(module, "llvm.x86.tilestored64.internal", VOID, [I16, I16, PTR, I64, TILE]),
        "dot": intrinsic(module, kind.instruction, TILE, [I16, I16, I16, TILE, TILE, TILE]),
        "prefetch": intrinsic(module, "llvm.prefetch.p0", VOID, [PTR, I32, I32, I32]),
    }


def _micro(kind: Kind) -> driver.Micro:
    """The microkernel ``block(pa, pb, steps, c, ldc, mvalid, nvalid, first)``: one 32 x 32 block
    of C (+)= an A panel . a B panel in four tiles, ``steps`` tiles along K (every tile load 1 KiB
    in a row); an edge block through a scratch block and masked stores."""

    def emit(module: ir.Module) -> ir.Function:
        fnty = ir.FunctionType(VOID, [PTR, PTR, I64, PTR, I64, I64, I64, I1])
        fn = ir.Function(module, fnty, f"{KERNEL}_amx_block")
        fn.linkage = "internal"
        for k in (0, 1, 3):
            fn.args[k].add_attribute("noalias")
        pa, pb, steps, c_blk, ldc, mvalid, nvalid, first = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        op = _tiles(module, kind)
        rows, width = ir.Constant(I16, ROWS), ir.Constant(I16, ROW_BYTES)
        scratch = b.alloca(ir.ArrayType(kind.accumulator, BLOCK * BLOCK), name="scratch")
        scratch.align = 64
        cbytes = b.mul(ldc, i64(4))

        def tile_at(base: ir.Value, stride: ir.Value, u: int, t: int) -> ir.Value:
            return elem_ptr(b, base, I8, b.add(b.mul(stride, i64(u * ROWS)), i64(t * ROW_BYTES)))

        def store(acc: list[ir.Value], base: ir.Value, stride: ir.Value) -> None:
            for u, t in ((0, 0), (0, 1), (1, 0), (1, 1)):
                b.call(op["store"], [rows, width, tile_at(base, stride, u, t), stride, acc[2 * u + t]])

        zero = [b.call(op["zero"], [rows, width]) for _ in range(4)]
        whole = b.and_(b.icmp_signed("==", mvalid, i64(BLOCK)), b.icmp_signed("==", nvalid, i64(BLOCK)))
        with b.if_else(whole, likely=True) as (inside, edge):
            with inside:
                with b.if_else(first) as (fresh, more):
                    with fresh:
                        store(_tile_loop(b, op, pa, pb, steps, zero), c_blk, cbytes)
                    with more:
                        at = [tile_at(c_blk, cbytes, u, t) for u in (0, 1) for t in (0, 1)]
                        old = [b.call(op["load"], [rows, width, p, cbytes]) for p in at]
                        store(_tile_loop(b, op, pa, pb, steps, old), c_blk, cbytes)
            with edge:
                store(_tile_loop(b, op, pa, pb, steps, zero), scratch, i64(BLOCK * 4))
                _merge_edge(b, kind, scratch, c_blk, ldc, mvalid, nvalid, first)
        b.ret_void()
        return fn

    return emit


def _tile_loop(
    b: ir.IRBuilder, op: dict[str, ir.Function], pa: ir.Value, pb: ir.Value, steps: ir.Value, init: list[ir.Value]
) -> list[ir.Value]:
    """The four C tiles ``init`` plus ``steps`` steps of two A tiles times two B tiles, the next
    step's A tiles prefetched into L1."""
    rows, width, stride = ir.Constant(I16, ROWS), ir.Constant(I16, ROW_BYTES), i64(ROW_BYTES)
    hint = [ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)]

    def step(s: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        a_at = elem_ptr(b, pa, I8, b.mul(s, i64(STEP_BYTES)))
        b_at = elem_ptr(b, pb, I8, b.mul(s, i64(STEP_BYTES)))
        a = [b.call(op["load"], [rows, width, elem_ptr(b, a_at, I8, i64(u * TILE_BYTES)), stride]) for u in (0, 1)]
        bt = [b.call(op["load"], [rows, width, elem_ptr(b, b_at, I8, i64(t * TILE_BYTES)), stride]) for t in (0, 1)]
        ahead = elem_ptr(b, a_at, I8, i64(PREFETCH_STEPS * STEP_BYTES))  # past a panel's end: the next one's
        for line in range(0, STEP_BYTES, 64):
            b.call(op["prefetch"], [elem_ptr(b, ahead, I8, i64(line)), *hint])
        return [b.call(op["dot"], [rows, width, width, acc[2 * u + t], a[u], bt[t]]) for u in (0, 1) for t in (0, 1)]

    return loop_carry(b, i64(0), steps, 1, init, step, name="kt")


def _merge_edge(
    b: ir.IRBuilder,
    kind: Kind,
    scratch: ir.Value,
    c_blk: ir.Value,
    ldc: ir.Value,
    mvalid: ir.Value,
    nvalid: ir.Value,
    first: ir.Value,
) -> None:
    """The valid ``mvalid x nvalid`` corner of the scratch block stored into C (added on later slices)."""
    vty = ir.VectorType(kind.accumulator, ROWS)
    masks = [lane_mask(b, ROWS, t * ROWS, nvalid) for t in (0, 1)]
    with for_range(b, i64(0), mvalid, name="er") as r:
        for t in (0, 1):
            src = load_vec(b, scratch, kind.accumulator, b.add(b.mul(r, i64(BLOCK)), i64(t * ROWS)), ROWS, align=64)
            at = elem_ptr(b, c_blk, kind.accumulator, b.add(b.mul(r, ldc), i64(t * ROWS)))
            old = masked_load(b, at, vty, masks[t])
            added = b.add(old, src) if kind.accumulator == I32 else b.fadd(old, src)
            masked_store(b, b.select(first, src, added), at, masks[t])


def _emit_pack_a(
    b: ir.IRBuilder,
    kind: Kind,
    src: ir.Value,
    lda: ir.Value,
    dst: ir.Value,
    kc: ir.Value,
    mc: ir.Value,
    steps: ir.Value,
    _: object = None,
) -> None:
    """A's block as 32-row panels of whole tiles: row ``r``'s k values ``[s*w, s*w + w)`` at
    ``(r // 32) * steps * 2048 + s * 2048 + (r % 32) * 64`` bytes (so each tile is 1 KiB in a
    row; zero past kc and mc)."""
    width = kind.k_per_tile
    vty = ir.VectorType(kind.source, width)
    last = b.sub(mc, i64(1))
    with for_range(b, i64(0), b.mul(ceil_div(b, mc, BLOCK), i64(BLOCK)), name="par") as r:
        row = elem_ptr(b, src, kind.source, b.mul(imin(b, r, last), lda))
        inside = b.icmp_signed("<", r, mc)
        at = b.add(
            b.mul(b.sdiv(r, i64(BLOCK)), b.mul(steps, i64(STEP_BYTES))), b.mul(b.srem(r, i64(BLOCK)), i64(ROW_BYTES))
        )
        with for_range(b, i64(0), steps, name="pas") as s:
            k0 = b.mul(s, i64(width))
            valid = b.select(inside, b.sub(kc, k0), i64(0))
            x = masked_load(b, elem_ptr(b, row, kind.source, k0), vty, lane_mask(b, width, 0, valid))
            store_vec(b, x, elem_ptr(b, dst, I8, b.add(at, b.mul(s, i64(STEP_BYTES)))), i64(0), align=ROW_BYTES)


def _emit_pack_b(
    b: ir.IRBuilder,
    kind: Kind,
    src: ir.Value,
    ldb: ir.Value,
    dst: ir.Value,
    kc: ir.Value,
    nc: ir.Value,
    steps: ir.Value,
    _: object = None,
) -> None:
    """B's block as 32-column panels of whole tiles: per group ``g`` of k values (4 int8 or 2
    bf16), each column's group side by side, columns 0-15 in tile 0 and 16-31 in tile 1, the
    group's row at ``jr * steps * 2048 + (g // 16) * 2048 + t * 1024 + (g % 16) * 64`` bytes
    (zero past kc and nc)."""
    vty = ir.VectorType(kind.source, BLOCK)
    half = ROW_BYTES // kind.element_bytes
    halves = [ir.Constant(ir.VectorType(I32, half), list(range(t * half, (t + 1) * half))) for t in (0, 1)]
    panel = b.mul(steps, i64(STEP_BYTES))
    # Groups outer, panels inner: B is read row after row (page after page), not down its columns.
    with for_range(b, i64(0), b.mul(steps, i64(ROWS)), name="pbg") as g:
        ks = [b.add(b.mul(g, i64(kind.group)), i64(t)) for t in range(kind.group)]
        inside = [b.icmp_signed("<", k, kc) for k in ks]
        srcs = [b.mul(imin(b, k, b.sub(kc, i64(1))), ldb) for k in ks]
        row = b.add(b.mul(b.sdiv(g, i64(ROWS)), i64(STEP_BYTES)), b.mul(b.srem(g, i64(ROWS)), i64(ROW_BYTES)))
        with for_range(b, i64(0), ceil_div(b, nc, BLOCK), name="pbj") as jr:
            col = b.mul(jr, i64(BLOCK))
            left = b.sub(nc, col)
            rows = []
            for t in range(kind.group):
                valid = b.select(inside[t], left, i64(0))
                at = elem_ptr(b, src, kind.source, b.add(srcs[t], col))
                rows.append(masked_load(b, at, vty, lane_mask(b, BLOCK, 0, valid)))
            packed = interleave(b, rows, BLOCK)
            at_row = b.add(b.mul(jr, panel), row)
            for t in (0, 1):
                part = b.shuffle_vector(packed, packed, halves[t])
                store_vec(b, part, elem_ptr(b, dst, I8, b.add(at_row, i64(t * TILE_BYTES))), i64(0), align=ROW_BYTES)


def tile(target: LLVMTarget, dtype: str, config: Mapping[str, Any] | None = None) -> Tile:
    """AMX's fixed geometry for ``dtype``: a 32 x 32 block of C in 2 x 2 tiles, one 64-byte tile
    row per unit of K; the B panel stays in tile reach while A's stream from L2 (prefetched), so
    L1 does not bound kc (``config`` cannot change the tile: only the blocking is tuned)."""
    kind = KINDS[dtype]
    max_block = {"mc": MAX_BLOCK["mc"], "nc": MAX_BLOCK["nc"], "kc": MAX_BLOCK["kc_bytes"] // kind.element_bytes}
    scheme = f"{kind.instruction.split('.')[2]} on {ROWS} x {ROW_BYTES}-byte tiles"
    extra = {"tile": f"{ROWS}x{ROW_BYTES}B", "k_group": kind.group}
    derived = {"register_tile": f"AMX: {BLOCK} x {BLOCK} of C in 2 x 2 tile registers (fixed)"}
    return Tile(
        dtype,
        "amx",
        scheme,
        BLOCK,
        BLOCK,
        0,
        kind.k_per_tile,
        ROW_BYTES,
        max_block,
        b_resident=True,
        l1_resident=False,
        extra=extra,
        derived=derived,
        device_storage=True,
    )


def parts(target: CPUTarget, dtype: str, config: Mapping[str, Any] | None = None) -> driver.Parts:
    """The AMX kernel's tile, microkernel and packers for ``dtype`` (for :mod:`.llvm_driver`)."""
    kind = KINDS[dtype]

    def pack_a(b: ir.IRBuilder, *args: ir.Value) -> None:
        _emit_pack_a(b, kind, *args)

    def pack_b(b: ir.IRBuilder, *args: ir.Value) -> None:
        _emit_pack_b(b, kind, *args)

    geo = tile(target, dtype, config)
    return driver.Parts(f"{KERNEL}_{dtype}_amx", geo, kind.source, kind.accumulator, _micro(kind), pack_a, pack_b)


def build(target: LLVMTarget, dtype: str, config: Mapping[str, Any] | None = None) -> ir.Module:
    """The AMX GEMM module (:func:`.llvm_driver.build`): C int32 for int8, float32 for bf16;
    ``mc`` within 512, ``nc`` within 1024, ``kc`` a multiple of a tile's k within 2048 bytes of K."""
    if not isinstance(target, CPUTarget) or not has_features(target, dtype):
        raise TypeError(f"no AMX {dtype} GEMM for {getattr(target, 'name', type(target).__name__)}")
    return driver.build(target, parts(target, dtype, config))


def blocking(shape: Shape, dtype: str, workers: int = 1, target: CPUTarget | None = None) -> dict[str, int]:
    """mc/nc/kc (:func:`.llvm_driver.blocking`) from the caches of ``target`` (default: the host)."""
    target = target or host_target()
    return driver.blocking(tile(target, dtype), target, shape, workers)


def launch(shape: Shape, dtype: str, target: LLVMTarget, workers: int = 1, *given: Mapping[str, Any] | None) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` (:func:`.llvm_driver.launch`, ``given``
    its blocks and configuration); the record's config says ``path: amx``."""
    if not amx_granted():  # the tile instructions fault in a process Linux has not granted them
        raise RuntimeError("Linux did not grant this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)")
    return driver.launch(tile(target, dtype), shape, target, workers, *given)
