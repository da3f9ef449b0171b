"""A fake ``pynvml`` module object for the health readers: the calls they make, answered from
:class:`FakeGpu` facts, with NVML's error codes for what a GPU does not support."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, LIBRARY_NOT_FOUND = 3, 4, 10, 12
MESSAGES = {NOT_SUPPORTED: "Not Supported", NO_PERMISSION: "Insufficient Permissions", TIMEOUT: "Timeout"}


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
    """One GPU's facts; None for a fact NVML reports as not supported."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
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


class FakeNVML:
    """The module object: ``NVMLError``, constants and the ``nvml*`` calls the readers use."""

    NVML_NVLINK_MAX_LINKS = 18

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None) -> None:
        self.NVMLError = NVMLError
        self.gpus = gpus
        self.init_error = init_error
        self.users = 0
        self.registered: set[int] = set()
        self.queue: list[tuple[int, int]] = []
        self.sets_freed = 0

    # session
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.users += 1

    def nvmlShutdown(self) -> None:
        self.users -= 1

    # devices
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeGpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise NVMLError(2)

    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> FakeGpu:
        raise NVMLError(2)

    def nvmlDeviceGetIndex(self, handle: FakeGpu) -> int:
        return self.gpus.index(handle)

    def nvmlDeviceGetName(self, handle: FakeGpu) -> bytes:
        return handle.name.encode()  # older nvidia-ml-py answers bytes

    # memory errors
    def nvmlDeviceGetEccMode(self, handle: FakeGpu) -> list[int]:
        if handle.ecc_mode is None:
            raise NVMLError(NOT_SUPPORTED)
        return [handle.ecc_mode, handle.ecc_mode]

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeGpu, error_type: int, counter_type: int) -> int:
        return handle.ecc[(error_type, counter_type)]

    def nvmlDeviceGetRetiredPages(self, handle: FakeGpu, cause: int) -> list[int]:
        if handle.retired is None:
            raise NVMLError(NOT_SUPPORTED)
        return list(handle.retired.get(cause, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: FakeGpu) -> int:
        if handle.retired is None:
            raise NVMLError(NOT_SUPPORTED)
        return handle.retired_pending

    def nvmlDeviceGetRemappedRows(self, handle: FakeGpu) -> tuple[int, int, int, int]:
        if handle.remapped is None:
            raise NVMLError(NOT_SUPPORTED)
        return handle.remapped

    # clocks, load, links
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        if handle.reasons is None:
            raise NVMLError(NOT_SUPPORTED)
        return handle.reasons

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> Any:
        if handle.util is None:
            raise NVMLError(NOT_SUPPORTED)
        return SimpleNamespace(gpu=handle.util, memory=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return handle.link[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeGpu) -> int:
        return handle.link[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeGpu) -> int:
        return handle.max_link[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeGpu) -> int:
        return handle.max_link[1]

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: FakeGpu) -> int:
        if handle.gpu_max_gen is None:
            raise NVMLError(NOT_SUPPORTED)
        return handle.gpu_max_gen

    def nvmlDeviceGetNvLinkState(self, handle: FakeGpu, link: int) -> int:
        if handle.nvlinks is None or link >= len(handle.nvlinks):
            raise NVMLError(NOT_SUPPORTED)
        return handle.nvlinks[link]

    # events
    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: FakeGpu, types: int, event_set: str) -> None:
        if not handle.xid_supported:
            raise NVMLError(NOT_SUPPORTED)
        assert types & 0x8, "the readers watch XID critical errors"
        self.registered.add(self.gpus.index(handle))

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
