"""The reduction of the portable GPU AllReduce in Triton: one source for NVIDIA and AMD.

Ranks of one node see each other's buffers (torch symmetric memory or IPC handles);
rank ``r`` sums its slice ``[lo, hi)`` of every rank's buffer into its own (the
reduce-scatter step; the all-gather is peer copies). One program sums ``BLOCK``
elements of up to :data:`MAX_RANKS` buffers, accumulating in fp32 for fp16/bf16 and
rounding once on the store; AllReduce inputs are small integers, so the result is exact
in any order. Synchronisation between ranks stays on the host side (symmetric memory's
signal pads / barrier), so this kernel is pure data movement and runs under
``TRITON_INTERPRET=1`` on the CPU.

Importing this module imports Triton: only GPU backends, tests and ``hwbench compile`` do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import triton
import triton.language as tl

KERNEL = "allreduce"
DTYPES = ("fp32", "fp16", "bf16")
#: Buffers one launch can read; a node has at most this many GPUs in one NVLink/XGMI domain.
MAX_RANKS = 8
BLOCK = 2048


@triton.jit
def reduce_kernel(out_ptr, in0, in1, in2, in3, in4, in5, in6, in7, lo, hi, NRANKS: tl.constexpr, BLOCK: tl.constexpr):
    """out[i] = sum of in0..in{NRANKS-1} at i, for i in [lo, hi)."""
    offs = lo + tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < hi
    acc = tl.load(in0 + offs, mask=mask, other=0.0).to(tl.float32)
    if NRANKS > 1:
        acc += tl.load(in1 + offs, mask=mask, other=0.0).to(tl.float32)
    if NRANKS > 2:
        acc += tl.load(in2 + offs, mask=mask, other=0.0).to(tl.float32)
    if NRANKS > 3:
        acc += tl.load(in3 + offs, mask=mask, other=0.0).to(tl.float32)
    if NRANKS > 4:
        acc += tl.load(in4 + offs, mask=mask, other=0.0).to(tl.float32)
    if NRANKS > 5:
        acc += tl.load(in5 + offs, mask=mask, other=0.0).to(tl.float32)
    if NRANKS > 6:
        acc += tl.load(in6 + offs, mask=mask, other=0.0).to(tl.float32)
    if NRANKS > 7:
        acc += tl.load(in7 + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


def reduce(out: Any, inputs: Sequence[Any], lo: int = 0, hi: int | None = None, block: int = BLOCK) -> None:
    """``out[lo:hi] = sum(inputs)[lo:hi]`` for 1 to :data:`MAX_RANKS` tensors of one dtype."""
    if not 1 <= len(inputs) <= MAX_RANKS:
        raise ValueError(f"one launch reduces 1 to {MAX_RANKS} buffers, got {len(inputs)}")
    hi = out.numel() if hi is None else hi
    if hi <= lo:
        return
    padded = list(inputs) + [inputs[0]] * (MAX_RANKS - len(inputs))  # never read: NRANKS masks them out
    grid = (triton.cdiv(hi - lo, block),)
    reduce_kernel[grid](out, *padded, lo, hi, NRANKS=len(inputs), BLOCK=block)


def compile_variants(arch: str) -> list[dict[str, Any]]:
    """Ahead-of-time variants (``triton.compiler.ASTSource`` arguments) for ``hwbench compile`` and tests."""
    variants = []
    for dtype in DTYPES:
        pointer = f"*{dtype}"
        signature = {"out_ptr": pointer, **{f"in{r}": pointer for r in range(MAX_RANKS)}, "lo": "i64", "hi": "i64"}
        variants.append(
            {
                "name": f"allreduce_reduce_{dtype}_r{MAX_RANKS}",
                "dtype": dtype,
                "fn": reduce_kernel,
                "signature": signature,
                "constexprs": {"NRANKS": MAX_RANKS, "BLOCK": BLOCK},
                "config": {"BLOCK": BLOCK, "NRANKS": MAX_RANKS, "num_warps": 8},
                "options": {"num_warps": 8},
            }
        )
    return variants
