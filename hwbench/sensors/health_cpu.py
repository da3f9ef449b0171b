"""The host CPU's health from ``/sys`` and ``/proc`` under a root folder (a fake tree in tests).

Read: EDAC memory-controller error counts (``/sys/devices/system/edac/mc/mc*``: ``ce_count``,
``ue_count``, and the csrows' and DIMMs' where the driver has them), machine-check exceptions
(``/proc/interrupts``' ``MCE`` line, with the threshold and deferred-error interrupts beside it),
the kernel's thermal-throttle counters (``/sys/devices/system/cpu/cpu*/thermal_throttle``, Intel's
``therm_throt``), cpufreq's clock while one core spins for :data:`LOAD_S`, and the clock the cpu
backend measured with its dependent-add chain (handed in: this layer does not run backends).

Problems: any uncorrected EDAC error; corrected ones above :data:`EDAC_CE_LIMIT` since the
counters were reset, or above :data:`EDAC_CE_RUN_LIMIT` within a watched window; any machine-check
exception since boot; thermal-throttle counts that rose within a watched window (the counts
since boot are readings only: a CPU also throttles at boot and under firmware control).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwbench.sensors.observers import kind_of

#: Corrected memory errors (EDAC, all controllers) since the counters were reset above which a node
#: is not clean: a DIMM logging this many is on its way to uncorrected ones.
EDAC_CE_LIMIT = 100
#: Corrected memory errors within one watched window (a run, a burn) above which it is not clean.
EDAC_CE_RUN_LIMIT = 10
#: Seconds one core spins before cpufreq's clock is read (an idle core reports its idle clock).
LOAD_S = 0.2
#: The ``/proc/interrupts`` lines read, by their label: the reading's name.
INTERRUPTS = {"MCE": "mce_count", "THR": "mce_threshold_interrupts", "DFR": "mce_deferred_errors"}


@dataclass(frozen=True)
class CpuCounters:
    """The host's error and throttle counters at one moment (None: not readable, the reason in ``missing``)."""

    edac_ce: int | None
    edac_ue: int | None
    #: per memory controller, csrow or DIMM with a nonzero count: ``{"where", "ce", "ue"}``.
    edac_parts: list[dict[str, Any]]
    interrupts: dict[str, int]
    core_throttle: int | None
    package_throttle: int | None
    missing: dict[str, str]


def read_int(path: Path) -> int | None:
    """The integer a sysfs file holds (None where absent or not an integer)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def read_text(path: Path) -> str:
    """A sysfs file's text, stripped (empty where absent or unreadable)."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _edac(root: Path, missing: dict[str, str]) -> tuple[int | None, int | None, list[dict[str, Any]]]:
    base = root / "sys/devices/system/edac/mc"
    if not base.is_dir():
        missing["edac"] = (
            "no /sys/devices/system/edac/mc: no EDAC driver for this memory controller (common in VMs "
            "and on some servers, where the BMC keeps the memory error log)"
        )
        return None, None, []
    controllers = sorted(p for p in base.glob("mc[0-9]*") if p.is_dir())
    if not controllers:
        missing["edac"] = "EDAC is loaded but no memory controller is registered with it"
        return None, None, []
    ce = ue = 0
    parts: list[dict[str, Any]] = []
    for mc in controllers:
        mc_ce, mc_ue = read_int(mc / "ce_count") or 0, read_int(mc / "ue_count") or 0
        ce, ue = ce + mc_ce, ue + mc_ue
        if mc_ce or mc_ue:
            parts.append({"where": mc.name, "ce": mc_ce, "ue": mc_ue})
        for dimm in sorted(mc.glob("dimm[0-9]*")) + sorted(mc.glob("rank[0-9]*")):
            d_ce, d_ue = read_int(dimm / "dimm_ce_count") or 0, read_int(dimm / "dimm_ue_count") or 0
            if d_ce or d_ue:
                label = read_text(dimm / "dimm_label")
                parts.append(
                    {"where": f"{mc.name}/{dimm.name}" + (f" ({label})" if label else ""), "ce": d_ce, "ue": d_ue}
                )
        for row in sorted(mc.glob("csrow[0-9]*")):
            r_ce, r_ue = read_int(row / "ce_count") or 0, read_int(row / "ue_count") or 0
            if r_ce or r_ue:
                parts.append({"where": f"{mc.name}/{row.name}", "ce": r_ce, "ue": r_ue})
    return ce, ue, parts


def _interrupts(root: Path, missing: dict[str, str]) -> dict[str, int]:
    """The machine-check lines of ``/proc/interrupts``, summed over CPUs."""
    try:
        text = (root / "proc/interrupts").read_text()
    except OSError as exc:
        missing["mce"] = f"/proc/interrupts unreadable ({exc.strerror or exc})"
        return {}
    found: dict[str, int] = {}
    for line in text.splitlines():
        label, _, rest = line.strip().partition(":")
        if label in INTERRUPTS:
            counts = []
            for word in rest.split():
                if not word.isdigit():
                    break
                counts.append(int(word))
            found[INTERRUPTS[label]] = sum(counts)
    if "mce_count" not in found:
        missing["mce"] = (
            "/proc/interrupts has no machine-check line (a kernel without x86 MCE support, "
            "a VM that hides machine checks, or not x86)"
        )
    return found


