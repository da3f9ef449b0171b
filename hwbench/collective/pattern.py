"""The inputs and the check of every AllReduce case: per-rank rows and their exact sum, on the host.

Inputs follow ``kernels/allreduce/spec.py`` (small integers, so every reduction order is
exact), built per rank without the other ranks' rows; they repeat every :data:`PERIOD`
elements, so a buffer of any size is filled and checked from one period.
"""

from __future__ import annotations

import numpy as np

PERIOD = 17  #: the spec's inputs repeat every 17 elements


def row_pattern(rank: int, seed: int) -> np.ndarray:
    """One period of rank ``rank``'s input, exactly as ``AllReduce.make_inputs`` builds it."""
    index = np.arange(PERIOD, dtype=np.int64)
    return ((index * 7 + rank * 13 + seed) % 17 - 8).astype(np.float64)


def sum_pattern(ranks: int, seed: int) -> np.ndarray:
    """One period of the exact sum over ``ranks`` ranks."""
    return np.sum([row_pattern(r, seed) for r in range(ranks)], axis=0)


def fill_periodic(buf: np.ndarray, pattern: np.ndarray) -> None:
    """Write ``pattern`` repeated over ``buf`` (doubling copies: no temporary of buf's size)."""
    n = buf.size
    head = min(n, pattern.size)
    buf[:head] = pattern[:head]
    done = head
    while done < n:
        step = min(done, n - done)
        buf[done : done + step] = buf[:step]
        done += step


def count_wrong(buf: np.ndarray, pattern: np.ndarray) -> tuple[int, float]:
    """Elements of ``buf`` that differ from ``pattern`` repeated, and the largest difference."""
    n = buf.size
    full = n - n % PERIOD
    want = pattern.astype(buf.dtype)
    wrong, worst = 0, 0.0
    chunk = PERIOD * 65536
    for lo in range(0, full, chunk):
        block = buf[lo : min(lo + chunk, full)].reshape(-1, PERIOD)
        bad = block != want
        wrong += int(np.count_nonzero(bad))
        if bad.any():
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.abs(block.astype(np.float64) - pattern)
            worst = max(worst, float(np.nanmax(np.where(np.isfinite(diff), diff, np.inf))))
    tail = buf[full:]
    bad = tail != want[: tail.size]
    if bad.any():
        wrong += int(np.count_nonzero(bad))
        worst = max(worst, float(np.max(np.abs(tail.astype(np.float64) - pattern[: tail.size]))))
    return wrong, worst
