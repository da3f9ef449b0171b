"""Fill each record's metrics from its timing, its device's peak, its native twin and a price."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, cast

from hwbench.core.backend import described_kind
from hwbench.core.records import empty_metrics, failed
from hwbench.core.registry import get_kernel
from hwbench.core.results_types import DescribedDevice, Document, Record
from hwbench.results import collective_figures as collective
from hwbench.results import metrics
from hwbench.run.case import error_line

Devices = dict[tuple[Any, ...], DescribedDevice]


def _devices(doc: Document) -> Devices:
    return {(b["name"], d["index"]): d for b in doc.get("backends", []) for d in b.get("devices", [])}


class Unusable(Exception):
    """A record whose figures hwbench cannot stand behind: ``status`` and why."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class CacheFigure(Protocol):
    """A last-level cache size as a reference gives it (``hwbench.decide.catalog.CacheSize``)."""

    @property
    def bytes(self) -> int: ...


class BandwidthFigure(Protocol):
    """A memory bandwidth as a reference gives it (``hwbench.decide.catalog.Bandwidth``)."""

    @property
    def key(self) -> str: ...
    @property
    def gbps(self) -> float: ...
    @property
    def source(self) -> str: ...
    @property
    def as_of(self) -> str: ...


class Reference(Protocol):
    """What metrics are derived with (``hwbench.decide.catalog.Catalog``): device peaks, prices,
    last-level caches and memory bandwidths, each None (or a None peak) where it knows none."""

    def device_peak(
        self, name: str, own: Mapping[str, float] | None, dtype: str, method: str | None = None
    ) -> tuple[float | None, str | None]: ...

    def device_price(self, name: str) -> Any: ...

    def last_level_cache(self, device_name: str) -> CacheFigure | None: ...

    def memory_bandwidth(self, device_name: str) -> BandwidthFigure | None: ...


class Gated(NamedTuple):
    """A record's figures once the plausibility gate passed them."""

    median_s: float
    tflops: float
    peak: float | None
    peak_source: str | None
    #: What the gate checked the TFLOPS against (``metrics.peak_check``).
    peak_check: str
    #: A bandwidth kernel's memory peak in GB/s, its source and the check made (None without one).
    bandwidth: tuple[float, str, str] | None
    #: A host copy's link rate in GB/s and its source (None where it is not one).
    link: tuple[float, str] | None


def _peak(
    device: DescribedDevice | None, dtype: str, reference: Reference, native: bool = True
) -> tuple[float | None, str | None]:
    """The device's ``dtype`` peak and its source; for a kernel that is not a vendor library's
    (``native`` False) on a CPU whose ISA level is emulated, the emulated level's (``portable_peak``):
    a library keeps the host's own ISA, hwbench's kernels are compiled for the level."""
    if device is None:
        return None, None
    portable = (device.get("extra") or {}).get("portable_peak") or {}
    if not native and isinstance(portable.get("tflops"), dict) and dtype in portable["tflops"]:
        value = portable["tflops"][dtype]
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Unusable("runtime_error", f"the emulated level's {dtype} peak is not a number: no share of peak")
        level = portable.get("isa_level") or "the emulated ISA level"
        return float(value), f"the portable kernels' peak at {level}: {portable.get('method') or 'measured'}"
    own = device.get("peak") or {}
    tflops = own.get("tflops")
    if (tflops or {}).get(dtype, 0.0) is None:  # NaN or infinite when the worker sent it
        raise Unusable("runtime_error", f"the backend reports a {dtype} peak that is not a number: no share of peak")
    # The reference reads only this dtype's peak, a number here (another dtype's None is dropped later).
    return reference.device_peak(device["name"], cast("Mapping[str, float] | None", tflops), dtype, own.get("method"))


def _price(doc: Document, device: DescribedDevice | None, reference: Reference) -> tuple[float, str] | None:
    """USD per hour of one device and where the figure comes from: the run's price, else the catalog's."""
    given = doc["run"].get("price")
    quote = given if given else (reference.device_price(device["name"]) if device is not None else None)
    if not quote:
        return None
    if isinstance(quote, dict):
        return quote["usd_per_hour"], f"{quote['basis']}; {quote['source']}; as of {quote['as_of']}"
    return quote.usd_per_hour, f"{quote.basis}; {quote.source}; as of {quote.as_of}"


Natives = dict[tuple[Any, ...], Record]


