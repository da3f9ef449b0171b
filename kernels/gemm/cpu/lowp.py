"""int8 GEMM ``C = A @ B`` (int8 inputs, int32 sums and output) on the host CPU in llvmlite IR.

The loops, blocking, launch and bind are :mod:`.llvm_driver`'s (BLIS/Goto); this module supplies
the tile, the microkernel and the packing (on :mod:`.llvm_panels`' vector panels): B packed into
``NR``-column panels, A into ``MR``-row panels, an ``MR x NR`` register-blocked microkernel whose
accumulators live in vector registers; the tile comes from the target's description or the tuner. K
is grouped so that one i32 lane holds one group: a packed B panel holds, per group, each column's
group side by side, a packed A panel each row's group as one i32 the microkernel broadcasts. K past
the slice is zero in B, so any K works. Two paths compute ``acc += a . b`` per lane, chosen by the
features:

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
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.kernel import Shape
from hwbench.kernels.gemm.cpu import driver
from hwbench.kernels.gemm.cpu import panels as panels_mod
from hwbench.kernels.gemm.cpu.driver import Tile
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel
from hwbench.kernels.llvmir.irutil import I32, intrinsic
from hwbench.kernels.llvmir.target import CPUTarget, enabled_features

KERNEL = "gemm"
DTYPES = ("int8",)
I8, I16 = ir.IntType(8), ir.IntType(16)
#: Upper bounds of nc (columns) and kc (k values) baked into the workspace.
NC_MAX, KC_MAX = 2048, 2048
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


def tile(target: CPUTarget, dtype: str = "int8", config: Mapping[str, Any] | None = None) -> Tile:
    """The int8 tile on ``target``: groups of 4 on ``vpdpbusd``, of 2 on ``vpmaddwd`` (whose
    product, held before it is added, takes the tile's spare register); ``config``'s register
    tile (``MR``, ``NR_VECTORS``) where it names one."""
    kind = instruction(target)
    group = 4 if kind == "vnni" else 2
    caps = {"nc": NC_MAX, "kc": KC_MAX}
    route = (path(target), SCHEMES[kind])
    return panels_mod.vector_tile(target, "int8", route, (group, 4, caps), config, extra={"instruction": kind})


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


def parts(target: CPUTarget, dtype: str = "int8", config: Mapping[str, Any] | None = None) -> driver.Parts:
    """The int8 kernel's tile, microkernel and packers on ``target`` (for :mod:`.llvm_driver`)."""
    geo = tile(target, "int8", config)
    kind = instruction(target)
    vw = geo.nr // geo.nr_vectors
    fixed = kind == "vnni"  # only vpdpbusd's unsigned A needs the column-sum correction
    name = f"{KERNEL}_micro_int8_{kind}"
    micro = panels_mod.micro(geo, name, I32, ir.VectorType(I32, vw), _dot(kind, vw), fixed)
    pack_b = panels_mod.pack_b(geo, I8, _combine_b(kind, geo.nr), -128 if fixed else None)
    pack_a = panels_mod.pack_a(geo, I8, _convert_a(kind))
    name = f"{KERNEL}_int8_{kind}_{geo.mr}x{geo.nr_vectors}"
    return driver.Parts(name, geo, I8, I32, micro, pack_a, pack_b, correction=fixed)


def build(target: CPUTarget, dtype: str = "int8", config: Mapping[str, Any] | None = None) -> ir.Module:
    """The int8 GEMM module for the host CPU ``target`` (:func:`.llvm_driver.build`), C int32, with
    ``config``'s register tile or the derived one."""
    return driver.build(target, parts(target, dtype, config))


def blocking(shape: Shape, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc as :func:`.llvm_driver.blocking` derives them from the target's caches."""
    return driver.blocking(tile(target), target, shape, workers)


def prepare_cpu(inputs: dict[str, np.ndarray], shape: dict[str, int], **options: Any) -> PreparedKernel:
    """Bind int8 ``C = A @ B`` (C int32) for the host CPU; ``options`` are :func:`.llvm_driver.prepare`'s
    ``threads``, ``blocks`` (the cache blocking) and ``target`` (another feature set or ISA level)."""
    return driver.prepare(tile, build, inputs, shape, **options)
