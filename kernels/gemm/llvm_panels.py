"""What the int8 and bf16 packed-panel CPU kernels (:mod:`.llvm_lowp`, :mod:`.llvm_bf16`) share:
the panel geometry derived from the target's description, the packing loops, the microkernel and
its loops over a packed block, the cache blocking, the launch and the bind; and what they share
with the fp32/fp64 kernel (:mod:`.llvm`), the microkernel's masked store of C.

Both lay a packed A panel out as one 4-byte element (i32 or fp32) per row and k group, a packed B
panel as one per column and k group, and run an ``MR x NR`` microkernel over every pair of panels;
the paths differ in the group (4 int8, 2 int16 or bf16, or 1 fp32 per element), the dot product
and the accumulator. Nothing here is a constant of one CPU: the register tile comes from
:func:`~hwbench.kernels.llvmir.cpu_model.register_tile` on the target's register file and FMA
chains, the blocking from its caches (BLIS's analytical model, for this loop order: the reused
``MR x kc`` A micro-panel and the streaming ``kc x NR`` B micro-panel in L1, the packed
``kc x nc`` B block in L2).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import storage_dtype
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.llvmir import cpu_model
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel, default_threads
from hwbench.kernels.llvmir.cpu_launch import prepare as cpu_prepare
from hwbench.kernels.llvmir.irutil import (
    I1,
    I32,
    I64,
    PTR,
    VOID,
    ceil_div,
    elem_ptr,
    elem_size,
    for_range,
    i64,
    imin,
    lane_mask,
    load,
    load_vec,
    loop_carry,
    masked_load,
    masked_store,
    splat,
    store_vec,
)
from hwbench.kernels.llvmir.target import CPUTarget, LLVMTarget, host_target

#: Bytes of one packed element (an i32 or fp32 lane holding one k group).
ELEMENT_BYTES = 4
#: Shares of the caches the blocking fills: L1d for the A and B micro-panels (a quarter left for
#: C and the stack), L2 for the packed B block and for the A block being packed.
L1_SHARE, L2_B_SHARE, L2_A_SHARE = 0.75, 0.5, 0.25
#: kc is a multiple of this many k values (of every group).
KC_ALIGN = 16
#: The workspace holds at most this many micro-panels of A and columns of B.
MAX_MC_ROWS, MAX_NC = 64, 2048

#: ``dot(b, acc, a, bv)``: the accumulator vector plus one broadcast A element times a B vector.
Dot = Callable[[ir.IRBuilder, ir.Value, ir.Value, ir.Value], ir.Value]
#: ``combine(b, rows)``: a group of B rows (``<NR x T>`` each) as one vector of NR packed elements.
Combine = Callable[[ir.IRBuilder, list[ir.Value]], ir.Value]
#: ``convert(b, group)``: one row's group of A (``<group x T>``) as the packed element.
Convert = Callable[[ir.IRBuilder, ir.Value], ir.Value]


@dataclass(frozen=True)
class Panels:
    """One dtype's packed-panel geometry on one target."""

    dtype: str
    #: The path the target's features choose (``vnni``, ``bf16dp``, ``widening``).
    path: str
    #: How the path multiplies and why it is exact or cannot saturate (the record's ``scheme``).
    scheme: str
    mr: int
    nr_vectors: int
    #: Lanes of one vector, each one column of C (an i32 or fp32 lane).
    vw: int
    #: k values per packed element.
    group: int
    #: Upper bounds baked into the workspace (``kc`` in k values, a multiple of ``group``).
    max_block: Mapping[str, int]
    #: What the tile and the blocking were derived from (the record's ``derived_from``).
    derived: Mapping[str, Any] = field(default_factory=dict)

    @property
    def nr(self) -> int:
        """Columns of C one microkernel computes."""
        return self.nr_vectors * self.vw

    @property
    def bytes_per_k(self) -> float:
        """Bytes of packed panel per k value and row (or column)."""
        return ELEMENT_BYTES / self.group