def _throttle(root: Path, missing: dict[str, str]) -> tuple[int | None, int | None]:
    cpus = sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*"))
    core: int | None = None
    packages: dict[str, int] = {}
    for cpu in cpus:
        count = read_int(cpu / "thermal_throttle/core_throttle_count")
        if count is not None:
            core = (core or 0) + count
        package = read_int(cpu / "thermal_throttle/package_throttle_count")
        if package is not None:  # one counter per package, shown under each of its CPUs
            where = read_text(cpu / "topology/physical_package_id")
            packages[where or cpu.name] = max(packages.get(where or cpu.name, 0), package)
    if core is None and not packages:
        missing["thermal_throttle"] = (
            "no thermal_throttle counters under /sys/devices/system/cpu/cpu*/ (Intel's therm_throt "
            "driver makes them; AMD CPUs and most VMs have none)"
        )
    return core, (sum(packages.values()) if packages else None)


def read_counters(root: Path = Path("/")) -> CpuCounters:
    """The host's EDAC, machine-check and thermal-throttle counters now."""
    missing: dict[str, str] = {}
    ce, ue, parts = _edac(root, missing)
    interrupts = _interrupts(root, missing)
    core, package = _throttle(root, missing)
    return CpuCounters(ce, ue, parts, interrupts, core, package, missing)


