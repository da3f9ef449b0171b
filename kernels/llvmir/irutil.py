"""Small, target-neutral helpers for building kernels with ``llvmlite.ir``.

Everything here emits plain LLVM IR (generic intrinsics only), so kernels that
use these helpers can be lowered to any LLVM backend. Pointers are opaque
(``ptr``): loads and GEPs always carry their element type explicitly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from llvmlite import ir

from hwbench.core.dtypes import TABLE

I1 = ir.IntType(1)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
VOID = ir.VoidType()
PTR = ir.PointerType()

#: The element types the llvmlite kernels are written for, by their name in the dtype table.
IR_TYPES: dict[str, ir.Type] = {"float": F32, "double": F64}


def scalar_type(dtype: str) -> ir.Type:
    """The LLVM scalar type of a dtype name (``fp32``, ``fp64``: those the kernels compute in)."""
    found = TABLE.get(dtype)
    if found is None or found.llvm not in IR_TYPES:
        supported = tuple(name for name, d in TABLE.items() if d.llvm in IR_TYPES)
        raise ValueError(f"unsupported dtype {dtype!r}; expected one of {supported}")
    return IR_TYPES[found.llvm]


def i64(value: int) -> ir.Constant:
    """An i64 constant."""
    return ir.Constant(I64, value)


def vec_type(elem: ir.Type, width: int) -> ir.VectorType:
    """``<width x elem>``."""
    return ir.VectorType(elem, width)


def splat(builder: ir.IRBuilder, value: ir.Value, width: int) -> ir.Value:
    """Broadcast a scalar to a vector (constants fold to a constant vector)."""
    vty = vec_type(value.type, width)
    if isinstance(value, ir.Constant):
        return ir.Constant(vty, [value.constant] * width)
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined), ir.Constant(vec_type(I32, width), [0] * width))


def const_vec(elem: ir.Type, values: Sequence[float | int]) -> ir.Constant:
    """A constant vector from Python numbers."""
    return ir.Constant(vec_type(elem, len(values)), list(values))


def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ret, list(args)), name=name)


def intrinsic_suffix(ty: ir.Type) -> str:
    """The overload suffix of an intrinsic on ``ty`` (``f32``, ``v16f32``, ...)."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{intrinsic_suffix(ty.element)}"
    return {"float": "f32", "double": "f64"}.get(str(ty), str(ty))


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    """The declaration of intrinsic ``name`` in ``module`` (declared on first use)."""
    return _intrinsic(module, name, ret, args)


