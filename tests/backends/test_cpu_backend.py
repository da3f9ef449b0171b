"""The CPU backend end to end in-process: every implementation on odd shapes, device facts, flush."""

from __future__ import annotations

import numpy as np
import pytest

from hwbench.core.registry import get_backend
from hwbench.run.case import CaseRequest, CaseRunner

QUICK = {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3}
ODD_SHAPES = {
    "gemm": [{"M": 1, "N": 1, "K": 1}, {"M": 67, "N": 33, "K": 101}, {"M": 130, "N": 17, "K": 7}],
    "attention": [
        {"batch": 1, "heads": 1, "seq_q": 1, "seq_k": 1, "head_dim": 1, "causal": 0},
        {"batch": 2, "heads": 3, "seq_q": 37, "seq_k": 37, "head_dim": 40, "causal": 1},
        {"batch": 1, "heads": 2, "seq_q": 1, "seq_k": 53, "head_dim": 63, "causal": 0},
        {"batch": 1, "heads": 1, "seq_q": 50, "seq_k": 19, "head_dim": 7, "causal": 1},
    ],
}


@pytest.fixture(scope="module")
def runner() -> CaseRunner:
    return CaseRunner()


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("kernel", ["gemm", "attention"])
def test_every_cpu_implementation_passes_parity_on_odd_shapes(runner: CaseRunner, kernel: str, dtype: str) -> None:
    cpu = get_backend("cpu")
    impls = [i.name for i in cpu.implementations(kernel) if dtype in i.dtypes]
    assert "llvm" in impls and len(impls) == 2
    for shape in ODD_SHAPES[kernel]:
        for impl in impls:
            record = runner.run(CaseRequest(kernel, impl, "cpu", 0, dtype, shape, seed=3, timing=QUICK))
            assert record["status"] == "ok", (impl, shape, record["reason"])
            assert record["parity"]["passed"] and record["parity"]["max_abs_err"] <= record["parity"]["atol"]
            assert record["timing"]["n"] >= 3 and record["timing"]["median_s"] > 0
            assert record["timing"]["timer"] == "perf_counter" and record["timing"]["flushed"] is True


def test_unsupported_dtype_is_skipped_with_reason(runner: CaseRunner) -> None:
    record = runner.run(CaseRequest("gemm", "llvm", "cpu", 0, "fp16", {"M": 8, "N": 8, "K": 8}, timing=QUICK))
    assert record["status"] == "skipped" and "fp16" in record["reason"]


def test_cpu_device_reports_a_measured_peak() -> None:
    device = get_backend("cpu").devices()[0]
    assert device.kind == "cpu" and device.compute_units >= 1
    assert device.peak is not None
    fp32 = device.peak.tflops["fp32"]
    assert fp32 == pytest.approx(2 * device.peak.tflops["fp64"])
    expected = (
        device.compute_units
        * device.extra["vector_bits"]
        / 32
        * 2
        * device.extra["fma_units"]
        * device.extra["clock_ghz"]
        / 1e3
    )
    assert fp32 == pytest.approx(expected)
    assert 0.3 < device.extra["clock_ghz"] < 7.0
    assert "measured" in device.peak.method and "GHz" in device.peak.method


def test_flush_touches_a_buffer_larger_than_the_cache() -> None:
    cpu = get_backend("cpu")
    device = cpu.devices()[0]
    flush = cpu.flush(device)
    before = cpu._flush_buffer.copy()
    flush()
    assert cpu._flush_buffer.nbytes >= 2 * device.extra["cache_bytes"]
    assert np.all(cpu._flush_buffer == before + 1.0)  # every element read and written


def test_without_torch_attention_falls_back_to_a_labelled_numpy_baseline(monkeypatch, runner: CaseRunner) -> None:
    from hwbench.core import backend as backend_module

    real = backend_module.present
    monkeypatch.setattr(backend_module, "present", lambda name: False if name == "torch" else real(name))
    impls = get_backend("cpu").implementations("attention")
    native = impls[0]
    assert native.name == "numpy_attention" and "torch is not installed" in native.description
    shape = ODD_SHAPES["attention"][1]
    record = runner.run(CaseRequest("attention", "numpy_attention", "cpu", 0, "fp32", shape, timing=QUICK))
    assert record["status"] == "ok" and record["parity"]["passed"]


def test_fma_units_round_up_from_a_contended_count_never_down() -> None:
    from hwbench.backends.cpu_peak import fma_units

    assert [fma_units(x) for x in (0.6, 1.0, 1.18)] == [1, 1, 1]  # one unit, a clock read a little low
    assert [fma_units(x) for x in (1.33, 1.88, 2.0, 2.15)] == [2, 2, 2, 2]  # two units, one of them contended
