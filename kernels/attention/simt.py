"""Attention forward ``O = softmax(Q K^T / sqrt(D)) V`` as a work-group (SIMT) kernel in llvmlite IR.

Flash style with an online softmax, written once for SPIR-V, NVPTX and AMDGCN. Work-group
``g`` of ``WG`` work-items covers ``WG * BQ`` query rows of one (batch, head); work-item
``w`` owns ``BQ = QV * VW`` of them, with the ``VW`` vector lanes running over rows, so
every step is a broadcast FMA and the running max and sum need no reductions:

* ``S^T[j] = sum_d K[j, d] * Qt[d]`` for a block of ``BK`` keys;
* keys past ``Sk`` or above the diagonal (causal) score ``-inf``;
* ``m' = max(m, S)``, ``P = exp(S - m')``, ``l' = l * exp(m - m') + sum P``;
* ``Ot[d] = Ot[d] * exp(m - m') + sum_j V[j, d] * P[j]``.

``LOCAL = 1`` stages each block of K and V in shared memory (every work-item copies its
share, then a barrier); ``LOCAL = 0`` reads them from global memory (caches stage them on
a CPU device). ``REG = 1`` keeps the ``HD x BQ`` tiles of Q and O in registers (the head
loop unrolled: GPUs); ``REG = 0`` keeps them in per-work-item private arrays (CPU devices,
long heads). The head dimension ``HD`` is a compile-time constant. Query rows past ``Sq``
compute on a clamped row and are never stored; causal groups stop after their last row's
diagonal block.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output, real
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.llvmir.irutil import I32, I64, PTR, fmax, for_range, i64, imin, loop_carry
from hwbench.kernels.llvmir.simt import DeviceLimits, Elements, SIMTContext, SIMTTarget, compute_dtype

KERNEL = "attention"
DTYPES = ("fp32", "fp64", "fp16", "bf16")
CONFIG_KEYS = ("HD", "VW", "QV", "WG", "BK", "LOCAL", "REG")
#: Longest fp32 head a GPU work-item keeps in registers (two HD x BQ tiles: 128 registers at 64;
#: fp64 takes two registers an element, so half of it).
REG_HEAD_MAX = 64


def choose_config(limits: DeviceLimits, dtype: str, vector_width: int, head_dim: int) -> dict[str, int]:
    """A CPU device: one work-item per SIMD vector of query rows, K and V from its caches, the
    tiles in private memory (as the OpenCL C kernel); a GPU: 128 threads, one query row each,
    K and V blocks staged in shared memory, the tiles in registers for heads up to 64 (fp64: 32;
    longer heads keep them in private memory)."""
    if limits.kind == "cpu":
        return {"HD": head_dim, "VW": vector_width, "QV": 1, "WG": 1, "BK": 16, "LOCAL": 0, "REG": 0}
    cfg = {"HD": head_dim, "VW": 1, "QV": 1, "WG": min(128, limits.max_work_group), "BK": 16, "LOCAL": 1}
    cfg["REG"] = int(head_dim * DTYPE_BYTES[compute_dtype(dtype)] <= REG_HEAD_MAX * 4)
    while shared_bytes(cfg, dtype) > limits.local_mem_bytes and cfg["BK"] > 1:
        cfg["BK"] //= 2
    return cfg


def shared_bytes(cfg: Mapping[str, int], dtype: str) -> int:
    """Shared memory of a work-group: one block of K and one of V."""
    return 2 * cfg["BK"] * cfg["HD"] * DTYPE_BYTES[compute_dtype(dtype)] if cfg["LOCAL"] else 0


class _Tile:
    """A work-item's ``HD x QV`` tile of ``VW``-lane vectors: SSA values or a private array."""

    def __init__(self, ctx: SIMTContext, el: Elements, cfg: Mapping[str, int], init: ir.Value) -> None:
        self.b, self.el, self.cfg = ctx.builder, el, cfg
        self.qv, self.vw = cfg["QV"], cfg["VW"]
        self.values: list[ir.Value] = []
        self.array: ir.Value | None = None
        if cfg["REG"]:
            self.values = [init] * (cfg["HD"] * self.qv)
        else:
            self.array = ctx.private(el.ty, cfg["HD"] * self.qv * self.vw)

    def index(self, d: ir.Value | int, v: int) -> ir.Value:
        d = i64(d) if isinstance(d, int) else d
        return self.b.add(self.b.mul(d, i64(self.qv * self.vw)), i64(v * self.vw))

    def get(self, d: ir.Value | int, v: int) -> ir.Value:
        if self.array is None:
            assert isinstance(d, int)
            return self.values[d * self.qv + v]
        return self.el.load_vec(self.array, self.index(d, v))

    def set(self, d: ir.Value | int, v: int, value: ir.Value) -> None:
        if self.array is None:
            assert isinstance(d, int)
            self.values[d * self.qv + v] = value
        else:
            self.el.store_vec(value, self.array, self.index(d, v))


