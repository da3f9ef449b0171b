"""Summary statistics on frozen samples, and the warnings they raise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hwbench.run.stats import CV_WARN, RESOLUTION_MARGIN, Summary, stability_warnings, summarize


def test_summary_of_skewed_sample_is_exact() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s.n == 5
    assert (s.median, s.q1, s.q3, s.iqr) == (3.0, 2.0, 4.0, 2.0)
    assert s.mean == 22.0
    assert (s.min, s.max) == (1.0, 100.0)
    # ddof=1 by hand: deviations from 22 are -21, -20, -19, -18, 78;
    # squares 441 + 400 + 361 + 324 + 6084 = 7610; 7610 / (5 - 1) = 1902.5.
    assert s.std == pytest.approx(math.sqrt(1902.5), rel=1e-15)
    assert s.cv == pytest.approx(math.sqrt(1902.5) / 22.0, rel=1e-15)
    # Linear interpolation: position 0.99 * 4 = 3.96 between 4 and 100: 4 + 0.96 * 96 = 96.16.
    assert s.p99 == pytest.approx(96.16, rel=1e-12)


def test_quartiles_interpolate_between_samples() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0])  # order must not matter
    # positions 0.75, 1.5, 2.25 and 2.97 of the sorted [1, 2, 3, 4]
    assert s.q1 == 1.75
    assert s.median == 2.5
    assert s.q3 == 3.25
    assert s.iqr == 1.5
    assert s.p99 == pytest.approx(3.97, rel=1e-12)
    assert s.mean == 2.5


def test_single_sample() -> None:
    s = summarize([0.5])
    assert s == Summary(n=1, median=0.5, mean=0.5, std=0.0, q1=0.5, q3=0.5, iqr=0.0, cv=0.0, min=0.5, max=0.5, p99=0.5)
    assert stability_warnings(s, resolution_s=1e-9) == []


def test_summary_fields_are_python_floats() -> None:
    s = summarize(np.array([1.0, 2.0, 3.0], dtype=np.float32))
    for value in (s.median, s.mean, s.std, s.q1, s.q3, s.iqr, s.cv, s.min, s.max, s.p99):
        assert type(value) is float
    assert type(s.n) is int


@pytest.mark.parametrize("empty", [[], (), np.array([])])
def test_empty_raises(empty) -> None:
    with pytest.raises(ValueError, match="no samples"):
        summarize(empty)


def test_noisy_sample_warns_about_cv() -> None:
    # mean 1.08, std = 0.08 * sqrt(2) = 0.11314 -> CV 10.48 %
    s = summarize([1.0, 1.16])
    assert s.cv == pytest.approx(0.08 * math.sqrt(2) / 1.08)
    assert s.cv > CV_WARN
    warnings = stability_warnings(s, resolution_s=1e-9)
    assert len(warnings) == 1
    assert warnings[0] == "noisy: CV 10.5% > 10%"


def test_cv_just_under_threshold_does_not_warn() -> None:
    # mean 1.07, std = 0.07 * sqrt(2) = 0.09899 -> CV 9.25 %
    s = summarize([1.0, 1.14])
    assert s.cv == pytest.approx(0.07 * math.sqrt(2) / 1.07)
    assert stability_warnings(s, resolution_s=1e-9) == []


def test_sample_near_timer_resolution_warns() -> None:
    resolution = 2.0**-30
    s = summarize([5 * resolution, 5 * resolution])  # 5x the resolution, under the 10x margin
    warnings = stability_warnings(s, resolution_s=resolution)
    assert len(warnings) == 1
    assert "timer resolution" in warnings[0]
    assert f"{RESOLUTION_MARGIN:g}x" in warnings[0]


def test_sample_exactly_at_resolution_margin_does_not_warn() -> None:
    resolution = 2.0**-30
    s = summarize([RESOLUTION_MARGIN * resolution] * 3)
    assert stability_warnings(s, resolution_s=resolution) == []


def test_noisy_and_near_resolution_gives_both_warnings() -> None:
    resolution = 1e-9
    s = summarize([2e-9, 4e-9])
    warnings = stability_warnings(s, resolution_s=resolution)
    assert len(warnings) == 2
    assert warnings[0].startswith("noisy")
    assert "timer resolution" in warnings[1]


def test_clean_sample_has_no_warnings() -> None:
    s = summarize([1.000e-3, 1.001e-3, 0.999e-3, 1.0005e-3, 0.9995e-3])
    assert s.cv < 0.01
    assert stability_warnings(s, resolution_s=1e-9) == []
