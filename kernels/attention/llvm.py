"""Attention forward ``O = softmax(Q K^T / sqrt(D)) V`` in llvmlite IR (flash style).

On work-group targets (SPIR-V, NVPTX, AMDGCN) the kernel is :mod:`.simt`'s; on the host CPU
one program handles ``BQ = QV * VW`` query rows of one (batch, head). Scores
are kept transposed, ``S^T[j][i]``, with the vector lanes running over query
rows, so that

* ``S^T = K Q^T`` is FMAs of a transposed Q tile (built once per program)
  with broadcasts of K taken straight from its natural row-major layout;
* the online-softmax row max / row sum are element-wise across the BK key
  vectors: no horizontal reductions at all;
* ``O^T[d][i] += sum_j V[j, d] P^T[j][i]`` is again broadcast-FMA, with the
  BK x QV block of P held in registers and the O^T tile (D x BQ) in L1.

Key blocks past the causal diagonal are never visited (about half the work
for causal). Keys past ``Sk`` or above the diagonal get score ``-inf`` and
read a clamped, in-bounds row; query rows past ``Sq`` are computed on clamped
data and never stored.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import storage_dtype
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output, real
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.attention import simt
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel, default_threads
from hwbench.kernels.llvmir.cpu_launch import prepare as cpu_prepare
from hwbench.kernels.llvmir.irutil import (
    I64,
    PTR,
    const_vec,
    elem_ptr,
    elem_size,
    fma,
    fmax,
    for_range,
    i64,
    imin,
    load,
    load_vec,
    loop_carry,
    scalar_type,
    splat,
    store_vec,
)
from hwbench.kernels.llvmir.simt import SIMTTarget
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget, host_target
from hwbench.kernels.llvmir.vecmath import exp as vexp

DTYPES = ("fp32", "fp64")
KERNEL = "attention"
QV = 2  # query vectors per program
#: Vector registers the scoring loop leaves for the online softmax's temporaries (exp's terms).
SOFTMAX_SPARE = 3
D_MAX = 1024  # head_dim bound baked into the workspace


#: head_dim of the configuration ``hwbench compile`` builds (the longest a GPU keeps in registers).
COMPILE_HEAD_DIM = simt.REG_HEAD_MAX


def simt_config(target: SIMTTarget, dtype: str, shape: Shape | None = None) -> dict[str, int]:
    """The work-group kernel's configuration for ``target``'s device and the shape's head_dim."""
    head_dim = int(shape["head_dim"]) if shape else COMPILE_HEAD_DIM
    return simt.choose_config(target.limits, dtype, target.vector_width(dtype), head_dim)


