"""Plain-data descriptions of backends and the host (answers of the worker's describe requests)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, cast

from hwbench.core.backend import Backend, ContractBroken, DeviceInfo, Implementation, Peak, listed_devices
from hwbench.core.host import describe_host as describe_host  # re-exported: the worker answers with it
from hwbench.core.registry import get_backend, implementations, kernel_targets
from hwbench.core.results_types import BackendDescription, DescribedDevice, DescribedPeak
from hwbench.core.results_types import Implementation as ImplementationEntry
from hwbench.run.case import error_line


def device_dict(device: DeviceInfo) -> DescribedDevice:
    """A device as it appears in results files."""
    data = cast(DescribedDevice, asdict(device))  # DeviceInfo's fields are the description's keys
    data["libraries"] = dict(device.libraries)
    data["extra"] = dict(device.extra)
    if device.peak is not None:
        data["peak"] = peak_dict(device.peak)
    return data


def peak_dict(peak: Peak) -> DescribedPeak:
    """A device's peak as it appears in results files."""
    return {"tflops": dict(peak.tflops), "method": peak.method, "mem_gbps": peak.mem_gbps}


def remeasured_peak(backend: Backend, device: DeviceInfo) -> dict[str, Any]:
    """The answer of the worker's ``remeasure_peak`` request: the device's peak measured again
    (``{"peak": None}`` where its backend cannot)."""
    peak = backend.remeasure_peak(device)
    return {"peak": peak_dict(peak) if peak is not None else None}


def impl_dict(impl: Implementation) -> ImplementationEntry:
    """An implementation as ``hwbench list --json`` shows it."""
    data = cast(ImplementationEntry, asdict(impl))  # Implementation's fields are the entry's keys
    data["dtypes"] = list(impl.dtypes)
    return data


def describe_backend(name: str) -> dict[str, Any]:
    """Availability, kind, devices, software and implementations of one backend (a
    :class:`~hwbench.core.results_types.BackendDescription`, as the worker answers it); never raises."""
    backend = get_backend(name)
    answer: BackendDescription = {
        "name": name,
        "kind": backend.kind,
        "description": backend.description,
        "available": False,
        "reason": "",
        "devices": [],
        "environment": {},
        "implementations": {},
    }
    described = cast(dict[str, Any], answer)  # the worker's answer, sent as JSON
    for kernel in kernel_targets():
        answer["implementations"][kernel] = [impl_dict(i) for i in implementations(backend, kernel)]
    availability = backend.probe()
    answer["available"], answer["reason"] = availability.ok, availability.reason
    if not availability.ok:
        return described
    try:
        answer["devices"] = [device_dict(d) for d in listed_devices(backend)]
        answer["environment"] = backend.environment()
    except ContractBroken as exc:
        answer["available"], answer["reason"] = False, str(exc)
    except Exception as exc:
        answer["available"], answer["reason"] = False, f"probe passed but listing devices failed: {error_line(exc)}"
    if answer["available"] and not answer["devices"]:
        answer["available"], answer["reason"] = False, "no devices found"
    return described
