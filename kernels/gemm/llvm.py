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

from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import storage_dtype
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.gemm import llvm_amx, llvm_bf16, llvm_lowp, simt
from hwbench.kernels.gemm.llvm_panels import store_micro_tile
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
MR = 14  # rows of the register tile; NR = 2 vectors -> 28 accumulators + 2 B + 1 broadcast
NR_VECTORS = 2
# Upper bounds baked into the workspace; the actual mc/nc/kc are kernel arguments.
_MAX_BLOCK = {"fp32": dict(mc=28 * MR, nc=1024, kc=512), "fp64": dict(mc=28 * MR, nc=512, kc=512)}


def tile_sizes(dtype: str, vector_width: int) -> dict[str, int]:
    """Register-tile shape (compile time) for a dtype and vector width."""
    return {"MR": MR, "NR": NR_VECTORS * vector_width, "VW": vector_width}


def _emit_micro(module: ir.Module, dtype: str, vw: int) -> ir.Function:
    """``micro(pa, pb, kc, c, ldc, mvalid, nvalid, first)``: C tile (+)= Apanel @ Bpanel."""
    t = scalar_type(dtype)
    nr = NR_VECTORS * vw
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
        bv = [load_vec(b, pb, t, b.add(b.mul(k, i64(nr)), i64(v * vw)), vw, align=vbytes) for v in range(NR_VECTORS)]
        arow = b.mul(k, i64(MR))
        out = []
        for r in range(MR):
            a = splat(b, load(b, elem_ptr(b, pa, t, b.add(arow, i64(r))), t), vw)
            for v in range(NR_VECTORS):
                out.append(fma(b, a, bv[v], acc[r * NR_VECTORS + v]))
        return out

    acc = loop_carry(b, i64(0), kc, 1, [zero] * (MR * NR_VECTORS), step, name="k")
    store_micro_tile(b, acc, c, ldc, (mvalid, nvalid), first, MR, vw)
    b.ret_void()
    return fn


def _emit_pack_b(
    b: ir.IRBuilder, t: ir.Type, vw: int, src: ir.Value, ldb: ir.Value, dst: ir.Value, kc: ir.Value, nc: ir.Value
) -> None:
    """dst[jr][k][0:NR] = src[k, jr*NR : jr*NR+NR] (zero past nc)."""
    nr = NR_VECTORS * vw
    vty = ir.VectorType(t, vw)
    with for_range(b, i64(0), ceil_div(b, nc, nr), name="pbj") as jr:
        col = b.mul(jr, i64(nr))
        left = b.sub(nc, col)
        masks = [lane_mask(b, vw, v * vw, left) for v in range(NR_VECTORS)]
        panel = b.mul(col, kc)
        with for_range(b, i64(0), kc, name="pbk") as k:
            srow = b.add(b.mul(k, ldb), col)
            drow = b.add(panel, b.mul(k, i64(nr)))
            for v in range(NR_VECTORS):
                x = masked_load(b, elem_ptr(b, src, t, b.add(srow, i64(v * vw))), vty, masks[v])
                store_vec(b, x, dst, b.add(drow, i64(v * vw)), align=vw * elem_size(t))


def _emit_pack_a(
    b: ir.IRBuilder, t: ir.Type, src: ir.Value, lda: ir.Value, dst: ir.Value, kc: ir.Value, mc: ir.Value
) -> None:
    """dst[ir][k][r] = src[min(ir*MR + r, mc-1), k]."""
    last = b.sub(mc, i64(1))
    with for_range(b, i64(0), ceil_div(b, mc, MR), name="paj") as ir_:
        row0 = b.mul(ir_, i64(MR))
        rows = [b.mul(imin(b, b.add(row0, i64(r)), last), lda) for r in range(MR)]
        panel = b.mul(row0, kc)
        with for_range(b, i64(0), kc, name="pak") as k:
            drow = b.add(panel, b.mul(k, i64(MR)))
            for r in range(MR):
                x = load(b, elem_ptr(b, src, t, b.add(rows[r], k)), t)
                b.store(x, elem_ptr(b, dst, t, b.add(drow, i64(r))))


