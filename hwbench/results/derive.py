"""Fill each record's metrics from its timing, its device's peak, its native twin and a price."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from hwbench.core.registry import get_kernel
from hwbench.results import collective_figures as collective
from hwbench.results import metrics


def _devices(doc: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(b["name"], d["index"]): d for b in doc.get("backends", []) for d in b.get("devices", [])}


class Reference(Protocol):
    """What metrics are derived with: device peaks and prices (``hwbench.decide.catalog.Catalog``)."""

    def device_peak(
        self, name: str, own: Mapping[str, float] | None, dtype: str, method: str | None = None
    ) -> tuple[float | None, str | None]: ...

    def device_price(self, name: str) -> Any: ...


def _peak(device: dict[str, Any] | None, dtype: str, reference: Reference) -> tuple[float | None, str | None]:
    if device is None:
        return None, None
    own = device.get("peak") or {}
    return reference.device_peak(device["name"], own.get("tflops"), dtype, own.get("method"))


def _price(doc: dict[str, Any], device: dict[str, Any] | None, reference: Reference) -> tuple[float, str] | None:
    """USD per hour of one device and where the figure comes from: the run's price, else the catalog's."""
    given = doc["run"].get("price")
    quote = given if given else (reference.device_price(device["name"]) if device is not None else None)
    if not quote:
        return None
    if isinstance(quote, dict):
        return quote["usd_per_hour"], f"{quote['basis']}; {quote['source']}; as of {quote['as_of']}"
    return quote.usd_per_hour, f"{quote.basis}; {quote.source}; as of {quote.as_of}"


def _natives(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The native record each portable one is compared with: the first native the backend lists."""
    natives: dict[tuple[Any, ...], dict[str, Any]] = {}
    for record in records:
        if record.get("impl_kind") == "native" and record["status"] == "ok":
            natives.setdefault(metrics.case_key(record), record)
    return natives


def _host_native(
    natives: dict[tuple[Any, ...], dict[str, Any]], record: dict[str, Any], device: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The cpu backend's native twin of a record whose device is the host CPU (e.g. PoCL), if any."""
    if record["backend"] == "cpu" or device is None or not (device.get("extra") or {}).get("host_cpu"):
        return None
    return next((n for key, n in natives.items() if key[0] == "cpu" and key[2:] == metrics.case_key(record)[2:]), None)


def add_metrics(doc: dict[str, Any], catalog: Reference) -> None:
    """Compute tflops, gbps, % of peak, porting overhead and TFLOPS per USD/hour in place,
    with peaks and prices from ``catalog`` (where a device has no peak of its own)."""
    devices = _devices(doc)
    natives = _natives(doc["records"])
    for record in doc["records"]:
        median = record["timing"].get("median_s")
        if record["status"] != "ok" or not median:
            continue
        kernel = get_kernel(record["kernel"])
        device = devices.get((record["backend"], record.get("device_index")))
        achieved = metrics.tflops(kernel.flops(record["shape"]), median)
        peak, peak_source = _peak(device, record["dtype"], catalog)
        quote = _price(doc, device, catalog)
        out = record["metrics"]
        out.update(
            {
                "tflops": achieved,
                "gbps": metrics.gbps(kernel.bytes_moved(record["shape"], record["dtype"]), median),
                "pct_peak": metrics.pct_of_peak(achieved, peak),
                "peak_tflops": peak,
                "peak_source": peak_source,
                "tflops_per_usd_hour": metrics.per_usd_hour(achieved, quote[0] if quote else None),
                "usd_per_hour": quote[0] if quote else None,
                "price_source": quote[1] if quote else None,
                "native_impl": None,
                "porting_overhead": None,
            }
        )
        native = natives.get(metrics.case_key(record))
        if record.get("impl_kind") == "portable" and native is not None:
            out["native_impl"] = native["impl"]
            out["porting_overhead"] = metrics.porting_overhead(native["timing"]["median_s"], median)
        host = _host_native(natives, record, device)
        if host is not None:
            out["host_native_impl"] = host["impl"]
            out["host_native_overhead"] = metrics.porting_overhead(host["timing"]["median_s"], median)
        if kernel.spans_ranks:
            # A collective is bound by links, not by compute: no TFLOPS, share of peak or cost per TFLOPS.
            out.update(
                collective.bandwidths(record, kernel),
                tflops=None,
                pct_peak=None,
                peak_tflops=None,
                peak_source=None,
                tflops_per_usd_hour=None,
            )
    collective.per_native_overheads(doc["records"])
    collective.summarize(doc)