def fma(builder: ir.IRBuilder, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
    """``a * b + c``: one fused multiply-add where the target has one, else a multiply and an add
    (``llvm.fmuladd``; ``llvm.fma`` on a CPU without FMA, x86-64-v2, is a call to libm's
    software ``fma`` per element)."""
    fn = _intrinsic(builder.module, f"llvm.fmuladd.{intrinsic_suffix(a.type)}", a.type, [a.type] * 3)
    return builder.call(fn, [a, b, c])


def fmax(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """IEEE maxNum (``llvm.maxnum``); with no NaNs this is a plain max."""
    fn = _intrinsic(builder.module, f"llvm.maxnum.{intrinsic_suffix(a.type)}", a.type, [a.type] * 2)
    return builder.call(fn, [a, b])


def fmin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """IEEE minNum (``llvm.minnum``)."""
    fn = _intrinsic(builder.module, f"llvm.minnum.{intrinsic_suffix(a.type)}", a.type, [a.type] * 2)
    return builder.call(fn, [a, b])


def elem_ptr(builder: ir.IRBuilder, base: ir.Value, elem: ir.Type, index: ir.Value) -> ir.Value:
    """``&base[index]`` for an opaque pointer to ``elem``."""
    return builder.gep(base, [index], inbounds=True, source_etype=elem)


def load(builder: ir.IRBuilder, ptr: ir.Value, ty: ir.Type, align: int | None = None) -> ir.Value:
    """Typed load through an opaque pointer."""
    return builder.load(ptr, typ=ty, align=align)


def load_vec(
    builder: ir.IRBuilder, base: ir.Value, elem: ir.Type, index: ir.Value, width: int, align: int | None = None
) -> ir.Value:
    """Load ``width`` contiguous elements starting at ``base[index]``."""
    ptr = elem_ptr(builder, base, elem, index)
    return builder.load(ptr, typ=vec_type(elem, width), align=align or elem_size(elem))


def store_vec(
    builder: ir.IRBuilder, value: ir.Value, base: ir.Value, index: ir.Value, align: int | None = None
) -> None:
    """Store a vector to ``base[index:index+width]``."""
    elem = value.type.element
    ptr = elem_ptr(builder, base, elem, index)
    builder.store(value, ptr, align=align or elem_size(elem))


def elem_size(ty: ir.Type) -> int:
    """Byte size of a float or integer scalar type."""
    if isinstance(ty, ir.IntType):
        return max(1, ty.width // 8)
    return {"half": 2, "float": 4, "double": 8}[str(ty)]


def lane_mask(builder: ir.IRBuilder, width: int, first_lane: int, limit: ir.Value) -> ir.Value:
    """``<width x i1>``: lane ``l`` is on when ``first_lane + l < limit`` (limit: i64)."""
    lanes = const_vec(I64, [first_lane + k for k in range(width)])
    return builder.icmp_signed("<", lanes, splat(builder, limit, width))


def masked_load(
    builder: ir.IRBuilder, ptr: ir.Value, vty: ir.VectorType, mask: ir.Value, passthru: ir.Value | None = None
) -> ir.Value:
    """``llvm.masked.load``: disabled lanes read nothing and yield ``passthru`` (zero)."""
    fn = _intrinsic(
        builder.module, f"llvm.masked.load.{intrinsic_suffix(vty)}.p0", vty, [PTR, I32, vec_type(I1, vty.count), vty]
    )
    if passthru is None:
        passthru = ir.Constant(vty, None)
    return builder.call(fn, [ptr, ir.Constant(I32, elem_size(vty.element)), mask, passthru])


def masked_store(builder: ir.IRBuilder, value: ir.Value, ptr: ir.Value, mask: ir.Value) -> None:
    """``llvm.masked.store``: disabled lanes write nothing."""
    vty = value.type
    fn = _intrinsic(
        builder.module, f"llvm.masked.store.{intrinsic_suffix(vty)}.p0", VOID, [vty, PTR, I32, vec_type(I1, vty.count)]
    )
    builder.call(fn, [value, ptr, ir.Constant(I32, elem_size(vty.element)), mask])


def imin(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    """Signed integer minimum."""
    return builder.select(builder.icmp_signed("<", a, b), a, b)


def ceil_div(builder: ir.IRBuilder, a: ir.Value, b: int) -> ir.Value:
    """``ceil(a / b)`` for non-negative i64 ``a`` and a positive constant ``b``."""
    return builder.sdiv(builder.add(a, i64(b - 1)), i64(b))


def loop_carry(
    builder: ir.IRBuilder,
    start: ir.Value,
    stop: ir.Value,
    step: ir.Value | int,
    init: Sequence[ir.Value],
    body: Callable[[ir.Value, list[ir.Value]], Sequence[ir.Value]],
    name: str = "loop",
) -> list[ir.Value]:
    """``for i in range(start, stop, step)`` carrying SSA values through phi nodes.

    ``body(i, values)`` emits the loop body and returns the next values. The
    loop is bottom-tested behind a guard, which is the shape LLVM's loop passes
    like best. Returns the values after the loop (``init`` if it never ran).
    """
    if isinstance(step, int):
        step = i64(step)
    pre = builder.block
    header = builder.append_basic_block(f"{name}.body")
    exit_ = builder.append_basic_block(f"{name}.exit")
    builder.cbranch(builder.icmp_signed("<", start, stop), header, exit_)

    builder.position_at_end(header)
    iv = builder.phi(start.type, name=f"{name}.i")
    iv.add_incoming(start, pre)
    phis = []
    for k, v in enumerate(init):
        p = builder.phi(v.type, name=f"{name}.c{k}")
        p.add_incoming(v, pre)
        phis.append(p)
    new_values = list(body(iv, list(phis)))
    nxt = builder.add(iv, step, name=f"{name}.next")
    latch = builder.block
    iv.add_incoming(nxt, latch)
    for p, v in zip(phis, new_values, strict=False):
        p.add_incoming(v, latch)
    builder.cbranch(builder.icmp_signed("<", nxt, stop), header, exit_)

    builder.position_at_end(exit_)
    results = []
    for k, (v0, v1) in enumerate(zip(init, new_values, strict=False)):
        r = builder.phi(v0.type, name=f"{name}.r{k}")
        r.add_incoming(v0, pre)
        r.add_incoming(v1, latch)
        results.append(r)
    return results


def merge(builder: ir.IRBuilder, incoming: Sequence[tuple[Sequence[ir.Value], ir.Block]]) -> list[ir.Value]:
    """One phi per value where control flow joins: ``incoming`` pairs each predecessor block
    with the values it brings (the same count and types from every one)."""
    merged = []
    for k in range(len(incoming[0][0])):
        phi = builder.phi(incoming[0][0][k].type)
        for values, block in incoming:
            phi.add_incoming(values[k], block)
        merged.append(phi)
    return merged


def whole_steps_then_tail(
    builder: ir.IRBuilder,
    stop: ir.Value,
    step: int,
    init: Sequence[ir.Value],
    body: Callable[[ir.Value, list[ir.Value], bool], Sequence[ir.Value]],
    name: str = "steps",
) -> list[ir.Value]:
    """``body(i, values, False)`` for every whole ``step`` in ``range(0, stop)``, then
    ``body(i, values, True)`` once for the partial step left (if any), carrying ``values``:
    the shape of a K loop whose tiles are read unchecked but for the last."""
    whole = builder.mul(builder.sdiv(stop, i64(step)), i64(step))
    values = loop_carry(builder, i64(0), whole, step, init, lambda i, vals: body(i, vals, False), name=name)
    before = builder.block
    with builder.if_then(builder.icmp_signed("<", whole, stop)):
        tail = body(whole, list(values), True)
        tail_block = builder.block
    return merge(builder, [(values, before), (tail, tail_block)])


@contextmanager
def for_range(
    builder: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: ir.Value | int = 1, name: str = "for"
) -> Iterator[ir.Value]:
    """``with for_range(b, lo, hi) as i:`` emits a counted loop (no carried values)."""
    if isinstance(step, int):
        step = i64(step)
    pre = builder.block
    header = builder.append_basic_block(f"{name}.body")
    exit_ = builder.append_basic_block(f"{name}.exit")
    builder.cbranch(builder.icmp_signed("<", start, stop), header, exit_)
    builder.position_at_end(header)
    iv = builder.phi(start.type, name=f"{name}.i")
    iv.add_incoming(start, pre)
    yield iv
    nxt = builder.add(iv, step, name=f"{name}.next")
    iv.add_incoming(nxt, builder.block)
    builder.cbranch(builder.icmp_signed("<", nxt, stop), header, exit_)
    builder.position_at_end(exit_)
