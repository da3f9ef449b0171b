"""Warm-up and repetition by time budget, cache flush, and early stop on low noise.

Kernels and backends never time themselves: the backend supplies a :class:`Timer` and an
optional flush, and this module decides how often to call and when to stop, as
``triton.testing.do_bench`` (budgets) and NVBench (stop once the noise is low) do.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hwbench.core.backend import Timer
from hwbench.run.stats import summarize


@dataclass(frozen=True)
class TimingConfig:
    """How long to warm up and measure, and when to stop early."""

    warmup_s: float = 0.05
    budget_s: float = 0.5
    min_samples: int = 10
    max_samples: int = 1000
    target_cv: float = 0.01
    flush: bool = True
    #: Seconds, at most, of the energy windows after the timed calls where the device's energy is
    #: readable (``hwbench.sensors.energy``); 0: no energy measured.
    energy_s: float = 2.0

    @classmethod
    def for_profile(cls, profile: str, flush: bool = True) -> TimingConfig:
        """Budgets that keep a profile's run time in proportion to its size."""
        # quick: about triton.testing.do_bench's defaults (25 ms of warm-up, 100 ms of timed calls).
        budget = {"quick": 0.1, "standard": 1.0, "full": 2.0}[profile]
        energy = {"quick": 2.0, "standard": 3.0, "full": 5.0}[profile]
        return cls(warmup_s=budget / 5, budget_s=budget, flush=flush, energy_s=energy)


@dataclass(frozen=True)
class Timing:
    """Samples of one timed case and how they were taken."""

    samples: list[float]
    timer: str
    resolution_s: float
    flushed: bool
    warmup: int
    stopped_by: str  # "noise", "budget" or "max_samples"
    #: How the caches were flushed before each timed call (None: not flushed).
    flush_method: str | None = None
    estimate_s: float = 0.0
    wall_s: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)


def measure(run: Callable[[], None], timer: Timer, flush: Callable[[], None] | None, config: TimingConfig) -> Timing:
    """Time ``run`` repeatedly on ``timer`` and return the samples.

    The first call, flushed as the timed ones are, is an estimate; warm-up calls fill
    ``warmup_s``; where none fit (a call longer than ``warmup_s``) the estimate is kept as the
    first sample, since no warm-up separates it from the others. Timed calls
    (each preceded by ``flush`` when given and enabled) continue until the relative
    noise drops below ``target_cv`` after ``min_samples`` (fewer, at least 3, for
    calls slower than the budget), the budget is spent (flush
    time included, so a run's length stays bounded), or ``max_samples`` is reached.
    """
    flush_fn = flush if (config.flush and flush is not None) else None
    start = time.perf_counter()
    if flush_fn is not None:
        flush_fn()
    first = timer.time(run)
    estimate = max(first, 1e-9)
    warmup = min(int(config.warmup_s / estimate), config.max_samples)
    for _ in range(warmup):
        run()
    # A call slower than the budget still gets a few samples, not min_samples of them.
    min_samples = max(3, min(config.min_samples, int(config.budget_s / estimate)))
    samples: list[float] = [first] if not warmup and first > 0 else []
    measure_start = time.perf_counter()
    stopped_by = "max_samples"
    while len(samples) < config.max_samples:
        if flush_fn is not None:
            flush_fn()
        samples.append(timer.time(run))
        n = len(samples)
        if n >= min_samples:
            if n % 5 == 0 and summarize(samples).cv <= config.target_cv:
                stopped_by = "noise"
                break
            if time.perf_counter() - measure_start >= config.budget_s:
                stopped_by = "budget"
                break
    return Timing(
        samples=samples,
        timer=timer.name,
        resolution_s=timer.resolution_s,
        flushed=flush_fn is not None,
        warmup=warmup,
        stopped_by=stopped_by,
        estimate_s=estimate,
        wall_s=time.perf_counter() - start,
    )
