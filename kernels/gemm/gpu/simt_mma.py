"""The SIMT GEMM on the target's matrix-multiply instruction (``MMA = 1``): NVPTX ``mma.sync``,
AMDGCN ``v_mfma``, in bf16 and fp16 with fp32 accumulators (:mod:`hwbench.kernels.llvmir.mma`).

A work-group is ``WM x WN`` warps (wavefronts) of the instruction's ``lanes``; each warp
computes ``FM x FN`` instruction tiles (``m x n`` each) of the block, so the block is
``BM = WM*FM*m`` by ``BN = WN*FN*n``. K goes ``TK`` steps at a time: the work-group stages
``BM x TK`` of A (row-major) and ``TK x BN`` of B (transposed, so that each register's
elements, consecutive in K, are adjacent) in shared memory, rows padded by 16 bytes; a
barrier; each warp loads its fragments as the instruction's layout places them and issues
``FM*FN`` instructions per ``k`` steps; a barrier. Interior blocks stage unchecked (16-byte
vector loads where K and N are multiples of 8, element loads otherwise); edge blocks and the
last partial K tile read clamped indices and stage zeros outside the matrix. C is stored in
the dtype (rounded to nearest even), masked to ``M x N`` on an edge block.
"""

from __future__ import annotations

from collections.abc import Mapping

from llvmlite import ir

from hwbench.kernels.llvmir.irutil import i64, loop_carry, whole_steps_then_tail
from hwbench.kernels.llvmir.mma import Affine, Issue, MatrixInstruction, coordinate
from hwbench.kernels.llvmir.simt import Elements, SIMTContext, clamped_lanes, share_rounds

CONFIG_KEYS = ("MMA", "WM", "WN", "FM", "FN", "TK")
#: Elements one staging copy moves (16 bytes of a 16-bit dtype).
VEC = 8
#: Padding of each shared row, in elements (16 bytes: rows stay 16-byte aligned, banks differ).
PAD = 8


def default_config(inst: MatrixInstruction, max_work_group: int) -> dict[str, int]:
    """8 (AMD: 4) warps of 4 x 4 instruction tiles, 128 x 128 blocks, K tiles of 32."""
    wn = 4 if inst.n == 8 else 2
    cfg = {"MMA": 1, "WM": 2, "WN": wn, "FM": 4, "FN": 4, "TK": 32}
    while cfg["WM"] * cfg["WN"] * inst.lanes > max_work_group and cfg["WN"] > 1:
        cfg["WN"] //= 2
    return cfg


def check_config(cfg: Mapping[str, int], inst: MatrixInstruction) -> dict[str, int]:
    """``cfg`` as ints, checked: its keys, positive sizes, K tiles of whole instruction steps."""
    unknown = sorted(set(cfg) - set(CONFIG_KEYS))
    missing = sorted(set(CONFIG_KEYS) - set(cfg))
    if unknown or missing:
        raise ValueError(f"GEMM mma configuration: unknown keys {unknown}, missing keys {missing}")
    full = {key: int(cfg[key]) for key in CONFIG_KEYS}
    if min(full.values()) < 1 or full["TK"] % inst.k or full["TK"] % VEC:
        raise ValueError(f"GEMM mma configuration {full}: sizes must be positive, TK a multiple of {inst.k}")
    return full


def block_shape(cfg: Mapping[str, int], inst: MatrixInstruction) -> tuple[int, int]:
    """(BM, BN) of a work-group."""
    return cfg["WM"] * cfg["FM"] * inst.m, cfg["WN"] * cfg["FN"] * inst.n


def shared_bytes(cfg: Mapping[str, int], inst: MatrixInstruction) -> int:
    """The staged A and B tiles, 16-bit elements."""
    bm, bn = block_shape(cfg, inst)
    return (bm + bn) * (cfg["TK"] + PAD) * 2


def local_size(cfg: Mapping[str, int], inst: MatrixInstruction) -> tuple[int, int]:
    """(lanes, warps) of a work-group."""
    return inst.lanes, cfg["WM"] * cfg["WN"]


