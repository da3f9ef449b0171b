"""What the report draws, read defensively from results documents.

Every reader here tolerates a missing section, field or value: it returns fewer rows,
never raises, and the page then says "no data" where a section comes out empty.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.decide.catalog import Catalog
from hwbench.results.tables import SHORT


@dataclass(frozen=True)
class Run:
    """One results file as loaded."""

    path: Path
    doc: dict[str, Any]

    @property
    def host(self) -> str:
        return str((self.doc.get("host") or {}).get("hostname") or "?")


@dataclass(frozen=True)
class Device:
    """A device of one run, with the label the report shows for it."""

    run: int
    backend: str
    index: int | None
    name: str
    label: str
    info: dict[str, Any] = field(hash=False, compare=False)


@dataclass(frozen=True)
class Row:
    """One record, with the device (and run) it belongs to."""

    record: dict[str, Any]
    device: Device


def num(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def sub(mapping: Any, key: str) -> dict[str, Any]:
    """``mapping[key]`` when both are dicts, else an empty dict."""
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, dict) else {}


def shape_text(shape: Any) -> str:
    """``M=512,N=512,K=512`` from a shape dict, with the terminal table's short names (B, H, Sq, ...)."""
    return ",".join(f"{SHORT.get(k, k)}={v}" for k, v in shape.items()) if isinstance(shape, dict) else ""


def devices(runs: list[Run]) -> dict[tuple[int, str, int | None], Device]:
    """Every device of every run, labelled uniquely across runs."""
    found: list[tuple[int, str, int | None, str, dict[str, Any]]] = []
    for i, run in enumerate(runs):
        for backend in run.doc.get("backends") or []:
            for dev in backend.get("devices") or []:
                found.append((i, str(backend.get("name")), dev.get("index"), str(dev.get("name")), dev))
        for record in run.doc.get("records") or []:
            key = (i, str(record.get("backend")), record.get("device_index"))
            if record.get("device") and all(f[:3] != key for f in found):
                found.append((*key, str(record["device"]), {}))
    base = {f[:3]: f"{f[3]} ({f[1]}:{f[2]})" for f in found}
    labels = list(base.values())
    out = {}
    for i, backend, index, name, info in found:
        label = base[(i, backend, index)]
        if labels.count(label) > 1:
            hosts = {runs[j].host for j, b, x, _, _ in found if base[(j, b, x)] == label}
            label += f" [{runs[i].host}]" if len(hosts) > 1 else f" [{runs[i].path.stem}]"
        out[(i, backend, index)] = Device(i, backend, index, name, label, info)
    return out


def rows(runs: list[Run]) -> list[Row]:
    """Records that ran on a device (records without one are summarised, not plotted)."""
    table = devices(runs)
    out = []
    for i, run in enumerate(runs):
        for record in run.doc.get("records") or []:
            dev = table.get((i, str(record.get("backend")), record.get("device_index")))
            if dev is not None and isinstance(record, dict):
                out.append(Row(record, dev))
    return out


def peak_tflops(device: Device, dtype: str, catalog: Catalog, records: Iterable[dict[str, Any]] = ()) -> float | None:
    """Peak for ``dtype``: as the records state it, else the device's own, else the datasheet's."""
    for record in records:
        value = num(sub(record, "metrics").get("peak_tflops"))
        if value and record.get("dtype") == dtype:
            return value
    own = {dtype: value} if (value := num(sub(sub(device.info, "peak"), "tflops").get(dtype))) else None
    return catalog.device_peak(device.name, own, dtype)[0]


def mem_gbps(device: Device, catalog: Catalog) -> tuple[float | None, str]:
    """Peak memory bandwidth in GB/s and where it comes from (None when unknown)."""
    own = num(sub(device.info, "peak").get("mem_gbps"))
    if own:
        return own, "reported by the backend"
    found = catalog.memory_bandwidth(device.name)
    if found is not None:
        return found.gbps, f"datasheet {found.key} ({found.as_of or '?'})"
    return None, "unknown"


def roofline_points(device_rows: list[Row]) -> list[dict[str, Any]]:
    """Achieved TFLOPS and arithmetic intensity (flop/byte) of every ok record with both."""
    out = []
    for row in device_rows:
        r, m = row.record, sub(row.record, "metrics")
        tf, gb = num(m.get("tflops")), num(m.get("gbps"))
        if r.get("status") != "ok" or not tf or not gb or r.get("kernel") == "allreduce":
            continue
        out.append(
            {
                "kernel": r.get("kernel"),
                "impl": r.get("impl"),
                "kind": r.get("impl_kind") or "",
                "dtype": r.get("dtype") or "",
                "shape": shape_text(r.get("shape")),
                "tflops": tf,
                "ai": tf * 1000.0 / gb,
                "gbps": gb,
                "pct_peak": num(m.get("pct_peak")),
                "record": r,
            }
        )
    return out


def _median_s(record: dict[str, Any]) -> float | None:
    timing = sub(record, "timing")
    return num(timing.get("median_s")) or num(timing.get("p50_s"))


