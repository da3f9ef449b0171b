"""GEMM ``C = A @ B`` in Triton: one source for NVIDIA (PTX) and AMD (AMDGCN).

Two kernels. The classic one: one program computes a ``BLOCK_M x BLOCK_N`` tile of C, walking
K in ``BLOCK_K`` steps with ``tl.dot`` (tensor cores: mma/wgmma on NVIDIA, mfma on AMD) into a
float32 accumulator; edge rows and columns wrap around (``% M``, ``% N``) so that loads stay
contiguous and vectorised (16-byte ``cp.async`` on NVIDIA, ``dwordx4`` on AMD), and K is
masked, so any M, N, K works. The persistent TMA one (sm_90+): one program per SM loops over
the tiles, loading through tensor descriptors (``cp.async.bulk.tensor``); it needs rows of
16-byte multiples, and the tuning space falls back to the classic kernel (saying why) where
the shape has not (fp8's TMA kernel, B K-major, is in ``triton_lowp.py``). Tiles are ordered in
groups of ``GROUP_M`` rows so that neighbouring
programs share A and B tiles in L2. ``fp32`` multiplies in IEEE single precision, ``tf32``
takes fp32 inputs through the tensor cores' TF32 (XF32 on CDNA3) path; fp16/bf16 accumulate
in fp32 and round the result to the input dtype.

Importing this module imports Triton: only backends and ``hwbench compile`` do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import triton
import triton.language as tl

from hwbench.core.dtypes import TABLE
from hwbench.core.kernel import Shape
from hwbench.kernels import triton_compat as compat
from hwbench.kernels.gemm.gpu import triton_lowp as lowp
from hwbench.kernels.gemm.gpu.triton_tiles import Config, arch_major, device_sms, tile_of

__all__ = ["Config", "configs", "launch", "launch_case", "plan", "tuning_space", "compile_variants"]

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
    pid_m, pid_n = tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
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


@triton.jit
def gemm_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """C = A @ B through tensor descriptors (TMA on sm_90+), persistent: each program loops over
    tiles ``program_id, program_id + num_programs, ...``. Descriptors zero-fill loads past the
    edges and clip stores, so any M, N, K works."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        pid_m, pid_n = tile_of(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            off_k = ks * BLOCK_K
            a = a_desc.load([off_m, off_k])
            b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def configs(arch: str, dtype: str) -> list[Config]:
    """The small tuning space for ``arch`` (``sm_90``, ``sm_80``, ``gfx942``, ...); first = default
    (fp8 and int8: :func:`hwbench.kernels.gemm.gpu.triton_lowp.configs`).

    The defaults compile without register spills for sm_80, sm_90, gfx90a and gfx942
    (``hwbench compile`` checks it); fp32 (IEEE) runs on FMA units, not tensor cores, so it
    gets tiles with fewer accumulators per thread.
    """
    if dtype in lowp.DTYPES:
        return lowp.configs(arch, dtype)
    wide = dtype in ("fp32", "tf32")
    if arch.startswith("gfx"):
        # CDNA: 64-wide waves, 64 KiB of LDS; Triton's AMD stream pipeliner wants num_stages 2.
        def amd(m: int, n: int, k: int, warps: int, waves_per_eu: int) -> Config:
            return Config(m, n, k, 8, warps, 2, {"waves_per_eu": waves_per_eu})

        if wide:
            return [amd(128, 128, 32, 8, 0), amd(128, 128, 16, 4, 2), amd(64, 128, 32, 4, 2), amd(256, 128, 16, 8, 0)]
        return [amd(256, 128, 64, 8, 0), amd(128, 128, 64, 4, 2), amd(256, 256, 32, 8, 2), amd(128, 256, 64, 8, 0)]
    major = arch_major(arch)
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


#: Dtypes of this module's TMA kernel (fp32 in IEEE precision runs on FMA units, where TMA buys little;
#: fp8 has its own, with a K-major B, in ``triton_lowp.py``).
TMA_DTYPES = ("fp16", "bf16", "tf32")
#: The shape ``hwbench compile`` compiles for: every size a multiple of 16, as most runs are.
COMPILE_SHAPE = {"M": 4096, "N": 4096, "K": 4096}
#: Streaming multiprocessors of an H100/H200 SXM: the persistent grid ``hwbench compile`` assumes.
COMPILE_SMS = 132


def has_tma(arch: str) -> bool:
    """Whether ``arch`` has the Tensor Memory Accelerator (NVIDIA sm_90 and newer)."""
    return arch.startswith("sm_") and arch_major(arch) >= 9


def tma_configs(arch: str, dtype: str) -> list[Config]:
    """The persistent TMA kernel's tuning space on ``arch`` (empty where it has no TMA, for fp32 and
    int8; fp8's: :func:`hwbench.kernels.gemm.gpu.triton_lowp.tma_configs`)."""
    if dtype in lowp.DTYPES:
        return lowp.tma_configs(arch, dtype)
    if not has_tma(arch) or dtype not in TMA_DTYPES:
        return []
    bk = 32 if dtype == "tf32" else 64
    return [Config(128, 128, bk, 8, 8, 4, tma=True), Config(128, 256, bk, 8, 8, 3, tma=True)]


