"""Probing and device description shared by the CUDA and ROCm backends (torch's two GPU builds)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from hwbench.backend import Availability, Backend, DeviceInfo, Implementation, Prepared
from hwbench.spec import Kernel, Shape

from ._probe import missing_modules


class TorchGPUBackend(Backend):
    """GPUs that torch drives: ``flavor`` is "cuda" (NVIDIA) or "hip" (AMD ROCm)."""

    flavor = "cuda"
    vendor = "NVIDIA"

    def probe(self) -> Availability:
        if missing_modules("torch"):
            return Availability(False, "torch is not installed (pip install 'hwbench[%s]')" % self.name)
        try:
            import torch
        except Exception as exc:  # a broken install is a reason, not a crash
            return Availability(False, f"torch fails to import: {exc}")
        build = getattr(torch.version, self.flavor, None)
        if not build:
            other = "HIP" if torch.version.hip else "CUDA" if torch.version.cuda else "CPU-only"
            return Availability(False, f"torch {torch.__version__} is a {other} build, not a {self.flavor.upper()} build")
        if not torch.cuda.is_available():
            return Availability(False, f"torch {torch.__version__} ({self.flavor} {build}) sees no GPU: "
                                       "no device or no driver")
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        import torch

        found = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            arch = getattr(props, "gcnArchName", "") or f"sm_{props.major}{props.minor}"
            found.append(DeviceInfo(
                backend=self.name, index=index, name=props.name, vendor=self.vendor, kind="gpu", arch=arch,
                compute_units=props.multi_processor_count, memory_bytes=props.total_memory,
                runtime=f"{self.flavor} {getattr(torch.version, self.flavor)}",
                libraries={"torch": torch.__version__},
            ))
        return found

    def implementations(self, kernel: str) -> list[Implementation]:
        return []

    def prepare(self, impl: Implementation, kernel: Kernel, inputs: Mapping[str, np.ndarray], shape: Shape,
                dtype: str, device: DeviceInfo) -> Prepared:
        raise ValueError(f"{self.name} has no implementation {impl.name}")

    def environment(self) -> dict[str, Any]:
        from hwbench.sysinfo import package_version

        return {"torch": package_version("torch"), "triton": package_version("triton")}