def overhead_rows(all_rows: list[Row]) -> list[dict[str, Any]]:
    """Portable records with a porting overhead, each with its native twin's median."""
    natives: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in all_rows:
        r = row.record
        if r.get("impl_kind") == "native" and r.get("status") == "ok":
            natives.setdefault(
                (row.device, r.get("kernel"), r.get("impl"), r.get("dtype"), shape_text(r.get("shape"))), r
            )
    out = []
    for row in all_rows:
        r, m = row.record, sub(row.record, "metrics")
        overhead = num(m.get("porting_overhead"))
        if overhead is None or r.get("impl_kind") != "portable":
            continue
        native = natives.get(
            (row.device, r.get("kernel"), m.get("native_impl"), r.get("dtype"), shape_text(r.get("shape")))
        )
        out.append(
            {
                "device": row.device,
                "backend": r.get("backend"),
                "kernel": r.get("kernel"),
                "impl": r.get("impl"),
                "native": m.get("native_impl") or "?",
                "dtype": r.get("dtype") or "",
                "shape": shape_text(r.get("shape")),
                "overhead": overhead,
                # t_native / t_portable; older files have only the overhead, which is 1 - that ratio
                "ratio": num(m.get("speed_vs_native")) or 1.0 - overhead,
                "median_s": _median_s(r),
                "native_median_s": _median_s(native) if native else None,
            }
        )
    return out


def parity_rows(all_rows: list[Row]) -> list[dict[str, Any]]:
    """Every record whose output was checked, failures first."""
    out = []
    for row in all_rows:
        r, p = row.record, sub(row.record, "parity")
        if p.get("passed") is None:
            continue
        err, atol = num(p.get("max_abs_err")), num(p.get("atol"))
        out.append(
            {
                "device": row.device,
                "kernel": r.get("kernel"),
                "impl": r.get("impl"),
                "dtype": r.get("dtype") or "",
                "shape": shape_text(r.get("shape")),
                "passed": bool(p["passed"]),
                "max_abs_err": err,
                "atol": atol,
                "max_rel_err": num(p.get("max_rel_err")),
                "rtol": num(p.get("rtol")),
                "mismatches": p.get("mismatches"),
                "exact": p.get("exact"),
                "ratio": err / atol if err is not None and atol else None,
            }
        )
    return sorted(out, key=lambda x: (x["passed"], x["device"].label, x["kernel"] or "", x["impl"] or ""))


def allreduce_points(all_rows: list[Row]) -> list[dict[str, Any]]:
    """AllReduce records: message size, p50/p99 latency, algbw and busbw (nccl-tests' definitions).

    Bandwidths a record lacks are derived from its size and median: algbw = bytes / time,
    busbw = algbw * 2 (ranks - 1) / ranks.
    """
    out = []
    for row in all_rows:
        r, m, t, shape = row.record, sub(row.record, "metrics"), sub(row.record, "timing"), sub(row.record, "shape")
        if r.get("kernel") != "allreduce" or r.get("status") != "ok":
            continue
        count, ranks = shape.get("count"), shape.get("ranks")
        size = num(m.get("message_bytes")) or (
            float(count * DTYPE_BYTES[r["dtype"]]) if isinstance(count, int) and r.get("dtype") in DTYPE_BYTES else None
        )
        p50 = _median_s(r)
        if not size or not p50:
            continue
        algbw = num(m.get("algbw_gbps")) or size / p50 / 1e9
        busbw = num(m.get("busbw_gbps"))
        if busbw is None and isinstance(ranks, int) and ranks > 0:
            busbw = algbw * 2 * (ranks - 1) / ranks
        out.append(
            {
                "device": row.device,
                "impl": r.get("impl"),
                "kind": r.get("impl_kind") or "",
                "dtype": r.get("dtype") or "",
                "ranks": ranks,
                "bytes": size,
                "p50_s": p50,
                "variant": shape_text({k: v for k, v in shape.items() if k not in ("count", "ranks")}),
                "p99_s": num(t.get("p99_s")),
                "algbw": algbw,
                "busbw": busbw,
                "derived": m.get("busbw_gbps") is None,
            }
        )
    return sorted(
        out, key=lambda x: (x["device"].label, x["impl"] or "", x["dtype"], x["ranks"] or 0, x["variant"], x["bytes"])
    )


def not_ok(runs: list[Run]) -> list[dict[str, Any]]:
    """Records that did not run or failed, grouped by (run, backend, status, reason) with their kernels."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for i, run in enumerate(runs):
        for r in run.doc.get("records") or []:
            if r.get("status") == "ok":
                continue
            key = (i, r.get("backend"), r.get("status"), r.get("reason") or "")
            group = groups.setdefault(
                key,
                {
                    "run": run.path.name,
                    "backend": r.get("backend"),
                    "status": r.get("status"),
                    "reason": r.get("reason") or "",
                    "cases": 0,
                    "kernels": [],
                },
            )
            group["cases"] += 1
            if r.get("kernel") not in group["kernels"]:
                group["kernels"].append(r.get("kernel"))
    return sorted(groups.values(), key=lambda g: (g["status"] == "skipped", g["run"], str(g["backend"])))