def tma_unfit(dtype: str, shape: Shape) -> str:
    """Why row-major A (M x K), B (K x N) and C (M x N) cannot be TMA descriptors (empty when they can)."""
    size = TABLE[dtype].bytes
    bad = [f"{name}={shape[name]}" for name in ("K", "N") if not compat.tma_strides_ok(int(shape[name]), size)]
    if bad:
        return f"rows of {', '.join(bad)} {dtype} elements are not a multiple of 16 bytes (TMA needs it)"
    return ""


def tuning_space(arch: str, dtype: str, shape: Shape) -> list[Config]:
    """Binding: the configurations a backend tunes over for one case: the persistent TMA kernel's
    (sm_90+, fp16/bf16/tf32, rows of 16-byte multiples) and the classic kernel's (:func:`configs`);
    where the shape rules TMA out on a TMA architecture, the classic configurations say why."""
    if dtype in lowp.DTYPES:
        return lowp.tuning_space(arch, dtype, shape)
    classic = configs(arch, dtype)
    tma = tma_configs(arch, dtype)
    why = tma_unfit(dtype, shape) if tma else ""
    if why:
        return [replace(c, note=f"classic kernel: {why}") for c in classic]
    return tma + classic


def plan(a: Any, b: Any, c: Any, dtype: str, config: Config, num_sms: int | None = None) -> compat.Call:
    """The launch computing ``c = a @ b`` for 2-D row-major ``a``, ``b``, ``c``: torch tensors (on the
    device, or on the CPU under the interpreter) or :class:`~hwbench.kernels.triton_compat.Pointer`
    stand-ins for a compile-only build. ``num_sms`` (the persistent grid) defaults to the device's."""
    m, k = a.shape
    n = b.shape[1]
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    meta = {**config.constexprs(), "PRECISION": PRECISION[dtype]}
    if not config.tma:
        (sam, sak), (sbk, sbn), (scm, scn) = a.stride(), b.stride(), c.stride()
        args = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k}
        strides = {"stride_am": sam, "stride_ak": sak, "stride_bk": sbk, "stride_bn": sbn}
        args.update(strides, stride_cm=scm, stride_cn=scn, **meta)
        return compat.Call(gemm_kernel, (tiles,), args, config.options())
    why = tma_unfit(dtype, {"M": m, "N": n, "K": k})
    if why or any(t.data_ptr() % compat.ALIGN for t in (a, b, c)):
        raise ValueError(f"the TMA GEMM cannot take these tensors ({why or 'a base address is not 16-byte aligned'})")
    descs = {
        "a_desc": compat.descriptor(a, (config.block_m, config.block_k)),
        "b_desc": compat.descriptor(b, (config.block_k, config.block_n)),
        "c_desc": compat.descriptor(c, (config.block_m, config.block_n)),
    }
    programs = max(1, min(num_sms or device_sms(a), tiles))
    return compat.Call(gemm_tma_kernel, (programs,), {**descs, "M": m, "N": n, "K": k, **meta}, config.options())


def launch(a: Any, b: Any, c: Any, dtype: str, config: Config, num_sms: int | None = None) -> None:
    """Compute ``c = a @ b`` for 2-D tensors (torch tensors on the device, or CPU under the interpreter)."""
    plan(a, b, c, dtype, config, num_sms).run()


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """What ``hwbench compile`` builds: every dtype at its default configuration, and on sm_90+ the
    TMA kernel at its first, each as the call :func:`plan` makes for :data:`COMPILE_SHAPE`; then fp8
    and int8 (:func:`hwbench.kernels.gemm.gpu.triton_lowp.compile_variants`)."""
    m, n, k = COMPILE_SHAPE["M"], COMPILE_SHAPE["N"], COMPILE_SHAPE["K"]
    variants = []
    for dtype in DTYPES:
        elem = ELEMENT[dtype]
        a, b, c = compat.Pointer(elem, (m, k)), compat.Pointer(elem, (k, n)), compat.Pointer(elem, (m, n))
        for suffix, cfg in (("", default_config(arch, dtype)), *(("_tma", t) for t in tma_configs(arch, dtype)[:1])):
            call = plan(a, b, c, dtype, cfg, COMPILE_SMS)
            variants.append(
                {
                    "name": f"gemm_{dtype}{suffix}",
                    "dtype": dtype,
                    "fn": call.fn,
                    "args": call.args,
                    "options": call.options,
                    "config": {**cfg.as_dict(), "shape": dict(COMPILE_SHAPE), "grid": list(call.grid)},
                    "precision": PRECISION[dtype],
                }
            )
    return variants + lowp.compile_variants(arch)


def launch_case(inputs: Mapping[str, Any], out: Any, shape: Shape, dtype: str, config: Config) -> None:
    """Binding: one launch on the case's device tensors ``A``, ``B`` into ``out`` (fp8 and int8:
    :func:`hwbench.kernels.gemm.gpu.triton_lowp.launch_case`)."""
    if dtype in lowp.DTYPES:
        lowp.launch_case(inputs, out, shape, dtype, config)
        return
    launch(inputs["A"], inputs["B"], out, dtype, config)
