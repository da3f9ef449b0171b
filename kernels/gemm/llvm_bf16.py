"""bf16 GEMM ``C = A @ B`` (bf16 inputs held in float32, fp32 sums and output) on the host CPU.

The structure is :mod:`.llvm_lowp`'s with K grouped by 2: packing rounds A and B to bf16
(exact for inputs that are bf16 values, as the spec draws them) and lays a B panel out as,
per pair of k, each column's two bf16 side by side (one i32 lane), an A panel as each row's
pair (one i32 the microkernel broadcasts). K past the slice is zero in B.

Two paths compute ``acc += a0 b0 + a1 b1`` per fp32 lane, chosen by the target's features:

* ``bf16dp``: ``vdpbf16ps`` (``llvm.x86.avx512bf16.dpbf16ps.512``);
* ``widening``: each bf16 of a pair widened to fp32 (a shift or a mask: bf16 is fp32's upper
  half) and two FMAs, in plain vector IR any LLVM target lowers.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch
from hwbench.kernels.gemm.llvm_lowp import interleave
from hwbench.kernels.gemm.llvm_panels import Panels, emit_micro_loops, store_micro_tile
from hwbench.kernels.gemm.llvm_panels import blocking as panel_blocking
from hwbench.kernels.gemm.llvm_panels import launch as panel_launch
from hwbench.kernels.gemm.llvm_panels import prepare as panel_prepare
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel
from hwbench.kernels.llvmir.irutil import (
    F32,
    I1,
    I32,
    I64,
    PTR,
    VOID,
    ceil_div,
    elem_ptr,
    fma,
    for_range,
    i64,
    imin,
    intrinsic,
    lane_mask,
    load,
    load_vec,
    loop_carry,
    masked_load,
    splat,
    store_vec,
)
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget, enabled_features

KERNEL = "gemm"
DTYPES = ("bf16",)
I16 = ir.IntType(16)
MR = 14  # 28 accumulators + 2 B vectors + 1 broadcast
NR_VECTORS = 2
GROUP = 2  # k values per dot product (one i32 lane holds 2 bf16)
MAX_BLOCK = {"mc": 28 * MR, "nc": 1024, "kc": 1024}
DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"


def path(target: CPUTarget) -> str:
    """``bf16dp`` where the target has AVX-512 BF16 on 512-bit vectors, else ``widening``."""
    enabled = enabled_features(target.features)
    return "bf16dp" if "avx512bf16" in enabled and target.vector_width("fp32") == 16 else "widening"


#: The packed-panel geometry (kc of 768 bf16 values).
PANELS = Panels("bf16", MR, NR_VECTORS, GROUP, MAX_BLOCK, 768, path, lane_dtype="fp32")


def _to_bf16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """fp32 (scalar or vector) to bf16 bits (i16), rounded to nearest even."""
    ity = ir.VectorType(I32, x.type.count) if isinstance(x.type, ir.VectorType) else I32
    nty = ir.VectorType(I16, x.type.count) if isinstance(x.type, ir.VectorType) else I16

    def const(v: int) -> ir.Value:
        return ir.Constant(ity, [v] * ity.count) if isinstance(ity, ir.VectorType) else ir.Constant(ity, v)

    bits = b.bitcast(x, ity)
    odd = b.and_(b.lshr(bits, const(16)), const(1))
    return b.trunc(b.lshr(b.add(bits, b.add(odd, const(0x7FFF))), const(16)), nty)


def _dot(b: ir.IRBuilder, kind: str, acc: ir.Value, a2: ir.Value, bv: ir.Value, vw: int) -> ir.Value:
    """``acc[l] += a2.lo * bv[l].lo + a2.hi * bv[l].hi`` with bf16 pairs in i32 lanes."""
    ity = ir.VectorType(I32, vw)
    if kind == "bf16dp":
        fn = intrinsic(b.module, DPBF16, acc.type, [acc.type, ity, ity])
        return b.call(fn, [acc, a2, bv])
    sixteen = ir.Constant(ity, [16] * vw)
    high = ir.Constant(ity, [-65536] * vw)  # 0xffff0000
    fty = acc.type
    acc = fma(b, b.bitcast(b.shl(a2, sixteen), fty), b.bitcast(b.shl(bv, sixteen), fty), acc)
    return fma(b, b.bitcast(b.and_(a2, high), fty), b.bitcast(b.and_(bv, high), fty), acc)


def _emit_micro(module: ir.Module, kind: str, vw: int) -> ir.Function:
    """``micro(pa, pb, kg, c, ldc, mvalid, nvalid, first)``: C tile (+)= Apanel . Bpanel."""
    nr = NR_VECTORS * vw
    vty = ir.VectorType(F32, vw)
    fn = ir.Function(
        module, ir.FunctionType(VOID, [PTR, PTR, I64, PTR, I64, I64, I64, I1]), name=f"gemm_micro_bf16_{kind}"
    )
    fn.linkage = "internal"
    for k in (0, 1, 3):
        fn.args[k].add_attribute("noalias")
    pa, pb, kg, c, ldc, mvalid, nvalid, first = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def step(g: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        row = b.mul(g, i64(nr))
        bv = [load_vec(b, pb, I32, b.add(row, i64(v * vw)), vw, align=4 * vw) for v in range(NR_VECTORS)]
        arow = b.mul(g, i64(MR))
        out = []
        for r in range(MR):
            a2 = splat(b, load(b, elem_ptr(b, pa, I32, b.add(arow, i64(r))), I32, align=4), vw)
            for v in range(NR_VECTORS):
                out.append(_dot(b, kind, acc[r * NR_VECTORS + v], a2, bv[v], vw))
        return out

    acc = loop_carry(b, i64(0), kg, 1, [ir.Constant(vty, None)] * (MR * NR_VECTORS), step, name="g")
    store_micro_tile(b, acc, c, ldc, (mvalid, nvalid), first, MR, vw)
    b.ret_void()
    return fn


def _emit_pack_b(
    b: ir.IRBuilder, vw: int, src: ir.Value, ldb: ir.Value, dst: ir.Value, kc: ir.Value, nc: ir.Value
) -> None:
    """dst[jr][g] = bf16 pairs of B[2g..2g+1, jr*NR : jr*NR+NR] side by side (zero past kc and nc)."""
    nr = NR_VECTORS * vw
    row_ty = ir.VectorType(F32, nr)
    groups = ceil_div(b, kc, GROUP)
    with for_range(b, i64(0), ceil_div(b, nc, nr), name="pbj") as jr:
        col = b.mul(jr, i64(nr))
        left = b.sub(nc, col)
        panel = b.mul(col, groups)  # in i32 (bf16 pairs)
        with for_range(b, i64(0), groups, name="pbg") as g:
            rows = []
            for t in range(GROUP):
                k = b.add(b.mul(g, i64(GROUP)), i64(t))
                valid = b.select(b.icmp_signed("<", k, kc), left, i64(0))
                at = elem_ptr(b, src, F32, b.add(b.mul(imin(b, k, b.sub(kc, i64(1))), ldb), col))
                rows.append(_to_bf16(b, masked_load(b, at, row_ty, lane_mask(b, nr, 0, valid))))
            packed = b.bitcast(interleave(b, rows, nr), ir.VectorType(I32, nr))
            store_vec(b, packed, dst, b.add(panel, b.mul(g, i64(nr))), align=4 * vw)


def _emit_pack_a(b: ir.IRBuilder, src: ir.Value, lda: ir.Value, dst: ir.Value, kc: ir.Value, mc: ir.Value) -> None:
    """dst[ir][g][r] = the bf16 pair A[min(ir*MR + r, mc-1), 2g..2g+1] (zero past kc)."""
    last_row, last_k = b.sub(mc, i64(1)), b.sub(kc, i64(1))
    groups = ceil_div(b, kc, GROUP)
    with for_range(b, i64(0), ceil_div(b, mc, MR), name="paj") as ir_:
        row0 = b.mul(ir_, i64(MR))
        rows = [b.mul(imin(b, b.add(row0, i64(r)), last_row), lda) for r in range(MR)]
        panel = b.mul(row0, groups)
        with for_range(b, i64(0), groups, name="pag") as g:
            k0 = b.mul(g, i64(GROUP))
            drow = b.add(panel, b.mul(g, i64(MR)))
            with b.if_else(b.icmp_signed("<=", b.add(k0, i64(GROUP)), kc), likely=True) as (full, edge):
                with full:  # the pair as one two-lane vector
                    for r in range(MR):
                        x = load(b, elem_ptr(b, src, F32, b.add(rows[r], k0)), ir.VectorType(F32, GROUP), align=4)
                        b.store(b.bitcast(_to_bf16(b, x), I32), elem_ptr(b, dst, I32, b.add(drow, i64(r))))
                with edge:  # the slice's odd last k: its pair's upper half is zero
                    for r in range(MR):
                        x = _to_bf16(b, load(b, elem_ptr(b, src, F32, b.add(rows[r], imin(b, k0, last_k))), F32))
                        b.store(b.zext(x, I32), elem_ptr(b, dst, I32, b.add(drow, i64(r))))


def build(target: LLVMTarget, dtype: str) -> ir.Module:
    """The bf16 GEMM module for the host CPU ``target``: entry ``gemm(A, B, C, M, N, K, lda,
    ldb, ldc, mc, nc, kc)`` on float32 arrays of bf16 values; ``kc`` even, within 1024."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no bf16 GEMM lowering for {type(target).__name__}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    vw = target.vector_width("fp32")
    nr = NR_VECTORS * vw
    kind = path(target)
    module = target.new_module(f"{KERNEL}_bf16_{kind}")
    micro = _emit_micro(module, kind, vw)

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        a, bm, c, m, n, k, lda, ldb, ldc, mc_max, nc_max, kc_max = args
        b = ctx.builder
        pack_a = ctx.local_array(I16, MAX_BLOCK["mc"] * MAX_BLOCK["kc"])
        pack_b = ctx.local_array(I16, -(-MAX_BLOCK["nc"] // nr) * nr * MAX_BLOCK["kc"])
        i0 = b.mul(ctx.program_id(1), mc_max)
        j0 = b.mul(ctx.program_id(0), nc_max)
        mc = imin(b, mc_max, b.sub(m, i0))
        nc = imin(b, nc_max, b.sub(n, j0))
        a_blk = elem_ptr(b, a, F32, b.mul(i0, lda))
        c_blk = elem_ptr(b, c, F32, b.add(b.mul(i0, ldc), j0))
        with for_range(b, i64(0), k, kc_max, name="pc") as p0:
            kc = imin(b, kc_max, b.sub(k, p0))
            kg = ceil_div(b, kc, GROUP)
            _emit_pack_b(b, vw, elem_ptr(b, bm, F32, b.add(b.mul(p0, ldb), j0)), ldb, pack_b, kc, nc)
            _emit_pack_a(b, elem_ptr(b, a_blk, F32, p0), lda, pack_a, kc, mc)
            first = b.icmp_signed("==", p0, i64(0))
            emit_micro_loops(b, PANELS, nr, micro, (pack_a, pack_b), c_blk, F32, (kg, mc, nc, ldc), first)

    target.define_kernel(module, KERNEL, [PTR, PTR, PTR] + [I64] * 9, body)
    return module


def blocking(shape: Shape, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc as :func:`.llvm_panels.blocking` chooses them, kc in bf16 (2 bytes) values."""
    return panel_blocking(PANELS, shape, target, workers)


def launch(
    shape: Shape, dtype: str, target: LLVMTarget, workers: int = 1, blocks: dict[str, int] | None = None
) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))``
    programs; the record's config says which path (``bf16dp`` or ``widening``) the code takes."""
    return panel_launch(PANELS, shape, target, workers, blocks, {"accumulate": "fp32"})


def prepare_cpu(
    inputs: dict[str, np.ndarray],
    shape: dict[str, int],
    threads: int | None = None,
    blocks: dict[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind bf16 ``C = A @ B`` (float32 arrays of bf16 values, C float32) for the host CPU, or
    ``target`` (another feature set, for tests); ``blocks`` overrides the cache blocking."""
    return panel_prepare(PANELS, build, inputs, shape, threads, blocks, target)
