"""What the vector-register CPU GEMM kernels (fp32/fp64 in :mod:`.llvm`, int8 in :mod:`.llvm_lowp`,
bf16 in :mod:`.llvm_bf16`) give :mod:`.llvm_driver`: their register tile, their microkernel and
their packers, the paths differing only in the packed element and the dot product.

A packed A panel holds one element (one k group: 4 int8, 2 int16 or bf16, or 1 fp32/fp64 value)
per row and group, a packed B panel one per column and group; the ``MR x NR`` microkernel
broadcasts A's element and multiplies it into NR/VW vectors of B per group, its accumulators
carried in phi nodes (they live in vector registers), and stores through masked loads/stores (edge
tiles). Nothing here is a constant of one CPU: the register tile comes from
:func:`~hwbench.kernels.llvmir.cpu_model.register_tile` on the target's register file and FMA
chains (or the tuner's, as compile-time definitions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from llvmlite import ir

from hwbench.kernels.gemm.cpu.driver import TILE_KEYS, Pack, Tile
from hwbench.kernels.llvmir import cpu_model
from hwbench.kernels.llvmir import irutil as iu
from hwbench.kernels.llvmir.target import CPUTarget

#: The workspace holds at most this many micro-panels of A.
MAX_MC_PANELS = 64
#: The largest register tile a configuration may name.
MAX_MR, MAX_NR_VECTORS = 32, 8

#: ``dot(b, acc, a, bv)``: the accumulator vector plus one broadcast A element times a B vector.
Dot = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], ir.Value]
#: ``combine(b, rows)``: a group of B rows (``<NR x T>`` each) as one vector of NR packed elements.
Combine = Callable[[ir.IRBuilder, list[ir.Value]], ir.Value]
#: ``convert(b, group)``: one row's group of A (``<group x T>``) as the packed element.
Convert = Callable[[ir.IRBuilder, ir.Value], ir.Value]


def vector_tile(
    target: CPUTarget,
    dtype: str,
    path: tuple[str, str],
    packing: tuple[int, int, Mapping[str, int]],
    config: Mapping[str, Any] | None = None,
    spare: int = 1,
    a_lanes: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Tile:
    """The tile of ``dtype`` on ``target`` for ``path`` (name, scheme) and ``packing`` (k values
    per element, element bytes, the workspace's nc and kc caps): the register tile ``config``
    names (``MR``, ``NR_VECTORS``), else :func:`.cpu_model.register_tile` on the target's vector
    registers less ``spare`` (a product held before it is added takes one) and its FMA chains."""
    desc = target.description
    group, element_bytes, caps = packing
    if config and all(key in config for key in TILE_KEYS):
        mr, nv = int(config["MR"]), int(config["NR_VECTORS"])
        if not (1 <= mr <= MAX_MR and 1 <= nv <= MAX_NR_VECTORS):
            raise ValueError(
                f"register tile MR={mr} NR_VECTORS={nv} outside MR 1-{MAX_MR}, NR_VECTORS 1-{MAX_NR_VECTORS}"
            )
        how = "given"
    else:
        mr, nv = cpu_model.register_tile(desc.vector_registers, desc.chains, spare=spare, a_lanes=a_lanes)
        how = f"cpu_model.register_tile({desc.vector_registers} registers, {desc.chains} chains, spare {spare})"
    nr = nv * (desc.vector_bytes // element_bytes)
    max_block = {"mc": MAX_MC_PANELS * mr, "nc": max(nr, caps["nc"] // nr * nr), "kc": caps["kc"]}
    extra = dict(extra or {})
    return Tile(
        dtype,
        path[0],
        path[1],
        mr,
        nr,
        nv,
        group,
        element_bytes,
        max_block,
        extra=extra,
        derived={"register_tile": how},
    )


def micro(
    tile: Tile, name: str, elem: ir.Type, acc_type: ir.VectorType, dot: Dot, corr: bool
) -> Callable[[ir.Module], ir.Function]:
    """The microkernel ``micro(pa, pb, kg, [corr,] c, ldc, mvalid, nvalid, first)``: the C tile
    (+)= Apanel . Bpanel (+ the vector ``corr`` per column, where ``corr``), ``kg`` groups of k;
    ``elem`` is the packed element type, ``dot`` the path's multiply-add."""
    mr, nv, nr = tile.mr, tile.nr_vectors, tile.nr
    vw = nr // nv
    align = tile.unit_bytes * vw  # packed rows are whole vectors apart: aligned on any target

    def emit(module: ir.Module) -> ir.Function:
        head = [iu.PTR, iu.PTR, iu.I64] + ([iu.PTR] if corr else [])
        fn = ir.Function(module, ir.FunctionType(iu.VOID, head + [iu.PTR, iu.I64, iu.I64, iu.I64, iu.I1]), name=name)
        fn.linkage = "internal"
        for k in (0, 1, 3, 4) if corr else (0, 1, 3):
            fn.args[k].add_attribute("noalias")
        pa, pb, kg = fn.args[:3]
        c, ldc, mvalid, nvalid, first = fn.args[len(head) :]
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        if corr:
            start = [iu.load_vec(b, fn.args[3], acc_type.element, iu.i64(v * vw), vw, align=4 * vw) for v in range(nv)]
        else:
            start = [ir.Constant(acc_type, None)] * nv

        def step(g: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            row = b.mul(g, iu.i64(nr))
            bv = [iu.load_vec(b, pb, elem, b.add(row, iu.i64(v * vw)), vw, align=align) for v in range(nv)]
            arow = b.mul(g, iu.i64(mr))
            out: list[ir.Value] = []
            for r in range(mr):
                at = iu.elem_ptr(b, pa, elem, b.add(arow, iu.i64(r)))
                a = iu.splat(b, iu.load(b, at, elem, align=tile.unit_bytes), vw)
                out.extend(dot(b, acc[r * nv + v], a, bv[v]) for v in range(nv))
            return out

        acc = iu.loop_carry(b, iu.i64(0), kg, 1, [start[v % nv] for v in range(mr * nv)], step, name="g")
        store_micro_tile(b, acc, c, ldc, (mvalid, nvalid), first, mr, vw)
        b.ret_void()
        return fn

    return emit


def pack_b(tile: Tile, t: ir.Type, combine: Combine, corr_factor: int | None = None) -> Pack:
    """B's packer: ``dst[jr][g] = combine(rows)``, the ``group`` rows ``B[group*g + t, jr*NR :
    jr*NR + NR]`` (zero past kc and nc) as one vector of NR packed elements; with ``corr_factor``,
    also ``corr[j] = factor * sum_k B[k, j]`` over the slice in i32."""
    nr, group = tile.nr, tile.k_unit
    row_ty, sum_ty = ir.VectorType(t, nr), ir.VectorType(iu.I32, nr)
    align = tile.unit_bytes * (nr // tile.nr_vectors)

    def pack(
        b: ir.IRBuilder,
        src: ir.Value,
        ldb: ir.Value,
        dst: ir.Value,
        kc: ir.Value,
        nc: ir.Value,
        groups: ir.Value,
        corr: ir.Value | None,
    ) -> None:
        with iu.for_range(b, iu.i64(0), iu.ceil_div(b, nc, nr), name="pbj") as jr:
            col = b.mul(jr, iu.i64(nr))
            left = b.sub(nc, col)
            panel = b.mul(col, groups)

            def one(g: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
                rows = []
                for t_ in range(group):
                    k = b.add(b.mul(g, iu.i64(group)), iu.i64(t_))
                    valid = b.select(b.icmp_signed("<", k, kc), left, iu.i64(0)) if group > 1 else left
                    at = iu.elem_ptr(b, src, t, b.add(b.mul(iu.imin(b, k, b.sub(kc, iu.i64(1))), ldb), col))
                    rows.append(iu.masked_load(b, at, row_ty, iu.lane_mask(b, nr, 0, valid)))
                iu.store_vec(b, combine(b, rows), dst, b.add(panel, b.mul(g, iu.i64(nr))), align=align)
                if corr is None:
                    return []
                return [_sum(b, sums[0], rows, sum_ty)]

            init = [ir.Constant(sum_ty, None)] if corr is not None else []
            sums = iu.loop_carry(b, iu.i64(0), groups, 1, init, one, name="pbg")
            if corr is not None:
                scaled = b.mul(sums[0], ir.Constant(sum_ty, [corr_factor] * nr))
                iu.store_vec(b, scaled, corr, col, align=4 * (nr // tile.nr_vectors))

    return pack


def _sum(b: ir.IRBuilder, total: ir.Value, rows: list[ir.Value], ty: ir.VectorType) -> ir.Value:
    for row in rows:
        total = b.add(total, b.sext(row, ty))
    return total


def pack_a(tile: Tile, t: ir.Type, convert: Convert) -> Pack:
    """A's packer: ``dst[ir][g][r] = convert(<group x T>)`` of ``A[min(ir*MR + r, mc-1), group*g
    ...]`` (zero past kc): one packed element per row and group."""
    mr, group = tile.mr, tile.k_unit
    vty = ir.VectorType(t, group)

    def pack(
        b: ir.IRBuilder,
        src: ir.Value,
        lda: ir.Value,
        dst: ir.Value,
        kc: ir.Value,
        mc: ir.Value,
        groups: ir.Value,
        _: object,
    ) -> None:
        last_row, last_k = b.sub(mc, iu.i64(1)), b.sub(kc, iu.i64(1))
        with iu.for_range(b, iu.i64(0), iu.ceil_div(b, mc, mr), name="paj") as ir_:
            row0 = b.mul(ir_, iu.i64(mr))
            rows = [b.mul(iu.imin(b, b.add(row0, iu.i64(r)), last_row), lda) for r in range(mr)]
            panel = b.mul(row0, groups)
            with iu.for_range(b, iu.i64(0), groups, name="pag") as g:
                k0 = b.mul(g, iu.i64(group))
                drow = b.add(panel, b.mul(g, iu.i64(mr)))

                def put(r: int, value: ir.Value) -> None:
                    x = convert(b, value)
                    b.store(x, iu.elem_ptr(b, dst, x.type, b.add(drow, iu.i64(r))), align=tile.unit_bytes)

                def whole_group() -> None:
                    for r in range(mr):
                        put(r, iu.load(b, iu.elem_ptr(b, src, t, b.add(rows[r], k0)), vty, align=iu.elem_size(t)))

                if group == 1:  # every group is whole
                    whole_group()
                else:
                    with b.if_else(b.icmp_signed("<=", b.add(k0, iu.i64(group)), kc), likely=True) as (full, edge):
                        with full:
                            whole_group()
                        with edge:  # the slice's last, partial group: element by element, zero past kc
                            ks = [b.add(k0, iu.i64(j)) for j in range(group)]
                            inside = [b.icmp_signed("<", k, kc) for k in ks]
                            ks = [iu.imin(b, k, last_k) for k in ks]
                            for r in range(mr):
                                vec = ir.Constant(vty, None)
                                for j in range(group):
                                    x = iu.load(b, iu.elem_ptr(b, src, t, b.add(rows[r], ks[j])), t)
                                    vec = b.insert_element(
                                        vec, b.select(inside[j], x, ir.Constant(t, None)), ir.Constant(iu.I32, j)
                                    )
                                put(r, vec)

    return pack


def store_micro_tile(
    b: ir.IRBuilder,
    acc: list[ir.Value],
    c: ir.Value,
    ldc: ir.Value,
    valid: tuple[ir.Value, ir.Value],
    first: ir.Value,
    mr: int,
    vw: int,
) -> None:
    """The ``mr x len(acc)/mr`` vectors of a microkernel's accumulators stored into C (added to it
    unless ``first``), rows below ``valid[0]`` and columns below ``valid[1]`` only."""
    mvalid, nvalid = valid
    vty = acc[0].type
    per_row = len(acc) // mr
    masks = [iu.lane_mask(b, vw, v * vw, nvalid) for v in range(per_row)]
    integer = isinstance(vty.element, ir.IntType)
    for r in range(mr):
        with b.if_then(b.icmp_signed(">", mvalid, iu.i64(r)), likely=True):
            crow = b.mul(iu.i64(r), ldc)
            for v in range(per_row):
                p = iu.elem_ptr(b, c, vty.element, b.add(crow, iu.i64(v * vw)))
                old = iu.masked_load(b, p, vty, masks[v])
                total = b.add(acc[r * per_row + v], old) if integer else b.fadd(acc[r * per_row + v], old)
                iu.masked_store(b, b.select(first, acc[r * per_row + v], total), p, masks[v])
