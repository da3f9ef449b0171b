"""The streamed form of the SIMT GEMM (``TK == 0``, a CPU device's), its work-item's block and
register tiles, and the stores every form shares; :mod:`.simt` is the kernel and its configuration.

A work-item streams its rows of A and columns of B from global memory, or, blocked as a CPU
library blocks (``MT x NT`` register tiles, ``KC`` steps of K at a time with the partial sums
kept in C), from panels of each chunk packed into local memory (``PA``, ``PB``): packed rows
of A lie a cache line more than ``KC`` apart, since rows of A a power of two apart would share
cache sets and evict each other; packed B is one contiguous panel per register tile across.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass

from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.kernels.llvmir.irutil import for_range, i64, imin, loop_carry, merge
from hwbench.kernels.llvmir.simt import Elements, SIMTContext


def block_shape(cfg: Mapping[str, int]) -> tuple[int, int]:
    """(BM, BN): rows and columns of C one work-group computes."""
    return cfg["WGM"] * cfg["TM"] * cfg.get("MT", 1), cfg["WGN"] * cfg["TNV"] * cfg["VW"] * cfg.get("NT", 1)


def packed_a_stride(cfg: Mapping[str, int], compute_bytes: int) -> int:
    """Row stride of the packed chunk of A (``PA``): ``KC`` padded by a cache line, so that the
    rows of a register tile fall in different cache sets (rows of A a power of two apart
    would share a set and evict each other, the reason to pack A)."""
    return cfg["KC"] + 64 // compute_bytes


def tile_width(cfg: Mapping[str, int]) -> int:
    """Columns of one register tile of the work-group (a ``BN / NT`` slice of the block)."""
    return cfg["WGN"] * cfg["TNV"] * cfg["VW"]


class Block:
    """Per-work-item values the phases share."""

    def __init__(self, ctx: SIMTContext, el: Elements, cfg: Mapping[str, int], m: ir.Value, n: ir.Value) -> None:
        b = ctx.builder
        self.b, self.el, self.cfg = b, el, cfg
        self.bm, self.bn = block_shape(cfg)
        self.tx, self.ty = ctx.local_id(0), ctx.local_id(1)
        self.tid = ctx.linear_id()
        self.i0 = b.mul(ctx.group_id(1), i64(self.bm))
        self.j0 = b.mul(ctx.group_id(0), i64(self.bn))
        self.m, self.n = m, n
        #: Which register tile down and across the block this is (``MT``, ``NT``).
        self.t: ir.Value = i64(0)
        self.u: ir.Value = i64(0)

    def micro(self, t: ir.Value, u: ir.Value) -> Block:
        """The same work-item's register tile ``t`` down and ``u`` across the block (``MT``, ``NT``)."""
        c, sub = self.cfg, copy.copy(self)
        sub.i0 = self.b.add(self.i0, self.b.mul(t, i64(c["WGM"] * c["TM"])))
        sub.j0 = self.b.add(self.j0, self.b.mul(u, i64(tile_width(c))))
        sub.t, sub.u = t, u
        return sub

    def row(self, r: int) -> ir.Value:
        """Row of C (global index) of register-tile row ``r``."""
        return self.b.add(self.i0, self.local_row(r))

    def col(self, v: int) -> ir.Value:
        """First column of C (global index) of register-tile vector ``v``."""
        c = self.cfg
        return self.b.add(self.j0, self.b.mul(self.b.add(self.tx, i64(v * c["WGN"])), i64(c["VW"])))

    def local_row(self, r: int) -> ir.Value:
        """Row within the block of register-tile row ``r`` (a work-item's rows are adjacent)."""
        return self.b.add(self.b.mul(self.ty, i64(self.cfg["TM"])), i64(r))

    def local_col(self, v: int) -> ir.Value:
        """First column within the block of register-tile vector ``v`` (work-items interleave)."""
        c = self.cfg
        return self.b.mul(self.b.add(self.tx, i64(v * c["WGN"])), i64(c["VW"]))


@dataclass(frozen=True)
class Operands:
    """The matrices and K, and the shared panels the chunks of A and B are packed into
    (``PA``, ``PB``; ``None`` where read from global memory)."""

    a: ir.Value
    b: ir.Value
    c: ir.Value
    k: ir.Value
    a_panel: ir.Value | None = None
    b_panel: ir.Value | None = None


