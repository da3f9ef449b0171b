"""Results files as downstream commands (score, compare, pp) read them.

:func:`load_checked` is :func:`hwbench.results.load` plus a check of every figure those
commands use: JSON has no NaN, but Python's parser accepts ``NaN`` and ``Infinity``, and
the schema cannot say that a throughput is never negative. A bad figure is one line
naming the file and the record, never a silently wrong ranking.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.results import files as results

#: Figures that must be finite and >= 0 wherever they are present (None means "not measured").
NON_NEGATIVE = {
    "timing": ("median_s", "iqr_s", "mean_s", "std_s", "min_s", "max_s", "q1_s", "q3_s", "p99_s", "cv"),
    "metrics": ("tflops", "gbps", "pct_peak", "peak_tflops", "tflops_per_usd_hour", "usd_per_hour", "iops"),
}
#: Figures that may be negative but must be finite (a portable kernel faster than the native).
FINITE = {"metrics": ("porting_overhead",)}


@dataclass(frozen=True)
class Loaded:
    """One results file and where it came from."""

    path: Path
    doc: dict[str, Any]

    def records(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(index, record)`` for every record of the file."""
        yield from enumerate(self.doc["records"])

    def where(self, index: int) -> str:
        """How a record is named in messages and JSON: ``FILE#records[N]``."""
        return f"{self.path}#records[{index}]"

    def device(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """The device entry of ``record`` in the file's ``backends``, if any."""
        for backend in self.doc.get("backends", []):
            if backend.get("name") != record.get("backend"):
                continue
            for device in backend.get("devices", []):
                if device.get("index") == record.get("device_index"):
                    return device
        return None

    def device_kind(self, record: dict[str, Any]) -> str:
        """``cpu``, ``gpu`` or ``accelerator`` for the record's device (``cpu`` for the cpu backend)."""
        device = self.device(record)
        if device is not None:
            return str(device.get("kind", "cpu"))
        return "cpu" if record.get("backend") == "cpu" else "unknown"


def _bad(path: Path, index: int, field: str, value: Any, rule: str) -> UserError:
    return UserError(f"{path}: records[{index}].{field} is {value!r}, {rule}; fix or re-run that case")


def check_figures(path: Path, doc: dict[str, Any]) -> None:
    """Raise UserError on the first NaN, infinite or negative figure of any record."""
    for index, record in enumerate(doc["records"]):
        for section, names in NON_NEGATIVE.items():
            values = record.get(section) or {}
            for name in names:
                value = values.get(name)
                if value is None:
                    continue
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                    raise _bad(path, index, f"{section}.{name}", value, "not a finite number")
                if value < 0:
                    raise _bad(path, index, f"{section}.{name}", value, "negative")
        for section, names in FINITE.items():
            for name in names:
                value = (record.get(section) or {}).get(name)
                if value is not None and not math.isfinite(value):
                    raise _bad(path, index, f"{section}.{name}", value, "not a finite number")
        for sample in (record.get("timing") or {}).get("samples_s", []):
            if not math.isfinite(sample) or sample < 0:
                raise _bad(path, index, "timing.samples_s", sample, "a sample must be a finite time >= 0")


def load_checked(path: str | Path) -> Loaded:
    """Load, validate and figure-check one results file; UserError (one line) on any problem."""
    path = Path(path)
    doc = results.load(path)
    check_figures(path, doc)
    return Loaded(path, doc)
