"""Figures hwbench stands behind: outputs re-checked after timing, nothing above the device's
peak, times that are times, and derivation that never loses a run (tests/fakes/backend.py: cheat)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hwbench.cli.main import main
from hwbench.decide.catalog import Catalog
from hwbench.results.derive import add_metrics

TESTS = Path(__file__).resolve().parents[1]
SHAPE = "gemm:M=32,N=32,K=32"


@pytest.fixture
def cheat(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The 'cheat' backend registered; set HWBENCH_CHEAT_TIMER / HWBENCH_CHEAT_PEAK on the result."""
    from hwbench.core.registry import get_backend

    monkeypatch.setenv("HWBENCH_BACKENDS", "cheat=fakes.backend:cheat")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.delenv("HWBENCH_CHEAT_TIMER", raising=False)
    monkeypatch.delenv("HWBENCH_CHEAT_PEAK", raising=False)
    get_backend.cache_clear()
    yield monkeypatch
    get_backend.cache_clear()


def _run(tmp_path: Path, *extra: str) -> tuple[int, dict[str, dict[str, Any]]]:
    out = tmp_path / "r.json"
    code = main(
        ["run", "--backend", "cheat", "--shape", SHAPE, "--budget", "0.05", "--quiet", "--out", str(out), *extra]
    )
    doc = json.loads(out.read_text())
    assert main(["validate", str(out)]) == 0
    return code, {r["impl"]: r for r in doc["records"]}


