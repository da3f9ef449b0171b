"""Collective figures: algbw and busbw per record, overhead against every native, run summary.

``small_message_latency_s`` of an implementation is the largest p50 among its ``ok`` fp32
records of messages up to :data:`SMALL_BYTES` (every small message completes in that); the
run's figure (:func:`small_message_latency`, which platform scoring reads too) counts every dtype;
``peak_busbw_gbps`` its largest busbw. Both come from the records with the most ranks in
the run; the top-level figures are the best over implementations, as a platform score reads
them.
"""

from __future__ import annotations

from typing import Any, cast

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.results_types import Document, Record
from hwbench.results import metrics

SMALL_BYTES = 1024


def message_bytes(record: Record) -> int:
    """Bytes of one rank's message in ``record``."""
    return int(record["shape"]["count"]) * DTYPE_BYTES.get(record.get("dtype") or "fp32", 4)


def bandwidths(record: Record, kernel: Any) -> dict[str, float]:
    """algbw (message bytes / time) and busbw (algbw * bus factor), in GB/s."""
    median = metrics.median_s(record)
    algbw = metrics.gbps(message_bytes(record), median)
    return {"algbw_gbps": algbw, "busbw_gbps": algbw * kernel.bus_factor(record["shape"])}


def per_native_overheads(records: list[Record]) -> None:
    """``metrics.porting_overheads[native]`` and ``metrics.speeds_vs_natives[native]`` (t_native /
    t_portable) of every portable collective record, in place."""
    natives: dict[tuple[Any, ...], dict[str, float]] = {}
    for r in records:
        if r["kernel"] == "allreduce" and r.get("impl_kind") == "native" and r["status"] == "ok":
            natives.setdefault(metrics.case_key(r), {})[r["impl"]] = metrics.median_s(r)
    for r in records:
        if r["kernel"] == "allreduce" and r.get("impl_kind") == "portable" and r["status"] == "ok":
            twins = natives.get(metrics.case_key(r), {})
            r["metrics"]["porting_overheads"] = {
                name: metrics.porting_overhead(t, metrics.median_s(r)) for name, t in twins.items()
            }
            r["metrics"]["speeds_vs_natives"] = {
                name: metrics.speed_ratio(t, metrics.median_s(r)) for name, t in twins.items()
            }


def small_message_latency(records: list[Record], limit: int = SMALL_BYTES) -> tuple[float, Record] | None:
    """Small-message latency of a run: per implementation the largest p50 among ``ok`` messages of at
    most ``limit`` bytes (every small message completes in that), the best implementation's figure.

    Only records with the most ranks count. Returns the p50 and the record it comes from, or None.
    """
    ok = [
        r
        for r in records
        if r["kernel"] == "allreduce"
        and r["status"] == "ok"
        and r["timing"].get("median_s")
        and message_bytes(r) <= limit
    ]
    ranks = max((r["shape"].get("ranks", 1) for r in ok), default=None)
    worst: dict[str, Record] = {}
    for r in ok:
        if r["shape"].get("ranks", 1) == ranks and (
            r["impl"] not in worst or metrics.median_s(worst[r["impl"]]) < metrics.median_s(r)
        ):
            worst[r["impl"]] = r
    if not worst:
        return None
    best = min(worst.values(), key=metrics.median_s)
    return metrics.median_s(best), best


def summarize(doc: Document) -> None:
    """Fill ``doc["collective"]`` with small-message latency and peak busbw, per implementation."""
    ok = [
        r
        for r in doc["records"]
        if r["kernel"] == "allreduce" and r["status"] == "ok" and r["metrics"].get("busbw_gbps") is not None
    ]
    if not ok and "collective" not in doc:
        return
    summary = doc.setdefault("collective", {})
    ranks = max((r["shape"]["ranks"] for r in ok), default=None)
    impls: dict[str, dict[str, Any]] = {}
    for r in ok:
        if r["shape"]["ranks"] != ranks:
            continue
        entry = impls.setdefault(
            r["impl"],
            {
                "impl_kind": r.get("impl_kind"),
                "small_message_latency_s": None,
                "small_message_bytes": None,
                "peak_busbw_gbps": None,
                "peak_busbw_bytes": None,
            },
        )
        p50, nbytes = metrics.median_s(r), message_bytes(r)
        busbw = cast(float, r["metrics"]["busbw_gbps"])  # not None: ``ok`` keeps those with one
        if nbytes <= SMALL_BYTES and r["dtype"] == "fp32" and (entry["small_message_latency_s"] or 0) < p50:
            entry["small_message_latency_s"], entry["small_message_bytes"] = p50, nbytes
        if (entry["peak_busbw_gbps"] or 0) < busbw:
            entry["peak_busbw_gbps"], entry["peak_busbw_bytes"] = busbw, nbytes
    small = small_message_latency(ok)
    peaks = [(e["peak_busbw_gbps"], n) for n, e in impls.items() if e["peak_busbw_gbps"]]
    summary.update(
        {
            "ranks": ranks,
            "nodes": len({p.get("node") for p in summary.get("participants", [])}) or None,
            "small_message_max_bytes": SMALL_BYTES,
            "small_message_latency_s": small[0] if small else None,
            "small_message_latency_impl": small[1]["impl"] if small else None,
            "peak_busbw_gbps": max(peaks)[0] if peaks else None,
            "peak_busbw_impl": max(peaks)[1] if peaks else None,
            "impls": impls,
        }
    )
