"""axpy in llvmlite IR for the host CPU: one vector loop and a scalar tail per program.

The cpu backend JIT-compiles :func:`build`'s module for the host once per process and dtype, then
runs the entry :func:`launch` names over a grid of *programs* on all cores (each worker thread
claims programs from a counter). :meth:`CPUTarget.define_kernel` wraps the body, which emits the
IR of ONE program: here, the elements ``[pid*chunk, min((pid+1)*chunk, n))``.

This source has no work-group (SIMT) kernel, so ``spec.py`` offers it on the cpu backend only;
a source that has one also gives ``simt_config`` and builds for a ``SIMTTarget``
(``kernels/stream/llvm.py``).
"""

from __future__ import annotations

from llvmlite import ir

from example_kernel.spec import ALPHA
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, ceil_div, i64, output, real
from hwbench.kernels.llvmir.irutil import (
    I64,
    PTR,
    elem_ptr,
    elem_size,
    for_range,
    imin,
    load,
    scalar_type,
    splat,
    vec_type,
)
from hwbench.kernels.llvmir.irutil import i64 as const_i64
from hwbench.kernels.llvmir.target import CPUTarget, KernelContext, LLVMTarget

ENTRY = "axpy"
#: Elements per program: enough work to amortise claiming it, small enough to balance the cores.
CHUNK = 1 << 16


def build(target: LLVMTarget, dtype: str) -> ir.Module:
    """The module holding ``axpy(x, y, out, alpha, n, chunk)`` for ``target`` and ``dtype``."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"axpy's llvmlite source runs on the host CPU only, not {type(target).__name__}")
    t = scalar_type(dtype)  # float or double
    vw = target.vector_width(dtype)  # SIMD lanes of the host (8 fp32 lanes with AVX2, 16 with AVX-512)
    vt = vec_type(t, vw)

    def body(ctx: KernelContext, args: list[ir.Argument]) -> None:
        b = ctx.builder
        x, y, out, alpha, n, chunk = args
        lo = b.mul(ctx.program_id(0), chunk)
        hi = imin(b, b.add(lo, chunk), n)
        # The vector loop over whole vectors of vw elements from lo, to ``whole``.
        whole = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), const_i64(vw)), const_i64(vw)))
        alphas = splat(b, alpha, vw)
        with for_range(b, lo, whole, vw, name="vec") as i:
            xv = b.load(elem_ptr(b, x, t, i), typ=vt, align=elem_size(t))
            yv = b.load(elem_ptr(b, y, t, i), typ=vt, align=elem_size(t))
            b.store(b.fadd(b.fmul(alphas, xv), yv), elem_ptr(b, out, t, i), align=elem_size(t))
        # The scalar tail: what is left of the program's elements, one at a time.
        with for_range(b, whole, hi, name="tail") as i:
            value = b.fadd(b.fmul(alpha, load(b, elem_ptr(b, x, t, i), t)), load(b, elem_ptr(b, y, t, i), t))
            b.store(value, elem_ptr(b, out, t, i))

    module = target.new_module(f"axpy_{dtype}")
    target.define_kernel(module, ENTRY, [PTR, PTR, PTR, t, I64, I64], body)
    return module


def launch(shape: Shape, dtype: str, target: LLVMTarget, workers: int = 1) -> Launch:
    """``axpy(x, y, out, alpha, n, chunk)`` over ``ceil(n/chunk)`` programs; the arguments in the
    order :func:`build` declares them (buffers by input name, the output, typed scalars)."""
    n = int(shape["n"])
    args = (buffer("x"), buffer("y"), output(), real(ALPHA, dtype), i64(n), i64(CHUNK))
    config = {"vector_width": target.vector_width(dtype), "chunk": CHUNK}  # what the record's config says
    return Launch(ENTRY, args, (ceil_div(n, CHUNK),), (n,), config=config, workers=workers)
