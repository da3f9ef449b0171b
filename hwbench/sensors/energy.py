"""A timed case's energy, measured in a window of its own after the timing, with its error stated.

The case's prepared call runs back to back for a window; the device's energy over the window is
the counter's difference (``counter``), or the trapezoid of its power readings taken every
``sample_interval_s`` by a thread beside the calls (``sampled``). Joules per call are the energy
over the calls made, mean watts the energy over the window's seconds.

The error stated (``error_pct``) is a bound on what the readings' granularity allows, not the
sensor's calibration: for a counter, its step over the energy measured plus the counter's update
interval over the window (each end of the window may be off by up to one update); for sampled
power, the longest interval between readings (or the reading's own update interval, if longer)
over the window. The update interval is observed once per device (the counter, else the power,
polled until it has changed three times). A window whose error is above ``max_error_pct`` is too
short: it is measured again, longer, until the error is within it or the case's energy budget is
spent; then the case is marked not measurable, with the reason.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from hwbench.core.results_types import Energy as EnergySection
from hwbench.sensors.base import Sample, Sensors

Clock = Callable[[], float]


@dataclass(frozen=True)
class EnergyConfig:
    """How long energy may be measured per case, and what error makes a reading meaningful."""

    #: seconds of windows per case, at most (the first window is made whatever its length).
    budget_s: float = 2.0
    #: the shortest window, s.
    min_window_s: float = 0.05
    #: a reading whose error bound is above this is not meaningful, %.
    max_error_pct: float = 10.0
    #: seconds between power readings when energy is sampled.
    sample_interval_s: float = 0.01
    #: seconds, at most, to observe how often the counter (or power) changes.
    probe_s: float = 0.5
    #: seconds of calls between two looks at the clock inside a window.
    chunk_s: float = 0.01


@dataclass(frozen=True)
class Window:
    """One window of calls and what the sensors said over it."""

    calls: int
    window_s: float
    energy_j: float | None
    error_pct: float | None
    why: str  # why the reading is not meaningful; empty when it is


@dataclass(frozen=True)
class Energy:
    """A case's energy: the record's ``energy`` section (per-watt figures are derived later)."""

    source: str
    method: str  # "counter" or "sampled"
    joules_per_call: float | None
    watts: float | None
    window_s: float
    calls: int
    error_pct: float | None
    reason: str
    energy_j: float | None = None
    resolution_j: float | None = None
    update_s: float | None = None
    sample_interval_s: float | None = None
    windows: int = 0

    def section(self) -> EnergySection:
        """The record's ``energy`` section."""
        return {
            "joules_per_call": self.joules_per_call,
            "watts": self.watts,
            "tflops_per_watt": None,
            "gbps_per_watt": None,
            "source": self.source,
            "method": self.method,
            "window_s": self.window_s,
            "calls": self.calls,
            "error_pct": self.error_pct,
            "reason": self.reason,
            "energy_j": self.energy_j,
            "resolution_j": self.resolution_j,
            "update_s": self.update_s,
            "sample_interval_s": self.sample_interval_s,
            "windows": self.windows,
        }


def method_of(sensors: Sensors) -> str:
    """``counter`` where the device has an energy counter, else ``sampled``."""
    return "counter" if sensors.energy_resolution_j is not None else "sampled"


def _value(sample: Sample, method: str) -> float | None:
    return sample.energy_j if method == "counter" else sample.power_w


def observe_update_interval(
    sensors: Sensors, limit_s: float, *, clock: Clock = time.monotonic, sleep: Callable[[float], None] = time.sleep
) -> float:
    """How often the counter (else the power) takes a new value: the longest interval between its
    first three changes, s; ``limit_s`` when it changed less often than that within ``limit_s``."""
    method = method_of(sensors)
    last = _value(sensors.energy_sample(), method)
    changes: list[float] = []
    end = clock() + limit_s
    while clock() < end and len(changes) < 3:
        sleep(0.0005)
        sample = sensors.energy_sample()
        value = _value(sample, method)
        if value != last:
            changes.append(sample.t_s)
            last = value
    if len(changes) < 3:
        return limit_s
    return max(b - a for a, b in zip(changes, changes[1:], strict=False))