def _over_head(tile_b: ir.IRBuilder, cfg: Mapping[str, int], body: Callable[[ir.Value | int], None], name: str) -> None:
    """``body(d)`` for every head index: unrolled in registers, a loop over a private array."""
    if cfg["REG"]:
        for d in range(cfg["HD"]):
            body(d)
    else:
        with for_range(tile_b, i64(0), i64(cfg["HD"]), name=name) as d:
            body(d)


def build(target: SIMTTarget, dtype: str, cfg: Mapping[str, int]) -> ir.Module:
    """The SIMT attention module: entry ``attention(q, k, v, o, Sq, Sk, causal, scale)`` over
    work-groups of ``WG`` work-items, grid ``(ceil(Sq / (WG*BQ)), batch*heads)``."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    module = target.new_module(f"{KERNEL}_{dtype}")
    compute = Elements(ir.IRBuilder(), compute_dtype(dtype), 1).ty

    def body(ctx: SIMTContext, args: list[ir.Argument]) -> None:
        _attention(ctx, args, dtype, cfg)

    params = [PTR, PTR, PTR, PTR, I64, I64, I64, compute]
    target.define_simt_kernel(module, KERNEL, params, body, (cfg["WG"], 1, 1))
    return module


def _attention(ctx: SIMTContext, args: list[ir.Argument], dtype: str, cfg: Mapping[str, int]) -> None:
    q, k, v, out, sq, sk, causal, scale = args
    b = ctx.builder
    hd, vw, qv, wg, bk = cfg["HD"], cfg["VW"], cfg["QV"], cfg["WG"], cfg["BK"]
    bq = qv * vw
    el = Elements(b, dtype, vw)  # global memory, in the storage dtype
    cel = Elements(b, compute_dtype(dtype), vw)  # tiles and shared memory, in the compute dtype
    group, bh = ctx.group_id(0), ctx.group_id(1)
    i0 = b.mul(b.add(b.mul(group, i64(wg)), ctx.local_id(0)), i64(bq))
    q_off, kv_off = b.mul(bh, b.mul(sq, i64(hd))), b.mul(bh, b.mul(sk, i64(hd)))
    last_row, last_key = b.sub(sq, i64(1)), b.sub(sk, i64(1))
    rows = [[b.add(i0, i64(vv * vw + lane)) for lane in range(vw)] for vv in range(qv)]
    qrows = [[b.add(q_off, b.mul(imin(b, r, last_row), i64(hd))) for r in rr] for rr in rows]
    zero, neg_inf = cel.const(0.0), cel.const(-math.inf)

    qt = _Tile(ctx, cel, cfg, zero)
    ot = _Tile(ctx, cel, cfg, zero)
    scale_v = cel.splat(scale)

    def load_q(d: ir.Value | int) -> None:
        dd = i64(d) if isinstance(d, int) else d
        for vv in range(qv):
            qt.set(d, vv, b.fmul(el.gather(q, [b.add(r, dd) for r in qrows[vv]]), scale_v))
            if not cfg["REG"]:
                ot.set(d, vv, zero)

    _over_head(b, cfg, load_q, "qd")

    # The group's last row bounds its keys when causal (uniform over the group, as barriers need).
    group_end = imin(b, b.mul(b.add(group, i64(1)), i64(wg * bq)), sq)
    kend = b.select(b.icmp_signed("!=", causal, i64(0)), imin(b, sk, group_end), sk)
    kv_tiles = (ctx.shared(cel.ty, bk * hd), ctx.shared(cel.ty, bk * hd)) if cfg["LOCAL"] else None
    is_causal = b.icmp_signed("!=", causal, i64(0))
    scalar = Elements(b, compute_dtype(dtype), 1)

    def key_block(j0: ir.Value, state: list[ir.Value]) -> list[ir.Value]:
        m, lsum = state[:qv], state[qv : 2 * qv]
        if cfg["REG"]:
            ot.values = list(state[2 * qv :])
        key_rows = [b.add(kv_off, b.mul(imin(b, b.add(j0, i64(j)), last_key), i64(hd))) for j in range(bk)]
        if kv_tiles is not None:
            _stage_kv(ctx, el, scalar, cfg, k, v, kv_tiles, j0, kv_off, last_key)
            ctx.barrier()

        def kv_at(which: int, j: int, d: ir.Value | int) -> ir.Value:
            dd = i64(d) if isinstance(d, int) else d
            if kv_tiles is not None:
                return scalar.load(kv_tiles[which], b.add(i64(j * hd), dd))
            return Elements(b, dtype, 1).load(k if which == 0 else v, b.add(key_rows[j], dd))

        s = _scores(b, cfg, cel, qt, kv_at)
        s = _mask(b, cel, s, j0, rows, sk, is_causal, neg_inf, bk, qv)
        m_new, alpha, p, l_new = [], [], [], []
        for vv in range(qv):
            mx = m[vv]
            for j in range(bk):
                mx = fmax(b, mx, s[j * qv + vv])
            m_new.append(mx)
            alpha.append(ctx.target.exp(b, b.fsub(m[vv], mx)))
            total = b.fmul(lsum[vv], alpha[vv])
            for j in range(bk):
                pj = ctx.target.exp(b, b.fsub(s[j * qv + vv], mx))
                p.append((j, vv, pj))
                total = b.fadd(total, pj)
            l_new.append(total)
        pmat = {(j, vv): pj for j, vv, pj in p}

        def accumulate(d: ir.Value | int) -> None:
            for vv in range(qv):
                o = b.fmul(ot.get(d, vv), alpha[vv])
                for j in range(bk):
                    o = cel.fma(cel.splat(kv_at(1, j, d)), pmat[(j, vv)], o)
                ot.set(d, vv, o)

        _over_head(b, cfg, accumulate, "pvd")
        if kv_tiles is not None:
            ctx.barrier()
        return m_new + l_new + (list(ot.values) if cfg["REG"] else [])

    init = [neg_inf] * qv + [zero] * qv + (list(ot.values) if cfg["REG"] else [])
    state = loop_carry(b, i64(0), kend, bk, init, key_block, name="kb")
    if cfg["REG"]:
        ot.values = list(state[2 * qv :])
    _store(b, cfg, el, cel, ot, out, q_off, rows, sq, state[qv : 2 * qv])


def _stage_kv(
    ctx: SIMTContext,
    el: Elements,
    scalar: Elements,
    cfg: Mapping[str, int],
    k: ir.Value,
    v: ir.Value,
    tiles: tuple[ir.Value, ir.Value],
    j0: ir.Value,
    kv_off: ir.Value,
    last_key: ir.Value,
) -> None:
    """Copy this work-item's share of the ``BK x HD`` blocks of K and V into shared memory
    (keys past Sk read the last key: their scores are masked)."""
    b = ctx.builder
    hd, wg, bk = cfg["HD"], cfg["WG"], cfg["BK"]
    total = bk * hd
    src = Elements(b, el.dtype, 1)
    lid = ctx.linear_id()
    for s in range(-(-total // wg)):
        e = b.add(lid, i64(s * wg))
        key, d = b.udiv(e, i64(hd)), b.urem(e, i64(hd))
        where = b.add(kv_off, b.add(b.mul(imin(b, b.add(j0, key), last_key), i64(hd)), d))

        if total % wg and s == total // wg:  # the last round is partial
            with b.if_then(b.icmp_signed("<", e, i64(total))):
                _copy_kv(scalar, src, (k, v), tiles, where, e)
        else:
            _copy_kv(scalar, src, (k, v), tiles, where, e)


def _copy_kv(
    scalar: Elements,
    src: Elements,
    mats: tuple[ir.Value, ir.Value],
    tiles: tuple[ir.Value, ir.Value],
    where: ir.Value,
    slot: ir.Value,
) -> None:
    for mat, tile in zip(mats, tiles, strict=True):
        scalar.store(src.load(mat, where), tile, slot)


def _scores(
    b: ir.IRBuilder,
    cfg: Mapping[str, int],
    cel: Elements,
    qt: _Tile,
    kv_at: Callable[[int, int, ir.Value | int], ir.Value],
) -> list[ir.Value]:
    """``S^T[j][v] = sum_d K[j, d] * Qt[d][v]`` for the block's keys."""
    bk, qv = cfg["BK"], cfg["QV"]
    zero = cel.const(0.0)
    if cfg["REG"]:
        acc = [zero] * (bk * qv)
        for d in range(cfg["HD"]):
            qd = [qt.get(d, vv) for vv in range(qv)]
            for j in range(bk):
                kj = cel.splat(kv_at(0, j, d))
                for vv in range(qv):
                    acc[j * qv + vv] = cel.fma(kj, qd[vv], acc[j * qv + vv])
        return acc

    def step(d: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        qd = [qt.get(d, vv) for vv in range(qv)]
        out: list[ir.Value] = []
        for j in range(bk):
            kj = cel.splat(kv_at(0, j, d))
            out.extend(cel.fma(kj, qd[vv], acc[j * qv + vv]) for vv in range(qv))
        return out

    return loop_carry(b, i64(0), i64(cfg["HD"]), 1, [zero] * (bk * qv), step, name="sd")


def _mask(
    b: ir.IRBuilder,
    cel: Elements,
    s: list[ir.Value],
    j0: ir.Value,
    rows: list[list[ir.Value]],
    sk: ir.Value,
    is_causal: ir.Value,
    neg_inf: ir.Value,
    bk: int,
    qv: int,
) -> list[ir.Value]:
    """Scores of keys ``>= Sk``, or above a row's diagonal when causal, become ``-inf``."""
    out = []
    for j in range(bk):
        key = b.add(j0, i64(j))
        key_ok = b.icmp_signed("<", key, sk)
        for vv in range(qv):
            lanes = [b.and_(key_ok, b.not_(b.and_(is_causal, b.icmp_signed(">", key, row)))) for row in rows[vv]]
            if cel.vw == 1:
                keep = lanes[0]
            else:
                keep = ir.Constant(ir.VectorType(ir.IntType(1), cel.vw), ir.Undefined)
                for lane, ok in enumerate(lanes):
                    keep = b.insert_element(keep, ok, ir.Constant(I32, lane))
            out.append(b.select(keep, s[j * qv + vv], neg_inf))
    return out


def _store(
    b: ir.IRBuilder,
    cfg: Mapping[str, int],
    el: Elements,
    cel: Elements,
    ot: _Tile,
    out: ir.Value,
    q_off: ir.Value,
    rows: list[list[ir.Value]],
    sq: ir.Value,
    lsum: list[ir.Value],
) -> None:
    """``O[row, d] = Ot[d][row] / l[row]`` for the work-item's rows below ``Sq``."""
    hd, qv = cfg["HD"], cfg["QV"]
    inv = [b.fdiv(cel.const(1.0), lsum[vv]) for vv in range(qv)]
    scaled = {}
    if cfg["REG"]:
        for d in range(hd):
            for vv in range(qv):
                scaled[(d, vv)] = b.fmul(ot.get(d, vv), inv[vv])
    for vv in range(qv):
        for lane, row in enumerate(rows[vv]):
            with b.if_then(b.icmp_signed("<", row, sq)):
                base = b.add(q_off, b.mul(row, i64(hd)))
                one = Elements(b, el.dtype, 1)
                if cfg["REG"]:
                    for d in range(hd):
                        one.store(cel.lane(scaled[(d, vv)], lane), out, b.add(base, i64(d)))
                else:
                    r = cel.lane(inv[vv], lane)
                    with for_range(b, i64(0), i64(hd), name="od") as d:
                        one.store(b.fmul(cel.lane(ot.get(d, vv), lane), r), out, b.add(base, d))


def launch(shape: Shape, dtype: str, target: SIMTTarget, cfg: Mapping[str, int]) -> Launch:
    """``attention(q, k, v, o, Sq, Sk, causal, scale)`` over ``(ceil(Sq/(WG*BQ)), batch*heads)``
    work-groups of ``WG`` work-items."""
    bsz, heads = int(shape["batch"]), int(shape["heads"])
    sq, sk, d = int(shape["seq_q"]), int(shape["seq_k"]), int(shape["head_dim"])
    if d != cfg["HD"]:
        raise ValueError(f"this build is for head_dim {cfg['HD']}, not {d}")
    per_group = cfg["WG"] * cfg["QV"] * cfg["VW"]
    grid = (-(-sq // per_group), bsz * heads) if sk > 0 and sq > 0 else (0, 0)
    args = (buffer("q"), buffer("k"), buffer("v"), output(), *(i64_arg(x) for x in (sq, sk, int(shape["causal"]))))
    args += (real(1.0 / math.sqrt(d), "fp64" if dtype == "fp64" else "fp32"),)
    config = {
        "kernel": KERNEL,
        "dtype": dtype,
        "target": target.name,
        "model": "simt",
        **{key: int(cfg[key]) for key in CONFIG_KEYS},
        "BQ": cfg["QV"] * cfg["VW"],
        "work_group": [int(cfg["WG"])],
        "shared_bytes": shared_bytes(cfg, dtype),
        "device_kind": target.limits.kind,
    }
    return Launch(KERNEL, args, grid, (bsz, heads, sq, d), local=(cfg["WG"], 1), config=config)
