"""Energy of a timed case: the arithmetic on fake counters (checked by hand), too-short windows
repeated or marked not measurable, sampled power, the record and document fields under the schema,
the case pipeline, and `hwbench run` end to end on a fake RAPL tree and on a host without sensors."""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import hwbench_cmd

from hwbench.core.records import new_document, new_record
from hwbench.core.registry import get_kernel
from hwbench.decide.catalog import Catalog
from hwbench.results import files
from hwbench.results.derive import add_metrics
from hwbench.run.case import CaseRequest, CaseRunner, Pipeline
from hwbench.sensors.base import Sample, Sensors
from hwbench.sensors.devices import DeviceSensors
from hwbench.sensors.energy import EnergyConfig, measure_energy, observe_update_interval, sampled_window

TICK = 2.0**-10  # one call of the simulated case, s


class SimDevice:
    """A device drawing ``power_w`` on a simulated clock that its calls advance."""

    def __init__(self, power_w: float, per_call_s: float = TICK) -> None:
        self.power_w, self.per_call_s, self.now = power_w, per_call_s, 0.0
        self.calls = 0

    def clock(self) -> float:
        return self.now

    def run(self) -> None:
        self.now += self.per_call_s
        self.calls += 1

    def sync(self) -> None:
        pass


class SimCounter(Sensors):
    """The simulated device's energy counter: steps of ``resolution_j``, refreshed every ``update_s``."""

    source = "sim"

    def __init__(self, device: SimDevice, resolution_j: float, update_s: float, known: bool = True) -> None:
        self.device, self.energy_resolution_j, self.refresh_s = device, resolution_j, update_s
        self.update_interval_s = update_s if known else None  # else the energy layer observes it

    def sample(self) -> Sample:
        refreshed = math.floor(self.device.now / self.refresh_s + 1e-9) * self.refresh_s
        steps = math.floor(self.device.power_w * refreshed / self.resolution + 1e-9)
        return Sample(self.device.now, None, steps * self.resolution, None, None)

    @property
    def resolution(self) -> float:
        assert self.energy_resolution_j is not None
        return self.energy_resolution_j


def measure(device: SimDevice, sensors: Sensors, **config: Any) -> Any:
    settings = {"min_window_s": 2.0**-4, **config}
    return measure_energy(sensors, device.run, device.sync, TICK, EnergyConfig(**settings), clock=device.clock)


def test_joules_per_call_and_watts_from_a_counter() -> None:
    device = SimDevice(power_w=50.0)
    energy = measure(device, SimCounter(device, resolution_j=1e-6, update_s=TICK))
    # One window of 2**-4 s: 64 calls of 2**-10 s at 50 W draw 3.125 J.
    assert energy.reason == "" and energy.method == "counter" and energy.source == "sim"
    assert energy.windows == 1 and energy.calls == 64 and energy.window_s == pytest.approx(0.0625)
    assert energy.energy_j == pytest.approx(3.125)
    assert energy.joules_per_call == pytest.approx(3.125 / 64)  # = 50 W x 2**-10 s
    assert energy.watts == pytest.approx(50.0)
    # error: the step over the energy plus one update over the window
    assert energy.error_pct == pytest.approx(100 * (1e-6 / 3.125 + TICK / 0.0625))
    section = energy.section()
    assert section["tflops_per_watt"] is None and section["gbps_per_watt"] is None  # derived later


def test_a_too_short_window_is_measured_again_longer() -> None:
    device = SimDevice(power_w=10.0)
    energy = measure(device, SimCounter(device, resolution_j=0.1, update_s=TICK))
    # Window 1: 64 calls, 0.625 J read as 0.6 J: ±(0.1/0.6 + 1/64) = 18 % > 10 %. It asks for
    # 0.0625 s x 18.2/10 x 1.25 = 0.142 s: 146 calls; the counter goes 0.6 -> 2.0 J over them.
    assert energy.windows == 2 and energy.reason == ""
    assert energy.calls == 146 and energy.window_s == pytest.approx(146 * TICK)
    assert energy.energy_j == pytest.approx(1.4)
    assert energy.joules_per_call == pytest.approx(1.4 / 146)
    assert energy.watts == pytest.approx(1.4 / (146 * TICK))
    assert energy.error_pct == pytest.approx(100 * (0.1 / 1.4 + 1 / 146))
    assert device.calls == 64 + 146


