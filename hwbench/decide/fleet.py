"""Many nodes' results side by side: per case the distribution across the fleet and its outliers,
stragglers in AllReduce, and nodes whose software stack differs from the majority.

A node is a host (``host.hostname``): its files (run, burn) are merged. A case is (kernel,
impl, backend, device model, dtype, shape); its members are the fleet's devices that ran it
(host, backend, device index), each with the case's one figure, all higher-is-better, and the
median where a device ran the case more than once. The figure is the first of the kernel's
figures (:func:`preference`: AllReduce busbw, stream and transfer GB/s, else TFLOPS, GB/s,
IOPS) that a member of the case gives above 0, else calls per second (1 / median): every
member is compared in that one unit, a member giving 0 as 0 (far below the others), a member
giving none of it as not comparable. A member whose records of the case all failed (not ok,
not skipped), or that gives no figure in the case's unit, is counted as failed.

**Outliers** (:class:`Rule`): a member off the case's median, below or above it, by more than
``mad_k`` robust standard deviations *and* by more than ``below_pct`` percent of the median
(above it a figure cannot be believed: a device 20 % faster than its identical peers measured
something else). The robust standard
deviation is 1.4826 x MAD (the median absolute deviation; 1.4826 makes it the standard
deviation of normal noise), floored at :data:`MIN_SPREAD_PCT` of the median, so that a
perfectly uniform fleet (MAD = 0) does not make a node an outlier for a rounding's worth of
difference. Defaults: 3.5 (Iglewicz and Hoaglin's cut for the modified z-score) and 5 %
(smaller losses are within run-to-run noise of one node, and not worth pulling a node for).
Both rules must hold: the first keeps noisy cases (small messages, tiny shapes) from flagging
nodes for their noise, the second keeps tight cases from flagging a 1 % difference. Setting
one to 0 leaves the other alone. A case needs :data:`MIN_MEMBERS` members to have outliers.

**Stragglers**: in each AllReduce record with each rank's median (``timing.rank_p50_s``), a rank
whose median is *above* the others' by the same rule; its host comes from the file's
``collective.participants``. Ranks pace one another in a collective, so a rank stands out when
its own part of each call (its copies, its share of the reduction, its launches) is slow.

**Software stack** per node: ``hwbench`` (version and commit), ``host.kernel``, every field
of ``software`` (python, numpy, llvmlite, llvm, torch, triton, pyopencl, cupy, threadpoolctl;
``blas`` as library and version), each backend's device drivers, runtimes and libraries
(``driver.cuda``, ``runtime.rocm``, ``libraries.cuda.cublas``...) and every number-changing
setting (``settings.OMP_NUM_THREADS``...). A node whose value differs from that of a strict
majority of the nodes is an outlier; a field with no majority is reported as split.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwbench.core.results_types import Document, Record

DEFAULT_MAD_K = 3.5
DEFAULT_BELOW_PCT = 5.0
#: The robust standard deviation is never taken below this share of the median (percent).
MIN_SPREAD_PCT = 0.5
#: 1.4826 x MAD estimates the standard deviation of normally distributed figures.
MAD_SCALE = 1.4826
#: Members (devices, or ranks) a distribution needs before any of them is an outlier.
MIN_MEMBERS = 3
BANDWIDTH_KERNELS = ("stream", "transfer")


@dataclass(frozen=True)
class Rule:
    """When a figure is an outlier: beyond ``mad_k`` robust standard deviations and ``below_pct``
    percent of the median, both."""

    mad_k: float = DEFAULT_MAD_K
    below_pct: float = DEFAULT_BELOW_PCT

    def margin(self, median: float, mad: float) -> float:
        """How far from ``median`` a figure must be to be an outlier."""
        spread = max(MAD_SCALE * mad, MIN_SPREAD_PCT / 100 * abs(median))
        return max(self.mad_k * spread, self.below_pct / 100 * abs(median))

    def as_json(self) -> dict[str, float]:
        """The rule as the fleet document states it."""
        return {
            "mad_k": self.mad_k,
            "below_pct": self.below_pct,
            "mad_scale": MAD_SCALE,
            "min_spread_pct": MIN_SPREAD_PCT,
            "min_members": MIN_MEMBERS,
        }


def spread(values: list[float]) -> tuple[float, float]:
    """Median and MAD (median absolute deviation) of ``values``."""
    median = statistics.median(values)
    return median, statistics.median(abs(v - median) for v in values)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


#: The figures tried in order for a kernel that is neither a collective nor a bandwidth kernel.
FIGURES = ("tflops", "gbps", "iops")
#: The unit of each figure a case can be compared by.
UNITS = {"busbw_gbps": "GB/s", "gbps": "GB/s", "tflops": "TFLOPS", "iops": "IOPS", "calls_per_s": "calls/s"}
#: The figure of a case none of whose members gives a named one above 0.
CALLS = "calls_per_s"


def preference(kernel: str) -> tuple[str, ...]:
    """The figures of ``kernel``'s records in the order a case's one figure is chosen."""
    if kernel == "allreduce":
        return ("busbw_gbps", *FIGURES)
    if kernel in BANDWIDTH_KERNELS:
        return ("gbps", "tflops", "iops")
    return FIGURES


def _finite(number: Any) -> float | None:
    """``number`` as a finite float of at least 0, or None (not a number, negative, NaN, beyond a double)."""
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        return None
    try:
        found = float(number)
    except OverflowError:  # an integer beyond a double
        return None
    return found if math.isfinite(found) and found >= 0 else None


def figure_value(record: Record, metric: str) -> float | None:
    """``record``'s figure ``metric`` (``calls_per_s``: 1 / its median), None where it has none."""
    if metric == CALLS:
        median = _finite((record.get("timing") or {}).get("median_s"))
        return _finite(1.0 / median) if median else None
    return _finite((record.get("metrics") or {}).get(metric))


