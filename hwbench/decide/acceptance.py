"""Accepting a node: floors (what each device must reach) and the verdict of results files on them.

Floors (:mod:`hwbench.decide.floors`) ship in ``data/floors.toml`` per device model, each with
its reason; a user's file of the same layout overrides them floor by floor. A check is judged
for every device the files measured (a record on it, a burn or a health entry):

- ``gemm_pct_peak``: per dtype the best GEMM (most TFLOPS), its ``metrics.pct_peak``;
- ``stream_gbps``: the best stream triad (``op=3``), GB/s;
- ``allreduce_busbw_gbps`` and ``allreduce_latency_us``: once per host and backend, from the ok
  AllReduce records of 2 or more ranks (those with the most ranks);
- ``burn_decay_pct``: the worst ``burn[].decay_pct`` of the device;
- ``mismatches``: ``burn[].mismatches`` plus the device's records that failed parity;
- ``health_clean``: ``health[].clean`` (false anywhere fails; null everywhere is missing).

Each check is PASS, FAIL or MISSING (no measurement); a figure without a floor is listed as not
judged. A burn that did not happen in full (status ``error`` or ``interrupted``, stopped by a
signal, no iteration run, or in a file whose run is incomplete: a burn killed before it finished
its file) FAILs both burn checks of its device whatever the other figures: its decay and its
checks cover less than was asked, and ``--allow-missing`` does not pass over it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from hwbench.core.burn_types import BurnEntry
from hwbench.core.results_types import Record
from hwbench.decide.floors import CHECKS, Check, Floor, Floors
from hwbench.results.checked import Loaded
from hwbench.results.collective_figures import small_message_latency
from hwbench.run.parity import unverified_warning

PASS, FAIL, MISSING = "PASS", "FAIL", "MISSING"


@dataclass
class Unit:
    """What is judged together: one device (``index`` set) or one host's AllReduce on a backend."""

    host: str
    backend: str
    index: int | None
    name: str
    kind: str
    records: list[tuple[str, Record]] = field(default_factory=list)
    burns: list[tuple[str, BurnEntry]] = field(default_factory=list)
    health: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: the burn entries (by source) of files whose run is marked incomplete
    cut: set[str] = field(default_factory=set)

    @property
    def label(self) -> str:
        where = f"{self.backend}:{self.index}" if self.index is not None else f"{self.backend} AllReduce"
        return f"{self.name} ({where})"


def _entry_name(entry: Mapping[str, Any]) -> str:
    device = entry.get("device")
    if isinstance(device, dict):
        device = device.get("name")
    return str(device or f"{entry.get('backend')}:{entry.get('device_index')}")


def _kind(loaded: Loaded, backend: str, index: Any) -> str:
    kind = loaded.device_kind({"backend": backend, "device_index": index})
    if kind == "unknown":
        return "gpu" if loaded.backend_kind(backend) == "gpu" else "accelerator"
    return kind


def gather(files: Iterable[Loaded]) -> list[Unit]:
    """Every unit the files measured, with its records, burn and health entries."""
    units: dict[tuple[str, str, int | None], Unit] = {}

    def unit(loaded: Loaded, host: str, backend: str, index: int | None, name: str) -> Unit:
        key = (host, backend, index)
        if key not in units:
            units[key] = Unit(host, backend, index, name, _kind(loaded, backend, index if index is not None else 0))
        return units[key]

    for loaded in files:
        host = str(loaded.doc["host"].get("hostname", "?"))
        for number, record in loaded.records():
            index, device = record.get("device_index"), record.get("device")
            if not isinstance(index, int) or index < 0 or not device:
                continue
            node = None if record["kernel"] == "allreduce" else index  # AllReduce: once per host and backend
            unit(loaded, host, record["backend"], node, device).records.append((loaded.where(number), record))
        for section, attr in (("burn", "burns"), ("health", "health")):
            for number, entry in enumerate(cast(Mapping[str, Any], loaded.doc).get(section) or []):
                if not isinstance(entry, dict) or not isinstance(entry.get("device_index"), int):
                    continue
                found = unit(loaded, host, str(entry.get("backend")), entry["device_index"], _entry_name(entry))
                where = f"{loaded.path}#{section}[{number}]"
                getattr(found, attr).append((where, entry))
                if section == "burn" and loaded.doc["run"].get("incomplete"):
                    found.cut.add(where)
    for (host, backend, index), found in list(units.items()):  # every host's backend is judged on AllReduce
        if index is not None and (host, backend, None) not in units:
            units[(host, backend, None)] = Unit(host, backend, None, found.name, found.kind)
    return sorted(units.values(), key=lambda u: (u.host, u.backend, u.index is None, u.index or 0))


