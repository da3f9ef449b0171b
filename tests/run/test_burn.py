"""``hwbench burn``: exact inputs, the loop's checks (a fault at iteration k caught at the first
check at or after k), no false positives, sensor readings in the series, decay and throttling,
bad options, stop signals keeping what was measured, the file's schema and the report section."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import TESTS, hwbench_cmd

from hwbench.cli.main import main
from hwbench.core.backend import DeviceInfo, Peak
from hwbench.core.kernel import get_kernel
from hwbench.core.registry import get_backend
from hwbench.report import build
from hwbench.report.burn import burn_section
from hwbench.report.data import Run
from hwbench.results import files as results
from hwbench.run.burn_device import BurnJob, DeviceBurn, burn_shape, ranked_dtypes
from hwbench.run.burn_series import MAX_MISMATCHES_KEPT, exact_gemm_inputs, integer_range, significand_bits, summarize
from hwbench.sensors.base import Sample, Sensors

TINY = {"M": 24, "N": 16, "K": 32}
BURN_BACKEND = "burnfaulty=fakes.backend:burnfaulty"


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """The test-only 'burnfaulty' backend registered here and in the processes a burn starts."""
    monkeypatch.setenv("HWBENCH_BACKENDS", BURN_BACKEND)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    get_backend.cache_clear()
    yield monkeypatch
    get_backend.cache_clear()


def burn(job: BurnJob, sensors: Sensors | None = None) -> tuple[DeviceBurn, dict[str, Any], list[dict[str, Any]]]:
    """Prepare and run ``job`` in this process: the loop, its ``done`` event and every other event."""
    loop = DeviceBurn(job, sensors)
    loop.prepare()
    events: list[dict[str, Any]] = []
    done = loop.run(threading.Event(), events.append)
    return loop, done, events


def mismatches(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["mismatch"] for e in events if e["event"] == "mismatch"]


@pytest.mark.parametrize(("dtype", "k"), [("fp32", 2048), ("fp32", 1), ("fp16", 2048), ("bf16", 256), ("fp64", 4096)])
def test_integer_inputs_bound_every_partial_sum(dtype: str, k: int) -> None:
    r = integer_range(dtype, k)
    bits = min(significand_bits(dtype), significand_bits("fp32" if dtype in ("fp16", "bf16") else dtype))
    assert r >= 1 and k * r * r <= 2**bits < k * (r + 1) ** 2


def test_gemm_inputs_have_an_exact_answer_or_none() -> None:
    shape = {"M": 40, "N": 30, "K": 2048}
    inputs = exact_gemm_inputs(shape, "fp32", 0)
    assert inputs is not None and inputs["A"].dtype == np.float32
    a, b = inputs["A"], inputs["B"]
    assert np.all(a == np.round(a)) and np.all(a != 0) and np.abs(a).max() == integer_range("fp32", 2048)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(np.matmul(a, b).astype(np.float64), reference)  # fp32 BLAS: bit for bit
    assert exact_gemm_inputs({"M": 4, "N": 4, "K": 512}, "bf16", 0) is None  # 512 > 2^8: no exact answer


def test_the_best_dtype_and_its_shape() -> None:
    gemm = get_kernel("gemm")
    h200 = DeviceInfo(
        "cuda",
        0,
        "H200",
        "NVIDIA",
        "gpu",
        peak=Peak({"fp8": 1979.0, "int8": 1979.0, "fp16": 989.0, "bf16": 989.0, "tf32": 494.0, "fp32": 67.0}, "x"),
    )
    assert ranked_dtypes(gemm, h200)[:3] == ["fp16", "bf16", "tf32"]  # equal peaks: the wider significand
    assert not {"fp8", "int8"} & set(ranked_dtypes(gemm, h200))  # no exact checks beyond K = 16, or integers
    assert burn_shape(gemm, "fp16", h200, None) == {"M": 8192, "N": 8192, "K": 2048}
    assert burn_shape(gemm, "bf16", h200, None)["K"] == 256
    cpu = DeviceInfo("cpu", 0, "CPU", "x", "cpu", peak=Peak({"fp32": 1.0, "fp64": 0.5, "bf16": 4.0}, "x"))
    assert ranked_dtypes(gemm, cpu)[0] == "fp32"
    assert burn_shape(gemm, "fp32", cpu, None) == {"M": 2048, "N": 2048, "K": 2048}


@pytest.mark.parametrize(("k", "every"), [(20, 7), (21, 7), (1, 5), (0, 3), (64, 1)])
def test_a_fault_at_iteration_k_is_caught_at_the_first_check_at_or_after_k(
    flaky: pytest.MonkeyPatch, k: int, every: int
) -> None:
    flaky.setenv("HWBENCH_BURN_FAULT_AT", str(k))
    job = BurnJob("burnfaulty", 0, duration_s=0.3, interval_s=0.1, check_every_s=60.0, check_iterations=every)
    loop, done, events = burn(BurnJob(**{**job.__dict__, "impl": "flip", "shape": TINY}))
    found = mismatches(events)
    assert loop.checker.exact and done["iterations"] > k + every
    assert found[0]["iteration"] == math.ceil(k / every) * every
    assert found[0]["count"] == 1 and found[0]["max_abs_err"] > 0
    # the fault stays: every later check finds it too (checks at multiples of N, and one at the end)
    end = done["iterations"]
    expected = list(range(found[0]["iteration"], end + 1, every)) + ([end] if end % every else [])
    assert [m["iteration"] for m in found] == expected[:MAX_MISMATCHES_KEPT]
    assert done["wrong_checks"] == len(expected) and done["checks"] == end // every + 1 + (end % every > 0)


def test_a_fault_at_one_iteration_is_caught_when_that_iteration_is_checked(flaky: pytest.MonkeyPatch) -> None:
    flaky.setenv("HWBENCH_BURN_FAULT_AT", "14")
    flaky.setenv("HWBENCH_BURN_FAULT_MODE", "once")
    job = BurnJob("burnfaulty", 0, impl="flip", shape=TINY, duration_s=0.3, interval_s=0.1, check_iterations=7)
    _, done, events = burn(job)
    assert [m["iteration"] for m in mismatches(events)] == [14] and done["iterations"] > 28


def test_a_clean_burn_finds_nothing_and_checks_by_time() -> None:
    job = BurnJob("cpu", 0, impl="numpy", shape={"M": 64, "N": 64, "K": 64}, duration_s=1.0, interval_s=0.25)
    loop, done, events = burn(BurnJob(**{**job.__dict__, "check_every_s": 0.2}))
    points = [e["point"] for e in events if e["event"] == "point"]
    assert mismatches(events) == [] and done["wrong_checks"] == 0 and not done["error"]
    assert done["checks"] >= 5 and done["elapsed_s"] >= 1.0  # iteration 0, every 0.2 s, the end
    assert 0.2 <= done["max_check_gap_s"] < 0.2 + 0.5  # a batch overruns the due time by an iteration at most
    assert len(points) == 4 and sum(p["iterations"] for p in points) == done["iterations"]
    assert all(p["tflops"] > 0 and p["dt_s"] > 0 for p in points)


class FakeSensors(Sensors):
    """A device drawing 100 W whose clock drops from 2000 to 1500 MHz after ``drop_s``."""

    source = "fake"
    energy_resolution_j = 1e-3

    def __init__(self, clock: Any, drop_s: float) -> None:
        self.clock, self.start, self.drop_s = clock, clock(), drop_s

    def sample(self) -> Sample:
        t = self.clock() - self.start
        return Sample(t, 90.0, 100.0 * t, 70.0, 2000.0 if t < self.drop_s else 1500.0)


def test_sensor_readings_fill_the_series_and_a_clock_drop_is_throttling() -> None:
    import time

    job = BurnJob("cpu", 0, impl="numpy", shape={"M": 32, "N": 32, "K": 32}, duration_s=1.2, interval_s=0.2)
    _, done, events = burn(job, FakeSensors(time.monotonic, 0.6))
    points = [e["point"] for e in events if e["event"] == "point"]
    assert all(p["power_w"] == pytest.approx(100.0, rel=0.05) for p in points)  # from the energy counter
    assert all(p["temp_c"] == 70.0 for p in points)
    assert points[0]["clock_mhz"] == 2000.0 and points[-1]["clock_mhz"] == 1500.0
    summary = summarize(points, done["elapsed_s"])
    assert summary["throttled"] is True and summary["clock_ratio"] == pytest.approx(0.75)
    assert summary["throttle_reasons"][0].startswith("clock fell 25.0 %")


def series(values: list[tuple[float, float | None]], step: float) -> list[dict[str, Any]]:
    return [
        {"t_s": step * (i + 1), "dt_s": step, "iterations": 1, "tflops": tf, "clock_mhz": clock}
        for i, (tf, clock) in enumerate(values)
    ]


def test_decay_and_throttling_arithmetic() -> None:
    # 120 s in 5 s points: a 40 s window at each end; 10 TFLOPS at first, 9 at the end
    points = series([(10.0, 2000.0)] * 8 + [(9.5, 1950.0)] * 8 + [(9.0, 1990.0)] * 8, 5.0)
    found = summarize(points, 120.0)
    assert found["decay_window_s"] == 40.0 and found["decay_ratio"] == pytest.approx(0.9)
    assert found["decay_pct"] == pytest.approx(10.0) and found["clock_ratio"] == pytest.approx(0.995)
    assert found["throttled"] is False and found["throttle_reasons"] == []
    # a long run: the first and last minute
    long = summarize(series([(8.0, None)] * 12 + [(1.0, None)] * 36 + [(6.0, None)] * 12, 5.0), 300.0)
    assert long["decay_window_s"] == 60.0 and long["decay_ratio"] == pytest.approx(0.75)
    assert long["throttled"] is None  # no clock, no reason: unknown
    assert summarize(points, 120.0, ["hw_slowdown"])["throttled"] is True
    # one point in each window is enough; one point in all is not
    assert summarize(series([(5.0, 1000.0), (4.0, 900.0)], 5.0), 10.0)["decay_ratio"] == pytest.approx(0.8)
    short = summarize(series([(5.0, 1000.0)], 10.0), 10.0)
    assert short["decay_ratio"] is None and short["decay_pct"] is None and short["throttled"] is None


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--duration", "-1"], "--duration must be a positive"),
        (["--duration", "nan"], "--duration must be a positive"),
        (["--duration", "2", "--interval", "5"], "longer than --duration"),
        (["--interval", "0.01"], "--interval must be at least"),
        (["--check-every", "0"], "--check-every must be a positive"),
        (["--check-iterations", "0"], "--check-iterations must be a positive"),
        (["--dtype", "fp7"], "unknown GEMM dtype 'fp7'"),
        (["--shape", "attention:S=64"], "a burn runs gemm"),
        (["--shape", "stream:n=64"], "a burn runs gemm (and stream with --stream)"),
        (["--backend", "nope"], "unknown backend 'nope'"),
        (["--device", "cpu"], "--device 'cpu' is not BACKEND:INDEX"),
        (["--backend", "cpu", "--device", "cuda:0"], "which --backend does not select"),
        (["--backend", "cpu", "--impl", "nope", "--duration", "1", "--interval", "0.5"], "implementation 'nope'"),
    ],
)
def test_bad_options_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    out = tmp_path / "b.json"
    assert main(["burn", *args, "-o", str(out)]) == 2
    assert says in _one_line(capsys.readouterr().err) and not out.exists()


def test_an_existing_results_file_is_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.json"
    out.write_text("mine")
    assert main(["burn", "--backend", "cpu", "--duration", "10", "-o", str(out)]) == 2
    assert "already exists" in _one_line(capsys.readouterr().err) and out.read_text() == "mine"


def test_a_corrupting_device_fails_the_burn_and_the_file_says_where(
    flaky: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flaky.setenv("HWBENCH_BURN_FAULT_AT", "120")
    out = tmp_path / "b.json"
    args = ["--backend", "burnfaulty", "--impl", "flip", "--shape", "gemm:M=24,N=16,K=32", "--check-iterations", "50"]
    assert main(["burn", *args, "--duration", "1", "--interval", "0.25", "-q", "-o", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert results.validate(doc) == []
    (entry,) = doc["burn"]
    assert entry["status"] == "mismatch" and entry["check"] == "exact" and entry["mismatches"][0]["iteration"] == 150
    assert entry["reason"].startswith(f"{entry['mismatched_checks']} of {entry['checks']} checks found wrong results")
    assert entry["series"] and entry["impl"] == "flip" and entry["dtype"] == "fp32" and entry["stopped_by"] is None
    assert doc["records"] == [] and doc["run"]["incomplete"] is False
    captured = capsys.readouterr()
    assert "mismatch" in captured.out and "wrong results found" in captured.err


def test_a_clean_burn_of_the_cpu_exits_0_with_a_valid_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "b.json"
    args = ["--backend", "cpu", "--shape", "gemm:M=64,N=64,K=64", "--duration", "1", "--interval", "0.25"]
    assert main(["burn", *args, "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert results.validate(doc) == []
    (entry,) = doc["burn"]
    assert entry["status"] == "ok" and entry["mismatches"] == [] and entry["checks"] >= 2
    assert entry["impl"] == "numpy" and entry["dtype"] == "fp32" and len(entry["series"]) == 4
    assert 0 <= entry["check_s"] < entry["elapsed_s"] and 0 < entry["max_check_gap_s"] <= entry["elapsed_s"]
    assert entry["decay_ratio"] is not None and entry["decay_window_s"] == pytest.approx(entry["elapsed_s"] / 3)
    assert [s["backend"] for s in doc["sensors"]] == ["cpu"]
    captured = capsys.readouterr()
    assert "load(s) running for 1 s" in captured.err and "cpu:0" in captured.out


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_keeps_the_series_and_the_file(
    flaky: pytest.MonkeyPatch, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    out = tmp_path / "b.json"
    args = ["--backend", "burnfaulty", "--impl", "good", "--shape", "gemm:M=24,N=16,K=32"]
    proc = subprocess.Popen(
        hwbench_cmd("burn", *args, "--duration", "60", "--interval", "0.2", "-o", str(out)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = [proc.stderr.readline() for _ in range(3)]  # what it burns, that it started, the first point
    assert "load(s) running for 60 s" in seen[1] and "TFLOPS" in seen[2], seen
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == code, err
    doc = json.loads(out.read_text())
    assert results.validate(doc) == [] and doc["run"]["incomplete"] is True
    (entry,) = doc["burn"]
    assert entry["status"] == "interrupted" and entry["stopped_by"] == sig.name
    assert entry["series"] and entry["elapsed_s"] < 30 and entry["checks"] >= 2 and entry["mismatches"] == []


def burn_doc() -> dict[str, Any]:
    """A burn file of two devices, one with a mismatch, for the report."""
    from hwbench.core.records import new_document

    doc = new_document(["hwbench", "burn"])
    points = series([(10.0, 2000.0)] * 6 + [(9.0, 1800.0)] * 6, 5.0)
    base = {"kernel": "gemm", "impl": "torch_matmul", "dtype": "fp16", "shape": {"M": 8, "N": 8, "K": 8}}
    doc["burn"] = [
        {
            **base,
            "backend": "cuda",
            "device_index": i,
            "device": "H200",
            "duration_s": 60.0,
            "elapsed_s": 60.0,
            "iterations": 12,
            "checks": 13,
            "mismatched_checks": i,
            "mismatches": [{"iteration": 7, "t_s": 33.0, "max_abs_err": 1.0, "count": 1}] if i else [],
            "series": points,
            **summarize(points, 60.0),
            "stopped_by": None,
            "status": "mismatch" if i else "ok",
            "reason": "1 of 13 checks found wrong results" if i else "",
        }
        for i in range(2)
    ]
    return doc


def test_the_report_draws_throughput_and_clock_over_time(tmp_path: Path) -> None:
    page = build([(tmp_path / "burn.json", burn_doc())])
    assert 'id="burn"' in page and 'id="burn-tflops"' in page and 'id="burn-clock"' in page
    assert "cuda:1" in page and "mismatch at iteration 7" in page and "10.0 %" in page
    empty = build([(tmp_path / "run.json", {k: v for k, v in burn_doc().items() if k != "burn"})])
    assert 'id="burn' not in empty  # a file without burns: no section
    assert "no burn section in these files" in burn_section([Run(tmp_path / "run.json", {})])
