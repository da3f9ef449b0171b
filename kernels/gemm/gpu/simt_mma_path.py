"""The data path of the mma GEMM (:mod:`.simt_mma`): shared layouts, staging copies, fragment loads.

Shared tiles hold A as ``[m][k]``, and B as ``[k][n]`` for ``mma.sync`` (as in global memory;
``ldmatrix.trans`` gives its fragments) or, for ``v_mfma`` (whose operands both hold consecutive
K in a lane, and gfx9 LDS has no transposing read), as ``[n][k]`` (the ``bt`` layout), in
16-byte chunks of 8 elements whose position in a line is XOR-swizzled by the line
(:func:`swizzled`): the 8 lines of any aligned run of 8 put a given chunk into 8 different
16-byte bank groups, so the copies of a warp's consecutive pieces, the ``ldmatrix`` rows of one
8 x 8 matrix and the ``ds_read_b128`` of 8 consecutive lanes touch every bank once.

Staging moves 16-byte pieces: ``async`` by ``cp.async`` (NVPTX), zero-filled past the matrix;
``vector`` by 16-byte loads into registers and 16-byte stores (AMDGCN, and any target without
asynchronous copies), zeros selected past the matrix when they land, B into ``bt`` as 32-bit K
pairs (:class:`PairStager`); ``plain`` element by element with clamped indices (any K, N and
alignment). Fragments: ``ldmatrix`` (A) and ``ldmatrix.trans`` (B) for ``mma.m16n8k16``, or
their emulation by the loads each lane's registers come from on a target without them; for
``v_mfma 16x16x16`` A and B alike by 16-byte reads (``ds_read_b128``), each lane's 8
consecutive K split over two instructions.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any, Protocol

from llvmlite import ir

from hwbench.kernels.llvmir import gpu_intrinsics as nv
from hwbench.kernels.llvmir.irutil import I32, I64, i64
from hwbench.kernels.llvmir.simt import Elements, clamped_lanes

#: Elements of one 16-byte chunk (16-bit dtypes).
VEC = 8


class Ops(Protocol):
    """Integer arithmetic of an address expression: on Python ints (:class:`Ints`) or emitted (:class:`IROps`)."""

    def add(self, x: Any, y: Any) -> Any: ...
    def mul(self, x: Any, c: int) -> Any: ...
    def xor(self, x: Any, y: Any) -> Any: ...
    def shr(self, x: Any, c: int) -> Any: ...
    def mask(self, x: Any, c: int) -> Any: ...


class Ints:
    """:class:`Ops` on Python ints: what an address expression evaluates to for given lanes."""

    def add(self, x: int, y: int) -> int:
        return x + y

    def mul(self, x: int, c: int) -> int:
        return x * c

    def xor(self, x: int, y: int) -> int:
        return x ^ y

    def shr(self, x: int, c: int) -> int:
        return x >> c

    def mask(self, x: int, c: int) -> int:
        return x & c


class IROps:
    """:class:`Ops` emitted as instructions on ``ty`` (i64, or i32 for shared-memory offsets; ints
    are constants)."""

    def __init__(self, builder: ir.IRBuilder, ty: ir.IntType = I64) -> None:
        self.b, self.ty = builder, ty

    def _v(self, x: Any) -> ir.Value:
        return ir.Constant(self.ty, x) if isinstance(x, int) else x

    def c(self, x: int) -> ir.Constant:
        """``x`` as a constant of this type."""
        return ir.Constant(self.ty, x)

    def narrow(self, x: ir.Value) -> ir.Value:
        """``x`` (i64) in this type."""
        return x if x.type == self.ty else self.b.trunc(x, self.ty)

    def add(self, x: Any, y: Any) -> Any:
        return x + y if isinstance(x, int) and isinstance(y, int) else self.b.add(self._v(x), self._v(y))

    def mul(self, x: Any, c: int) -> Any:
        return x * c if isinstance(x, int) else self.b.mul(x, self._v(c))

    def xor(self, x: Any, y: Any) -> Any:
        return x ^ y if isinstance(x, int) and isinstance(y, int) else self.b.xor(self._v(x), self._v(y))

    def shr(self, x: Any, c: int) -> Any:
        return x >> c if isinstance(x, int) else self.b.lshr(x, self._v(c))

    def mask(self, x: Any, c: int) -> Any:
        return x & c if isinstance(x, int) else self.b.and_(x, self._v(c))


def swizzled(ops: Ops, line: Any, chunk: Any, chunks: int) -> Any:
    """Element offset of 16-byte ``chunk`` of ``line`` in a tile of ``chunks`` chunks per line:
    the chunk XOR the line's place among the lines sharing 128 bytes of banks (none where
    ``chunks`` is not a power of two)."""
    if chunks & (chunks - 1):
        return ops.add(ops.mul(line, chunks * VEC), ops.mul(chunk, VEC))
    per = max(1, 8 // chunks)  # lines per 128 bytes
    key = ops.mask(ops.shr(line, per.bit_length() - 1), min(chunks, 8) - 1)
    return ops.add(ops.mul(line, chunks * VEC), ops.mul(ops.xor(chunk, key), VEC))


def pieces(threads: int, lines: int, chunks: int) -> list[tuple[int, int]]:
    """(round, offset) of a work-item's 16-byte pieces of a ``lines x chunks`` tile: pieces
    ``tid + offset`` (the last round partial when the tile is not a whole number of rounds)."""
    return [(s, s * threads) for s in range(-(-lines * chunks // threads))]


def piece_place(ops: Ops, piece: Any, chunks: int) -> tuple[Any, Any]:
    """(line, chunk) of a piece, ``chunks`` (a power of two) per line."""
    return ops.shr(piece, chunks.bit_length() - 1), ops.mask(piece, chunks - 1)


class Stager:
    """One operand's copy into a stage of its shared tile: ``issue`` starts it (``async``) or
    loads this work-item's pieces into registers (``vector``, ``plain``), ``land`` stores them."""

    def __init__(
        self, b: ir.IRBuilder, el: Elements, form: str, tile: ir.Value, src: ir.Value, shape: Mapping[str, Any]
    ):
        self.b, self.el, self.form, self.tile, self.src = b, el, form, tile, src
        self.lines, self.chunks = shape["lines"], shape["chunks"]
        self.threads, self.tid = shape["threads"], shape["tid"]
        #: (global row, global column, rows, columns, row length) of line 0 chunk 0 of a K tile.
        self.origin = shape["origin"]
        #: ``a``: lines are A's rows, chunks K; ``b``: lines K, chunks B's columns; ``bt``: lines
        #: B's columns, chunks K (B transposed; element loads only, :class:`PairStager` for 16-byte ones).
        self.layout = shape["layout"]

    def issue(self, k0: ir.Value, stage: ir.Value) -> list[Any]:
        """Start the copy of the K tile at ``k0`` into ``stage`` (an element offset)."""
        b, ops, ops32 = self.b, IROps(self.b), IROps(self.b, I32)
        out = []
        total = self.lines * self.chunks
        for s, extra in pieces(self.threads, self.lines, self.chunks):
            piece = b.add(self.tid, i64(extra))
            line, chunk = piece_place(ops, piece, self.chunks)
            slot = b.add(stage, swizzled(ops32, ops32.narrow(line), ops32.narrow(chunk), self.chunks))
            guard = b.icmp_signed("<", piece, i64(total)) if (s + 1) * self.threads > total else None
            out.append((slot, guard, self._load(k0, line, chunk, slot, guard)))
        return out

    def _load(self, k0: ir.Value, line: ir.Value, chunk: ir.Value, slot: ir.Value, guard: ir.Value | None) -> Any:
        b, el = self.b, self.el
        (row0, col0), size, width = self.origin
        zero = ir.Constant(el.store_ty, 0)
        if self.layout == "bt":  # K runs along the line: element loads down B's column
            if self.form != "plain":
                raise ValueError("B transposed is staged by element loads or a PairStager")
            first, col = b.add(k0, b.mul(chunk, i64(VEC))), b.add(col0, line)
            lanes = [clamped_lanes(b, (b.add(first, i64(e)), col), size, width, 1)[0] for e in range(VEC)]
            return [b.select(ok, el.load_raw(self.src, where), zero) for where, ok in lanes]
        if self.layout == "a":
            row, col = b.add(row0, line), b.add(k0, b.mul(chunk, i64(VEC)))
        else:
            row, col = b.add(k0, line), b.add(col0, b.mul(chunk, i64(VEC)))
        if self.form == "plain":
            lanes = clamped_lanes(b, (row, col), size, width, VEC)
            return [b.select(ok, el.load_raw(self.src, where), zero) for where, ok in lanes]
        if self.form == "async":  # (ptxas keeps 64-bit addresses in fewer registers)
            ok = b.and_(b.icmp_signed("<", row, size[0]), b.icmp_signed("<", col, size[1]))
        else:  # the piece's place within what is left of the matrix past the tile's corner
            corner = (row0, k0) if self.layout == "a" else (k0, col0)
            ok = b.and_(
                inside(b, line, b.sub(size[0], corner[0])), inside(b, b.mul(chunk, i64(VEC)), b.sub(size[1], corner[1]))
            )
        if guard is not None:
            ok = b.and_(ok, guard)
        if self.form == "async":
            src = b.gep(self.src, [b.select(ok, b.add(b.mul(row, width), col), i64(0))], source_etype=el.store_ty)
            dst = b.gep(self.tile, [slot], inbounds=True, source_etype=el.store_ty)
            with b.if_then(guard) if guard is not None else nullcontext():
                nv.cp_async_16(b, dst, src, b.select(ok, ir.Constant(I32, 16), ir.Constant(I32, 0)))
            return None
        # the K tile's corner (uniform) and the piece's place from it (32-bit)
        corner64 = b.add(b.mul(row0, width), k0) if self.layout == "a" else b.add(b.mul(k0, width), col0)
        src = piece_address(b, el, self.src, corner64, (line, b.mul(chunk, i64(VEC)), width), ok)
        return b.load(src, typ=ir.VectorType(el.store_ty, VEC), align=16), ok

    def land(self, issued: list[Any]) -> None:
        """Store what :meth:`issue` loaded into registers (nothing to do for ``async``)."""
        b, el = self.b, self.el
        for slot, guard, value in issued:
            if value is None:
                continue
            if isinstance(value, list):
                vec: ir.Value = ir.Constant(ir.VectorType(el.store_ty, VEC), ir.Undefined)
                for j, x in enumerate(value):
                    vec = b.insert_element(vec, x, ir.Constant(I32, j))
                value = vec
            else:  # zeros past the matrix, selected only now: the loads are waited for here
                value = b.select(value[1], value[0], ir.Constant(value[0].type, None))
            with b.if_then(guard) if guard is not None else nullcontext():
                el.store_raw_vec(value, self.tile, slot, 16)