def _run_calls(
    run: Callable[[], None], calls: int, per_call_s: float, until: float, config: EnergyConfig, clock: Clock
) -> int:
    """Run ``calls`` calls, looking at the clock every ``chunk_s`` of them; stop early past ``until``.
    Returns the calls made."""
    chunk = max(1, min(calls, int(config.chunk_s / per_call_s)))
    done = 0
    while done < calls:
        for _ in range(min(chunk, calls - done)):
            run()
        done += min(chunk, calls - done)
        if clock() > until:
            break
    return done


def counter_window(
    sensors: Sensors,
    run: Callable[[], None],
    sync: Callable[[], None],
    calls: int,
    per_call_s: float,
    update_s: float,
    config: EnergyConfig,
    clock: Clock = time.monotonic,
) -> Window:
    """One window read from the energy counter."""
    first = sensors.energy_sample()
    made = _run_calls(run, calls, per_call_s, clock() + 2 * calls * per_call_s + config.chunk_s, config, clock)
    sync()
    last = sensors.energy_sample()
    seconds = last.t_s - first.t_s
    if first.energy_j is None or last.energy_j is None:
        return Window(made, seconds, None, None, "the energy counter gave no reading")
    energy = last.energy_j - first.energy_j
    resolution = sensors.energy_resolution_j or 0.0
    if energy <= 0 or seconds <= 0:
        return Window(
            made, seconds, None, None, f"the energy counter did not advance in {seconds:.3g} s ({made} calls)"
        )
    error = 100 * (resolution / energy + update_s / seconds)
    return Window(made, seconds, energy, error, _too_coarse(error, energy, seconds, resolution, update_s, config))


def _too_coarse(error: float, energy: float, seconds: float, step: float, update_s: float, config: EnergyConfig) -> str:
    if error <= config.max_error_pct:
        return ""
    return (
        f"±{error:.3g} % over a {seconds:.3g} s window of {energy:.4g} J (counter step {step:.3g} J, "
        f"updated every {update_s:.3g} s), above the {config.max_error_pct:g} % a reading needs"
    )


def sampled_window(
    sensors: Sensors,
    run: Callable[[], None],
    sync: Callable[[], None],
    calls: int,
    per_call_s: float,
    update_s: float,
    config: EnergyConfig,
    clock: Clock = time.monotonic,
) -> Window:
    """One window whose energy is the trapezoid of power readings a thread takes beside the calls."""
    readings = [sensors.energy_sample()]
    failures: list[BaseException] = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.wait(config.sample_interval_s):
            try:
                readings.append(sensors.energy_sample())
            except Exception as exc:  # handed to the caller's thread below
                failures.append(exc)
                return

    thread = threading.Thread(target=sampler, name="hwbench-energy-sampler", daemon=True)
    thread.start()
    try:
        made = _run_calls(run, calls, per_call_s, clock() + 2 * calls * per_call_s + config.chunk_s, config, clock)
        sync()
    finally:
        stop.set()
        thread.join()
    if failures:
        raise failures[0]
    readings.append(sensors.energy_sample())
    seconds = readings[-1].t_s - readings[0].t_s
    points = [(s.t_s, s.power_w) for s in readings if s.power_w is not None]
    span = points[-1][0] - points[0][0] if len(points) > 1 else 0.0
    if span <= 0:
        return Window(made, seconds, None, None, f"fewer than two power readings in {seconds:.3g} s")
    area = sum((p0 + p1) / 2 * (t1 - t0) for (t0, p0), (t1, p1) in zip(points, points[1:], strict=False))
    energy = area / span * seconds
    gap = max(max(t1 - t0 for (t0, _), (t1, _) in zip(points, points[1:], strict=False)), update_s)
    error = 100 * gap / seconds
    why = (
        ""
        if error <= config.max_error_pct
        else (
            f"±{error:.3g} %: power read every {gap:.3g} s over a {seconds:.3g} s window, above the "
            f"{config.max_error_pct:g} % a reading needs"
        )
    )
    return Window(made, seconds, energy, error, why)


