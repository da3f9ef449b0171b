"""What a device's sensors answer: one :class:`Sample` per reading, from one :class:`Sensors`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One reading of a device's sensors; a field is None where the device does not expose it."""

    #: ``time.monotonic()`` when read.
    t_s: float
    #: power drawn (instantaneous or averaged by the device), W.
    power_w: float | None
    #: energy since the :class:`Sensors` was opened, J, with the counter's wrap-around unwrapped;
    #: None without an energy counter.
    energy_j: float | None
    #: temperature, °C.
    temp_c: float | None
    #: current compute clock (a GPU's SM clock; a CPU's cpufreq/cpuinfo clock where readable), MHz.
    clock_mhz: float | None


class Sensors(ABC):
    """One device's readers, opened once per device and closed when done."""

    #: where the readings come from: ``nvml``, ``amdsmi``, ``rapl``, ``cpu``...
    source: str = ""
    #: the energy counter's step, J (RAPL: 1e-6, NVML: 1e-3); None without a counter.
    energy_resolution_j: float | None = None

    @abstractmethod
    def sample(self) -> Sample:
        """Read every sensor now."""

    def close(self) -> None:  # noqa: B027 - most readers hold nothing to release
        """Release what the readers hold (an SDK session); reading after close is an error."""
