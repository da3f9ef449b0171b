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
"""

from __future__ import annotations

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

    def __init__(self, benchmark: Any) -> None:
        self._benchmark = benchmark

    def __call__(self, kernel: str, shape: Mapping[str, int], **options: Any) -> CaseResult:
        """Prepare, check and time one case; fill ``benchmark.extra_info`` (options: :meth:`run`)."""
        try:
            return self.run(kernel, shape, **options)
        except pytest.skip.Exception:
            self._benchmark.skipped = True  # a skipped case is not "a benchmark fixture left unused"
            raise

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
        rounds: int = 20,
        warmup_rounds: int = 2,
        native_budget_s: float = 0.5,
        flush: bool = True,
        seed: int = 0,
    ) -> CaseResult:
        """Prepare, check and time one case; fill ``benchmark.extra_info``.

        ``impl`` is an implementation name (``llvm``, ``numpy``) or a kind (``portable``,
        ``native``: the first the backend lists). ``native_median_s`` gives the native's
        median yourself instead of timing it here; ``native=False`` skips the native.
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
        benchmark.pedantic(timed_call, setup=flusher, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
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
def hwbench_case(benchmark: Any) -> Callable[..., CaseResult]:
    """Run one hwbench case under pytest-benchmark (see :meth:`HwbenchCase.run`)."""
    return HwbenchCase(benchmark)