@dataclass(frozen=True)
class Figure:
    """A unit's measured figure for one check (None when not measured), what it is or why it is
    missing, and the record or entry it comes from."""

    value: Any
    detail: str
    source: str | None = None
    #: the burns behind the figure that did not happen in full, (source, why) (any: the check FAILs)
    unfinished: tuple[tuple[str, str], ...] = ()


#: What measures each figure, for MISSING lines.
HINTS = {
    "gemm_pct_peak": "`hwbench run --kernel gemm --search` measures it",
    "stream_gbps": "`hwbench run --kernel stream --profile standard` measures it",
    "allreduce_busbw_gbps": "`hwbench run --kernel allreduce --ranks N` measures it",
    "allreduce_latency_us": "`hwbench run --kernel allreduce --ranks N` measures it",
    "burn_decay_pct": "`hwbench burn` measures it",
    "mismatches": "`hwbench burn` checks results under load",
    "health_clean": "`hwbench burn` records the health readings",
}


def _absent(unit: Unit, kernel: str, name: str, what: str = "record", dtype: str | None = None) -> str:
    """Why a figure is missing: no ok ``what`` of ``kernel`` (of ``dtype`` when given), or only
    failed ones (counted by status), and what measures it."""
    statuses: dict[str, int] = {}
    for _, record in unit.records:
        if record["kernel"] == kernel and (dtype is None or record.get("dtype") == dtype):
            statuses[record["status"]] = statuses.get(record["status"], 0) + 1
    seen = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    label = " ".join(part for part in ("no ok", dtype, kernel, what) if part)
    return label + (f" ({seen})" if seen else "") + f"; {HINTS[name]}"


def _gemm(unit: Unit) -> dict[str, Figure]:
    """Per dtype the best GEMM's share of peak."""
    best: dict[str, tuple[float, str, Record]] = {}
    for where, record in unit.records:
        dtype = record.get("dtype")
        if record["kernel"] != "gemm" or record["status"] != "ok" or not dtype:
            continue
        tflops = record["metrics"].get("tflops") or 0.0
        if dtype not in best or tflops > best[dtype][0]:
            best[dtype] = (tflops, where, record)
    out = {}
    for dtype, (tflops, where, record) in sorted(best.items()):
        m, shape = record["metrics"], ",".join(f"{k}={v}" for k, v in record["shape"].items())
        if m.get("pct_peak") is None:
            why = m.get("peak_check") or "no peak known"
            out[dtype] = Figure(None, f"best {dtype} GEMM {tflops:.4g} TFLOPS has no share of peak ({why})", where)
            continue
        detail = (
            f"{tflops:.4g} TFLOPS ({record['impl']} {shape}) of {m.get('peak_tflops'):.4g} ({m.get('peak_source')})"
        )
        out[dtype] = Figure(m["pct_peak"], detail + _unverified(record), where)
    return out


def _unverified(record: Record) -> str:
    """``; timed calls not verified: WHY`` where the record's timed calls could not be checked."""
    warning = unverified_warning(record.get("parity"))
    return f"; {warning}" if warning else ""


def _stream(unit: Unit) -> Figure:
    best: tuple[float, str, Record] | None = None
    for where, record in unit.records:
        if record["kernel"] == "stream" and record["status"] == "ok" and record["shape"].get("op") == 3:
            gbps = record["metrics"].get("gbps")
            if gbps is not None and (best is None or gbps > best[0]):
                best = (gbps, where, record)
    if best is None:
        return Figure(None, _absent(unit, "stream", "stream_gbps", "triad record (op=3)"))
    gbps, where, record = best
    detail = f"{record['impl']} {record['dtype']} n={record['shape'].get('n')}" + _unverified(record)
    return Figure(gbps, detail, where)


def _collectives(unit: Unit) -> list[tuple[str, Record]]:
    return [
        (where, r)
        for where, r in unit.records
        if r["kernel"] == "allreduce" and r["status"] == "ok" and r["shape"].get("ranks", 1) >= 2
    ]


def _busbw(unit: Unit) -> Figure:
    ok = _collectives(unit)
    ranks = max((r["shape"]["ranks"] for _, r in ok), default=0)
    best = max(
        ((r["metrics"].get("busbw_gbps") or 0.0, where, r) for where, r in ok if r["shape"]["ranks"] == ranks),
        default=None,
        key=lambda item: item[0],
    )
    if best is None:
        return Figure(None, _absent(unit, "allreduce", "allreduce_busbw_gbps", "record of 2 or more ranks"))
    gbps, where, r = best
    return Figure(gbps, f"{r['impl']} {r['dtype']} {ranks} ranks, count {r['shape'].get('count')}", where)


