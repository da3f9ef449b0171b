"""An NVIDIA GPU's health through NVML (``pynvml``, from ``nvidia-ml-py``; tests hand in a fake module).

Read: ECC counts, retired pages, row remapping, XID critical errors (an event set registered when
the watch starts, drained at each poll and at the end), the clock event (throttle) reasons by
name, the PCIe link against the most the GPU and its slot allow, and each NVLink's state.

Problems: any uncorrected ECC error; any retired page, pending retirement, pending or failed row
remapping; any XID event while watched; a hardware, thermal or power-brake slowdown; a PCIe link
below its maximum generation or width *at a reading where the GPU was busy* (an idle GPU lowers
its link's generation to save power: idle readings are recorded, never judged); NVLinks down on a
GPU whose other links are up (a card with no link up cannot be told from one without bridges).
"""

from __future__ import annotations

import importlib
import os
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: NVML's clock event (throttle) reasons by name, bit ``1 << i`` for the i-th (``nvmlClocksEventReason*``).
CLOCK_REASONS = (
    "gpu_idle applications_clocks_setting sw_power_cap hw_slowdown sync_boost sw_thermal_slowdown "
    "hw_thermal_slowdown hw_power_brake_slowdown display_clock_setting board_limit reliability"
).split()
#: The reasons a healthy, cooled and powered GPU does not show: problems. A power cap under full
#: load is how GPUs run; it is recorded, not judged.
SLOWDOWNS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
GPU_IDLE = 0x1
#: ``nvmlEventTypeXidCriticalError``.
XID_EVENT = 0x8
#: NVML's return codes this module tells apart.
NOT_SUPPORTED, NO_PERMISSION, TIMEOUT = 3, 4, 10
#: Events drained at one poll, at most (a storm of XIDs is not read forever).
MAX_EVENTS = 256


def load_nvml() -> tuple[Any, str]:
    """The ``pynvml`` module, or None and why not."""
    try:
        # nvidia-ml-py is optional: NVML readings exist only where it is installed.
        return importlib.import_module("pynvml"), ""
    except Exception as exc:  # not installed, or broken: not readable here
        return None, f"pynvml is not importable ({exc}): pip install nvidia-ml-py"


def reason_names(bits: int) -> list[str]:
    """The named clock event reasons set in ``bits`` (an unknown bit as ``bit 0x...``)."""
    names = [name for n, name in enumerate(CLOCK_REASONS) if bits >> n & 1]
    return names + [f"bit {1 << n:#x}" for n in range(len(CLOCK_REASONS), 64) if bits >> n & 1]


def _unreadable(exc: Exception, unsupported: str) -> str:
    """Why a reading failed: ``unsupported`` where NVML says the GPU does not support it."""
    code = getattr(exc, "value", None)  # NVML's return code
    if code == NOT_SUPPORTED:
        return unsupported
    if code == NO_PERMISSION:
        return "NVML refused: insufficient permissions (run as root)"
    return f"NVML: {exc}"


def _ask(nvml: Any, call: str, *args: Any) -> Any:
    """``nvml.<call>(*args)``, or None where this NVML lacks the call or the GPU the reading."""
    try:
        return getattr(nvml, call)(*args)
    except (AttributeError, nvml.NVMLError):
        return None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass
class GpuWatch:
    """What the watch saw of one NVML device: counts at the start, readings since, XID events."""

    handle: Any
    index: int
    ecc_before: dict[str, int] | None = None
    reasons: int | None = None
    reasons_now: int | None = None
    link_now: tuple[int, int] | None = None
    busy_link: tuple[int, int] | None = None
    readings: int = 0
    busy: int = 0
    watched: bool = False
    events_reason: str = "one reading: XID events are watched over a run (HealthWatch.start, then finish)"
    xids: list[dict[str, Any]] = field(default_factory=list)


