"""Test-only OpenCL backend whose GEMM reads far outside its buffers, so the driver crashes the process.

Registered in tests through ``HWBENCH_BACKENDS="opencl_faulty=fakes.opencl_faulty_backend:FaultyOpenCL"``:
it checks that a driver crash becomes a ``crashed`` record and the run goes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hwbench.backend import DeviceInfo, Implementation, Kernel, Prepared, Shape
from hwbench.backends.opencl import OpenCLBackend


class FaultyOpenCL(OpenCLBackend):
    """The real OpenCL C GEMM, launched with sizes that do not match its buffers."""

    name = "opencl_faulty"

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        wrong = {"M": 1 << 22, "N": 16, "K": 1 << 12}  # row 2**22 of A lies 64 GiB past its buffer
        return super().prepare(impl, kernel, inputs, wrong, dtype, device)

    def implementations(self, kernel: str) -> list[Implementation]:
        return [i for i in super().implementations(kernel) if i.name == "opencl"]

    def environment(self) -> dict[str, Any]:
        return {}
