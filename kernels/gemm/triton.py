"""GEMM ``C = A @ B`` in Triton: one source for NVIDIA (PTX) and AMD (AMDGCN).

One program computes a ``BLOCK_M x BLOCK_N`` tile of C, walking K in ``BLOCK_K``
steps with ``tl.dot`` (tensor cores: mma/wgmma on NVIDIA, mfma on AMD) into a
float32 accumulator. Programs are ordered in groups of ``GROUP_M`` rows of tiles
so that neighbouring programs share A and B tiles in L2. Edges are masked, so
any M, N, K works. ``fp32`` multiplies in IEEE single precision, ``tf32``
takes fp32 inputs through the tensor cores' TF32 (XF32 on CDNA3) path;
fp16/bf16 accumulate in fp32 and round the result to the input dtype.

Importing this module imports Triton: only backends and ``hwbench compile`` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import triton
import triton.language as tl

from hwbench.core.dtypes import TABLE
from hwbench.core.kernel import Shape

KERNEL = "gemm"
DTYPES = ("fp16", "bf16", "fp32", "tf32")
#: Triton pointer element type of each dtype's storage.
ELEMENT = {name: TABLE[name].triton for name in DTYPES}
#: ``tl.dot`` input precision of each dtype.
PRECISION = {"fp16": "ieee", "bf16": "ieee", "fp32": "ieee", "tf32": "tf32"}


@triton.jit
def gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """C[M, N] = A[M, K] @ B[K, N] for one BLOCK_M x BLOCK_N tile."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # Clamped rows/columns read valid memory; their results are never stored.
    am = tl.where(rm < M, rm, 0)
    bn = tl.where(rn < N, rn, 0)
    a_ptrs = a_ptr + am[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k0 * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


@dataclass(frozen=True)
class Config:
    """One point of the tuning space: tile sizes, grouping, warps and pipeline stages."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    extra: dict[str, Any] = field(default_factory=dict)  # backend options, e.g. AMD's waves_per_eu

    def constexprs(self) -> dict[str, int]:
        """The kernel's tile constexprs."""
        return {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k, "GROUP_M": self.group_m}

    def options(self) -> dict[str, Any]:
        """Launch/compile options (``num_warps``, ``num_stages`` and backend extras)."""
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, **self.extra}

    def as_dict(self) -> dict[str, Any]:
        """Plain form for results records."""
        return {**self.constexprs(), **self.options()}


def configs(arch: str, dtype: str) -> list[Config]:
    """The small tuning space for ``arch`` (``sm_90``, ``sm_80``, ``gfx942``, ...); first = default.

    The defaults compile without register spills for sm_80, sm_90, gfx90a and gfx942
    (``hwbench compile`` checks it); fp32 (IEEE) runs on FMA units, not tensor cores, so it
    gets tiles with fewer accumulators per thread.
    """
    wide = dtype in ("fp32", "tf32")
    if arch.startswith("gfx"):
        # CDNA: 64-wide waves, 64 KiB of LDS; Triton's AMD stream pipeliner wants num_stages 2.
        def amd(m: int, n: int, k: int, warps: int, waves_per_eu: int) -> Config:
            return Config(m, n, k, 8, warps, 2, {"waves_per_eu": waves_per_eu})

        if wide:
            return [amd(128, 128, 32, 8, 0), amd(128, 128, 16, 4, 2), amd(64, 128, 32, 4, 2), amd(256, 128, 16, 8, 0)]
        return [amd(256, 128, 64, 8, 0), amd(128, 128, 64, 4, 2), amd(256, 256, 32, 8, 2), amd(128, 256, 64, 8, 0)]
    digits = "".join(ch for ch in arch.split("_")[-1] if ch.isdigit())
    major = int(digits[:-1] or 0)
    if dtype == "fp32":
        return [
            Config(128, 128, 32, 8, 8, 3),
            Config(64, 128, 32, 8, 4, 3),
            Config(128, 64, 32, 8, 4, 3),
            Config(64, 64, 32, 8, 4, 4),
        ]
    bk = 32 if wide else 64
    if major >= 9:  # Hopper: wgmma wants 128-row tiles per warpgroup; 8 warps = two warpgroups
        return [
            Config(128, 128, bk, 8, 8, 4),
            Config(128, 256, bk, 8, 8, 3),
            Config(256, 128, bk, 8, 8, 3),
            Config(128, 128, bk, 8, 4, 4),
        ]
    return [
        Config(128, 128, bk, 8, 8, 3),
        Config(128, 256, bk, 8, 8, 3),
        Config(64, 128, bk, 8, 4, 4),
        Config(128, 64, bk, 8, 4, 4),
    ]


def default_config(arch: str, dtype: str) -> Config:
    """The first configuration of the tuning space."""
    return configs(arch, dtype)[0]


def signature() -> dict[str, str]:
    """Argument types for ahead-of-time compilation (``triton.compiler.ASTSource``), by pointer dtype."""
    return {
        "M": "i32",
        "N": "i32",
        "K": "i32",
        "stride_am": "i32",
        "stride_ak": "i32",
        "stride_bk": "i32",
        "stride_bn": "i32",
        "stride_cm": "i32",
        "stride_cn": "i32",
    }


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """What ``hwbench compile`` builds: every dtype at its default configuration."""
    variants = []
    for dtype in DTYPES:
        cfg = default_config(arch, dtype)
        elem = ELEMENT[dtype]
        sig = {"a_ptr": f"*{elem}", "b_ptr": f"*{elem}", "c_ptr": f"*{elem}", **signature()}
        variants.append(
            {
                "name": f"gemm_{dtype}",
                "dtype": dtype,
                "fn": gemm_kernel,
                "signature": sig,
                "constexprs": {**cfg.constexprs(), "PRECISION": PRECISION[dtype]},
                "options": cfg.options(),
                "config": cfg.as_dict(),
                "precision": PRECISION[dtype],
            }
        )
    return variants


def launch(a: Any, b: Any, c: Any, dtype: str, config: Config) -> None:
    """Compute ``c = a @ b`` for 2-D tensors (torch tensors on the device, or CPU under the interpreter)."""
    m, k = a.shape
    n = b.shape[1]
    grid = (triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n),)
    gemm_kernel[grid](
        a,
        b,
        c,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        **config.constexprs(),
        PRECISION=PRECISION[dtype],
        **config.options(),
    )


def tuning_space(arch: str, dtype: str, shape: Shape) -> list[Config]:
    """Binding: the configurations a backend tunes over for one case (:func:`configs`)."""
    return configs(arch, dtype)


def launch_case(inputs: Mapping[str, Any], out: Any, shape: Shape, dtype: str, config: Config) -> None:
    """Binding: one launch on the case's device tensors ``A``, ``B`` into ``out``."""
    launch(inputs["A"], inputs["B"], out, dtype, config)
