"""Results files as downstream commands (score, compare, pp) read them.

:func:`load_checked` is :func:`hwbench.results.load`, whose one validity rule (the schema
and finite numbers, as ``hwbench validate`` checks) covers every figure those commands
use: a NaN, infinite or negative figure is one line naming the file and the record, never
a silently wrong ranking. It answers the document with where it came from.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwbench.core.backend import described_kind
from hwbench.core.results_types import DescribedDevice, Document, Record
from hwbench.results import files as results


@dataclass(frozen=True)
class Loaded:
    """One results file and where it came from."""

    path: Path
    doc: Document

    def records(self) -> Iterator[tuple[int, Record]]:
        """``(index, record)`` for every record of the file."""
        yield from enumerate(self.doc["records"])

    def where(self, index: int) -> str:
        """How a record is named in messages and JSON: ``FILE#records[N]``."""
        return f"{self.path}#records[{index}]"

    def device(self, record: Mapping[str, Any]) -> DescribedDevice | None:
        """The device entry of ``record`` (a record, or its ``backend`` and ``device_index``) in the
        file's ``backends``, if any."""
        for backend in self.doc.get("backends", []):
            if backend.get("name") != record.get("backend"):
                continue
            for device in backend.get("devices", []):
                if device.get("index") == record.get("device_index"):
                    return device
        return None

    def backend_kind(self, name: Any) -> str:
        """The kind of the file's backend called ``name`` (``cpu``, ``gpu``, ``portable``; see
        :func:`~hwbench.core.backend.described_kind`), empty where the file does not say it."""
        described = next((b for b in self.doc.get("backends", []) if b.get("name") == name), None)
        return described_kind(described) if described is not None else ""

    def device_kind(self, record: Mapping[str, Any]) -> str:
        """``cpu``, ``gpu`` or ``accelerator`` for the record's device (``cpu`` on a backend of kind
        ``cpu``), ``unknown`` where the file does not say."""
        device = self.device(record)
        if device is not None:
            return str(device.get("kind", "cpu"))
        return "cpu" if self.backend_kind(record.get("backend")) == "cpu" else "unknown"


def load_checked(path: str | Path) -> Loaded:
    """Load and validate one results file; UserError (one line) on any problem."""
    path = Path(path)
    return Loaded(path, results.load(path))
