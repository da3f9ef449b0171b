"""The SIMT GEMM on the target's matrix-multiply instruction (``MMA = 1``): NVPTX ``mma.sync``,
AMDGCN ``v_mfma``, in bf16 and fp16 with fp32 accumulators (:mod:`hwbench.kernels.llvmir.mma`).

A work-group is ``WM x WN`` warps (wavefronts) of the instruction's ``lanes``; each warp
computes ``FM x FN`` instruction tiles (``m x n`` each) of the block, so the block is
``BM = WM*FM*m`` by ``BN = WN*FN*n``. K goes ``TK`` steps at a time through ``ST`` stages of
shared memory, A kept ``[m][k]`` and B ``[k][n]`` in XOR-swizzled 16-byte chunks
(:mod:`.simt_mma_path`). Where K and N are multiples of 8 and A and B 16-byte aligned (decided
once per kernel, one uniform branch around two whole pipelines), each K tile moves in 16-byte
pieces, zero-filled past the matrix: ``cp.async`` on NVPTX (``ST - 1`` tiles in flight), 16-byte
loads into registers issued before the current tile's instructions and stored after them
elsewhere; otherwise element loads with clamped indices feed the same layout. One barrier per
K tile. Fragments come by ``ldmatrix`` / ``ldmatrix.trans`` (NVPTX; emulated by plain loads on a
target without it) or by 16-byte LDS reads of A (AMDGCN). C is stored in the dtype (rounded
to nearest even), masked to ``M x N`` on an edge block. On NVPTX the kernel asks for two
resident 256-thread blocks per SM (``.minnctapersm``), which caps it at 128 registers; on AMDGCN
for the waves its LDS allows (32 KiB a block: two a CU, two waves a SIMD, 256 VGPRs), which
is all a VGPR cap could keep: LLVM clamps a request for more waves to those.
"""

from __future__ import annotations

from collections.abc import Mapping

from llvmlite import ir

from hwbench.kernels.gemm.gpu import simt_mma_path as path
from hwbench.kernels.gemm.gpu.simt_mma_path import VEC, IROps, PairStager, Stager
from hwbench.kernels.llvmir import gpu_intrinsics as nv
from hwbench.kernels.llvmir.irutil import I32, I64, i64, loop_carry
from hwbench.kernels.llvmir.mma import Affine, Issue, MatrixInstruction, coordinate
from hwbench.kernels.llvmir.simt import Elements, SIMTContext

CONFIG_KEYS = ("MMA", "WM", "WN", "FM", "FN", "TK")
#: Keys a configuration may leave out, and what that means: ``ST`` stages of shared memory.
OPTIONAL_KEYS = {"ST": 2}
#: Registers per thread the NVPTX kernel is held to (through its resident blocks per SM).
MAX_REGISTERS = 128


def default_config(inst: MatrixInstruction, max_work_group: int) -> dict[str, int]:
    """8 (AMD: 4) warps of 4 x 4 instruction tiles, 128 x 128 blocks, K tiles of 32 in 2 stages
    (a third stage costs the NVPTX kernel spills under its 128 registers)."""
    wn = 4 if inst.n == 8 else 2
    cfg = {"MMA": 1, "WM": 2, "WN": wn, "FM": 4, "FN": 4, "TK": 32, "ST": 2}
    while cfg["WM"] * cfg["WN"] * inst.lanes > max_work_group and cfg["WN"] > 1:
        cfg["WN"] //= 2
    return cfg


