"""Health readings of devices: one entry per device in a results document's ``health`` section.

A :class:`HealthWatch` reads before the work (:meth:`~HealthWatch.start`), while it runs
(:meth:`~HealthWatch.poll`, or a thread every ``poll_s`` seconds) and after it
(:meth:`~HealthWatch.finish`); problems that are about the run (XID events, throttle counts
that rose, the PCIe link under load) use what changed in between. :func:`read_health` and
:func:`health_section` take one reading, without a window: those checks are then skipped, said so.

The readers: the host CPU from ``/sys`` and ``/proc`` (:mod:`hwbench.sensors.health_cpu`), NVIDIA
GPUs through NVML (:mod:`~hwbench.sensors.health_nvml`), AMD GPUs through amdsmi
(:mod:`~hwbench.sensors.health_amd`); which of them reads a device, and whether it finds the device
by index, the device's backend says (:func:`~hwbench.sensors.observers.observers_of`). Each entry::

    {"backend", "device_index", "device", "sources": [str], "readings": {name: value},
     "problems": [str], "skipped": {name: reason}, "clean": bool | None, "window_s", "polls"}

``clean`` is None when no reading that could show a problem was readable (a clock alone judges
nothing), False when there is any problem, True otherwise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from hwbench.sensors.health_amd import AmdHealth
from hwbench.sensors.health_cpu import LOAD_S, CpuCounters, cpu_findings, cpufreq_now, read_counters
from hwbench.sensors.health_nvml import NvmlHealth
from hwbench.sensors.observers import kind_of, observers_of

#: Seconds between the readings a watch's thread takes while the work runs.
POLL_S = 1.0
#: One device: backend name, index within it, its description (a results file's device object) or None.
Device = tuple[str, int, Mapping[str, Any] | None]


class HealthWatch:
    """Health over a window: :meth:`start` before the work, :meth:`poll` during it (or a thread,
    with ``poll_s``), :meth:`finish` after; also a context manager (start, then close).

    ``backends`` names what the work runs on: NVML and amdsmi start unless every one of them is a
    backend of kind ``cpu`` (None: they start); the host's counters are always read. ``root`` is the file
    tree read (``/``), ``nvml`` and ``amdsmi`` the SDK modules (imported where not given),
    ``load_s`` how long one core spins before cpufreq's clock is read.
    """

    def __init__(
        self,
        backends: Iterable[str] | None = None,
        *,
        root: Path = Path("/"),
        nvml: Any = None,
        amdsmi: Any = None,
        poll_s: float | None = None,
        load_s: float = LOAD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backends = None if backends is None else frozenset(backends)
        self.root = root
        self.poll_s = poll_s
        self.load_s = load_s
        self.clock = clock
        self.nvml = NvmlHealth(nvml, clock)
        self.amd = AmdHealth(amdsmi)
        self.cpu_before: CpuCounters | None = None
        self.started_at: float | None = None
        self.polls = 0
        self.cpufreq_max: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _gpus_watched(self) -> bool:
        """Whether the work may run on a GPU: a backend not of kind ``cpu`` (or of a kind not known here)."""
        return self.backends is None or any(kind_of(name) != "cpu" for name in self.backends)

    def start(self) -> HealthWatch:
        """The readings before the work; the polling thread started where ``poll_s`` is set and
        something changes under load (a GPU watched, or cpufreq)."""
        with self._lock:
            self.started_at = self.clock()
            self.cpu_before = read_counters(self.root)
            if self._gpus_watched():
                self.nvml.start()
                self.amd.start()
            pollable = self.nvml.gpus or self.amd.gpus or cpufreq_now(self.root)
        if self.poll_s and pollable and self._thread is None:
            self._thread = threading.Thread(target=self._poll_loop, name="hwbench-health-poll", daemon=True)
            self._thread.start()
        return self

    def _poll_loop(self) -> None:
        assert self.poll_s is not None
        while not self._stop.wait(self.poll_s):
            self.poll()

    def poll(self) -> None:
        """One reading of what changes under load: GPU links, throttle reasons and XID events, cpufreq's clock."""
        with self._lock:
            self.polls += 1
            self.nvml.poll()
            self.amd.poll()
            clocks = cpufreq_now(self.root)
            if clocks:
                self.cpufreq_max = max(self.cpufreq_max or 0.0, *clocks.values())

    def _stop_polling(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def finish(self, devices: Iterable[Device]) -> list[dict[str, Any]]:
        """One health entry per device, from the readings now against those since :meth:`start`
        (none: one reading); ends the watch (:meth:`close`)."""
        self._stop_polling()
        chosen = list(devices)
        try:
            with self._lock:
                return self._entries(chosen)
        finally:
            self.close()

    def _entries(self, devices: list[Device]) -> list[dict[str, Any]]:
        window = None if self.started_at is None else round(self.clock() - self.started_at, 3)
        cpu_part: dict[str, Any] | None = None
        entries = []
        for backend, index, device in devices:
            observers = observers_of(backend, device)
            side = observers.readers
            if side == "cpu":
                if cpu_part is None:  # the host's counters, read once for every CPU device
                    cpu_part = cpu_findings(
                        self.cpu_before,
                        read_counters(self.root),
                        [(b, i, d) for b, i, d in devices if observers_of(b, d).readers == "cpu"],
                        root=self.root,
                        run_max_mhz=self.cpufreq_max,
                        load_s=self.load_s,
                    )
                part = cpu_part
            elif side == "nvml":
                part = self.nvml.findings(backend, index, device, observers.by_index)
            elif side == "amdsmi":
                part = self.amd.findings(backend, index, device, observers.by_index)
            else:
                vendor, kind = (device or {}).get("vendor") or "unknown vendor", (device or {}).get("kind") or "device"
                part = {
                    "skipped": {
                        "device": f"no health readers for a {vendor} {kind} (hwbench reads the host CPU, "
                        "NVIDIA GPUs through NVML and AMD GPUs through amdsmi)"
                    }
                }
            entries.append(entry(backend, index, device, part, window, self.polls))
        return entries

    def close(self) -> None:
        """Stop polling and release the SDK sessions (idempotent)."""
        self._stop_polling()
        self.nvml.close()
        self.amd.close()

    def __enter__(self) -> HealthWatch:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def entry(
    backend: str,
    index: int,
    device: Mapping[str, Any] | None,
    part: Mapping[str, Any],
    window_s: float | None = None,
    polls: int = 0,
) -> dict[str, Any]:
    """A health entry of one device from a reader's part (``judged``: readings that could show a problem)."""
    problems = list(part.get("problems", []))
    return {
        "backend": backend,
        "device_index": index,
        "device": None if device is None or device.get("name") is None else str(device["name"]),
        "sources": list(part.get("sources", [])),
        "readings": dict(part.get("readings", {})),
        "problems": problems,
        "skipped": dict(part.get("skipped", {})),
        "clean": None if not part.get("judged") else not problems,
        "window_s": window_s,
        "polls": polls,
    }


def read_health(
    backend: str,
    device_index: int,
    device: Mapping[str, Any] | None = None,
    *,
    root: Path = Path("/"),
    nvml: Any = None,
    amdsmi: Any = None,
    load_s: float = LOAD_S,
) -> dict[str, Any]:
    """One device's health entry from one reading (no window: the checks about a run are skipped)."""
    watch = HealthWatch([backend], root=root, nvml=nvml, amdsmi=amdsmi, load_s=load_s)
    return watch.finish([(backend, device_index, device)])[0]


def health_section(
    devices: Iterable[Device],
    *,
    root: Path = Path("/"),
    nvml: Any = None,
    amdsmi: Any = None,
    load_s: float = LOAD_S,
) -> list[dict[str, Any]]:
    """Every device's health entry from one reading each (the host CPU read once for all CPU devices)."""
    chosen = list(devices)
    return HealthWatch({b for b, _, _ in chosen}, root=root, nvml=nvml, amdsmi=amdsmi, load_s=load_s).finish(chosen)


def run_devices(doc: Mapping[str, Any]) -> list[Device]:
    """The devices of a results document's available backends that its records ran on (all of
    them where no record names one)."""
    listed = [
        (str(b["name"]), int(d["index"]), d)
        for b in doc.get("backends", [])
        if b.get("available")
        for d in b.get("devices", [])
    ]
    used = {(r.get("backend"), r.get("device_index")) for r in doc.get("records", []) if r.get("impl") != "*"}
    return [d for d in listed if (d[0], d[1]) in used] or listed


def health_lines(doc: Mapping[str, Any]) -> list[str]:
    """The health problems of a results document, one line per set of devices that share them."""
    grouped: dict[tuple[str, ...], list[str]] = {}
    for item in doc.get("health") or []:
        if item.get("problems"):
            grouped.setdefault(tuple(item["problems"]), []).append(f"{item['backend']}:{item['device_index']}")
    return [f"health {', '.join(who)}: {'; '.join(problems)}" for problems, who in grouped.items()]
