"""bf16 GEMM ``C = A @ B`` (bf16 inputs held in float32, fp32 sums and output) on the host CPU.

The structure is :mod:`.llvm_lowp`'s on :mod:`.llvm_panels`' scaffold: packing rounds A and B to
bf16 (exact for inputs that are bf16 values, as the spec draws them), tile and blocking come from
the target's description, K past the slice is zero in B. Two paths compute the products,
chosen by the target's features:

* ``bf16dp``: ``vdpbf16ps`` (``llvm.x86.avx512bf16.dpbf16ps.512``) on pairs of k, a B panel
  holding per pair each column's two bf16 side by side (one i32 lane), an A panel each row's
  pair (one i32 the microkernel broadcasts);
* ``widening``: each bf16 widened to fp32 when packed (bf16 is fp32's upper half, so the
  widening is exact), and the microkernel is the fp32 GEMM's: one broadcast and one FMA per
  product, with the register tile fp32 would get on this target. It runs at the fp32 FMA rate;
  the packed panels are twice the bytes of bf16 ones, read from L1 and L2.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from llvmlite import ir

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch
from hwbench.kernels.gemm import llvm_panels as panels_mod
from hwbench.kernels.gemm.llvm_lowp import interleave
from hwbench.kernels.gemm.llvm_panels import Panels
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel
from hwbench.kernels.llvmir.irutil import (
    F32,
    I32,
    I64,
    PTR,
    ceil_div,
    elem_ptr,
    for_range,
    i64,
    imin,
    intrinsic,
    intrinsic_suffix,
)
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget, enabled_features

KERNEL = "gemm"
DTYPES = ("bf16",)
I16 = ir.IntType(16)
#: Upper bound of kc (k values) baked into the workspace.
KC_MAX = 1024
DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"
SCHEMES = {
    "bf16dp": "bf16 pairs on vdpbf16ps, fp32 sums",
    "widening": "bf16 widened to fp32 when packed (exact), fp32 FMAs on fp32's register tile",
}


def path(target: CPUTarget) -> str:
    """``bf16dp`` where the target has AVX-512 BF16 on 512-bit vectors, else ``widening``."""
    enabled = enabled_features(target.features)
    return "bf16dp" if "avx512bf16" in enabled and target.vector_width("fp32") == 16 else "widening"


def panels(target: CPUTarget) -> Panels:
    """The bf16 panels on ``target``: pairs of k on ``vdpbf16ps``, single fp32 k values when
    widened; both accumulate in place, so the tile is the one an fp32 FMA kernel gets."""
    kind = path(target)
    return panels_mod.derive(target, "bf16", (kind, SCHEMES[kind]), 2 if kind == "bf16dp" else 1, KC_MAX)


def _round_bits(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """fp32 (scalar or vector) rounded to nearest even bf16, as i32 bits with the low half zero."""
    count = x.type.count if isinstance(x.type, ir.VectorType) else 0
    ity = ir.VectorType(I32, count) if count else I32

    def const(v: int) -> ir.Value:
        return ir.Constant(ity, [v] * count) if count else ir.Constant(ity, v)

    bits = b.bitcast(x, ity)
    odd = b.and_(b.lshr(bits, const(16)), const(1))
    return b.and_(b.add(bits, b.add(odd, const(0x7FFF))), const(-65536))  # 0xffff0000


def _to_bf16(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """fp32 (scalar or vector) to bf16 bits (i16), rounded to nearest even."""
    nty = ir.VectorType(I16, x.type.count) if isinstance(x.type, ir.VectorType) else I16
    bits = _round_bits(b, x)
    sixteen = ir.Constant(bits.type, [16] * nty.count) if isinstance(nty, ir.VectorType) else ir.Constant(I32, 16)
    return b.trunc(b.lshr(bits, sixteen), nty)


def _dot(kind: str, vw: int) -> panels_mod.Dot:
    """``acc += a . b`` per fp32 lane: a bf16 pair per i32 lane (bf16dp) or one fp32."""
    if kind == "bf16dp":
        ity = ir.VectorType(I32, vw)

        def dp(b: ir.IRBuilder, acc: ir.Value, a: ir.Value, bv: ir.Value) -> ir.Value:
            return b.call(intrinsic(b.module, DPBF16, acc.type, [acc.type, ity, ity]), [acc, a, bv])

        return dp

    def muladd(b: ir.IRBuilder, acc: ir.Value, a: ir.Value, bv: ir.Value) -> ir.Value:
        # llvm.fmuladd: an FMA where the target has one, else a multiply and an add (x86-64-v2,
        # where llvm.fma would be a libm call); a bf16 product is exact in fp32 either way.
        fn = intrinsic(b.module, f"llvm.fmuladd.{intrinsic_suffix(acc.type)}", acc.type, [acc.type] * 3)
        return b.call(fn, [a, bv, acc])

    return muladd


def _combine_b(kind: str, nr: int) -> panels_mod.Combine:
    """B's rows (``<nr x float>``) rounded to bf16: a pair interleaved into i32 lanes, or widened."""

    def combine(b: ir.IRBuilder, rows: list[ir.Value]) -> ir.Value:
        if kind == "bf16dp":
            return b.bitcast(interleave(b, [_to_bf16(b, row) for row in rows], nr), ir.VectorType(I32, nr))
        return b.bitcast(_round_bits(b, rows[0]), ir.VectorType(F32, nr))

    return combine


