"""GEMM ``C = A @ B`` written once in llvmlite IR (BLIS/Goto structure).

On work-group targets (SPIR-V, NVPTX, AMDGCN) the kernel is :mod:`.simt`'s; on the host CPU
one program computes an ``mc x nc`` tile of C. For each ``kc`` slice of K it
packs its B block into ``kc x NR`` panels (zero-padded in N) and its A block
into ``MR x kc`` panels (rows past M are clamped duplicates whose results are
never stored), then runs an ``MR x NR`` register-blocked microkernel: NR/VW
vector loads of B, MR broadcasts of A and ``MR * NR/VW`` FMAs per k step, with
the accumulators carried in phi nodes (they live in vector registers).
Edge tiles store through masked loads/stores, so any M, N, K works in bounds.

int8 and bf16 have kernels of their own on the CPU, chosen by the host's features: AMX tiles
(:mod:`.llvm_amx`) where the CPU has them and Linux grants them, else the vector dot products
of :mod:`.llvm_lowp` (int8) and :mod:`.llvm_bf16`, else their widening fallbacks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES, storage_dtype
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.gemm import llvm_amx, llvm_bf16, llvm_lowp, simt
from hwbench.kernels.gemm.llvm_panels import store_micro_tile
from hwbench.kernels.llvmir import cpu_model
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel, default_threads
from hwbench.kernels.llvmir.cpu_launch import prepare as cpu_prepare
from hwbench.kernels.llvmir.irutil import (
    I1,
    I64,
    PTR,
    VOID,
    ceil_div,
    elem_ptr,
    elem_size,
    fma,
    for_range,
    i64,
    imin,
    lane_mask,
    load,
    load_vec,
    loop_carry,
    masked_load,
    scalar_type,
    splat,
    store_vec,
)
from hwbench.kernels.llvmir.simt import SIMTTarget
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget, host_target

DTYPES = ("fp32", "fp64")
KERNEL = "gemm"
#: Compile-time keys of the CPU kernel's configuration (a plan's ``defines``); the rest of a
#: configuration (``mc``, ``nc``, ``kc``) is passed at run time.
TILE_KEYS = ("MR", "NR_VECTORS")
BLOCK_KEYS = ("mc", "nc", "kc")
#: Upper bounds of the blocks, baked into the workspace: ``mc`` in register tiles, ``nc`` and ``kc``
#: in elements. They bound what tuning may try, not what the derivation picks.
_MAX_TILES_M = 64
_MAX_NC = {"fp32": 4096, "fp64": 2048}
_MAX_KC = {"fp32": 1024, "fp64": 512}


def register_tile(target: CPUTarget, dtype: str) -> tuple[int, int]:
    """``(MR, NR_VECTORS)`` for ``target``: the most accumulators its vector registers hold beside
    the B vectors and a broadcast, covering its FMA latency x pipes (:func:`.cpu_model.register_tile`);
    14 x 2 on AVX-512's 32 registers, 6 x 2 on AVX2's or SSE's 16, 6 x 4 on NEON's 32 (A's values
    four to a register for the by-element FMLA)."""
    desc = target.description
    lanes = desc.lanes(dtype) if desc.lane_multiply_add else None
    return cpu_model.register_tile(desc.vector_registers, desc.chains, a_lanes=lanes)


def max_block(dtype: str, mr: int) -> dict[str, int]:
    """The largest ``mc``/``nc``/``kc`` the workspace of an ``MR = mr`` kernel holds."""
    return {"mc": _MAX_TILES_M * mr, "nc": _MAX_NC[dtype], "kc": _MAX_KC[dtype]}


def tile_sizes(dtype: str, vector_width: int, mr: int, nr_vectors: int) -> dict[str, int]:
    """Register-tile shape (compile time) for a dtype and vector width."""
    return {"MR": mr, "NR_VECTORS": nr_vectors, "NR": nr_vectors * vector_width, "VW": vector_width}


def _emit_micro(module: ir.Module, dtype: str, vw: int, mr: int, nv: int) -> ir.Function:
    """``micro(pa, pb, kc, c, ldc, mvalid, nvalid, first)``: C tile (+)= Apanel @ Bpanel."""
    t = scalar_type(dtype)
    nr = nv * vw
    vty = ir.VectorType(t, vw)
    vbytes = vw * elem_size(t)  # packed rows are whole vectors apart: aligned on any target
    fnty = ir.FunctionType(VOID, [PTR, PTR, I64, PTR, I64, I64, I64, I1])
    fn = ir.Function(module, fnty, name=f"{KERNEL}_micro_{dtype}")
    fn.linkage = "internal"
    for k in (0, 1, 3):
        fn.args[k].add_attribute("noalias")
    pa, pb, kc, c, ldc, mvalid, nvalid, first = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    zero = ir.Constant(vty, None)

    def step(k: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        bv = [load_vec(b, pb, t, b.add(b.mul(k, i64(nr)), i64(v * vw)), vw, align=vbytes) for v in range(nv)]
        arow = b.mul(k, i64(mr))
        out = []
        for r in range(mr):
            a = splat(b, load(b, elem_ptr(b, pa, t, b.add(arow, i64(r))), t), vw)
            for v in range(nv):
                out.append(fma(b, a, bv[v], acc[r * nv + v]))
        return out

    acc = loop_carry(b, i64(0), kc, 1, [zero] * (mr * nv), step, name="k")
    store_micro_tile(b, acc, c, ldc, (mvalid, nvalid), first, mr, vw)
    b.ret_void()
    return fn


def _emit_pack_b(
    b: ir.IRBuilder,
    t: ir.Type,
    vw: int,
    nv: int,
    src: ir.Value,
    ldb: ir.Value,
    dst: ir.Value,
    kc: ir.Value,
    nc: ir.Value,
) -> None:
    """dst[jr][k][0:NR] = src[k, jr*NR : jr*NR+NR] (zero past nc)."""
    nr = nv * vw
    vty = ir.VectorType(t, vw)
    with for_range(b, i64(0), ceil_div(b, nc, nr), name="pbj") as jr:
        col = b.mul(jr, i64(nr))
        left = b.sub(nc, col)
        masks = [lane_mask(b, vw, v * vw, left) for v in range(nv)]
        panel = b.mul(col, kc)
        with for_range(b, i64(0), kc, name="pbk") as k:
            srow = b.add(b.mul(k, ldb), col)
            drow = b.add(panel, b.mul(k, i64(nr)))
            for v in range(nv):
                x = masked_load(b, elem_ptr(b, src, t, b.add(srow, i64(v * vw))), vty, masks[v])
                store_vec(b, x, dst, b.add(drow, i64(v * vw)), align=vw * elem_size(t))


def _emit_pack_a(
    b: ir.IRBuilder, t: ir.Type, mr: int, src: ir.Value, lda: ir.Value, dst: ir.Value, kc: ir.Value, mc: ir.Value
) -> None:
    """dst[ir][k][r] = src[min(ir*MR + r, mc-1), k]."""
    last = b.sub(mc, i64(1))
    with for_range(b, i64(0), ceil_div(b, mc, mr), name="paj") as ir_:
        row0 = b.mul(ir_, i64(mr))
        rows = [b.mul(imin(b, b.add(row0, i64(r)), last), lda) for r in range(mr)]
        panel = b.mul(row0, kc)
        with for_range(b, i64(0), kc, name="pak") as k:
            drow = b.add(panel, b.mul(k, i64(mr)))
            for r in range(mr):
                x = load(b, elem_ptr(b, src, t, b.add(rows[r], k)), t)
                b.store(x, elem_ptr(b, dst, t, b.add(drow, i64(r))))


def build(target: LLVMTarget, dtype: str, config: Mapping[str, int] | None = None) -> ir.Module:
    """The GEMM kernel module for ``target``: the work-group kernel of :mod:`.simt` on a SIMT
    target (in ``config``, default :func:`simt_config`), else the CPU's SIMD kernel with the
    register tile ``config`` names (``MR``, ``NR_VECTORS``; default :func:`register_tile`) (int8
    and bf16: :mod:`.llvm_amx` where usable, else :mod:`.llvm_lowp` / :mod:`.llvm_bf16`).

    Entry ``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)``; grid
    ``(ceil(N/nc), ceil(M/mc))``; needs ``mc``, ``nc`` (a multiple of NR) and ``kc`` within
    :func:`max_block`.
    """
    if isinstance(target, SIMTTarget):
        return simt.build(target, dtype, dict(config or simt_config(target, dtype)))
    if dtype in llvm_amx.DTYPES and llvm_amx.usable(target, dtype):
        return llvm_amx.build(target, dtype)
    if dtype in llvm_lowp.DTYPES:
        return llvm_lowp.build(target, dtype)
    if dtype in llvm_bf16.DTYPES:
        return llvm_bf16.build(target, dtype)
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no GEMM lowering for {type(target).__name__}")
    t = scalar_type(dtype)
    vw = target.vector_width(dtype)
    mr, nv = _tile(target, dtype, config)
    nr = nv * vw
    lim = max_block(dtype, mr)
    module = target.new_module(f"{KERNEL}_{dtype}_{mr}x{nv}")
    micro = _emit_micro(module, dtype, vw, mr, nv)

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        a, bm, c, m, n, k, lda, ldb, ldc, mc_max, nc_max, kc_max = args
        b = ctx.builder
        pack_a = ctx.local_array(t, lim["mc"] * lim["kc"])
        pack_b = ctx.local_array(t, -(-lim["nc"] // nr) * nr * lim["kc"])
        i0 = b.mul(ctx.program_id(1), mc_max)
        j0 = b.mul(ctx.program_id(0), nc_max)
        mc = imin(b, mc_max, b.sub(m, i0))
        nc = imin(b, nc_max, b.sub(n, j0))
        a_blk = elem_ptr(b, a, t, b.mul(i0, lda))
        c_blk = elem_ptr(b, c, t, b.add(b.mul(i0, ldc), j0))
        with for_range(b, i64(0), k, kc_max, name="pc") as p0:
            kc = imin(b, kc_max, b.sub(k, p0))
            _emit_pack_b(b, t, vw, nv, elem_ptr(b, bm, t, b.add(b.mul(p0, ldb), j0)), ldb, pack_b, kc, nc)
            _emit_pack_a(b, t, mr, elem_ptr(b, a_blk, t, p0), lda, pack_a, kc, mc)
            first = b.icmp_signed("==", p0, i64(0))
            with for_range(b, i64(0), ceil_div(b, mc, mr), name="ir") as ir_:
                row = b.mul(ir_, i64(mr))
                pa = elem_ptr(b, pack_a, t, b.mul(row, kc))
                mvalid = imin(b, i64(mr), b.sub(mc, row))
                with for_range(b, i64(0), ceil_div(b, nc, nr), name="jr") as jr:
                    col = b.mul(jr, i64(nr))
                    b.call(
                        micro,
                        [
                            pa,
                            elem_ptr(b, pack_b, t, b.mul(col, kc)),
                            kc,
                            elem_ptr(b, c_blk, t, b.add(b.mul(row, ldc), col)),
                            ldc,
                            mvalid,
                            imin(b, i64(nr), b.sub(nc, col)),
                            first,
                        ],
                    )

    target.define_kernel(module, KERNEL, [PTR, PTR, PTR] + [I64] * 9, body)
    return module


def _tile(target: CPUTarget, dtype: str, config: Mapping[str, Any] | None) -> tuple[int, int]:
    """The register tile ``config`` names, else the derived one; checked against the registers."""
    if config and all(key in config for key in TILE_KEYS):
        mr, nv = int(config["MR"]), int(config["NR_VECTORS"])
        if not (1 <= mr <= 32 and 1 <= nv <= 8):
            raise ValueError(f"register tile MR={mr} NR_VECTORS={nv} outside MR 1-32, NR_VECTORS 1-8")
        return mr, nv
    return register_tile(target, dtype)


def _round_down(value: float, step: int, least: int) -> int:
    return max(least, int(value) // step * step)


def derived_blocking(dtype: str, shape: Shape, target: CPUTarget, mr: int, nv: int, workers: int = 1) -> dict[str, int]:
    """Cache blocking from the target's caches (the analytical model of BLIS, Low et al. 2016, for
    this loop order: the MR x kc A micro-panel stays in L1 while B's micro-panels stream past it,
    the kc x nc packed B block stays in L2, an mc x kc A block takes a quarter of L2).

    kc: half of L1d holds the A micro-panel, and kc <= sqrt(3/4 L2 / element) keeps nc from
    shrinking below kc; nc: three quarters of L2 hold the B block; mc: then evened out so that every
    worker gets whole, equal programs.
    """
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    caches, size = target.description.caches, DTYPE_BYTES[dtype]
    vw = target.vector_width(dtype)
    nr = nv * vw
    lim = max_block(dtype, mr)
    kc = min(caches.l1d / 2 / (mr * size), math.sqrt(0.75 * caches.l2 / size), lim["kc"])
    kc = min(_round_down(kc, 16, 16), max(k, 1))
    nc = _round_down(min(0.75 * caches.l2 / (kc * size), lim["nc"]), nr, nr)
    nc = min(nc, -(-n // nr) * nr)
    mc_target = _round_down(min(caches.l2 / 4 / (kc * size), lim["mc"]), mr, mr)
    blocks_n = -(-n // nc)
    blocks_m = max(-(-m // mc_target), -(-2 * workers // blocks_n) if m >= 2 * mr * workers else 1)
    mc = -(-m // blocks_m)
    mc = min(lim["mc"], -(-mc // mr) * mr)
    return {"mc": mc, "nc": nc, "kc": max(kc, 1)}


def _check_blocking(dtype: str, blk: Mapping[str, int], mr: int, nr: int) -> None:
    """The workspace is sized for the tile's bounds: larger blocks would overflow it."""
    lim = max_block(dtype, mr)
    for key in BLOCK_KEYS:
        if not 1 <= int(blk[key]) <= lim[key]:
            raise ValueError(f"blocking {key}={blk[key]} outside [1, {lim[key]}] for {dtype} with MR={mr}")
    if int(blk["nc"]) % nr:
        raise ValueError(f"blocking nc={blk['nc']} is not a multiple of NR={nr}")


