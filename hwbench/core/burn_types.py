"""The ``burn`` and ``tuning`` sections of a results document, as TypedDicts.

A ``burn`` item (:class:`BurnEntry`, written by ``hwbench burn``) is one device and kernel
burned: what ran, its time series (:class:`BurnPoint`, one per interval), every check that found
wrong results (:class:`BurnMismatch`) and the figures drawn from the series (:class:`BurnFigures`).
A ``tuning`` item (:class:`TuningEntry`, written by ``hwbench run --tune``) is one portable case
tuned before the run, with the candidates it dropped (:class:`TuningDrop`).

They follow :mod:`hwbench.core.results_types`: required keys in a ``_...Required`` base, optional
ones in a ``total=False`` subclass; ``tests/core/test_typed_results.py`` checks them against the
schema (``hwbench/results/schema/results-v2.json``) and against real documents.
"""

from __future__ import annotations

from typing import Any, TypedDict


class _BurnMismatchRequired(TypedDict):
    #: 0: the first call, checked before the burn.
    iteration: int
    t_s: float
    #: None when a NaN or infinity is among the wrong elements.
    max_abs_err: float | None
    count: int


class BurnMismatch(_BurnMismatchRequired, total=False):
    """A check that found wrong results: at which iteration and second, how many elements, how wrong."""

    nonfinite: int


class _BurnPointRequired(TypedDict):
    #: The end of the interval, seconds from the burn's start.
    t_s: float
    #: Iterations run in the interval.
    iterations: int
    tflops: float | None
    #: Means of the sensor readings taken in the interval (power from the energy counter where one is).
    clock_mhz: float | None
    temp_c: float | None
    power_w: float | None


class BurnPoint(_BurnPointRequired, total=False):
    """One interval of a burn's series: its throughput over its wall time and the sensors' means."""

    dt_s: float
    #: Stream: GB/s over the interval.
    gbps: float | None


class _BurnFiguresRequired(TypedDict):
    #: Median throughput of the last window over the first's.
    decay_ratio: float | None
    #: ``100 * (1 - decay_ratio)``: negative when the end was faster.
    decay_pct: float | None
    decay_window_s: float
    #: None when neither the clock nor a throttle reason was readable.
    throttled: bool | None
    throttle_reasons: list[str]


class BurnFigures(_BurnFiguresRequired, total=False):
    """The figures drawn from a burn's series (:func:`hwbench.run.burn_series.summarize`): decay,
    the clock at each end and throttling. A part of :class:`BurnEntry`, not an object of its own."""

    clock_first_mhz: float | None
    clock_last_mhz: float | None
    clock_ratio: float | None


class _BurnEntryRequired(BurnFigures):
    backend: str
    device_index: int
    kernel: str
    #: Seconds asked for, and burned.
    duration_s: float
    elapsed_s: float
    interval_s: float
    iterations: int
    #: Checks done, iteration 0's included.
    checks: int
    #: The first :data:`hwbench.run.burn_series.MAX_MISMATCHES_KEPT` checks that found wrong results.
    mismatches: list[BurnMismatch]
    series: list[BurnPoint]
    #: The stop signal (SIGINT, SIGTERM, SIGHUP) that ended the burn early.
    stopped_by: str | None
    #: ``ok``, ``mismatch``, ``interrupted`` or ``error``.
    status: str
    reason: str


class BurnEntry(_BurnEntryRequired, total=False):
    """A results document's ``burn`` item: one device and kernel under sustained load, its series,
    checks and mismatches, and the figures drawn from them (:func:`hwbench.run.burn.entry`)."""

    device: str | None
    impl: str | None
    dtype: str | None
    shape: dict[str, int] | None
    #: ``exact`` (inputs whose exact answer is known) or ``tolerance`` (the kernel's own inputs).
    check: str | None
    check_every_s: float | None
    check_every_iterations: int | None
    #: Checks that found wrong results, all counted (``mismatches`` keeps the first ones).
    mismatched_checks: int
    #: The longest time between two checks (the burn's start counts as one), s.
    max_check_gap_s: float | None
    #: Seconds of the burn spent checking: reading the output, comparing it, clearing it.
    check_s: float | None
    notes: list[str]


class TuningDrop(TypedDict):
    """A candidate configuration tuning dropped (wrong results, refused, failed), and why."""

    config: dict[str, Any]
    reason: str


class _TuningEntryRequired(TypedDict):
    backend: str
    device_index: int
    kernel: str
    impl: str
    dtype: str
    shape: dict[str, int]
    #: ``tuned``, ``untunable``, ``skipped``, ``unfit`` or ``failed``.
    status: str
    #: Candidates timed, of the space's.
    candidates: int
    of: int


class TuningEntry(_TuningEntryRequired, total=False):
    """A results document's ``tuning`` item: one portable case tuned before the run
    (:meth:`hwbench.run.tune.CaseTuning.summary`), and the configuration filed in the tuning cache."""

    reason: str
    dropped: list[TuningDrop]
    budget_s: float
    spent_s: float
    #: None where nothing was filed.
    config: dict[str, Any] | None
    median_s: float | None
    derived_median_s: float | None
    #: The derived configuration's median over the tuned one's.
    speedup_vs_derived: float | None