def _latency(unit: Unit) -> Figure:
    ok = _collectives(unit)
    found = small_message_latency([r for _, r in ok])
    if found is None:
        return Figure(None, _absent(unit, "allreduce", "allreduce_latency_us", "record of 2 or more ranks up to 1 KiB"))
    p50, record = found
    where = next(w for w, r in ok if r is record)
    return Figure(p50 * 1e6, f"{record['impl']} {record['shape']['ranks']} ranks, largest p50 up to 1 KiB", where)


def unfinished(entry: Mapping[str, Any], cut: bool = False) -> str:
    """Why a burn entry is not a burn that happened in full ('' when it is): it errored, was
    interrupted or stopped by a signal, ran no iteration, or its file's run is incomplete (``cut``)."""
    status, reason = entry.get("status"), str(entry.get("reason") or "").strip()
    if status == "error":
        return f"burn error: {reason or 'no reason given'}"
    if status == "interrupted":
        return f"burn interrupted: {reason or 'stopped by ' + str(entry.get('stopped_by'))}"
    if entry.get("stopped_by"):
        return f"burn interrupted: stopped by {entry['stopped_by']} before its end"
    if not entry.get("iterations"):
        return "burn incomplete: it ran no iteration"
    if cut:
        return "burn incomplete: its file's run is marked incomplete (the burn did not finish it)"
    return ""


def _unfinished(unit: Unit) -> list[tuple[str, str]]:
    """The unit's burns that did not happen in full: (source, why)."""
    found = [(where, unfinished(entry, where in unit.cut)) for where, entry in unit.burns]
    return [(where, why) for where, why in found if why]


def _rerun(unit: Unit, figure: Figure) -> Figure:
    """``figure`` failed by the unit's burns that did not happen in full, saying why."""
    cut = _unfinished(unit)
    if not cut:
        return figure
    said = "; ".join(why for _, why in cut) + " (not a full burn: rerun `hwbench burn`)"
    detail = f"{said}; {figure.detail}" if figure.detail else said
    return Figure(figure.value, detail, figure.source or cut[0][0], tuple(cut))


def _decay(unit: Unit) -> Figure:
    full = [(where, e) for where, e in unit.burns if not unfinished(e, where in unit.cut)]
    measured = [(float(pct), where, e) for where, e in full if isinstance(pct := e.get("decay_pct"), (int, float))]
    if measured:
        worst = max(measured, key=lambda item: item[0])
        entry = worst[2]
        found = Figure(worst[0], f"{entry.get('kernel')} {entry.get('dtype')} for {entry.get('elapsed_s')} s", worst[1])
    elif full:
        where, entry = full[0]
        found = Figure(None, f"burn {entry.get('status')}: {entry.get('reason') or 'no decay figure'}", where)
    elif not unit.burns:
        return Figure(None, f"no burn of this device; {HINTS['burn_decay_pct']}")
    else:
        found = Figure(None, "no full burn")
    return _rerun(unit, found)


def _mismatched(entry: Mapping[str, Any]) -> int:
    """Checks of one burn that found wrong values: ``mismatched_checks`` where written (the list
    keeps only the first ones), else the list's length, at least 1 when the status says so."""
    count = entry.get("mismatched_checks")
    if not isinstance(count, int) or isinstance(count, bool):
        count = len(entry.get("mismatches") or [])
    return max(count, int(entry.get("status") == "mismatch"))


def _mismatches(unit: Unit) -> Figure:
    events = sum(_mismatched(e) for _, e in unit.burns)
    checked = [(w, r) for w, r in unit.records if (r.get("parity") or {}).get("passed") is not None]
    failed = [(w, r) for w, r in checked if r["status"] == "parity_failed"]
    if not unit.burns and not checked:
        return Figure(None, f"no result checked on this device; {HINTS['mismatches']}")
    parts = [f"{events} in {len(unit.burns)} burn(s)"] if unit.burns else ["no burn"]
    parts.append(f"{len(failed)} of {len(checked)} records failed parity" if checked else "no record's parity checked")
    first = next((w for w, e in unit.burns if e.get("mismatches")), None) or (failed[0][0] if failed else None)
    if events or failed or not unit.burns:  # wrong results fail as they are
        return Figure(events + len(failed), "; ".join(parts), first)
    full = len(unit.burns) - len(_unfinished(unit))
    parts[0] = f"0 in {full} full burn(s)" if full else "no full burn"
    return _rerun(unit, Figure(0 if checked or full else None, "; ".join(parts), first))


def _health(unit: Unit) -> Figure:
    if not unit.health:
        return Figure(None, f"no health readings of this device; {HINTS['health_clean']}")
    bad = [(w, e) for w, e in unit.health if e.get("clean") is False]
    if bad:
        problems = [p for _, e in bad for p in e.get("problems") or []]
        return Figure(False, "; ".join(problems) or "a problem reported", bad[0][0])
    clean = [(w, e) for w, e in unit.health if e.get("clean") is True]
    if clean:
        return Figure(
            True, f"sources: {', '.join(s for _, e in clean for s in e.get('sources') or []) or '-'}", clean[0][0]
        )
    reasons = {f"{k}: {v}": None for _, e in unit.health for k, v in (e.get("skipped") or {}).items()}
    skipped = "; ".join(reasons)  # each once: a burn reads the health at its start and at its end
    return Figure(None, f"nothing readable ({skipped or 'no reading'})", unit.health[0][0])