def blocking(shape: Shape, dtype: str, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc for the host CPU's derived register tile: its cache blocking, evened out over ``workers``."""
    mr, nv = register_tile(target, dtype)
    return derived_blocking(dtype, shape, target, mr, nv, workers)


def tuning_space(target: LLVMTarget, dtype: str, shape: Shape) -> list[dict[str, int]]:
    """Candidate configurations for ``shape``, the derived one first: on the CPU (fp32, fp64) the
    derived register tile with its blocking halved and doubled, then the other tiles the registers
    hold with their derived blocking; on a SIMT target :func:`.simt.tuning_space`'s. Empty where
    the dtype has no tunable kernel here."""
    if isinstance(target, SIMTTarget):
        return simt.tuning_space(target, dtype, shape) if hasattr(simt, "tuning_space") else []
    if not isinstance(target, CPUTarget) or dtype not in DTYPES:
        return []
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    workers = 1 if 2.0 * m * n * k < 2e6 else default_threads()
    mr, nv = register_tile(target, dtype)
    nr = nv * target.vector_width(dtype)
    base = derived_blocking(dtype, shape, target, mr, nv, workers)
    lim = max_block(dtype, mr)
    found: list[dict[str, int]] = []

    def add(config: dict[str, int]) -> None:
        if config not in found:
            found.append(config)

    add({"MR": mr, "NR_VECTORS": nv, **base})
    for kc_scale, nc_scale in ((0.5, 1), (2, 1), (1, 0.5), (1, 2), (0.5, 2), (2, 0.5)):
        kc = min(lim["kc"], max(k, 1), _round_down(base["kc"] * kc_scale, 16, 16))
        nc = min(lim["nc"], -(-n // nr) * nr, _round_down(base["nc"] * nc_scale, nr, nr))
        add({"MR": mr, "NR_VECTORS": nv, "mc": base["mc"], "nc": nc, "kc": kc})
    registers = target.description.vector_registers
    for other_nv in range(1, 5):
        other_mr = (registers - 2 - other_nv) // other_nv
        for tile_mr in (other_mr, other_mr - 2):
            if tile_mr >= 2 and (tile_mr, other_nv) != (mr, nv):
                add(
                    {
                        "MR": tile_mr,
                        "NR_VECTORS": other_nv,
                        **derived_blocking(dtype, shape, target, tile_mr, other_nv, workers),
                    }
                )
    return found


def simt_config(target: SIMTTarget, dtype: str, shape: Shape | None = None) -> dict[str, int]:
    """The work-group kernel's configuration for ``target``'s device (see :mod:`.simt`), its
    blocks no larger than ``shape`` needs where given."""
    cfg = simt.config_for(target, dtype)
    return simt.fit_config(cfg, shape) if shape is not None else cfg


def launch(
    shape: Shape,
    dtype: str,
    target: LLVMTarget,
    workers: int = 1,
    blocks: dict[str, int] | None = None,
    config: dict[str, int] | None = None,
) -> Launch:
    """On the CPU, ``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc),
    ceil(M/mc))`` programs; on a SIMT target, the work-group kernel's launch in ``config``.

    ``blocks`` overrides :func:`blocking` (for tests); ``config`` on the CPU is one of
    :func:`tuning_space`'s (``MR``, ``NR_VECTORS``, ``mc``, ``nc``, ``kc``); a problem under
    2 MFLOP runs on one worker (waking more costs more than it saves).
    """
    if isinstance(target, SIMTTarget):
        return simt.launch(shape, dtype, target, dict(config or simt_config(target, dtype)))
    if dtype in llvm_amx.DTYPES and llvm_amx.usable(target, dtype):
        return llvm_amx.launch(shape, dtype, target, workers, blocks)
    if dtype in llvm_lowp.DTYPES:
        return llvm_lowp.launch(shape, dtype, target, workers, blocks)
    if dtype in llvm_bf16.DTYPES:
        return llvm_bf16.launch(shape, dtype, target, workers, blocks)
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no GEMM lowering for {type(target).__name__}")
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    workers = 1 if 2.0 * m * n * k < 2e6 else workers
    mr, nv = _tile(target, dtype, config)
    vw = target.vector_width(dtype)
    if blocks:
        blk = {key: int(blocks[key]) for key in BLOCK_KEYS}
    elif config and all(key in config for key in BLOCK_KEYS):
        blk = {key: int(config[key]) for key in BLOCK_KEYS}
    else:
        blk = derived_blocking(dtype, shape, target, mr, nv, workers)
    _check_blocking(dtype, blk, mr, nv * vw)
    grid = (-(-n // blk["nc"]), -(-m // blk["mc"])) if m and n and k else (0, 0)
    args = (buffer("A"), buffer("B"), output()) + tuple(
        i64_arg(v) for v in (m, n, k, k, n, n, blk["mc"], blk["nc"], blk["kc"])
    )
    record: dict[str, Any] = {"kernel": KERNEL, "dtype": dtype, "target": target.name}
    record.update(tile_sizes(dtype, vw, mr, nv), **blk)
    record["derived_from"] = target.description.as_config()
    return Launch(KERNEL, args, grid, (m, n), defines={"MR": mr, "NR_VECTORS": nv}, config=record, workers=workers)


def prepare_cpu(
    inputs: dict[str, np.ndarray],
    shape: dict[str, int],
    dtype: str,
    threads: int | None = None,
    blocking: dict[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind ``C = A @ B`` for the host CPU; compiles on first use per (dtype, target).

    ``blocking`` overrides the cache blocking (``mc``, ``nc``, ``kc``) and
    ``target`` the CPU model/features (default: the host) -- both for tuning/tests.
    """
    known = DTYPES + llvm_lowp.DTYPES + llvm_bf16.DTYPES
    if dtype not in known:
        raise ValueError(f"dtype must be one of {known}, got {dtype!r}")
    np_dtype = storage_dtype(dtype)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    a, bm = inputs["A"], inputs["B"]
    if a.shape != (m, k) or bm.shape != (k, n) or a.dtype != np_dtype or bm.dtype != np_dtype:
        raise ValueError(f"expected A ({m},{k}) and B ({k},{n}) of {np_dtype.name}")
    target = target or host_target()
    threads = threads or default_threads()
    plan = launch(shape, dtype, target, threads, blocking)
    return cpu_prepare(build, inputs, dtype, plan, threads, target)
