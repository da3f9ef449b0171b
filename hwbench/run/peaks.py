"""Re-measure before refusing: a vendor library's record above its device's measured peak makes
the worker (the process that ran the cases, on the host that is still there) measure that peak
once more, more thoroughly, before the derived metrics judge any record against it.

A measured peak can be low (a neighbour's burst on a shared core, a clock read during a dip);
a vendor library is the likeliest to show it. The device's description in the document then holds
the re-measured peak and says why it was re-measured; a record still above it is refused later,
by the derived metrics, naming both possibilities. Portable kernels never trigger a re-measurement:
a kernel of hwbench's own above a peak is the kernel's error.
"""

from __future__ import annotations

import math
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.kernel import get_kernel
from hwbench.core.results_types import DescribedDevice, Document, Record
from hwbench.run.worker import Worker, WorkerDied


def _above(record: Record, device: DescribedDevice | None) -> tuple[float, float] | None:
    """``(achieved, peak)`` TFLOPS of a native ``record`` above its device's own peak, else None."""
    if record["status"] != "ok" or record.get("impl_kind") != "native" or device is None:
        return None
    dtype = record["dtype"]
    peak = ((device.get("peak") or {}).get("tflops") or {}).get(dtype) if dtype is not None else None
    median = (record.get("timing") or {}).get("median_s")
    if not isinstance(peak, (int, float)) or not isinstance(median, (int, float)) or not (peak > 0 and median > 0):
        return None
    try:
        kernel = get_kernel(record["kernel"])
    except UserError:
        return None
    if kernel.spans_ranks:
        return None
    achieved = kernel.flops(record["shape"]) / median / 1e12
    return (achieved, float(peak)) if math.isfinite(achieved) and achieved > peak else None


def recheck_peaks(doc: Document, records: list[Record], worker: Worker, timeout: float) -> int:
    """Re-measure, once per device, the peak of every device a native record in ``records`` is
    above, updating the device in ``doc["backends"]``; returns how many were re-measured. A backend
    that cannot re-measure leaves its peak as it is; a failed request is a warning."""
    devices: dict[tuple[str, int | None], DescribedDevice] = {
        (b["name"], d["index"]): d for b in doc.get("backends", []) for d in b.get("devices") or []
    }
    first: dict[tuple[Any, ...], tuple[Record, float, float]] = {}
    for record in records:
        key = (record["backend"], record.get("device_index"))
        found = _above(record, devices.get(key))
        if found is not None and key not in first:
            first[key] = (record, *found)
    remeasured = 0
    for (backend, index), (record, achieved, peak) in first.items():
        try:
            answer = worker.request({"op": "remeasure_peak", "backend": backend, "index": index}, timeout)
        except WorkerDied as died:
            answer = {"error": f"the worker {died.status}: {died.reason}"}
        if "error" in answer:
            doc.setdefault("warnings", []).append(f"{backend}:{index}: the peak was not re-measured: {answer['error']}")
            continue
        if not answer.get("peak"):
            continue
        device, dtype = devices[(backend, index)], record["dtype"]
        why = (
            f"{record['impl']} ({record['kernel']} {dtype}) ran at {achieved:.4g} TFLOPS, above the first "
            f"measurement's {peak:.4g}"
        )
        old = dict((device["peak"] or {}).get("tflops") or {})  # not None: the record was above it
        # Contention only lowers a measured peak: each dtype keeps the higher of its two measurements.
        new = dict(answer["peak"].get("tflops") or {})
        kept = {d: max(v, old[d]) if isinstance(old.get(d), (int, float)) else v for d, v in new.items()}
        kept.update({d: v for d, v in old.items() if d not in kept})
        device["peak"] = {
            **answer["peak"],
            "tflops": kept,
            "method": f"re-measured (the higher of two measurements kept), as {why}: {answer['peak']['method']}",
        }
        device.setdefault("extra", {})["peak_remeasured"] = {"first_tflops": old, "why": why}
        remeasured += 1
    return remeasured
