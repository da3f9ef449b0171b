"""Measured roofs: the best GEMM (compute, per dtype) and the best stream result (memory bandwidth)
each device reached in a results document, and every record's share of them (``pct_achievable``).

Datasheet peaks are not reachable; these roofs are what the device did reach in this run,
beside ``pct_peak`` (of the datasheet or the device's own peak). A compute record (one with
TFLOPS) is measured against the compute roof of its dtype, a bandwidth kernel's record against
the bandwidth roof. Where a device has no such roof the record's ``pct_achievable`` is null and
:func:`missing_roof_hint` says which command would measure it. Collectives have neither.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hwbench.core.results_types import Document, Record

#: Kernels whose best record is a roof, and which roof.
COMPUTE_ROOF_KERNELS = ("gemm",)
BANDWIDTH_ROOF_KERNELS = ("stream",)
#: The commands that measure each roof.
MEASURE = {
    "compute": "hwbench run --kernel gemm --search",
    "bandwidth": "hwbench run --kernel stream --profile standard",
}


def _figure(record: Record, name: str) -> float | None:
    value = (record.get("metrics") or {}).get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value)


def _best(record: Record, figure: float, unit: str) -> dict[str, Any]:
    return {
        unit: figure,
        "kernel": record["kernel"],
        "impl": record["impl"],
        "dtype": record["dtype"],
        "shape": dict(record.get("shape") or {}),
    }


def device_roofs(records: Iterable[Record]) -> dict[str, Any]:
    """The roofs of one device's ``records``: ``compute`` (dtype -> best GEMM, TFLOPS) and
    ``bandwidth`` (the best stream result, GB/s, or None)."""
    compute: dict[str | None, dict[str, Any]] = {}  # by dtype (None: a record without one)
    bandwidth: dict[str, Any] | None = None
    for record in records:
        if record.get("status") != "ok":
            continue
        if record.get("kernel") in COMPUTE_ROOF_KERNELS:
            tflops = _figure(record, "tflops")
            if tflops and tflops > compute.get(record["dtype"], {}).get("tflops", 0.0):
                compute[record["dtype"]] = _best(record, tflops, "tflops")
        elif record.get("kernel") in BANDWIDTH_ROOF_KERNELS:
            gbps = _figure(record, "gbps")
            if gbps and (bandwidth is None or gbps > bandwidth["gbps"]):
                bandwidth = _best(record, gbps, "gbps")
    return {"compute": compute, "bandwidth": bandwidth}


def measured_roofs(records: Iterable[Record]) -> list[dict[str, Any]]:
    """One entry per device that has a roof: backend, device index, device name and its roofs."""
    by_device: dict[tuple[Any, Any], list[Record]] = {}
    names: dict[tuple[Any, Any], Any] = {}
    for record in records:
        key = (record.get("backend"), record.get("device_index"))
        by_device.setdefault(key, []).append(record)
        names.setdefault(key, record.get("device"))
    out = []
    for (backend, index), mine in by_device.items():
        roofs = device_roofs(mine)
        if roofs["compute"] or roofs["bandwidth"]:
            out.append({"backend": backend, "device_index": index, "device": names[(backend, index)], **roofs})
    return out


def achievable(record: Record, roofs: dict[str, Any]) -> float | None:
    """``record``'s share of its device's measured roof in percent, or None where there is none."""
    if record.get("status") != "ok":
        return None
    if record.get("kernel") in BANDWIDTH_ROOF_KERNELS:
        gbps, roof = _figure(record, "gbps"), roofs.get("bandwidth")
        return 100.0 * (gbps / roof["gbps"]) if gbps and roof else None
    tflops, roof = _figure(record, "tflops"), roofs.get("compute", {}).get(record.get("dtype"))
    return 100.0 * (tflops / roof["tflops"]) if tflops and roof else None


def add_achievable(doc: Document) -> None:
    """Put the document's measured roofs in ``doc["roofs"]`` and each record's ``pct_achievable``."""
    roofs = measured_roofs(doc["records"])
    doc["roofs"] = roofs
    by_device = {(r["backend"], r["device_index"]): r for r in roofs}
    for record in doc["records"]:
        metrics = record.get("metrics")
        if isinstance(metrics, dict) and record.get("status") == "ok":
            mine = by_device.get((record.get("backend"), record.get("device_index")), {})
            metrics["pct_achievable"] = achievable(record, mine)


def missing_roof_hint(roofs: dict[str, Any], dtypes: Iterable[str]) -> str:
    """What to run for the roofs ``roofs`` lacks (empty when it has them all)."""
    wanted = []
    absent = [d for d in dtypes if d not in roofs.get("compute", {})]
    if absent:
        wanted.append(f"measure the {', '.join(absent)} compute roof with `{MEASURE['compute']}`")
    if not roofs.get("bandwidth"):
        wanted.append(f"measure the memory bandwidth roof with `{MEASURE['bandwidth']}`")
    return "; ".join(wanted)
