"""STREAM as a work-group (SIMT) kernel, written once for SPIR-V, NVPTX and AMDGCN.

Entry ``stream(inputs..., out, n, groups, per)``: each work-item moves vectors of ``VW``
elements. On a GPU consecutive work-items take consecutive vectors and stride over the
array by the whole grid (coalesced, :data:`GPU_GROUPS_PER_CU`-sized grids); on a CPU
OpenCL device, where a work-item is a SIMD program, each takes ``per`` consecutive vectors.
Work-item 0 does the ``n % VW`` elements past the last whole vector. dot sums per
work-item, then per work-group in shared memory, stores the group's sum in a partial-sum
array of the module (global memory), and the group that finishes last (an atomic count)
adds the partial sums in group order into the output and resets the count.
"""

from __future__ import annotations

from collections.abc import Mapping

from llvmlite import ir

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.llvmir.irutil import I64, PTR, for_range, i64, imin, loop_carry
from hwbench.kernels.llvmir.simt import DeviceLimits, Elements, SIMTContext, SIMTTarget
from hwbench.kernels.stream.spec import DOT, READS, SCALAR, TRIAD, op_name

KERNEL = "stream"
DTYPES = ("fp32", "fp64")
#: Partial sums a dot keeps: at most this many work-groups.
DOT_GROUPS = 1024
#: Work-groups of an elementwise launch on a GPU: enough to fill any GPU, a grid-stride loop does the rest.
GPU_GROUPS = 8192
#: Work-items of a CPU device (each a SIMD program): a few per core.
CPU_WORK_ITEMS = 256
CONFIG_KEYS = ("OP", "WG", "VW", "BLOCKED")