def first_window(method: str, update_s: float, config: EnergyConfig) -> float:
    """The first window's length: long enough for half the allowed error from the update interval
    (a counter keeps the other half for its step), at least ``min_window_s``, at most the budget."""
    interval = update_s if method == "counter" else max(update_s, config.sample_interval_s)
    share = config.max_error_pct / 2 if method == "counter" else config.max_error_pct / 1.5
    return min(max(config.min_window_s, 100 * interval / share), config.budget_s)


def next_window(window: Window, config: EnergyConfig) -> float:
    """How long the next window should be after ``window`` fell short: as much longer as its
    error was over the allowed one (a quarter more), at least twice; four times without a reading."""
    if window.error_pct is None:
        return 4 * window.window_s
    return window.window_s * max(2.0, window.error_pct / config.max_error_pct * 1.25)


def measure_energy(
    sensors: Sensors,
    run: Callable[[], None],
    sync: Callable[[], None],
    per_call_s: float,
    config: EnergyConfig | None = None,
    *,
    clock: Clock = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Energy:
    """The energy of ``run`` (one call of the case, which ``sync`` waits for on the device), each
    call taking about ``per_call_s``: windows of back-to-back calls, longer each time one is too
    short, within ``config.budget_s``. Never raises: a failure is the result's reason."""
    config = config or EnergyConfig()
    method = method_of(sensors)
    if not sensors.energy_readable:
        return Energy(sensors.source, method, None, None, 0.0, 0, None, sensors.reason or "no energy or power reading")
    per_call_s = per_call_s if math.isfinite(per_call_s) and per_call_s > 0 else 1e-6
    windows: list[Window] = []
    try:
        if sensors.update_interval_s is None:
            sensors.update_interval_s = observe_update_interval(sensors, config.probe_s, clock=clock, sleep=sleep)
        update = sensors.update_interval_s
        length = first_window(method, update, config)
        one = counter_window if method == "counter" else sampled_window
        start = clock()
        while True:
            window = one(sensors, run, sync, max(1, math.ceil(length / per_call_s)), per_call_s, update, config, clock)
            windows.append(window)
            if not window.why and window.window_s >= 0.9 * config.min_window_s:
                break
            if window.calls > 0 and window.window_s > 0:  # back to back, calls take what they took here
                per_call_s = window.window_s / window.calls
            left = config.budget_s - (clock() - start)
            if window.why:  # too short for the readings: longer
                length = min(next_window(window, config), left)
                if length < 1.2 * window.window_s:
                    break
            else:  # meaningful, but shorter than the minimum (the calls ran faster than timed): again
                length = min(config.min_window_s, left)
                if length < 0.9 * config.min_window_s:
                    break
    except Exception as exc:  # a call or a reading that fails here is the reason, not a failed case
        what = " ".join(str(exc).split())[:300]
        last = windows[-1] if windows else Window(0, 0.0, None, None, "")
        return Energy(
            sensors.source,
            method,
            None,
            None,
            last.window_s,
            last.calls,
            None,
            f"measuring energy failed: {type(exc).__name__}: {what}",
            windows=len(windows),
        )
    return result(sensors, method, windows, update, config)


def result(sensors: Sensors, method: str, windows: list[Window], update_s: float, config: EnergyConfig) -> Energy:
    """The :class:`Energy` of the last window (measured, or why not, after how many windows)."""
    last = windows[-1]
    measured = not last.why and last.energy_j is not None and last.calls > 0 and last.window_s > 0
    tried = f"after {len(windows)} window(s) within the {config.budget_s:g} s energy budget"
    return Energy(
        source=sensors.source,
        method=method,
        joules_per_call=last.energy_j / last.calls if measured and last.energy_j is not None else None,
        watts=last.energy_j / last.window_s if measured and last.energy_j is not None else None,
        window_s=last.window_s,
        calls=last.calls,
        error_pct=last.error_pct,
        reason="" if measured else f"not measurable: {last.why or 'no reading'} ({tried})",
        energy_j=last.energy_j,
        resolution_j=sensors.energy_resolution_j,
        update_s=update_s,
        sample_interval_s=config.sample_interval_s if method == "sampled" else None,
        windows=len(windows),
    )