def check_config(cfg: Mapping[str, int], inst: MatrixInstruction) -> dict[str, int]:
    """``cfg`` as ints, checked: its keys, positive sizes, K tiles of whole instruction steps."""
    unknown = sorted(set(cfg) - set(CONFIG_KEYS) - set(OPTIONAL_KEYS))
    missing = sorted(set(CONFIG_KEYS) - set(cfg))
    if unknown or missing:
        raise ValueError(f"GEMM mma configuration: unknown keys {unknown}, missing keys {missing}")
    full = {key: int(cfg.get(key, OPTIONAL_KEYS.get(key, 0))) for key in (*CONFIG_KEYS, *OPTIONAL_KEYS)}
    step = max(inst.k, 2 * VEC)
    if min(full.values()) < 1 or full["TK"] % step or not _power_of_two(full["TK"]) or full["ST"] < 2:
        raise ValueError(
            f"GEMM mma configuration {full}: sizes must be positive, TK a multiple of {step} "
            "and a power of two, ST at least 2"
        )
    if not _power_of_two(full["WN"] * full["FN"]):
        raise ValueError(f"GEMM mma configuration {full}: WN * FN must be a power of two (B's 16-byte chunks)")
    return full


def i32(value: int) -> ir.Constant:
    """An i32 constant (shared-memory offsets)."""
    return ir.Constant(I32, value)


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def block_shape(cfg: Mapping[str, int], inst: MatrixInstruction) -> tuple[int, int]:
    """(BM, BN) of a work-group."""
    return cfg["WM"] * cfg["FM"] * inst.m, cfg["WN"] * cfg["FN"] * inst.n


def shared_bytes(cfg: Mapping[str, int], inst: MatrixInstruction) -> int:
    """The ``ST`` stages of the A and B tiles, 16-bit elements."""
    bm, bn = block_shape(cfg, inst)
    return cfg.get("ST", OPTIONAL_KEYS["ST"]) * (bm + bn) * cfg["TK"] * 2


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
        #: Shared-memory offsets are 32-bit: the lane, the warp's first row and column, as i32.
        self.lane32, self.row032, self.col032 = (b.trunc(v, I32) for v in (self.lane, self.row0, self.col0))
        #: 16-byte chunks per line of the A tile (K) and of the B tile (columns).
        self.chunks_a, self.chunks_b = cfg["TK"] // VEC, self.bn // VEC


def uses_ldmatrix(inst: MatrixInstruction) -> bool:
    """Whether ``inst``'s fragments are ``ldmatrix``'s (``mma.m16n8k16``: 32 lanes, 16 x 8 x 16),
    else the mfma path's (16 x 16 x 16 on 64 lanes)."""
    return (inst.m, inst.n, inst.k, inst.lanes) == (16, 8, 16, 32)


def _compute(
    w: _Warp,
    el: Elements,
    tiles: tuple[ir.Value, ir.Value],
    stages: tuple[ir.Value, ir.Value],
    acc: list[ir.Value],
    issue: Issue,
) -> list[ir.Value]:
    """The K tile's instructions from the stage at element offsets ``stages`` (A, B): ``FM x FN``
    per ``k`` steps."""
    b, c, inst = w.b, w.cfg, w.inst
    per_tile = len(inst.c)
    if not uses_ldmatrix(inst):
        for kk in range(0, c["TK"], path.mfma_k_group(c["TK"])):
            acc = _mfma_group(w, el, tiles, stages, acc, issue, kk)
        return acc
    for kk in range(0, c["TK"], inst.k):
        a_regs, b_regs = _ldmatrix_fragments(w, el, tiles, stages, kk)
        out = []
        for i in range(c["FM"]):
            for j in range(c["FN"]):
                first = (i * c["FN"] + j) * per_tile
                out.extend(issue(b, a_regs[i][0], b_regs[j][0], acc[first : first + per_tile]))
        acc = out
    return acc