def choose_config(limits: DeviceLimits, dtype: str, shape: Shape | None = None) -> dict[str, int]:
    """A CPU device: work-groups of one work-item, each a run of SIMD vectors of the device's
    lanes; a GPU: 256 work-items (at most the device's largest work-group), 16-byte vectors."""
    op = int(shape["op"]) if shape else TRIAD
    size = 4 if dtype == "fp32" else 8
    if limits.kind == "cpu":
        return {"OP": op, "WG": 1, "VW": max(1, limits.lanes * 4 // size), "BLOCKED": 1}
    wg = 1 << (min(256, limits.max_work_group).bit_length() - 1)
    return {"OP": op, "WG": wg, "VW": 16 // size, "BLOCKED": 0}


def _compute(b: ir.IRBuilder, el: Elements, op: int, xs: list[ir.Value]) -> ir.Value:
    name = op_name(op)
    if name == "copy":
        return xs[0]
    if name == "mul":
        return b.fmul(el.const(SCALAR) if xs[0].type == el.vty else ir.Constant(el.ty, SCALAR), xs[0])
    if name == "add":
        return b.fadd(xs[0], xs[1])
    s = el.const(SCALAR) if xs[1].type == el.vty else ir.Constant(el.ty, SCALAR)
    return b.fadd(xs[0], b.fmul(s, xs[1]))


def _range(ctx: SIMTContext, cfg: Mapping[str, int], vectors: ir.Value, groups: ir.Value, per: ir.Value) -> tuple:
    """This work-item's vectors: (start, stop, step)."""
    b = ctx.builder
    gid = b.add(b.mul(ctx.group_id(0), i64(cfg["WG"])), ctx.local_id(0))
    if cfg["BLOCKED"]:
        start = b.mul(gid, per)
        return start, imin(b, b.add(start, per), vectors), i64(1)
    return gid, vectors, b.mul(groups, i64(cfg["WG"]))


def _first(ctx: SIMTContext) -> ir.Value:
    b = ctx.builder
    return b.and_(b.icmp_signed("==", ctx.group_id(0), i64(0)), b.icmp_signed("==", ctx.local_id(0), i64(0)))


def _elementwise(ctx: SIMTContext, cfg: Mapping[str, int], dtype: str, args: list[ir.Argument]) -> None:
    b = ctx.builder
    op, vw = cfg["OP"], cfg["VW"]
    reads = len(READS[op])
    ins, out, n, groups, per = list(args[:reads]), args[reads], *args[reads + 1 :]
    el = Elements(b, dtype, vw)
    vectors = b.sdiv(n, i64(vw))
    start, stop, step = _range(ctx, cfg, vectors, groups, per)
    align = vw * (4 if dtype == "fp32" else 8)
    with for_range(b, start, stop, step, name="v") as v:
        k = b.mul(v, i64(vw))
        el.store_vec(_compute(b, el, op, [el.load_vec(p, k, align) for p in ins]), out, k, align)
    with b.if_then(_first(ctx)):
        with for_range(b, b.mul(vectors, i64(vw)), n, name="tail") as i:
            el.store(_compute(b, el, op, [el.load(p, i) for p in ins]), out, i)


def _dot(ctx: SIMTContext, cfg: Mapping[str, int], dtype: str, args: list[ir.Argument]) -> None:
    b = ctx.builder
    vw, wg = cfg["VW"], cfg["WG"]
    a, bb, out, n, groups, per = args
    el = Elements(b, dtype, vw)
    module = b.module
    space = ctx.target.global_space
    partials = ir.GlobalVariable(module, ir.ArrayType(el.ty, DOT_GROUPS), f"{KERNEL}.partials", addrspace=space)
    partials.initializer = ir.Constant(ir.ArrayType(el.ty, DOT_GROUPS), None)
    partials.linkage = "internal"
    partials.type = ir.PointerType(addrspace=space)  # opaque, as every other pointer
    done = ir.GlobalVariable(module, I64, f"{KERNEL}.done", addrspace=space)
    done.initializer = i64(0)
    done.linkage = "internal"
    done.type = ir.PointerType(addrspace=space)
    vectors = b.sdiv(n, i64(vw))
    start, stop, step = _range(ctx, cfg, vectors, groups, per)
    align = vw * (4 if dtype == "fp32" else 8)

    def vstep(v: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
        k = b.mul(v, i64(vw))
        return [b.fadd(acc[0], b.fmul(el.load_vec(a, k, align), el.load_vec(bb, k, align)))]

    (acc,) = loop_carry(b, start, stop, step, [el.const(0.0)], vstep, name="dv")
    total = el.lane(acc, 0)
    for lane in range(1, vw):
        total = b.fadd(total, el.lane(acc, lane))

    def sstep(i: ir.Value, acc_: list[ir.Value]) -> list[ir.Value]:
        return [b.fadd(acc_[0], b.fmul(el.load(a, i), el.load(bb, i)))]

    tail_lo = b.select(_first(ctx), b.mul(vectors, i64(vw)), n)
    (mine,) = loop_carry(b, tail_lo, n, 1, [total], sstep, name="ds")
    local = ctx.local_id(0)
    if wg > 1:  # the work-group's sum, by halving in shared memory
        shared = ctx.shared(el.ty, wg)
        b.store(mine, b.gep(shared, [local], inbounds=True, source_etype=el.ty))
        half = wg // 2
        while half:
            ctx.barrier()
            with b.if_then(b.icmp_signed("<", local, i64(half))):
                here = b.gep(shared, [local], inbounds=True, source_etype=el.ty)
                there = b.gep(shared, [b.add(local, i64(half))], inbounds=True, source_etype=el.ty)
                b.store(b.fadd(b.load(here, typ=el.ty), b.load(there, typ=el.ty)), here)
            half //= 2
        ctx.barrier()
        mine = b.load(shared, typ=el.ty)
    with b.if_then(b.icmp_signed("==", local, i64(0))):
        group = ctx.group_id(0)
        b.store(mine, b.gep(partials, [group], inbounds=True, source_etype=el.ty))
        b.fence("seq_cst")
        before = b.atomic_rmw("add", done, i64(1), "acq_rel")
        with b.if_then(b.icmp_signed("==", before, b.sub(groups, i64(1)))):
            b.fence("seq_cst")

            def fold(g: ir.Value, acc_: list[ir.Value]) -> list[ir.Value]:
                slot = b.gep(partials, [g], inbounds=True, source_etype=el.ty)
                return [b.fadd(acc_[0], b.load(slot, typ=el.ty))]

            (result,) = loop_carry(b, i64(0), groups, 1, [ir.Constant(el.ty, 0.0)], fold, name="fold")
            el.store(result, out, i64(0))
            b.atomic_rmw("xchg", done, i64(0), "release")


def build(target: SIMTTarget, dtype: str, cfg: Mapping[str, int]) -> ir.Module:
    """The SIMT STREAM module of operation ``OP``: entry ``stream(inputs..., out, n, groups, per)``
    over work-groups of ``WG`` work-items."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    op = int(cfg["OP"])
    module = target.new_module(f"{KERNEL}_{op_name(op)}_{dtype}")

    def body(ctx: SIMTContext, args: list[ir.Argument]) -> None:
        (_dot if op == DOT else _elementwise)(ctx, cfg, dtype, args)

    params = [PTR] * (len(READS[op]) + 1) + [I64, I64, I64]
    target.define_simt_kernel(module, KERNEL, params, body, (int(cfg["WG"]), 1, 1))
    return module


def launch(shape: Shape, dtype: str, target: SIMTTarget, cfg: Mapping[str, int]) -> Launch:
    """``stream(inputs..., out, n, groups, per)`` over ``groups`` work-groups of ``WG``."""
    op, n = int(shape["op"]), int(shape["n"])
    if op != int(cfg["OP"]):
        raise ValueError(f"configuration is for op {cfg['OP']}, the shape's is {op}")
    wg, vw = int(cfg["WG"]), int(cfg["VW"])
    vectors = n // vw
    items = CPU_WORK_ITEMS if cfg["BLOCKED"] else GPU_GROUPS * wg
    groups = max(1, min(-(-vectors // wg), items // wg))
    if op == DOT:
        groups = min(groups, DOT_GROUPS)
    per = max(1, -(-vectors // (groups * wg)))
    args = (*(buffer(name) for name in READS[op]), output(), i64_arg(n), i64_arg(groups), i64_arg(per))
    config = {
        "kernel": KERNEL,
        "op": op_name(op),
        "dtype": dtype,
        "target": target.name,
        "model": "simt",
        **{key: int(cfg[key]) for key in CONFIG_KEYS},
        "groups": groups,
        "device_kind": target.limits.kind,
    }
    return Launch(KERNEL, args, (groups,) if n else (0,), () if op == DOT else (n,), local=(wg,), config=config)
