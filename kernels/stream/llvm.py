"""STREAM written once in llvmlite IR: SIMD chunks on the host CPU, work-groups on SIMT targets.

On the host CPU one program handles a chunk of :data:`CHUNK` elements (workers claim chunks
from an atomic counter, so every core streams): an unrolled loop of ``UNROLL`` vectors of
the target's width, then a scalar tail. The writing operations have a second entry
(``_nt``) whose stores are non-temporal: it first stores element by element up to a 64-byte
boundary of the output, then whole aligned vectors that bypass the caches (no read for
ownership of the output's lines), and fences at the end. :func:`launch` takes it where the
output is larger than the last-level cache, where it pays. dot keeps ``UNROLL`` vector
accumulators per program, stores the program's sum in a partial-sum array of the module,
and the program that finishes last (an atomic count) adds the partial sums in program order
into the output and resets the count. On SIMT targets the kernel is :mod:`.simt`'s.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir

from hwbench.core.host import largest_cache_bytes
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, output
from hwbench.core.launch import i64 as i64_arg
from hwbench.kernels.llvmir.irutil import (
    I64,
    PTR,
    elem_ptr,
    elem_size,
    for_range,
    i64,
    imin,
    load,
    loop_carry,
    scalar_type,
    splat,
    vec_type,
)
from hwbench.kernels.llvmir.simt import SIMTTarget
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget
from hwbench.kernels.stream import simt
from hwbench.kernels.stream.spec import DOT, OPS, READS, SCALAR, op_name

DTYPES = ("fp32", "fp64")
KERNEL = "stream"
#: Elements per program on the CPU (a dot's grid is at most MAX_PROGRAMS programs).
CHUNK = 1 << 16
UNROLL = 4
MAX_PROGRAMS = 4096
#: Writing operations (all but dot) have a non-temporal twin.
NT_OPS = tuple(op for op in range(len(OPS)) if op != DOT)


def entry(op: int, nontemporal: bool = False) -> str:
    """The CPU entry of operation ``op``."""
    return f"{KERNEL}_{op_name(op)}{'_nt' if nontemporal else ''}"


def _compute(b: ir.IRBuilder, op: int, xs: list[ir.Value], s: ir.Value) -> ir.Value:
    """The element (or vector) an elementwise ``op`` writes, from the values it reads."""
    name = op_name(op)
    if name == "copy":
        return xs[0]
    if name == "mul":
        return b.fmul(s, xs[0])
    if name == "add":
        return b.fadd(xs[0], xs[1])
    return b.fadd(xs[0], b.fmul(s, xs[1]))  # triad: b + s*c


def _scalar_loop(b: ir.IRBuilder, t: ir.Type, op: int, ins: list[ir.Value], out: ir.Value, lo: Any, hi: Any) -> None:
    s = ir.Constant(t, SCALAR)
    with for_range(b, lo, hi, name="tail") as i:
        value = _compute(b, op, [load(b, elem_ptr(b, p, t, i), t) for p in ins], s)
        b.store(value, elem_ptr(b, out, t, i))


def _vector_loop(
    b: ir.IRBuilder, t: ir.Type, vw: int, op: int, ins: list[ir.Value], out: ir.Value, lo: Any, hi: Any, nt: bool
) -> ir.Value:
    """Whole groups of UNROLL vectors in ``[lo, hi)``; returns where they stop."""
    vty = vec_type(t, vw)
    step = vw * UNROLL
    count = b.sdiv(b.sub(hi, lo), i64(step))
    stop = b.add(lo, b.mul(count, i64(step)))
    s = splat(b, ir.Constant(t, SCALAR), vw)
    marker = b.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
    with for_range(b, lo, stop, step, name="vec") as i:
        for u in range(UNROLL):
            k = b.add(i, i64(u * vw))
            xs = [b.load(elem_ptr(b, p, t, k), typ=vty, align=elem_size(t)) for p in ins]
            store = b.store(
                _compute(b, op, xs, s), elem_ptr(b, out, t, k), align=vw * elem_size(t) if nt else elem_size(t)
            )
            if nt:
                store.set_metadata("nontemporal", marker)
    return stop


def _elementwise(target: CPUTarget, module: ir.Module, t: ir.Type, op: int, nt: bool) -> None:
    vw = target.vector_width("fp32" if t == ir.FloatType() else "fp64")
    reads = len(READS[op])

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        b = ctx.builder
        ins, out, n, chunk = list(args[:reads]), args[reads], args[reads + 1], args[reads + 2]
        lo = b.mul(ctx.program_id(0), chunk)
        hi = imin(b, b.add(lo, chunk), n)
        if nt:  # elements up to the output's first 64-byte boundary, so vector stores are aligned
            address = b.ptrtoint(elem_ptr(b, out, t, lo), I64)
            gap = b.udiv(b.and_(b.sub(i64(0), address), i64(63)), i64(elem_size(t)))
            head = imin(b, b.add(lo, gap), hi)
            _scalar_loop(b, t, op, ins, out, lo, head)
            lo = head
        stop = _vector_loop(b, t, vw, op, ins, out, lo, hi, nt)
        _scalar_loop(b, t, op, ins, out, stop, hi)
        if nt:
            b.fence("seq_cst")  # non-temporal stores are weakly ordered: done before the program is

    target.define_kernel(module, entry(op, nt), [PTR] * (reads + 1) + [I64, I64], body)


def _dot(target: CPUTarget, module: ir.Module, t: ir.Type) -> None:
    vw = target.vector_width("fp32" if t == ir.FloatType() else "fp64")
    vty = vec_type(t, vw)
    partials = ir.GlobalVariable(module, ir.ArrayType(t, MAX_PROGRAMS), f"{KERNEL}_dot_partials")
    partials.initializer = ir.Constant(ir.ArrayType(t, MAX_PROGRAMS), None)
    partials.linkage = "internal"
    partials.type = PTR  # opaque, as every other pointer
    done = ir.GlobalVariable(module, I64, f"{KERNEL}_dot_done")
    done.initializer = i64(0)
    done.linkage = "internal"
    done.type = PTR

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        b = ctx.builder
        a, bb, out, n, chunk = args
        lo = b.mul(ctx.program_id(0), chunk)
        hi = imin(b, b.add(lo, chunk), n)
        step = vw * UNROLL
        stop = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), i64(step)), i64(step)))

        def vstep(i: ir.Value, acc: list[ir.Value]) -> list[ir.Value]:
            out_ = []
            for u in range(UNROLL):
                k = b.add(i, i64(u * vw))
                x = b.load(elem_ptr(b, a, t, k), typ=vty, align=elem_size(t))
                y = b.load(elem_ptr(b, bb, t, k), typ=vty, align=elem_size(t))
                out_.append(b.fadd(acc[u], b.fmul(x, y)))
            return out_

        acc = loop_carry(b, lo, stop, step, [ir.Constant(vty, None)] * UNROLL, vstep, name="dv")
        total = acc[0]
        for u in range(1, UNROLL):
            total = b.fadd(total, acc[u])
        lane_sum: ir.Value = b.extract_element(total, i64(0))
        for lane in range(1, vw):
            lane_sum = b.fadd(lane_sum, b.extract_element(total, i64(lane)))

        def sstep(i: ir.Value, acc_: list[ir.Value]) -> list[ir.Value]:
            x, y = load(b, elem_ptr(b, a, t, i), t), load(b, elem_ptr(b, bb, t, i), t)
            return [b.fadd(acc_[0], b.fmul(x, y))]

        (mine,) = loop_carry(b, stop, hi, 1, [lane_sum], sstep, name="ds")
        pid = ctx.program_id(0)
        b.store(mine, elem_ptr(b, partials, t, pid))
        programs = ctx.num_programs(0)
        before = b.atomic_rmw("add", done, i64(1), "acq_rel")
        with b.if_then(b.icmp_signed("==", before, b.sub(programs, i64(1)))):

            def fold(i: ir.Value, acc_: list[ir.Value]) -> list[ir.Value]:
                return [b.fadd(acc_[0], load(b, elem_ptr(b, partials, t, i), t))]

            (result,) = loop_carry(b, i64(0), programs, 1, [ir.Constant(t, 0.0)], fold, name="fold")
            b.store(result, out)
            b.atomic_rmw("xchg", done, i64(0), "release")

    target.define_kernel(module, entry(DOT), [PTR, PTR, PTR, I64, I64], body)


def build(target: LLVMTarget, dtype: str, config: dict[str, int] | None = None) -> ir.Module:
    """The STREAM module for ``target``: on the CPU every operation's entry (and the writing
    ones' non-temporal twins), ``stream_<op>(inputs..., out, n, chunk)`` over ``ceil(n/chunk)``
    programs; on a SIMT target :mod:`.simt`'s kernel of the operation in ``config``."""
    if isinstance(target, SIMTTarget):
        return simt.build(target, dtype, config or simt_config(target, dtype))
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no STREAM lowering for {type(target).__name__}")
    t = scalar_type(dtype)
    module = target.new_module(f"{KERNEL}_{dtype}")
    for op in NT_OPS:
        _elementwise(target, module, t, op, False)
        _elementwise(target, module, t, op, True)
    _dot(target, module, t)
    return module


