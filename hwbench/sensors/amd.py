"""An AMD GPU's readers through AMD SMI's Python library (``amdsmi``).

Energy comes from ``amdsmi_get_energy_count`` (an accumulator times its ``counter_resolution`` in
µJ; the key is ``energy_accumulator``, ``power`` in older releases) where the GPU has it, else
from sampling ``amdsmi_get_power_info`` (``socket_power``, ``current_socket_power`` or
``average_socket_power``, W; "N/A" where not measured); the temperature is the hotspot's (else the
edge's), the clock the GFX clock (``clk``, ``cur_clk`` in older releases). amdsmi does not read
energy on a VM guest: that is said as the reason. The device is matched by PCI bus id (its
description's, else torch's where loaded), else by the one GPU of the same name, else the only one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from hwbench.sensors.base import Sample, Sensors
from hwbench.sensors.nvml import identity

#: amdsmi's counter resolution is in microjoules.
MICROJOULE = 1e-6
POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")


def _errors(amdsmi: Any) -> type[Exception]:
    found = getattr(amdsmi, "AmdSmiException", Exception)
    return found if isinstance(found, type) and issubclass(found, Exception) else Exception


def _figure(value: Any) -> float | None:
    """A reading as a number; None for amdsmi's "N/A" and other non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_energy_uj(amdsmi: Any, handle: Any) -> tuple[int, float]:
    """(accumulator, resolution in µJ) of the GPU's energy counter."""
    found = amdsmi.amdsmi_get_energy_count(handle)
    raw = found.get("energy_accumulator", found.get("power"))
    resolution = _figure(found.get("counter_resolution"))
    if _figure(raw) is None or resolution is None or resolution <= 0:
        raise ValueError(f"amdsmi_get_energy_count answered {found!r}")
    return int(raw), resolution


def read_power_w(amdsmi: Any, handle: Any) -> float:
    """The GPU's power, W (ValueError where every key is "N/A")."""
    found = amdsmi.amdsmi_get_power_info(handle)
    value = next((v for v in (_figure(found.get(k)) for k in POWER_KEYS) if v is not None), None)
    if value is None:
        raise ValueError(f"amdsmi_get_power_info gave no power ({found!r})")
    return value


def read_temp_c(amdsmi: Any, handle: Any) -> float:
    """The hotspot temperature, else the edge's, °C."""
    kinds, metric = amdsmi.AmdSmiTemperatureType, amdsmi.AmdSmiTemperatureMetric.CURRENT
    errors = _errors(amdsmi)
    for kind in ("HOTSPOT", "EDGE"):
        if not hasattr(kinds, kind):
            continue
        try:
            value = _figure(amdsmi.amdsmi_get_temp_metric(handle, getattr(kinds, kind), metric))
        except errors:
            continue
        if value is not None:
            return value
    raise ValueError("no hotspot or edge temperature")


def read_clock_mhz(amdsmi: Any, handle: Any) -> float:
    """The GFX clock, MHz."""
    found = amdsmi.amdsmi_get_clock_info(handle, amdsmi.AmdSmiClkType.GFX)
    value = _figure(found.get("clk", found.get("cur_clk")))
    if value is None:
        raise ValueError(f"amdsmi_get_clock_info gave no clock ({found!r})")
    return value


READERS: dict[str, Callable[[Any, Any], Any]] = {
    "energy": read_energy_uj,
    "power": read_power_w,
    "temp": read_temp_c,
    "clock": read_clock_mhz,
}