class _Warp:
    """This work-item's place: its block, its warp's tiles, its lane's parts."""

    def __init__(self, ctx: SIMTContext, cfg: Mapping[str, int], inst: MatrixInstruction, m: ir.Value, n: ir.Value):
        b = ctx.builder
        self.b, self.cfg, self.inst, self.m, self.n = b, cfg, inst, m, n
        self.bm, self.bn = block_shape(cfg, inst)
        self.lane, self.warp = ctx.local_id(0), ctx.local_id(1)
        warp = self.warp
        self.tid = ctx.linear_id()
        self.threads = inst.lanes * cfg["WM"] * cfg["WN"]
        self.lo = b.and_(self.lane, i64(inst.split - 1))
        self.hi = b.lshr(self.lane, i64(inst.split.bit_length() - 1))
        self.row0 = b.mul(b.urem(warp, i64(cfg["WM"])), i64(cfg["FM"] * inst.m))
        self.col0 = b.mul(b.udiv(warp, i64(cfg["WM"])), i64(cfg["FN"] * inst.n))
        self.i0 = b.mul(ctx.group_id(1), i64(self.bm))
        self.j0 = b.mul(ctx.group_id(0), i64(self.bn))
        self.stride = cfg["TK"] + PAD


def _stage(w: _Warp, el: Elements, src: ir.Value, dst: ir.Value, k0: ir.Value, k: ir.Value, form: str, is_a: bool):
    """This work-item's share of the A tile (``[m][kk]``) or the transposed B tile (``[n][kk]``),
    ``VEC`` elements at a time: ``form`` is ``aligned`` (16-byte loads), ``plain`` (element
    loads) or ``checked`` (clamped indices, zeros outside the matrix)."""
    b, tk = w.b, w.cfg["TK"]
    per_row = tk // VEC if is_a else w.bn // VEC
    for major, minor in share_rounds(b, w.tid, w.threads, w.bm if is_a else tk, per_row, VEC):
        if is_a:  # row ``major`` of the block, K from k0 + minor
            row, col, size = b.add(w.i0, major), b.add(k0, minor), (w.m, k)
        else:  # step ``major`` of K, columns from j0 + minor
            row, col, size = b.add(k0, major), b.add(w.j0, minor), (k, w.n)
        if form == "checked":
            zero = ir.Constant(el.store_ty, 0)
            lanes = clamped_lanes(b, (row, col), size, size[1], VEC)
            values = [b.select(ok, el.load_raw(src, where), zero) for where, ok in lanes]
        else:
            vec = el.load_raw_vec(src, b.add(b.mul(row, size[1]), col), VEC, 16 if form == "aligned" else 2)
            values = [b.extract_element(vec, ir.Constant(ir.IntType(32), j)) for j in range(VEC)]
        if is_a:
            slot = b.add(b.mul(major, i64(w.stride)), minor)
            el.store_raw_vec(_pack(b, el, values), dst, slot, 16)
        else:
            for j, value in enumerate(values):
                el.store_raw(value, dst, b.add(b.mul(b.add(minor, i64(j)), i64(w.stride)), major))


def _pack(b: ir.IRBuilder, el: Elements, values: list[ir.Value]) -> ir.Value:
    vec: ir.Value = ir.Constant(ir.VectorType(el.store_ty, len(values)), ir.Undefined)
    for j, value in enumerate(values):
        vec = b.insert_element(vec, value, ir.Constant(ir.IntType(32), j))
    return vec


def _fragments(
    w: _Warp,
    el: Elements,
    tile: ir.Value,
    kk: int,
    tiles: tuple[ir.Value, int, int],
    layout: list[tuple[Affine, Affine]],
) -> list[list[ir.Value]]:
    """The registers of each of the warp's ``tiles`` (its first row or column, how many, their
    size) from a shared tile stored K-minor, at K step ``kk``: ``layout`` gives each register's
    (row or column, first K) in the instruction's tile."""
    b, inst = w.b, w.inst
    first, count, size = tiles
    out = []
    for i in range(count):
        regs = []
        for outer, ks in layout:
            line = b.add(b.add(first, i64(i * size)), coordinate(b, outer, w.lo, w.hi))
            where = b.add(b.mul(line, i64(w.stride)), b.add(i64(kk), coordinate(b, ks, w.lo, w.hi)))
            regs.append(inst.register(b, el.load_raw_vec(tile, where, inst.elems, 2 * inst.elems)))
        out.append(regs)
    return out


