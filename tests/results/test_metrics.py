"""Derived figures: throughput, share of peak, porting overhead, cost, portability."""

from __future__ import annotations

import math

import pytest

from hwbench.results import metrics


def test_tflops() -> None:
    assert metrics.tflops(2e12, 2.0) == 1.0
    assert metrics.tflops(2.0 * 1024**3, 1e-3) == pytest.approx(2.147483648)


def test_gbps() -> None:
    assert metrics.gbps(3e9, 1.5) == 2.0
    assert metrics.gbps(1e6, 1e-3) == pytest.approx(1.0)


def test_pct_of_peak() -> None:
    assert metrics.pct_of_peak(0.5, 2.0) == 25.0
    assert metrics.pct_of_peak(3.0, 2.0) == 150.0


@pytest.mark.parametrize("peak", [None, 0.0, -1.0])
def test_pct_of_peak_none_without_peak(peak) -> None:
    assert metrics.pct_of_peak(1.0, peak) is None


@pytest.mark.parametrize(
    "native,portable,expected",
    [
        (1.0, 1.0, 0.0),  # as fast as the vendor library
        (1.0, 2.0, 0.5),  # half its speed
        (2.0, 1.0, -1.0),  # twice as fast: negative
        (3e-3, 4e-3, 0.25),
    ],
)
def test_porting_overhead(native: float, portable: float, expected: float) -> None:
    assert metrics.porting_overhead(native, portable) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("native,portable", [(0.0, 1.0), (1.0, 0.0), (-1.0, 1.0), (1.0, -1.0)])
def test_porting_overhead_rejects_non_positive_times(native: float, portable: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        metrics.porting_overhead(native, portable)


def test_per_usd_hour() -> None:
    assert metrics.per_usd_hour(1.0, 4.0) == 0.25
    assert metrics.per_usd_hour(10.0, 2.5) == 4.0


@pytest.mark.parametrize("price", [None, 0.0, -2.0])
def test_per_usd_hour_none_without_price(price) -> None:
    assert metrics.per_usd_hour(1.0, price) is None


def test_performance_portability_is_harmonic_mean() -> None:
    # 2 / (1/0.5 + 1/0.25) = 2 / 6
    assert metrics.performance_portability([0.5, 0.25]) == pytest.approx(1.0 / 3.0)
    # 3 / (1.25 + 2.5 + 5) = 3 / 8.75
    assert metrics.performance_portability([0.8, 0.4, 0.2]) == pytest.approx(3.0 / 8.75)
    assert metrics.performance_portability([1.0, 1.0]) == 1.0
    assert metrics.performance_portability([0.7]) == pytest.approx(0.7)
    # a generator works too
    assert metrics.performance_portability(e for e in (0.5, 0.5)) == pytest.approx(0.5)


def test_performance_portability_is_below_arithmetic_mean() -> None:
    values = [0.9, 0.1]
    pp = metrics.performance_portability(values)
    assert pp == pytest.approx(0.18)
    assert pp < sum(values) / len(values)


@pytest.mark.parametrize("values", [[0.5, None], [0.5, 0.0], [None], [0.0], [], [0.5, -0.1]])
def test_performance_portability_zero_when_any_missing_or_zero(values) -> None:
    assert metrics.performance_portability(values) == 0.0


def test_performance_portability_ignores_nothing_silently() -> None:
    # one platform unsupported among many still gives 0, not the mean of the others
    assert metrics.performance_portability([1.0] * 9 + [None]) == 0.0
    assert not math.isnan(metrics.performance_portability([1.0, 0.0]))


def test_speed_ratio_is_bounded_both_ways_in_log() -> None:
    assert metrics.speed_ratio(1.0, 2.0) == 0.5
    assert metrics.speed_ratio(5.4, 1.0) == pytest.approx(5.4)
    # overhead is unbounded below (a portable kernel 600 times faster: -59900 %); the ratio is 600x
    assert metrics.porting_overhead(600.0, 1.0) == pytest.approx(-599.0)
    assert metrics.speed_ratio(600.0, 1.0) == pytest.approx(600.0)
    with pytest.raises(ValueError):
        metrics.speed_ratio(0.0, 1.0)