def _dtype(record: Record) -> str:
    """The dtype of a record the runner ran (every case has one; a probe's records are not derived)."""
    return cast(str, record["dtype"])


def _natives(records: list[Record]) -> tuple[Natives, Natives]:
    """Per case, the native record each portable one is compared with (the first native the
    backend lists) and the fastest ok native (the best a user can get from a vendor library)."""
    first: Natives = {}
    fastest: Natives = {}
    for record in records:
        if record.get("impl_kind") != "native" or record["status"] != "ok":
            continue
        key = metrics.case_key(record)
        first.setdefault(key, record)
        if key not in fastest or metrics.median_s(record) < metrics.median_s(fastest[key]):
            fastest[key] = record
    return first, fastest


def _host_backends(doc: Document) -> set[str]:
    """The names of the document's backends of kind ``cpu`` (the host's cores)."""
    return {str(b.get("name")) for b in doc.get("backends", []) if described_kind(b) == "cpu"}


def _host_native(
    natives: Natives,
    record: Record,
    device: DescribedDevice | None,
    hosts: set[str],
) -> Record | None:
    """The native twin on a backend of kind ``cpu`` (``hosts``) of a record another backend ran on
    the host CPU (e.g. PoCL), if any."""
    if record["backend"] in hosts or device is None or not (device.get("extra") or {}).get("host_cpu"):
        return None
    return next((n for key, n in natives.items() if key[0] in hosts and key[2:] == metrics.case_key(record)[2:]), None)


def _gate(record: Record, device: DescribedDevice | None, reference: Reference) -> Gated:
    """The record's median, TFLOPS and peak, checked: Unusable when a figure is not a number
    hwbench can use, or the throughput is above what the device can do for that dtype."""
    median = record["timing"].get("median_s")
    if not isinstance(median, (int, float)) or not math.isfinite(median) or median <= 0:
        raise Unusable("runtime_error", f"median time {median!r} s is not a positive number of seconds")
    kernel = get_kernel(record["kernel"])
    achieved = metrics.tflops(kernel.flops(record["shape"]), median)
    native = record.get("impl_kind") == "native"
    dtype = _dtype(record)
    peak, peak_source = _peak(device, dtype, reference, native)
    if peak is not None and not (math.isfinite(peak) and peak > 0):
        why = f"the device's {record['dtype']} peak is {peak!r} TFLOPS ({peak_source}): not a figure to divide by"
        raise Unusable("runtime_error", why)
    if kernel.spans_ranks:
        check = "not checked: a collective is bound by links, not by compute"
    elif peak is None:
        check = f"not checked: no {record['dtype']} peak known for this device"
    else:
        if native:
            remeasured = bool(((device.get("extra") if device else None) or {}).get("peak_remeasured"))
            reason = metrics.implausible_native(achieved, peak, dtype, peak_source, remeasured)
        else:
            reason = metrics.implausible(achieved, peak, dtype, peak_source)
        if reason:
            raise Unusable("implausible", reason)
        check = f"at most {metrics.PLAUSIBLE_PEAK_FRACTION:g}x the {record['dtype']} peak"
    bandwidth = _bandwidth_gate(record, kernel, median, device, reference) if kernel.bandwidth_bound else None
    link = _host_link_gate(record, kernel, median, device)
    return Gated(float(median), achieved, peak, peak_source, check, bandwidth, link)


def _host_link_gate(
    record: Record, kernel: Any, median: float, device: DescribedDevice | None
) -> tuple[float, str] | None:
    """A host copy's link rate (GB/s per direction) and its source, from the device's description
    (None without one); Unusable when the copy moved more than the link carries."""
    extra = (device.get("extra") if device else None) or {}
    rate = extra.get("host_link_gbps")
    if (record.get("config") or {}).get("link") != "host" or not isinstance(rate, (int, float)) or not rate > 0:
        return None
    source = f"{extra.get('host_link') or 'host link'}, {extra.get('host_link_source') or 'the device description'}"
    moved = metrics.gbps(kernel.bytes_moved(record["shape"], _dtype(record)), median)
    why = "the timed copies did not move the bytes counted"
    reason = metrics.above_ceiling(moved, float(rate), "GB/s", "the device's host link", source, why)
    if reason:
        raise Unusable("implausible", reason)
    return float(rate), source


#: A bandwidth kernel's arrays this many times the device's last-level cache come from memory.
CACHE_MARGIN = 4


