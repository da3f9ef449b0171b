"""OpenCL devices through pyopencl (PoCL on any CPU, vendor drivers on GPUs).

This module probes and describes devices; the kernels that run on them are listed by
``implementations`` (none are built yet, so every case says so).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Prepared
from hwbench.spec import Kernel, Shape

from ._probe import missing_modules


class OpenCLBackend(Backend):
    """Every OpenCL platform's devices."""

    name = "opencl"
    description = "OpenCL devices through pyopencl"

    def probe(self) -> Availability:
        if missing_modules("pyopencl"):
            return Availability(False, "pyopencl is not installed (pip install 'hwbench[opencl]')")
        try:
            import pyopencl as cl

            platforms = cl.get_platforms()
        except Exception as exc:  # no ICD loader or a broken driver: the reason is the message
            return Availability(False, f"no OpenCL platform: {exc}")
        if not any(p.get_devices() for p in platforms):
            return Availability(False, "OpenCL platforms found, but no devices")
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        import pyopencl as cl

        found: list[DeviceInfo] = []
        for platform in cl.get_platforms():
            for device in platform.get_devices():
                kind = "cpu" if device.type & cl.device_type.CPU else "gpu" if device.type & cl.device_type.GPU else "accelerator"
                found.append(DeviceInfo(
                    backend=self.name, index=len(found), name=device.name.strip(), vendor=device.vendor.strip(),
                    kind=kind, arch=device.version, compute_units=device.max_compute_units,
                    memory_bytes=device.global_mem_size, driver=device.driver_version, runtime=platform.version,
                    extra={"platform": platform.name, "max_clock_mhz": device.max_clock_frequency,
                           "local_mem_bytes": device.local_mem_size, "extensions": device.extensions.split()},
                ))
        return found

    def implementations(self, kernel: str) -> list[Implementation]:
        return []

    def prepare(self, impl: Implementation, kernel: Kernel, inputs: Mapping[str, np.ndarray], shape: Shape,
                dtype: str, device: DeviceInfo) -> Prepared:
        raise ValueError(f"opencl has no implementation {impl.name}")

    def environment(self) -> dict[str, Any]:
        from hwbench.sysinfo import package_version

        return {"pyopencl": package_version("pyopencl")}
