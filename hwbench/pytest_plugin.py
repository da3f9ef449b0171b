"""pytest-benchmark fixture ``hwbench_case``: one hwbench case, timed on the backend's timer.

Installed with hwbench (entry point ``pytest11``), so any test can write::

    def test_gemm(hwbench_case):
        result = hwbench_case("gemm", {"M": 512, "N": 512, "K": 512}, dtype="fp32")
        assert result.parity["passed"]

The fixture prepares the case through the backend exactly as ``hwbench run`` does
(inputs, compile, output allocated), checks it against the float64 reference (a parity
failure fails the test; a backend, device or dtype that cannot run here skips it with the
reason), then times it with ``benchmark.pedantic``. Each pedantic round calls the
backend's own timer (device events where the device has them), so pytest-benchmark's
wall-clock statistics and the device-timer samples in ``extra_info`` come from the same
calls; the cache is flushed before every round, as ``hwbench run`` does. With
``native=True`` (the default) the backend's native implementation of the same case is
timed too, after the case's rounds, with :func:`hwbench.run.timing.measure` over
``native_budget_s`` (0.5 s by default), giving the porting overhead: ``extra_info`` says so
(``native_source``, ``native_n``, ``native_cv``), and a native CV above 10 % warns, since a
separate short measurement can disagree with a native test of its own in the same file.
Pass ``native_median_s`` (e.g. that test's median) to compare against a figure you trust.

``extra_info`` then carries ``tflops``, ``pct_peak``, ``parity``, ``porting_overhead``,
``native_impl``, ``device`` and the device-timer median, so ``pytest --benchmark-json``
files hold them beside pytest-benchmark's own statistics.

Rounds: without ``rounds=``, the case's first calls (its warm-up) measure one round, and the
rounds fill ``--benchmark-max-time`` (at least ``--benchmark-min-rounds``), as pytest-benchmark
sizes its own rounds; a gate on the mean (``--benchmark-compare-fail=mean:5%``) or
``--benchmark-precision`` asks for more where the warm-up's spread needs them for the mean's
margin at ``--benchmark-confidence``, up to ten times ``--benchmark-max-time``. Whatever the
rounds, a gate on the mean that the recorded rounds' own noise can trip warns, naming the
median and ``hwbench compare`` as the gates that hold on a noisy machine.
"""

from __future__ import annotations

import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pytest

from hwbench.core.backend import Prepared
from hwbench.core.kernel import get_kernel
from hwbench.decide.catalog import Catalog
from hwbench.results import metrics
from hwbench.run.case import Case, CaseFailed, CaseRequest, CaseSkipped, Pipeline
from hwbench.run.stats import Summary, summarize
from hwbench.run.timing import TimingConfig


@dataclass(frozen=True)
class CaseResult:
    """What one ``hwbench_case`` call measured (the same fields as its ``extra_info``)."""

    kernel: str
    impl: str
    impl_kind: str
    backend: str
    device: str
    dtype: str
    shape: dict[str, int]
    parity: dict[str, Any]
    device_timer: str
    device_samples_s: list[float] = field(repr=False)
    device_median_s: float | None
    tflops: float | None
    pct_peak: float | None
    native_impl: str | None
    native_median_s: float | None
    porting_overhead: float | None
    #: Where ``native_median_s`` comes from: ``timed here`` (its own calls, after this case's
    #: rounds, over ``native_budget_s``) or ``given`` (the caller's ``native_median_s``).
    native_source: str | None = None
    native_n: int | None = None
    native_cv: float | None = None

    def extra_info(self) -> dict[str, Any]:
        """JSON-ready fields for pytest-benchmark's ``extra_info`` (samples left out)."""
        info = asdict(self)
        info.pop("device_samples_s")
        return info


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def _peak_tflops(device: Any, dtype: str) -> float | None:
    """The device's own peak for ``dtype``, else the catalog's datasheet peak."""
    own = device.peak.tflops if device.peak is not None else None
    return Catalog.load().device_peak(device.name, own, dtype)[0]


#: A native median noisier than this (coefficient of variation) makes the porting overhead a guess.
NOISY_NATIVE_CV = 0.10


def _warn_if_noisy(impl: str, timing: Summary, budget_s: float) -> None:
    """A warning when the native's own timing is too noisy for its porting overhead to hold."""
    if timing.cv > NOISY_NATIVE_CV:
        warnings.warn(
            f"hwbench_case: the native {impl}'s median comes from {timing.n} calls over {budget_s:g} s with a CV of "
            f"{timing.cv:.0%}: porting_overhead is unreliable; raise native_budget_s or pass native_median_s",
            pytest.PytestWarning,
            stacklevel=3,
        )


