"""Low-precision GEMM in Triton: fp8 (e4m3, per-tensor scales, fp32 accumulate and output) and int8
(int8 x int8 summed exactly in int32), one source for NVIDIA (PTX) and AMD (AMDGCN).

One program computes a ``BLOCK_M x BLOCK_N`` tile of C, walking K in ``BLOCK_K`` steps with
``tl.dot`` on 8-bit operands: on NVIDIA wgmma (sm_90: ``.e4m3`` / ``.s8``) or mma (sm_89 fp8, sm_80
int8), on AMD mfma (``v_mfma_f32_*_fp8_fp8`` on gfx942/gfx950, ``v_mfma_i32_*_i8``). fp8 adds each
``tl.dot``'s sum (BLOCK_K products, summed by the tensor cores) into the fp32 accumulator in fp32
(``max_num_imprecise_acc=BLOCK_K``: Hopper's fast accumulation across the whole K is off, as
``torch._scaled_mm``'s ``use_fast_accum=False``), and the tile is multiplied by ``scale_a * scale_b`` (the
per-tensor scales as ``torch._scaled_mm`` takes them: one-element fp32 tensors) before it is
stored. Edge rows and columns wrap around (``% M``, ``% N``), K is masked, so any M, N, K works; B
may be row-major or K-major (fp8 takes it K-major, as wgmma and cuBLASLt's fp8 GEMM want).

fp8 also has the persistent TMA kernel (sm_90+, as fp16/bf16/tf32 in ``triton.py``): one program per
SM loops over the tiles, A and C through tensor descriptors, B through a descriptor over ``B^T``
(``[N][K]`` row-major: the K-major B the backends lay out, read as it is stored, no copy), so both
wgmma operands reach shared memory K-major, as ``wgmma ... .e4m3.e4m3`` needs them. Its rows must
be 16-byte multiples (K for A and ``B^T``, 4 N for the fp32 C); the tuning space falls back to the
classic kernel, saying why, where they are not.

Importing this module imports Triton: only backends and ``hwbench compile`` do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import triton
import triton.language as tl

from hwbench.core.dtypes import AMD_FP8, gpu_unsupported
from hwbench.core.kernel import Shape
from hwbench.kernels import triton_compat as compat
from hwbench.kernels.gemm.gpu.triton_tiles import Config, arch_major, device_sms, tile_of

DTYPES = ("fp8", "int8")
#: The shape ``hwbench compile`` compiles for (every size a multiple of 16, as most runs are).
COMPILE_SHAPE = {"M": 4096, "N": 4096, "K": 4096}
#: Streaming multiprocessors of an H100/H200 SXM: the persistent grid ``hwbench compile`` assumes.
COMPILE_SMS = 132


@triton.jit
def gemm_lowp_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    scale_a_ptr,
    scale_b_ptr,
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
    SCALED: tl.constexpr,
):
    """C[M, N] = scale_a * scale_b * (A[M, K] @ B[K, N]) in fp32 (``SCALED``, fp8 operands), or
    A @ B in int32 (int8 operands), for one BLOCK_M x BLOCK_N tile."""
    pid_m, pid_n = tile_of(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    am = rm % M  # edge rows and columns wrap: valid loads, contiguous indices, results never stored
    bn = rn % N
    a_ptrs = a_ptr + am[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + bn[None, :] * stride_bn
    if SCALED:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k0 * BLOCK_K
        if SCALED:  # fp8: the zero past K is a float
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
        else:
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0)
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)  # Triton 3.6 does not take it from acc
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if SCALED:
        acc = acc * (tl.load(scale_a_ptr) * tl.load(scale_b_ptr))
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def gemm_fp8_tma_kernel(
    a_desc,
    bt_desc,
    c_desc,
    scale_a_ptr,
    scale_b_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """C = scale_a * scale_b * (A @ B) in fp32 for fp8 A [M, K] and K-major B (``bt_desc`` covers
    ``B^T`` [N, K]), persistent: each program loops over tiles ``program_id, program_id +
    num_programs, ...``; descriptors zero-fill loads past the edges and clip stores."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    scale = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0), flatten=True):
        pid_m, pid_n = tile_of(tile, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            off_k = ks * BLOCK_K
            a = a_desc.load([off_m, off_k])
            bt = bt_desc.load([off_n, off_k])
            acc = tl.dot(a, bt.T, acc, max_num_imprecise_acc=BLOCK_K)
        c_desc.store([off_m, off_n], acc * scale)


def element(arch: str, dtype: str) -> str:
    """Triton's element type of ``dtype``'s storage on ``arch`` (fp8: ``fp8e4b8`` where the matrix cores
    take e4m3fnuz, gfx942; ``fp8e4nv`` elsewhere)."""
    if dtype == "int8":
        return "i8"
    return "fp8e4b8" if AMD_FP8.get(arch) == "fnuz" else "fp8e4nv"


def configs(arch: str, dtype: str) -> list[Config]:
    """The tuning space of ``dtype`` (fp8 or int8) on ``arch``; first = default, empty where the
    architecture has no tensor-core path for it (:func:`hwbench.core.dtypes.gpu_unsupported`).

    One-byte operands take BLOCK_K twice bf16's (the same bytes per stage). On Hopper fp8 keeps a
    second fp32 accumulator (each dot's sum is added into the total in fp32), so its first tile is
    128 x 128 x 128 where int8's is 128 x 256 x 128, both with two warpgroups; Ampere/Ada tiles keep
    8 warps for 128 x 128 (4 spill); CDNA keeps Triton's AMD pipeliner at two stages. Every default
    compiles without spills (``hwbench compile`` shows it).
    """
    if gpu_unsupported(dtype, arch):
        return []
    if arch.startswith("gfx"):

        def amd(m: int, n: int, k: int, warps: int, waves_per_eu: int) -> Config:
            return Config(m, n, k, 8, warps, 2, {"waves_per_eu": waves_per_eu})

        return [amd(256, 128, 128, 8, 0), amd(128, 128, 128, 4, 2), amd(256, 256, 64, 8, 0), amd(128, 256, 128, 8, 0)]
    if arch_major(arch) >= 9 and dtype == "fp8":  # two fp32 accumulators: the fp8 sum of one dot, the total
        return [
            Config(128, 128, 128, 8, 8, 4),
            Config(256, 128, 128, 8, 8, 3),
            Config(128, 128, 256, 8, 8, 3),
            Config(128, 128, 128, 8, 4, 4),
        ]
    if arch_major(arch) >= 9:
        return [
            Config(128, 256, 128, 8, 8, 3),
            Config(128, 128, 128, 8, 8, 4),
            Config(256, 128, 128, 8, 8, 3),
            Config(128, 128, 128, 8, 4, 4),
        ]
    return [
        Config(128, 128, 64, 8, 8, 3),
        Config(128, 128, 128, 8, 8, 3),
        Config(64, 128, 128, 8, 4, 4),
        Config(128, 64, 128, 8, 4, 4),
    ]


def tma_configs(arch: str, dtype: str) -> list[Config]:
    """The persistent TMA kernel's tuning space (fp8 on sm_90 and newer; empty elsewhere). 128 x 128
    tiles over two warpgroups: the fp32 C tile goes out through shared memory as well, so stages x (A
    + B tiles) + C stays under 227 KB, and a 128 x 256 tile's two fp32 accumulators spill."""
    if dtype != "fp8" or not arch.startswith("sm_") or arch_major(arch) < 9:
        return []
    return [Config(128, 128, 128, 8, 8, s, tma=True) for s in (4, 3)] + [Config(128, 128, 64, 8, 8, 5, tma=True)]


def tma_unfit(shape: Shape) -> str:
    """Why fp8 A (M x K), ``B^T`` (N x K) and the fp32 C (M x N) cannot be TMA descriptors (empty when they can)."""
    rows = (("K", 1), ("N", 4))  # bytes of an element in the rows K long (A, B^T) and N long (C)
    bad = [f"{name}={shape[name]}" for name, size in rows if not compat.tma_strides_ok(int(shape[name]), size)]
    if bad:
        return f"rows of {', '.join(bad)} (fp8 A and B^T, fp32 C) are not a multiple of 16 bytes (TMA needs it)"
    return ""


def tuning_space(arch: str, dtype: str, shape: Shape) -> list[Config]:
    """Binding: the configurations a backend tunes over for one case: fp8's persistent TMA kernel
    (sm_90+, rows of 16-byte multiples) first, then the classic kernel's (:func:`configs`); where the
    shape rules TMA out on a TMA architecture, the classic configurations say why."""
    classic = configs(arch, dtype)
    tma = tma_configs(arch, dtype)
    why = tma_unfit(shape) if tma else ""
    if why:
        return [replace(c, note=f"classic kernel: {why}") for c in classic]
    return tma + classic


@dataclass(frozen=True)
class SizedPointer(compat.Pointer):
    """A compile-only tensor of any Triton element type (``fp8e4b8``, ``i32`` included) with its size."""

    itemsize: int = 1

    def ptr_range(self) -> int:
        """Bytes the tensor spans."""
        count = self.itemsize
        for size in self.shape:
            count *= size
        return count


@dataclass(frozen=True)
class KMajor(SizedPointer):
    """A compile-only (K, N) operand stored K-major (column-major: the transpose of a row-major N x K)."""

    def stride(self) -> tuple[int, ...]:
        """Column-major strides in elements (1 along K)."""
        return (1, self.shape[0])


def k_major_rows(b: Any) -> Any:
    """``B^T`` ([N][K], row-major) of a K-major (K, N) ``b``: the same memory, as a TMA descriptor's base."""
    k, n = b.shape
    if k > 1 and tuple(b.stride()) != (1, k):
        raise ValueError(f"the fp8 TMA GEMM takes B K-major (strides (1, {k})), not strides {tuple(b.stride())}")
    if isinstance(b, compat.Pointer):
        return SizedPointer(b.element, (n, k), b.address, getattr(b, "itemsize", 1))
    return b.t()


def plan(
    a: Any,
    b: Any,
    c: Any,
    dtype: str,
    config: Config,
    scales: tuple[Any, Any] | None = None,
    num_sms: int | None = None,
) -> compat.Call:
    """The launch computing ``c = a @ b`` (fp8: times ``scale_a * scale_b``, ``scales`` one-element
    fp32 tensors or Pointer stand-ins) for 2-D ``a``, ``b`` (row-major or K-major; K-major for fp8's
    TMA kernel), ``c``. ``num_sms`` (the TMA kernel's persistent grid) defaults to the device's."""
    if dtype not in DTYPES:
        raise ValueError(f"the low-precision Triton GEMM has no {dtype} (it has {', '.join(DTYPES)})")
    if dtype == "fp8" and scales is None:
        raise ValueError("the fp8 GEMM needs its per-tensor scales (scale_a, scale_b)")
    if config.tma:
        return _plan_tma(a, b, c, dtype, config, scales, num_sms or 0)
    m, k = a.shape
    n = b.shape[1]
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    (sam, sak), (sbk, sbn), (scm, scn) = a.stride(), b.stride(), c.stride()
    scale_a, scale_b = scales if dtype == "fp8" and scales is not None else (None, None)
    args = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "scale_a_ptr": scale_a, "scale_b_ptr": scale_b}
    args.update(M=m, N=n, K=k, stride_am=sam, stride_ak=sak, stride_bk=sbk, stride_bn=sbn)
    args.update(stride_cm=scm, stride_cn=scn, **config.constexprs(), SCALED=dtype == "fp8")
    return compat.Call(gemm_lowp_kernel, (tiles,), args, config.options())