Member = tuple[str, str, int]


@dataclass
class _Case:
    """One case's ok records and figures per member (host, backend, device index), and the members
    whose records failed."""

    kernel: str
    shape: dict[str, Any] = field(default_factory=dict)  # as the first record of the case writes it
    metric: str = ""
    unit: str = ""
    records: dict[Member, list[Record]] = field(default_factory=dict)
    values: dict[Member, list[float]] = field(default_factory=dict)
    failed: dict[Member, tuple[str, str]] = field(default_factory=dict)

    def resolve(self) -> None:
        """Choose the case's figure and take every member's in it; a member without it fails."""
        every = [r for rs in self.records.values() for r in rs]
        names = preference(self.kernel)
        self.metric = next((n for n in names if any(_positive(figure_value(r, n)) for r in every)), CALLS)
        self.unit = UNITS[self.metric]
        for member, records in self.records.items():
            found = [v for r in records if (v := figure_value(r, self.metric)) is not None]
            if found:
                self.values[member] = found
                continue
            given = sorted({UNITS[n] for r in records for n in names if _positive(figure_value(r, n))})
            why = f"no {self.unit} figure, which the case's other devices give" if self.metric != CALLS else "no figure"
            self.failed.setdefault(member, ("ok", why + (f" ({', '.join(given)} only)" if given else "")))


def _collect(runs: Iterable[tuple[Path, Document]]) -> dict[tuple[Any, ...], _Case]:
    cases: dict[tuple[Any, ...], _Case] = {}
    shapes: dict[tuple[Any, ...], tuple[Any, ...]] = {}  # a shape's items as written -> sorted (few distinct)
    for _, doc in runs:
        host = str(doc["host"].get("hostname", "?"))
        for record in doc["records"]:
            index, status = record.get("device_index"), record["status"]
            if type(index) is not int or index < 0 or status == "skipped" or not record.get("device"):
                continue
            written = tuple(record["shape"].items())
            shape = shapes.get(written)
            if shape is None:
                shape = shapes[written] = tuple(sorted(written))
            key = (record["kernel"], record["impl"], record["backend"], record["device"], record.get("dtype"), shape)
            case = cases.get(key)
            if case is None:
                case = cases[key] = _Case(record["kernel"], dict(record["shape"]))
            member = (host, record["backend"], index)
            if status != "ok":
                case.failed.setdefault(member, (status, record.get("reason") or "no figure"))
                continue
            records = case.records.get(member)
            if records is None:
                case.records[member] = [record]
            else:
                records.append(record)
    for case in cases.values():
        case.resolve()
    return cases


def _members(case: _Case) -> dict[tuple[str, str, int], float]:
    return {m: v[0] if len(v) == 1 else statistics.median(v) for m, v in case.values.items()}


