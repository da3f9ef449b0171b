"""What every dimension of ``hwbench score`` hands back: a :class:`Raw` figure with its source,
the ok records of a kernel it reads, and how a record is named in the source."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hwbench.core.results_types import Record
from hwbench.results.checked import Loaded

#: The device kinds a dimension prefers over the CPU when a file has both.
ACCELERATOR_KINDS = ("gpu", "accelerator")


@dataclass
class Raw:
    """A raw figure and where it comes from, or the reason it is missing."""

    value: float | None
    source: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    note: str = ""


def ok_records(loaded: Loaded, kernel: str) -> list[tuple[int, Record]]:
    """``(index, record)`` of the file's ok records of ``kernel``."""
    return [(i, r) for i, r in loaded.records() if r["kernel"] == kernel and r["status"] == "ok"]


def record_source(loaded: Loaded, index: int, record: Record, **extra: Any) -> dict[str, Any]:
    """The source entry naming ``record`` (``FILE#records[N]``, kernel, impl, device, ...) and ``extra``."""
    return {
        "record": loaded.where(index),
        "kernel": record["kernel"],
        "impl": record["impl"],
        "backend": record["backend"],
        "device": record.get("device"),
        "dtype": record.get("dtype"),
        "shape": record["shape"],
        **extra,
    }