def cpufreq_now(root: Path = Path("/")) -> dict[int, float]:
    """cpufreq's current clock per CPU, MHz (empty where cpufreq is absent)."""
    found: dict[int, float] = {}
    for path in (root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        khz = read_int(path)
        if khz is not None:
            found[int(path.parent.parent.name[3:])] = khz / 1000
    return found


def cpufreq_loaded(root: Path = Path("/"), load_s: float = LOAD_S) -> tuple[float | None, int | None]:
    """cpufreq's clock of one core after it spun for ``load_s`` seconds (bounded), and which core;
    (None, None) without cpufreq. The spinning thread is pinned to that core, then set free again."""
    if not cpufreq_now(root):
        return None, None
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    core = allowed[0] if allowed else 0
    pinned = hasattr(os, "sched_setaffinity") and bool(allowed)
    if pinned:
        os.sched_setaffinity(0, {core})
    try:
        end = time.perf_counter() + min(load_s, 2 * LOAD_S)
        spins = 0
        while time.perf_counter() < end:
            spins += 1
        clocks = cpufreq_now(root)
    finally:
        if pinned:
            os.sched_setaffinity(0, allowed)
    if core in clocks:
        return clocks[core], core
    return max(clocks.values()), None


def cpufreq_facts(root: Path = Path("/")) -> dict[str, Any]:
    """cpufreq's maximum clock (MHz), driver and governor, from the first CPU that has them."""
    for cpufreq in sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq")):
        facts: dict[str, Any] = {}
        khz = read_int(cpufreq / "cpuinfo_max_freq")
        if khz is not None:
            facts["cpufreq_max_mhz"] = khz / 1000
        for name in ("driver", "governor"):
            text = read_text(cpufreq / f"scaling_{name}")
            if text:
                facts[f"cpufreq_{name}"] = text
        return facts
    return {}


def measured_clock(devices: list[tuple[str, int, Any]]) -> tuple[float | None, str]:
    """The clock the cpu backend (a backend of kind ``cpu``) measured under its dependent-add load,
    MHz, and what it is; (None, why not) where no described CPU device has one."""
    for backend, _, device in devices:
        extra = (device or {}).get("extra") or {}
        host = kind_of(backend) == "cpu"
        if host and extra.get("clock_ghz"):
            return float(extra["clock_ghz"]) * 1000, (
                "the cpu backend's chain of dependent integer adds on one core, timed when it described the device"
            )
        if host and extra.get("peak_error"):
            return None, f"the cpu backend could not measure its clock: {extra['peak_error']}"
    return None, (
        "no clock measured under load: the cpu backend measures it with llvmlite (pip install 'hwbench[cpu]') "
        "when it describes the device"
    )


def _edac_findings(before: CpuCounters | None, after: CpuCounters, part: dict[str, Any]) -> None:
    readings, problems = part["readings"], part["problems"]
    if after.edac_ce is None or after.edac_ue is None:
        part["skipped"]["edac"] = after.missing.get("edac", "EDAC counters unreadable")
        return
    part["sources"].append("sysfs")
    part["judged"] += 1
    readings.update(edac_ce_count=after.edac_ce, edac_ue_count=after.edac_ue)
    if after.edac_parts:
        readings["edac_errors_where"] = after.edac_parts
    where = ", ".join(f"{p['where']}: {p['ue']}" for p in after.edac_parts if p["ue"])
    if after.edac_ue > 0:
        problems.append(f"EDAC: {after.edac_ue} uncorrected memory error(s)" + (f" ({where})" if where else ""))
    if after.edac_ce > EDAC_CE_LIMIT:
        problems.append(
            f"EDAC: {after.edac_ce} corrected memory errors since the counters were reset, above {EDAC_CE_LIMIT}"
        )
    if before is not None and before.edac_ce is not None:
        rose = after.edac_ce - before.edac_ce
        readings["edac_ce_during_run"] = rose
        if rose > EDAC_CE_RUN_LIMIT and after.edac_ce <= EDAC_CE_LIMIT:
            problems.append(f"EDAC: {rose} corrected memory errors during the run, above {EDAC_CE_RUN_LIMIT}")


def _mce_findings(before: CpuCounters | None, after: CpuCounters, part: dict[str, Any]) -> None:
    if "mce_count" not in after.interrupts:
        part["skipped"]["mce"] = after.missing.get("mce", "no machine-check counts")
        return
    part["sources"].append("procfs")
    part["judged"] += 1
    part["readings"].update(after.interrupts)
    count = after.interrupts["mce_count"]
    if before is not None and "mce_count" in before.interrupts:
        part["readings"]["mce_during_run"] = count - before.interrupts["mce_count"]
    if count > 0:
        during = part["readings"].get("mce_during_run")
        part["problems"].append(
            f"{count} machine-check exception(s) since boot"
            + (f", {during} during the run" if during else "")
            + " (the kernel log or rasdaemon says which bank)"
        )


def _throttle_findings(before: CpuCounters | None, after: CpuCounters, part: dict[str, Any]) -> None:
    readings = part["readings"]
    if after.core_throttle is None and after.package_throttle is None:
        part["skipped"]["thermal_throttle"] = after.missing.get("thermal_throttle", "no thermal-throttle counters")
        return
    part["sources"].append("sysfs")
    for name, value in (("core", after.core_throttle), ("package", after.package_throttle)):
        if value is not None:
            readings[f"{name}_throttle_count"] = value
    if before is None:
        part["skipped"]["thermal_throttle_during_run"] = (
            "one reading: throttling during a run is the rise between a reading before it and one after "
            "(HealthWatch.start, then finish)"
        )
        return
    rises = []
    for name, was, now in (
        ("core", before.core_throttle, after.core_throttle),
        ("package", before.package_throttle, after.package_throttle),
    ):
        if was is not None and now is not None:
            part["judged"] += 1
            readings[f"{name}_throttle_during_run"] = now - was
            if now > was:
                rises.append(f"{name} +{now - was}")
    if rises:
        part["problems"].append(f"CPU thermal throttling during the run (kernel counts: {', '.join(rises)})")


def cpu_findings(
    before: CpuCounters | None,
    after: CpuCounters,
    devices: list[tuple[str, int, Any]],
    *,
    root: Path = Path("/"),
    run_max_mhz: float | None = None,
    load_s: float = LOAD_S,
) -> dict[str, Any]:
    """The host CPU's part of a health entry (``sources``, ``readings``, ``problems``, ``skipped``, and
    ``judged``: how many readings that could show a problem were read):
    the counters ``after`` against ``before`` (None: one reading, no window), the clock the cpu
    backend measured for ``devices``, cpufreq's clock after one core spun ``load_s`` seconds, and
    ``run_max_mhz``, the highest clock cpufreq showed at the window's polls."""
    part: dict[str, Any] = {"sources": [], "readings": {}, "problems": [], "skipped": {}, "judged": 0}
    _edac_findings(before, after, part)
    _mce_findings(before, after, part)
    _throttle_findings(before, after, part)
    mhz, what = measured_clock(devices)
    if mhz is None:
        part["skipped"]["clock_under_load"] = what
    else:
        part["sources"].append("hwbench")
        part["readings"].update(clock_under_load_mhz=round(mhz, 1), clock_under_load_source=what)
    loaded, core = cpufreq_loaded(root, load_s)
    if loaded is None:
        part["skipped"]["cpufreq"] = (
            "no cpufreq under /sys/devices/system/cpu/cpu*/cpufreq (many VMs have none): the kernel reports no clock"
        )
    else:
        part["sources"].append("sysfs")
        part["readings"]["cpufreq_mhz"] = round(loaded, 1)
        part["readings"].update(cpufreq_facts(root))
        if core is not None:
            part["readings"]["cpufreq_core"] = core
        if run_max_mhz is not None:
            part["readings"]["cpufreq_run_max_mhz"] = round(run_max_mhz, 1)
    part["sources"] = list(dict.fromkeys(part["sources"]))
    return part
