"""Two results files, case by case: faster, slower or the same, with a significance test.

Cases match on kernel, implementation, backend, device, dtype and shape. Where both sides
have timing samples, a two-sided Mann-Whitney U test decides whether they differ; a case
is *slower* or *faster* only when the test says so (p < alpha) and the median moved by
more than the noise allowance. A case that ran on the base side and fails on the new one
is *broken*. Times are lower-is-better throughout (the storage probe records latency). A
kernel whose records on the two sides were made from different inputs versions (its
``make_inputs`` changed) is named in ``inputs_versions``.

A gate (``--fail-on``) judges the cases it could compare: those ok on both sides, and those
that broke. With none of them (the new file empty, a burn file, no case in common, or only
cases failing on both sides) it has nothing to pass, and fails (:func:`gate`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from hwbench.core.errors import UserError
from hwbench.core.results_types import Record
from hwbench.decide.mann_whitney import mann_whitney_u
from hwbench.results.checked import Loaded

STATS = ("median", "mean", "min")
FIELDS = {"median": "median_s", "mean": "mean_s", "min": "min_s"}


@dataclass(frozen=True)
class Threshold:
    """``--fail-on STAT:N%``: a regression is STAT growing by more than ``fraction``."""

    stat: str
    fraction: float

    def __str__(self) -> str:
        return f"{self.stat}:{self.fraction * 100:g}%"


def parse_percent(text: str, what: str) -> float:
    """``5%`` (or ``5``) as 0.05; UserError otherwise."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", text)
    if not match:
        raise UserError(f"{what} '{text}' is not a percentage such as 5%")
    return float(match.group(1)) / 100.0


def parse_fail_on(text: str) -> Threshold:
    """Parse ``STAT:N%`` (STAT one of median, mean, min)."""
    stat, sep, amount = text.partition(":")
    if not sep or stat.strip() not in STATS:
        raise UserError(f"--fail-on '{text}' is not STAT:N% with STAT one of {', '.join(STATS)} (e.g. median:5%)")
    if not amount.strip().endswith("%"):
        raise UserError(f"--fail-on '{text}': give the threshold as a percentage, e.g. {stat.strip()}:5%")
    return Threshold(stat.strip(), parse_percent(amount, "--fail-on threshold"))


def case_key(record: Record) -> tuple[Any, ...]:
    """What makes two records the same case."""
    return (
        record["kernel"],
        record["impl"],
        record["backend"],
        record.get("device"),
        record.get("dtype"),
        tuple(sorted(record["shape"].items())),
    )


def coordinates(record: Record) -> dict[str, Any]:
    """A case's coordinates as JSON (the shape in the record's own order)."""
    return {
        "kernel": record["kernel"],
        "impl": record["impl"],
        "backend": record["backend"],
        "device": record.get("device"),
        "dtype": record.get("dtype"),
        "shape": dict(record["shape"]),
    }


def _index(loaded: Loaded, warnings: list[str]) -> dict[tuple[Any, ...], Record]:
    cases: dict[tuple[Any, ...], Record] = {}
    for _, record in loaded.records():
        if record["impl"] == "*":  # "backend unavailable" notes, not cases
            continue
        key = case_key(record)
        if key in cases:
            warnings.append(f"{loaded.path}: case {_label(key)} appears twice; the first record is used")
            continue
        cases[key] = record
    return cases


def _label(key: tuple[Any, ...]) -> str:
    kernel, impl, backend, _, dtype, shape = key
    return f"{backend} {kernel} {impl} {dtype or '-'} " + (",".join(f"{k}={v}" for k, v in shape) or "-")


def statistic(record: Record, stat: str) -> float | None:
    """``stat`` of a record's timing: from its samples when it has them, else its summary."""
    samples = record["timing"].get("samples_s") or []
    if samples:
        x = np.asarray(samples, dtype=np.float64)
        return float(np.median(x) if stat == "median" else x.mean() if stat == "mean" else x.min())
    value = cast(Mapping[str, Any], record["timing"]).get(FIELDS[stat])  # the section's key of ``stat``
    return None if value is None else float(value)


