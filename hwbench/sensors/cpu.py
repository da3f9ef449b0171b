"""The host CPU's readers: energy through RAPL (:mod:`.rapl`), the clock and the temperature.

The clock is cpufreq's ``scaling_cur_freq`` averaged over the CPUs, else the ``cpu MHz`` lines of
``/proc/cpuinfo`` (which, in many VMs, only repeat the nominal clock); the temperature is the
hottest CPU sensor of hwmon (``coretemp``, ``k10temp``, ``zenpower``...), else of the thermal zones
whose type names the CPU package. Which files exist is found once, when opened, so a reading is a
few small reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hwbench.sensors.base import Sample, Sensors
from hwbench.sensors.rapl import RaplCounter, open_rapl

#: hwmon drivers whose temperatures are the CPU's.
CPU_HWMON = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "soc_thermal")
#: thermal zone types that are the CPU package.
CPU_ZONES = ("x86_pkg_temp", "cpu-thermal", "cpu_thermal", "soc-thermal", "soc_thermal", "cpu")


def _number(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


@dataclass
class CpuFiles:
    """Where the CPU's clock and temperature are read, found once under a root."""

    root: Path
    freq: list[Path] = field(default_factory=list)  # cpufreq scaling_cur_freq (kHz), one per CPU
    cpuinfo: Path | None = None  # /proc/cpuinfo when it has "cpu MHz" lines and cpufreq is absent
    temps: list[Path] = field(default_factory=list)  # millidegrees C

    @classmethod
    def find(cls, root: Path) -> CpuFiles:
        """The clock and temperature files under ``root`` (empty lists where there are none)."""
        found = cls(root)
        freq = sorted((root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"))
        found.freq = [p for p in freq if _number(p) is not None]
        if not found.freq and cpuinfo_mhz(root / "proc/cpuinfo") is not None:
            found.cpuinfo = root / "proc/cpuinfo"
        for hwmon in sorted((root / "sys/class/hwmon").glob("hwmon*")):
            try:
                name = (hwmon / "name").read_text().strip()
            except OSError:
                continue
            if name in CPU_HWMON:
                found.temps += [p for p in sorted(hwmon.glob("temp*_input")) if _number(p) is not None]
        if not found.temps:
            for zone in sorted((root / "sys/class/thermal").glob("thermal_zone*")):
                try:
                    kind = (zone / "type").read_text().strip()
                except OSError:
                    continue
                if kind in CPU_ZONES and _number(zone / "temp") is not None:
                    found.temps.append(zone / "temp")
        return found

    def clock_mhz(self) -> float | None:
        """The CPUs' mean current clock, MHz (None where nothing says it)."""
        if self.freq:
            values = [v for v in (_number(p) for p in self.freq) if v is not None]
            return sum(values) / len(values) / 1000 if values else None
        return cpuinfo_mhz(self.cpuinfo) if self.cpuinfo is not None else None

    def temp_c(self) -> float | None:
        """The hottest CPU temperature sensor, °C (None where there is none)."""
        values = [v for v in (_number(p) for p in self.temps) if v is not None]
        return max(values) / 1000 if values else None

    def what(self) -> str:
        """Which clock and temperature this reads, or that it has none."""
        clock = "cpufreq" if self.freq else ("/proc/cpuinfo MHz" if self.cpuinfo else "no clock")
        return f"{clock}, {'a temperature' if self.temps else 'no temperature'}"


def cpuinfo_mhz(path: Path | None) -> float | None:
    """The mean of the ``cpu MHz`` lines of a /proc/cpuinfo (None without one)."""
    if path is None:
        return None
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    values = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "cpu MHz":
            try:
                values.append(float(value))
            except ValueError:
                continue
    return sum(values) / len(values) if values else None


class CpuSensors(Sensors):
    """The host CPU: RAPL energy where readable, the clock and the temperature where present."""

    def __init__(self, files: CpuFiles, rapl: RaplCounter | None, reason: str = "") -> None:
        self.files, self.rapl, self.reason = files, rapl, reason
        self.source = "rapl" if rapl is not None else "cpu"
        self.energy_resolution_j = rapl.resolution_j if rapl is not None else None

    def sample(self) -> Sample:
        now = time.monotonic()
        energy = self.rapl.read_j() if self.rapl is not None else None
        return Sample(now, None, energy, self.files.temp_c(), self.files.clock_mhz())

    def energy_sample(self) -> Sample:
        now = time.monotonic()
        return Sample(now, None, self.rapl.read_j() if self.rapl is not None else None, None, None)


def open_cpu(root: Path = Path("/")) -> CpuSensors | str:
    """The host CPU's readers under ``root``; the reason (RAPL's first) when none reads anything."""
    rapl = open_rapl(root)
    files = CpuFiles.find(root)
    if isinstance(rapl, str):
        if not (files.freq or files.cpuinfo or files.temps):
            return f"{rapl}; no CPU clock or temperature either"
        return CpuSensors(files, None, rapl)
    return CpuSensors(files, rapl)
