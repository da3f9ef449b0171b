"""bf16 GEMM ``C = A @ B`` (bf16 inputs held in float32, fp32 sums and output) on the host CPU.

Like :mod:`.llvm_lowp`, it supplies :mod:`.llvm_driver` its tile, microkernel and packing (on
:mod:`.llvm_panels`' vector panels): packing rounds A and B to bf16 (exact for inputs that are bf16
values, as the spec draws them), tile and blocking come from the target's description, K past the
slice is zero in B. Two paths compute the products, chosen by the target's features:

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
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.kernels.gemm.cpu import driver
from hwbench.kernels.gemm.cpu import panels as panels_mod
from hwbench.kernels.gemm.cpu.driver import Tile
from hwbench.kernels.gemm.cpu.lowp import interleave
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel
from hwbench.kernels.llvmir.irutil import F32, I32, intrinsic, intrinsic_suffix
from hwbench.kernels.llvmir.target import CPUTarget, enabled_features

KERNEL = "gemm"
DTYPES = ("bf16",)
I16 = ir.IntType(16)
#: Upper bounds of nc (columns) and kc (k values) baked into the workspace.
NC_MAX, KC_MAX = 2048, 1024
DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"
SCHEMES = {
    "bf16dp": "bf16 pairs on vdpbf16ps, fp32 sums",
    "widening": "bf16 widened to fp32 when packed (exact), fp32 FMAs on fp32's register tile",
}


def path(target: CPUTarget) -> str:
    """``bf16dp`` where the target has AVX-512 BF16 on 512-bit vectors, else ``widening``."""
    enabled = enabled_features(target.features)
    return "bf16dp" if "avx512bf16" in enabled and target.vector_width("fp32") == 16 else "widening"


def tile(target: CPUTarget, dtype: str = "bf16", config: Mapping[str, Any] | None = None) -> Tile:
    """The bf16 tile on ``target``: pairs of k on ``vdpbf16ps``, single fp32 k values when
    widened; both accumulate in place, so the tile is the one an fp32 FMA kernel gets (or
    ``config``'s register tile, ``MR`` and ``NR_VECTORS``, where it names one)."""
    kind = path(target)
    packing = (2 if kind == "bf16dp" else 1, 4, {"nc": NC_MAX, "kc": KC_MAX})
    return panels_mod.vector_tile(target, "bf16", (kind, SCHEMES[kind]), packing, config, extra={"accumulate": "fp32"})


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


def parts(target: CPUTarget, dtype: str = "bf16", config: Mapping[str, Any] | None = None) -> driver.Parts:
    """The bf16 kernel's tile, microkernel and packers on ``target`` (for :mod:`.llvm_driver`)."""
    geo = tile(target, "bf16", config)
    kind = geo.path
    vw = geo.nr // geo.nr_vectors
    elem = I32 if kind == "bf16dp" else F32
    micro = panels_mod.micro(geo, f"{KERNEL}_micro_bf16_{kind}", elem, ir.VectorType(F32, vw), _dot(kind, vw), False)
    pack_b = panels_mod.pack_b(geo, F32, _combine_b(kind, geo.nr))
    pack_a = panels_mod.pack_a(geo, F32, _convert_a(kind))
    return driver.Parts(f"{KERNEL}_bf16_{kind}_{geo.mr}x{geo.nr_vectors}", geo, F32, F32, micro, pack_a, pack_b)


def build(target: CPUTarget, dtype: str = "bf16", config: Mapping[str, Any] | None = None) -> ir.Module:
    """The bf16 GEMM module (:func:`.llvm_driver.build`) on float32 arrays of bf16 values for
    ``target``, its register tile ``config``'s or the derived one."""
    return driver.build(target, parts(target, dtype, config))


def prepare_cpu(inputs: dict[str, np.ndarray], shape: dict[str, int], **options: Any) -> PreparedKernel:
    """Bind bf16 ``C = A @ B`` (float32 arrays of bf16 values, C float32) on the host CPU, or on
    ``target=`` (another feature set or ISA level); ``threads=``, ``blocks=`` as for
    :func:`.llvm_driver.prepare`."""
    return driver.prepare(tile, build, inputs, shape, **options)
