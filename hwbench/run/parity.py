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


#: Elements compared at a time: the temporaries of a chunk stay in the caches, and no
#: output-sized temporary is ever allocated (its pages would each be faulted in).
CHUNK = 1 << 16


@dataclass
class _Tally:
    """What the chunks found so far."""

    mismatches: int = 0
    nonfinite: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst_err: float = -1.0
    worst_at: int = -1


def _chunk(out: np.ndarray, ref: np.ndarray, tol: Tolerance, offset: int, tally: _Tally) -> None:
    """Fold ``out`` against ``ref`` (flat float64 slices starting at element ``offset``) into ``tally``."""
    same_special = out == ref
    same_special |= np.isnan(out) & np.isnan(ref)
    finite = np.isfinite(out) & np.isfinite(ref)
    tally.nonfinite += int(np.count_nonzero(~np.isfinite(out) & ~same_special))
    err = np.abs(out - ref)
    err[~finite] = 0.0
    magnitude = np.abs(ref)
    # Relative error only where the reference is above atol: near zero it says nothing.
    significant = (magnitude > max(tol.atol, TINY)) & finite
    if significant.any():
        tally.max_rel = max(tally.max_rel, float((err[significant] / magnitude[significant]).max()))
    if err.size:
        tally.max_abs = max(tally.max_abs, float(err.max()))
    if tol.exact:
        bad = ~same_special
    else:
        bad = ~same_special & ~(finite & (err <= tol.atol + tol.rtol * magnitude))
    count = int(np.count_nonzero(bad))
    if count:
        tally.mismatches += count
        where = int(np.argmax(np.where(bad, err, -1.0)))
        if err[where] > tally.worst_err:  # the first of the worst, as over the whole output
            tally.worst_err, tally.worst_at = float(err[where]), offset + where


def _chunk_of(array: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Elements ``start:stop`` of ``array`` in C order: a view where it is contiguous, else a copy
    of those elements alone."""
    return array.reshape(-1)[start:stop] if array.flags.c_contiguous else array.flat[start:stop]


def check(output: np.ndarray, reference: np.ndarray, tol: Tolerance) -> Parity:
    """Element-wise check ``|out - ref| <= atol + rtol * |ref|`` (or equality when exact).

    A NaN or infinity in the output counts as a mismatch unless the reference holds the
    same value there; max errors are taken over the finite positions, and the relative
    error only where ``|ref| > atol``. The output is compared :data:`CHUNK` elements at a time.
    """
    out = np.asarray(output)
    ref = np.asarray(reference)
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
    tally = _Tally()
    for start in range(0, ref.size, CHUNK):
        stop = min(start + CHUNK, ref.size)
        piece_out = np.asarray(_chunk_of(out, start, stop), dtype=np.float64)
        piece_ref = np.asarray(_chunk_of(ref, start, stop), dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):  # infinities and NaN are counted, not warned of
            _chunk(piece_out, piece_ref, tol, start, tally)
    reason = ""
    if tally.mismatches:
        where = np.unravel_index(tally.worst_at, ref.shape)
        got = np.float64(out.flat[tally.worst_at])
        want = np.float64(ref.flat[tally.worst_at])
        reason = (
            f"{tally.mismatches} of {ref.size} elements outside tolerance "
            f"(worst at {tuple(int(i) for i in where)}: got {got!r}, want {want!r})"
        )
    return Parity(
        tally.max_abs,
        tally.max_rel,
        tol.atol,
        tol.rtol,
        tally.mismatches,
        tally.nonfinite,
        int(ref.size),
        tally.mismatches == 0,
        reason,
    )
