"""A stand-in for the ``pynvml`` module (nvidia-ml-py) with every call hwbench's NVML readers make:
the sensors' (:mod:`hwbench.sensors.nvml`: power, energy, temperature, clock) and the health
readers' (:mod:`hwbench.sensors.health_nvml`: ECC, retired and remapped memory, throttle reasons,
PCIe and NVLink, XID events).

Each :class:`FakeGpu` holds one GPU's facts: its identity; a constant draw, whose total energy
counter (mJ) and power reading (mW) are what that power gives on the fake's clock, refreshed every
``update_s`` as NVML's are; its health facts, None for one NVML reports as not supported. A call a
GPU does not support raises :class:`NVMLError` with NVML's "Not Supported" code.
:class:`FakeNvml` is the module object; ``byte_names=True`` makes it answer names as bytes, as
older nvidia-ml-py releases do.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
#: NVML's return codes the fake answers with.
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, DRIVER_NOT_LOADED, TIMEOUT, LIBRARY_NOT_FOUND = 3, 4, 6, 9, 10, 12
MESSAGES = {
    NOT_SUPPORTED: "Not Supported",
    NO_PERMISSION: "Insufficient Permissions",
    NOT_FOUND: "Not Found",
    DRIVER_NOT_LOADED: "Driver Not Loaded",
    TIMEOUT: "Timeout",
}


class NVMLError(Exception):
    """NVML's error: ``value`` is its return code."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return MESSAGES.get(self.value, f"NVML error {self.value}")


def healthy_ecc() -> dict[tuple[int, int], int]:
    """No ECC error of any kind: (error type, counter type) -> count."""
    return {(0, 0): 0, (0, 1): 0, (1, 0): 0, (1, 1): 0}


@dataclass
class FakeGpu:
    """One GPU: its identity, its constant draw and readings, its health facts (None: not supported)."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "0000:3b:00.0"
    # sensors
    power_w: float = 300.0
    energy_counter: bool = True
    power_reading: bool = True
    update_s: float = 0.001
    temp_c: float = 41.0
    clock_mhz: float = 1980.0
    origin_mj: int = 123_456_789
    # health
    ecc_mode: int | None = 1
    ecc: dict[tuple[int, int], int] = field(default_factory=healthy_ecc)
    retired: dict[int, list[int]] | None = None  # Hopper remaps rows instead
    retired_pending: int = 0
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    reasons: int | None = 0x4  # at its power cap: busy, healthy
    util: int | None = 90
    link: tuple[int, int] = (5, 16)
    max_link: tuple[int, int] = (5, 16)
    gpu_max_gen: int | None = 5
    nvlinks: list[int] | None = field(default_factory=lambda: [1] * 18)
    xid_supported: bool = True


class FakeNvml:
    """The module: ``nvmlInit`` … ``nvmlShutdown``, handles by index, UUID and PCI bus id, the
    sensors' readings, the health readers' facts and XID events (:meth:`inject_xid`)."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_NVLINK_MAX_LINKS = 18

    def __init__(
        self,
        gpus: list[FakeGpu],
        clock: Callable[[], float] = time.monotonic,
        driver: bool = True,
        init_error: int | None = None,
        byte_names: bool = False,
    ) -> None:
        self.gpus, self.clock, self.byte_names = gpus, clock, byte_names
        self.init_error = init_error if driver else DRIVER_NOT_LOADED
        self.start = clock()
        self.inits = self.shutdowns = 0
        self.registered: set[int] = set()
        self.queue: list[tuple[int, int]] = []
        self.sets_freed = 0

    @property
    def users(self) -> int:
        """Sessions open: ``nvmlInit`` calls that succeeded less ``nvmlShutdown`` calls."""
        return self.inits - self.shutdowns

    # session
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    # devices
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
            raise NVMLError(NOT_FOUND)
        return found[0]

    def nvmlDeviceGetIndex(self, gpu: FakeGpu) -> int:
        return self.gpus.index(gpu)

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str | bytes:
        return gpu.name.encode() if self.byte_names else gpu.name

    # sensors
    def _elapsed(self, gpu: FakeGpu) -> float:
        """Seconds since the fake started, as of the GPU's last refresh."""
        return math.floor((self.clock() - self.start) / gpu.update_s) * gpu.update_s

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        if not gpu.energy_counter:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.origin_mj + int(gpu.power_w * self._elapsed(gpu) * 1000)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if not gpu.power_reading:
            raise NVMLError(NOT_SUPPORTED)
        return int(gpu.power_w * 1000)

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return int(gpu.temp_c)

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, kind: int) -> int:
        assert kind == NVML_CLOCK_SM
        return int(gpu.clock_mhz)

    # memory errors
    def nvmlDeviceGetEccMode(self, gpu: FakeGpu) -> list[int]:
        if gpu.ecc_mode is None:
            raise NVMLError(NOT_SUPPORTED)
        return [gpu.ecc_mode, gpu.ecc_mode]

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, error_type: int, counter_type: int) -> int:
        return gpu.ecc[(error_type, counter_type)]

    def nvmlDeviceGetRetiredPages(self, gpu: FakeGpu, cause: int) -> list[int]:
        if gpu.retired is None:
            raise NVMLError(NOT_SUPPORTED)
        return list(gpu.retired.get(cause, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: FakeGpu) -> int:
        if gpu.retired is None:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.retired_pending

    def nvmlDeviceGetRemappedRows(self, gpu: FakeGpu) -> tuple[int, int, int, int]:
        if gpu.remapped is None:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.remapped

    # clocks, load, links
    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        if gpu.reasons is None:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.reasons

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:
        if gpu.util is None:
            raise NVMLError(NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.util, memory=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        return gpu.link[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: FakeGpu) -> int:
        return gpu.link[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        return gpu.max_link[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: FakeGpu) -> int:
        return gpu.max_link[1]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, gpu: FakeGpu) -> int:
        if gpu.gpu_max_gen is None:
            raise NVMLError(NOT_SUPPORTED)
        return gpu.gpu_max_gen

    def nvmlDeviceGetNvLinkState(self, gpu: FakeGpu, link: int) -> int:
        if gpu.nvlinks is None or link >= len(gpu.nvlinks):
            raise NVMLError(NOT_SUPPORTED)
        return gpu.nvlinks[link]

    # events
    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, gpu: FakeGpu, types: int, event_set: str) -> None:
        if not gpu.xid_supported:
            raise NVMLError(NOT_SUPPORTED)
        assert types & 0x8, "the readers watch XID critical errors"
        self.registered.add(self.gpus.index(gpu))

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> Any:
        if not self.queue:
            raise NVMLError(TIMEOUT)
        index, xid = self.queue.pop(0)
        return SimpleNamespace(device=self.gpus[index], eventType=0x8, eventData=xid)

    def nvmlEventSetFree(self, event_set: str) -> None:
        self.sets_freed += 1

    def inject_xid(self, index: int, xid: int) -> None:
        """An XID event on GPU ``index``, delivered where its events are registered."""
        if index in self.registered:
            self.queue.append((index, xid))


def device(gpu: FakeGpu | None = None, **extra: Any) -> dict[str, Any]:
    """A device description as a results file holds it (``extra`` adds facts such as ``uuid``)."""
    gpu = gpu or FakeGpu()
    return {"name": gpu.name, "kind": "gpu", "vendor": "NVIDIA", "extra": dict(extra)}
