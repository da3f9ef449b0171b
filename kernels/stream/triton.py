"""STREAM in Triton: one source for NVIDIA (PTX) and AMD (AMDGCN).

One program moves ``BLOCK`` consecutive elements of every array it touches (masked at the
end, so any n works); the operation is a compile-time constant. dot runs in two launches,
as BabelStream's GPU dots do: each program stores the sum of its block's products in a
partial-sum tensor of ``ceil(n / BLOCK)`` elements, and one program adds them up, block by
block, into the output.

Importing this module imports Triton: only backends and ``hwbench compile`` do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

from hwbench.core.dtypes import TABLE
from hwbench.core.kernel import Shape
from hwbench.kernels import triton_compat as compat
from hwbench.kernels.stream.spec import DOT, READS, op_name

KERNEL = "stream"
DTYPES = ("fp32", "fp64")
ELEMENT = {name: TABLE[name].triton for name in DTYPES}
#: Elements ``hwbench compile`` compiles for (2^28: 1 GiB of fp32 per array).
COMPILE_N = 2**28
FOLD_BLOCK = 1024


@triton.jit
def stream_kernel(x_ptr, y_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    """out = copy x, s*x, x + y or y... as ``OP`` says (x, y: the arrays read, BabelStream's order)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if OP == 0:
        r = x
    elif OP == 1:
        r = x * 0.375
    elif OP == 2:
        r = x + tl.load(y_ptr + offs, mask=mask)
    else:
        r = x + 0.375 * tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, r.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def dot_partial_kernel(a_ptr, b_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    """partial[program] = sum of a*b over the program's block."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(partial_ptr + pid, tl.sum(a * b, axis=0))


@triton.jit
def dot_fold_kernel(partial_ptr, out_ptr, count, BLOCK: tl.constexpr):
    """out = the sum of ``count`` partial sums (one program)."""
    acc = tl.zeros((BLOCK,), dtype=partial_ptr.dtype.element_ty)
    for start in range(0, count, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(partial_ptr + offs, mask=offs < count, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0))


@dataclass(frozen=True)
class Config:
    """Elements per program and warps."""

    block: int
    num_warps: int = 4

    def options(self) -> dict[str, Any]:
        """Launch options."""
        return {"num_warps": self.num_warps}

    def as_dict(self) -> dict[str, Any]:
        """Plain form for results records."""
        return {"BLOCK": self.block, **self.options()}


def configs(arch: str, dtype: str) -> list[Config]:
    """The small tuning space; first = default: 16-byte vectors per thread, a few per program."""
    return [Config(4096, 8), Config(2048, 4), Config(8192, 8), Config(1024, 4)]


def tuning_space(arch: str, dtype: str, shape: Shape) -> list[Config]:
    """Binding: the configurations a backend tunes over for one case."""
    return configs(arch, dtype)


def plan(
    inputs: Mapping[str, Any], out: Any, op: int, n: int, config: Config, partial: Any = None
) -> list[compat.Call]:
    """The launches computing ``op`` on ``n`` elements into ``out`` (dot: into ``partial`` first)."""
    programs = triton.cdiv(n, config.block)
    reads = [inputs[name] for name in READS[op]]
    if op != DOT:
        x, y = reads[0], reads[-1]
        args = {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": n, "OP": op, "BLOCK": config.block}
        return [compat.Call(stream_kernel, (programs,), args, config.options())]
    first = {"a_ptr": reads[0], "b_ptr": reads[1], "partial_ptr": partial, "n": n, "BLOCK": config.block}
    fold = {"partial_ptr": partial, "out_ptr": out, "count": programs, "BLOCK": FOLD_BLOCK}
    return [
        compat.Call(dot_partial_kernel, (programs,), first, config.options()),
        compat.Call(dot_fold_kernel, (1,), fold, {"num_warps": 4}),
    ]


def launch_case(inputs: Mapping[str, Any], out: Any, shape: Shape, dtype: str, config: Config) -> None:
    """Binding: the case's launches on its device tensors into ``out``."""
    import torch  # optional SDK: dot's partial sums live on the inputs' device

    op, n = int(shape["op"]), int(shape["n"])
    partial = None
    if op == DOT:
        a = inputs["a"]
        partial = torch.empty(max(1, triton.cdiv(n, config.block)), dtype=a.dtype, device=a.device)
    if n == 0:
        out.zero_()
        return
    for call in plan(inputs, out, op, n, config, partial):
        call.run()


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """What ``hwbench compile`` builds: every operation in each dtype at the default configuration
    on :data:`COMPILE_N` elements (dot: its first launch, where the bytes go)."""
    variants = []
    for dtype in DTYPES:
        elem = ELEMENT[dtype]
        cfg = configs(arch, dtype)[0]
        arrays = {name: compat.Pointer(elem, (COMPILE_N,)) for name in ("a", "b", "c")}
        partial = compat.Pointer(elem, (triton.cdiv(COMPILE_N, cfg.block),))
        for op in range(5):
            out = compat.Pointer(elem, (1,) if op == DOT else (COMPILE_N,))
            call = plan(arrays, out, op, COMPILE_N, cfg, partial)[0]
            variants.append(
                {
                    "name": f"stream_{op_name(op)}_{dtype}",
                    "dtype": dtype,
                    "fn": call.fn,
                    "args": call.args,
                    "options": call.options,
                    "config": {**cfg.as_dict(), "op": op_name(op), "n": COMPILE_N, "grid": list(call.grid)},
                    "precision": "ieee",
                }
            )
    return variants