def _cache_bytes(device: DescribedDevice, reference: Reference) -> int | None:
    """The device's last-level cache: the largest its backend reports (cpu ``cache_bytes``, opencl
    ``global_mem_cache_bytes``, GPUs ``l2_bytes`` and ``llc_bytes``, the figures the flushes use), else
    the catalog's."""
    extra = device.get("extra") or {}
    own = [v for k in CACHE_KEYS if isinstance(v := extra.get(k), int) and not isinstance(v, bool) and v > 0]
    if own:
        return max(own)
    found = reference.last_level_cache(device["name"])
    return int(found.bytes) if found is not None else None


#: The keys of a device's ``extra`` that name a cache size in bytes, as the backends write them.
CACHE_KEYS = ("cache_bytes", "global_mem_cache_bytes", "l2_bytes", "llc_bytes")


def _memory_peak(device: DescribedDevice, reference: Reference) -> tuple[float, str] | None:
    """The device's memory bandwidth in GB/s and where it comes from: its backend's own
    (``peak.mem_gbps``), else the datasheet's."""
    own = (device.get("peak") or {}).get("mem_gbps")
    if isinstance(own, (int, float)) and not isinstance(own, bool) and own > 0:
        return float(own), "reported by the backend"
    found = reference.memory_bandwidth(device["name"])
    return (found.gbps, f"datasheet {found.key} ({found.source}, {found.as_of})") if found is not None else None


def _bandwidth_gate(
    record: Record, kernel: Any, median: float, device: DescribedDevice | None, reference: Reference
) -> tuple[float, str, str] | None:
    """A bandwidth kernel's memory bandwidth peak, its source and the check made against it (None
    without one); Unusable when the GB/s is above the peak on arrays past the last-level cache."""
    found = _memory_peak(device, reference) if device is not None else None
    if found is None or device is None:
        return None
    peak_gbps, source = found
    moved = kernel.bytes_moved(record["shape"], _dtype(record))
    cache = _cache_bytes(device, reference)
    if cache is None or moved < CACHE_MARGIN * cache:
        held = "no last-level cache size known" if cache is None else f"{moved / 2**20:.0f} MiB may sit in cache"
        return peak_gbps, source, f"not checked: {held}"
    reason = metrics.implausible_bandwidth(metrics.gbps(moved, median), peak_gbps, source)
    if reason:
        raise Unusable("implausible", reason)
    return peak_gbps, source, f"at most {metrics.PLAUSIBLE_PEAK_FRACTION:g}x the memory bandwidth"


def add_metrics(doc: Document, catalog: Reference) -> None:
    """Compute tflops, gbps, % of peak (and of the memory bandwidth for bandwidth kernels), porting
    overhead and TFLOPS per USD/hour in place,
    with peaks and prices from ``catalog`` (where a device has no peak of its own).

    A record whose figures cannot be derived (a median that is not a positive time, a peak
    that is not a positive number) becomes ``runtime_error``, one above 1.05x its device's
    peak for its dtype ``implausible``, each with the reason; derivation never raises.
    """
    devices = _devices(doc)
    gated: dict[int, Gated] = {}
    for number, record in enumerate(doc["records"]):
        if record["status"] != "ok":
            continue
        try:
            gated[number] = _gate(record, devices.get((record["backend"], record.get("device_index"))), catalog)
        except Unusable as refused:
            failed(record, refused.status, refused.reason)
        except Exception as exc:  # a kernel's or backend's figure that breaks the formulas
            failed(record, "runtime_error", f"deriving its metrics failed: {error_line(exc)}")
    natives, fastest = _natives(doc["records"])
    hosts = _host_backends(doc)
    for number, figures in gated.items():
        record = doc["records"][number]
        try:
            _fill(doc, record, figures, devices, natives, hosts, catalog)
            _against_fastest(record, fastest)
        except Exception as exc:
            record["metrics"] = empty_metrics()
            failed(record, "runtime_error", f"deriving its metrics failed: {error_line(exc)}")
    _drop_broken_peaks(doc, devices)
    try:
        collective.per_native_overheads(doc["records"])
        collective.summarize(doc)
    except Exception as exc:
        doc.setdefault("warnings", []).append(f"collective figures not derived: {error_line(exc)}")


def _against_fastest(record: Record, fastest: Natives) -> None:
    """A portable record's speed against the fastest native of its case (which need not be the first listed)."""
    native = fastest.get(metrics.case_key(record))
    if record.get("impl_kind") != "portable" or native is None:
        return
    record["metrics"]["fastest_native_impl"] = native["impl"]
    record["metrics"]["speed_vs_fastest_native"] = metrics.speed_ratio(
        metrics.median_s(native), metrics.median_s(record)
    )