def simt_config(target: SIMTTarget, dtype: str, shape: Shape | None = None) -> dict[str, int]:
    """The work-group kernel's configuration for ``target``'s device and the shape's operation."""
    return simt.choose_config(target.limits, dtype, shape)


def chunk_for(op: int, n: int) -> int:
    """Elements per CPU program: :data:`CHUNK`, larger for a dot that would need more than
    :data:`MAX_PROGRAMS` programs."""
    if op != DOT:
        return CHUNK
    return max(CHUNK, -(-n // MAX_PROGRAMS))


def launch(
    shape: Shape,
    dtype: str,
    target: LLVMTarget,
    workers: int = 1,
    config: dict[str, int] | None = None,
    nontemporal: bool | None = None,
) -> Launch:
    """On the CPU the entry of the shape's operation over ``ceil(n/chunk)`` programs, non-temporal
    where the output is larger than the host's last-level cache (``nontemporal`` overrides);
    on a SIMT target the work-group kernel's launch in ``config``."""
    if isinstance(target, SIMTTarget):
        return simt.launch(shape, dtype, target, config or simt_config(target, dtype, shape))
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no STREAM lowering for {type(target).__name__}")
    op, n = int(shape["op"]), int(shape["n"])
    chunk = chunk_for(op, n)
    itemsize = 4 if dtype == "fp32" else 8
    if nontemporal is None:
        nontemporal = op != DOT and n * itemsize > largest_cache_bytes()
    nontemporal = nontemporal and op != DOT
    programs = -(-n // chunk)
    args = tuple(buffer(name) for name in READS[op]) + (output(), i64_arg(n), i64_arg(chunk))
    record: dict[str, Any] = {
        "kernel": KERNEL,
        "op": op_name(op),
        "dtype": dtype,
        "target": target.name,
        "vector_width": target.vector_width(dtype),
        "unroll": UNROLL,
        "chunk": chunk,
        "nontemporal_stores": nontemporal,
    }
    grid = (programs,) if n else (0,)
    return Launch(entry(op, nontemporal), args, grid, (n,) if op != DOT else (), config=record, workers=workers)
