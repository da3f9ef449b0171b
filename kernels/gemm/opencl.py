"""Bindings of the OpenCL C GEMM (``opencl.cl`` beside this file): tiles per device, arguments, grid.

One work-item computes a ``TM x (TNV*VW)`` register tile of C with ``VW``-wide vectors;
work-groups are ``WG0`` work-items along M. Tiles were measured on PoCL over AVX-512 for
CPU devices; the GPU values are a starting point.
"""

from __future__ import annotations

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, ceil_div, i32, output

SOURCE = "opencl.cl"
ENTRY = "gemm"


def tiles(kind: str, lanes: int) -> dict[str, int]:
    """Register tile for a device of ``kind`` (cpu, gpu, accelerator) with ``lanes`` vector lanes."""
    if kind == "cpu":  # one work-item is a CPU microkernel: 32 vector registers on AVX-512
        return {"VW": lanes, "TM": 12 if lanes >= 8 else 6, "TNV": 2, "WG0": 1}
    return {"VW": min(lanes, 4), "TM": 4, "TNV": 1, "WG0": 64}


def launch(shape: Shape, dtype: str, kind: str, lanes: int) -> Launch:
    """``gemm(A, B, C, M, N, K)`` over work-groups of ``WG0`` work-items."""
    t = tiles(kind, lanes)
    m, n, k = shape["M"], shape["N"], shape["K"]
    wg, cols = t["WG0"], t["TNV"] * t["VW"]
    grid = (ceil_div(ceil_div(m, t["TM"]), wg), ceil_div(n, cols))
    config = {
        **t,
        "tile": f"{t['TM']}x{cols}",
        "global_size": [grid[0] * wg, grid[1]],
        "tuned_for": "cpu (measured)" if kind == "cpu" else "gpu (heuristic)",
    }
    args = (buffer("A"), buffer("B"), output(), i32(m), i32(n), i32(k))
    return Launch(ENTRY, args, grid if k else (0, 0), (m, n), local=(wg, 1), defines=t, config=config)