def key_block(target: CPUTarget) -> int:
    """Keys per block: the ``BK x QV`` score accumulators, the QV query vectors and a broadcast key
    within the target's vector registers, less :data:`SOFTMAX_SPARE` (13 on AVX-512's 32, 5 on
    AVX2's 16)."""
    return max(1, (target.description.vector_registers - QV - 1 - SOFTMAX_SPARE) // QV)


def tile_sizes(dtype: str, vector_width: int, bk: int) -> dict[str, int]:
    """Block shape (compile time) for a dtype and vector width."""
    return {"BQ": QV * vector_width, "BK": bk, "VW": vector_width}


class _Tile:
    """Per-program constants the phases share."""

    def __init__(self, b: ir.IRBuilder, t: ir.Type, vw: int, bk: int, d: ir.Value, qt: ir.Value, ot: ir.Value) -> None:
        self.b, self.t, self.vw, self.bk, self.d, self.qt, self.ot = b, t, vw, bk, d, qt, ot
        self.bq = QV * vw
        self.vty = ir.VectorType(t, vw)
        self.vbytes = vw * elem_size(t)  # tile rows are whole vectors apart


def _load_q_transposed(tl: _Tile, q: ir.Value, i0: ir.Value, sq: ir.Value, scale: ir.Value) -> None:
    """Qt[d][i] = scale * Q[min(i0+i, Sq-1), d]; Ot = 0."""
    b, t = tl.b, tl.t
    last = b.sub(sq, i64(1))
    with for_range(b, i64(0), i64(tl.bq), name="qi") as i:
        row = b.mul(imin(b, b.add(i0, i), last), tl.d)
        with for_range(b, i64(0), tl.d, name="qd") as d:
            x = b.fmul(load(b, elem_ptr(b, q, t, b.add(row, d)), t), scale)
            b.store(x, elem_ptr(b, tl.qt, t, b.add(b.mul(d, i64(tl.bq)), i)))
    zero = ir.Constant(tl.vty, None)
    with for_range(b, i64(0), tl.d, name="oz") as d:
        for v in range(QV):
            store_vec(b, zero, tl.ot, b.add(b.mul(d, i64(tl.bq)), i64(v * tl.vw)), align=tl.vbytes)


def _scores(tl: _Tile, krows: list[ir.Value]) -> list[ir.Value]:
    """acc[j*QV + v] = sum_d K[j, d] * Qt[d][v-th vector]."""
    b, t, vw = tl.b, tl.t, tl.vw

    def step(d: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        base = b.mul(d, i64(tl.bq))
        qv = [load_vec(b, tl.qt, t, b.add(base, i64(v * vw)), vw, align=tl.vbytes) for v in range(QV)]
        out: list[ir.Value] = []
        for j in range(tl.bk):
            kj = splat(b, load(b, elem_ptr(b, krows[j], t, d), t), vw)
            out.extend(fma(b, kj, qv[v], acc[j * QV + v]) for v in range(QV))
        return out

    zero = ir.Constant(tl.vty, None)
    return loop_carry(b, i64(0), tl.d, 1, [zero] * (tl.bk * QV), step, name="sd")


def _mask(tl: _Tile, s: list[ir.Value], j0: ir.Value, i0: ir.Value, sk: ir.Value, causal: ir.Value) -> list[ir.Value]:
    """Scores of keys j >= Sk, or j > i when causal, become -inf."""
    b, vw = tl.b, tl.vw
    neg_inf = splat(b, ir.Constant(tl.t, -math.inf), vw)
    is_causal = b.icmp_signed("!=", causal, i64(0))
    rows = [b.add(splat(b, i0, vw), const_vec(I64, [v * vw + lane for lane in range(vw)])) for v in range(QV)]
    out = []
    for j in range(tl.bk):
        key = b.add(j0, i64(j))
        key_ok = b.icmp_signed("<", key, sk)
        kv = splat(b, key, vw)
        for v in range(QV):
            above = b.and_(b.icmp_signed(">", kv, rows[v]), splat(b, is_causal, vw))
            keep = b.and_(b.not_(above), splat(b, key_ok, vw))
            out.append(b.select(keep, s[j * QV + v], neg_inf))
    return out


def _online_softmax(tl: _Tile, s: list[ir.Value], m: list[ir.Value], lsum: list[ir.Value]):
    """New running max/sum, the rescale factor of the old O and P = exp(S - m)."""
    b = tl.b
    m_new, alpha, l_new, p = [], [], [], [None] * (tl.bk * QV)
    for v in range(QV):
        mx = m[v]
        for j in range(tl.bk):
            mx = fmax(b, mx, s[j * QV + v])
        m_new.append(mx)
        alpha.append(vexp(b, b.fsub(m[v], mx)))
        total = b.fmul(lsum[v], alpha[v])
        for j in range(tl.bk):
            p[j * QV + v] = vexp(b, b.fsub(s[j * QV + v], mx))
            total = b.fadd(total, p[j * QV + v])
        l_new.append(total)
    return m_new, l_new, alpha, p


def _accumulate_pv(tl: _Tile, vrows: list[ir.Value], p: list[ir.Value], alpha: list[ir.Value]) -> None:
    """Ot[d] = Ot[d] * alpha + sum_j V[j, d] * P^T[j]."""
    b, t, vw = tl.b, tl.t, tl.vw
    with for_range(b, i64(0), tl.d, name="pvd") as d:
        base = b.mul(d, i64(tl.bq))
        o = [b.fmul(load_vec(b, tl.ot, t, b.add(base, i64(v * vw)), vw, align=tl.vbytes), alpha[v]) for v in range(QV)]
        for j in range(tl.bk):
            vj = splat(b, load(b, elem_ptr(b, vrows[j], t, d), t), vw)
            o = [fma(b, vj, p[j * QV + v], o[v]) for v in range(QV)]
        for v in range(QV):
            store_vec(b, o[v], tl.ot, b.add(base, i64(v * vw)), align=tl.vbytes)


def _store_out(tl: _Tile, ctx: KernelContext, out: ir.Value, i0: ir.Value, sq: ir.Value, lsum: list[ir.Value]) -> None:
    """out[i0+i, d] = Ot[d][i] / lsum[i] for the valid rows."""
    b, t = tl.b, tl.t
    inv = ctx.local_array(t, tl.bq)
    one = splat(b, ir.Constant(t, 1.0), tl.vw)
    for v in range(QV):
        store_vec(b, b.fdiv(one, lsum[v]), inv, i64(v * tl.vw), align=tl.vbytes)
    with for_range(b, i64(0), imin(b, i64(tl.bq), b.sub(sq, i0)), name="oi") as i:
        row = b.mul(b.add(i0, i), tl.d)
        r = load(b, elem_ptr(b, inv, t, i), t)
        with for_range(b, i64(0), tl.d, name="od") as d:
            x = load(b, elem_ptr(b, tl.ot, t, b.add(b.mul(d, i64(tl.bq)), i)), t)
            b.store(b.fmul(x, r), elem_ptr(b, out, t, b.add(row, d)))


def build(target: LLVMTarget, dtype: str, config: dict[str, int] | None = None) -> ir.Module:
    """The attention kernel module for ``target``: :mod:`.simt`'s work-group kernel on a SIMT
    target (in ``config``, default :func:`simt_config`), else the CPU's SIMD kernel.

    Entry ``attention(q, k, v, out, Sq, Sk, D, causal, scale)`` over the grid
    ``(ceil(Sq / BQ), batch * heads)``; ``D <= D_MAX``.
    """
    if isinstance(target, SIMTTarget):
        return simt.build(target, dtype, config or simt_config(target, dtype))
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no attention lowering for {type(target).__name__}")
    t = scalar_type(dtype)
    vw = target.vector_width(dtype)
    bq = QV * vw
    bk = key_block(target)
    d_max = D_MAX
    module = target.new_module(f"{KERNEL}_{dtype}")

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        q, k, v, out, sq, sk, d, causal, scale = args
        b = ctx.builder
        tl = _Tile(b, t, vw, bk, d, ctx.local_array(t, d_max * bq), ctx.local_array(t, d_max * bq))
        bh = ctx.program_id(1)
        i0 = b.mul(ctx.program_id(0), i64(bq))
        q_off, kv_off = b.mul(bh, b.mul(sq, d)), b.mul(bh, b.mul(sk, d))
        kb, vb = elem_ptr(b, k, t, kv_off), elem_ptr(b, v, t, kv_off)
        _load_q_transposed(tl, elem_ptr(b, q, t, q_off), i0, sq, scale)
        kend = b.select(b.icmp_signed("!=", causal, i64(0)), imin(b, sk, b.add(i0, i64(bq))), sk)
        neg_inf = splat(b, ir.Constant(t, -math.inf), vw)
        zero = ir.Constant(tl.vty, None)
        last_key = b.sub(sk, i64(1))

        def key_block(j0: ir.Value, state: list[ir.Value]) -> list[ir.Value]:
            m, lsum = state[:QV], state[QV:]
            rows = [b.mul(imin(b, b.add(j0, i64(j)), last_key), d) for j in range(tl.bk)]
            s = _scores(tl, [elem_ptr(b, kb, t, r) for r in rows])
            s = _mask(tl, s, j0, i0, sk, causal)
            m, lsum, alpha, p = _online_softmax(tl, s, m, lsum)
            _accumulate_pv(tl, [elem_ptr(b, vb, t, r) for r in rows], p, alpha)
            return m + lsum

        state = loop_carry(b, i64(0), kend, bk, [neg_inf] * QV + [zero] * QV, key_block, name="kb")
        _store_out(tl, ctx, elem_ptr(b, out, t, q_off), i0, sq, state[QV:])

    target.define_kernel(module, KERNEL, [PTR, PTR, PTR, PTR, I64, I64, I64, I64, t], body)
    return module


def launch(
    shape: Shape, dtype: str, target: LLVMTarget, workers: int = 1, config: dict[str, int] | None = None
) -> Launch:
    """``attention(q, k, v, o, Sq, Sk, D, causal, scale)`` over ``(ceil(Sq/BQ), batch * heads)``
    programs; on the CPU a problem under 2 MFLOP runs on one worker. ValueError for a head
    dimension past what the target's per-program memory holds."""
    bsz, heads = int(shape["batch"]), int(shape["heads"])
    sq, sk, d = int(shape["seq_q"]), int(shape["seq_k"]), int(shape["head_dim"])
    causal = int(shape.get("causal", 0))
    if isinstance(target, SIMTTarget):
        return simt.launch(shape, dtype, target, config or simt_config(target, dtype, shape))
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no attention lowering for {type(target).__name__}")
    limit = D_MAX
    if not 1 <= d <= limit:
        raise ValueError(f"head_dim must be in [1, {limit}] (what fits the workspace for {dtype}), got {d}")
    vw = target.vector_width(dtype)
    grid = (-(-sq // (QV * vw)), bsz * heads) if sk > 0 else (0, 0)
    workers = 1 if 4.0 * bsz * heads * sq * sk * d < 2e6 else workers
    args = (buffer("q"), buffer("k"), buffer("v"), output(), *(i64_arg(x) for x in (sq, sk, d, causal)))
    args += (real(1.0 / math.sqrt(d), dtype),)
    record: dict[str, Any] = {"kernel": KERNEL, "dtype": dtype, "target": target.name, "causal": causal}
    record.update(max_head_dim=limit, **tile_sizes(dtype, vw, key_block(target)))
    record["derived_from"] = target.description.as_config()
    return Launch(KERNEL, args, grid, (bsz, heads, sq, d), config=record, workers=workers)


def prepare_cpu(
    inputs: dict[str, np.ndarray],
    shape: dict[str, int],
    dtype: str,
    threads: int | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind attention for the host CPU; compiles on first use per (dtype, target).

    ``target`` overrides the CPU model/features (default: the host), for tests.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    np_dtype = storage_dtype(dtype)
    bsz, heads = int(shape["batch"]), int(shape["heads"])
    sq, sk, d = int(shape["seq_q"]), int(shape["seq_k"]), int(shape["head_dim"])
    for name, s in (("q", sq), ("k", sk), ("v", sk)):
        arr = inputs[name]
        if arr.shape != (bsz, heads, s, d) or arr.dtype != np_dtype:
            raise ValueError(f"{name} must be ({bsz},{heads},{s},{d}) {np_dtype.name}")
    target = target or host_target()
    threads = threads or default_threads()
    return cpu_prepare(build, inputs, dtype, launch(shape, dtype, target, threads), threads, target)
