"""What a device's sensors answer: one :class:`Sample` per reading, from one :class:`Sensors`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import TracebackType


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


#: The fields of a :class:`Sample` that are readings (all but the time).
READINGS = ("power_w", "energy_j", "temp_c", "clock_mhz")


class Sensors(ABC):
    """One device's readers, opened once per device and closed when done."""

    #: where the readings come from: ``nvml``, ``amdsmi``, ``rapl``, ``cpu``...
    source: str = ""
    #: the energy counter's step, J (RAPL: 1e-6, NVML: 1e-3); None without a counter.
    energy_resolution_j: float | None = None
    #: whether :attr:`Sample.power_w` is read (a device without an energy counter may still say its power).
    reads_power: bool = False
    #: how often the energy counter (else the power reading) takes a new value, s; None until observed
    #: (``hwbench.sensors.energy`` observes it once, on the first measurement).
    update_interval_s: float | None = None
    #: what these readers cannot read and why (empty when everything is read), e.g. why there is no energy.
    reason: str = ""

    @property
    def energy_readable(self) -> bool:
        """Whether energy can be measured: through a counter, or by sampling the power."""
        return self.energy_resolution_j is not None or self.reads_power

    @abstractmethod
    def sample(self) -> Sample:
        """Read every sensor now."""

    def energy_sample(self) -> Sample:
        """Read what measuring energy needs (the time, the energy counter, the power); the other
        fields may be None. Readers with many other files (a CPU's clocks) read fewer here."""
        return self.sample()

    def close(self) -> None:  # noqa: B027 - most readers hold nothing to release
        """Release what the readers hold (an SDK session); reading after close is an error."""

    def __enter__(self) -> Sensors:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