#: Calls of the case before its rounds measure one round, at most (a fast case stops at this many).
CALIBRATION_CALLS = 1000
#: Share of ``--benchmark-max-time`` those calls take, at least (after the warm-up rounds and two more).
CALIBRATION_SHARE = 0.1
#: A gate on the mean or ``--benchmark-precision`` may take this many times ``--benchmark-max-time``.
GATE_TIME_FACTOR = 10
#: The most rounds chosen (pytest-benchmark's own rounds batch a fast call into iterations; these cannot).
MAX_ROUNDS = 100_000


@dataclass(frozen=True)
class Budget:
    """What the pytest session asks of a benchmark's rounds, from pytest-benchmark's own options."""

    min_rounds: int = 5
    max_time_s: float = 1.0
    #: ``--benchmark-precision``: the mean's relative margin at ``confidence``, or None.
    precision: float | None = None
    confidence: float = 0.99
    #: ``--benchmark-compare-fail`` checks on the mean: (as written, threshold, threshold is a percentage).
    mean_gates: tuple[tuple[str, float, bool], ...] = ()

    @classmethod
    def of(cls, config: Any) -> Budget:
        """The budget of a pytest ``config`` (defaults where an option is missing)."""

        def option(name: str, default: Any) -> Any:
            value = config.getoption(name, default) if config is not None else default
            return default if value is None else value

        gates = []
        for check in option("benchmark_compare_fail", []):
            if getattr(check, "field", None) == "mean":
                percent = type(check).__name__.startswith("Percentage")
                gates.append((f"mean:{check.threshold:g}{'%' if percent else ''}", float(check.threshold), percent))
        return cls(
            min_rounds=int(option("benchmark_min_rounds", 5)),
            max_time_s=float(option("benchmark_max_time", 1.0)),
            precision=option("benchmark_precision", None),
            confidence=float(option("benchmark_confidence", 0.99)),
            mean_gates=tuple(gates),
        )

    @property
    def z(self) -> float:
        """The two-sided normal quantile of ``confidence``."""
        return statistics.NormalDist().inv_cdf(0.5 + self.confidence / 2)

    def margins(self, mean: float) -> list[tuple[str, float]]:
        """Each gate on the mean as (its text, the relative change it allows around ``mean``)."""
        return [(text, t / 100 if percent else t / mean) for text, t, percent in self.mean_gates if mean > 0]

    def rounds_needed(self, samples: list[float]) -> int:
        """Rounds for the mean of ``samples``' spread to meet every gate on the mean (two runs'
        means differ by sqrt(2) margins) and ``precision``; 0 where nothing asks."""
        if len(samples) < 2 or statistics.fmean(samples) <= 0:
            return 0
        mean = statistics.fmean(samples)
        cv = statistics.stdev(samples) / mean
        needs = [2 * (self.z * cv / allowed) ** 2 for _, allowed in self.margins(mean) if allowed > 0]
        if self.precision:
            needs.append((self.z * cv / self.precision) ** 2)
        return math.ceil(max(needs, default=0))

    def rounds(self, device_s: list[float], round_s: list[float]) -> int:
        """The rounds of a case whose calls took ``device_s`` on its timer and ``round_s`` each on
        the wall clock with the cache flush: ``max_time_s`` filled (at least ``min_rounds``), more
        for the gates up to ``GATE_TIME_FACTOR`` times that time, never more than ``MAX_ROUNDS``."""
        wall = max(statistics.median(round_s), 1e-9)
        filled = max(self.min_rounds, math.ceil(self.max_time_s / wall))
        cap = max(filled, math.ceil(GATE_TIME_FACTOR * self.max_time_s / wall))
        return min(max(filled, min(self.rounds_needed(device_s), cap)), MAX_ROUNDS)