def _plan_tma(a: Any, b: Any, c: Any, dtype: str, config: Config, scales: Any, num_sms: int) -> compat.Call:
    """The persistent TMA kernel's launch (fp8): descriptors over A, ``B^T`` and C, one program an SM."""
    if dtype != "fp8":
        raise ValueError(f"the low-precision TMA GEMM is fp8's ({dtype} runs the classic kernel)")
    m, k = a.shape
    n = b.shape[1]
    bt = k_major_rows(b)
    why = tma_unfit({"M": m, "N": n, "K": k})
    if why or any(t.data_ptr() % compat.ALIGN for t in (a, b, c)):
        why = why or "a base address is not 16-byte aligned"
        raise ValueError(f"the fp8 TMA GEMM cannot take these tensors ({why})")
    descs = {
        "a_desc": compat.descriptor(a, (config.block_m, config.block_k)),
        "bt_desc": compat.descriptor(bt, (config.block_n, config.block_k)),
        "c_desc": compat.descriptor(c, (config.block_m, config.block_n)),
    }
    tiles = triton.cdiv(m, config.block_m) * triton.cdiv(n, config.block_n)
    programs = max(1, min(num_sms or device_sms(a), tiles))
    args = {**descs, "scale_a_ptr": scales[0], "scale_b_ptr": scales[1], "M": m, "N": n, "K": k}
    return compat.Call(gemm_fp8_tma_kernel, (programs,), {**args, **config.constexprs()}, config.options())