FIGURES = {
    "stream_gbps": _stream,
    "allreduce_busbw_gbps": _busbw,
    "allreduce_latency_us": _latency,
    "burn_decay_pct": _decay,
    "mismatches": _mismatches,
    "health_clean": _health,
}
DEVICE_CHECKS = ("gemm_pct_peak", "stream_gbps", "burn_decay_pct", "mismatches", "health_clean")
NODE_CHECKS = ("allreduce_busbw_gbps", "allreduce_latency_us")


def _meets(check: Check, value: Any, floor: Any) -> bool:
    if check.op == ">=":
        return bool(value >= floor)
    if check.op == "<=":
        return bool(value <= floor)
    return bool(value == floor)


def _row(
    unit: Unit, floors: Floors, name: str, figure: Figure, floor: Floor | None, value: Any, dtype: str | None
) -> dict[str, Any]:
    check = CHECKS[name]
    row = {
        "host": unit.host,
        "backend": unit.backend,
        "device_index": unit.index,
        "device": unit.name,
        "model": floors.model(unit.name),
        "check": name,
        "label": check.label,
        "dtype": dtype,
        "figure": figure.value,
        "unit": check.unit,
        "op": check.op,
        "floor": value,
        "detail": figure.detail,
        "source": figure.source,
        "unfinished": [{"source": where, "reason": why} for where, why in figure.unfinished],
    }
    if floor is None:
        return row
    verdict = MISSING if figure.value is None else PASS if _meets(check, figure.value, value) else FAIL
    verdict = FAIL if figure.unfinished else verdict
    return {**row, "verdict": verdict, "floor_reason": floor.reason, "floor_origin": floor.origin}


def _gemm_rows(unit: Unit, floors: Floors, floor: Floor | None) -> list[dict[str, Any]]:
    figures = _gemm(unit)
    per_dtype = floor.value if floor is not None and isinstance(floor.value, dict) else {}
    default = floor.value if floor is not None and not isinstance(floor.value, dict) else per_dtype.get("default")
    rows = [
        _row(
            unit,
            floors,
            "gemm_pct_peak",
            figure,
            floor if per_dtype.get(d, default) is not None else None,
            per_dtype.get(d, default),
            d,
        )
        for d, figure in figures.items()
    ]
    wanted = [d for d in per_dtype if d != "default" and d not in figures]
    if default is not None and not figures:
        wanted.append("")
    for dtype in wanted:
        missing = Figure(None, _absent(unit, "gemm", "gemm_pct_peak", dtype=dtype or None))
        rows.append(_row(unit, floors, "gemm_pct_peak", missing, floor, per_dtype.get(dtype, default), dtype or None))
    return rows


def unit_rows(unit: Unit, floors: Floors) -> list[dict[str, Any]]:
    """The checks of one unit: judged rows carry a ``verdict``; figures without a floor do not."""
    mine = floors.for_device(unit.name, unit.kind)
    rows: list[dict[str, Any]] = []
    for name in DEVICE_CHECKS if unit.index is not None else NODE_CHECKS:
        if name == "gemm_pct_peak":
            rows += _gemm_rows(unit, floors, mine.get(name))
            continue
        figure = FIGURES[name](unit)
        floor = mine.get(name)
        if floor is not None or figure.value is not None:
            rows.append(_row(unit, floors, name, figure, floor, floor.value if floor else None, None))
    return rows


def judge(files: list[Loaded], floors: Floors, allow_missing: bool = False) -> dict[str, Any]:
    """The verdict document of ``files`` against ``floors``: every check, the figures not judged,
    counts per verdict and ``passed`` (no FAIL, no MISSING unless ``allow_missing``, something judged)."""
    rows = [row for unit in gather(files) for row in unit_rows(unit, floors)]
    judged = [r for r in rows if "verdict" in r]
    counts = {v: sum(r["verdict"] == v for r in judged) for v in (PASS, FAIL, MISSING)}
    return {
        "kind": "hwbench-check",
        "files": [str(f.path) for f in files],
        "hosts": sorted({str(f.doc["host"].get("hostname", "?")) for f in files}),
        "floors": floors.origins,
        "allow_missing": allow_missing,
        "checks": judged,
        "not_judged": [r for r in rows if "verdict" not in r],
        "summary": counts,
        "passed": bool(judged) and not counts[FAIL] and (allow_missing or not counts[MISSING]),
    }
