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
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from hwbench.results.checked import Loaded
from hwbench.results.metrics import performance_portability

CSV_COLUMNS = ("problem", "platform", "application", "fom")


def problem_name(record: dict[str, Any]) -> str:
    """``gemm fp32 M=1024,N=1024,K=1024``."""
    shape = ",".join(f"{k}={v}" for k, v in record["shape"].items())
    return f"{record['kernel']} {record.get('dtype') or '-'} {shape}".strip()


def _cases(files: Iterable[Loaded]) -> list[dict[str, Any]]:
    return [r for f in files for _, r in f.records() if r["impl"] != "*" and r.get("device")]


def _fastest(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in records if r["status"] == "ok" and r["timing"].get("median_s")]
    return min(ok, key=lambda r: r["timing"]["median_s"]) if ok else None


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


def _application(records: list[dict[str, Any]], impl: str, devices: list[str]) -> dict[str, Any]:
    app_eff: dict[str, float | None] = {}
    arch_eff: dict[str, float | None] = {}
    unknown_app: dict[str, str] = {}
    unknown_arch: dict[str, str] = {}
    status: dict[str, str] = {}
    for device in devices:
        here = [r for r in records if r["device"] == device]
        mine = [r for r in here if r["impl"] == impl]
        best = _fastest(mine)
        if best is None:
            status[device] = mine[0]["status"] if mine else "missing"
            app_eff[device] = arch_eff[device] = None
            continue
        status[device] = "ok"
        native = _fastest([r for r in here if r.get("impl_kind") == "native"])
        if native is None:
            app_eff[device] = None
            unknown_app[device] = "no ok native record"
        else:
            app_eff[device] = native["timing"]["median_s"] / best["timing"]["median_s"]
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
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for record in _cases(files):
        by_problem.setdefault(problem_name(record), []).append(record)
    problems = []
    for name, records in by_problem.items():
        devices = list(dict.fromkeys(r["device"] for r in records))
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


def p3_csv(files: list[Loaded]) -> str:
    """One row per ok case: problem, platform, application, fom (median seconds, lower is better)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in _cases(files):
        if record["status"] == "ok" and record["timing"].get("median_s"):
            writer.writerow(
                [problem_name(record), record["device"], record["impl"], repr(record["timing"]["median_s"])]
            )
    return out.getvalue()
