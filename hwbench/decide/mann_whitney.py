"""The two-sided Mann-Whitney U test on timing samples, in NumPy (SciPy is not a dependency).

Small samples without ties (both at most :data:`EXACT_LIMIT`) get the exact null
distribution of U, counted by dynamic programming; larger or tied samples the normal
approximation with tie and continuity corrections.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Above this many samples on either side the normal approximation is used.
EXACT_LIMIT = 8


@dataclass(frozen=True)
class UTest:
    """U of the first sample, the two-sided p-value and how p was obtained."""

    u: float
    p: float
    method: str  # "exact" or "asymptotic"


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based) and the size of each group of ties."""
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    _, starts, counts = np.unique(sorted_values, return_index=True, return_counts=True)
    average = starts + (counts + 1) / 2.0  # ranks starts+1 .. starts+counts
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(average, counts)
    return ranks, counts


def _exact_counts(m: int, n: int) -> np.ndarray:
    """Number of orderings giving each U = 0..m*n for sizes m and n (no ties)."""
    # f[i][j][u]: arrangements of i x's and j y's with U = u; the largest element is either an x
    # (it beats all j y's: u - j) or a y (adds nothing).
    size = m * n + 1
    table = [[np.zeros(size, dtype=np.float64) for _ in range(n + 1)] for _ in range(m + 1)]
    for i in range(m + 1):
        table[i][0][0] = 1.0
    for j in range(n + 1):
        table[0][j][0] = 1.0
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            shifted = np.zeros(size)
            shifted[j:] = table[i - 1][j][: size - j]
            table[i][j] = shifted + table[i][j - 1]
    return table[m][n]


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> UTest:
    """Two-sided Mann-Whitney U test of ``x`` against ``y`` (each at least one sample)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        raise ValueError("both samples need at least one value")
    ranks, ties = _ranks(np.concatenate([a, b]))
    u1 = float(ranks[:m].sum() - m * (m + 1) / 2.0)
    u2 = m * n - u1
    has_ties = bool((ties > 1).any())
    if not has_ties and max(m, n) <= EXACT_LIMIT:
        counts = _exact_counts(m, n)
        tail = counts[: int(round(min(u1, u2))) + 1].sum() / counts.sum()
        return UTest(u1, float(min(1.0, 2.0 * tail)), "exact")
    total = m + n
    tie_term = float((ties**3 - ties).sum()) / (total * (total - 1)) if total > 1 else 0.0
    variance = m * n / 12.0 * ((total + 1) - tie_term)
    if variance <= 0:  # every value equal: nothing to tell apart
        return UTest(u1, 1.0, "asymptotic")
    z = (max(u1, u2) - m * n / 2.0 - 0.5) / math.sqrt(variance)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return UTest(u1, float(min(1.0, p)), "asymptotic")
