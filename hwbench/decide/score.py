"""Platform selection: each candidate's raw figure per dimension, its score, and the weighted total.

A dimension without data is *missing*: it shows as missing with the reason, scores
nothing, and its weight is not handed to the others. ``total`` is therefore a lower bound
(missing dimensions count 0) and ``max_total`` the upper bound (missing dimensions count
100); they are equal when the platform is complete. Platforms rank by ``total``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, cast

from hwbench.core.dtypes import DTYPE_BYTES, is_integer
from hwbench.core.errors import UserError
from hwbench.core.results_types import Record
from hwbench.core.text import printable
from hwbench.decide.catalog import Catalog
from hwbench.decide.figures import ACCELERATOR_KINDS, Raw, ok_records, record_source
from hwbench.decide.platform import Platform
from hwbench.decide.score_training import recovery, time_to_first_step
from hwbench.decide.weights import Dimension
from hwbench.results.checked import Loaded
from hwbench.results.collective_figures import small_message_latency
from hwbench.run.parity import unverified_warning

SIXTEEN_BIT = ("bf16", "fp16")
#: What compute density takes by default, said in the score document.
DEFAULT_DTYPES = "bf16/fp16 on accelerators, fp32 on CPUs"
#: The matrix's network figure is for this many nodes.
MATRIX_RANKS = 8
TOTAL_MEANS = (
    "total = sum over the dimensions with data of weight x score / 100; a missing dimension adds 0 "
    "(its weight is not redistributed), so total is a lower bound and max_total (missing = 100) "
    "the upper bound; both are equal when nothing is missing"
)


def _price(platform: Platform, loaded: Loaded, record: Record, catalog: Catalog) -> tuple[float, str] | None:
    facts = platform.facts
    if "usd_per_hour" in facts:
        source = facts.get("price_source") or f"platform file {platform.platform_file}"
        as_of = f", as of {facts['price_as_of']}" if facts.get("price_as_of") else ""
        return facts["usd_per_hour"], printable(source + as_of)
    given = loaded.doc["run"].get("price")
    if given:
        return float(given["usd_per_hour"]), printable(f"{given['basis']}; {given['source']}; as of {given['as_of']}")
    key = catalog.match(record.get("device") or "")
    quote = catalog.price(key) if key else None
    if quote is None:
        return None
    return quote.usd_per_hour, printable(f"catalog {key}: {quote.basis}; {quote.source}; as of {quote.as_of}")


def _per_usd(tflops: float, usd_per_hour: float, source: dict[str, Any], where: str) -> Raw:
    """TFLOPS per USD an hour, or missing with the reason where the price gives no finite positive figure."""
    if not math.isfinite(usd_per_hour):
        source["usd_per_hour"] = None
    if not (math.isfinite(usd_per_hour) and usd_per_hour > 0):
        return Raw(
            None, source, reason=f"{where} is {usd_per_hour:g} USD an hour: TFLOPS per USD needs a positive price"
        )
    value = tflops / usd_per_hour
    if not math.isfinite(value):
        return Raw(None, source, reason=f"{where} is {usd_per_hour:g} USD an hour: {tflops:g} TFLOPS per it overflows")
    return Raw(value, source)


@dataclass(frozen=True)
class CostBasis:
    """What compute density divides the TFLOPS by, when not the rental price: ``price(platform,
    loaded, record)`` gives the USD per used hour of one device of the record, where it comes
    from and any further figures for the source, or the reason there is none."""

    name: str
    unit: str
    price: Callable[[Platform, Loaded, Record], tuple[float, str, dict[str, Any]] | str]


def gemm_candidates(
    files: Iterable[Loaded], wanted: Callable[[Record], bool] | None = None, dtype: str | None = None
) -> list[tuple[Loaded, int, Record]] | str:
    """The ok GEMM records (with TFLOPS) compute density chooses among: ``dtype``'s where it is
    given, else bf16/fp16, on the accelerators where the files have one, else on the CPUs (fp32
    by default); only those ``wanted`` accepts. Or the reason there is none."""
    rows = [
        (f, i, r, f.device_kind(r))
        for f in files
        for i, r in ok_records(f, "gemm")
        if r["metrics"].get("tflops") and (wanted is None or wanted(r))
    ]
    accel = [row for row in rows if row[3] in ACCELERATOR_KINDS]
    pool = accel or rows
    where = "the accelerator" if accel else "the CPU"
    asked = (dtype,) if dtype else (SIXTEEN_BIT if accel else ("fp32",))
    chosen = [row for row in pool if row[2]["dtype"] in asked]
    if chosen:
        return [row[:3] for row in chosen]
    if not pool:
        return f"no ok GEMM record ({dtype} asked for)" if dtype else f"no ok GEMM record ({DEFAULT_DTYPES})"
    have = ", ".join(sorted({cast(str, row[2]["dtype"]) for row in pool}))  # GEMM records name their dtype
    names = "/".join(asked)
    return (
        f"no ok {names} GEMM record on {where} (only {have}); run hwbench run --kernel gemm --dtype {','.join(asked)}"
    )


def best_gemm(
    files: Iterable[Loaded], wanted: Callable[[Record], bool] | None = None, dtype: str | None = None
) -> tuple[Loaded, int, Record] | str:
    """The candidate GEMM record (:func:`gemm_candidates`) with the most TFLOPS, or why there is none."""
    rows = gemm_candidates(files, wanted, dtype)
    if isinstance(rows, str):
        return rows
    return max(rows, key=lambda row: _tflops(row[2]))


def compute_density(
    platform: Platform, dim: Dimension, catalog: Catalog, cost: CostBasis | None = None, dtype: str | None = None
) -> Raw:
    """Best achieved GEMM TFLOPS (``dtype``'s, else 16-bit on accelerators and fp32 on CPUs; TOPS
    for integers) per USD/hour of one device: its rental price, or with ``cost`` what that basis
    says an hour of the device costs."""
    found = best_gemm(platform.results, dtype=dtype)
    if isinstance(found, str):
        return Raw(None, reason=found)
    raw = _compute_density(platform, catalog, found, cost)
    unverified = unverified_warning(found[2].get("parity"))
    return replace(raw, note=printable(unverified)) if unverified and raw.value is not None else raw


def _compute_density(
    platform: Platform, catalog: Catalog, found: tuple[Loaded, int, Record], cost: CostBasis | None
) -> Raw:
    loaded, index, record = found
    tflops = float(_tflops(record))
    source = record_source(loaded, index, record, tflops=tflops)
    if cost is not None:
        priced = cost.price(platform, loaded, record)
        if isinstance(priced, str):
            return Raw(None, source, reason=priced)
        source.update(usd_per_hour=priced[0], price_source=priced[1], cost_basis=cost.name, **priced[2])
        return _per_usd(tflops, priced[0], source, f"the cost of '{printable(record.get('device'))}' ({cost.name})")
    price = _price(platform, loaded, record, catalog)
    if price is None:
        return Raw(
            None,
            source,
            reason=f"no price for '{printable(record.get('device'))}': give usd_per_hour in a platform "
            "file, or a --catalog file with its price",
        )
    source.update(usd_per_hour=price[0], price_source=price[1])
    return _per_usd(tflops, price[0], source, f"the price of '{printable(record.get('device'))}' ({price[1]})")


def _energy_reason(loaded: Loaded, record: Record) -> str:
    """Why a GEMM record has no TFLOPS per watt: its energy's reason, else its device's sensors line."""
    energy = record.get("energy")
    if isinstance(energy, dict) and energy.get("reason"):
        return str(energy["reason"])
    for entry in loaded.doc.get("sensors") or []:
        same = entry.get("backend") == record.get("backend") and entry.get("device_index") == record.get("device_index")
        if same and entry.get("reason"):
            return str(entry["reason"])
    return "the file has no energy readings (a run where the device's power or energy is readable records them)"


def tflops_per_watt(platform: Platform, dim: Dimension, catalog: Catalog, dtype: str | None = None) -> Raw:
    """Highest ``energy.tflops_per_watt`` among the GEMM records compute density chooses among."""
    rows = gemm_candidates(platform.results, dtype=dtype)
    if isinstance(rows, str):
        return Raw(None, reason=rows)
    measured = [
        (float(cast(float, r["energy"]["tflops_per_watt"])), f, i, r)  # _positive: a number
        for f, i, r in rows
        if isinstance(r.get("energy"), dict) and _positive(r["energy"].get("tflops_per_watt"))
    ]
    if not measured:
        loaded, _, record = max(rows, key=lambda row: _tflops(row[2]))
        device = printable(record.get("device"))
        return Raw(None, reason=f"no GEMM record on '{device}' has TFLOPS per watt: {_energy_reason(loaded, record)}")
    value, loaded, index, record = max(measured, key=lambda row: row[0])
    energy = record["energy"]
    extra = {k: energy.get(k) for k in ("watts", "source", "method", "error_pct") if k in energy}
    return Raw(value, record_source(loaded, index, record, tflops=record["metrics"]["tflops"], **extra))


def _tflops(record: Record) -> float:
    """The TFLOPS of a GEMM candidate (:func:`gemm_candidates` keeps those that have them)."""
    return cast(float, record["metrics"]["tflops"])


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def network(platform: Platform, dim: Dimension, catalog: Catalog) -> Raw:
    """Small-message AllReduce latency (ms), as the run summary defines it: the best implementation's
    slowest p50 over messages of at most ``max_message_bytes``, among the records with the most ranks."""
    limit = int(dim.options.get("max_message_bytes", 1024))
    located = {
        id(record): (loaded, index) for loaded in platform.results for index, record in ok_records(loaded, "allreduce")
    }
    records = [record for loaded in platform.results for _, record in ok_records(loaded, "allreduce")]
    found = small_message_latency(records, limit)
    if found is None:
        return Raw(
            None,
            reason=f"no ok allreduce record with a message of at most {limit} bytes "
            "(run hwbench run --kernel allreduce on the platform's nodes)",
        )
    p50, record = found
    loaded, index = located[id(record)]
    ranks = record["shape"].get("ranks", 1)
    source = record_source(
        loaded,
        index,
        record,
        ranks=ranks,
        message_bytes=record["shape"]["count"] * DTYPE_BYTES[cast(str, record["dtype"])],
        p50_s=p50,
    )
    note = f"{ranks} ranks" + (f" (the matrix asks for {MATRIX_RANKS} nodes)" if ranks < MATRIX_RANKS else "")
    return Raw(p50 * 1e3, source, note=note)


def storage(platform: Platform, dim: Dimension, catalog: Catalog) -> Raw:
    """Highest 4 KiB random-read IOPS among the storage probe records."""
    rows = [
        (cast(float, r["metrics"]["iops"]), f, i, r)  # not None: only those with IOPS
        for f in platform.results
        for i, r in ok_records(f, "storage")
        if r["metrics"].get("iops")
    ]
    if not rows:
        return Raw(None, reason="no ok storage record (run hwbench probe storage --dir DIR on the shared file system)")
    iops, loaded, index, record = max(rows, key=lambda row: row[0])
    return Raw(float(iops), record_source(loaded, index, record, dir=record.get("config", {}).get("dir")))


FIGURES: dict[str, Callable[[Platform, Dimension, Catalog], Raw]] = {
    "compute_density": compute_density,
    "network": network,
    "storage": storage,
    "time_to_first_step": time_to_first_step,
    "recovery": recovery,
    "tflops_per_watt": tflops_per_watt,
}


def _finite(raw: Raw, dim: Dimension) -> Raw:
    """``raw``, or missing with the reason where its figure is not a finite number (a file's extreme figure)."""
    if raw.value is None or math.isfinite(raw.value):
        return raw
    return Raw(None, raw.source, reason=f"{dim.label} came out as {raw.value} {dim.unit}, not a finite number")


def finite_json(doc: Any, what: str) -> str:
    """``doc`` as strict JSON (no NaN or Infinity, which strict parsers refuse); UserError naming the
    first figure that is not finite."""
    path = _not_finite(doc, "$")
    if path is not None:
        raise UserError(f"the {what} has a figure that is not a finite number at {path}: check the inputs' magnitudes")
    return json.dumps(doc, indent=1, allow_nan=False)


def _not_finite(value: Any, path: str) -> str | None:
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _not_finite(item, f"{path}.{key}" if isinstance(key, str) else f"{path}[{key}]")
        if found is not None:
            return found
    return None


def _best(dim: Dimension, values: list[float]) -> float | None:
    if not values:
        return None
    return max(values) if dim.better == "higher" else min(values)


def score_platforms(
    platforms: list[Platform],
    dims: dict[str, Dimension],
    catalog: Catalog,
    weights_source: str = "default",
    cost: CostBasis | None = None,
    dtype: str | None = None,
) -> dict[str, Any]:
    """The score document: the matrix, then each platform's dimensions, totals and rank; compute
    density per rental price, or per what ``cost`` says an hour of a device costs, of ``dtype``'s
    GEMM records (default :data:`DEFAULT_DTYPES`)."""
    figures: dict[str, Callable[[Platform, Dimension, Catalog], Raw]] = dict(FIGURES)
    figures["compute_density"] = partial(compute_density, cost=cost, dtype=dtype)
    figures["tflops_per_watt"] = partial(tflops_per_watt, dtype=dtype)
    if "compute_density" in dims:
        unit = cost.unit if cost is not None else dims["compute_density"].unit
        if dtype and is_integer(dtype):
            unit = unit.replace("TFLOPS", "TOPS")
        dims = {**dims, "compute_density": replace(dims["compute_density"], unit=unit)}
    if "tflops_per_watt" in dims and dtype and is_integer(dtype):
        dims = {**dims, "tflops_per_watt": replace(dims["tflops_per_watt"], unit="TOPS/W")}
    raws = {
        p.name: {name: _finite(figures[name](p, dim, catalog), dim) for name, dim in dims.items()} for p in platforms
    }
    best = {
        name: _best(dim, [v for v in (raws[p.name][name].value for p in platforms) if v is not None])
        for name, dim in dims.items()
    }
    out: list[dict[str, Any]] = []
    for platform in platforms:
        dimensions, total, missing_weight = {}, 0.0, 0.0
        for name, dim in dims.items():
            raw = raws[platform.name][name]
            entry: dict[str, Any] = {"raw": raw.value, "unit": dim.unit, "source": raw.source, "weight": dim.weight}
            if raw.value is None:
                entry.update(missing=True, reason=raw.reason, score=None, weighted=None)
                missing_weight += dim.weight
            else:
                value = dim.score(raw.value, best[name])
                entry.update(missing=False, score=value, weighted=dim.weight * value / 100.0)
                total += entry["weighted"]
            if raw.note:
                entry["note"] = raw.note
            dimensions[name] = entry
        facts = platform.facts
        out.append(
            {
                "name": platform.name,
                "files": [str(f.path) for f in platform.results],
                "platform_file": str(platform.platform_file) if platform.platform_file else None,
                "sla_availability": facts.get("sla_availability"),
                "notes": facts.get("notes"),
                "total": total,
                "max_total": total + missing_weight,
                "covered_weight": sum(d.weight for d in dims.values()) - missing_weight,
                "complete": missing_weight == 0,
                "dimensions": dimensions,
            }
        )
    out.sort(key=lambda p: (-p["total"], -p["covered_weight"], p["name"]))
    for rank, entry in enumerate(out, 1):
        entry["rank"] = rank
    return {
        "kind": "hwbench-score",
        "weights_source": weights_source,
        "cost_basis": cost.name if cost is not None else "rental",
        "compute_dtype": dtype or f"default ({DEFAULT_DTYPES})",
        "dimensions": {name: dim.as_json() for name, dim in dims.items()},
        "total_means": TOTAL_MEANS,
        "platforms": out,
    }
