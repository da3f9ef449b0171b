"""Element-wise comparison of an output with its float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

from hwbench.core.kernel import Tolerance
from hwbench.run.parity import check

TOL = Tolerance(atol=0.5, rtol=0.25)  # bound at ref = 1.0: 0.5 + 0.25 * 1 = 0.75, all exact in binary


@pytest.mark.parametrize("out", [1.75, 0.25])
def test_error_exactly_at_bound_passes(out: float) -> None:
    p = check(np.array([out]), np.array([1.0]), TOL)
    assert p.passed
    assert p.mismatches == 0
    assert p.nonfinite == 0
    assert p.elements == 1
    assert p.max_abs_err == 0.75
    assert p.max_rel_err == 0.75
    assert (p.atol, p.rtol) == (0.5, 0.25)
    assert p.reason == ""


@pytest.mark.parametrize("out", [np.nextafter(1.75, 2.0), 0.25 - 2.0**-40])
def test_error_one_ulp_past_bound_fails(out: float) -> None:
    p = check(np.array([out]), np.array([1.0]), TOL)
    assert not p.passed
    assert p.mismatches == 1
    assert p.nonfinite == 0
    assert p.reason.startswith("1 of 1 elements outside tolerance")


def test_rtol_scales_with_reference() -> None:
    tol = Tolerance(atol=0.0, rtol=0.5)
    ref = np.array([2.0, -8.0])
    assert check(np.array([3.0, -12.0]), ref, tol).passed  # errors 1 and 4: exactly 0.5 * |ref|
    p = check(np.array([3.0, -12.5]), ref, tol)
    assert not p.passed and p.mismatches == 1


def test_nan_in_output_fails_and_counts_as_nonfinite() -> None:
    ref = np.array([1.0, 2.0, 3.0])
    p = check(np.array([1.0, np.nan, 3.0]), ref, Tolerance(atol=1e-6, rtol=1e-6))
    assert not p.passed
    assert p.mismatches == 1
    assert p.nonfinite == 1
    assert p.max_abs_err == 0.0  # max errors are over finite positions only
    assert "worst at (1,)" in p.reason
    assert "nan" in p.reason


def test_nan_in_both_at_same_place_is_ok() -> None:
    p = check(np.array([1.0, np.nan, 3.0]), np.array([1.0, np.nan, 3.0]), Tolerance(atol=1e-6, rtol=1e-6))
    assert p.passed
    assert p.mismatches == 0
    assert p.nonfinite == 0
    assert p.max_abs_err == 0.0


def test_nan_in_both_but_different_places_fails() -> None:
    p = check(np.array([np.nan, 2.0]), np.array([1.0, np.nan]), Tolerance(atol=1.0, rtol=1.0))
    assert not p.passed
    assert p.mismatches == 2
    assert p.nonfinite == 1  # only the output's NaN is a non-finite output


def test_inf_matching_reference_inf_is_ok() -> None:
    ref = np.array([np.inf, 1.0, -np.inf])
    p = check(ref.copy(), ref, Tolerance(atol=1e-6, rtol=1e-6))
    assert p.passed
    assert p.mismatches == 0
    assert p.nonfinite == 0
    assert p.max_abs_err == 0.0


def test_minus_inf_against_plus_inf_fails() -> None:
    p = check(np.array([-np.inf, 1.0]), np.array([np.inf, 1.0]), Tolerance(atol=1e6, rtol=1e6))
    assert not p.passed
    assert p.mismatches == 1
    assert p.nonfinite == 1


def test_finite_output_against_infinite_reference_fails() -> None:
    p = check(np.array([1e308]), np.array([np.inf]), Tolerance(atol=1e6, rtol=1e6))
    assert not p.passed
    assert p.mismatches == 1
    assert p.nonfinite == 0


def test_exact_mode_counts_wrong_elements() -> None:
    ref = np.arange(10, dtype=np.float64)
    out = ref.copy()
    out[3] += 1.0
    out[7] -= 2.0
    p = check(out, ref, Tolerance(atol=0.0, rtol=0.0, exact=True))
    assert not p.passed
    assert p.mismatches == 2
    assert p.elements == 10
    assert p.max_abs_err == 2.0
    assert "worst at (7,)" in p.reason


def test_exact_mode_ignores_atol() -> None:
    p = check(np.array([1.5]), np.array([1.0]), Tolerance(atol=1.0, rtol=1.0, exact=True))
    assert not p.passed and p.mismatches == 1
    q = check(np.array([1.5]), np.array([1.0]), Tolerance(atol=1.0, rtol=1.0, exact=False))
    assert q.passed


def test_exact_mode_passes_on_equal_arrays_of_other_dtype() -> None:
    ref = np.array([[-8.0, 0.0], [3.0, 16.0]])
    p = check(ref.astype(np.float16), ref, Tolerance(atol=0.0, rtol=0.0, exact=True))
    assert p.passed and p.mismatches == 0 and p.elements == 4


def test_shape_mismatch() -> None:
    p = check(np.zeros((2, 3)), np.zeros((3, 2)), Tolerance(atol=1.0, rtol=1.0))
    assert not p.passed
    assert p.max_abs_err is None and p.max_rel_err is None
    assert p.mismatches == 6 and p.elements == 6
    assert "(2, 3)" in p.reason and "(3, 2)" in p.reason


def test_shape_mismatch_is_not_broadcast() -> None:
    p = check(np.ones((1, 3)), np.ones(3), Tolerance(atol=1.0, rtol=1.0))
    assert not p.passed
    assert "differs" in p.reason


def test_max_rel_err_ignores_reference_at_or_below_atol() -> None:
    tol = Tolerance(atol=0.1, rtol=0.1)
    ref = np.array([1e-3, 0.1, 0.0, 10.0])  # only 10.0 is above atol
    out = np.array([2e-3, 0.2, 0.05, 10.1])  # errors 1e-3, 0.1, 0.05, 0.1: all within tolerance
    p = check(out, ref, tol)
    assert p.passed
    assert p.max_rel_err == pytest.approx(0.01, rel=1e-9)  # not 1.0 (at |ref| = atol) nor 0.05 (at ref 0)
    assert p.max_abs_err == pytest.approx(0.1, rel=1e-9)


def test_max_rel_err_is_zero_when_every_reference_is_small() -> None:
    p = check(np.array([0.5, -0.25]), np.array([0.0, 0.0]), Tolerance(atol=1.0, rtol=0.0))
    assert p.passed
    assert p.max_rel_err == 0.0
    assert p.max_abs_err == 0.5


def test_reason_names_worst_bad_element() -> None:
    ref = np.zeros((3, 4))
    out = ref.copy()
    out[0, 1] = 0.5
    out[2, 3] = 2.0
    p = check(out, ref, Tolerance(atol=0.1, rtol=0.0))
    assert p.mismatches == 2
    assert p.reason.startswith("2 of 12 elements outside tolerance")
    assert "worst at (2, 3)" in p.reason
    assert "2.0" in p.reason and "0.0" in p.reason


def test_worst_is_chosen_among_failing_elements_only() -> None:
    # element 0 has the larger error but is within rtol; element 1 fails
    ref = np.array([100.0, 0.0])
    out = np.array([101.0, 0.5])
    p = check(out, ref, Tolerance(atol=0.1, rtol=0.02))
    assert p.mismatches == 1
    assert p.max_abs_err == 1.0
    assert "worst at (1,)" in p.reason


def test_a_non_contiguous_output_is_checked_as_its_contiguous_copy() -> None:
    """The chunked check reads strided outputs (a transposed result) element for element in C order."""
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((300, 700))
    out = np.asfortranarray(ref + rng.standard_normal(ref.shape) * 1e-7)
    out[123, 456] = 5.0
    tol = Tolerance(atol=1e-6, rtol=1e-6)
    strided, copied = check(out, ref, tol), check(np.ascontiguousarray(out), ref, tol)
    assert not out.flags.c_contiguous and strided == copied
    assert strided.mismatches == 1 and "(123, 456)" in strided.reason
