"""Bindings of the OpenCL C attention (``opencl.cl`` beside this file): blocking per device,
arguments, grid.

One work-item owns ``QV*VW`` query rows of one (batch, head), in vector lanes, and walks
the keys in blocks of ``BK``; the head dimension ``HD`` is a compile-time constant.
"""

from __future__ import annotations

import math

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, ceil_div, i32, output, real

SOURCE = "opencl.cl"
ENTRY = "attention"


def tiles(kind: str, lanes: int, head_dim: int) -> dict[str, int]:
    """Query/key blocking for a device of ``kind`` with ``lanes`` vector lanes."""
    if kind == "cpu":
        return {"HD": head_dim, "VW": lanes, "QV": 1, "BK": 16, "WG0": 1}
    return {"HD": head_dim, "VW": min(lanes, 4), "QV": 1, "BK": 8, "WG0": 64}


def scale_log2e(head_dim: int) -> float:
    """Q's prescale for the exp2-based softmax: log2(e) / sqrt(head_dim)."""
    return math.log2(math.e) / math.sqrt(head_dim)


def launch(shape: Shape, dtype: str, kind: str, lanes: int) -> Launch:
    """``attention(q, k, v, o, Sq, Sk, causal, scale)`` over (query blocks, batch x heads)."""
    bsz, heads, sq, sk, d = (shape[k] for k in ("batch", "heads", "seq_q", "seq_k", "head_dim"))
    t = tiles(kind, lanes, d)
    wg, bq = t["WG0"], t["QV"] * t["VW"]
    grid = (ceil_div(ceil_div(sq, bq), wg), bsz * heads)
    config = {
        **t,
        "BQ": bq,
        "global_size": [grid[0] * wg, grid[1]],
        "tuned_for": "cpu (measured)" if kind == "cpu" else "gpu (heuristic)",
    }
    args = (
        buffer("q"),
        buffer("k"),
        buffer("v"),
        output(),
        i32(sq),
        i32(sk),
        i32(shape["causal"]),
        real(scale_log2e(d), dtype),
    )
    return Launch(ENTRY, args, grid, (bsz, heads, sq, d), local=(wg, 1), defines=t, config=config)
