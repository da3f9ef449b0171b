"""Which readers a backend's device has: :func:`open_sensors`, and :class:`DeviceSensors`, each
device's readers opened once in a process and said once in a results file.

The backend says what observes each of its devices (:meth:`hwbench.core.backend.Backend.observers`,
:func:`observers_of`): by default, a device of a ``cpu`` backend and any device of kind ``cpu``
(an OpenCL CPU device is the host CPU too) is read through :mod:`.cpu` (RAPL, cpufreq, hwmon), an
NVIDIA GPU through NVML (:mod:`.nvml`), an AMD GPU through amdsmi (:mod:`.amd`); a backend with
readers of its own hands them over instead. ``HWBENCH_SENSORS_ROOT`` names another root for the
files read (tests point it at a fake sysfs tree; it is never needed on a real host).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hwbench.sensors.amd import open_amdsmi
from hwbench.sensors.base import READINGS, Sensors
from hwbench.sensors.cpu import open_cpu
from hwbench.sensors.nvml import open_nvml
from hwbench.sensors.observers import observers_of

#: The environment variable naming the root of the files sensors read (default ``/``).
ROOT_VARIABLE = "HWBENCH_SENSORS_ROOT"


def sensors_root() -> Path:
    """The root the sensor files are read under: ``$HWBENCH_SENSORS_ROOT``, else ``/``."""
    return Path(os.environ.get(ROOT_VARIABLE) or "/")


def reader_of(backend: str, device: Mapping[str, Any] | None) -> str:
    """Which of hwbench's readers a device has: ``cpu``, ``nvml``, ``amdsmi``, or empty for none."""
    return observers_of(backend, device).readers


def open_sensors(
    backend: str, device_index: int, device: Mapping[str, Any] | None = None, *, root: Path = Path("/")
) -> Sensors | str:
    """The readers of device ``backend:device_index`` (``device``: its description, a
    ``DeviceInfo`` as a mapping), or the one-line reason none are readable: the backend's own
    readers where it has them (:attr:`~hwbench.core.backend.Observers.sensors`), else hwbench's.
    Files are read under ``root``; NVML and amdsmi are asked through their libraries."""
    observers = observers_of(backend, device)
    if observers.sensors is not None:
        own = observers.sensors()
        if not isinstance(own, (Sensors, str)):
            return (
                f"backend '{backend}' broke the backend contract: its observers' sensors() returned a "
                f"{type(own).__name__}, not a hwbench.sensors.base.Sensors or a reason"
            )
        return own
    reader = observers.readers
    if reader == "cpu":
        return open_cpu(root)
    if reader == "nvml":
        return open_nvml(backend, device_index, device)
    if reader == "amdsmi":
        return open_amdsmi(backend, device_index, device)
    kind, vendor = (device or {}).get("kind") or "unknown kind", (device or {}).get("vendor") or "no vendor"
    return f"no sensor readers for {backend}:{device_index} (a {kind} device of {vendor})"


class DeviceSensors:
    """Each device's readers, opened on first use and kept until :meth:`close` (one per worker
    process: a cache of open SDK sessions). The host CPU is opened once for every backend that
    shows it."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = sensors_root() if root is None else root
        self._open: dict[tuple[Any, ...], Sensors | str] = {}

    @staticmethod
    def key(backend: str, index: int, device: Mapping[str, Any] | None) -> tuple[Any, ...]:
        """What identifies the readers of a device: the host CPU is one, whatever the backend."""
        reader = reader_of(backend, device)
        return ("cpu",) if reader == "cpu" else (reader, backend, index)

    def get(self, backend: str, index: int, device: Mapping[str, Any] | None = None) -> Sensors | str:
        """The device's readers (opened the first time), or why none are readable."""
        key = self.key(backend, index, device)
        if key not in self._open:
            try:
                self._open[key] = open_sensors(backend, index, device, root=self.root)
            except Exception as exc:  # a broken SDK install: the reason, not a failed case
                self._open[key] = f"opening the sensors failed: {type(exc).__name__}: {exc}"
        return self._open[key]

    def entry(self, backend: str, index: int, device: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The results file's ``sensors`` entry of a device: its source, whether energy is
        readable, which readings answer, and why what is missing is missing."""
        found = self.get(backend, index, device)
        name = (device or {}).get("name")
        if isinstance(found, str):
            return {
                "backend": backend,
                "device_index": index,
                "device": name,
                "source": None,
                "energy": False,
                "reason": found,
                "reads": [],
            }
        try:
            sample = found.sample()
            reads = [field for field in READINGS if getattr(sample, field) is not None]
        except Exception as exc:  # a reading that fails now: said, not raised
            reads, found.reason = [], f"{found.reason}; reading failed: {exc}".lstrip("; ")
        return {
            "backend": backend,
            "device_index": index,
            "device": name,
            "source": found.source,
            "energy": found.energy_readable,
            "reason": found.reason,
            "reads": reads,
        }

    def close(self) -> None:
        """Close every device's readers."""
        for found in self._open.values():
            if not isinstance(found, str):
                try:
                    found.close()
                except Exception:  # closing is best effort: the process is ending anyway
                    pass
        self._open.clear()
