"""Vector math shared by the kernels: a polynomial ``exp`` and horizontal reductions.

``llvm.exp`` on vectors scalarises into libm calls on most targets, so ``exp``
here is built from FMAs, a rounding and an exponent-bits scale, which vectorise
everywhere (and lower the same way on GPUs).
"""

from __future__ import annotations

import math

from llvmlite import ir

from hwbench.kernels.llvmir.irutil import F32, fma, fmax, fmin, splat, vec_type

# exp(x) = 2**n * exp(r), n = rint(x / ln2), |r| <= ln2 / 2, exp(r) by Taylor/Horner.
# Taylor to degree 7 (fp32) / 13 (fp64) leaves a truncation error below 0.5 ulp.
# 2**n is applied as two exact power-of-two factors 2**(n//2) * 2**(n - n//2), so
# results round once into the subnormal range and overflow to inf by themselves;
# the clamp [lo, hi] only keeps n representable (exp(lo) rounds to 0, exp(hi) to inf).
_EXP_PARAMS = {
    "float": dict(
        ln2_hi=0.693359375,
        ln2_lo=-2.12194440e-4,
        degree=7,
        lo=-104.0,
        hi=89.0,
        mant_bits=23,
        bias=127,
        int_ty=ir.IntType(32),
    ),
    "double": dict(
        ln2_hi=6.93147180369123816490e-01,
        ln2_lo=1.90821492927058770002e-10,
        degree=13,
        lo=-746.0,
        hi=710.0,
        mant_bits=52,
        bias=1023,
        int_ty=ir.IntType(64),
    ),
}


def _const(builder: ir.IRBuilder, ty: ir.Type, value: float, width: int) -> ir.Value:
    """``value`` as a ``width``-lane vector, or a plain scalar when ``width`` is 0."""
    return ir.Constant(ty, value) if width == 0 else splat(builder, ir.Constant(ty, value), width)


def _rint(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    vty = x.type
    scalar = "f32" if (vty.element if isinstance(vty, ir.VectorType) else vty) == F32 else "f64"
    suffix = f"v{vty.count}{scalar}" if isinstance(vty, ir.VectorType) else scalar
    name = f"llvm.rint.{suffix}"
    fn = builder.module.globals.get(name) or ir.Function(builder.module, ir.FunctionType(vty, [vty]), name=name)
    return builder.call(fn, [x])


def exp(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Element-wise ``exp`` of a float/double vector (or of a scalar).

    Relative error ~1e-7 (fp32) / ~2e-16 (fp64) in the normal range, gradual
    underflow below it (``exp(-inf)`` and ``exp(-1000)`` are exactly 0),
    ``inf`` past the largest finite result, NaN propagates.
    """
    vty = x.type
    vector = isinstance(vty, ir.VectorType)
    elem = vty.element if vector else vty
    w = vty.count if vector else 0
    p = _EXP_PARAMS[str(elem)]
    int_vty = vec_type(p["int_ty"], w) if vector else p["int_ty"]

    xc = fmin(builder, fmax(builder, x, _const(builder, elem, p["lo"], w)), _const(builder, elem, p["hi"], w))
    n = _rint(builder, builder.fmul(xc, _const(builder, elem, 1.0 / math.log(2.0), w)))
    neg_n = builder.fneg(n)
    r = fma(builder, neg_n, _const(builder, elem, p["ln2_hi"], w), xc)
    r = fma(builder, neg_n, _const(builder, elem, p["ln2_lo"], w), r)

    poly = _const(builder, elem, 1.0 / math.factorial(p["degree"]), w)
    for k in range(p["degree"] - 1, -1, -1):
        poly = fma(builder, poly, r, _const(builder, elem, 1.0 / math.factorial(k), w))

    ni = builder.fptosi(n, int_vty)
    half = builder.ashr(ni, _const(builder, p["int_ty"], 1, w))
    result = builder.fmul(poly, _pow2(builder, half, p, vty))
    result = builder.fmul(result, _pow2(builder, builder.sub(ni, half), p, vty))
    return builder.select(builder.fcmp_unordered("uno", x, x), x, result)


def _pow2(builder: ir.IRBuilder, n: ir.Value, p: dict, vty: ir.Type) -> ir.Value:
    """2**n as floats for integer n inside the normal exponent range."""
    w = vty.count if isinstance(vty, ir.VectorType) else 0
    bits = builder.shl(
        builder.add(n, _const(builder, p["int_ty"], p["bias"], w)),
        _const(builder, p["int_ty"], p["mant_bits"], w),
    )
    return builder.bitcast(bits, vty)


def _reduce(builder: ir.IRBuilder, v: ir.Value, op) -> ir.Value:
    width = v.type.count
    undef = ir.Constant(v.type, ir.Undefined)
    while width > 1:
        half = width // 2
        idx = list(range(half, width)) + list(range(half, width)) + [0] * (v.type.count - width)
        shuffled = builder.shuffle_vector(
            v, undef, ir.Constant(vec_type(ir.IntType(32), v.type.count), idx[: v.type.count])
        )
        v = op(v, shuffled)
        width = half
    return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))


def hmax(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Maximum of a vector's lanes (power-of-two widths), as a scalar."""
    return _reduce(builder, v, lambda a, b: fmax(builder, a, b))


def hsum(builder: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """Sum of a vector's lanes (power-of-two widths, pairwise order), as a scalar."""
    return _reduce(builder, v, builder.fadd)


__all__ = ["exp", "hmax", "hsum"]