def _convert_a(kind: str) -> panels_mod.Convert:
    """A row's group (``<group x float>``) rounded to bf16: a pair as one i32, or one fp32."""

    def convert(b: ir.IRBuilder, group: ir.Value) -> ir.Value:
        if kind == "bf16dp":
            return b.bitcast(_to_bf16(b, group), I32)
        return b.bitcast(_round_bits(b, b.extract_element(group, ir.Constant(I32, 0))), F32)

    return convert


def build(target: LLVMTarget, dtype: str) -> ir.Module:
    """The bf16 GEMM module for the host CPU ``target``: entry ``gemm(A, B, C, M, N, K, lda,
    ldb, ldc, mc, nc, kc)`` on float32 arrays of bf16 values; the blocking within :func:`panels`'
    ``max_block``, ``kc`` a multiple of the group."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no bf16 GEMM lowering for {type(target).__name__}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    geo = panels(target)
    kind = geo.path
    nr, group, lim = geo.nr, geo.group, geo.max_block
    module = target.new_module(f"{KERNEL}_bf16_{kind}")
    elem = I32 if kind == "bf16dp" else F32
    acc_ty = ir.VectorType(F32, geo.vw)
    micro = panels_mod.emit_micro(module, geo, f"gemm_micro_bf16_{kind}", elem, acc_ty, _dot(kind, geo.vw), False)
    combine, convert = _combine_b(kind, nr), _convert_a(kind)

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        a, bm, c, m, n, k, lda, ldb, ldc, mc_max, nc_max, kc_max = args
        b = ctx.builder
        groups = -(-lim["kc"] // group)
        pack_a = ctx.local_array(I32, lim["mc"] * groups)
        pack_b = ctx.local_array(I32, -(-lim["nc"] // nr) * nr * groups)
        i0 = b.mul(ctx.program_id(1), mc_max)
        j0 = b.mul(ctx.program_id(0), nc_max)
        mc = imin(b, mc_max, b.sub(m, i0))
        nc = imin(b, nc_max, b.sub(n, j0))
        a_blk = elem_ptr(b, a, F32, b.mul(i0, lda))
        c_blk = elem_ptr(b, c, F32, b.add(b.mul(i0, ldc), j0))
        with for_range(b, i64(0), k, kc_max, name="pc") as p0:
            kc = imin(b, kc_max, b.sub(k, p0))
            b_src = (elem_ptr(b, bm, F32, b.add(b.mul(p0, ldb), j0)), F32, ldb)
            panels_mod.emit_pack_b(b, geo, b_src, pack_b, (kc, nc), combine)
            panels_mod.emit_pack_a(b, geo, (elem_ptr(b, a_blk, F32, p0), F32, lda), pack_a, (kc, mc), convert)
            first = b.icmp_signed("==", p0, i64(0))
            sizes = (ceil_div(b, kc, group), mc, nc, ldc)
            panels_mod.emit_micro_loops(b, geo, micro, (pack_a, pack_b), c_blk, F32, sizes, first)

    target.define_kernel(module, KERNEL, [PTR, PTR, PTR] + [I64] * 9, body)
    return module


def blocking(shape: Shape, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc as :func:`.llvm_panels.blocking` derives them from the target's caches."""
    return panels_mod.blocking(panels(target), shape, target, workers)


def launch(
    shape: Shape, dtype: str, target: LLVMTarget, workers: int = 1, blocks: Mapping[str, int] | None = None
) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))``
    programs; the record's config says which path (``bf16dp`` or ``widening``) the code takes,
    its tile and blocking and what they were derived from."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no bf16 GEMM lowering for {type(target).__name__}")
    return panels_mod.launch(panels(target), shape, target, workers, blocks, {"accumulate": "fp32"})


def prepare_cpu(
    inputs: dict[str, np.ndarray],
    shape: dict[str, int],
    threads: int | None = None,
    blocks: dict[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind bf16 ``C = A @ B`` (float32 arrays of bf16 values, C float32) for the host CPU, or
    ``target`` (another feature set or ISA level, for tests); ``blocks`` overrides the cache
    blocking."""
    extra = {"accumulate": "fp32"}
    return panels_mod.prepare(panels, build, inputs, shape, threads, blocks, target, extra)