def launch_case(inputs: Mapping[str, Any], out: Any, shape: Shape, dtype: str, config: Config) -> None:
    """Binding: one launch on the case's device tensors ``A``, ``B`` (and fp8's ``scale_A``,
    ``scale_B``) into ``out``."""
    scales = (inputs["scale_A"], inputs["scale_B"]) if dtype == "fp8" else None
    plan(inputs["A"], inputs["B"], out, dtype, config, scales).run()


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """What ``hwbench compile`` builds of fp8 and int8 on ``arch``: each at its default configuration
    for :data:`COMPILE_SHAPE` (B K-major for fp8, as the backends lay it out), on sm_90+ fp8's TMA
    kernel at its first (``gemm_fp8_tma``, a grid of :data:`COMPILE_SMS`), or, where ``arch`` has no
    tensor-core path for it, a variant that says why (``skip``)."""
    m, n, k = COMPILE_SHAPE["M"], COMPILE_SHAPE["N"], COMPILE_SHAPE["K"]
    variants: list[dict[str, Any]] = []
    for dtype in DTYPES:
        name = f"gemm_{dtype}"
        why = gpu_unsupported(dtype, arch)
        if why:
            variants.append({"name": name, "dtype": dtype, "skip": why, "config": {"shape": dict(COMPILE_SHAPE)}})
            continue
        elem = element(arch, dtype)
        a = SizedPointer(elem, (m, k))
        b = KMajor(elem, (k, n)) if dtype == "fp8" else SizedPointer(elem, (k, n))
        c = SizedPointer("fp32" if dtype == "fp8" else "i32", (m, n), itemsize=4)
        scales = (SizedPointer("fp32", (1,), itemsize=4), SizedPointer("fp32", (1,), itemsize=4))
        for suffix, cfg in (("", configs(arch, dtype)[0]), *(("_tma", t) for t in tma_configs(arch, dtype)[:1])):
            call = plan(a, b, c, dtype, cfg, scales, COMPILE_SMS)
            config = {**cfg.as_dict(), "shape": dict(COMPILE_SHAPE), "grid": list(call.grid)}
            config["b_layout"] = "k_major" if dtype == "fp8" else "row_major"
            variants.append(
                {
                    "name": name + suffix,
                    "dtype": dtype,
                    "fn": call.fn,
                    "args": call.args,
                    "options": call.options,
                    "config": config,
                }
            )
    return variants
