"""Warp-level matrix-multiply instructions of the GPU targets, as the SIMT kernels use them.

A :class:`MatrixInstruction` is one ``m x n x k`` multiply-add ``D = A B + C`` that a warp
(wavefront) of ``lanes`` work-items computes together, each holding registers of A and B and
elements of C. Where each lane's registers lie in the tiles is the instruction's fragment
layout, written here as affine maps of the lane's two parts ``lo = lane % split`` and
``hi = lane // split``, the form both vendors document:

* NVPTX ``mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}`` (sm_80 and newer; PTX ISA,
  "Matrix Fragments for mma.m16n8k16"): with ``g = lane // 4`` and ``t = lane % 4``, A's four
  32-bit registers hold rows ``g`` and ``g + 8`` at K ``2t`` and ``2t + 8`` (two elements each,
  consecutive in K), B's two hold K ``2t`` and ``2t + 8`` of column ``g``, and C's four
  elements are rows ``g``, ``g + 8`` at columns ``2t``, ``2t + 1``.
* AMDGCN ``v_mfma_f32_16x16x16{bf16_1k,f16}`` (gfx90a and newer, wave64; AMD's matrix
  instruction calculator): lane ``l`` holds four elements of A at row ``l % 16``, K
  ``4 (l // 16)`` onwards, four of B at column ``l % 16`` and the same K, and four of C at
  column ``l % 16``, rows ``4 (l // 16)`` onwards.

:func:`layout_cells` evaluates a layout for every lane, so a test can check that each
instruction's fragments cover its tiles exactly once. :func:`emulated` is an instruction's
semantics in portable SIMT code (its fragments exchanged through shared memory between two
barriers), so that a device without the instruction, such as a CPU OpenCL device, runs a
kernel written for it: that is how the tests execute the mma form's fragment indexing without
a GPU. It checks the kernel against the layout written here, not the layout against hardware.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from llvmlite import ir

from hwbench.kernels.llvmir.irutil import F32, I32, i64
from hwbench.kernels.llvmir.simt import Elements, SIMTContext

#: One coordinate of a fragment: ``lo_coef * lo + hi_coef * hi + offset``.
Affine = tuple[int, int, int]


@dataclass(frozen=True)
class MatrixInstruction:
    """One warp-wide ``m x n x k`` multiply-add and its fragment layout (see the module)."""

    name: str
    m: int
    n: int
    k: int
    lanes: int
    split: int
    #: Elements of A (and of B) in one register, consecutive in K.
    elems: int
    #: Per register of A: (row, first K) of its first element.
    a: tuple[tuple[Affine, Affine], ...]
    #: Per register of B: (first K, column) of its first element.
    b: tuple[tuple[Affine, Affine], ...]
    #: Per element of C: (row, column).
    c: tuple[tuple[Affine, Affine], ...]
    intrinsic: str
    #: ``nvptx`` (scalar operands, a struct back), ``amdgcn`` (vector operands, a vector back) or
    #: ``emulated`` (:func:`emulated`).
    convention: str
    #: ``bf16`` or ``fp16``: the element type of A and B.
    dtype: str

    def operand_type(self) -> ir.Type:
        """The LLVM type of one register of A or B as the intrinsic takes it."""
        if self.convention == "emulated":
            return ir.VectorType(ir.IntType(16) if self.dtype == "bf16" else ir.HalfType(), self.elems)
        if self.convention == "nvptx":
            return ir.IntType(32) if self.dtype == "bf16" else ir.VectorType(ir.HalfType(), 2)
        return ir.VectorType(ir.IntType(16) if self.dtype == "bf16" else ir.HalfType(), self.elems)

    def register(self, builder: ir.IRBuilder, elements: ir.Value) -> ir.Value:
        """A register of A or B from ``elems`` elements in their storage type (a vector)."""
        return builder.bitcast(elements, self.operand_type())

    def issuer(self, ctx: SIMTContext, lane: tuple[ir.Value, ir.Value], warp: ir.Value, warps: int) -> Issue:
        """What a kernel calls to issue the instruction (the instruction itself, or its
        emulation bound to the work-item's ``lane`` parts (lo, hi), its ``warp`` and the
        work-group's scratch for ``warps`` warps)."""
        if self.convention == "emulated":
            return _Emulation(self, ctx, lane, warp, warps)
        return self

    def __call__(
        self, builder: ir.IRBuilder, a: Sequence[ir.Value], b: Sequence[ir.Value], c: Sequence[ir.Value]
    ) -> list[ir.Value]:
        """``D = A B + C`` on this lane's registers; C and D as lists of fp32 scalars."""
        if self.convention == "emulated":
            raise ValueError("an emulated instruction is issued through issuer()")
        module = builder.module
        operand = self.operand_type()
        if self.convention == "nvptx":
            result = ir.LiteralStructType([F32] * len(self.c))
            args = [operand] * (len(a) + len(b)) + [F32] * len(c)
            fn = module.globals.get(self.intrinsic) or ir.Function(
                module, ir.FunctionType(result, args), name=self.intrinsic
            )
            out = builder.call(fn, [*a, *b, *c])
            return [builder.extract_value(out, i) for i in range(len(self.c))]
        acc_type = ir.VectorType(F32, len(self.c))
        fn = module.globals.get(self.intrinsic) or ir.Function(
            module, ir.FunctionType(acc_type, [operand, operand, acc_type, I32, I32, I32]), name=self.intrinsic
        )
        acc: ir.Value = ir.Constant(acc_type, ir.Undefined)
        for i, value in enumerate(c):
            acc = builder.insert_element(acc, value, ir.Constant(I32, i))
        zero = ir.Constant(I32, 0)
        out = builder.call(fn, [a[0], b[0], acc, zero, zero, zero])
        return [builder.extract_element(out, ir.Constant(I32, i)) for i in range(len(self.c))]


#: ``issue(builder, a_registers, b_registers, c) -> d``, as :meth:`MatrixInstruction.__call__`.
Issue = Callable[[ir.IRBuilder, Sequence[ir.Value], Sequence[ir.Value], Sequence[ir.Value]], list[ir.Value]]


class _Emulation:
    """An instruction's ``D = A B + C`` in SIMT code: every lane writes its registers of A and B
    into its warp's tiles in shared memory, a barrier, every lane sums its elements of C in
    fp32 (one rounding per multiply-add, K in order), a barrier. Every work-item of the
    work-group must issue it alike (the kernels issue in uniform control flow)."""

    def __init__(
        self, inst: MatrixInstruction, ctx: SIMTContext, lane: tuple[ir.Value, ir.Value], warp: ir.Value, warps: int
    ):
        self.inst, self.ctx, (self.lo, self.hi) = inst, ctx, lane
        self.el = Elements(ctx.builder, inst.dtype, 1)
        self.a_tile = ctx.shared(self.el.store_ty, warps * inst.m * inst.k)
        self.b_tile = ctx.shared(self.el.store_ty, warps * inst.k * inst.n)
        self.a_base = ctx.builder.mul(warp, i64(inst.m * inst.k))
        self.b_base = ctx.builder.mul(warp, i64(inst.k * inst.n))

    def __call__(
        self, builder: ir.IRBuilder, a: Sequence[ir.Value], b: Sequence[ir.Value], c: Sequence[ir.Value]
    ) -> list[ir.Value]:
        inst, el, bl = self.inst, self.el, builder
        for register, (rows, ks) in zip(a, inst.a, strict=True):
            at = bl.add(self.a_base, bl.add(bl.mul(self._at(rows), i64(inst.k)), self._at(ks)))
            for e in range(inst.elems):
                el.store_raw(bl.extract_element(register, ir.Constant(I32, e)), self.a_tile, bl.add(at, i64(e)))
        for register, (ks, cols) in zip(b, inst.b, strict=True):
            at = bl.add(self.b_base, bl.add(bl.mul(self._at(ks), i64(inst.n)), self._at(cols)))
            for e in range(inst.elems):
                where = bl.add(at, i64(e * inst.n))
                el.store_raw(bl.extract_element(register, ir.Constant(I32, e)), self.b_tile, where)
        self.ctx.barrier()
        out = []
        for value, (rows, cols) in zip(c, inst.c, strict=True):
            a_row = bl.add(self.a_base, bl.mul(self._at(rows), i64(inst.k)))
            b_col = bl.add(self.b_base, self._at(cols))
            for kk in range(inst.k):
                x = el.load(self.a_tile, bl.add(a_row, i64(kk)))
                y = el.load(self.b_tile, bl.add(b_col, i64(kk * inst.n)))
                value = el.fma(x, y, value)
            out.append(value)
        self.ctx.barrier()
        return out

    def _at(self, affine: Affine) -> ir.Value:
        return coordinate(self.ctx.builder, affine, self.lo, self.hi)


def emulated(inst: MatrixInstruction) -> MatrixInstruction:
    """``inst``'s layout and semantics in portable SIMT code (see :class:`_Emulation`)."""
    return dataclasses.replace(inst, name=f"{inst.name} (emulated)", convention="emulated", intrinsic="")


def coordinate(builder: ir.IRBuilder, affine: Affine, lo: ir.Value, hi: ir.Value) -> ir.Value:
    """An :data:`Affine` coordinate of the lane whose parts are ``lo`` and ``hi`` (i64 values)."""
    lo_coef, hi_coef, offset = affine
    value: ir.Value = i64(offset)
    if lo_coef:
        value = builder.add(value, builder.mul(lo, i64(lo_coef)))
    if hi_coef:
        value = builder.add(value, builder.mul(hi, i64(hi_coef)))
    return value


def layout_cells(inst: MatrixInstruction, operand: str) -> list[tuple[int, int]]:
    """Every (row, column) cell lane by lane of ``operand`` (``a``: m x k, ``b``: k x n, ``c``:
    m x n), each register's consecutive elements included."""
    cells = []
    for lane in range(inst.lanes):
        lo, hi = lane % inst.split, lane // inst.split
        for first, second in getattr(inst, operand):
            x = first[0] * lo + first[1] * hi + first[2]
            y = second[0] * lo + second[1] * hi + second[2]
            if operand == "c":
                cells.append((x, y))
            elif operand == "a":
                cells.extend((x, y + e) for e in range(inst.elems))
            else:
                cells.extend((x + e, y) for e in range(inst.elems))
    return cells


def nvptx_mma(dtype: str, arch: str) -> MatrixInstruction | None:
    """``mma.sync.aligned.m16n8k16.row.col.f32`` of ``dtype`` on ``arch`` (sm_80 and newer), else None."""
    version = re.match(r"sm_(\d+)", arch)
    if dtype not in ("bf16", "fp16") or version is None or int(version[1]) < 80:
        return None
    g, t = (0, 1, 0), (1, 0, 0)  # g = lane // 4 (hi), t = lane % 4 (lo)

    def plus(affine: Affine, offset: int, scale: int = 1) -> Affine:
        return (affine[0] * scale, affine[1] * scale, affine[2] + offset)

    return MatrixInstruction(
        name=f"mma.m16n8k16.{dtype.replace('fp', 'f')}",
        m=16,
        n=8,
        k=16,
        lanes=32,
        split=4,
        elems=2,
        a=tuple((plus(g, dr), plus(t, dk, 2)) for dk in (0, 8) for dr in (0, 8)),
        b=tuple((plus(t, dk, 2), g) for dk in (0, 8)),
        c=tuple((plus(g, dr), plus(t, dc, 2)) for dr in (0, 8) for dc in (0, 1)),
        intrinsic="llvm.nvvm.mma.m16n8k16.row.col." + ("bf16" if dtype == "bf16" else "f32.f32"),
        convention="nvptx",
        dtype=dtype,
    )


#: AMD architectures with the 16x16x16 bf16 (``_1k``) and f16 MFMA instructions.
MFMA_ARCHS = ("gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")


def amdgcn_mfma(dtype: str, arch: str) -> MatrixInstruction | None:
    """``v_mfma_f32_16x16x16`` of ``dtype`` on ``arch`` (gfx90a and newer), else None."""
    if dtype not in ("bf16", "fp16") or arch not in MFMA_ARCHS:
        return None
    row, quad = (1, 0, 0), (0, 4, 0)  # lo = lane % 16, hi = lane // 16
    return MatrixInstruction(
        name=f"mfma.16x16x16.{dtype.replace('fp', 'f')}",
        m=16,
        n=16,
        k=16,
        lanes=64,
        split=16,
        elems=4,
        a=((row, quad),),
        b=((quad, row),),
        c=tuple(((0, 4, r), row) for r in range(4)),
        intrinsic="llvm.amdgcn.mfma.f32.16x16x16" + ("bf16.1k" if dtype == "bf16" else "f16"),
        convention="amdgcn",
        dtype=dtype,
    )