def test_a_kernel_idle_or_wrong_after_its_first_call_fails_parity(cheat: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, records = _run(tmp_path)
    assert code == 1
    assert records["honest"]["status"] == "ok"
    assert records["honest"]["parity"]["after_timing"] == "cleared before the timed calls"
    assert records["lazy"]["status"] == "parity_failed"
    assert "wrong after the timed calls (the output was cleared before them)" in records["lazy"]["reason"]
    assert records["decays"]["status"] == "parity_failed"
    assert "wrong after the timed calls" in records["decays"]["reason"]
    # An output that cannot be cleared and is never rewritten passes parity; no peak to hold it to here.
    assert records["stale"]["status"] == "ok"
    assert records["stale"]["metrics"]["peak_check"] == "not checked: no fp32 peak known for this device"


def test_a_figure_above_the_peak_is_implausible(cheat: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cheat.setenv("HWBENCH_CHEAT_TIMER", "1e-12")  # 32^3 GEMM "in a picosecond": 65,536 TFLOPS
    cheat.setenv("HWBENCH_CHEAT_PEAK", "100")
    code, records = _run(tmp_path)
    assert code == 1
    honest = records["honest"]
    assert honest["status"] == "implausible"
    assert "x the device's fp32 peak of 100 TFLOPS (test)" in honest["reason"]
    assert honest["metrics"]["tflops"] is None  # no figure that cannot be true is printed


def test_below_the_peak_is_checked_and_ok(cheat: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cheat.setenv("HWBENCH_CHEAT_PEAK", "1e9")
    code, records = _run(tmp_path, "--impl", "honest")
    assert code == 0
    assert records["honest"]["status"] == "ok"
    assert records["honest"]["metrics"]["peak_check"] == "at most 1.05x the fp32 peak"


@pytest.mark.parametrize("seconds", ["-1", "0"])
def test_a_timer_that_returns_no_time_is_a_runtime_error(
    cheat: pytest.MonkeyPatch, tmp_path: Path, seconds: str
) -> None:
    cheat.setenv("HWBENCH_CHEAT_TIMER", seconds)
    code, records = _run(tmp_path, "--impl", "honest")
    assert code == 1
    assert records["honest"]["status"] == "runtime_error"
    assert f"the fixed timer returned {float(seconds)!r} s" in records["honest"]["reason"]


def test_a_nan_peak_is_a_runtime_error_and_the_file_is_written(cheat: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cheat.setenv("HWBENCH_CHEAT_PEAK", "nan")
    code, records = _run(tmp_path, "--impl", "honest")
    assert code == 1
    assert records["honest"]["status"] == "runtime_error"
    assert "fp32 peak that is not a number" in records["honest"]["reason"]


def _doc(records: list[dict[str, Any]], peak: dict[str, Any]) -> dict[str, Any]:
    device = {"index": 0, "name": "Some CPU", "kind": "cpu", "peak": {"tflops": peak, "method": "measured"}}
    return {"run": {"price": None}, "backends": [{"name": "cpu", "devices": [device]}], "records": records}


def _record(dtype: str, median: Any) -> dict[str, Any]:
    return {
        "kernel": "gemm",
        "impl": "torch",
        "impl_kind": "native",
        "backend": "cpu",
        "device_index": 0,
        "dtype": dtype,
        "shape": {"M": 1000, "N": 1000, "K": 1000},
        "status": "ok",
        "reason": "",
        "timing": {"median_s": median},
        "metrics": {},
    }


def test_no_peak_for_the_dtype_means_no_check_not_a_refusal() -> None:
    """bf16 on a CPU whose only peaks are fp32/fp64: 2 TFLOPS above the fp32 peak stays ok, saying so."""
    doc = _doc([_record("bf16", 1e-3)], {"fp32": 0.1, "fp64": 0.05})
    add_metrics(doc, Catalog.load())
    record = doc["records"][0]
    assert record["status"] == "ok"
    assert record["metrics"]["tflops"] == pytest.approx(2.0)
    assert record["metrics"]["peak_check"] == "not checked: no bf16 peak known for this device"


def test_the_cpu_int8_and_bf16_peaks_gate_their_own_dtypes() -> None:
    """Measured int8/bf16 peaks (dot-product loops) judge those dtypes, not the fp32 peak: 2 TOPS
    is plausible under an 8 TOPS int8 peak and refused above a 1 TFLOPS bf16 one."""
    doc = _doc([_record("int8", 1e-3), _record("bf16", 1e-3)], {"fp32": 0.1, "int8": 8.0, "bf16": 1.0})
    add_metrics(doc, Catalog.load())
    int8, bf16 = doc["records"]
    assert int8["status"] == "ok" and int8["metrics"]["pct_peak"] == pytest.approx(25.0)
    assert bf16["status"] == "implausible" and "bf16" in bf16["reason"]


@pytest.mark.parametrize(("median", "why"), [(-1e-3, "not a positive"), (float("nan"), "not a positive"), (0.0, "")])
def test_derivation_never_raises(median: float, why: str) -> None:
    doc = _doc([_record("fp32", median), _record("fp32", 1e-2)], {"fp32": 1.0})
    add_metrics(doc, Catalog.load())
    bad, good = doc["records"]
    assert bad["status"] == "runtime_error" and "median time" in bad["reason"]
    assert good["status"] == "ok" and good["metrics"]["tflops"] == pytest.approx(0.2)


pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    ("impl", "env", "message"),
    [
        ("lazy", {}, "*parity failed: wrong after the timed calls (the output was cleared before them)*"),
        ("decays", {}, "*parity failed: wrong after the timed calls*"),
        ("honest", {"HWBENCH_CHEAT_TIMER": "1e-12", "HWBENCH_CHEAT_PEAK": "100"}, "*implausible: *x the device's*"),
    ],
)
def test_the_pytest_fixture_refuses_the_same_cheats(
    pytester: pytest.Pytester, cheat: pytest.MonkeyPatch, impl: str, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        cheat.setenv(name, value)
    pytester.makepyfile(
        test_cheat=f"""
def test_cheat(hwbench_case):
    hwbench_case("gemm", {{"M": 32, "N": 32, "K": 32}}, backend="cheat", impl="{impl}", native=False, rounds=3)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([message])


@pytest.mark.parametrize(("backend", "impl"), [("cpu", "llvm"), ("opencl", "opencl"), ("opencl", "clblast")])
def test_the_backends_clear_their_outputs(backend: str, impl: str) -> None:
    """What the re-check after timing relies on: a cleared output is all NaN until the next call."""
    from hwbench.run.case import CaseRequest, CaseSkipped, Pipeline

    steps = Pipeline()
    try:
        case = steps.resolve(CaseRequest("gemm", impl, backend, 0, "fp32", {"M": 9, "N": 7, "K": 5}), probe=True)
    except CaseSkipped as skip:
        pytest.skip(str(skip))
    prepared = steps.prepare(case)
    prepared.run()
    assert steps.clear(prepared) is True
    assert np.isnan(prepared.result()).all()
    prepared.run()
    assert steps.recheck(case, prepared, True)[1] == ""
