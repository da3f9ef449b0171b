"""Derived figures: throughput, share of peak, porting overhead, cost, portability."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from hwbench.core.results_types import Record


def case_key(record: Record) -> tuple[Any, ...]:
    """What a record measured, its implementation aside: backend, device, kernel, dtype, shape
    (records with equal keys are twins whose times compare)."""
    return (
        record["backend"],
        record.get("device_index"),
        record["kernel"],
        record["dtype"],
        tuple(sorted(record["shape"].items())),
    )


def median_s(record: Record) -> float:
    """The median time of an ``ok`` record: timed, so a positive number of seconds (None only where
    a record was not timed)."""
    return cast(float, record["timing"]["median_s"])


def tflops(flops: float, seconds: float) -> float:
    """Achieved TFLOPS of one call taking ``seconds``."""
    return flops / seconds / 1e12


def gbps(nbytes: float, seconds: float) -> float:
    """Achieved GB/s (1e9 bytes) of one call taking ``seconds``."""
    return nbytes / seconds / 1e9


def pct_of_peak(achieved_tflops: float, peak_tflops: float | None) -> float | None:
    """Achieved as a percentage of peak, or None without a peak."""
    if not peak_tflops or peak_tflops <= 0:
        return None
    return 100.0 * achieved_tflops / peak_tflops


def pct_of_bandwidth(achieved_gbps: float, peak_gbps: float | None) -> float | None:
    """Achieved GB/s as a percentage of the memory bandwidth peak, or None without one."""
    if not peak_gbps or peak_gbps <= 0:
        return None
    return 100.0 * achieved_gbps / peak_gbps


#: A figure above this multiple of the device's peak (for its dtype) is refused as implausible:
#: the margin covers a datasheet's rounding and a boost clock above the rated one.
PLAUSIBLE_PEAK_FRACTION = 1.05


def above_ceiling(achieved: float, ceiling: float, unit: str, what: str, source: str | None, why: str) -> str | None:
    """Why ``achieved`` (in ``unit``) cannot be true under ``ceiling`` (``what`` names it, ``source``
    says where it comes from, ``why`` what that means), or None when it is at most
    :data:`PLAUSIBLE_PEAK_FRACTION` of the ceiling."""
    if achieved <= PLAUSIBLE_PEAK_FRACTION * ceiling:
        return None
    where = f" ({source})" if source else ""
    return f"{achieved:.4g} {unit} is {achieved / ceiling:.3g}x {what} of {ceiling:.4g} {unit}{where}: {why}"


def implausible(achieved_tflops: float, peak_tflops: float, dtype: str, peak_source: str | None) -> str | None:
    """Why ``achieved_tflops`` cannot be true on a device whose ``dtype`` peak is ``peak_tflops``
    (None when it can): above :data:`PLAUSIBLE_PEAK_FRACTION` of the peak."""
    why = "a kernel cannot beat its device's peak, so the timed calls did not do the work counted"
    return above_ceiling(achieved_tflops, peak_tflops, "TFLOPS", f"the device's {dtype} peak", peak_source, why)


def implausible_native(
    achieved_tflops: float, peak_tflops: float, dtype: str, peak_source: str | None, remeasured: bool
) -> str | None:
    """Why a vendor library's ``achieved_tflops`` cannot stand against a ``dtype`` peak of
    ``peak_tflops`` (None when it can): both possibilities, since a library is as likely to show a
    measured peak wrong as to skip work; ``remeasured`` says whether the peak was measured again."""
    again = "re-measured before refusing and still below it" if remeasured else "not re-measured"
    why = (
        f"either the device's peak is wrong (it was {again}; how it was measured is in parentheses) or the "
        "library's timed calls did not do the work counted"
    )
    return above_ceiling(achieved_tflops, peak_tflops, "TFLOPS", f"the device's {dtype} peak", peak_source, why)


def implausible_bandwidth(achieved_gbps: float, peak_gbps: float, peak_source: str | None) -> str | None:
    """Why ``achieved_gbps`` from memory cannot be true on a device of ``peak_gbps`` (None when it can)."""
    why = "the arrays are past its last-level cache, so the timed calls did not move the bytes counted"
    return above_ceiling(achieved_gbps, peak_gbps, "GB/s", "the device's memory bandwidth", peak_source, why)


def porting_overhead(t_native: float, t_portable: float) -> float:
    """Speed lost by the portable implementation: ``1 - t_native / t_portable``.

    0 means as fast as the vendor library; 0.5 means half its speed; negative means faster.
    """
    if t_native <= 0 or t_portable <= 0:
        raise ValueError("times must be positive")
    return 1.0 - t_native / t_portable


def speed_ratio(t_native: float, t_portable: float) -> float:
    """The portable implementation's speed relative to the native: ``t_native / t_portable``.

    1 is as fast, 0.87 is 87 % of its speed, 5.4 is 5.4 times as fast; unlike the porting
    overhead it is bounded on both sides in a log plot (``log(ratio)`` is symmetric).
    """
    if t_native <= 0 or t_portable <= 0:
        raise ValueError("times must be positive")
    return t_native / t_portable


def per_usd_hour(achieved_tflops: float, usd_per_hour: float | None) -> float | None:
    """TFLOPS per USD/hour of rental, or None without a price."""
    if not usd_per_hour or usd_per_hour <= 0:
        return None
    return achieved_tflops / usd_per_hour


def per_joule(amount: float, joules: float | None, unit: float) -> float | None:
    """``amount`` (flops or bytes of one call) per joule of one call, in ``unit``s: with 1e12, TFLOP/J,
    which is TFLOPS per watt; with 1e9, GB/J (GB/s per watt). None without an amount or energy."""
    if not joules or joules <= 0 or not amount or amount <= 0:
        return None
    return amount / joules / unit


def performance_portability(efficiencies: Iterable[float | None]) -> float:
    """Pennycook's PP: harmonic mean of efficiencies in (0, 1]; 0 if any is missing or zero."""
    values = list(efficiencies)
    present = [e for e in values if e is not None and e > 0]
    if not values or len(present) < len(values):
        return 0.0
    return len(present) / sum(1.0 / e for e in present)