def _flatten(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list):
        return {prefix: json_text(value)}
    return {prefix: str(value)}


def json_text(value: Any) -> str:
    """Compact text of a list (BLAS entries), for stack differences."""
    import json

    return json.dumps(value, sort_keys=True)


def environment_warnings(base: Loaded, new: Loaded) -> list[str]:
    """One line each when the hosts, the software stacks or the settings differ."""
    lines = []
    sections = {
        "hosts": lambda d: {
            k: v for k, v in _flatten(d["host"]).items() if k in ("hostname", "cpu.model", "cpu.cores")
        },
        "software stacks": lambda d: {
            **_flatten(d["software"]),
            **{f"{b['name']}.{k}": v for b in d["backends"] for k, v in _flatten(b.get("environment") or {}).items()},
        },
        "settings": lambda d: _flatten(d.get("settings") or {}),
    }
    for what, pick in sections.items():
        a, b = pick(base.doc), pick(new.doc)
        diffs = [
            f"{k} {a.get(k, '(none)')} -> {b.get(k, '(none)')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)
        ]
        if diffs:
            more = f" (and {len(diffs) - 6} more)" if len(diffs) > 6 else ""
            lines.append(f"{what} differ: " + "; ".join(d[:160] for d in diffs[:6]) + more)
    return lines


def inputs_versions(cases: dict[tuple[Any, ...], Record]) -> dict[str, set[int]]:
    """The inputs versions of each kernel's records (a record without one was made from version 1)."""
    versions: dict[str, set[int]] = {}
    for record in cases.values():
        versions.setdefault(record["kernel"], set()).add(record.get("inputs_version", 1))
    return versions


def inputs_version_notes(
    base: dict[tuple[Any, ...], Record], new: dict[tuple[Any, ...], Record]
) -> list[dict[str, Any]]:
    """One entry per kernel whose records on the two sides were made from different inputs versions."""
    a, b = inputs_versions(base), inputs_versions(new)
    notes = []
    for kernel in [k for k in a if k in b and a[k] != b[k]]:
        before, after = sorted(a[kernel]), sorted(b[kernel])
        text = (
            f"{kernel}: inputs version {'/'.join(map(str, before))} in base, {'/'.join(map(str, after))} in new: "
            "its records were made from other inputs, so parity is not comparable and times may differ for that alone"
        )
        notes.append({"kernel": kernel, "base": before, "new": after, "note": text})
    return notes


def flush_kind(record: Record) -> str:
    """How a record's caches were flushed before its timed calls: ``none``, ``lines`` (the case's
    own memory, line by line) or ``whole cache`` (a buffer larger than the caches written; also
    every record older than ``timing.flush``)."""
    timing = record.get("timing") or {}
    if timing.get("flushed") is False:
        return "none"
    return "lines" if "clflush" in str(timing.get("flush") or "") else "whole cache"


def flush_warnings(base: dict[tuple[Any, ...], Record], new: dict[tuple[Any, ...], Record]) -> list[str]:
    """One line when matched cases were flushed differently: their times may differ for that alone."""
    differ = [k for k in base if k in new and flush_kind(base[k]) != flush_kind(new[k])]
    if not differ:
        return []
    kinds = sorted({f"{flush_kind(base[k])} -> {flush_kind(new[k])}" for k in differ})
    return [
        f"cache flushes differ in {len(differ)} matched cases ({', '.join(kinds)}): times may differ for that alone"
    ]