def inside(b: ir.IRBuilder, place: ir.Value, left: ir.Value) -> ir.Value:
    """Whether ``place`` (a work-item's offset from a tile's corner, small) is below ``left``
    (what the matrix has past the corner, uniform, possibly negative), in 32-bit arithmetic."""
    bounded = b.select(b.icmp_signed("<", left, i64(1 << 30)), left, i64(1 << 30))
    bounded = b.select(b.icmp_signed("<", bounded, i64(0)), i64(0), bounded)
    return b.icmp_signed("<", b.trunc(place, I32), b.trunc(bounded, I32))


def piece_address(
    b: ir.IRBuilder,
    el: Elements,
    src: ir.Value,
    corner: ir.Value,
    place: tuple[ir.Value, ir.Value, ir.Value],
    ok: ir.Value,
) -> ir.Value:
    """``src[corner + line * width + column]`` for a piece at ``place`` (line, column, width),
    or ``src[corner]`` where not ``ok``: the corner of a K tile (uniform) in 64 bits, the piece's
    place from it in 32 (the 16-byte forms are chosen only where a tile's extent fits them)."""
    line, column, width = (b.trunc(v, I32) for v in place)
    offset = b.select(ok, b.add(b.mul(line, width), column), ir.Constant(I32, 0))
    base = b.gep(src, [corner], inbounds=True, source_etype=el.store_ty)
    return b.gep(base, [b.zext(offset, I64)], inbounds=True, source_etype=el.store_ty)