def derive(
    target: CPUTarget,
    dtype: str,
    path: tuple[str, str],
    group: int,
    kc_max: int,
    spare: int = 1,
) -> Panels:
    """The panels of ``dtype`` on ``target`` for ``path`` (name, scheme): the register tile from
    :func:`.cpu_model.register_tile` on the target's vector registers less ``spare`` (a product
    held before it is added takes one) and its FMA chains."""
    desc = target.description
    mr, nv = cpu_model.register_tile(desc.vector_registers, desc.chains, spare=spare)
    how = f"cpu_model.register_tile({desc.vector_registers} registers, {desc.chains} chains, spare {spare})"
    vw = desc.vector_bytes // ELEMENT_BYTES
    derived = dict(desc.as_config(), register_tile=how)
    # Caps of the workspace, not choices: the tile's alone, so the same code serves any caches.
    max_block = {"mc": MAX_MC_ROWS * mr, "nc": MAX_NC // (nv * vw) * nv * vw, "kc": kc_max}
    return Panels(dtype, path[0], path[1], mr, nv, vw, group, max_block, derived)


def cache_blocks(panels: Panels, target: CPUTarget, kc_max: int) -> tuple[int, int, int]:
    """``(kc, nc, mc)`` from the target's caches before any shape is known: ``(MR + NR) x kc``
    of packed panel within ``L1_SHARE`` of L1d, the ``kc x nc`` B block within ``L2_B_SHARE`` of
    L2 and the ``mc x kc`` A block within ``L2_A_SHARE`` of it."""
    caches = target.description.caches
    per_k = panels.bytes_per_k
    kc = int(L1_SHARE * caches.l1d / ((panels.mr + panels.nr) * per_k)) // KC_ALIGN * KC_ALIGN
    kc = min(max(kc, KC_ALIGN), kc_max)
    nc = max(panels.nr, int(L2_B_SHARE * caches.l2 / (kc * per_k)) // panels.nr * panels.nr)
    mc = max(panels.mr, int(L2_A_SHARE * caches.l2 / (kc * per_k)) // panels.mr * panels.mr)
    return kc, nc, mc


def blocking(panels: Panels, shape: Shape, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc for ``shape``: :func:`cache_blocks`' sizes, no larger than the shape needs, nc and
    mc evened out over the blocks they make so that every worker gets whole, similar programs."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    mr, nr, group = panels.mr, panels.nr, panels.group
    kc0, nc0, mc0 = cache_blocks(panels, target, panels.max_block["kc"])
    kc = _even(k, kc0, group)
    nc0 = min(nc0, panels.max_block["nc"])
    blocks_n = -(-max(n, 1) // nc0)
    nc = _even(n, nc0, nr)
    mc0 = min(mc0, panels.max_block["mc"])
    blocks_m = max(-(-m // mc0), -(-2 * workers // blocks_n) if m >= 2 * mr * workers else 1)
    mc = _round_up(-(-max(m, 1) // max(blocks_m, 1)), mr)
    return {"mc": min(mc, panels.max_block["mc"]), "nc": nc, "kc": kc}


def _round_up(x: int, multiple: int) -> int:
    return -(-x // multiple) * multiple


def _even(total: int, most: int, multiple: int) -> int:
    """The size of the fewest equal blocks of at most ``most`` (a multiple of ``multiple``)
    that cover ``total``, rounded up to ``multiple``: no last block much shorter than the rest."""
    blocks = -(-max(total, 1) // most)
    return _round_up(-(-max(total, 1) // blocks), multiple)


def check_blocking(panels: Panels, blk: Mapping[str, int]) -> None:
    """The workspace is sized for ``max_block``; kc must hold whole groups, nc whole panels."""
    for key in ("mc", "nc", "kc"):
        if not 1 <= int(blk[key]) <= panels.max_block[key]:
            raise ValueError(f"blocking {key}={blk[key]} outside [1, {panels.max_block[key]}] for {panels.dtype}")
    if blk["kc"] % panels.group or blk["nc"] % panels.nr:
        raise ValueError(
            f"{panels.dtype} blocking needs kc a multiple of {panels.group} and nc of {panels.nr}, got {dict(blk)}"
        )


def emit_micro(
    module: ir.Module, panels: Panels, name: str, elem: ir.Type, acc_type: ir.VectorType, dot: Dot, corr: bool
) -> ir.Function:
    """``micro(pa, pb, kg, [corr,] c, ldc, mvalid, nvalid, first)``: the C tile (+)= Apanel .
    Bpanel (+ the vector ``corr`` per column, where ``corr``), ``kg`` groups of k; ``elem`` is the
    packed element type, ``dot`` the path's multiply-add."""
    mr, nv, vw, nr = panels.mr, panels.nr_vectors, panels.vw, panels.nr
    head = [PTR, PTR, I64] + ([PTR] if corr else [])
    fn = ir.Function(module, ir.FunctionType(VOID, head + [PTR, I64, I64, I64, I1]), name=name)
    fn.linkage = "internal"
    for k in (0, 1, 3, 4) if corr else (0, 1, 3):
        fn.args[k].add_attribute("noalias")
    pa, pb, kg = fn.args[:3]
    c, ldc, mvalid, nvalid, first = fn.args[len(head) :]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if corr:
        start = [load_vec(b, fn.args[3], acc_type.element, i64(v * vw), vw, align=4 * vw) for v in range(nv)]
    else:
        start = [ir.Constant(acc_type, None)] * nv

    def step(g: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        row = b.mul(g, i64(nr))
        bv = [load_vec(b, pb, elem, b.add(row, i64(v * vw)), vw, align=4 * vw) for v in range(nv)]
        arow = b.mul(g, i64(mr))
        out: list[ir.Value] = []
        for r in range(mr):
            a = splat(b, load(b, elem_ptr(b, pa, elem, b.add(arow, i64(r))), elem, align=4), vw)
            out.extend(dot(b, acc[r * nv + v], a, bv[v]) for v in range(nv))
        return out

    acc = loop_carry(b, i64(0), kg, 1, [start[v % nv] for v in range(mr * nv)], step, name="g")
    store_micro_tile(b, acc, c, ldc, (mvalid, nvalid), first, mr, vw)
    b.ret_void()
    return fn


def emit_pack_b(
    b: ir.IRBuilder,
    panels: Panels,
    src: tuple[ir.Value, ir.Type, ir.Value],
    dst: ir.Value,
    sizes: tuple[ir.Value, ir.Value],
    combine: Combine,
    corr: tuple[ir.Value, int] | None = None,
) -> None:
    """``dst[jr][g] = combine(rows)``, the ``group`` rows ``B[group*g + t, jr*NR : jr*NR + NR]``
    (``src`` is the block's pointer, element type and ldb; zero past kc and nc, ``sizes`` = (kc,
    nc)) as one vector of NR packed elements; with ``corr`` (pointer, factor), also
    ``corr[j] = factor * sum_k B[k, j]`` over the slice in i32."""
    ptr, t, ldb = src
    kc, nc = sizes
    nr, group = panels.nr, panels.group
    row_ty = ir.VectorType(t, nr)
    sum_ty = ir.VectorType(I32, nr)
    groups = ceil_div(b, kc, group)
    with for_range(b, i64(0), ceil_div(b, nc, nr), name="pbj") as jr:
        col = b.mul(jr, i64(nr))
        left = b.sub(nc, col)
        panel = b.mul(col, groups)

        def one(g: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
            rows = []
            for t_ in range(group):
                k = b.add(b.mul(g, i64(group)), i64(t_))
                valid = b.select(b.icmp_signed("<", k, kc), left, i64(0))
                at = elem_ptr(b, ptr, t, b.add(b.mul(imin(b, k, b.sub(kc, i64(1))), ldb), col))
                rows.append(masked_load(b, at, row_ty, lane_mask(b, nr, 0, valid)))
            store_vec(b, combine(b, rows), dst, b.add(panel, b.mul(g, i64(nr))), align=ELEMENT_BYTES * panels.vw)
            if corr is None:
                return []
            total = sums[0]
            for row in rows:
                total = b.add(total, b.sext(row, sum_ty))
            return [total]

        init = [ir.Constant(sum_ty, None)] if corr else []
        sums = loop_carry(b, i64(0), groups, 1, init, one, name="pbg")
        if corr is not None:
            scaled = b.mul(sums[0], ir.Constant(sum_ty, [corr[1]] * nr))
            store_vec(b, scaled, corr[0], col, align=4 * panels.vw)


def emit_pack_a(
    b: ir.IRBuilder,
    panels: Panels,
    src: tuple[ir.Value, ir.Type, ir.Value],
    dst: ir.Value,
    sizes: tuple[ir.Value, ir.Value],
    convert: Convert,
) -> None:
    """``dst[ir][g][r] = convert(<group x T>)`` of ``A[min(ir*MR + r, mc-1), group*g ...]``
    (``src`` is the block's pointer, element type and lda; zero past kc, ``sizes`` = (kc, mc)):
    one packed element per row and group."""
    ptr, t, lda = src
    kc, mc = sizes
    mr, group = panels.mr, panels.group
    vty = ir.VectorType(t, group)
    last_row, last_k = b.sub(mc, i64(1)), b.sub(kc, i64(1))
    groups = ceil_div(b, kc, group)
    with for_range(b, i64(0), ceil_div(b, mc, mr), name="paj") as ir_:
        row0 = b.mul(ir_, i64(mr))
        rows = [b.mul(imin(b, b.add(row0, i64(r)), last_row), lda) for r in range(mr)]
        panel = b.mul(row0, groups)
        with for_range(b, i64(0), groups, name="pag") as g:
            k0 = b.mul(g, i64(group))
            drow = b.add(panel, b.mul(g, i64(mr)))

            def put(r: int, value: ir.Value) -> None:
                x = convert(b, value)
                b.store(x, elem_ptr(b, dst, x.type, b.add(drow, i64(r))), align=ELEMENT_BYTES)

            def whole_group() -> None:
                for r in range(mr):
                    put(r, load(b, elem_ptr(b, ptr, t, b.add(rows[r], k0)), vty, align=elem_size(t)))

            if group == 1:  # every group is whole
                whole_group()
            else:
                with b.if_else(b.icmp_signed("<=", b.add(k0, i64(group)), kc), likely=True) as (full, edge):
                    with full:
                        whole_group()
                    with edge:  # the slice's last, partial group: element by element, zero past kc
                        ks = [b.add(k0, i64(j)) for j in range(group)]
                        inside = [b.icmp_signed("<", k, kc) for k in ks]
                        ks = [imin(b, k, last_k) for k in ks]
                        zero = ir.Constant(t, None)
                        for r in range(mr):
                            vec = ir.Constant(vty, None)
                            for j in range(group):
                                x = b.select(inside[j], load(b, elem_ptr(b, ptr, t, b.add(rows[r], ks[j])), t), zero)
                                vec = b.insert_element(vec, x, ir.Constant(I32, j))
                            put(r, vec)


def emit_micro_loops(
    b: ir.IRBuilder,
    panels: Panels,
    micro: ir.Function,
    packed: tuple[ir.Value, ir.Value],
    c_blk: ir.Value,
    c_elem: ir.Type,
    sizes: tuple[ir.Value, ir.Value, ir.Value, ir.Value],
    first: ir.Value,
    corr: ir.Value | None = None,
) -> None:
    """``micro(pa, pb, kg, [corr,] c, ldc, mvalid, nvalid, first)`` over every pair of micro-panels
    of the packed block ``packed`` (A, B); ``sizes`` is (kg, mc, nc, ldc)."""
    pack_a, pack_b = packed
    kg, mc, nc, ldc = sizes
    mr, nr = panels.mr, panels.nr
    with for_range(b, i64(0), ceil_div(b, mc, mr), name="ir") as ir_:
        row = b.mul(ir_, i64(mr))
        pa = elem_ptr(b, pack_a, I32, b.mul(row, kg))
        mvalid = imin(b, i64(mr), b.sub(mc, row))
        with for_range(b, i64(0), ceil_div(b, nc, nr), name="jr") as jr:
            col = b.mul(jr, i64(nr))
            args = [pa, elem_ptr(b, pack_b, I32, b.mul(col, kg)), kg]
            if corr is not None:
                args.append(elem_ptr(b, corr, I32, col))
            args += [elem_ptr(b, c_blk, c_elem, b.add(b.mul(row, ldc), col)), ldc, mvalid]
            b.call(micro, args + [imin(b, i64(nr), b.sub(nc, col)), first])


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
    masks = [lane_mask(b, vw, v * vw, nvalid) for v in range(per_row)]
    integer = isinstance(vty.element, ir.IntType)
    for r in range(mr):
        with b.if_then(b.icmp_signed(">", mvalid, i64(r)), likely=True):
            crow = b.mul(i64(r), ldc)
            for v in range(per_row):
                p = elem_ptr(b, c, vty.element, b.add(crow, i64(v * vw)))
                old = masked_load(b, p, vty, masks[v])
                total = b.add(acc[r * per_row + v], old) if integer else b.fadd(acc[r * per_row + v], old)
                masked_store(b, b.select(first, acc[r * per_row + v], total), p, masks[v])


def launch(
    panels: Panels,
    shape: Shape,
    target: LLVMTarget,
    workers: int = 1,
    blocks: Mapping[str, int] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))``
    programs; the record's config says which path and scheme the code takes, its tile and
    blocking and what they were derived from (and ``extra``)."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no {panels.dtype} GEMM lowering for {type(target).__name__}")
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    workers = 1 if 2.0 * m * n * k < 2e6 else workers
    blk = dict(blocks) if blocks else blocking(panels, shape, target, workers)
    check_blocking(panels, blk)
    grid = (-(-n // blk["nc"]), -(-m // blk["mc"])) if m and n and k else (0, 0)
    args = (buffer("A"), buffer("B"), output()) + tuple(
        i64_arg(v) for v in (m, n, k, k, n, n, blk["mc"], blk["nc"], blk["kc"])
    )
    how = (
        "given"
        if blocks
        else f"kc: (MR + NR) x kc within {L1_SHARE} of L1d; nc: kc x nc of B within {L2_B_SHARE} of L2; "
        f"mc: mc x kc of A within {L2_A_SHARE} of L2, evened over {workers} workers"
    )
    record: dict[str, Any] = {"kernel": "gemm", "dtype": panels.dtype, "target": target.name, "path": panels.path}
    record.update(scheme=panels.scheme, MR=panels.mr, NR=panels.nr, VW=panels.vw, k_group=panels.group)
    record.update(**(extra or {}), **blk)
    record["derived_from"] = dict(panels.derived, blocking=how)
    return Launch("gemm", args, grid, (m, n), config=record, workers=workers)


def prepare(
    panels_for: Callable[[CPUTarget], Panels],
    build: Callable[..., ir.Module],
    inputs: dict[str, np.ndarray],
    shape: Mapping[str, int],
    threads: int | None = None,
    blocks: Mapping[str, int] | None = None,
    target: CPUTarget | None = None,
    extra: Mapping[str, Any] | None = None,
) -> PreparedKernel:
    """Bind ``C = A @ B`` with the panels ``panels_for`` gives the host CPU, or ``target`` (another
    feature set or ISA level, for tests); ``blocks`` overrides the cache blocking, ``extra`` adds
    to the record's config."""
    target = target or host_target()
    panels = panels_for(target)
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    a, bm = inputs["A"], inputs["B"]
    held = storage_dtype(panels.dtype)
    if a.shape != (m, k) or bm.shape != (k, n) or a.dtype != held or bm.dtype != held:
        raise ValueError(f"expected A ({m},{k}) and B ({k},{n}) of {held.name} holding {panels.dtype} values")
    threads = threads or default_threads()
    plan = launch(panels, dict(shape), target, threads, blocks, extra)
    return cpu_prepare(build, inputs, panels.dtype, plan, threads, target)
