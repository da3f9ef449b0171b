"""Small valid results documents with chosen figures, for hand-computed score and PP tests.

Host, software and run metadata come from the frozen ``tests/data/cpu-base.json``; the
records and devices are whatever a test asks for.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hwbench.results.files import dumps, validate

DATA = Path(__file__).resolve().parent / "data"
TEMPLATE = json.loads((DATA / "cpu-base.json").read_text())


def device(backend: str, name: str, kind: str, index: int = 0, peak: dict[str, float] | None = None) -> dict[str, Any]:
    """A device entry of ``backends[].devices``."""
    return {
        "backend": backend,
        "index": index,
        "name": name,
        "vendor": "test",
        "kind": kind,
        "peak": {"tflops": peak, "method": "test"} if peak else None,
    }


def record(
    kernel: str,
    impl: str,
    dtype: str | None,
    shape: dict[str, int],
    median: float | None = 1e-3,
    *,
    backend: str = "cpu",
    device: str = "Test CPU",
    index: int = 0,
    status: str = "ok",
    impl_kind: str | None = "portable",
    samples: list[float] | None = None,
    **metrics: Any,
) -> dict[str, Any]:
    """One record; ``metrics`` (tflops=..., pct_peak=..., iops=...) fill its metrics."""
    samples = samples if samples is not None else ([median] if median else [])
    return {
        "kernel": kernel,
        "impl": impl,
        "impl_kind": impl_kind,
        "language": None,
        "backend": backend,
        "device": device,
        "device_index": index,
        "dtype": dtype,
        "shape": dict(shape),
        "status": status,
        "reason": "" if status == "ok" else f"{status} on purpose",
        "parity": {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None},
        "timing": {
            "median_s": median if status == "ok" else None,
            "iqr_s": None,
            "cv": None,
            "n": len(samples) if status == "ok" else 0,
            "timer": "test",
            **({"samples_s": samples} if status == "ok" else {}),
        },
        "metrics": {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None, **metrics},
        "config": {},
        "warnings": [],
    }


def document(records: list[dict[str, Any]], devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A valid results document holding ``records`` (devices grouped into their backends)."""
    doc = copy.deepcopy(TEMPLATE)
    devices = devices if devices is not None else [device("cpu", "Test CPU", "cpu")]
    backends: dict[str, list[dict[str, Any]]] = {}
    for entry in devices:
        backends.setdefault(entry["backend"], []).append(entry)
    doc["backends"] = [
        {"name": name, "available": True, "reason": "", "devices": items} for name, items in backends.items()
    ]
    doc["records"] = records
    doc["warnings"] = ["synthetic test document"]
    problems = validate(json.loads(dumps(doc)))
    assert not problems, problems
    return doc


def write(path: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` to ``path`` (as hwbench would) and return the path."""
    path.write_text(dumps(doc))
    return path
