"""An AMD GPU's health through amdsmi (AMD SMI's Python library; tests hand in a fake module object).

Read: ECC counts (correctable, uncorrectable, deferred), retired (bad) pages and pending ones, the
throttle status and the thermal and power violations active now (and their accumulated counters
over a watched window, where the GPU has them), the PCIe link (current generation and width
against the maximum the link allows), and the XGMI links' states.

Problems: any uncorrectable ECC error; any bad page; a thermal violation (PROCHOT, socket, VR, HBM)
active at a reading or accumulated during the window; a PCIe link below its maximum at a reading
where the GPU was busy (idle GPUs lower the link's speed: idle readings are never judged); XGMI
links down on a GPU whose other links are up.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: PCIe transfer rate (MT/s) -> generation.
PCIE_GEN = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}
#: amdsmi's violations (``amdsmi_get_violation_status``) that mean heat: problems when active.
THERMAL = ("prochot_thrm", "socket_thrm", "vr_thrm", "hbm_thrm")
#: The environment variables that renumber the GPUs HIP sees, innermost last.
VISIBLE = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def load_amdsmi() -> tuple[Any, str]:
    """The ``amdsmi`` module, or None and why not."""
    try:
        # amdsmi is optional (it ships with ROCm): AMD readings exist only where it is installed.
        return importlib.import_module("amdsmi"), ""
    except Exception as exc:  # not installed, or its library missing: not readable here
        return None, f"amdsmi is not importable ({exc}): it comes with ROCm (pip install amdsmi against it)"


def pcie_generation(rate: Any) -> int | None:
    """The PCIe generation of a transfer rate amdsmi reports in MT/s (or GT/s, below 100)."""
    if not isinstance(rate, int | float) or isinstance(rate, bool) or rate <= 0:
        return None
    return PCIE_GEN.get(int(rate * 1000 if rate < 100 else rate))


def _number(value: Any) -> int | None:
    """An amdsmi figure as an int (None for its "N/A")."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass
class AmdGpu:
    """What the watch saw of one amdsmi GPU."""

    handle: Any
    index: int
    violations_before: dict[str, int] | None = None
    busy_link: tuple[int, int] | None = None
    link_now: tuple[int, int] | None = None
    busy: int = 0
    thermal_seen: frozenset[str] = frozenset()
    watched: bool = False