def _calibrate(timer: Any, run: Callable[[], None], flusher: Any, warmup_rounds: int, budget: Budget) -> int:
    """The case's first calls (its warm-up: ``warmup_rounds``, then until ``CALIBRATION_SHARE``
    of the time budget has passed), timed as rounds are; the rounds they call for."""
    device_s: list[float] = []
    round_s: list[float] = []
    started = time.perf_counter()
    while True:
        begin = time.perf_counter()
        if flusher is not None:
            flusher()
        device_s.append(timer.time(run))
        round_s.append(time.perf_counter() - begin)
        calls = len(device_s)
        enough = calls >= warmup_rounds + 2 and time.perf_counter() - started >= CALIBRATION_SHARE * budget.max_time_s
        if enough or calls >= max(CALIBRATION_CALLS, warmup_rounds + 2):
            cold = max(warmup_rounds, 1) if calls - max(warmup_rounds, 1) >= 2 else 0  # first calls warm up
            return budget.rounds(device_s[cold:], round_s[cold:])


def _warn_if_gate_too_tight(benchmark: Any, budget: Budget) -> None:
    """A warning for each gate on the mean that the recorded rounds' own noise can trip: two
    runs of unchanged code differ by up to sqrt(2) of the mean's margin at ``confidence``."""
    data = list(getattr(getattr(getattr(benchmark, "stats", None), "stats", None), "data", None) or [])
    if len(data) < 2 or not budget.mean_gates or statistics.fmean(data) <= 0:
        return
    mean = statistics.fmean(data)
    cv = statistics.stdev(data) / mean
    spread = math.sqrt(2) * budget.z * cv / math.sqrt(len(data))
    for text, allowed in budget.margins(mean):
        if spread > allowed:
            warnings.warn(
                f"hwbench_case: --benchmark-compare-fail={text} is within this benchmark's noise: over "
                f"{len(data)} rounds with a CV of {cv:.0%}, two runs of unchanged code differ by up to "
                f"{spread:.1%} in the mean ({budget.confidence:.0%} confidence); gate on the median "
                "(--benchmark-compare-fail=median:10%) or with `hwbench compare --fail-on median:5%` "
                "(a significance test on the samples), or give more rounds",
                pytest.PytestWarning,
                stacklevel=3,
            )


def _step(step: Callable[[], Any]) -> Any:
    """``step()``; a failing step fails the test with its status and reason."""
    try:
        return step()
    except CaseSkipped as skip:  # the implementation cannot take this case (a library's shape limits)
        pytest.skip(str(skip))
    except CaseFailed as fail:
        pytest.fail(f"{fail.status}: {fail.reason}", pytrace=False)


def _checked(steps: Pipeline, case: Case) -> tuple[Prepared, dict[str, Any]]:
    """The case prepared and run once, its output checked: a failure or a wrong output fails the test."""
    prepared = _step(lambda: steps.prepare(case))
    found, why = _step(lambda: steps.parity(case, steps.first_output(prepared)))
    if why:
        pytest.fail(f"parity failed: {why}", pytrace=False)
    return prepared, found


