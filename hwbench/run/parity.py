"""Compare a kernel's output with its float64 reference; poison an output before the timed
calls, so that the check after them sees what they computed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hwbench.core.kernel import Tolerance
from hwbench.core.results_types import Parity as ParitySection

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


def poison_value(dtype: np.dtype[Any]) -> Any:
    """What an output of ``dtype`` is filled with before the timed calls: NaN for floating and
    complex dtypes, the most negative signed and the largest unsigned integer (no kernel's answer
    everywhere); None where there is none (booleans, objects)."""
    if dtype.kind in "fc":
        return np.nan
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return int(info.min if dtype.kind == "i" else info.max)
    return None


def same_buffer(a: object, b: object) -> bool:
    """Whether ``a`` and ``b`` are one array: the same object, or arrays over the same memory with
    the same layout (two NumPy views of one tensor)."""
    if a is b:
        return True
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.nbytes == 0:
        return False
    where = a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    return where and (a.shape, a.strides, a.dtype) == (b.shape, b.strides, b.dtype)


#: How a record's warning starts when its timed calls could not be verified (status stays ok).
NOT_VERIFIED = "timed calls not verified"
#: How a record's ``parity.after_timing`` starts then.
_NOT_VERIFIED_AFTER = "not verified: "


@dataclass(frozen=True)
class Guard:
    """What was done to a case's output before its timed calls, so that the check after them
    sees what they computed: ``cleared`` by the backend (``Prepared.clear_output``),
    ``poisoned`` by the pipeline (the one writable array ``result()`` hands back each time,
    filled with ``fill``), ``watched`` (the same array each time, one it cannot fill: a new
    object after the timed calls shows they made it) or ``unverifiable`` (a new copy on each
    ``result()`` and no clearing: nothing shows the timed calls computed anything)."""

    how: str
    fill: str = ""
    held: Any = None

    def after(self, output: Any) -> str:
        """The record's ``parity.after_timing`` for ``output``, read after the timed calls."""
        if self.how == "cleared":
            return "cleared before the timed calls"
        if self.how == "poisoned":
            return f"filled with {self.fill} before the timed calls"
        if self.how == "watched" and not same_buffer(output, self.held):
            return "a new output object from the last timed call"
        if self.how == "watched":
            why = (
                "result() hands back the same array before and after them, one hwbench cannot fill "
                "(read-only, not numeric, or an input)"
            )
        elif self.how == "unverifiable":
            why = "result() returns a new copy on each call and Prepared.clear_output cannot clear the output"
        else:
            why = "the output was not cleared before them"
        return f"{_NOT_VERIFIED_AFTER}{why}; the output checked after the timed calls may be the first call's"


def unverified_warning(parity: ParitySection | None) -> str:
    """The record's warning where its timed calls were not verified (``parity.after_timing``
    says why), else empty."""
    after = (parity.get("after_timing") if parity else None) or ""
    return f"{NOT_VERIFIED}: {after[len(_NOT_VERIFIED_AFTER) :]}" if after.startswith(_NOT_VERIFIED_AFTER) else ""


def poison(first: Any, again: Any, inputs: list[np.ndarray]) -> Guard:
    """Fill the output where ``result()`` handed back the same writable array twice (``first`` and
    ``again``), and none of the ``inputs``; else say how far the timed calls can be verified."""
    if not same_buffer(first, again):
        return Guard("unverifiable")
    value = poison_value(again.dtype) if isinstance(again, np.ndarray) else None
    if value is None or not again.flags.writeable or any(np.may_share_memory(again, x) for x in inputs):
        return Guard("watched", held=again)
    again.fill(value)
    return Guard("poisoned", "NaN" if isinstance(value, float) else str(value))


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