def ecc_counts(nvml: Any, handle: Any) -> dict[str, int]:
    """Corrected and uncorrected ECC errors, volatile (since the driver loaded) and aggregate (the GPU's life)."""
    counts = {}
    for kind, error_type in (("corrected", 0), ("uncorrected", 1)):  # NVML_MEMORY_ERROR_TYPE_*
        for counter, counter_type in (("volatile", 0), ("aggregate", 1)):  # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
            counts[f"ecc_{kind}_{counter}"] = int(nvml.nvmlDeviceGetTotalEccErrors(handle, error_type, counter_type))
    return counts


class NvmlHealth:
    """The NVML side of a health watch: opened once, every NVML device watched from :meth:`start`."""

    def __init__(self, nvml: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.nvml = nvml
        self.clock = clock
        self.reason = ""
        self.opened = False
        self.gpus: dict[int, GpuWatch] = {}
        self.events: Any = None
        self.started_at: float | None = None

    def open(self) -> bool:
        """Start NVML (once); False with :attr:`reason` set where it cannot."""
        if self.opened or self.reason:
            return self.opened
        if self.nvml is None:
            self.nvml, self.reason = load_nvml()
            if self.nvml is None:
                return False
        try:
            self.nvml.nvmlInit()
        except Exception as exc:  # no driver, no library: NVML is not readable here
            self.reason = f"NVML did not start: {exc}"
            return False
        self.opened = True
        return True

    def _gpu(self, index: int) -> GpuWatch:
        if index not in self.gpus:
            self.gpus[index] = GpuWatch(self.nvml.nvmlDeviceGetHandleByIndex(index), index)
        return self.gpus[index]

    def start(self) -> None:
        """Counts before the window and an XID event set, for every NVML device."""
        if not self.open():
            return
        nvml = self.nvml
        self.started_at = self.clock()
        count = _ask(nvml, "nvmlDeviceGetCount")
        if count is None:
            self.reason = "NVML lists no devices"
            return
        events_reason = ""
        try:
            self.events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            events_reason = _unreadable(exc, "NVML has no event sets here")
        for index in range(int(count)):
            gpu = self._gpu(index)
            gpu.watched = True
            try:
                gpu.ecc_before = ecc_counts(nvml, gpu.handle)
            except nvml.NVMLError:  # no ECC: nothing to compare
                pass
            gpu.events_reason = events_reason
            try:
                if self.events is not None:
                    nvml.nvmlDeviceRegisterEvents(gpu.handle, XID_EVENT, self.events)
            except nvml.NVMLError as exc:
                gpu.events_reason = _unreadable(exc, "this GPU does not report XID events to NVML")
        self.poll()

    def poll(self) -> None:
        """One reading under whatever load runs now (link, reasons, utilization) per GPU; XIDs drained."""
        for gpu in self.gpus.values() if self.opened else ():
            self._observe(gpu)
        self._drain()

    def _observe(self, gpu: GpuWatch) -> None:
        nvml, handle = self.nvml, gpu.handle
        reasons = _ask(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:  # an nvidia-ml-py older than the rename, or not readable
            reasons = _ask(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        usage = _ask(nvml, "nvmlDeviceGetUtilizationRates", handle)
        util = None if usage is None else int(usage.gpu)
        gen, width = (_ask(nvml, f"nvmlDeviceGetCurrPcieLink{what}", handle) for what in ("Generation", "Width"))
        gpu.link_now = None if gen is None or width is None else (int(gen), int(width))
        gpu.readings += 1
        if reasons is not None:
            gpu.reasons_now = reasons
            gpu.reasons = (gpu.reasons or 0) | reasons
        # Busy: not idle by the reasons and working by the utilization, where each is readable.
        busy = (
            (reasons is not None or util is not None) and not (reasons or 0) & GPU_IDLE and (util is None or util > 0)
        )
        if busy and gpu.link_now is not None:
            gpu.busy += 1
            was = gpu.busy_link or (0, 0)
            gpu.busy_link = (max(was[0], gpu.link_now[0]), max(was[1], gpu.link_now[1]))

    def _drain(self) -> None:
        nvml = self.nvml
        if self.events is None:
            return
        for _ in range(MAX_EVENTS):
            try:
                data = nvml.nvmlEventSetWait(self.events, 0)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != TIMEOUT:  # a timeout is "no event waiting"
                    for gpu in self.gpus.values():
                        gpu.events_reason = gpu.events_reason or f"reading XID events failed: {exc}"
                return
            index = _ask(nvml, "nvmlDeviceGetIndex", data.device)
            event = {"xid": int(data.eventData), "t_s": round(self.clock() - (self.started_at or 0.0), 3)}
            if index in self.gpus:
                self.gpus[index].xids.append(event)
            else:  # a device NVML cannot name: the node's, so every GPU's, said so
                for gpu in self.gpus.values():
                    gpu.xids.append({**event, "device_unknown": True})

    def close(self) -> None:
        """Free the event set and shut NVML down (its count of users)."""
        if self.opened:
            self.opened = False
            if self.events is not None:
                _ask(self.nvml, "nvmlEventSetFree", self.events)
            _ask(self.nvml, "nvmlShutdown")
            self.events = None

    def resolve(self, backend: str, index: int, device: Mapping[str, Any] | None, by_index: bool = False) -> int:
        """NVML's index of a device: by the UUID or PCI bus id its description's ``extra`` gives, else
        by its index where that is CUDA's (``by_index``: ``CUDA_VISIBLE_DEVICES`` followed, the name
        checked), else by its name (when one NVML device alone has it); LookupError with why not."""
        nvml, name = self.nvml, str((device or {}).get("name") or "")
        extra = (device or {}).get("extra") or {}
        uuid, bus = str(extra.get("uuid") or ""), str(extra.get("pci_bus_id") or "")
        uuid = uuid if not uuid or uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        for call, value in (("nvmlDeviceGetHandleByUUID", uuid), ("nvmlDeviceGetHandleByPciBusId", bus)):
            handle = _ask(nvml, call, value) if value else None
            if handle is not None:  # the description names the device: NVML finds it by that
                return int(nvml.nvmlDeviceGetIndex(handle))
        count = int(nvml.nvmlDeviceGetCount())
        names = [_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(count)]
        if not by_index:
            same = [i for i, n in enumerate(names) if name and _same_name(n, name)]
            if len(same) != 1:
                raise LookupError(f"{len(same)} NVML devices are named '{name}': cannot tell which one this is")
            return same[0]
        found = cuda_visible(nvml, index)
        if found >= count:
            raise LookupError(f"NVML has {count} devices, none with index {found}")
        if name and not _same_name(names[found], name):
            raise LookupError(
                f"NVML's device {found} is '{names[found]}', not '{name}': cannot tell which GPU this is "
                "(CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them as NVML does)"
            )
        return found

    def findings(
        self, backend: str, index: int, device: Mapping[str, Any] | None, by_index: bool = False
    ) -> dict[str, Any]:
        """The NVML part of one device's health entry (``sources``, ``readings``, ``problems``, ``skipped``,
        ``judged``); ``by_index``: the device's index is CUDA's (see :meth:`resolve`)."""
        part: dict[str, Any] = {"sources": [], "readings": {}, "problems": [], "skipped": {}, "judged": 0}
        if not self.open():
            part["skipped"]["nvml"] = self.reason
            return part
        nvml = self.nvml
        try:
            gpu = self._gpu(self.resolve(backend, index, device, by_index))
        except (LookupError, nvml.NVMLError) as exc:
            part["skipped"]["nvml"] = str(exc)
            return part
        part["sources"].append("nvml")
        part["readings"]["nvml_index"] = gpu.index
        self._observe(gpu)
        self._drain()
        for read in (_ecc, _retired, _remapped, _reasons, _pcie, _nvlink, _xids):
            try:
                read(nvml, gpu, part)
            except nvml.NVMLError as exc:
                part["skipped"][read.__name__.strip("_")] = f"NVML: {exc}"
        return part


def cuda_visible(nvml: Any, index: int) -> int:
    """NVML's index of CUDA's device ``index`` as ``CUDA_VISIBLE_DEVICES`` renumbers them (indices or UUIDs)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if not visible:
        return index
    entries = [e.strip() for e in visible.split(",")]
    if index >= len(entries):
        raise LookupError(f"CUDA_VISIBLE_DEVICES={visible} has no entry {index}")
    if entries[index].isdigit():
        return int(entries[index])
    handle = _ask(nvml, "nvmlDeviceGetHandleByUUID", entries[index])
    if handle is None:
        raise LookupError(f"CUDA_VISIBLE_DEVICES entry '{entries[index]}' is no NVML device")
    return int(nvml.nvmlDeviceGetIndex(handle))


def _same_name(a: str, b: str) -> bool:
    a, b = " ".join(a.split()).casefold(), " ".join(b.split()).casefold()
    return a == b or (bool(a) and bool(b) and (a in b or b in a))


def _ecc(nvml: Any, gpu: GpuWatch, part: dict[str, Any]) -> None:
    readings = part["readings"]
    try:
        if not nvml.nvmlDeviceGetEccMode(gpu.handle)[0]:  # [current, pending]
            part["skipped"]["ecc"] = "ECC is off on this GPU (nvidia-smi -e 1, then a GPU reset, turns it on)"
            return
        counts = ecc_counts(nvml, gpu.handle)
    except nvml.NVMLError as exc:
        part["skipped"]["ecc"] = _unreadable(exc, "this GPU has no ECC memory")
        return
    part["judged"] += 1
    readings.update(counts)
    during = ""
    if gpu.ecc_before is not None:
        for kind in ("corrected", "uncorrected"):
            key = f"ecc_{kind}_volatile"
            readings[f"ecc_{kind}_during_run"] = max(0, counts[key] - gpu.ecc_before[key])
        if readings["ecc_uncorrected_during_run"]:
            during = f", {readings['ecc_uncorrected_during_run']} during the run"
    volatile, aggregate = counts["ecc_uncorrected_volatile"], counts["ecc_uncorrected_aggregate"]
    if volatile or aggregate:
        part["problems"].append(
            f"ECC: {volatile} uncorrected error(s) since the driver loaded (volatile){during}, "
            f"{aggregate} over the GPU's life (aggregate)"
        )


def _retired(nvml: Any, gpu: GpuWatch, part: dict[str, Any]) -> None:
    try:
        repeated = len(nvml.nvmlDeviceGetRetiredPages(gpu.handle, 0))  # NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT
        double = len(nvml.nvmlDeviceGetRetiredPages(gpu.handle, 1))  # ..._DOUBLE_BIT_ECC_ERROR
        pending = bool(nvml.nvmlDeviceGetRetiredPagesPendingStatus(gpu.handle))
    except nvml.NVMLError as exc:
        part["skipped"]["retired_pages"] = _unreadable(
            exc, "this GPU does not retire pages (from Ampere on: rows remap)"
        )
        return
    part["judged"] += 1
    part["readings"].update(retired_pages_sbe=repeated, retired_pages_dbe=double, retired_pages_pending=pending)
    if repeated or double:
        part["problems"].append(
            f"{repeated + double} retired memory page(s) ({double} for double-bit errors, {repeated} for "
            "repeated single-bit ones)"
        )
    if pending:
        part["problems"].append("a page retirement is pending: it takes effect at the next GPU reset")


def _remapped(nvml: Any, gpu: GpuWatch, part: dict[str, Any]) -> None:
    try:
        corrected, uncorrected, pending, failed = (int(v) for v in nvml.nvmlDeviceGetRemappedRows(gpu.handle))
    except nvml.NVMLError as exc:
        part["skipped"]["row_remapping"] = _unreadable(
            exc, "this GPU does not remap rows (before Ampere: pages retire)"
        )
        return
    part["judged"] += 1
    part["readings"].update(
        remapped_rows_correctable=corrected,
        remapped_rows_uncorrectable=uncorrected,
        remap_pending=bool(pending),
        remap_failure=bool(failed),
    )
    if failed:
        part["problems"].append("row remapping failed: a memory bank has no spare row left (the GPU needs replacing)")
    if pending:
        part["problems"].append("a row remapping is pending: reset the GPU to apply it")


def _reasons(nvml: Any, gpu: GpuWatch, part: dict[str, Any]) -> None:
    if gpu.reasons is None:
        part["skipped"]["throttle_reasons"] = "NVML reports no clock event (throttle) reasons for this GPU"
        return
    part["judged"] += 1
    names = reason_names(gpu.reasons)
    part["readings"]["throttle_reasons"] = names
    part["readings"]["throttle_reasons_now"] = reason_names(gpu.reasons_now or 0)
    slow = [name for name in names if name in SLOWDOWNS]
    if slow:
        when = f"seen over {gpu.readings} readings of the run" if gpu.watched else "at the reading"
        part["problems"].append(f"clocks slowed by {', '.join(slow)} ({when}): cooling or power delivery")


def _pcie(nvml: Any, gpu: GpuWatch, part: dict[str, Any]) -> None:
    readings = part["readings"]
    top = (
        int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(gpu.handle)),
        int(nvml.nvmlDeviceGetMaxPcieLinkWidth(gpu.handle)),
    )
    readings.update(pcie_gen_max=top[0], pcie_width_max=top[1])
    own = _ask(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", gpu.handle)  # None: an older driver
    if own is not None:
        readings["pcie_gen_gpu_max"] = int(own)
        if own > top[0]:
            readings["pcie_limited_by"] = f"the slot or platform: the GPU does gen {own}, its link at most gen {top[0]}"
    if gpu.link_now is not None:
        readings.update(pcie_gen_current=gpu.link_now[0], pcie_width_current=gpu.link_now[1])
    if gpu.busy_link is None:
        now = f"gen {gpu.link_now[0]} x{gpu.link_now[1]}" if gpu.link_now else "unreadable"
        part["skipped"]["pcie_under_load"] = (
            f"not judged: the GPU was idle at every reading (an idle GPU lowers its PCIe generation to save "
            f"power); the link now {now}, at most gen {top[0]} x{top[1]}"
        )
        return
    part["judged"] += 1
    readings.update(pcie_gen_under_load=gpu.busy_link[0], pcie_width_under_load=gpu.busy_link[1])
    low = [f"gen {gpu.busy_link[0]} of gen {top[0]}"] if gpu.busy_link[0] < top[0] else []
    low += [f"x{gpu.busy_link[1]} of x{top[1]}"] if gpu.busy_link[1] < top[1] else []
    if low:
        part["problems"].append(
            f"PCIe link below its maximum while the GPU was busy: {', '.join(low)} (best of {gpu.busy} busy readings)"
        )


def _nvlink(nvml: Any, gpu: GpuWatch, part: dict[str, Any]) -> None:
    up: list[int] = []
    down: list[int] = []
    for link in range(int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            (up if nvml.nvmlDeviceGetNvLinkState(gpu.handle, link) else down).append(link)
        except nvml.NVMLError:  # no such link on this GPU
            continue
    if not up and not down:
        part["skipped"]["nvlink"] = "NVML reports no NVLink on this GPU"
        return
    part["readings"].update(nvlink_up=len(up), nvlink_down=down)
    if not up:
        part["skipped"]["nvlink_judged"] = f"none of {len(down)} links up: no bridges, or all down (not told apart)"
        return
    part["judged"] += 1
    if down:
        part["problems"].append(
            f"NVLink: {len(down)} of {len(up) + len(down)} links down (links {', '.join(map(str, down))})"
        )


def _xids(nvml: Any, gpu: GpuWatch, part: dict[str, Any]) -> None:
    if not gpu.watched or gpu.events_reason:
        part["skipped"]["xid_events"] = gpu.events_reason or "not watched"
        return
    part["judged"] += 1
    part["readings"]["xid_events"] = gpu.xids
    if gpu.xids:
        counts = Counter(event["xid"] for event in gpu.xids)
        listed = ", ".join(f"XID {xid}" + (f" x{n}" if n > 1 else "") for xid, n in counts.items())
        part["problems"].append(f"XID error(s) during the run: {listed} (nvidia-smi -q and the kernel log say more)")
