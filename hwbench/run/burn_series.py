"""What a burn measures, as arithmetic: inputs whose exact answer is known, the time series of
one device, and the figures drawn from it (decay, clock drop, throttling).

GEMM's own inputs (uniform in [-1, 1)) have no exact answer in fp32 or narrower types, so a burn
draws integers instead: every element of A and B is a nonzero integer in [-r, r] with
``K * r**2 <= 2**p``, ``p`` the significand bits of the narrower of the dtype and its
accumulator. Every product and every partial sum, in whatever order an implementation adds them
(split-K and reduced-precision reductions included), is then an integer of at most ``2**p`` in
magnitude, which the dtype holds exactly: the output must equal the float64 reference bit for
bit. Where no such ``r`` exists (bf16 beyond K = 256), the kernel's own inputs are compared within
its tolerance instead, and the entry says so (``check``).

No process, device or clock is touched here: the loop (``burn_device``) and the coordinator
(``burn``) feed these functions plain numbers, and the coordinator's lines of progress
(:func:`ready_line`, :func:`event_line`) are made here from the events it received.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hwbench.core.burn_types import BurnFigures, BurnPoint
from hwbench.core.dtypes import UNIT_ROUNDOFF, accumulator, storage_dtype
from hwbench.core.text import printable

#: The decay window: the first and the last minute, or a third of a shorter run.
DECAY_WINDOW_S = 60.0
#: A median clock this much below the first window's counts as throttling.
CLOCK_DROP = 0.05
#: Mismatches kept per device (every one is counted; the list is capped).
MAX_MISMATCHES_KEPT = 1000


def significand_bits(dtype: str) -> int:
    """Bits of the significand ``dtype`` keeps, the implicit one included (fp32: 24, fp16: 11, bf16: 8)."""
    return round(-math.log2(UNIT_ROUNDOFF[dtype]))


def integer_range(dtype: str, k: int) -> int:
    """The largest ``r`` with ``k * r**2 <= 2**p`` (``p`` the significand bits of the narrower of
    ``dtype`` and its accumulator); 0 when even r = 1 is too large."""
    bits = min(significand_bits(dtype), significand_bits(accumulator(dtype)))
    return math.isqrt((1 << bits) // max(k, 1))


def exact_k_limit(dtype: str) -> int:
    """The largest K at which GEMM inputs of ±1 still have an exact answer in ``dtype``."""
    return 1 << min(significand_bits(dtype), significand_bits(accumulator(dtype)))


def exact_gemm_inputs(shape: Mapping[str, int], dtype: str, seed: int) -> dict[str, np.ndarray] | None:
    """A and B of nonzero integers in [-r, r] (:func:`integer_range`), or None where none exist."""
    m, n, k = shape["M"], shape["N"], shape["K"]
    r = integer_range(dtype, k)
    if r < 1:
        return None
    host = storage_dtype(dtype)

    def draw(rows: int, cols: int, salt: int) -> np.ndarray:
        rng = np.random.default_rng([seed, salt, 0xB0])
        magnitude = rng.integers(1, r + 1, size=(rows, cols), dtype=np.int32)
        sign = rng.integers(0, 2, size=(rows, cols), dtype=np.int32) * 2 - 1
        return np.ascontiguousarray((magnitude * sign).astype(host))

    return {"A": draw(m, k, 1), "B": draw(k, n, 2)}


@dataclass
class Interval:
    """The open interval of a series: where it started and the sensor readings taken in it."""

    t0_s: float
    iterations0: int
    energy0_j: float | None
    clocks: list[float] = field(default_factory=list)
    temps: list[float] = field(default_factory=list)
    powers: list[float] = field(default_factory=list)

    def add(self, clock_mhz: float | None, temp_c: float | None, power_w: float | None) -> None:
        """One sensor reading taken during the interval (None where unreadable)."""
        for values, value in ((self.clocks, clock_mhz), (self.temps, temp_c), (self.powers, power_w)):
            if value is not None and math.isfinite(value):
                values.append(float(value))


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def close_interval(
    interval: Interval,
    t_s: float,
    iterations: int,
    energy_j: float | None,
    flops: float,
    bytes_moved: float | None = None,
) -> BurnPoint:
    """The series point of ``interval`` ending at ``t_s`` (seconds from the burn's start) after
    ``iterations`` in all: throughput over its wall time, the mean clock, temperature and power
    of its readings (power from the energy counter where there is one)."""
    span = max(t_s - interval.t0_s, 1e-12)
    done = iterations - interval.iterations0
    power = _mean(interval.powers)
    if energy_j is not None and interval.energy0_j is not None and energy_j >= interval.energy0_j:
        power = (energy_j - interval.energy0_j) / span
    return {
        "t_s": t_s,
        "dt_s": span,
        "iterations": done,
        "tflops": flops * done / span / 1e12,
        "gbps": None if bytes_moved is None else bytes_moved * done / span / 1e9,
        "clock_mhz": _mean(interval.clocks),
        "temp_c": _mean(interval.temps),
        "power_w": power,
    }


def decay_window(elapsed_s: float) -> float:
    """The window compared at each end of the run: a minute, or a third of a shorter run."""
    return min(DECAY_WINDOW_S, elapsed_s / 3.0)


def windows(series: Sequence[Mapping[str, Any]], elapsed_s: float) -> tuple[list[int], list[int], float]:
    """Indices of the points whose middle lies in the first window and of those whose middle lies
    in the last, and the window; both empty when they would share a point."""
    window = decay_window(elapsed_s)
    middles = [p["t_s"] - p.get("dt_s", 0.0) / 2 for p in series]
    first = [i for i, t in enumerate(middles) if t <= window]
    last = [i for i, t in enumerate(middles) if t >= elapsed_s - window]
    if not first or not last or set(first) & set(last):
        return [], [], window
    return first, last, window


def _median_of(series: Sequence[Mapping[str, Any]], indices: list[int], key: str) -> float | None:
    values = [float(series[i][key]) for i in indices if series[i].get(key) is not None]
    return statistics.median(values) if values else None


def summarize(
    series: Sequence[Mapping[str, Any]], elapsed_s: float, throttle_reasons: Sequence[str] = ()
) -> BurnFigures:
    """Decay (median throughput of the last window / the first), the clock's ratio the same way,
    and whether the device throttled: a median clock more than :data:`CLOCK_DROP` below the first
    window's, or any throttle reason the device reported; None when neither was readable."""
    first, last, window = windows(series, elapsed_s)
    before, after = _median_of(series, first, "tflops"), _median_of(series, last, "tflops")
    ratio = after / before if before and after is not None else None
    clock_before, clock_after = _median_of(series, first, "clock_mhz"), _median_of(series, last, "clock_mhz")
    clock_ratio = clock_after / clock_before if clock_before and clock_after is not None else None
    reasons = list(dict.fromkeys(throttle_reasons))
    if clock_ratio is not None and clock_ratio < 1.0 - CLOCK_DROP:
        reasons.insert(0, f"clock fell {100 * (1 - clock_ratio):.1f} % below the first window's")
    throttled: bool | None = bool(reasons) if (reasons or clock_ratio is not None) else None
    return {
        "decay_ratio": ratio,
        "decay_pct": None if ratio is None else 100.0 * (1.0 - ratio),
        "decay_window_s": window,
        "clock_first_mhz": clock_before,
        "clock_last_mhz": clock_after,
        "clock_ratio": clock_ratio,
        "throttled": throttled,
        "throttle_reasons": reasons,
    }


def mismatch_reason(mismatches: Sequence[Mapping[str, Any]], count: int, checks: int) -> str:
    """One line on the mismatches of a device: how many checks failed and the first one."""
    if not count:
        return ""
    first = mismatches[0]
    worst = first.get("max_abs_err")
    how = f"max abs err {worst:.3g}" if worst is not None else "NaN or infinity among them"
    return (
        f"{count} of {checks} checks found wrong results; the first at iteration {first['iteration']} "
        f"({first['t_s']:.3g} s): {first['count']} element(s) wrong, {how}"
    )


def outcome(
    mismatches: Sequence[Mapping[str, Any]],
    wrong: int,
    checks: int,
    error: str,
    stopped_by: str | None,
    elapsed_s: float,
    duration_s: float,
) -> tuple[str, str]:
    """A device's burn status and its reason: ``mismatch`` on any wrong check (and an ``error``
    after it said), else ``error``, else ``interrupted`` when ``stopped_by`` names a signal (or is
    ``"running"``: the burn goes on, its file written so far), else ``ok``."""
    if wrong:
        return "mismatch", mismatch_reason(mismatches, wrong, checks) + (f"; and then: {error}" if error else "")
    if error:
        return "error", error
    if stopped_by == "running":
        return "interrupted", (
            f"in progress: {elapsed_s:.3g} of {duration_s:g} s burned when the file was written (a burn "
            "no longer running was killed before it finished its file)"
        )
    if stopped_by is not None:
        return "interrupted", f"stopped by {stopped_by} after {elapsed_s:.3g} of {duration_s:g} s"
    return "ok", ""


#: NVML clock event reasons that do not lower the clock under load (idle, clocks set by hand, sync).
NOT_SLOWING = frozenset({"gpu_idle", "applications_clocks_setting", "display_clock_setting", "sync_boost"})


def throttle_reasons(health: Mapping[str, Any] | None) -> list[str]:
    """What a device's health entry over the burn says slowed it: NVML's clock event reasons that
    lower the clock (a power cap included), amdsmi's thermal violations, the CPU's kernel throttle
    counts that rose."""
    readings = (health or {}).get("readings") or {}
    found = [f"nvml: {name}" for name in readings.get("throttle_reasons") or [] if name not in NOT_SLOWING]
    found += [f"amdsmi: {name} violation" for name in readings.get("thermal_violations") or []]
    for name in ("core", "package"):
        rose = readings.get(f"{name}_throttle_during_run")
        if isinstance(rose, int) and rose > 0:
            found.append(f"kernel: {name} thermal throttle count rose by {rose}")
    return found


def ready_line(
    label: str, kernel: str, failed: Mapping[str, Any] | None, ready: Mapping[str, Any] | None
) -> str | None:
    """The line naming what a device process burns (its ``ready`` event), or why it cannot (its
    ``failed`` event); None before either came. Names from drivers are escaped."""
    if failed is not None:
        return printable(f"burn: {label} cannot burn {kernel}: {failed['reason']}")
    if ready is None:
        return None
    shape = ",".join(f"{k}={v}" for k, v in ready["shape"].items())
    what = f"{ready['kernel']} {ready['impl']} {ready['dtype']} {shape} ({ready['check']} check)"
    return printable(f"burn: {label} {ready['device']}: {what}")


def event_line(label: str, event: Mapping[str, Any]) -> str | None:
    """The progress line of a ``point`` event, or the line of a ``mismatch``; None for the others."""
    if event.get("event") == "point":
        p = event["point"]
        readings = (("clock", "clock_mhz", " MHz"), ("temp", "temp_c", " °C"), ("power", "power_w", " W"))
        extra = "".join(
            f"  {name} {p[key]:.4g}{unit}" if p.get(key) is not None else f"  {name} –" for name, key, unit in readings
        )
        rate = f"{p['gbps']:.4g} GB/s" if p.get("gbps") is not None else f"{p['tflops']:.4g} TFLOPS"
        return f"  {label:<12} {p['t_s']:7.1f} s  {rate}{extra}  checks {event['checks']}"
    if event.get("event") == "mismatch":
        m = event["mismatch"]
        return (
            f"hwbench: MISMATCH on {label} at iteration {m['iteration']} ({m['t_s']:.3g} s): "
            f"{m['count']} element(s) wrong"
        )
    return None
