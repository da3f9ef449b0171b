"""GEMM ``C = A @ B`` in Triton: one source for NVIDIA (PTX) and AMD (AMDGCN).

One program computes a ``BLOCK_M x BLOCK_N`` tile of C, walking K in ``BLOCK_K`` steps with
``tl.dot`` (tensor cores: mma/wgmma on NVIDIA, mfma on AMD) into a float32 accumulator; edge
rows and columns wrap around (``% M``, ``% N``) so that loads stay contiguous and vectorised
(16-byte ``cp.async`` on NVIDIA, ``dwordx4`` on AMD), and K is masked, so any M, N, K works.
Tiles are ordered in groups of ``GROUP_M`` rows so that neighbouring
programs share A and B tiles in L2. ``fp32`` multiplies in IEEE single precision, ``tf32``
takes fp32 inputs through the tensor cores' TF32 (XF32 on CDNA3) path; fp16/bf16 accumulate
in fp32 and round the result to the input dtype.

Importing this module imports Triton: only backends and ``hwbench compile`` do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import triton
import triton.language as tl

from hwbench.core.dtypes import TABLE
from hwbench.core.kernel import Shape
from hwbench.kernels import triton_compat as compat

KERNEL = "gemm"
DTYPES = ("fp16", "bf16", "fp32", "tf32")
#: Triton pointer element type of each dtype's storage.
ELEMENT = {name: TABLE[name].triton for name in DTYPES}
#: ``tl.dot`` input precision of each dtype.
PRECISION = {"fp16": "ieee", "bf16": "ieee", "fp32": "ieee", "tf32": "tf32"}


@triton.jit
def _tile_of(tile, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """(row, column) of tile number ``tile`` in groups of ``GROUP_M`` tile rows (L2 reuse)."""
    per_group = GROUP_M * tiles_n
    first_m = (tile // per_group) * GROUP_M
    group_rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % group_rows
    pid_n = (tile % per_group) // group_rows
    return pid_m, pid_n


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
    pid_m, pid_n = _tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # Rows/columns past the edge wrap around: they read valid memory, their results are never
    # stored, and the indices keep their contiguity (a select would hide it from the vectoriser).
    am = rm % M
    bn = rn % N
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
    major = _major(arch)
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


#: The shape ``hwbench compile`` compiles for: every size a multiple of 16, as most runs are.
COMPILE_SHAPE = {"M": 4096, "N": 4096, "K": 4096}


def _major(arch: str) -> int:
    digits = "".join(ch for ch in arch.split("_")[-1] if ch.isdigit())
    return int(digits[:-1] or 0)


def tuning_space(arch: str, dtype: str, shape: Shape) -> list[Config]:
    """Binding: the configurations a backend tunes over for one case (:func:`configs`)."""
    return configs(arch, dtype)


def plan(a: Any, b: Any, c: Any, dtype: str, config: Config) -> compat.Call:
    """The launch computing ``c = a @ b`` for 2-D ``a``, ``b``, ``c``: torch tensors (on the device,
    or on the CPU under the interpreter) or :class:`~hwbench.kernels.triton_compat.Pointer`
    stand-ins for a compile-only build."""
    m, k = a.shape
    n = b.shape[1]
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    (sam, sak), (sbk, sbn), (scm, scn) = a.stride(), b.stride(), c.stride()
    args = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k}
    args.update(stride_am=sam, stride_ak=sak, stride_bk=sbk, stride_bn=sbn, stride_cm=scm, stride_cn=scn)
    args.update(config.constexprs(), PRECISION=PRECISION[dtype])
    return compat.Call(gemm_kernel, (tiles,), args, config.options())


def launch(a: Any, b: Any, c: Any, dtype: str, config: Config) -> None:
    """Compute ``c = a @ b`` for 2-D tensors (torch tensors on the device, or CPU under the interpreter)."""
    plan(a, b, c, dtype, config).run()


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """What ``hwbench compile`` builds: every dtype at its default configuration, as the call
    :func:`plan` makes for :data:`COMPILE_SHAPE`."""
    m, n, k = COMPILE_SHAPE["M"], COMPILE_SHAPE["N"], COMPILE_SHAPE["K"]
    variants = []
    for dtype in DTYPES:
        elem = ELEMENT[dtype]
        a, b, c = compat.Pointer(elem, (m, k)), compat.Pointer(elem, (k, n)), compat.Pointer(elem, (m, n))
        cfg = default_config(arch, dtype)
        call = plan(a, b, c, dtype, cfg)
        variants.append(
            {
                "name": f"gemm_{dtype}",
                "dtype": dtype,
                "fn": call.fn,
                "args": call.args,
                "options": call.options,
                "config": {**cfg.as_dict(), "shape": dict(COMPILE_SHAPE), "grid": list(call.grid)},
                "precision": PRECISION[dtype],
            }
        )
    return variants


def launch_case(inputs: Mapping[str, Any], out: Any, shape: Shape, dtype: str, config: Config) -> None:
    """Binding: one launch on the case's device tensors ``A``, ``B`` into ``out``."""
    launch(inputs["A"], inputs["B"], out, dtype, config)
