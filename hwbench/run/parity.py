"""Compare a kernel's output with its float64 reference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hwbench.core.kernel import Tolerance

TINY = np.finfo(np.float64).tiny


@dataclass(frozen=True)
class Parity:
    """How far an output is from the reference, and whether that is within tolerance."""

    max_abs_err: float | None
    max_rel_err: float | None
    atol: float
    rtol: float
    mismatches: int
    nonfinite: int
    elements: int
    passed: bool
    reason: str = ""


def check(output: np.ndarray, reference: np.ndarray, tol: Tolerance) -> Parity:
    """Element-wise check ``|out - ref| <= atol + rtol * |ref|`` (or equality when exact).

    A NaN or infinity in the output counts as a mismatch unless the reference holds the
    same value there; max errors are taken over the finite positions, and the relative
    error only where ``|ref| > atol``.
    """
    out = np.asarray(output, dtype=np.float64)
    ref = np.asarray(reference, dtype=np.float64)
    if out.shape != ref.shape:
        return Parity(
            None,
            None,
            tol.atol,
            tol.rtol,
            ref.size,
            0,
            ref.size,
            False,
            f"output shape {out.shape} differs from reference shape {ref.shape}",
        )
    same_special = (out == ref) | (np.isnan(out) & np.isnan(ref))
    finite = np.isfinite(out) & np.isfinite(ref)
    nonfinite = int(np.count_nonzero(~np.isfinite(out) & ~same_special))
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.where(finite, np.abs(out - ref), 0.0)
    # Relative error only where the reference is above atol: near zero it says nothing.
    significant = np.abs(ref) > max(tol.atol, TINY)
    rel = np.where(significant & finite, err / np.where(significant, np.abs(ref), 1.0), 0.0)
    if tol.exact:
        bad = ~same_special
    else:
        bad = ~same_special & ~(finite & (err <= tol.atol + tol.rtol * np.abs(ref)))
    mismatches = int(np.count_nonzero(bad))
    max_abs = float(err.max()) if err.size else 0.0
    max_rel = float(rel.max()) if rel.size else 0.0
    reason = ""
    if mismatches:
        worst = int(np.argmax(np.where(bad, err, -1.0)))
        where = np.unravel_index(worst, ref.shape)
        reason = (
            f"{mismatches} of {ref.size} elements outside tolerance "
            f"(worst at {tuple(int(i) for i in where)}: got {out.flat[worst]!r}, want {ref.flat[worst]!r})"
        )
    return Parity(max_abs, max_rel, tol.atol, tol.rtol, mismatches, nonfinite, int(ref.size), mismatches == 0, reason)
