"""A stand-in for ``pynvml`` (nvidia-ml-py) with the calls hwbench's sensors make.

Each :class:`FakeGpu` draws a constant power; its total energy counter (mJ) and power reading
(mW) are what that power gives on the fake's clock, refreshed every ``update_s`` as NVML's are.
A reading a GPU does not have raises ``NVMLError`` with NVML's "Not Supported" code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
_WORDS = {NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_NOT_FOUND: "Not Found", 9: "Driver Not Loaded"}


class NVMLError(Exception):
    """NVML's error: ``value`` is its return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _WORDS.get(self.value, f"error {self.value}")


@dataclass
class FakeGpu:
    """One GPU: its identity, its constant draw and which readings it has."""

    name: str = "NVIDIA H200"
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    pci_bus_id: str = "0000:3b:00.0"
    power_w: float = 300.0
    energy_counter: bool = True
    power_reading: bool = True
    update_s: float = 0.001
    temp_c: float = 41.0
    clock_mhz: float = 1980.0
    origin_mj: int = 123_456_789


class FakeNvml:
    """The module: ``nvmlInit`` … ``nvmlShutdown``, handles by index, UUID and PCI bus id, readings."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM

    def __init__(self, gpus: list[FakeGpu], clock: Callable[[], float] = time.monotonic, driver: bool = True) -> None:
        self.gpus, self.clock, self.driver = gpus, clock, driver
        self.start = clock()
        self.inits = self.shutdowns = 0

    def nvmlInit(self) -> None:
        if not self.driver:
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        return self._find(lambda g: g.uuid == uuid)

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> FakeGpu:
        return self._find(lambda g: g.pci_bus_id.lower() == bus.lower())

    def _find(self, match: Callable[[FakeGpu], bool]) -> FakeGpu:
        found = [g for g in self.gpus if match(g)]
        if not found:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return found[0]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    def _elapsed(self, gpu: FakeGpu) -> float:
        """Seconds since the fake started, as of the GPU's last refresh."""
        return math.floor((self.clock() - self.start) / gpu.update_s) * gpu.update_s

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        if not gpu.energy_counter:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.origin_mj + int(gpu.power_w * self._elapsed(gpu) * 1000)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if not gpu.power_reading:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return int(gpu.power_w * 1000)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return int(gpu.temp_c)

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, kind: int) -> int:
        assert kind == NVML_CLOCK_SM
        return int(gpu.clock_mhz)


def device(gpu: FakeGpu | None = None, **extra: Any) -> dict[str, Any]:
    """A device description as a results file holds it (``extra`` adds facts such as ``uuid``)."""
    gpu = gpu or FakeGpu()
    return {"name": gpu.name, "kind": "gpu", "vendor": "NVIDIA", "extra": dict(extra)}
