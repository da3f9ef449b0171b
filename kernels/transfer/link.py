"""The host link of a GPU (PCIe generation x width, or NVLink-C2C) and its rate per direction.

Read from NVML (``pynvml``, the ``nvidia-ml-py`` package) on NVIDIA GPUs or amdsmi on AMD ones,
where they are importable and find the device; else from the catalog's ``host_link`` table (handed
in: this module does not read the catalog). PCIe rates are computed from generation and width:
a lane carries its transfer rate times its encoding's payload share (8b/10b to 2.0, 128b/130b
from 3.0) over 8 bits, per direction: 0.985 GB/s at 3.0, 1.969 at 4.0, 3.938 at 5.0.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

#: PCIe generation -> (GT/s per lane, payload share of the line encoding).
PCIE = {1: (2.5, 8 / 10), 2: (5.0, 8 / 10), 3: (8.0, 128 / 130), 4: (16.0, 128 / 130), 5: (32.0, 128 / 130)}
#: NVML's field value types (``nvmlValueType_t``) and the union member holding each.
NVML_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


@dataclass(frozen=True)
class Link:
    """A host link: GB/s (10^9 bytes per second) per direction, its kind, where the figure comes from."""

    gbps: float
    kind: str
    source: str


def optional(module: str) -> Any:
    """The management library ``module`` where it is installed (None where not, or broken)."""
    try:
        return importlib.import_module(module)
    except Exception:  # not installed, or fails to load its native library: not readable here
        return None


def pcie_lane_gbps(generation: int) -> float | None:
    """GB/s per direction of one lane of PCIe ``generation`` after encoding (None: not known here)."""
    if generation not in PCIE:
        return None
    rate, payload = PCIE[generation]
    return rate * payload / 8


def pcie_link(generation: int, width: int, how: str) -> Link | None:
    """The link of ``width`` lanes of PCIe ``generation``, computed; ``how`` says where both came from."""
    lane = pcie_lane_gbps(generation)
    if lane is None or width <= 0:
        return None
    rate, payload = PCIE[generation]
    encoding = "8b/10b" if payload < 0.9 else "128b/130b"
    basis = f"{width} lanes x {rate:g} GT/s x {encoding} / 8 = {width * lane:.1f} GB/s per direction"
    return Link(width * lane, f"PCIe {generation}.0 x{width}", f"{how}; computed: {basis}")


def link_facts(link: Link | None, catalog_link: Any = None) -> dict[str, Any]:
    """A device's ``extra`` facts of its host link: the one read, else the catalog's (a
    ``hwbench.decide.catalog.Bandwidth``), else nothing."""
    if link is not None:
        return {"host_link_gbps": round(link.gbps, 3), "host_link": link.kind, "host_link_source": link.source}
    if catalog_link is not None:
        return {
            "host_link_gbps": float(catalog_link.gbps),
            "host_link": str(catalog_link.what),
            "host_link_source": f"catalog {catalog_link.key} ({catalog_link.source}, {catalog_link.as_of})",
        }
    return {}


def nvml_link(props: Any, nvml: Any = None) -> Link | None:
    """The host link NVML reports for the device torch describes as ``props`` (matched by UUID, else
    PCI bus id): NVLink-C2C where the device has active C2C links, else PCIe at the link's maximum
    generation and width (the current ones drop when the GPU idles). None where NVML cannot say."""
    nvml = nvml or optional("pynvml")  # nvidia-ml-py
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # no driver, or NVML refuses: not readable here
        return None
    try:
        handle = _nvml_handle(nvml, props)
        if handle is None:
            return None
        return _nvml_c2c(nvml, handle) or _nvml_pcie(nvml, handle)
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()


def _nvml_handle(nvml: Any, props: Any) -> Any:
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
        except nvml.NVMLError:
            pass
    bus_id = pci_bus_id(props)
    return nvml.nvmlDeviceGetHandleByPciBusId(bus_id) if bus_id else None


def pci_bus_id(props: Any) -> str:
    """``domain:bus:device.0`` of a device as torch describes it (empty where torch does not say)."""
    found = [getattr(props, f"pci_{part}_id", None) for part in ("domain", "bus", "device")]
    if any(value is None for value in found):
        return ""
    domain, bus, device = (int(str(value)) for value in found)
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def _nvml_c2c(nvml: Any, handle: Any) -> Link | None:
    ids = [getattr(nvml, name, None) for name in ("NVML_FI_DEV_C2C_LINK_COUNT", "NVML_FI_DEV_C2C_LINK_GET_MAX_BW")]
    if None in ids:
        return None  # an nvidia-ml-py without the C2C fields
    values = nvml.nvmlDeviceGetFieldValues(handle, ids)
    if any(v.nvmlReturn != 0 for v in values):
        return None
    count, mbps = (int(getattr(v.value, NVML_VALUE_MEMBERS.get(v.valueType, "uiVal"))) for v in values)
    if count <= 0 or mbps <= 0:
        return None
    return Link(count * mbps / 1000, "NVLink-C2C", f"NVML: {count} C2C links x {mbps} MB/s (its per-link maximum)")


def _nvml_pcie(nvml: Any, handle: Any) -> Link | None:
    generation = int(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
    width = int(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
    now = f"gen {nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)} x{nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)}"
    return pcie_link(generation, width, f"NVML: link maximum gen {generation} x{width} (at description: {now})")


def amdsmi_link(props: Any, amdsmi: Any = None) -> Link | None:
    """The PCIe link amdsmi reports for the device torch describes as ``props`` (matched by PCI bus
    id): its maximum interface version (generation) and width. None where amdsmi cannot say."""
    bus_id = pci_bus_id(props)
    if not bus_id:
        return None
    amdsmi = amdsmi or optional("amdsmi")  # AMD SMI's Python library
    if amdsmi is None:
        return None
    try:
        amdsmi.amdsmi_init()
    except Exception:  # no driver, or amdsmi refuses: not readable here
        return None
    try:
        for handle in amdsmi.amdsmi_get_processor_handles():
            if str(amdsmi.amdsmi_get_gpu_device_bdf(handle)).lower() == bus_id:
                static = amdsmi.amdsmi_get_pcie_info(handle)["pcie_static"]
                generation = int(static.get("max_pcie_interface_version") or static.get("pcie_interface_version") or 0)
                width = int(static.get("max_pcie_width") or 0)
                return pcie_link(generation, width, f"amdsmi: PCIe interface version {generation}, max width x{width}")
        return None
    except (amdsmi.AmdSmiException, KeyError, TypeError, ValueError):
        return None
    finally:
        amdsmi.amdsmi_shut_down()


def read_link(readers: str, props: Any) -> Link | None:
    """The host link the vendor's management library reports for a GPU (``props``: torch's device
    properties): ``readers`` names the library, ``nvml`` or ``amdsmi`` (a backend's
    :attr:`~hwbench.core.backend.Observers.readers`); None for any other."""
    if readers == "nvml":
        return nvml_link(props)
    if readers == "amdsmi":
        return amdsmi_link(props)
    return None
