"""Performance portability across results files (Pennycook et al.), and cascade-plot data.

A *problem* is a kernel at one dtype and shape; a *platform* is a device (by name); an
*application* is an implementation (a portable source such as ``llvm``, or a vendor
library). For each problem, the platform set H is every device with a record of it.

- application efficiency = t_native / t_impl on that device, where t_native is the
  fastest ok native record of the problem there (a portable implementation faster than
  the vendor library is the best known: its efficiency counts as 1 in PP, and the table
  shows the raw ratio);
- architectural efficiency = achieved / peak TFLOPS (``metrics.pct_peak`` / 100);
- PP = harmonic mean of the efficiencies over H, 0 when the implementation is missing or
  failing on any device of H; unknown (None) when a device has no native baseline or no
  peak, with the reason;
- cascade: the devices in decreasing efficiency, with the PP of the first k of them.

The p3-analysis-library CSV (:func:`p3_csv`) has one row per (problem, platform,
application) that was tried: fom = the fastest ok median in seconds (lower is better),
empty when every run of it was skipped or failed (p3 counts it 0), its status, and
hwbench's efficiency against the fastest native (capped at 1, 0 when not ok) beside the
raw ratio. Several records of one key (across files, or two devices of one name) keep the
fastest ok one, as the PP does; :attr:`P3Csv.duplicates` names them.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any, NamedTuple, cast

from hwbench.core.results_types import Record
from hwbench.results.checked import Loaded
from hwbench.results.metrics import median_s, performance_portability

CSV_COLUMNS = ("problem", "platform", "application", "fom", "status", "native eff", "native speedup")


class P3Csv(NamedTuple):
    """The p3 CSV and the keys that had more than one record."""

    text: str
    duplicates: list[tuple[str, str, str, list[str]]]
    """(problem, platform, application, the files holding its records), in CSV order."""


def problem_name(record: Record) -> str:
    """``gemm fp32 M=1024,N=1024,K=1024``."""
    shape = ",".join(f"{k}={v}" for k, v in record["shape"].items())
    return f"{record['kernel']} {record.get('dtype') or '-'} {shape}".strip()


def _cases(files: Iterable[Loaded]) -> dict[str, list[tuple[str, Record]]]:
    """Per problem, its case records with the file each came from."""
    by_problem: dict[str, list[tuple[str, Record]]] = {}
    for f in files:
        for _, r in f.records():
            if r["impl"] != "*" and r.get("device"):
                by_problem.setdefault(problem_name(r), []).append((str(f.path), r))
    return by_problem


def _fastest(records: list[Record]) -> Record | None:
    ok = [r for r in records if r["status"] == "ok" and r["timing"].get("median_s")]
    return min(ok, key=median_s) if ok else None


def _on_device(here: list[Record], impl: str) -> tuple[Record | None, str, float | None]:
    """Of ``impl`` among a device's records: its fastest ok record, status, t_native / t_impl.

    The status is the first record's when none is ok ("missing" without any); the ratio is
    None unless ``impl`` is ok and the device has an ok native record.
    """
    mine = [r for r in here if r["impl"] == impl]
    best = _fastest(mine)
    if best is None:
        return None, mine[0]["status"] if mine else "missing", None
    native = _fastest([r for r in here if r.get("impl_kind") == "native"])
    ratio = None if native is None else median_s(native) / median_s(best)
    return best, "ok", ratio


def _pp(values: dict[str, float | None], unknown: dict[str, str]) -> tuple[float | None, str]:
    if unknown:
        device, why = next(iter(unknown.items()))
        return None, f"{why} on {device}"
    return performance_portability(min(v, 1.0) if v is not None else None for v in values.values()), ""


def cascade(efficiencies: dict[str, float | None]) -> list[dict[str, Any]]:
    """Devices by decreasing efficiency and the PP of the first k of them.

    Give a missing or failing device as 0.0 and an unknown efficiency (no baseline or no
    peak) as None: unknown devices come last, and a PP over them is unknown (None).
    """
    ordered = sorted(efficiencies.items(), key=lambda item: (item[1] is None, -(item[1] or 0.0)))
    out = []
    for k, (device, value) in enumerate(ordered, 1):
        first = [v for _, v in ordered[:k]]
        pp = (
            None
            if any(v is None for v in first)
            else performance_portability(min(v, 1.0) if v else None for v in first)
        )
        out.append({"platform": device, "efficiency": value, "pp": pp})
    return out


def _application(records: list[Record], impl: str, devices: list[str]) -> dict[str, Any]:
    app_eff: dict[str, float | None] = {}
    arch_eff: dict[str, float | None] = {}
    unknown_app: dict[str, str] = {}
    unknown_arch: dict[str, str] = {}
    status: dict[str, str] = {}
    for device in devices:
        best, status[device], app_eff[device] = _on_device([r for r in records if r["device"] == device], impl)
        if best is None:
            arch_eff[device] = None
            continue
        if app_eff[device] is None:
            unknown_app[device] = "no ok native record"
        pct = best["metrics"].get("pct_peak")
        arch_eff[device] = None if pct is None else pct / 100.0
        if pct is None:
            unknown_arch[device] = "no peak"
    failing = [d for d, s in status.items() if s != "ok"]
    pp_app, why_app = (0.0, "") if failing else _pp(app_eff, unknown_app)
    pp_arch, why_arch = (0.0, "") if failing else _pp(arch_eff, unknown_arch)
    return {
        "application": impl,
        "status": status,
        "app_efficiency": app_eff,
        "arch_efficiency": arch_eff,
        "pp_app": pp_app,
        "pp_app_unknown": why_app,
        "pp_arch": pp_arch,
        "pp_arch_unknown": why_arch,
        "missing_or_failing": failing,
        "cascade_app": cascade({d: (v if status[d] == "ok" else 0.0) for d, v in app_eff.items()}),
        "cascade_arch": cascade({d: (v if status[d] == "ok" else 0.0) for d, v in arch_eff.items()}),
    }


def portability(files: list[Loaded]) -> dict[str, Any]:
    """Per problem: its devices and, per implementation, efficiencies, PP and cascade data."""
    problems = []
    for name, cases in _cases(files).items():
        records = [r for _, r in cases]
        devices = list(dict.fromkeys(cast(str, r["device"]) for r in records))  # _cases keeps records with one
        impls = list(dict.fromkeys(r["impl"] for r in records))
        problems.append(
            {
                "problem": name,
                "kernel": records[0]["kernel"],
                "dtype": records[0].get("dtype"),
                "shape": records[0]["shape"],
                "platforms": devices,
                "applications": [_application(records, impl, devices) for impl in impls],
            }
        )
    return {"kind": "hwbench-portability", "files": [str(f.path) for f in files], "problems": problems}


def _number(value: float | None) -> str:
    return "" if value is None else repr(value)


def p3_csv(files: list[Loaded]) -> P3Csv:
    """The p3-analysis-library CSV: one row per (problem, platform, application) tried.

    Columns :data:`CSV_COLUMNS`: ``fom`` (median seconds, lower is better; empty when not
    ok), ``status``, ``native eff`` (t_native / t_impl capped at 1, 0 when not ok, empty
    without an ok native there) and ``native speedup`` (the raw ratio). An application
    never tried on a platform of the problem has no row (p3's ``pp`` counts it 0).
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    duplicates = []
    for name, cases in _cases(files).items():
        records = [r for _, r in cases]
        devices = list(dict.fromkeys(cast(str, r["device"]) for r in records))  # _cases keeps records with one
        for impl in dict.fromkeys(r["impl"] for r in records):
            for device in devices:
                origins = [path for path, r in cases if r["device"] == device and r["impl"] == impl]
                if not origins:
                    continue
                if len(origins) > 1:
                    duplicates.append((name, device, impl, list(dict.fromkeys(origins))))
                best, status, ratio = _on_device([r for r in records if r["device"] == device], impl)
                capped = 0.0 if best is None else None if ratio is None else min(ratio, 1.0)
                fom = None if best is None else median_s(best)
                writer.writerow([name, device, impl, _number(fom), status, _number(capped), _number(ratio)])
    return P3Csv(out.getvalue(), duplicates)