def case_stats(key: tuple[Any, ...], case: _Case, rule: Rule, hosts: list[str]) -> dict[str, Any]:
    """One case's distribution across the fleet, its outliers, failed and absent members."""
    members = _members(case)
    values = sorted(members.values())
    kernel, impl, backend, device, dtype, _ = key
    out: dict[str, Any] = {
        "kernel": kernel,
        "impl": impl,
        "backend": backend,
        "device": device,
        "dtype": dtype,
        "shape": case.shape,
        "metric": case.metric,
        "unit": case.unit,
        "n": len(values),
        "median": None,
        "mad": None,
        "min": values[0] if values else None,
        "max": values[-1] if values else None,
        "threshold": None,
        "upper_threshold": None,
        "members": [{"node": h, "device_index": i, "value": v} for (h, _, i), v in sorted(members.items())],
        "outliers": [],
        "failed": [
            {"node": h, "device_index": i, "status": s, "reason": r}
            for (h, _, i), (s, r) in sorted(case.failed.items())
            if (h, backend, i) not in members
        ],
    }
    seen = {m[0] for m in members} | {f["node"] for f in out["failed"]}
    out["absent"] = sorted(set(hosts) - seen) if len(seen) * 2 > len(hosts) else []
    if not values:
        return out
    median, mad = spread(values)
    margin = rule.margin(median, mad)
    out.update(median=median, mad=mad, threshold=median - margin, upper_threshold=median + margin)
    if len(values) < MIN_MEMBERS:
        return out
    robust = max(MAD_SCALE * mad, MIN_SPREAD_PCT / 100 * abs(median))
    for (host, _, index), figure in sorted(members.items(), key=lambda item: item[1]):
        if abs(median - figure) > margin:
            out["outliers"].append(
                {
                    "node": host,
                    "device_index": index,
                    "value": figure,
                    "side": "below" if figure < median else "above",
                    # Signed: negative above the median; None where the median (or the spread) is 0.
                    "below_pct": 100.0 * (median - figure) / median if median else None,
                    "robust_z": (median - figure) / robust if robust else None,
                }
            )
    return out


def _straggler(path: Path, doc: Document, rank: int, records: int) -> dict[str, Any]:
    who = {p.get("rank"): p for p in (doc.get("collective") or {}).get("participants") or []}.get(rank) or {}
    return {
        "file": str(path),
        "node": str(doc["host"].get("hostname", "?")),
        "rank": rank,
        "rank_host": who.get("hostname"),
        "rank_device": who.get("device"),
        "records": records,
        "slow_records": 0,
        "worst_above_pct": 0.0,
        "worst": None,
    }


def stragglers(runs: Iterable[tuple[Path, Document]], rule: Rule) -> list[dict[str, Any]]:
    """Ranks whose median is above the others' in a file's AllReduce records, one entry per file and rank
    (``records``: the file's records with every rank's median, ``slow_records``: those the rank was slow in)."""
    out = []
    for path, doc in runs:
        ranked = [
            r
            for r in doc["records"]
            if r["kernel"] == "allreduce"
            and r["status"] == "ok"
            and len((r.get("timing") or {}).get("rank_p50_s") or ()) >= MIN_MEMBERS
        ]
        found: dict[int, dict[str, Any]] = {}
        for record in ranked:
            p50s = record["timing"]["rank_p50_s"]
            median, mad = spread(p50s)
            margin = rule.margin(median, mad)
            for rank, p50 in enumerate(p50s):
                if not (p50 - median > margin and median > 0):
                    continue
                entry = found.setdefault(rank, _straggler(path, doc, rank, len(ranked)))
                above = 100.0 * (p50 - median) / median
                entry["slow_records"] += 1
                if above > entry["worst_above_pct"]:
                    worst = {"impl": record["impl"], "dtype": record.get("dtype"), "shape": dict(record["shape"])}
                    entry.update(worst_above_pct=above, worst={**worst, "p50_s": p50, "median_p50_s": median})
        out += [found[rank] for rank in sorted(found)]
    return out


def _text(value: Any) -> str:
    return "none" if value is None else str(value)