def build(target: LLVMTarget, dtype: str, config: dict[str, int] | None = None) -> ir.Module:
    """The GEMM kernel module for ``target``: the work-group kernel of :mod:`.simt` on a SIMT
    target (in ``config``, default :func:`simt_config`), else the CPU's SIMD kernel (int8 and
    bf16: :mod:`.llvm_amx` where usable, else :mod:`.llvm_lowp` / :mod:`.llvm_bf16`).

    Entry ``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)``; grid
    ``(ceil(N/nc), ceil(M/mc))``; needs ``mc <= 28*MR``, ``nc`` a multiple of NR
    within the dtype's bound, ``kc`` within its bound.
    """
    if isinstance(target, SIMTTarget):
        return simt.build(target, dtype, config or simt_config(target, dtype))
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
    nr = NR_VECTORS * vw
    lim = _MAX_BLOCK[dtype]
    module = target.new_module(f"{KERNEL}_{dtype}")
    micro = _emit_micro(module, dtype, vw)

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
            _emit_pack_b(b, t, vw, elem_ptr(b, bm, t, b.add(b.mul(p0, ldb), j0)), ldb, pack_b, kc, nc)
            _emit_pack_a(b, t, elem_ptr(b, a_blk, t, p0), lda, pack_a, kc, mc)
            first = b.icmp_signed("==", p0, i64(0))
            with for_range(b, i64(0), ceil_div(b, mc, MR), name="ir") as ir_:
                row = b.mul(ir_, i64(MR))
                pa = elem_ptr(b, pack_a, t, b.mul(row, kc))
                mvalid = imin(b, i64(MR), b.sub(mc, row))
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


def _blocking(dtype: str, m: int, n: int, k: int, vw: int, threads: int) -> dict[str, int]:
    """Cache blocking for Zen4/Skylake-class cores (32-48 KiB L1d, 1-2 MiB L2).

    kc: the MR x kc A micro-panel (~21 KiB) stays in L1 while B streams past;
    nc x kc of packed B (~1.5 MiB) and the mc x kc A block come from L2/L3;
    mc is then evened out so that every thread gets whole, equal programs.
    """
    nr = NR_VECTORS * vw
    lim = _MAX_BLOCK[dtype]
    kc = min(384 if dtype == "fp32" else 192, k)
    nc = min(lim["nc"] // nr * nr, -(-n // nr) * nr)
    mc_target = 20 * MR
    blocks_n = -(-n // nc)
    blocks_m = max(-(-m // mc_target), -(-2 * threads // blocks_n) if m >= 2 * MR * threads else 1)
    mc = -(-m // blocks_m)
    mc = min(lim["mc"], -(-mc // MR) * MR)
    return {"mc": mc, "nc": nc, "kc": max(kc, 1)}


def _check_blocking(dtype: str, blk: dict[str, int]) -> None:
    """The workspace is sized for the dtype's bounds: larger blocks would overflow it."""
    lim = _MAX_BLOCK[dtype]
    for key in ("mc", "nc", "kc"):
        if not 1 <= int(blk[key]) <= lim[key]:
            raise ValueError(f"blocking {key}={blk[key]} outside [1, {lim[key]}] for {dtype}")


def blocking(shape: Shape, dtype: str, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc for the host CPU: its cache blocking, evened out over ``workers``."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    return _blocking(dtype, m, n, k, target.vector_width(dtype), workers)


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

    ``blocks`` overrides :func:`blocking` (for tuning and tests); on the CPU a problem under
    2 MFLOP runs on one worker (waking more costs more than it saves).
    """
    if isinstance(target, SIMTTarget):
        return simt.launch(shape, dtype, target, config or simt_config(target, dtype))
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
    blk = dict(blocks) if blocks else blocking(shape, dtype, target, workers)
    _check_blocking(dtype, blk)
    grid = (-(-n // blk["nc"]), -(-m // blk["mc"])) if m and n and k else (0, 0)
    args = (buffer("A"), buffer("B"), output()) + tuple(
        i64_arg(v) for v in (m, n, k, k, n, n, blk["mc"], blk["nc"], blk["kc"])
    )
    record: dict[str, Any] = {"kernel": KERNEL, "dtype": dtype, "target": target.name}
    record.update(tile_sizes(dtype, target.vector_width(dtype)), **blk)
    return Launch(KERNEL, args, grid, (m, n), config=record, workers=workers)


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