def _ldmatrix_fragments(
    w: _Warp, el: Elements, tiles: tuple[ir.Value, ir.Value], stages: tuple[ir.Value, ir.Value], kk: int
) -> tuple[list[list[list[ir.Value]]], list[list[list[ir.Value]]]]:
    """A's registers per row tile (``ldmatrix.x4``) and B's per column tile (``ldmatrix.x4.trans``,
    two column tiles each; ``.x2`` for a last odd one), at K step ``kk``: one step each."""
    b, c, inst = w.b, w.cfg, w.inst
    ops, real = IROps(b, I32), inst.convention == "nvptx"
    c32 = ops.c

    def registers(values: list[ir.Value]) -> list[ir.Value]:
        return [inst.register(b, v) for v in values]

    a_regs = []
    for i in range(c["FM"]):
        first = b.add(w.row032, c32(i * inst.m))

        def row_of(lane: ir.Value, first: ir.Value = first) -> ir.Value:
            return b.add(stages[0], path.ldmatrix_rows(ops, lane, first, kk // VEC, w.chunks_a))

        a_regs.append([registers(path.ldmatrix_fragment(b, el, tiles[0], w.lane32, row_of, 4, False, real))])
    b_regs = []
    for j in range(0, c["FN"], 2):
        count = 4 if j + 1 < c["FN"] else 2
        chunk = b.lshr(b.add(w.col032, c32(j * inst.n)), c32(3))

        def col_of(lane: ir.Value, chunk: ir.Value = chunk, count: int = count) -> ir.Value:
            lane = b.and_(lane, c32(15)) if count == 2 else lane
            return b.add(stages[1], path.ldmatrix_rows(ops, lane, kk, chunk, w.chunks_b))

        regs = registers(path.ldmatrix_fragment(b, el, tiles[1], w.lane32, col_of, count, True, real))
        b_regs.extend([[regs[t : t + 2]] for t in range(0, count, 2)])
    return a_regs, b_regs


def _mfma_group(
    w: _Warp,
    el: Elements,
    tiles: tuple[ir.Value, ir.Value],
    stages: tuple[ir.Value, ir.Value],
    acc: list[ir.Value],
    issue: Issue,
    kk: int,
) -> list[ir.Value]:
    """The mfma path's instructions for the K group at ``kk``: B's registers of every column
    tile (B's tile is ``bt``, read as A's), then row tile by row tile its instructions, the next
    row tile's A read before them; on AMDGCN nothing is scheduled across row tiles, so only
    two row tiles' A registers are live at once."""
    b, c, inst = w.b, w.cfg, w.inst
    group, per_tile = path.mfma_k_group(c["TK"]), len(inst.c)

    def read(tile: int, first: ir.Value, size: int) -> list[ir.Value]:
        at = {"stage": stages[tile], "row": b.add(first, i32(size)), "k": kk, "chunks": w.chunks_a, "group": group}
        return [inst.register(b, r) for r in path.mfma_a(b, el, tiles[tile], w.lane32, at)]

    b_regs = [read(1, w.col032, j * inst.n) for j in range(c["FN"])]
    acc, following = list(acc), read(0, w.row032, 0)
    for i in range(c["FM"]):
        a_regs = following
        if i + 1 < c["FM"]:
            following = read(0, w.row032, (i + 1) * inst.m)
        for s, a_reg in enumerate(a_regs):
            for j in range(c["FN"]):
                first = (i * c["FN"] + j) * per_tile
                acc[first : first + per_tile] = issue(b, [a_reg], [b_regs[j][s]], acc[first : first + per_tile])
        if inst.convention == "amdgcn":
            nv.sched_barrier(b)
    return acc


def _pipeline(
    ctx: SIMTContext,
    w: _Warp,
    el: Elements,
    ops: tuple[ir.Value, ir.Value, ir.Value],
    form: str,
    issue: Issue,
    tiles: tuple[ir.Value, ir.Value],
) -> list[ir.Value]:
    """The accumulators after every K tile: ``ST - 1`` tiles staged ahead, then per tile one
    barrier, the next copy issued into the stage the previous tile used, the tile's instructions
    (``async``: copies wait before the barrier; ``vector``: loads before the instructions land
    after them; ``plain``: element loads and stores after them)."""
    b, c = w.b, w.cfg
    a, bmat, k = ops
    st, tk = c["ST"], c["TK"]
    values = {"a": a, "b": bmat, "m": w.m, "n": w.n, "k": k, "tid": w.tid, "i0": w.i0, "j0": w.j0}
    stagers = _stagers(b, el, form, tiles, values, w)
    sizes = (w.bm * tk, tk * w.bn)
    copies = form == "async"

    outline = _outlined(w, el, tiles, values) if form == "plain" and w.inst.convention == "nvptx" else None

    def stage_copy(k0: ir.Value, stage: ir.Value) -> list[list[object]]:
        if outline is not None:
            b.call(outline, [*values.values(), k0, stage])
            return [[], []]
        issued = [s.issue(k0, b.mul(stage, i32(size))) for s, size in zip(stagers, sizes, strict=True)]
        if copies:
            nv.cp_async_commit(b)
        return issued

    def land(issued: list[list[object]]) -> None:
        for s, pieces in zip(stagers, issued, strict=True):
            s.land(pieces)

    for s in range(st - 1):
        land(stage_copy(i64(s * tk), i32(s)))
    if not copies:
        ctx.barrier()
    tiles_k = b.udiv(b.add(k, i64(tk - 1)), i64(tk))
    zeros = [ir.Constant(ir.FloatType(), 0.0)] * (c["FM"] * c["FN"] * len(w.inst.c))

    def step(kt: ir.Value, values: list[ir.Value]) -> list[ir.Value]:
        acc, read = values[:-1], values[-1]
        last = b.icmp_unsigned("==", read, i32(0))
        write = b.select(last, i32(st - 1), b.sub(read, i32(1)))
        if copies:
            nv.cp_async_wait(b, st - 2)
            ctx.barrier()
        ahead = b.mul(b.add(kt, i64(st - 1)), i64(tk))
        issued = stage_copy(ahead, write) if form != "plain" else []
        acc = _compute(w, el, tiles, (b.mul(read, i32(sizes[0])), b.mul(read, i32(sizes[1]))), acc, issue)
        if not copies:  # element loads are not held across the instructions: issued after them
            land(issued or stage_copy(ahead, write))
            ctx.barrier()
        wrap = b.icmp_unsigned("==", read, i32(st - 1))
        return [*acc, b.select(wrap, i32(0), b.add(read, i32(1)))]

    out = loop_carry(b, i64(0), tiles_k, 1, [*zeros, i32(0)], step, name=f"k{form}")
    if copies:
        nv.cp_async_wait(b, 0)
    return out[:-1]


def _stagers(
    b: ir.IRBuilder, el: Elements, form: str, tiles: tuple[ir.Value, ir.Value], v: Mapping[str, ir.Value], w: _Warp
) -> tuple[Stager, Stager | PairStager]:
    """The copies of A's and B's K tiles from the values ``v`` (pointers, sizes, ``tid``, ``i0``,
    ``j0``): B into ``[k][n]`` for ``ldmatrix``, else into ``bt`` (``[n][k]``)."""
    tk, common = w.cfg["TK"], {"threads": w.threads, "tid": v["tid"]}
    a_shape = {"lines": w.bm, "chunks": w.chunks_a, "origin": ((v["i0"], None), (v["m"], v["k"]), v["k"])}
    b_origin = {"origin": ((None, v["j0"]), (v["k"], v["n"]), v["n"])}
    a_stager = Stager(b, el, form, tiles[0], v["a"], {**common, **a_shape, "layout": "a"})
    if uses_ldmatrix(w.inst):
        b_shape = {"lines": tk, "chunks": w.chunks_b, "layout": "b", **b_origin}
        return a_stager, Stager(b, el, form, tiles[1], v["b"], {**common, **b_shape})
    bt_shape = {**common, "lines": w.bn, "chunks": w.chunks_a, "layout": "bt", **b_origin}
    if form == "plain":
        return a_stager, Stager(b, el, form, tiles[1], v["b"], bt_shape)
    return a_stager, PairStager(b, el, tiles[1], v["b"], bt_shape)


def _outlined(w: _Warp, el: Elements, tiles: tuple[ir.Value, ir.Value], values: Mapping[str, ir.Value]) -> ir.Function:
    """The element-wise (``plain``) copy of a K tile as a function of its own, called and not
    inlined: its clamped indices stay inside it instead of occupying the kernel's registers
    through the whole K loop (where they would spill under the register cap)."""
    module = w.b.module
    args = [v.type for v in values.values()] + [I64, I32]
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), args), name=f"{w.b.function.name}.plain_tile")
    fn.linkage = "internal"
    fn.attributes.add("noinline")
    fb = ir.IRBuilder(fn.append_basic_block("entry"))
    own = dict(zip(values, fn.args[: len(values)], strict=True))
    k0, stage = fn.args[len(values) :]
    tk = w.cfg["TK"]
    for s, size in zip(
        _stagers(fb, Elements(fb, el.dtype, 1), "plain", tiles, own, w), (w.bm * tk, tk * w.bn), strict=True
    ):
        s.land(s.issue(k0, fb.mul(stage, i32(size))))
    fb.ret_void()
    return fn