def find_handle(amdsmi: Any, backend: str, index: int, device: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The amdsmi handle of the device, or (None, why none matched)."""
    _, bus, name = identity(backend, index, device)
    handles = list(amdsmi.amdsmi_get_processor_handles())
    if bus:
        match = [h for h in handles if str(amdsmi.amdsmi_get_gpu_device_bdf(h)).lower() == bus.lower()]
        if match:
            return match[0], ""
    if name:
        named = [h for h in handles if str(amdsmi.amdsmi_get_gpu_asic_info(h).get("market_name", "")) == name]
        if len(named) == 1:
            return named[0], ""
    if len(handles) == 1:
        return handles[0], ""
    return (
        None,
        f"amdsmi: cannot tell which of its {len(handles)} GPUs {backend}:{index} is (no PCI bus id, no unique name)",
    )


class AmdSensors(Sensors):
    """One AMD GPU's readers; the amdsmi session is held until :meth:`close`."""

    source = "amdsmi"

    def __init__(self, amdsmi: Any, handle: Any, supported: Mapping[str, bool], reason: str = "") -> None:
        self._amdsmi, self._handle, self.reason = amdsmi, handle, reason
        self._has = dict(supported)
        self._errors = _errors(amdsmi)
        self.reads_power = self._has["power"]
        origin, resolution = read_energy_uj(amdsmi, handle) if self._has["energy"] else (0, 0.0)
        self._origin, self._resolution_uj = origin, resolution
        self.energy_resolution_j = resolution * MICROJOULE if self._has["energy"] else None
        self._open = True

    def _read(self, what: str) -> Any:
        if not self._has[what]:
            return None
        try:
            return READERS[what](self._amdsmi, self._handle)
        except (self._errors, ValueError, KeyError, TypeError, AttributeError):
            return None

    def sample(self) -> Sample:
        if not self._open:
            raise RuntimeError("the amdsmi readers are closed")
        now = time.monotonic()
        energy = self._read("energy")
        joules = None if energy is None else (energy[0] - self._origin) * self._resolution_uj * MICROJOULE
        return Sample(now, self._read("power"), joules, self._read("temp"), self._read("clock"))

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                self._amdsmi.amdsmi_shut_down()
            except self._errors:
                pass


def load_amdsmi() -> Any:
    """The ``amdsmi`` module, or None where it is not installed."""
    try:
        import amdsmi  # AMD SMI's optional Python library: only AMD GPUs need it
    except ImportError:
        return None
    return amdsmi


def _why(amdsmi: Any, handle: Any) -> dict[str, str]:
    """Per reading, empty when it answers, else why not."""
    errors = _errors(amdsmi)
    why = {}
    for what, read in READERS.items():
        try:
            read(amdsmi, handle)
            why[what] = ""
        except (errors, ValueError, KeyError, TypeError, AttributeError) as exc:
            why[what] = " ".join(str(exc).split()) or type(exc).__name__
    return why


def open_amdsmi(
    backend: str, index: int, device: Mapping[str, Any] | None = None, *, amdsmi: Any = None
) -> AmdSensors | str:
    """The readers of AMD GPU ``backend:index`` (``amdsmi`` stands in for the library in tests), or
    the one-line reason none can be read."""
    amdsmi = amdsmi if amdsmi is not None else load_amdsmi()
    if amdsmi is None:
        return "amdsmi: AMD SMI's Python library is not installed (it ships with ROCm: pip install amdsmi)"
    errors = _errors(amdsmi)
    try:
        amdsmi.amdsmi_init()
    except errors as exc:
        return f"amdsmi: cannot start ({exc}): is the amdgpu driver loaded?"
    try:
        handle, why_not = find_handle(amdsmi, backend, index, device)
        why = _why(amdsmi, handle) if handle is not None else {}
    except (errors, ValueError, KeyError, TypeError, AttributeError) as exc:
        handle, why_not = None, f"amdsmi: reading {backend}:{index} failed ({exc})"
    if handle is None or all(why.values()):
        amdsmi.amdsmi_shut_down()
        return (
            why_not or f"amdsmi: {backend}:{index} answers no reading (energy: {why['energy']}; power: {why['power']})"
        )
    reason = "; ".join(f"amdsmi: {what} not readable ({why[what]})" for what in ("energy", "power") if why[what])
    if why["energy"] and not why["power"]:
        reason += ": energy is sampled from the power"
    return AmdSensors(amdsmi, handle, {k: not v for k, v in why.items()}, reason)