class HwbenchCase:
    """The callable the ``hwbench_case`` fixture returns; use it once per test."""

    def __init__(self, benchmark: Any, config: Any = None) -> None:
        self._benchmark = benchmark
        self._budget = Budget.of(config)

    def __call__(self, kernel: str, shape: Mapping[str, int], **options: Any) -> CaseResult:
        """Prepare, check and time one case; fill ``benchmark.extra_info`` (options: :meth:`run`)."""
        try:
            return self.run(kernel, shape, **options)
        except pytest.skip.Exception:
            self._benchmark.skipped = True  # a skipped case is not "a benchmark fixture left unused"
            raise

    def _rounds(self, timer: Any, run: Callable[[], None], flusher: Any, warmup_rounds: int) -> tuple[int, int]:
        """Rounds and warm-up rounds chosen for the session: the warm-up calls measure a round,
        then as many rounds as the budget and the gates ask (:meth:`Budget.rounds`)."""
        if self._benchmark.disabled:
            return 1, 0  # --benchmark-disable: pedantic calls once, untimed
        return _calibrate(timer, run, flusher, warmup_rounds, self._budget), 0

    def run(
        self,
        kernel: str,
        shape: Mapping[str, int],
        *,
        dtype: str = "fp32",
        impl: str = "portable",
        backend: str = "cpu",
        device: int = 0,
        native: bool = True,
        native_median_s: float | None = None,
        rounds: int | None = None,
        warmup_rounds: int = 2,
        native_budget_s: float = 0.5,
        flush: bool = True,
        seed: int = 0,
    ) -> CaseResult:
        """Prepare, check and time one case; fill ``benchmark.extra_info``.

        ``impl`` is an implementation name (``llvm``, ``numpy``) or a kind (``portable``,
        ``native``: the first the backend lists). ``native_median_s`` gives the native's
        median yourself instead of timing it here; ``native=False`` skips the native.
        ``rounds`` (default: chosen from pytest-benchmark's options, see the module's text)
        are the timed calls pytest-benchmark records, after ``warmup_rounds``.
        """
        steps = Pipeline()
        full_shape = get_kernel(kernel).complete(dict(shape))
        request = CaseRequest(kernel, impl, backend, device, dtype, full_shape, seed)
        try:
            case = steps.resolve(request, probe=True, by_kind=True)
        except CaseSkipped as skip:
            pytest.skip(str(skip))
        prepared, found_parity = _checked(steps, case)
        bk, spec, dev, chosen = case.backend, case.kernel, case.device, case.impl

        timer, flusher = bk.timer(dev), bk.case_flush(dev, prepared) if flush else None
        samples: list[float] = []

        def timed_call() -> None:
            samples.append(timer.time(prepared.run))

        benchmark = self._benchmark
        benchmark.group = f"{kernel} {spec.describe_shape(full_shape)} {dtype}"
        cleared = _step(lambda: steps.clear(prepared))
        if rounds is None:
            rounds, warmup_rounds = self._rounds(timer, prepared.run, flusher, warmup_rounds)
        benchmark.pedantic(timed_call, setup=flusher, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
        if not benchmark.disabled:
            _warn_if_gate_too_tight(benchmark, self._budget)
        timed = samples[-rounds:]  # pedantic's warm-up rounds come first
        median = _median(timed)
        if samples:  # not under --benchmark-disable's single call without timing
            found_parity, why = _step(lambda: steps.recheck(case, prepared, cleared))
            if why:
                pytest.fail(f"parity failed: {why}", pytrace=False)

        native_impl, native_timing = None, None
        # Under --benchmark-disable (a smoke run) nothing is recorded: the native is not timed.
        if chosen.kind == "portable" and (native or native_median_s is not None) and not benchmark.disabled:
            twin = steps.native_twin(case)
            if twin is not None:
                native_impl = twin.impl.name
                if native_median_s is None:
                    other, _ = _checked(steps, twin)
                    config = TimingConfig(warmup_s=native_budget_s / 5, budget_s=native_budget_s, flush=flush)
                    native_timing = summarize(_step(lambda: steps.time(twin, other, config)).samples)
                    native_median_s = native_timing.median
                    _warn_if_noisy(native_impl, native_timing, native_budget_s)
        result = _result(
            kernel,
            chosen,
            backend,
            dev,
            dtype,
            full_shape,
            found_parity,
            timer.name,
            timed,
            median,
            spec.flops(full_shape),
            native_impl,
            native_median_s,
        )
        peak = _peak_tflops(dev, dtype)
        refused = metrics.implausible(result.tflops, peak, dtype, None) if result.tflops and peak else None
        if refused:
            pytest.fail(f"implausible: {refused}", pytrace=False)
        if native_impl is not None:
            result = replace(
                result,
                native_source="timed here" if native_timing else "given",
                native_n=native_timing.n if native_timing else None,
                native_cv=native_timing.cv if native_timing else None,
            )
        benchmark.extra_info.update(result.extra_info())
        return result


def _result(
    kernel: str,
    impl: Any,
    backend: str,
    device: Any,
    dtype: str,
    shape: dict[str, int],
    found_parity: dict[str, Any],
    timer_name: str,
    samples: list[float],
    median: float | None,
    flops: float,
    native_impl: str | None,
    native_median_s: float | None,
) -> CaseResult:
    achieved = metrics.tflops(flops, median) if median else None
    overhead = (
        metrics.porting_overhead(native_median_s, median) if (median and native_median_s and native_impl) else None
    )
    return CaseResult(
        kernel=kernel,
        impl=impl.name,
        impl_kind=impl.kind,
        backend=backend,
        device=device.name,
        dtype=dtype,
        shape=dict(shape),
        parity=found_parity,
        device_timer=timer_name,
        device_samples_s=samples,
        device_median_s=median,
        tflops=achieved,
        pct_peak=metrics.pct_of_peak(achieved, _peak_tflops(device, dtype)) if achieved else None,
        native_impl=native_impl,
        native_median_s=native_median_s if native_impl else None,
        porting_overhead=overhead,
    )


@pytest.fixture
def hwbench_case(benchmark: Any, request: pytest.FixtureRequest) -> Callable[..., CaseResult]:
    """Run one hwbench case under pytest-benchmark (see :meth:`HwbenchCase.run`)."""
    return HwbenchCase(benchmark, request.config)
