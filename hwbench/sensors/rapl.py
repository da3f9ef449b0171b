"""The CPU's energy through RAPL as Linux's powercap exposes it: ``/sys/class/powercap/intel-rapl:N``.

Each package domain (``name`` ``package-N``, one per socket; AMD's Zen packages appear under the
same ``intel-rapl`` driver) has a cumulative ``energy_uj`` that wraps at ``max_energy_range_uj``.
The host CPU's energy is the sum of its packages, each unwrapped on its own: a reading below the
previous one means the counter passed its range once (RAPL's range lasts minutes at full load, so
one wrap between two readings is all there can be when they are seconds apart). Subdomains
(``intel-rapl:N:M``: core, uncore, dram) and ``psys`` overlap the packages and are not added.

Since Linux 5.10 ``energy_uj`` is readable by root only (CVE-2020-8694, the Platypus
side channel): that is said as the reason, never guessed around.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path

#: Where powercap lives under a root.
POWERCAP = Path("sys/class/powercap")
#: RAPL's energy status register is 32 bits wide: the counter's range is (2**32 - 1) of its steps.
STATUS_STEPS = 2**32 - 1
#: The unit of ``energy_uj``, J.
MICROJOULE = 1e-6


@dataclass
class Domain:
    """One package domain's counter: where it is read, its range, its last raw value (µJ)."""

    path: Path
    name: str
    max_range_uj: int
    last_uj: int


def read_int(path: Path) -> int:
    """The integer a sysfs file holds (OSError or ValueError when it cannot be read as one)."""
    return int(path.read_text().strip())


def _unreadable(path: Path, exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return (
            f"RAPL: {path} is readable by root only (Linux 5.10 and later, since CVE-2020-8694): run as root, "
            f"or let this user read it (chmod a+r {path.parent.parent}/intel-rapl:*/energy_uj)"
        )
    return f"RAPL: cannot read {path}: {exc.strerror or exc}"


def _domain(zone: Path) -> Domain | str:
    """The package domain of ``zone``, or why it cannot be read."""
    name = zone / "name"
    try:
        label = name.read_text().strip()
    except OSError as exc:
        return _unreadable(name, exc)
    try:
        max_range = read_int(zone / "max_energy_range_uj")
    except OSError as exc:
        return _unreadable(zone / "max_energy_range_uj", exc)
    except ValueError:
        return f"RAPL: {zone / 'max_energy_range_uj'} does not hold an integer"
    try:
        first = read_int(zone / "energy_uj")
    except OSError as exc:
        return _unreadable(zone / "energy_uj", exc)
    except ValueError:
        return f"RAPL: {zone / 'energy_uj'} does not hold an integer"
    if max_range <= 0:
        return f"RAPL: {zone / 'max_energy_range_uj'} is {max_range}: the counter's wrap-around cannot be unwrapped"
    return Domain(zone / "energy_uj", label, max_range, first)


def package_zones(root: Path) -> list[Path] | str:
    """The package zones under ``root``'s powercap (sockets in order), or why there are none."""
    base = root / POWERCAP
    if not base.is_dir():
        return f"RAPL: no {base} (no powercap driver: a VM, a container without /sys, or a kernel without intel_rapl)"
    zones = sorted(
        (p for p in base.glob("intel-rapl:*") if p.name.count(":") == 1),
        key=lambda p: int(p.name.partition(":")[2]) if p.name.partition(":")[2].isdigit() else 1 << 30,
    )
    packages = []
    for zone in zones:
        try:
            if (zone / "name").read_text().strip().startswith("package"):
                packages.append(zone)
        except OSError:
            packages.append(zone)  # its name is unreadable: _domain says so
    if not packages:
        found = ", ".join(p.name for p in sorted(base.iterdir())) or "nothing"
        return f"RAPL: {base} has no intel-rapl package zone (it has: {found})"
    return packages


class RaplCounter:
    """The host CPU's packages' energy, summed, each counter's wrap-around unwrapped."""

    def __init__(self, domains: list[Domain]) -> None:
        self.domains = domains
        self._total_uj = 0
        #: The counter's step, J: the largest package's range over the register's 2**32 - 1 steps
        #: (RAPL's energy status unit, e.g. 61 µJ), never below the file's µJ.
        steps = [d.max_range_uj / STATUS_STEPS * MICROJOULE for d in domains]
        self.resolution_j = max([MICROJOULE, *(s for s in steps if s <= 1e-3)])

    @property
    def names(self) -> list[str]:
        """The package domains summed."""
        return [d.name for d in self.domains]

    def read_j(self) -> float:
        """Energy since opened, J (OSError or ValueError when a counter cannot be read)."""
        for domain in self.domains:
            raw = read_int(domain.path)
            step = raw - domain.last_uj
            if step < 0:  # the counter passed max_energy_range_uj and started again from 0
                step += domain.max_range_uj
            self._total_uj += step
            domain.last_uj = raw
        return self._total_uj * MICROJOULE


def open_rapl(root: Path = Path("/")) -> RaplCounter | str:
    """The host CPU's RAPL packages under ``root``, or the one-line reason they cannot be read."""
    zones = package_zones(root)
    if isinstance(zones, str):
        return zones
    domains = []
    for zone in zones:
        domain = _domain(zone)
        if isinstance(domain, str):
            return domain
        domains.append(domain)
    return RaplCounter(domains)
