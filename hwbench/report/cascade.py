"""Performance-portability cascade (Pennycook et al.) of each portable implementation.

For a kernel, the devices of interest are those where its native implementation ran. On
each, a portable implementation's efficiency is ``t_native / t_portable`` per case, capped
at 1 (the faster of the two is the best known), combined over its cases by the harmonic
mean; a case that failed counts 0, and a device where it never ran counts 0. Devices are
sorted by efficiency, best first, and PP of the first k devices is the harmonic mean of
their efficiencies (:func:`hwbench.metrics.performance_portability`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hwbench.core.records import STATUSES
from hwbench.report.data import Device, Row, num, shape_text, sub
from hwbench.results.metrics import performance_portability

#: Statuses of a case that ran and failed (an implausible figure included): efficiency 0.
FAILED = tuple(status for status in STATUSES if status not in ("ok", "skipped"))


@dataclass(frozen=True)
class Step:
    """The k-th device of a cascade: its efficiency and PP over the first k devices."""

    rank: int
    device: Device
    efficiency: float
    cases: int
    pp: float


@dataclass(frozen=True)
class Cascade:
    """One implementation's cascade over the devices of its kernel."""

    kernel: str
    impl: str
    steps: list[Step]


def _case(record: dict[str, Any]) -> tuple[Any, ...]:
    return record.get("dtype"), shape_text(record.get("shape"))


def _median(record: dict[str, Any]) -> float | None:
    timing = sub(record, "timing")
    return num(timing.get("median_s")) or num(timing.get("p50_s"))


def _efficiency(
    natives: dict[tuple[Any, ...], float], portables: dict[tuple[Any, ...], dict[str, Any]]
) -> tuple[float, int]:
    """Harmonic-mean efficiency over the native's cases, and how many cases counted."""
    values: list[float] = []
    for case, t_native in natives.items():
        record = portables.get(case)
        if record is None or record.get("status") == "skipped":
            continue
        t_port = _median(record)
        if record.get("status") == "ok" and t_port:
            values.append(min(1.0, t_native / t_port))
        elif record.get("status") in FAILED:
            values.append(0.0)
    return (performance_portability(values) if values else 0.0), len(values)


def cascades(rows: list[Row]) -> list[Cascade]:
    """Cascades of every (kernel, portable implementation) seen in ``rows``."""
    natives: dict[str, dict[Device, dict[tuple[Any, ...], float]]] = {}
    portables: dict[tuple[str, str], dict[Device, dict[tuple[Any, ...], dict[str, Any]]]] = {}
    for row in rows:
        r, kernel = row.record, str(row.record.get("kernel"))
        if r.get("impl_kind") == "native" and r.get("status") == "ok" and _median(r):
            natives.setdefault(kernel, {}).setdefault(row.device, {}).setdefault(_case(r), _median(r))  # type: ignore[arg-type]
        elif r.get("impl_kind") == "portable":
            portables.setdefault((kernel, str(r.get("impl"))), {}).setdefault(row.device, {})[_case(r)] = r
    out = []
    for (kernel, impl), by_device in sorted(portables.items()):
        if kernel not in natives:
            continue
        scored = [(d, *_efficiency(cases, by_device.get(d, {}))) for d, cases in natives[kernel].items()]
        scored.sort(key=lambda s: (-s[1], s[0].label))
        steps = [
            Step(k + 1, d, eff, n, performance_portability([s[1] for s in scored[: k + 1]]))
            for k, (d, eff, n) in enumerate(scored)
        ]
        out.append(Cascade(kernel, impl, steps))
    return out