def _store(w: _Warp, el: Elements, cmat: ir.Value, acc: list[ir.Value], edge: bool) -> None:
    """C's fragments in the dtype, element by element within ``M x N`` on an edge block."""
    b, c, inst = w.b, w.cfg, w.inst
    for i in range(c["FM"]):
        for j in range(c["FN"]):
            for e, (rows, cols) in enumerate(inst.c):
                row = b.add(b.add(w.i0, b.add(w.row0, i64(i * inst.m))), _at(b, rows, w))
                col = b.add(b.add(w.j0, b.add(w.col0, i64(j * inst.n))), _at(b, cols, w))
                value = acc[(i * c["FN"] + j) * len(inst.c) + e]
                where = b.add(b.mul(row, w.n), col)
                if not edge:
                    el.store(value, cmat, where)
                    continue
                with b.if_then(b.and_(b.icmp_signed("<", row, w.m), b.icmp_signed("<", col, w.n))):
                    el.store(value, cmat, where)


def _at(b: ir.IRBuilder, affine: Affine, w: _Warp) -> ir.Value:
    return coordinate(b, affine, w.lo, w.hi)


def body(ctx: SIMTContext, args: list[ir.Argument], dtype: str, cfg: Mapping[str, int], inst: MatrixInstruction):
    """The kernel body of ``gemm(A, B, C, M, N, K)`` for one work-item."""
    a, bmat, cmat, m, n, k = args
    b = ctx.builder
    el = Elements(b, dtype, 1)
    cfg = check_config(cfg, inst)
    w = _Warp(ctx, cfg, inst, m, n)
    st, tk = cfg["ST"], cfg["TK"]
    tiles = (ctx.shared(el.store_ty, st * w.bm * tk), ctx.shared(el.store_ty, st * tk * w.bn))
    issue = inst.issuer(ctx, (w.lo, w.hi), w.warp, cfg["WM"] * cfg["WN"])
    if inst.convention == "nvptx":
        nv.min_blocks_per_multiprocessor(b.function, max(1, 65536 // (MAX_REGISTERS * w.threads)))
    else:  # the waves its LDS allows: their VGPRs (gfx942: two waves, 256), no cap below them
        nv.ask_lds_occupancy(b.function)
    # One uniform choice per kernel: 16-byte pieces where every row starts 16-byte aligned.
    addresses = b.or_(b.ptrtoint(a, I64), b.ptrtoint(bmat, I64))
    aligned = b.and_(
        b.icmp_unsigned("==", b.and_(b.or_(k, n), i64(VEC - 1)), i64(0)),
        b.icmp_unsigned("==", b.and_(addresses, i64(15)), i64(0)),
    )
    with b.if_else(aligned, likely=True) as (fast, slow):
        for branch, form in ((fast, "async" if inst.convention == "nvptx" else "vector"), (slow, "plain")):
            with branch:
                acc = _pipeline(ctx, w, el, (a, bmat, k), form, issue, tiles)
                inside_m = b.icmp_signed("<=", b.add(w.i0, i64(w.bm)), m)
                interior = b.and_(inside_m, b.icmp_signed("<=", b.add(w.j0, i64(w.bn)), n))
                with b.if_else(interior, likely=True) as (inside, edge):
                    with inside:
                        _store(w, el, cmat, acc, edge=False)
                    with edge:
                        _store(w, el, cmat, acc, edge=True)
