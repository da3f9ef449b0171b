"""Repetition by budget, early stop on low noise, and cache flushes, with a fake timer and clock."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from types import SimpleNamespace

import pytest

from hwbench.core.backend import Timer
from hwbench.run import timing
from hwbench.run.timing import TimingConfig, measure


class FakeClock:
    """Stands in for ``time.perf_counter`` inside hwbench.run.timing; only the fake timer moves it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


class FakeTimer(Timer):
    """Calls fn, then reports the next preset value (cycling) and advances the fake clock by it."""

    name = "fake"
    resolution_s = 1e-9

    def __init__(self, values: Iterable[float], clock: FakeClock | None, log: list[str]) -> None:
        self.values = itertools.cycle(list(values))
        self.clock = clock
        self.log = log

    def time(self, fn: Callable[[], None]) -> float:
        fn()
        value = next(self.values)
        if self.clock is not None:
            self.clock.now += value
        self.log.append("time")
        return value


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(timing, "time", SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


class Calls:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.runs = 0
        self.flushes = 0

    def run(self) -> None:
        self.runs += 1

    def flush(self) -> None:
        self.flushes += 1
        self.log.append("flush")


def _setup(values, clock):
    log: list[str] = []
    return Calls(log), FakeTimer(values, clock, log)


def test_constant_samples_stop_by_noise(clock: FakeClock) -> None:
    calls, timer = _setup([1e-3], clock)
    config = TimingConfig(warmup_s=0.0, budget_s=10.0, min_samples=10, max_samples=1000, target_cv=0.01)
    t = measure(calls.run, timer, calls.flush, config)
    assert t.stopped_by == "noise"
    assert t.samples == [1e-3] * 10  # the first multiple of 5 at or past min_samples
    assert t.estimate_s == 1e-3
    assert t.warmup == 0
    assert calls.runs == 10  # no warm-up: the estimate is the first sample
    assert (t.timer, t.resolution_s) == ("fake", 1e-9)


def test_noise_checked_only_every_fifth_sample(clock: FakeClock) -> None:
    calls, timer = _setup([1e-3], clock)
    config = TimingConfig(warmup_s=0.0, budget_s=10.0, min_samples=11, max_samples=1000, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert t.stopped_by == "noise"
    assert len(t.samples) == 15


def test_noisy_samples_stop_by_budget(clock: FakeClock) -> None:
    # estimate 1e-3 (kept: no warm-up); min_samples = max(3, min(10, int(5e-3 / 1e-3))) = 5;
    # after 5 samples (3 + 1 + 3 + 1 ms = 8 ms after the estimate) the 5 ms budget is spent and
    # CV is far above 1 %.
    calls, timer = _setup([1e-3, 3e-3], clock)
    config = TimingConfig(warmup_s=0.0, budget_s=5e-3, min_samples=10, max_samples=1000, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert t.stopped_by == "budget"
    assert t.samples == [1e-3, 3e-3, 1e-3, 3e-3, 1e-3]


def test_noisy_samples_stop_by_budget_on_the_real_clock() -> None:
    calls, timer = _setup([1e-3, 5e-3, 2e-3], None)
    config = TimingConfig(warmup_s=0.0, budget_s=1e-6, min_samples=10, max_samples=1000, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert t.stopped_by == "budget"
    assert 3 <= len(t.samples) < 1000
    assert t.wall_s > 0


def test_noisy_samples_stop_at_max_samples(clock: FakeClock) -> None:
    calls, timer = _setup([1e-3, 3e-3], clock)
    config = TimingConfig(warmup_s=0.0, budget_s=100.0, min_samples=3, max_samples=7, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert t.stopped_by == "max_samples"
    assert len(t.samples) == 7


def test_flush_before_every_timed_call(clock: FakeClock) -> None:
    calls, timer = _setup([2.0**-10], clock)
    config = TimingConfig(warmup_s=2.0**-7, budget_s=10.0, min_samples=10, max_samples=1000, target_cv=0.01, flush=True)
    t = measure(calls.run, timer, calls.flush, config)
    assert t.flushed is True
    assert t.warmup == 8  # 2**-7 / 2**-10
    n = len(t.samples)
    assert n == 10
    assert calls.flushes == 1 + n
    assert calls.runs == 1 + 8 + n
    # the estimate call comes first, then each timed call, each preceded by exactly one flush
    assert calls.log == ["flush", "time"] * (1 + n)


def test_no_flush_when_disabled(clock: FakeClock) -> None:
    calls, timer = _setup([1e-3, 3e-3], clock)
    config = TimingConfig(warmup_s=0.0, budget_s=5e-3, min_samples=10, max_samples=1000, target_cv=0.01, flush=False)
    t = measure(calls.run, timer, calls.flush, config)
    assert t.flushed is False
    assert calls.flushes == 0
    assert "flush" not in calls.log
    assert len(t.samples) == 5


def test_no_flush_function_means_not_flushed(clock: FakeClock) -> None:
    calls, timer = _setup([1e-3], clock)
    t = measure(calls.run, timer, None, TimingConfig(warmup_s=0.0, budget_s=1.0, flush=True))
    assert t.flushed is False
    assert calls.flushes == 0


def test_calls_slower_than_budget_get_three_samples(clock: FakeClock) -> None:
    calls, timer = _setup([1.0], clock)
    config = TimingConfig(warmup_s=0.02, budget_s=0.1, min_samples=10, max_samples=1000, target_cv=0.01)
    t = measure(calls.run, timer, calls.flush, config)
    assert t.warmup == 0
    assert t.stopped_by == "budget"
    assert t.samples == [1.0, 1.0, 1.0]  # the estimate, flushed as the others, is the first
    assert calls.flushes == 3
    assert calls.runs == 3


def test_calls_slower_than_budget_get_at_least_three_samples_on_the_real_clock() -> None:
    calls, timer = _setup([1.0], None)
    config = TimingConfig(warmup_s=0.02, budget_s=0.1, min_samples=10, max_samples=1000, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert len(t.samples) >= 3


def test_warmup_is_capped_by_max_samples(clock: FakeClock) -> None:
    calls, timer = _setup([1e-9], clock)
    config = TimingConfig(warmup_s=1.0, budget_s=1.0, min_samples=5, max_samples=20, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert t.warmup == 20
    assert calls.runs == 1 + 20 + len(t.samples)


def test_zero_estimate_is_clamped(clock: FakeClock) -> None:
    calls, timer = _setup([0.0], clock)
    config = TimingConfig(warmup_s=0.0, budget_s=1.0, min_samples=5, max_samples=50, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert t.estimate_s == 1e-9
    assert len(t.samples) == 5  # all zero: no spread (CV 0), so the noise rule stops at min_samples
    assert t.stopped_by == "noise"


@pytest.mark.parametrize("profile,budget", [("quick", 0.1), ("standard", 1.0), ("full", 2.0)])
def test_for_profile(profile: str, budget: float) -> None:
    config = TimingConfig.for_profile(profile, flush=False)
    assert config.budget_s == budget
    assert config.warmup_s == pytest.approx(budget / 5)
    assert config.flush is False


def test_an_estimate_kept_as_a_sample_must_be_a_time(clock: FakeClock) -> None:
    """A first call the timer reads as 0 is the estimate only (clamped), never a sample."""
    calls, timer = _setup([0.0, 2.0, 2.0, 2.0], clock)
    config = TimingConfig(warmup_s=0.0, budget_s=1.0, min_samples=3, max_samples=50, target_cv=0.01)
    t = measure(calls.run, timer, None, config)
    assert t.estimate_s == 1e-9 and 0.0 not in t.samples