def test_a_case_too_short_for_the_counter_is_marked_not_measurable() -> None:
    device = SimDevice(power_w=1.0)
    energy = measure(device, SimCounter(device, resolution_j=1.0, update_s=TICK), budget_s=0.5)
    # 1 W against 1 J steps: 0.0625 s and then 0.25 s read nothing; 1 s more is over the budget.
    assert energy.joules_per_call is None and energy.watts is None and energy.windows == 2
    assert energy.reason.startswith("not measurable: the energy counter did not advance in 0.25 s (256 calls)")
    assert "0.5 s energy budget" in energy.reason
    assert device.now <= 0.5 + 1e-9


class LinearPower(Sensors):
    """Power ``a + b t`` on the real clock, read without a counter."""

    source = "sim"
    reads_power = True
    update_interval_s = 0.001

    def __init__(self, a: float, b: float) -> None:
        self.a, self.b, self.start = a, b, time.monotonic()

    def sample(self) -> Sample:
        now = time.monotonic()
        return Sample(now, self.a + self.b * (now - self.start), None, None, None)


def test_sampled_energy_of_a_case_states_its_interval() -> None:
    sensors = LinearPower(a=80.0, b=0.0)
    config = EnergyConfig(sample_interval_s=0.005, min_window_s=0.05, max_error_pct=60.0, budget_s=0.5)
    energy = measure_energy(sensors, lambda: time.sleep(0.001), lambda: None, 0.001, config)
    assert energy.method == "sampled" and energy.reason == "", energy.reason
    assert energy.watts == pytest.approx(80.0)  # a constant power integrates to itself
    assert energy.joules_per_call == pytest.approx(80.0 * energy.window_s / energy.calls)
    assert energy.sample_interval_s == 0.005 and energy.error_pct >= 100 * 0.005 / energy.window_s


def test_trapezoid_arithmetic_on_a_ramp() -> None:
    sensors = LinearPower(a=10.0, b=1000.0)
    config = EnergyConfig(sample_interval_s=0.002, max_error_pct=100.0)
    readings: list[Sample] = []
    real = sensors.sample

    def kept() -> Sample:
        readings.append(real())
        return readings[-1]

    sensors.sample = kept  # type: ignore[method-assign]
    window = sampled_window(sensors, lambda: time.sleep(0.001), lambda: None, 20, 0.001, 0.001, config)
    # trapezoids are exact for a linear power: the energy is a (t1 - t0) + b (t1^2 - t0^2) / 2
    t0, t1 = readings[0].t_s - sensors.start, readings[-1].t_s - sensors.start
    assert len(readings) > 3 and window.window_s == pytest.approx(t1 - t0)
    assert window.energy_j == pytest.approx(10.0 * (t1 - t0) + 1000.0 * (t1**2 - t0**2) / 2, rel=1e-9)
    assert window.error_pct is not None and window.error_pct >= 100 * 0.002 / window.window_s


def test_the_update_interval_is_observed_once() -> None:
    device = SimDevice(power_w=5.0)

    def sleep(seconds: float) -> None:
        device.now += seconds

    counter = SimCounter(device, resolution_j=1e-6, update_s=0.003, known=False)
    assert observe_update_interval(counter, 0.5, clock=device.clock, sleep=sleep) == pytest.approx(0.003, abs=6e-4)
    still = SimCounter(SimDevice(power_w=0.0), resolution_j=1e-6, update_s=0.003)  # never changes
    assert observe_update_interval(still, 0.05, clock=device.clock, sleep=sleep) == 0.05
    assert counter.update_interval_s is None
    energy = measure_energy(counter, device.run, device.sync, TICK, clock=device.clock, sleep=sleep)
    assert energy.update_s == counter.update_interval_s == pytest.approx(0.003, abs=6e-4)


def test_a_failing_call_or_an_unreadable_device_is_the_reason() -> None:
    device = SimDevice(power_w=5.0)

    def broken() -> None:
        raise RuntimeError("device lost")

    energy = measure_energy(SimCounter(device, 1e-6, TICK), broken, device.sync, TICK, clock=device.clock)
    assert energy.joules_per_call is None and energy.reason == "measuring energy failed: RuntimeError: device lost"

    class Mute(Sensors):
        reason = "RAPL: no powercap"

        def sample(self) -> Sample:
            return Sample(0.0, None, None, None, None)

    assert measure_energy(Mute(), device.run, device.sync, TICK).reason == "RAPL: no powercap"