def stack(doc: Document) -> dict[str, str]:
    """The software stack of one results document as flat ``field: value`` strings."""
    run_info = (doc.get("run") or {}).get("hwbench") or {}
    out = {"hwbench": _text(run_info.get("version")), "hwbench.commit": _text(run_info.get("git_commit"))}
    if "kernel" in (doc.get("host") or {}):
        out["host.kernel"] = _text(doc["host"]["kernel"])
    for name, value in (doc.get("software") or {}).items():
        if name == "blas" and isinstance(value, list):
            libs = [f"{b.get('internal_api')} {b.get('version')}" for b in value if isinstance(b, dict)]
            out["software.blas"] = ", ".join(sorted(libs)) or "none"
        elif not isinstance(value, (dict, list)):
            out[f"software.{name}"] = _text(value)
    for backend in doc.get("backends") or []:
        name = backend.get("name")
        for device in backend.get("devices") or []:
            for part in ("driver", "runtime"):
                if device.get(part):
                    out[f"{part}.{name}"] = str(device[part])
            for lib, version in (device.get("libraries") or {}).items():
                out[f"libraries.{name}.{lib}"] = _text(version)
    for name, value in (doc.get("settings") or {}).items():
        out[f"settings.{name}"] = _text(value)
    return out


def software(stacks: dict[str, dict[str, set[str]]]) -> list[dict[str, Any]]:
    """Per field where the nodes differ: the majority value (None when split), the other nodes and the counts."""
    nodes = sorted(stacks)
    fields = sorted({f for s in stacks.values() for f in s})
    out = []
    for name in fields:
        values = {node: " | ".join(sorted(stacks[node].get(name) or {"absent"})) for node in nodes}
        counts = Counter(values.values())
        if len(counts) < 2:
            continue
        top, count = counts.most_common(1)[0]
        majority = top if count * 2 > len(nodes) else None
        out.append(
            {
                "field": name,
                "majority": majority,
                "split": majority is None,
                "values": dict(counts.most_common()),
                "outliers": [
                    {"node": n, "value": v} for n, v in values.items() if majority is not None and v != majority
                ],
            }
        )
    return out


def analyze(
    runs: list[tuple[Path, Document]], rule: Rule | None = None, missing: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """The fleet document of ``runs`` (path and loaded document of every file), with the files that
    could not be read (``missing``: ``{"file": ..., "reason": ...}`` each) named as missing."""
    rule = rule or Rule()
    missing = list(missing or [])
    hosts = sorted({str(doc["host"].get("hostname", "?")) for _, doc in runs})
    cases = [case_stats(key, case, rule, hosts) for key, case in _collect(runs).items()]
    cases.sort(key=lambda c: (-len(c["outliers"]) - len(c["failed"]), c["kernel"], c["backend"], c["impl"]))
    stacks: dict[str, dict[str, set[str]]] = {}
    for _, doc in runs:
        mine = stacks.setdefault(str(doc["host"].get("hostname", "?")), {})
        for name, value in stack(doc).items():
            mine.setdefault(name, set()).add(value)
    differing = software(stacks)
    slow = stragglers(runs, rule)
    flagged = {o["node"] for c in cases for o in c["outliers"] + c["failed"]}
    flagged |= {s["rank_host"] or s["node"] for s in slow}
    flagged |= {o["node"] for f in differing for o in f["outliers"]}
    summary = {
        "nodes": len(hosts),
        "files": len(runs),
        "missing": len(missing),
        "cases": len(cases),
        "outliers": sum(len(c["outliers"]) for c in cases),
        "failed": sum(len(c["failed"]) for c in cases),
        "stragglers": len(slow),
        "software_outliers": sum(len(f["outliers"]) for f in differing),
        "software_split": sum(f["split"] for f in differing),
        "outlier_nodes": sorted(flagged),
    }
    summary["found"] = bool(flagged) or bool(summary["software_split"]) or bool(missing)
    return {
        "kind": "hwbench-fleet",
        "rule": rule.as_json(),
        "nodes": hosts,
        "files": [str(p) for p, _ in runs],
        "missing": missing,
        "cases": cases,
        "stragglers": slow,
        "software": differing,
        "summary": summary,
    }


def finite_rule(mad_k: float, below_pct: float) -> Rule | str:
    """The rule of ``--mad-k`` and ``--below-pct``, or what is wrong with them."""
    if not (math.isfinite(mad_k) and mad_k >= 0):
        return f"--mad-k must be a finite number of at least 0, got {mad_k}"
    if not (math.isfinite(below_pct) and 0 <= below_pct < 100):
        return f"--below-pct must be a percentage from 0 to under 100, got {below_pct}"
    if mad_k == 0 and below_pct == 0:
        return "--mad-k and --below-pct cannot both be 0: every node below the median would be an outlier"
    return Rule(mad_k, below_pct)
