"""Derived figures: throughput, share of peak, porting overhead, cost, portability."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def case_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """What a record measured, its implementation aside: backend, device, kernel, dtype, shape
    (records with equal keys are twins whose times compare)."""
    return (
        record["backend"],
        record.get("device_index"),
        record["kernel"],
        record["dtype"],
        tuple(sorted(record["shape"].items())),
    )


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


def porting_overhead(t_native: float, t_portable: float) -> float:
    """Speed lost by the portable implementation: ``1 - t_native / t_portable``.

    0 means as fast as the vendor library; 0.5 means half its speed; negative means faster.
    """
    if t_native <= 0 or t_portable <= 0:
        raise ValueError("times must be positive")
    return 1.0 - t_native / t_portable


def per_usd_hour(achieved_tflops: float, usd_per_hour: float | None) -> float | None:
    """TFLOPS per USD/hour of rental, or None without a price."""
    if not usd_per_hour or usd_per_hour <= 0:
        return None
    return achieved_tflops / usd_per_hour


def performance_portability(efficiencies: Iterable[float | None]) -> float:
    """Pennycook's PP: harmonic mean of efficiencies in (0, 1]; 0 if any is missing or zero."""
    values = list(efficiencies)
    present = [e for e in values if e is not None and e > 0]
    if not values or len(present) < len(values):
        return 0.0
    return len(present) / sum(1.0 / e for e in present)