def streamed(
    blk: Block,
    ops: Operands,
    edge: bool,
    steps: tuple[ir.Value, ir.Value] | None = None,
    init: list[ir.Value] | None = None,
) -> list[ir.Value]:
    """Accumulators of the register tile, A and B read straight from global memory (or from
    this chunk's packed panels), over the ``steps`` of K given (all of them by default) from
    ``init`` (zeros by default)."""
    b, el, c = blk.b, blk.el, blk.cfg
    first, stop = steps or (i64(0), ops.k)
    last_row, last_col = b.sub(blk.m, i64(1)), b.sub(blk.n, i64(1))
    if ops.a_panel is not None:  # packed rows of the block, from the chunk's first step
        stride = packed_a_stride(c, DTYPE_BYTES[el.dtype])
        tile_rows = b.mul(blk.t, i64(c["WGM"] * c["TM"]))
        a_rows = [b.sub(b.mul(b.add(tile_rows, blk.local_row(r)), i64(stride)), first) for r in range(c["TM"])]
    else:
        a_rows = [b.mul(imin(b, blk.row(r), last_row) if edge else blk.row(r), ops.k) for r in range(c["TM"])]
    a_src = ops.a if ops.a_panel is None else ops.a_panel
    cols = [blk.col(v) for v in range(c["TNV"])]

    def step(kk: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        brow = b.mul(kk, blk.n)
        if ops.b_panel is not None:
            row = b.mul(b.add(b.mul(blk.u, i64(c["KC"])), b.sub(kk, first)), i64(tile_width(c)))
            bv = [el.load_vec(ops.b_panel, b.add(row, blk.local_col(v))) for v in range(c["TNV"])]
        elif edge:
            bv = [
                el.gather(ops.b, [b.add(brow, imin(b, b.add(col, i64(lane)), last_col)) for lane in range(c["VW"])])
                for col in cols
            ]
        else:
            bv = [el.load_vec(ops.b, b.add(brow, col)) for col in cols]
        out: list[ir.Value] = []
        for r in range(c["TM"]):
            av = el.splat(el.load(a_src, b.add(a_rows[r], kk)))
            out.extend(el.fma(av, bv[v], acc[r * c["TNV"] + v]) for v in range(c["TNV"]))
        return out

    return loop_carry(b, first, stop, 1, init or [el.const(0.0)] * (c["TM"] * c["TNV"]), step, name="k")


def chunked(blk: Block, ctx: SIMTContext, ops: Operands, edge: bool) -> None:
    """The streamed kernel blocked as a CPU library blocks (``NT x MT`` register tiles, those
    down the block innermost, ``KC`` steps of K at a time, partial sums kept in C between
    chunks; with ``PA`` / ``PB`` each chunk of A / B first packed into shared memory), stored
    into C."""
    b, c = blk.b, blk.cfg
    chunk = ops.k
    if c["KC"]:  # K in as few chunks of at most KC as hold it, of even lengths (no short last one)
        chunks = b.sdiv(b.add(ops.k, i64(c["KC"] - 1)), i64(c["KC"]))
        chunk = b.sdiv(b.add(ops.k, b.sub(chunks, i64(1))), chunks)
    packs = ops.a_panel is not None or ops.b_panel is not None
    with for_range(b, i64(0), ops.k, chunk, name="kc") as k0:
        k1 = imin(b, b.add(k0, chunk), ops.k)
        if ops.a_panel is not None:
            _pack_a(blk, ops.a, ops.a_panel, ops.k, (k0, k1), edge)
        if ops.b_panel is not None:
            _pack_b(blk, ops.b, ops.b_panel, (k0, k1), edge)
        if packs:
            ctx.barrier()
        with for_range(b, i64(0), i64(c["NT"]), name="nt") as u, for_range(b, i64(0), i64(c["MT"]), name="mt") as t:
            sub = blk.micro(t, u)
            if edge:
                _edge_tile_chunk(blk, sub, ops, (k0, k1))
            else:
                _tile_chunk(sub, ops, (k0, k1), False)
        if packs:
            ctx.barrier()


def _pack_a(
    blk: Block, a: ir.Value, panel: ir.Value, k: ir.Value, steps: tuple[ir.Value, ir.Value], edge: bool
) -> None:
    """Steps ``steps`` of the block's rows of A into ``panel`` (rows :func:`packed_a_stride`
    apart): the work-items take rows in turn, ``VW`` elements at a time, the chunk's tail one by
    one; on an edge block rows past M read row M - 1 (their products are never stored)."""
    b, el, c = blk.b, blk.el, blk.cfg
    vw = c["VW"]
    stride = packed_a_stride(c, DTYPE_BYTES[el.dtype])
    length = b.sub(steps[1], steps[0])
    whole = b.and_(length, i64(-vw)) if vw & (vw - 1) == 0 else b.mul(b.sdiv(length, i64(vw)), i64(vw))
    one = Elements(b, el.dtype, 1)
    with for_range(b, blk.tid, i64(blk.bm), c["WGN"] * c["WGM"], name="pack_a") as row:
        src_row = b.add(blk.i0, row)
        src = b.add(b.mul(imin(b, src_row, b.sub(blk.m, i64(1))) if edge else src_row, k), steps[0])
        dst = b.mul(row, i64(stride))
        with for_range(b, i64(0), whole, vw, name="pack_a_v") as x:
            el.store_vec(el.load_vec(a, b.add(src, x)), panel, b.add(dst, x))
        with for_range(b, whole, length, name="pack_a_s") as x:
            one.store(one.load(a, b.add(src, x)), panel, b.add(dst, x))


def _pack_b(blk: Block, bmat: ir.Value, panel: ir.Value, steps: tuple[ir.Value, ir.Value], edge: bool) -> None:
    """Rows ``steps`` of the block's columns of B into ``panel``, tile ``u``'s columns at
    ``[u][kk - k0][:]``: the work-items take rows in turn; on an edge block columns past N read
    clamped indices (their products are never stored)."""
    b, el, c = blk.b, blk.el, blk.cfg
    width, vw = tile_width(c), c["VW"]
    last_col = b.sub(blk.n, i64(1))
    with for_range(b, b.add(steps[0], blk.tid), steps[1], c["WGN"] * c["WGM"], name="pack_b") as kk:
        brow = b.mul(kk, blk.n)
        row = b.mul(b.sub(kk, steps[0]), i64(width))
        for u in range(c["NT"]):
            for x in range(0, width, vw):
                col = b.add(blk.j0, i64(u * width + x))
                if edge:
                    lanes = [b.add(brow, imin(b, b.add(col, i64(lane)), last_col)) for lane in range(vw)]
                    value = el.gather(bmat, lanes)
                else:
                    value = el.load_vec(bmat, b.add(brow, col))
                el.store_vec(value, panel, b.add(row, i64(u * c["KC"] * width + x)))


def _edge_tile_chunk(blk: Block, sub: Block, ops: Operands, steps: tuple[ir.Value, ir.Value]) -> None:
    """A register tile of an edge block: unchecked where it lies wholly inside ``M x N``,
    skipped where wholly outside, checked otherwise."""
    b, c = blk.b, blk.cfg
    tm, tn = c["WGM"] * c["TM"], tile_width(c)
    inside = b.and_(
        b.icmp_signed("<=", b.add(sub.i0, i64(tm)), blk.m), b.icmp_signed("<=", b.add(sub.j0, i64(tn)), blk.n)
    )
    outside = b.or_(b.icmp_signed(">=", sub.i0, blk.m), b.icmp_signed(">=", sub.j0, blk.n))
    with b.if_else(inside) as (whole, partial):
        with whole:
            _tile_chunk(sub, ops, steps, False)
        with partial, b.if_then(b.not_(outside)):
            _tile_chunk(sub, ops, steps, True)


def _tile_chunk(blk: Block, ops: Operands, steps: tuple[ir.Value, ir.Value], edge: bool) -> None:
    """One register tile over one chunk of K: from zeros on the first chunk, from C's partial
    sums on later ones (``KC > 0``), stored into C."""
    b, el, c = blk.b, blk.el, blk.cfg
    init = zeros = [el.const(0.0)] * (c["TM"] * c["TNV"])
    if c["KC"]:
        before = b.block
        with b.if_then(b.icmp_signed(">", steps[0], i64(0))):
            partial = load_tile(blk, ops.c, edge)
            loaded = b.block
        init = merge(b, [(zeros, before), (partial, loaded)])
    store_tile(blk, ops.c, streamed(blk, ops, edge, steps, init), edge)


def load_tile(blk: Block, cmat: ir.Value, edge: bool) -> list[ir.Value]:
    """C's register tile (the partial sums of earlier chunks); on an edge block lanes outside
    ``M x N`` read a clamped in-bounds element, which their masked stores never write back."""
    b, el, c = blk.b, blk.el, blk.cfg
    last_row, last_col = b.sub(blk.m, i64(1)), b.sub(blk.n, i64(1))
    out = []
    for r in range(c["TM"]):
        row = imin(b, blk.row(r), last_row) if edge else blk.row(r)
        for v in range(c["TNV"]):
            col = blk.col(v)
            if edge:
                lanes = [b.add(b.mul(row, blk.n), imin(b, b.add(col, i64(lane)), last_col)) for lane in range(c["VW"])]
                out.append(el.gather(cmat, lanes))
            else:
                out.append(el.load_vec(cmat, b.add(b.mul(row, blk.n), col)))
    return out


def store_tile(blk: Block, cmat: ir.Value, acc: list[ir.Value], edge: bool) -> None:
    """C's register tile, element by element within ``M x N`` on an edge block."""
    b, el, c = blk.b, blk.el, blk.cfg
    for r in range(c["TM"]):
        row = blk.row(r)
        for v in range(c["TNV"]):
            col = blk.col(v)
            value = acc[r * c["TNV"] + v]
            base = b.add(b.mul(row, blk.n), col)
            if not edge:
                el.store_vec(value, cmat, base)
                continue
            for lane in range(c["VW"]):
                ok = b.and_(b.icmp_signed("<", row, blk.m), b.icmp_signed("<", b.add(col, i64(lane)), blk.n))
                with b.if_then(ok):
                    el.store(el.lane(value, lane), cmat, b.add(base, i64(lane)))