class AmdHealth:
    """The amdsmi side of a health watch: opened once, every GPU watched from :meth:`start`."""

    def __init__(self, amdsmi: Any = None) -> None:
        self.amdsmi = amdsmi
        self.reason = ""
        self.opened = False
        self.gpus: dict[int, AmdGpu] = {}

    def open(self) -> bool:
        """Start amdsmi (once); False with :attr:`reason` set where it cannot."""
        if self.opened or self.reason:
            return self.opened
        if self.amdsmi is None:
            self.amdsmi, self.reason = load_amdsmi()
            if self.amdsmi is None:
                return False
        try:
            self.amdsmi.amdsmi_init()
            handles = list(self.amdsmi.amdsmi_get_processor_handles())
        except Exception as exc:  # no driver: amdsmi is not readable here
            self.reason = f"amdsmi did not start: {exc}"
            return False
        self.gpus = {i: AmdGpu(h, i) for i, h in enumerate(handles)}
        self.opened = True
        return True

    def start(self) -> None:
        """Violation counters before the window, and a first reading, of every GPU."""
        if not self.open():
            return
        for gpu in self.gpus.values():
            gpu.watched = True
            gpu.violations_before = self._violations(gpu)[1]
        self.poll()

    def poll(self) -> None:
        """One reading of the link and the active violations of every GPU."""
        for gpu in self.gpus.values() if self.opened else ():
            self._observe(gpu)

    def _violations(self, gpu: AmdGpu) -> tuple[frozenset[str], dict[str, int] | None]:
        """The thermal violations active now and the accumulated counters (None where unreadable)."""
        try:
            status = self.amdsmi.amdsmi_get_violation_status(gpu.handle)
        except (self.amdsmi.AmdSmiException, AttributeError):  # an older amdsmi or GPU: none
            return frozenset(), None
        active = frozenset(name for name in THERMAL if status.get(f"active_{name}") is True)
        counters = {name: _number(status.get(f"acc_{name}")) for name in THERMAL}
        return active, {k: v for k, v in counters.items() if v is not None} or None

    def _observe(self, gpu: AmdGpu) -> None:
        amdsmi = self.amdsmi
        try:
            metric = amdsmi.amdsmi_get_pcie_info(gpu.handle)["pcie_metric"]
            gen, width = pcie_generation(metric.get("pcie_speed")), _number(metric.get("pcie_width"))
            gpu.link_now = (gen, width) if gen and width else None
        except (amdsmi.AmdSmiException, KeyError, TypeError):
            gpu.link_now = None
        try:
            busy = (_number(amdsmi.amdsmi_get_gpu_activity(gpu.handle).get("gfx_activity")) or 0) > 0
        except (amdsmi.AmdSmiException, AttributeError):
            busy = False
        active, _ = self._violations(gpu)
        gpu.thermal_seen |= active
        if busy and gpu.link_now is not None:
            gpu.busy += 1
            was = gpu.busy_link or (0, 0)
            gpu.busy_link = (max(was[0], gpu.link_now[0]), max(was[1], gpu.link_now[1]))

    def close(self) -> None:
        """Shut amdsmi down."""
        if self.opened:
            self.opened = False
            try:
                self.amdsmi.amdsmi_shut_down()
            except self.amdsmi.AmdSmiException:
                pass

    def resolve(self, backend: str, index: int, by_index: bool = False) -> int:
        """amdsmi's index of a device whose index is HIP's (``by_index``; the visible-devices variables
        followed); LookupError with why not."""
        if not by_index:
            raise LookupError(
                f"an AMD GPU through {backend} is not matched to amdsmi's devices: read it through a backend "
                "that numbers GPUs as HIP does (rocm)"
            )
        found = index
        for name in VISIBLE:
            value = os.environ.get(name, "").strip()
            if value:
                entries = [e.strip() for e in value.split(",")]
                if found >= len(entries) or not entries[found].isdigit():
                    raise LookupError(f"{name}={value}: cannot tell which amdsmi device HIP's {found} is")
                found = int(entries[found])
        if found not in self.gpus:
            raise LookupError(f"amdsmi has {len(self.gpus)} GPUs, none with index {found}")
        return found

    def findings(
        self, backend: str, index: int, device: Mapping[str, Any] | None, by_index: bool = False
    ) -> dict[str, Any]:
        """The amdsmi part of one device's health entry (``sources``, ``readings``, ``problems``, ``skipped``,
        ``judged``)."""
        part: dict[str, Any] = {"sources": [], "readings": {}, "problems": [], "skipped": {}, "judged": 0}
        if not self.open():
            part["skipped"]["amdsmi"] = self.reason
            return part
        try:
            gpu = self.gpus[self.resolve(backend, index, by_index)]
        except LookupError as exc:
            part["skipped"]["amdsmi"] = str(exc)
            return part
        part["sources"].append("amdsmi")
        part["readings"]["amdsmi_index"] = gpu.index
        self._observe(gpu)
        for read in (self._ecc, self._bad_pages, self._throttle, self._pcie, self._xgmi):
            try:
                read(gpu, part)
            except (self.amdsmi.AmdSmiException, KeyError, TypeError) as exc:
                part["skipped"][read.__name__.strip("_")] = f"amdsmi: {exc}"
        return part

    def _ecc(self, gpu: AmdGpu, part: dict[str, Any]) -> None:
        counts = self.amdsmi.amdsmi_get_gpu_total_ecc_count(gpu.handle)
        values = {k: _number(counts.get(f"{k}_count")) for k in ("correctable", "uncorrectable", "deferred")}
        if values["uncorrectable"] is None:
            part["skipped"]["ecc"] = "amdsmi reports no ECC counts for this GPU"
            return
        part["judged"] += 1
        part["readings"].update({f"ecc_{k}": v for k, v in values.items() if v is not None})
        if values["uncorrectable"]:
            part["problems"].append(f"ECC: {values['uncorrectable']} uncorrectable error(s)")

    def _bad_pages(self, gpu: AmdGpu, part: dict[str, Any]) -> None:
        pages = list(self.amdsmi.amdsmi_get_gpu_bad_page_info(gpu.handle))
        pending = [p for p in pages if p.get("status") == 1 or "PENDING" in str(p.get("status"))]
        part["judged"] += 1
        part["readings"].update(bad_pages=len(pages), bad_pages_pending=len(pending))
        if pages:
            part["problems"].append(
                f"{len(pages)} retired (bad) memory page(s)" + (f", {len(pending)} pending" if pending else "")
            )

    def _throttle(self, gpu: AmdGpu, part: dict[str, Any]) -> None:
        readings = part["readings"]
        try:
            status = self.amdsmi.amdsmi_get_gpu_metrics_info(gpu.handle).get("throttle_status")
            if isinstance(status, bool):
                readings["throttle_status"] = status
        except self.amdsmi.AmdSmiException:
            pass
        active, after = self._violations(gpu)
        seen = sorted(gpu.thermal_seen | active)
        rose = []
        if gpu.violations_before is not None and after is not None:
            rose = sorted(k for k, v in after.items() if v > gpu.violations_before.get(k, v))
        if after is None and not seen and "throttle_status" not in readings:
            part["skipped"]["throttle"] = "amdsmi reports neither throttle status nor violations for this GPU"
            return
        part["judged"] += 1 if after is not None or seen else 0
        readings["thermal_violations"] = sorted(set(seen) | set(rose))
        if seen or rose:
            part["problems"].append(f"thermal throttling: {', '.join(readings['thermal_violations'])} violation(s)")

    def _pcie(self, gpu: AmdGpu, part: dict[str, Any]) -> None:
        static = self.amdsmi.amdsmi_get_pcie_info(gpu.handle)["pcie_static"]
        gen = _number(static.get("pcie_interface_version")) or pcie_generation(static.get("max_pcie_speed"))
        width = _number(static.get("max_pcie_width"))
        if not gen or not width:
            part["skipped"]["pcie"] = "amdsmi reports no PCIe maximum for this GPU"
            return
        part["readings"].update(pcie_gen_max=gen, pcie_width_max=width)
        if gpu.link_now is not None:
            part["readings"].update(pcie_gen_current=gpu.link_now[0], pcie_width_current=gpu.link_now[1])
        if gpu.busy_link is None:
            part["skipped"]["pcie_under_load"] = (
                "not judged: the GPU was idle at every reading (an idle GPU lowers its PCIe speed to save power)"
            )
            return
        part["judged"] += 1
        low = [f"gen {gpu.busy_link[0]} of gen {gen}"] if gpu.busy_link[0] < gen else []
        low += [f"x{gpu.busy_link[1]} of x{width}"] if gpu.busy_link[1] < width else []
        part["readings"].update(pcie_gen_under_load=gpu.busy_link[0], pcie_width_under_load=gpu.busy_link[1])
        if low:
            part["problems"].append(f"PCIe link below its maximum while the GPU was busy: {', '.join(low)}")

    def _xgmi(self, gpu: AmdGpu, part: dict[str, Any]) -> None:
        try:
            states = list(self.amdsmi.amdsmi_get_gpu_xgmi_link_status(gpu.handle)["status"])
        except (self.amdsmi.AmdSmiException, AttributeError):
            part["skipped"]["xgmi"] = "amdsmi reports no XGMI links for this GPU"
            return
        up = [i for i, s in enumerate(states) if s == "U"]
        down = [i for i, s in enumerate(states) if s == "D"]
        part["readings"].update(xgmi_up=len(up), xgmi_down=down)
        if up:
            part["judged"] += 1
        if up and down:
            part["problems"].append(
                f"XGMI: {len(down)} of {len(up) + len(down)} links down (links {', '.join(map(str, down))})"
            )