def _doc_with_energy(kernel: str, shape: dict[str, int], dtype: str, joules: float) -> dict[str, Any]:
    record = new_record(kernel, "numpy", "cpu", 0, dtype, shape, impl_kind="native", language="numpy", device="CPU")
    record["timing"] = {"median_s": 1e-3, "iqr_s": 0.0, "cv": 0.0, "n": 10, "timer": "perf_counter"}
    record["energy"] = {
        **measure(SimDevice(1.0), SimCounter(SimDevice(1.0), 1.0, TICK)).section(),
        "joules_per_call": joules,
        "watts": joules / 1e-3,
        "reason": "",
        "error_pct": 1.0,
    }
    doc = new_document(["hwbench", "run"])
    doc["backends"] = [
        {
            "name": "cpu",
            "available": True,
            "reason": "",
            "devices": [{"backend": "cpu", "index": 0, "name": "CPU", "vendor": "test", "kind": "cpu"}],
        }
    ]
    doc["records"] = [record]
    doc["sensors"] = [DeviceSensors(root=Path("/nonexistent-root")).entry("cpu", 0, {"name": "CPU", "kind": "cpu"})]
    return doc


def test_per_watt_figures_are_derived_and_the_fields_are_valid() -> None:
    doc = _doc_with_energy("gemm", {"M": 64, "N": 64, "K": 64}, "fp64", joules=0.002)
    add_metrics(doc, Catalog.load())
    energy = doc["records"][0]["energy"]
    assert energy["tflops_per_watt"] == pytest.approx(2 * 64**3 / 0.002 / 1e12)  # TFLOP per joule
    assert energy["gbps_per_watt"] is None  # GEMM is not a bandwidth kernel
    assert files.validate(doc) == []
    stream = _doc_with_energy("stream", {"op": 3, "n": 1 << 20}, "fp32", joules=0.5)
    add_metrics(stream, Catalog.load())
    figures = stream["records"][0]["energy"]
    moved = get_kernel("stream").bytes_moved({"op": 3, "n": 1 << 20}, "fp32")
    assert figures["gbps_per_watt"] == pytest.approx(moved / 0.5 / 1e9)  # GB per joule
    assert files.validate(stream) == []
    broken = _doc_with_energy("gemm", {"M": 8, "N": 8, "K": 8}, "fp64", joules=0.1)
    broken["records"][0]["energy"]["method"] = "guessed"
    broken["sensors"][0]["energy"] = "yes"
    problems = " ".join(files.validate(broken))
    assert "method" in problems and "energy" in problems


class WallCounter(Sensors):
    """An energy counter of ``watts`` on the real clock, in µJ; it keeps the times it was read."""

    source = "test"
    energy_resolution_j = 1e-6
    update_interval_s = 1e-4

    def __init__(self, watts: float) -> None:
        self.watts, self.start = watts, time.monotonic()
        self.read_at: list[float] = []

    def sample(self) -> Sample:
        now = time.monotonic()
        self.read_at.append(now)
        return Sample(now, None, math.floor(self.watts * (now - self.start) * 1e6) * 1e-6, None, None)


class Injected(DeviceSensors):
    """Every device's readers are the one given."""

    def __init__(self, sensors: Sensors) -> None:
        super().__init__(root=Path("/nonexistent-root"))
        self.sensors = sensors

    def get(self, backend: str, index: int, device: Any = None) -> Sensors | str:
        return self.sensors


def test_the_pipeline_measures_energy_after_the_timed_calls() -> None:
    counter = WallCounter(watts=50.0)
    runner = CaseRunner(sensors=Injected(counter))
    timed_until: list[float] = []

    def timed(case: Any, prepared: Any, config: Any) -> Any:
        found = Pipeline.time(case, prepared, config)
        timed_until.append(time.monotonic())
        return found

    runner.pipeline.time = timed  # type: ignore[method-assign]
    timing = {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3, "energy_s": 0.5}
    record = runner.run(CaseRequest("gemm", "numpy", "cpu", 0, "fp64", {"M": 32, "N": 32, "K": 32}, 0, timing))
    assert record["status"] == "ok", record["reason"]
    energy = record["energy"]
    assert energy["reason"] == "" and energy["source"] == "test" and energy["method"] == "counter"
    assert min(counter.read_at) > timed_until[0]  # the energy windows come after the timed calls
    assert energy["watts"] == pytest.approx(50.0, rel=1e-3)
    assert energy["joules_per_call"] == pytest.approx(energy["energy_j"] / energy["calls"])
    # a window is kept from 0.9x the minimum on: calls sized from an estimate may run a little faster
    assert energy["calls"] >= 1 and energy["window_s"] >= 0.9 * EnergyConfig().min_window_s and energy["windows"] >= 1
    off = runner.run(
        CaseRequest("gemm", "numpy", "cpu", 0, "fp64", {"M": 8, "N": 8, "K": 8}, 0, {**timing, "energy_s": 0})
    )
    assert off["status"] == "ok" and "energy" not in off


