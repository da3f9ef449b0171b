"""int8 GEMM ``C = A @ B`` (int8 inputs, int32 sums and output) on the host CPU in llvmlite IR.

The structure is :mod:`.llvm`'s (BLIS/Goto) on :mod:`.llvm_panels`' scaffold: per ``kc`` slice
of K one program packs its B block into ``NR``-column panels and its A block into ``MR``-row
panels, then runs an ``MR x NR`` register-blocked microkernel whose accumulators live in vector
registers; tile and blocking come from the target's description. K is grouped so that one i32
lane holds one group: a packed B panel holds, per group, each column's group side by side, a
packed A panel each row's group as one i32 the microkernel broadcasts. K past the slice is zero
in B, so any K works. Two paths compute ``acc += a . b`` per lane, chosen by the features:

* ``vnni`` (groups of 4 bytes): ``vpdpbusd`` (AVX-512 VNNI on 512-bit vectors, AVX-VNNI or
  AVX-512 VNNI+VL on 256-bit ones), which multiplies *unsigned* bytes by signed ones. A is
  packed as ``A + 128`` (``xor 0x80``), so the dot is ``sum (A + 128) B = A.B + 128 colsum(B)``;
  the packing of B also sums its columns and the microkernel starts from ``-128 colsum(B)``.
  i32 arithmetic wraps, so the result equals the int32 dot exactly whatever the order.
* ``widening`` (groups of 2): both operands sign-extended to int16 when packed, and
  ``vpmaddwd`` (``pmaddwd`` on SSE2, AVX2 and AVX-512BW) multiplies the int16 pairs and adds
  each pair's two products into an i32 lane, then ``vpaddd`` accumulates. ``vpmaddwd``'s one
  overflow is ``(-32768)^2 * 2``; from int8 values ``|a0 b0 + a1 b1| <= 2 * 128 * 128 = 32768``,
  so no lane can saturate or wrap and no offset correction is needed. It issues as many
  multiplies per int8 multiply-add as the u8 x s8 ``vpmaddubsw`` + ``vpmaddwd`` pair (whose
  int16 sums saturate at ``2 * 255 * 127``), and fewer than a ``vpmaddubsw`` on a split operand.
  Off x86 the same pairs are multiplied in plain vector IR (sign extension, multiply, the even
  and odd lanes added).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from llvmlite import ir

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch
from hwbench.kernels.gemm import llvm_panels as panels_mod
from hwbench.kernels.gemm.llvm_panels import Panels
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel
from hwbench.kernels.llvmir.irutil import I32, PTR, ceil_div, elem_ptr, for_range, i64, imin, intrinsic
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget, enabled_features, host_target

KERNEL = "gemm"
DTYPES = ("int8",)
I8, I16 = ir.IntType(8), ir.IntType(16)
#: Upper bound of kc (k values) baked into the workspace.
KC_MAX = 2048
#: The pmaddwd intrinsic per vector width in bits.
PMADDWD = {128: "llvm.x86.sse2.pmadd.wd", 256: "llvm.x86.avx2.pmadd.wd", 512: "llvm.x86.avx512.pmaddw.d.512"}
SCHEMES = {
    "vnni": "u8 x s8 on vpdpbusd, A offset by +128 and -128 colsum(B) added: exact in wrapping i32",
    "vpmaddwd": "s8 sign-extended to s16 pairs on vpmaddwd, i32 sums: |a0 b0 + a1 b1| <= 2*128^2, cannot saturate",
    "generic": "s8 sign-extended to s16 pairs, products of each pair added in i32 (plain vector IR)",
}


def _vnni(target: CPUTarget) -> bool:
    enabled = enabled_features(target.features)
    bits = target.description.vector_bytes * 8
    if bits == 512:
        return "avx512vnni" in enabled
    return bits == 256 and ("avxvnni" in enabled or {"avx512vnni", "avx512vl"} <= enabled)


def is_x86(target: CPUTarget) -> bool:
    """Whether ``target`` is an x86 CPU (its ``pmaddwd`` intrinsics exist)."""
    return target.triple.startswith(("x86_64", "i686", "i386"))


def path(target: CPUTarget) -> str:
    """``vnni`` where the target has a ``vpdpbusd`` of its vector width, else ``widening``."""
    return "vnni" if _vnni(target) else "widening"


def instruction(target: CPUTarget) -> str:
    """The dot product the code is built on: ``vnni``, ``vpmaddwd`` (x86) or ``generic``."""
    return "vnni" if _vnni(target) else "vpmaddwd" if is_x86(target) else "generic"


def panels(target: CPUTarget) -> Panels:
    """The int8 panels on ``target``: groups of 4 on ``vpdpbusd``, of 2 on ``vpmaddwd`` (whose
    product, held before it is added, takes the tile's spare register)."""
    kind = instruction(target)
    return panels_mod.derive(target, "int8", (path(target), SCHEMES[kind]), 4 if kind == "vnni" else 2, KC_MAX)


def lanes(target: CPUTarget) -> int:
    """i32 lanes of one vector (each lane one column of C)."""
    return target.vector_width("int32")


def _dot(kind: str, vw: int) -> panels_mod.Dot:
    """``acc[l] += sum_t a[group l + t] * b[group l + t]`` on ``<vw x i32>`` of packed groups."""
    i32v = ir.VectorType(I32, vw)
    if kind == "vnni":
        bytes_ty = ir.VectorType(I8, 4 * vw)

        def vnni(b: ir.IRBuilder, acc: ir.Value, a: ir.Value, bv: ir.Value) -> ir.Value:
            fn = intrinsic(b.module, f"llvm.x86.avx512.vpdpbusd.{32 * vw}", i32v, [i32v, bytes_ty, bytes_ty])
            return b.call(fn, [acc, b.bitcast(a, bytes_ty), b.bitcast(bv, bytes_ty)])

        return vnni
    halves = ir.VectorType(I16, 2 * vw)
    if kind == "vpmaddwd":

        def madd(b: ir.IRBuilder, acc: ir.Value, a: ir.Value, bv: ir.Value) -> ir.Value:
            fn = intrinsic(b.module, PMADDWD[32 * vw], i32v, [halves, halves])
            return b.add(acc, b.call(fn, [b.bitcast(a, halves), b.bitcast(bv, halves)]))

        return madd
    wide = ir.VectorType(I32, 2 * vw)
    even, odd = (ir.Constant(i32v, [2 * lane + t for lane in range(vw)]) for t in (0, 1))

    def generic(b: ir.IRBuilder, acc: ir.Value, a: ir.Value, bv: ir.Value) -> ir.Value:
        prod = b.mul(b.sext(b.bitcast(a, halves), wide), b.sext(b.bitcast(bv, halves), wide))
        undef = ir.Constant(wide, ir.Undefined)
        return b.add(acc, b.add(b.shuffle_vector(prod, undef, even), b.shuffle_vector(prod, undef, odd)))

    return generic


def interleave(b: ir.IRBuilder, rows: list[ir.Value], width: int) -> ir.Value:
    """Two or four ``<width x T>`` rows as one vector with column j's elements side by side
    (at ``len(rows)*j ...``): the layout of a dot-product instruction's packed operand."""
    group = len(rows)
    pair = ir.Constant(ir.VectorType(I32, 2 * width), list(range(2 * width)))  # a shuffle mask
    pairs = [b.shuffle_vector(rows[t], rows[t + 1], pair) for t in range(0, group, 2)]
    order = [t * width + j for j in range(width) for t in range(group)]
    if group == 2:
        return b.shuffle_vector(pairs[0], pairs[0], ir.Constant(ir.VectorType(I32, 2 * width), order))
    return b.shuffle_vector(pairs[0], pairs[1], ir.Constant(ir.VectorType(I32, group * width), order))


def _combine_b(kind: str, nr: int) -> panels_mod.Combine:
    """A group of B rows (``<nr x i8>`` each) as NR packed i32: bytes (vnni) or int16 halves."""
    i32v = ir.VectorType(I32, nr)

    def combine(b: ir.IRBuilder, rows: list[ir.Value]) -> ir.Value:
        if kind != "vnni":
            rows = [b.sext(row, ir.VectorType(I16, nr)) for row in rows]
        return b.bitcast(interleave(b, rows, nr), i32v)

    return combine


def _convert_a(kind: str) -> panels_mod.Convert:
    """A row's group (``<group x i8>``) as the i32 the microkernel broadcasts."""

    def convert(b: ir.IRBuilder, group: ir.Value) -> ir.Value:
        if kind == "vnni":
            return b.xor(b.bitcast(group, I32), ir.Constant(I32, 0x80808080))
        return b.bitcast(b.sext(group, ir.VectorType(I16, 2)), I32)

    return convert


def build(target: LLVMTarget, dtype: str) -> ir.Module:
    """The int8 GEMM module for the host CPU ``target``: entry ``gemm(A, B, C, M, N, K, lda,
    ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))`` programs, C int32; needs the
    blocking within :func:`panels`' ``max_block``, ``nc`` a multiple of NR and ``kc`` of the group."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no int8 GEMM lowering for {type(target).__name__}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    geo = panels(target)
    kind = instruction(target)
    nr, vw, group, lim = geo.nr, geo.vw, geo.group, geo.max_block
    module = target.new_module(f"{KERNEL}_int8_{kind}")
    acc_ty = ir.VectorType(I32, vw)
    fixed = kind == "vnni"  # only vpdpbusd's unsigned A needs the column-sum correction
    micro = panels_mod.emit_micro(module, geo, f"{KERNEL}_micro_int8_{kind}", I32, acc_ty, _dot(kind, vw), fixed)
    combine, convert = _combine_b(kind, nr), _convert_a(kind)

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        a, bm, c, m, n, k, lda, ldb, ldc, mc_max, nc_max, kc_max = args
        b = ctx.builder
        groups = -(-lim["kc"] // group)
        pack_a = ctx.local_array(I32, lim["mc"] * groups)
        pack_b = ctx.local_array(I32, -(-lim["nc"] // nr) * nr * groups)
        corr = ctx.local_array(I32, -(-lim["nc"] // nr) * nr) if fixed else None
        i0 = b.mul(ctx.program_id(1), mc_max)
        j0 = b.mul(ctx.program_id(0), nc_max)
        mc = imin(b, mc_max, b.sub(m, i0))
        nc = imin(b, nc_max, b.sub(n, j0))
        a_blk = elem_ptr(b, a, I8, b.mul(i0, lda))
        c_blk = elem_ptr(b, c, I32, b.add(b.mul(i0, ldc), j0))
        with for_range(b, i64(0), k, kc_max, name="pc") as p0:
            kc = imin(b, kc_max, b.sub(k, p0))
            b_src = (elem_ptr(b, bm, I8, b.add(b.mul(p0, ldb), j0)), I8, ldb)
            panels_mod.emit_pack_b(b, geo, b_src, pack_b, (kc, nc), combine, (corr, -128) if fixed else None)
            panels_mod.emit_pack_a(b, geo, (elem_ptr(b, a_blk, I8, p0), I8, lda), pack_a, (kc, mc), convert)
            first = b.icmp_signed("==", p0, i64(0))
            sizes = (ceil_div(b, kc, group), mc, nc, ldc)
            packed = (pack_a, pack_b)
            panels_mod.emit_micro_loops(b, geo, micro, packed, c_blk, I32, sizes, first, corr if fixed else None)

    target.define_kernel(module, KERNEL, [PTR, PTR, PTR] + [ir.IntType(64)] * 9, body)
    return module


def blocking(shape: Shape, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc (:func:`.llvm_panels.blocking`) from the target's caches."""
    return panels_mod.blocking(panels(target), shape, target, workers)


def launch(
    shape: Shape, dtype: str, target: LLVMTarget, workers: int = 1, blocks: Mapping[str, int] | None = None
) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))``
    programs; the record's config says which path (``vnni`` or ``widening``) and scheme the code
    takes, its tile and blocking and what they were derived from."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no int8 GEMM lowering for {type(target).__name__}")
    return panels_mod.launch(panels(target), shape, target, workers, blocks, {"instruction": instruction(target)})


def prepare_cpu(
    inputs: dict[str, np.ndarray],
    shape: dict[str, int],
    threads: int | None = None,
    blocks: dict[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind int8 ``C = A @ B`` (C int32) for the host CPU, or ``target`` (another feature set or
    ISA level, for tests); ``blocks`` overrides the cache blocking."""
    extra = {"instruction": instruction(target or host_target())}
    return panels_mod.prepare(panels, build, inputs, shape, threads, blocks, target, extra)
