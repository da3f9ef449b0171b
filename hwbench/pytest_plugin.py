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
timed too, with :func:`hwbench.timing.measure`, giving the porting overhead.

``extra_info`` then carries ``tflops``, ``pct_peak``, ``parity``, ``porting_overhead``,
``native_impl``, ``device`` and the device-timer median, so ``pytest --benchmark-json``
files hold them beside pytest-benchmark's own statistics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest


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
    from hwbench.decide.catalog import Catalog

    own = device.peak.tflops if device.peak is not None else {}
    if dtype in own:
        return float(own[dtype])
    catalog = Catalog.load()
    key = catalog.match(device.name)
    found = catalog.peak(key, dtype) if key else None
    return found.tflops if found else None


def _pick(backend: Any, kernel: str, impl: str) -> Any:
    """The implementation named ``impl``, or the first of kind ``impl`` (portable/native)."""
    impls = backend.implementations(kernel)
    chosen = next((i for i in impls if i.name == impl), None) or next((i for i in impls if i.kind == impl), None)
    if chosen is None:
        names = ", ".join(f"{i.name} ({i.kind})" for i in impls) or "none"
        pytest.skip(f"{backend.name} has no implementation '{impl}' of {kernel}; it has: {names}")
    return chosen


def _check(
    prepared: Any, kernel: Any, inputs: Any, shape: dict[str, int], dtype: str, reference: Any
) -> dict[str, Any]:
    from hwbench.run import parity

    prepared.run()
    result = parity.check(prepared.result(), reference, kernel.tolerance(dtype, shape))
    if not result.passed:
        pytest.fail(f"parity failed: {result.reason}", pytrace=False)
    found = asdict(result)
    found.pop("reason")
    return found


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
        from hwbench.core.registry import get_backend, get_kernel
        from hwbench.run.timing import TimingConfig, measure

        bk, spec = get_backend(backend), get_kernel(kernel)
        available = bk.probe()
        if not available.ok:
            pytest.skip(f"backend {backend} unavailable: {available.reason}")
        devices = bk.devices()
        if device >= len(devices):
            pytest.skip(f"{backend} has no device {device} (it has {len(devices)})")
        dev, chosen = devices[device], _pick(bk, kernel, impl)
        support = bk.supports(chosen, dtype, dev)
        if not support.ok:
            pytest.skip(support.reason)
        full_shape = spec.complete(dict(shape))
        inputs = spec.make_inputs(full_shape, dtype, seed)
        reference = spec.reference(inputs, full_shape)
        prepared = bk.prepare(chosen, spec, inputs, full_shape, dtype, dev)
        found_parity = _check(prepared, spec, inputs, full_shape, dtype, reference)

        timer, flusher = bk.timer(dev), bk.flush(dev) if flush else None
        samples: list[float] = []

        def timed_call() -> None:
            samples.append(timer.time(prepared.run))

        benchmark = self._benchmark
        benchmark.group = f"{kernel} {spec.describe_shape(full_shape)} {dtype}"
        benchmark.pedantic(timed_call, setup=flusher, rounds=rounds, warmup_rounds=warmup_rounds, iterations=1)
        timed = samples[-rounds:]  # pedantic's warm-up rounds come first
        median = _median(timed)

        native_impl = None
        # Under --benchmark-disable (a smoke run) nothing is recorded: the native is not timed.
        if chosen.kind == "portable" and (native or native_median_s is not None) and not benchmark.disabled:
            twin = next((i for i in bk.implementations(kernel) if i.kind == "native"), None)
            if twin is not None and bk.supports(twin, dtype, dev).ok:
                native_impl = twin.name
                if native_median_s is None:
                    other = bk.prepare(twin, spec, inputs, full_shape, dtype, dev)
                    _check(other, spec, inputs, full_shape, dtype, reference)
                    config = TimingConfig(warmup_s=native_budget_s / 5, budget_s=native_budget_s, flush=flush)
                    native_median_s = _median(measure(other.run, timer, flusher, config).samples)
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
    from hwbench.results import metrics

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