def compare_case(base: Record, new: Record, alpha: float, noise: float, thresholds: list[Threshold]) -> dict[str, Any]:
    """The verdict on one matched case."""
    out: dict[str, Any] = {
        "base": {"status": base["status"], "median_s": statistic(base, "median"), "n": base["timing"].get("n", 0)},
        "new": {"status": new["status"], "median_s": statistic(new, "median"), "n": new["timing"].get("n", 0)},
        "change": None,
        "p": None,
        "test": None,
        "verdict": "",
        "regression": False,
    }
    if base["status"] != "ok" or new["status"] != "ok":
        out["verdict"] = {(True, False): "broken", (False, True): "fixed"}.get(
            (base["status"] == "ok", new["status"] == "ok"), "not ok on either side"
        )
        out["reason"] = new["reason"] if new["status"] != "ok" else base["reason"]
        out["regression"] = out["verdict"] == "broken" and bool(thresholds)
        return out
    b, n = out["base"]["median_s"], out["new"]["median_s"]
    out["change"] = n / b - 1.0
    xs, ys = base["timing"].get("samples_s") or [], new["timing"].get("samples_s") or []
    significant = True
    if xs and ys:
        test = mann_whitney_u(xs, ys)
        out["p"], out["test"] = test.p, f"Mann-Whitney U ({test.method}), n {len(xs)} vs {len(ys)}"
        significant = test.p < alpha
    else:
        out["test"] = "no samples on one side: medians only"
    if significant and out["change"] > noise:
        out["verdict"] = "slower"
    elif significant and out["change"] < -noise:
        out["verdict"] = "faster"
    else:
        out["verdict"] = "same"
    for threshold in thresholds:
        before, after = statistic(base, threshold.stat), statistic(new, threshold.stat)
        if significant and before and after is not None and after / before - 1.0 > threshold.fraction:
            out["regression"] = True
            out.setdefault("regressed_by", []).append(
                f"{threshold.stat} +{(after / before - 1.0) * 100:.1f}% > {threshold.fraction * 100:g}%"
            )
    return out


def compared(case: dict[str, Any]) -> bool:
    """Whether a matched case was compared: ok on both sides (timed against each other), or broken."""
    return case["verdict"] in ("slower", "faster", "same", "broken")


def gate(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The verdict of the comparison's thresholds (None without one): passed, and why not."""
    if not doc["fail_on"]:
        return None
    if doc["compared"] == 0:
        common = len(doc["cases"])
        why = (
            f"nothing compared: {common} case(s) in common, none ok on both sides"
            if common
            else f"nothing compared: no case in common ({doc['base_cases']} in base, {doc['new_cases']} in new)"
        )
        return {"passed": False, "reason": why}
    if doc["regressions"]:
        return {"passed": False, "reason": f"{doc['regressions']} case(s) regressed"}
    return {"passed": True, "reason": f"{doc['compared']} case(s) compared, none regressed"}


def compare(
    base: Loaded, new: Loaded, alpha: float = 0.05, noise: float = 0.02, thresholds: list[Threshold] | None = None
) -> dict[str, Any]:
    """The comparison document of two results files."""
    if not (0 < alpha < 1) or not math.isfinite(noise) or noise < 0:
        raise UserError(f"--alpha must lie in (0, 1) and --noise be >= 0, got {alpha} and {noise}")
    thresholds = list(thresholds or [])
    warnings = environment_warnings(base, new)
    a, b = _index(base, warnings), _index(new, warnings)
    warnings += flush_warnings(a, b)
    cases = []
    for key in [k for k in a if k in b]:
        cases.append({**coordinates(a[key]), **compare_case(a[key], b[key], alpha, noise, thresholds)})
    verdicts = [c["verdict"] for c in cases]
    doc = {
        "kind": "hwbench-compare",
        "base": str(base.path),
        "new": str(new.path),
        "alpha": alpha,
        "noise": noise,
        "fail_on": [str(t) for t in thresholds],
        "warnings": warnings,
        "inputs_versions": inputs_version_notes(a, b),
        "cases": cases,
        "only_base": [coordinates(r) for k, r in a.items() if k not in b],
        "only_new": [coordinates(r) for k, r in b.items() if k not in a],
        "summary": {v: verdicts.count(v) for v in dict.fromkeys(verdicts)},
        "base_cases": len(a),
        "new_cases": len(b),
        "compared": sum(compared(c) for c in cases),
        "regressions": sum(c["regression"] for c in cases),
    }
    doc["gate"] = gate(doc)
    return doc