def pair_place(ops: Ops, pair: Any, kpairs: int) -> tuple[Any, Any]:
    """(K pair, column chunk) of a :class:`PairStager` piece: K pairs vary fastest."""
    return ops.mask(pair, kpairs - 1), ops.shr(pair, kpairs.bit_length() - 1)


def pair_slot(ops: Ops, kpair: Any, chunk: Any, j: int, chunks: int, stage: Any = 0) -> Any:
    """Element offset in the ``bt`` tile (``chunks`` K chunks per line), from ``stage``, of the
    ``j``-th 32-bit store of a :class:`PairStager` piece: K ``2 kpair`` and the next of column
    ``8 chunk + (j ^ (chunk % 2))``. Odd chunks store their columns in swapped pairs, so that in
    each store the 16 pairs of an even chunk and of the odd chunk beside it fall on lines of
    different parity: 32 lanes, 32 banks. Where a line's swizzle key is ``j``'s alone (``chunks``
    at most 4), the offset is one of two per-lane bases plus the stage, XOR the key, plus a
    constant: two live registers, not eight."""
    k, odd, width = ops.mul(kpair, 2), ops.mask(chunk, 1), chunks * VEC
    per = max(1, 8 // chunks)
    if per == 1:  # the key follows the column's low bits: the layout's own expression
        line = ops.add(ops.mul(chunk, VEC), ops.xor(j, odd))
        return ops.add(stage, ops.add(swizzled(ops, line, ops.shr(k, 3), chunks), ops.mask(k, 7)))
    column = ops.mul(odd, 1 if j % 2 == 0 else -1)  # (j ^ odd) - j
    place = ops.add(ops.mul(ops.shr(k, 3), VEC), ops.mask(k, 7))
    base = ops.add(ops.mul(ops.add(ops.mul(chunk, VEC), column), width), place)
    key = (j >> (per.bit_length() - 1)) & (chunks - 1)
    return ops.add(ops.xor(ops.add(base, stage), key * VEC), j * width)


class PairStager:
    """B's copy into the ``bt`` layout (lines B's columns, K along them; the mfma path reads its
    fragments as A's) by 16-byte loads: each work-item loads two K-adjacent pieces of 8
    columns, interleaves them into 8 pairs and stores each pair as one 32-bit word
    (:func:`pair_slot`)."""

    def __init__(self, b: ir.IRBuilder, el: Elements, tile: ir.Value, src: ir.Value, shape: Mapping[str, Any]):
        self.b, self.el, self.tile, self.src = b, el, tile, src
        self.chunks, self.threads, self.tid = shape["chunks"], shape["threads"], shape["tid"]
        self.kpairs, self.columns = self.chunks * VEC // 2, shape["lines"] // VEC
        self.origin = shape["origin"]

    def issue(self, k0: ir.Value, stage: ir.Value) -> list[Any]:
        """Load this work-item's pairs of pieces of the K tile at ``k0`` (zeros selected on landing)."""
        b, ops, el = self.b, IROps(self.b), self.el
        (_, col0), (rows, cols), width = self.origin
        total, vty = self.kpairs * self.columns, ir.VectorType(el.store_ty, VEC)
        out = []
        for s, extra in pieces(self.threads, total, 1):
            pair = b.add(self.tid, i64(extra))
            kpair, chunk = pair_place(ops, pair, self.kpairs)
            guard = b.icmp_signed("<", pair, i64(total)) if (s + 1) * self.threads > total else None
            corner, loaded = b.add(b.mul(k0, width), col0), []
            for h in range(2):
                line = b.add(b.mul(kpair, i64(2)), i64(h))
                ok = b.and_(inside(b, line, b.sub(rows, k0)), inside(b, b.mul(chunk, i64(VEC)), b.sub(cols, col0)))
                ok = b.and_(ok, guard) if guard is not None else ok
                where = piece_address(b, el, self.src, corner, (line, b.mul(chunk, i64(VEC)), width), ok)
                loaded.append((b.load(where, typ=vty, align=16), ok))
            out.append((stage, kpair, chunk, guard, loaded))
        return out

    def land(self, issued: list[Any]) -> None:
        """Store the pairs :meth:`issue` loaded, one 32-bit word each."""
        b, ops32 = self.b, IROps(self.b, I32)
        order = ir.Constant(ir.VectorType(I32, 2 * VEC), [x for j in range(VEC) for x in (j, j + VEC)])
        for stage, kpair, chunk, guard, loaded in issued:
            lo, hi = (b.select(ok, v, ir.Constant(v.type, None)) for v, ok in loaded)
            words = b.bitcast(b.shuffle_vector(lo, hi, order), ir.VectorType(I32, VEC))
            kpair32, chunk32 = ops32.narrow(kpair), ops32.narrow(chunk)
            with b.if_then(guard) if guard is not None else nullcontext():
                odd = b.trunc(b.and_(chunk32, ops32.c(1)), ir.IntType(1))
                for j in range(VEC):
                    slot = pair_slot(ops32, kpair32, chunk32, j, self.chunks, stage)
                    swapped, kept = (b.extract_element(words, ops32.c(x)) for x in (j ^ 1, j))
                    word = b.select(odd, swapped, kept)
                    at = b.gep(self.tile, [slot], inbounds=True, source_etype=self.el.store_ty)
                    b.store(word, at, align=4)


def ldmatrix_rows(ops: Ops, supplier: Any, first_line: Any, first_chunk: Any, chunks: int) -> Any:
    """The swizzled element offset of the row that lane ``supplier`` gives ``ldmatrix.x4``: matrix
    ``i = supplier / 8`` is lines ``first_line + 8 (i % 2)`` onwards at chunk ``first_chunk + i / 2``
    (A: lines are rows, chunks K; B with ``.trans``: lines are K, chunks columns)."""
    matrix = ops.shr(supplier, 3)
    line = ops.add(first_line, ops.add(ops.mask(supplier, 7), ops.mul(ops.mask(matrix, 1), 8)))
    chunk = ops.add(first_chunk, ops.shr(matrix, 1))
    return swizzled(ops, line, chunk, chunks)


def ldmatrix_fragment(
    b: ir.IRBuilder, el: Elements, tile: ir.Value, lane: ir.Value, row_of: Any, count: int, trans: bool, real: bool
) -> list[ir.Value]:
    """``count`` 32-bit registers of ``ldmatrix`` (``real``) or of the loads that give this lane the
    same registers (``row_of(supplier lane)``: the element offset of the row that lane supplies)."""
    if real:
        at = b.gep(tile, [row_of(lane)], inbounds=True, source_etype=el.store_ty)
        return nv.ldmatrix(b, at, count, trans)
    regs = []
    c = IROps(b, lane.type).c
    quad, pair = b.and_(lane, c(3)), b.lshr(lane, c(2))
    for i in range(count):
        if not trans:  # row lane/4 of matrix i, elements 2 (lane % 4) and the next
            where = b.add(row_of(b.add(c(8 * i), pair)), b.mul(quad, c(2)))
            vec = el.load_raw_vec(tile, where, 2, 4)
        else:  # rows 2 (lane % 4) and the next of matrix i, column lane / 4
            first = b.add(c(8 * i), b.mul(quad, c(2)))
            lo = el.load_raw(tile, b.add(row_of(first), pair))
            hi = el.load_raw(tile, b.add(row_of(b.add(first, c(1))), pair))
            vec = ir.Constant(ir.VectorType(el.store_ty, 2), ir.Undefined)
            vec = b.insert_element(b.insert_element(vec, lo, ir.Constant(I32, 0)), hi, ir.Constant(I32, 1))
        regs.append(b.bitcast(vec, I32))
    return regs


def mfma_k_group(tk: int) -> int:
    """K steps one read of the mfma data path covers: 32 (two instructions of 8 consecutive K per
    lane, ``ds_read_b128``) where the K tile has them, else 16 (``ds_read_b64``)."""
    return 32 if tk % 32 == 0 else 16


def mfma_a_offset(ops: Ops, lane: Any, first_row: Any, k: int, chunks: int, group: int) -> Any:
    """Element offset of lane ``lane``'s read of A for the K group at ``k``: row
    ``first_row + lane % 16``, K ``k + (group / 4) (lane / 16)`` onwards."""
    per = group // 4
    first_k = ops.add(k, ops.mul(ops.shr(lane, 4), per))
    row = ops.add(first_row, ops.mask(lane, 15))
    return ops.add(swizzled(ops, row, ops.shr(first_k, 3), chunks), ops.mask(first_k, 7))


def mfma_a(b: ir.IRBuilder, el: Elements, tile: ir.Value, lane: ir.Value, at: Mapping[str, Any]) -> list[ir.Value]:
    """This lane's A registers (``<4 x elements>``, ``group / 16`` of them) of the row tile from
    ``at["row"]`` for the K group at ``at["k"]``: one vector read of ``group / 4`` elements."""
    ops, group = IROps(b, lane.type), at["group"]
    per = group // 4
    where = b.add(at["stage"], mfma_a_offset(ops, lane, at["row"], at["k"], at["chunks"], group))
    vec = el.load_raw_vec(tile, where, per, 2 * per)
    undef = ir.Constant(vec.type, ir.Undefined)
    return [
        b.shuffle_vector(vec, undef, ir.Constant(ir.VectorType(I32, 4), list(range(4 * s, 4 * s + 4))))
        for s in range(per // 4)
    ]
