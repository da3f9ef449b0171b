"""An NVIDIA GPU's readers through NVML (``pynvml``, from the ``nvidia-ml-py`` package).

Energy comes from ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta and
later) where the GPU has it, else from sampling ``nvmlDeviceGetPowerUsage`` (mW); the temperature
is ``nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)``, the clock ``nvmlDeviceGetClockInfo(NVML_CLOCK_SM)``.
What the GPU does not support is found once, when opened, and not asked again.

Which NVML device a backend's device is: its UUID or PCI bus id (from the device's description,
else from torch's properties where this process already loaded torch), else the one NVML device
of the same name, else the only one. NVML numbers devices by PCI bus, CUDA fastest first, so an
index alone is not trusted where there are several.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from hwbench.sensors.base import Sample, Sensors
from hwbench.sensors.observers import observers_of

#: NVML's energy counter counts millijoules.
MILLIJOULE = 1e-3


def torch_identity(backend: str, index: int, device: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """(UUID, PCI bus id) of ``backend:index`` from torch's device properties, where this process
    has torch loaded already (the backends torch drives GPUs through load it) and the backend
    numbers its devices as the vendor's runtime does (:attr:`~hwbench.core.backend.Observers.by_index`);
    empty strings otherwise."""
    torch = sys.modules.get("torch")
    if torch is None or not observers_of(backend, device).by_index:
        return "", ""
    try:
        props = torch.cuda.get_device_properties(index)
    except Exception:  # no such device, or CUDA not initialised here: no identity to offer
        return "", ""
    uuid = str(getattr(props, "uuid", "") or "")
    parts = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    if any(p is None for p in parts):
        return uuid, ""
    domain, bus, dev = (int(str(p)) for p in parts)
    return uuid, f"{domain:04x}:{bus:02x}:{dev:02x}.0"


def identity(backend: str, index: int, device: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(UUID, PCI bus id, name) a device is known by: its description's, else torch's."""
    device = device or {}
    extra = device.get("extra") or {}
    uuid, bus = str(extra.get("uuid") or ""), str(extra.get("pci_bus_id") or "")
    if not (uuid or bus):
        uuid, bus = torch_identity(backend, index, device)
    return uuid, bus, str(device.get("name") or "")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def find_handle(nvml: Any, backend: str, index: int, device: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The NVML handle of the device and how it was matched, or (None, why none matched)."""
    uuid, bus, name = identity(backend, index, device)
    if uuid:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"), "uuid"
        except nvml.NVMLError:
            pass
    if bus:
        try:
            return nvml.nvmlDeviceGetHandleByPciBusId(bus), "pci bus id"
        except nvml.NVMLError:
            pass
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(int(nvml.nvmlDeviceGetCount()))]
    named = [h for h in handles if name and _text(nvml.nvmlDeviceGetName(h)) == name]
    if len(named) == 1:
        return named[0], "name"
    if len(handles) == 1:
        return handles[0], "the only NVML device"
    what = f"{len(named)} NVML devices are named {name!r}" if named else f"none of the {len(handles)} is {name!r}"
    return (
        None,
        f"NVML: cannot tell which of its {len(handles)} devices {backend}:{index} is ({what}; no UUID or PCI bus id)",
    )


def _probe(nvml: Any, read: Callable[[], Any]) -> str:
    """Empty when ``read()`` answers, else NVML's word for why not."""
    try:
        read()
        return ""
    except nvml.NVMLError as exc:
        return str(exc) or "error"


class NvmlSensors(Sensors):
    """One NVIDIA GPU's readers; the NVML session is held until :meth:`close`."""

    source = "nvml"

    def __init__(self, nvml: Any, handle: Any, supported: Mapping[str, bool], reason: str = "") -> None:
        self._nvml, self._handle, self.reason = nvml, handle, reason
        self._has = dict(supported)
        self.reads_power = self._has["power"]
        self.energy_resolution_j = MILLIJOULE if self._has["energy"] else None
        self._origin_mj = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) if self._has["energy"] else 0
        self._open = True

    def _read(self, what: str, read: Callable[[], Any]) -> Any:
        if not self._has[what]:
            return None
        try:
            return read()
        except self._nvml.NVMLError:
            return None

    def sample(self) -> Sample:
        if not self._open:
            raise RuntimeError("the NVML readers are closed")
        nvml, h = self._nvml, self._handle
        now = time.monotonic()
        energy = self._read("energy", lambda: int(nvml.nvmlDeviceGetTotalEnergyConsumption(h)) - self._origin_mj)
        power = self._read("power", lambda: nvml.nvmlDeviceGetPowerUsage(h) / 1000)
        temp = self._read("temp", lambda: float(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)))
        clock = self._read("clock", lambda: float(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)))
        return Sample(now, power, None if energy is None else energy * MILLIJOULE, temp, clock)

    def energy_sample(self) -> Sample:
        if self.energy_resolution_j is None or not self._open:
            return self.sample()
        now = time.monotonic()
        nvml, h = self._nvml, self._handle
        energy = self._read("energy", lambda: int(nvml.nvmlDeviceGetTotalEnergyConsumption(h)) - self._origin_mj)
        return Sample(now, None, None if energy is None else energy * MILLIJOULE, None, None)

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass


def load_nvml() -> Any:
    """The ``pynvml`` module, or None where nvidia-ml-py is not installed."""
    try:
        import pynvml  # the optional nvidia-ml-py package: only NVIDIA GPUs need it
    except ImportError:
        return None
    return pynvml


def open_nvml(
    backend: str, index: int, device: Mapping[str, Any] | None = None, *, nvml: Any = None
) -> NvmlSensors | str:
    """The readers of NVIDIA GPU ``backend:index`` (``nvml`` stands in for pynvml in tests), or the
    one-line reason none can be read."""
    nvml = nvml if nvml is not None else load_nvml()
    if nvml is None:
        return "NVML: nvidia-ml-py is not installed (pip install nvidia-ml-py, or hwbench[cuda])"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return f"NVML: cannot start ({exc}): is the NVIDIA driver loaded?"
    try:
        handle, how = find_handle(nvml, backend, index, device)
        if handle is None:
            nvml.nvmlShutdown()
            return how
        why = {
            "energy": _probe(nvml, lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle)),
            "power": _probe(nvml, lambda: nvml.nvmlDeviceGetPowerUsage(handle)),
            "temp": _probe(nvml, lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            "clock": _probe(nvml, lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        }
    except nvml.NVMLError as exc:
        nvml.nvmlShutdown()
        return f"NVML: reading {backend}:{index} failed ({exc})"
    if all(why.values()):
        nvml.nvmlShutdown()
        return f"NVML: {backend}:{index} answers no reading (energy counter: {why['energy']}; power: {why['power']})"
    reason = "; ".join(
        f"NVML: {label} not readable ({why[key]})"
        for key, label in (("energy", "total energy counter"), ("power", "power"))
        if why[key]
    )
    if why["energy"] and not why["power"]:
        reason += ": energy is sampled from the power"
    return NvmlSensors(nvml, handle, {k: not v for k, v in why.items()}, reason)
