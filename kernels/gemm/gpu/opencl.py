"""Bindings of the OpenCL C GEMM (``opencl.cl`` beside this file): tiles per device, arguments, grid.

One work-item computes a ``TM x (TNV*VW)`` register tile of C with ``VW``-wide vectors;
work-groups are ``WG0`` work-items along M. Tiles were measured on PoCL over AVX-512 for
CPU devices; the GPU values are a starting point.
"""

from __future__ import annotations

from typing import Any

from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch, buffer, ceil_div, i32, output

SOURCE = "opencl.cl"
ENTRY = "gemm"


def tiles(kind: str, lanes: int) -> dict[str, int]:
    """Register tile for a device of ``kind`` (cpu, gpu, accelerator) with ``lanes`` vector lanes."""
    if kind == "cpu":  # one work-item is a CPU microkernel: 32 vector registers on AVX-512
        return {"VW": lanes, "TM": 12 if lanes >= 8 else 6, "TNV": 2, "WG0": 1}
    return {"VW": min(lanes, 4), "TM": 4, "TNV": 1, "WG0": 64}


#: The tile keys a configuration names (compile-time definitions of ``opencl.cl``).
CONFIG_KEYS = ("VW", "TM", "TNV", "WG0")


def tuning_space(kind: str, lanes: int, dtype: str, shape: Shape) -> list[dict[str, int]]:
    """Candidate tiles for ``hwbench tune``, :func:`tiles`' first: on a CPU device register tiles
    of at most 24 vectors at the device's width, one work-item a group; elsewhere narrower
    vectors, rows per work-item and work-group sizes around the heuristic's."""
    found = [tiles(kind, lanes)]
    if kind == "cpu":
        shapes = [(tm, tnv, lanes, 1) for tm in (4, 6, 8, 10, 12) for tnv in (1, 2, 3, 4) if tm * tnv <= 24]
    else:
        shapes = [(tm, tnv, vw, wg) for tm in (2, 4, 8) for tnv in (1, 2) for vw in (1, 2, 4) for wg in (32, 64, 128)]
    for tm, tnv, vw, wg in shapes:
        config = {"VW": vw, "TM": tm, "TNV": tnv, "WG0": wg}
        if config not in found:
            found.append(config)
    return found


def launch(shape: Shape, dtype: str, kind: str, lanes: int, config: dict[str, int] | None = None) -> Launch:
    """``gemm(A, B, C, M, N, K)`` over work-groups of ``WG0`` work-items, in the tile ``config``
    (one of :func:`tuning_space`'s) or :func:`tiles`'."""
    t = {key: int(config[key]) for key in CONFIG_KEYS} if config else tiles(kind, lanes)
    m, n, k = shape["M"], shape["N"], shape["K"]
    wg, cols = t["WG0"], t["TNV"] * t["VW"]
    grid = (ceil_div(ceil_div(m, t["TM"]), wg), ceil_div(n, cols))
    basis = "cpu (measured)" if kind == "cpu" else "gpu (heuristic)"
    basis = "given (hwbench tune)" if config else basis
    record: dict[str, Any] = {
        **t,
        "tile": f"{t['TM']}x{cols}",
        "global_size": [grid[0] * wg, grid[1]],
        "tuned_for": basis,
    }
    args = (buffer("A"), buffer("B"), output(), i32(m), i32(n), i32(k))
    return Launch(ENTRY, args, grid if k else (0, 0), (m, n), local=(wg, 1), defines=t, config=record)