def _drop_broken_peaks(doc: Document, devices: Devices) -> None:
    """Peaks a backend reported as NaN or infinite (null once sent) leave the file, with a warning."""
    for (backend, index), device in devices.items():
        peaks = (device.get("peak") or {}).get("tflops") or {}
        for dtype in [d for d, value in peaks.items() if value is None]:
            del peaks[dtype]
            doc.setdefault("warnings", []).append(
                f"{backend}:{index} reported a {dtype} peak that is not a number; dropped, its records refused"
            )


def per_watt(record: Record, kernel: Any) -> None:
    """A measured energy's TFLOPS per watt (TFLOP per joule) and, for a bandwidth kernel, GB/s per watt."""
    energy = record["energy"]
    joules = energy.get("joules_per_call")
    shape, dtype = record["shape"], record["dtype"]
    energy["tflops_per_watt"] = None if kernel.spans_ranks else metrics.per_joule(kernel.flops(shape), joules, 1e12)
    moved = kernel.bytes_moved(shape, dtype) if kernel.bandwidth_bound else None
    energy["gbps_per_watt"] = metrics.per_joule(moved, joules, 1e9) if moved is not None else None


def _fill(
    doc: Document,
    record: Record,
    figures: Gated,
    devices: Devices,
    natives: Natives,
    hosts: set[str],
    catalog: Reference,
) -> None:
    """The metrics of one gated record; ``hosts``: the document's backends of kind ``cpu``
    (:func:`_host_backends`), found once for all its records."""
    median, achieved, peak, peak_source, check = (
        figures.median_s,
        figures.tflops,
        figures.peak,
        figures.peak_source,
        figures.peak_check,
    )
    bandwidth, link = figures.bandwidth, figures.link
    kernel = get_kernel(record["kernel"])
    device = devices.get((record["backend"], record.get("device_index")))
    quote = _price(doc, device, catalog)
    out = record["metrics"]
    gbps = metrics.gbps(kernel.bytes_moved(record["shape"], _dtype(record)), median)
    out.update(
        {
            "tflops": achieved,
            "gbps": gbps,
            "pct_peak": metrics.pct_of_peak(achieved, peak),
            "peak_tflops": peak,
            "peak_source": peak_source,
            "peak_check": check,
            "tflops_per_usd_hour": metrics.per_usd_hour(achieved, quote[0] if quote else None),
            "usd_per_hour": quote[0] if quote else None,
            "price_source": quote[1] if quote else None,
            "native_impl": None,
            "porting_overhead": None,
            "speed_vs_native": None,
        }
    )
    if kernel.bandwidth_bound:
        peak_gbps, bw_source, bw_check = bandwidth if bandwidth else (None, None, None)
        out.update(
            {
                "pct_bw_peak": metrics.pct_of_bandwidth(gbps, peak_gbps),
                "bw_peak_gbps": peak_gbps,
                "bw_peak_source": bw_source,
                "bw_peak_check": bw_check or "not checked: no memory bandwidth known for this device",
            }
        )
    if link is not None:
        share = metrics.pct_of_bandwidth(gbps, link[0])
        out.update({"pct_host_link": share, "host_link_gbps": link[0], "host_link_source": link[1]})
    native = natives.get(metrics.case_key(record))
    if record.get("impl_kind") == "portable" and native is not None:
        out["native_impl"] = native["impl"]
        out["porting_overhead"] = metrics.porting_overhead(metrics.median_s(native), median)
        out["speed_vs_native"] = metrics.speed_ratio(metrics.median_s(native), median)
    if record.get("energy"):
        per_watt(record, kernel)
    host = _host_native(natives, record, device, hosts)
    if host is not None:
        out["host_native_impl"] = host["impl"]
        out["host_native_overhead"] = metrics.porting_overhead(metrics.median_s(host), median)
    if kernel.spans_ranks:
        # A collective is bound by links, not by compute: no TFLOPS, share of peak or cost per TFLOPS.
        found = collective.bandwidths(record, kernel)
        out.update({"algbw_gbps": found["algbw_gbps"], "busbw_gbps": found["busbw_gbps"]})
        out.update(
            {"tflops": None, "pct_peak": None, "peak_tflops": None, "peak_source": None, "tflops_per_usd_hour": None}
        )
