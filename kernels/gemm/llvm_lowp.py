"""int8 GEMM ``C = A @ B`` (int8 inputs, int32 sums and output) on the host CPU in llvmlite IR.

The structure is :mod:`.llvm`'s (BLIS/Goto): per ``kc`` slice of K one program packs its B
block into ``NR``-column panels and its A block into ``MR``-row panels, then runs an ``MR x NR``
register-blocked microkernel whose accumulators live in vector registers. K is grouped by 4:
a packed B panel holds, per group, each column's 4 bytes side by side (``NR * 4`` bytes, two
vectors of ``4 * VW`` bytes), and a packed A panel each row's 4 bytes as one i32 that the
microkernel broadcasts. K past the slice is zero in B, so any K works.

Two paths compute ``acc += a4 . b4`` per lane, chosen by the target's features:

* ``vnni``: ``vpdpbusd`` (``llvm.x86.avx512.vpdpbusd.512``), which multiplies *unsigned*
  bytes by signed ones. A is packed as ``A + 128`` (``xor 0x80``), so the dot is
  ``sum (A + 128) B = A.B + 128 colsum(B)``; the packing of B also sums its columns and the
  microkernel starts from ``-128 colsum(B)``. i32 arithmetic wraps, so the result equals the
  int32 dot exactly whatever the order.
* ``widening``: the same packed data, products widened to i32 and the 4 of a group added,
  in plain vector IR any LLVM target lowers.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch
from hwbench.kernels.gemm.llvm_panels import Panels, emit_micro_loops, store_micro_tile
from hwbench.kernels.gemm.llvm_panels import blocking as panel_blocking
from hwbench.kernels.gemm.llvm_panels import launch as panel_launch
from hwbench.kernels.gemm.llvm_panels import prepare as panel_prepare
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel
from hwbench.kernels.llvmir.irutil import (
    I1,
    I32,
    I64,
    PTR,
    VOID,
    ceil_div,
    elem_ptr,
    for_range,
    i64,
    imin,
    intrinsic,
    lane_mask,
    load,
    load_vec,
    loop_carry,
    masked_load,
    store_vec,
)
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget, enabled_features

KERNEL = "gemm"
DTYPES = ("int8",)
I8 = ir.IntType(8)
MR = 14  # 28 accumulators + 2 B vectors + 1 broadcast: 31 of 32 vector registers
NR_VECTORS = 2
GROUP = 4  # k values per dot product (one i32 lane holds 4 bytes)
#: Upper bounds baked into the workspace (kc in k values, a multiple of GROUP).
MAX_BLOCK = {"mc": 28 * MR, "nc": 1024, "kc": 2048}
VNNI = "llvm.x86.avx512.vpdpbusd.512"


def path(target: CPUTarget) -> str:
    """``vnni`` where the target has AVX-512 VNNI on 512-bit vectors, else ``widening``."""
    enabled = enabled_features(target.features)
    return "vnni" if "avx512vnni" in enabled and target.vector_width("int32") == 16 else "widening"


def lanes(target: CPUTarget) -> int:
    """i32 lanes of one vector (each lane one column of C)."""
    return target.vector_width("int32")


#: The packed-panel geometry (kc of 1536 k values: the MR x kc A micro-panel ~21 KiB, in L1).
PANELS = Panels("int8", MR, NR_VECTORS, GROUP, MAX_BLOCK, 1536, path)


def _dot(b: ir.IRBuilder, kind: str, acc: ir.Value, a4: ir.Value, bv: ir.Value, vw: int) -> ir.Value:
    """``acc[l] += sum_t u8(a4[4l+t]) * s8(bv[4l+t])`` on ``<vw x i32>`` / ``<4vw x i8>``."""
    bytes_ty = ir.VectorType(I8, GROUP * vw)
    if kind == "vnni":
        vty = acc.type
        fn = intrinsic(b.module, VNNI, vty, [vty, bytes_ty, bytes_ty])
        return b.call(fn, [acc, b.bitcast(a4, bytes_ty), bv])
    wide = ir.VectorType(I32, GROUP * vw)
    prod = b.mul(b.zext(b.bitcast(a4, bytes_ty), wide), b.sext(bv, wide))
    undef = ir.Constant(wide, ir.Undefined)
    for t in range(GROUP):
        pick = ir.Constant(ir.VectorType(I32, vw), [GROUP * lane + t for lane in range(vw)])
        acc = b.add(acc, b.shuffle_vector(prod, undef, pick))
    return acc


def _emit_micro(module: ir.Module, kind: str, vw: int) -> ir.Function:
    """``micro(pa, pb, kg, corr, c, ldc, mvalid, nvalid, first)``: C tile (+)= Apanel . Bpanel + corr."""
    nr = NR_VECTORS * vw
    vty = ir.VectorType(I32, vw)
    vbytes = GROUP * vw  # one B vector: vw columns x 4 bytes
    fnty = ir.FunctionType(VOID, [PTR, PTR, I64, PTR, PTR, I64, I64, I64, I1])
    fn = ir.Function(module, fnty, name=f"{KERNEL}_micro_int8_{kind}")
    fn.linkage = "internal"
    for k in (0, 1, 3, 4):
        fn.args[k].add_attribute("noalias")
    pa, pb, kg, corr, c, ldc, mvalid, nvalid, first = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    start = [load_vec(b, corr, I32, i64(v * vw), vw, align=4 * vw) for v in range(NR_VECTORS)]

    def step(g: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        row = b.mul(g, i64(GROUP * nr))
        bv = [load_vec(b, pb, I8, b.add(row, i64(v * vbytes)), vbytes, align=vbytes) for v in range(NR_VECTORS)]
        arow = b.mul(g, i64(MR))
        out = []
        for r in range(MR):
            a = load(b, elem_ptr(b, pa, I32, b.add(arow, i64(r))), I32, align=4)
            a4 = b.shuffle_vector(
                b.insert_element(ir.Constant(vty, ir.Undefined), a, ir.Constant(I32, 0)),
                ir.Constant(vty, ir.Undefined),
                ir.Constant(vty, [0] * vw),
            )
            for v in range(NR_VECTORS):
                out.append(_dot(b, kind, acc[r * NR_VECTORS + v], a4, bv[v], vw))
        return out

    acc = loop_carry(b, i64(0), kg, 1, [start[v % NR_VECTORS] for v in range(MR * NR_VECTORS)], step, name="g")
    store_micro_tile(b, acc, c, ldc, (mvalid, nvalid), first, MR, vw)
    b.ret_void()
    return fn


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


def _emit_pack_b(
    b: ir.IRBuilder, vw: int, src: ir.Value, ldb: ir.Value, dst: ir.Value, corr: ir.Value, kc: ir.Value, nc: ir.Value
) -> None:
    """dst[jr][g] = interleaved B[4g..4g+3, jr*NR : jr*NR+NR] (zero past kc and nc);
    corr[j] = -128 * sum_k B[k, j] over the slice."""
    nr = NR_VECTORS * vw
    row_ty = ir.VectorType(I8, nr)
    sum_ty = ir.VectorType(I32, nr)
    groups = ceil_div(b, kc, GROUP)
    with for_range(b, i64(0), ceil_div(b, nc, nr), name="pbj") as jr:
        col = b.mul(jr, i64(nr))
        left = b.sub(nc, col)
        panel = b.mul(col, b.mul(groups, i64(GROUP)))

        def group(g: ir.Value, sums: list[ir.Value]) -> list[ir.Value]:
            rows = []
            for t in range(GROUP):
                k = b.add(b.mul(g, i64(GROUP)), i64(t))
                valid = b.select(b.icmp_signed("<", k, kc), left, i64(0))
                at = elem_ptr(b, src, I8, b.add(b.mul(imin(b, k, b.sub(kc, i64(1))), ldb), col))
                rows.append(masked_load(b, at, row_ty, lane_mask(b, nr, 0, valid)))
            packed = interleave(b, rows, nr)
            store_vec(b, packed, dst, b.add(panel, b.mul(g, i64(GROUP * nr))), align=GROUP * vw)
            total = sums[0]
            for row in rows:
                total = b.add(total, b.sext(row, sum_ty))
            return [total]

        (total,) = loop_carry(b, i64(0), groups, 1, [ir.Constant(sum_ty, None)], group, name="pbg")
        scaled = b.mul(total, ir.Constant(sum_ty, [-128] * nr))
        store_vec(b, scaled, corr, col, align=4 * vw)


def _emit_pack_a(b: ir.IRBuilder, src: ir.Value, lda: ir.Value, dst: ir.Value, kc: ir.Value, mc: ir.Value) -> None:
    """dst[ir][g][r] = the 4 bytes A[min(ir*MR + r, mc-1), 4g..4g+3] xor 0x80 (0x80 past kc)."""
    last_row, last_k = b.sub(mc, i64(1)), b.sub(kc, i64(1))
    groups = ceil_div(b, kc, GROUP)
    flip = ir.Constant(I8, 0x80)
    with for_range(b, i64(0), ceil_div(b, mc, MR), name="paj") as ir_:
        row0 = b.mul(ir_, i64(MR))
        rows = [b.mul(imin(b, b.add(row0, i64(r)), last_row), lda) for r in range(MR)]
        panel = b.mul(row0, b.mul(groups, i64(GROUP)))
        with for_range(b, i64(0), groups, name="pag") as g:
            k0 = b.mul(g, i64(GROUP))
            drow = b.add(panel, b.mul(g, i64(GROUP * MR)))
            whole = b.icmp_signed("<=", b.add(k0, i64(GROUP)), kc)
            with b.if_else(whole, likely=True) as (full, edge):
                with full:  # the group's 4 bytes of each row as one i32
                    flip4 = ir.Constant(I32, 0x80808080)
                    for r in range(MR):
                        x = load(b, elem_ptr(b, src, I8, b.add(rows[r], k0)), I32, align=1)
                        b.store(b.xor(x, flip4), elem_ptr(b, dst, I32, b.add(b.sdiv(drow, i64(GROUP)), i64(r))))
                with edge:  # the slice's last, partial group: byte by byte
                    ks = [b.add(k0, i64(t)) for t in range(GROUP)]
                    inside = [b.icmp_signed("<", k, kc) for k in ks]
                    ks = [imin(b, k, last_k) for k in ks]
                    for r in range(MR):
                        for t in range(GROUP):
                            x = load(b, elem_ptr(b, src, I8, b.add(rows[r], ks[t])), I8)
                            x = b.select(inside[t], b.xor(x, flip), flip)
                            b.store(x, elem_ptr(b, dst, I8, b.add(drow, i64(GROUP * r + t))))


def build(target: LLVMTarget, dtype: str) -> ir.Module:
    """The int8 GEMM module for the host CPU ``target``: entry ``gemm(A, B, C, M, N, K, lda,
    ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))`` programs, C int32; needs
    ``mc <= 28*MR``, ``nc`` a multiple of NR within 1024 and ``kc`` a multiple of 4 within 2048."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no int8 GEMM lowering for {type(target).__name__}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    vw = lanes(target)
    nr = NR_VECTORS * vw
    kind = path(target)
    module = target.new_module(f"{KERNEL}_int8_{kind}")
    micro = _emit_micro(module, kind, vw)

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        a, bm, c, m, n, k, lda, ldb, ldc, mc_max, nc_max, kc_max = args
        b = ctx.builder
        pack_a = ctx.local_array(I8, MAX_BLOCK["mc"] * MAX_BLOCK["kc"])
        pack_b = ctx.local_array(I8, -(-MAX_BLOCK["nc"] // nr) * nr * MAX_BLOCK["kc"])
        corr = ctx.local_array(I32, -(-MAX_BLOCK["nc"] // nr) * nr)
        i0 = b.mul(ctx.program_id(1), mc_max)
        j0 = b.mul(ctx.program_id(0), nc_max)
        mc = imin(b, mc_max, b.sub(m, i0))
        nc = imin(b, nc_max, b.sub(n, j0))
        a_blk = elem_ptr(b, a, I8, b.mul(i0, lda))
        c_blk = elem_ptr(b, c, I32, b.add(b.mul(i0, ldc), j0))
        with for_range(b, i64(0), k, kc_max, name="pc") as p0:
            kc = imin(b, kc_max, b.sub(k, p0))
            kg = ceil_div(b, kc, GROUP)
            _emit_pack_b(b, vw, elem_ptr(b, bm, I8, b.add(b.mul(p0, ldb), j0)), ldb, pack_b, corr, kc, nc)
            _emit_pack_a(b, elem_ptr(b, a_blk, I8, p0), lda, pack_a, kc, mc)
            first = b.icmp_signed("==", p0, i64(0))
            emit_micro_loops(b, PANELS, nr, micro, (pack_a, pack_b), c_blk, I32, (kg, mc, nc, ldc), first, corr)

    target.define_kernel(module, KERNEL, [PTR, PTR, PTR] + [I64] * 9, body)
    return module


def blocking(shape: Shape, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc (:func:`.llvm_panels.blocking`): the MR x kc A micro-panel (~21 KiB) in L1, the
    nc x kc B block (~1.5 MiB) in L2/L3."""
    return panel_blocking(PANELS, shape, target, workers)


def launch(
    shape: Shape, dtype: str, target: LLVMTarget, workers: int = 1, blocks: dict[str, int] | None = None
) -> Launch:
    """``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc), ceil(M/mc))``
    programs; the record's config says which path (``vnni`` or ``widening``) the code takes."""
    return panel_launch(PANELS, shape, target, workers, blocks)


def prepare_cpu(
    inputs: dict[str, np.ndarray],
    shape: dict[str, int],
    threads: int | None = None,
    blocks: dict[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind int8 ``C = A @ B`` (C int32) for the host CPU, or ``target`` (another feature set,
    for tests); ``blocks`` overrides the cache blocking."""
    return panel_prepare(PANELS, build, inputs, shape, threads, blocks, target)