class RaplWriter:
    """A fake RAPL package whose ``energy_uj`` a thread advances as ``watts`` would, every 2 ms."""

    def __init__(self, root: Path, watts: float) -> None:
        self.zone = root / "sys/class/powercap/intel-rapl:0"
        self.zone.mkdir(parents=True)
        (self.zone / "name").write_text("package-0\n")
        (self.zone / "max_energy_range_uj").write_text("262143328850\n")
        self.watts, self.start, self.stop = watts, time.monotonic(), threading.Event()
        self.write()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def write(self) -> None:
        value = int(self.watts * (time.monotonic() - self.start) * 1e6) + 5_000_000
        part = self.zone / "energy_uj.new"
        part.write_text(f"{value}\n")
        os.replace(part, self.zone / "energy_uj")  # a reader sees the old value or the new, whole

    def loop(self) -> None:
        while not self.stop.wait(0.002):
            self.write()

    def __enter__(self) -> RaplWriter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def run_hwbench(root: Path, out: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    env = {**os.environ, "HWBENCH_SENSORS_ROOT": str(root)}
    args = ["run", "--backend", "cpu", "--kernel", "gemm", "--impl", "numpy", "--dtype", "fp64", "--budget", "0.02"]
    result = subprocess.run(
        hwbench_cmd(*args, *extra, "--out", str(out), "-q"), capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    return result, files.load(out)  # loading validates the file against the schema


def test_hwbench_run_on_a_fake_rapl_tree_fills_each_records_energy(tmp_path: Path) -> None:
    with RaplWriter(tmp_path / "root", watts=40.0):
        _, doc = run_hwbench(tmp_path / "root", tmp_path / "out.json", "--shape", "gemm:M=64,N=64,K=64")
    (record,) = doc["records"]
    energy = record["energy"]
    assert energy["source"] == "rapl" and energy["method"] == "counter" and energy["reason"] == "", energy
    assert energy["resolution_j"] == pytest.approx(2**-14, rel=1e-5)  # from max_energy_range_uj
    assert 20.0 < energy["watts"] < 80.0  # 40 W, as a thread writing every 2 ms on a busy machine gives it
    assert energy["joules_per_call"] * energy["calls"] == pytest.approx(energy["energy_j"])
    assert energy["tflops_per_watt"] == pytest.approx(2 * 64**3 / energy["joules_per_call"] / 1e12)
    (sensors,) = doc["sensors"]
    assert sensors["backend"] == "cpu" and sensors["source"] == "rapl" and sensors["energy"] is True
    assert doc["run"]["timing"]["energy_s"] == 2.0


def test_hwbench_run_without_sensors_says_so_once_per_device(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    shapes = ("--shape", "gemm:M=32,N=32,K=32", "--shape", "gemm:M=48,N=48,K=48")
    _, doc = run_hwbench(tmp_path / "root", tmp_path / "out.json", *shapes)
    assert len(doc["records"]) == 2 and not any("energy" in r for r in doc["records"])
    (sensors,) = doc["sensors"]  # one entry for the one device, not one per record
    assert sensors["source"] is None and sensors["energy"] is False
    assert "no " + str(tmp_path / "root/sys/class/powercap") in sensors["reason"]


def test_energy_options_are_checked() -> None:
    result = subprocess.run(
        hwbench_cmd("run", "--no-energy", "--energy-budget", "1"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "hwbench: error: give either --no-energy or --energy-budget, not both"
    ]
    negative = subprocess.run(hwbench_cmd("run", "--energy-budget", "-1"), capture_output=True, text=True, timeout=60)
    assert negative.returncode == 2 and "--energy-budget must be a positive" in negative.stderr