def _compute(
    w: _Warp, el: Elements, tiles: tuple[ir.Value, ir.Value], acc: list[ir.Value], issue: Issue
) -> list[ir.Value]:
    """The K tile's instructions: fragments from the shared tiles, ``FM x FN`` per ``k`` steps."""
    b, c, inst = w.b, w.cfg, w.inst
    a_tile, b_tile = tiles
    per_tile = len(inst.c)
    a_layout = [(rows, ks) for rows, ks in inst.a]
    b_layout = [(cols, ks) for ks, cols in inst.b]
    for kk in range(0, c["TK"], inst.k):
        a_regs = _fragments(w, el, a_tile, kk, (w.row0, c["FM"], inst.m), a_layout)
        b_regs = _fragments(w, el, b_tile, kk, (w.col0, c["FN"], inst.n), b_layout)
        out = []
        for i in range(c["FM"]):
            for j in range(c["FN"]):
                first = (i * c["FN"] + j) * per_tile
                out.extend(issue(b, a_regs[i], b_regs[j], acc[first : first + per_tile]))
        acc = out
    return acc


def _store(w: _Warp, el: Elements, cmat: ir.Value, acc: list[ir.Value], edge: bool) -> None:
    """C's fragments in the dtype, element by element within ``M x N`` on an edge block."""
    b, c, inst = w.b, w.cfg, w.inst
    for i in range(c["FM"]):
        for j in range(c["FN"]):
            for e, (rows, cols) in enumerate(inst.c):
                row = b.add(b.add(w.i0, b.add(w.row0, i64(i * inst.m))), coordinate(b, rows, w.lo, w.hi))
                col = b.add(b.add(w.j0, b.add(w.col0, i64(j * inst.n))), coordinate(b, cols, w.lo, w.hi))
                value = acc[(i * c["FN"] + j) * len(inst.c) + e]
                where = b.add(b.mul(row, w.n), col)
                if not edge:
                    el.store(value, cmat, where)
                    continue
                with b.if_then(b.and_(b.icmp_signed("<", row, w.m), b.icmp_signed("<", col, w.n))):
                    el.store(value, cmat, where)


def body(ctx: SIMTContext, args: list[ir.Argument], dtype: str, cfg: Mapping[str, int], inst: MatrixInstruction):
    """The kernel body of ``gemm(A, B, C, M, N, K)`` for one work-item."""
    a, bmat, cmat, m, n, k = args
    b = ctx.builder
    el = Elements(b, dtype, 1)
    w = _Warp(ctx, cfg, inst, m, n)
    tiles = (ctx.shared(el.store_ty, w.bm * w.stride), ctx.shared(el.store_ty, w.bn * w.stride))
    issue = inst.issuer(ctx, (w.lo, w.hi), w.warp, cfg["WM"] * cfg["WN"])
    tk = cfg["TK"]
    zeros = [ir.Constant(ir.FloatType(), 0.0)] * (cfg["FM"] * cfg["FN"] * len(inst.c))

    def step(k0: ir.Value, acc: list[ir.Value], checked: bool, interior: bool) -> list[ir.Value]:
        if interior and not checked:  # one uniform branch: 16-byte loads where every row starts aligned
            aligned = b.icmp_unsigned("==", b.and_(b.or_(k, n), i64(VEC - 1)), i64(0))
            with b.if_else(aligned) as (fast, slow):
                for branch, form in ((fast, "aligned"), (slow, "plain")):
                    with branch:
                        _stage(w, el, a, tiles[0], k0, k, form, True)
                        _stage(w, el, bmat, tiles[1], k0, k, form, False)
        else:
            _stage(w, el, a, tiles[0], k0, k, "checked", True)
            _stage(w, el, bmat, tiles[1], k0, k, "checked", False)
        ctx.barrier()
        acc = _compute(w, el, tiles, acc, issue)
        ctx.barrier()
        return acc

    interior = b.and_(b.icmp_signed("<=", b.add(w.i0, i64(w.bm)), m), b.icmp_signed("<=", b.add(w.j0, i64(w.bn)), n))
    with b.if_else(interior, likely=True) as (inside, edge):
        with inside:  # whole K tiles unchecked, then the last, partial one (if any) checked
            acc = whole_steps_then_tail(b, k, tk, zeros, lambda k0, acc, tail: step(k0, acc, tail, True), "k0")
            _store(w, el, cmat, acc, edge=False)
        with edge:
            acc = loop_carry(b, i64(0), k, tk, zeros, lambda k0, acc: step(k0, acc, True, False), name="k0e")
            _store(w, el, cmat, acc, edge=True)
