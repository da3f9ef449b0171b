"""Attention forward ``O = softmax(Q K^T / sqrt(D)) V`` in Triton (flash attention, one source
for NVIDIA and AMD).

One program owns ``BLOCK_M`` query rows of one (batch, head) and streams the keys in
``BLOCK_N`` blocks with an online softmax in the exp2 domain (the scale folded with
log2 e), keeping the ``BLOCK_M x HEAD_DIM`` output tile in registers. Key blocks are
visited in two stages: blocks that need no mask (entirely below the causal diagonal and
inside ``Sk``) run without compares; only the diagonal block and the ragged tail pay
for masking. Sequence lengths need not be multiples of the blocks; head dims that are
not a power of two are padded to ``BLOCK_D`` with masked loads. Causal keeps keys
``j <= i`` (top-left aligned, as torch's ``is_causal``). Programs run heaviest first.

Importing this module imports Triton: only backends and ``hwbench compile`` do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import triton
import triton.language as tl

from hwbench.core.dtypes import TABLE
from hwbench.core.kernel import Shape
from hwbench.kernels import triton_compat as compat

KERNEL = "attention"
DTYPES = ("fp16", "bf16", "fp32")
ELEMENT = {name: TABLE[name].triton for name in DTYPES}


@triton.jit
def _key_blocks(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    stride_kn,
    stride_vn,
    offs_m,
    offs_n,
    offs_d,
    lo,
    hi,
    SK,
    qk_scale,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """Fold keys ``[lo, hi)`` into the running (acc, l, m) of one query block."""
    d_ok = offs_d < HEAD_DIM
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < SK
        kt = tl.load(
            k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=col_ok[None, :] & d_ok[:, None], other=0.0
        )
        qk = tl.dot(q, kt, input_precision="ieee")
        if MASKED:
            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None])
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=col_ok[:, None] & d_ok[None, :], other=0.0
        )
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="ieee")
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    SQ,
    SK,
    sm_scale,
    stride_qb,
    stride_qm,
    stride_kb,
    stride_kn,
    stride_vb,
    stride_vn,
    stride_ob,
    stride_om,
    CAUSAL: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One BLOCK_M block of query rows of one (batch * head); q/k/v/o have unit stride in head_dim."""
    start_m = tl.num_programs(0) - 1 - tl.program_id(0)  # causal: the longest rows start first
    bh = tl.program_id(1).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < SQ
    d_ok = offs_d < HEAD_DIM
    q = tl.load(
        q_ptr + bh * stride_qb + offs_m[:, None] * stride_qm + offs_d[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    k_base = k_ptr + bh * stride_kb
    v_base = v_ptr + bh * stride_vb
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    full = (SK // BLOCK_N) * BLOCK_N  # keys [0, full) fill whole blocks
    if CAUSAL:
        hi = tl.minimum((start_m + 1) * BLOCK_M, SK)
        lo = tl.minimum(start_m * BLOCK_M, full)  # BLOCK_M % BLOCK_N == 0: a block boundary
    else:
        hi = SK
        lo = full
    acc, l_i, m_i = _key_blocks(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        stride_kn,
        stride_vn,
        offs_m,
        offs_n,
        offs_d,
        0,
        lo,
        SK,
        qk_scale,
        False,
        CAUSAL,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )
    acc, l_i, m_i = _key_blocks(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        stride_kn,
        stride_vn,
        offs_m,
        offs_n,
        offs_d,
        lo,
        hi,
        SK,
        qk_scale,
        True,
        CAUSAL,
        HEAD_DIM,
        BLOCK_N,
        BLOCK_D,
    )
    out = acc / l_i[:, None]
    tl.store(
        o_ptr + bh * stride_ob + offs_m[:, None] * stride_om + offs_d[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=row_ok[:, None] & d_ok[None, :],
    )


@dataclass(frozen=True)
class Config:
    """Block sizes, warps and pipeline stages of one launch."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    extra: dict[str, Any] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        """Launch/compile options."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, **self.extra}

    def as_dict(self) -> dict[str, Any]:
        """Plain form for results records."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, **self.options()}


def block_d(head_dim: int) -> int:
    """Head dim padded to a power of two, at least 16 (the smallest ``tl.dot`` extent)."""
    return max(16, triton.next_power_of_2(int(head_dim)))


def configs(arch: str, dtype: str, head_dim: int) -> list[Config]:
    """The small tuning space for ``arch`` and ``head_dim``; the first is the default.

    Every default compiles without register spills on sm_90, sm_80, gfx942 and gfx90a with Triton
    3.6 and 3.9 (``tests/kernels/test_triton_defaults.py``): fp16/bf16 take 64-key blocks on NVIDIA
    at both head widths (``wgmma m64n64`` for ``Q K^T`` on sm_90; 32-key blocks would issue
    ``m64n32``); fp32 (IEEE: FMA units on NVIDIA, ``v_mfma_f32`` on AMD) takes 32-row blocks over
    8 warps, 16 keys at a time for 128-wide heads (32 x 32 over 4 warps reaches 255 registers and
    spills about 1 KB on sm_90 there).
    """
    width = block_d(head_dim)
    if dtype == "fp32" or width > 128:
        extra = {"waves_per_eu": 0 if width > 64 else 2} if arch.startswith("gfx") else {}
        if width > 64:  # 128-wide fp32 rows: narrow key blocks keep the score and output tiles in registers
            return [Config(32, 16, 8, 2, extra), Config(64, 16, 8, 2, extra), Config(32, 32, 8, 2, extra)]
        return [Config(32, 32, 8, 2, extra), Config(64, 32, 8, 2, extra), Config(64, 64, 8, 2, extra)]
    if arch.startswith("gfx"):
        space = [
            Config(128, 64, 4, 1, {"waves_per_eu": 2}),
            Config(128, 32, 4, 1, {"waves_per_eu": 2}),
            Config(64, 64, 4, 1, {"waves_per_eu": 2}),
            Config(128, 128, 8, 1, {"waves_per_eu": 2}),
        ]
        if width > 64:  # a 128-wide head: 8 waves and narrow key blocks keep VGPRs unspilled
            space = [Config(128, 32, 8, 1, {"waves_per_eu": 0}), Config(128, 64, 8, 1, {"waves_per_eu": 0})] + space
        return space
    if width > 64:  # 128-wide heads: 8 warps (4 spill at 128 x 64), two K/V blocks in flight
        return [Config(128, 64, 8, 3), Config(128, 128, 8, 3), Config(128, 32, 8, 3), Config(64, 64, 4, 3)]
    return [
        Config(128, 64, 8, 3),
        Config(128, 128, 8, 3),
        Config(128, 64, 4, 3),
        Config(64, 64, 4, 3),
        Config(128, 32, 4, 4),
    ]


def default_config(arch: str, dtype: str, head_dim: int) -> Config:
    """The first configuration of the tuning space."""
    return configs(arch, dtype, head_dim)[0]


#: The sequence lengths ``hwbench compile`` compiles for (batch 1, one head: strides alone matter).
COMPILE_SEQ = 4096


def plan(q: Any, k: Any, v: Any, o: Any, causal: bool, config: Config) -> compat.Call:
    """The launch of ``o = attention(q, k, v)`` for contiguous (batch, heads, seq, head_dim) tensors:
    torch tensors, or :class:`~hwbench.kernels.triton_compat.Pointer` stand-ins for a compile-only build."""
    bsz, heads, sq, d = q.shape
    sk = k.shape[2]
    (_, sqh, sqm, _), (_, skh, skn, _), (_, svh, svn, _), (_, soh, som, _) = (t.stride() for t in (q, k, v, o))
    args = {"q_ptr": q, "k_ptr": k, "v_ptr": v, "o_ptr": o, "SQ": sq, "SK": sk, "sm_scale": 1.0 / math.sqrt(d)}
    args.update(stride_qb=sqh, stride_qm=sqm, stride_kb=skh, stride_kn=skn, stride_vb=svh, stride_vn=svn)
    args.update(stride_ob=soh, stride_om=som, CAUSAL=int(bool(causal)), HEAD_DIM=d)
    args.update(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_D=block_d(d))
    return compat.Call(attention_kernel, (triton.cdiv(sq, config.block_m), bsz * heads), args, config.options())


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """What ``hwbench compile`` builds: each dtype, causal and not, head_dim 64 and 128, default
    config, each as the call :func:`plan` makes for :data:`COMPILE_SEQ` queries and keys."""
    variants = []
    for dtype in DTYPES:
        for head_dim in (64, 128):
            cfg = default_config(arch, dtype, head_dim)
            q, k, v, o = (compat.Pointer(ELEMENT[dtype], (1, 1, COMPILE_SEQ, head_dim)) for _ in range(4))
            for causal in (0, 1):
                call = plan(q, k, v, o, bool(causal), cfg)
                variants.append(
                    {
                        "name": f"attention_{dtype}_d{head_dim}{'_causal' if causal else ''}",
                        "dtype": dtype,
                        "fn": call.fn,
                        "args": call.args,
                        "options": call.options,
                        "config": {**cfg.as_dict(), "head_dim": head_dim, "causal": causal, "seq": COMPILE_SEQ},
                    }
                )
    return variants


def launch(q: Any, k: Any, v: Any, o: Any, causal: bool, config: Config) -> None:
    """``o = attention(q, k, v)`` for contiguous (batch, heads, seq, head_dim) tensors."""
    plan(q, k, v, o, causal, config).run()


def tuning_space(arch: str, dtype: str, shape: Shape) -> list[Config]:
    """Binding: the configurations a backend tunes over for one case (:func:`configs`)."""
    return configs(arch, dtype, shape["head_dim"])


def launch_case(inputs: Mapping[str, Any], out: Any, shape: Shape, dtype: str, config: Config) -> None:
    """Binding: one launch on the case's device tensors ``q``, ``k``, ``v`` into ``out``."""
    launch(inputs["q"], inputs["k"], inputs["v"], out, bool(shape["causal"]), config)
