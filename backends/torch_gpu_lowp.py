"""fp8 and int8 on torch's GPUs (``cuda``, ``rocm``): which devices run them, and their device tensors.

fp8 runs where the tensor cores compute e4m3 (sm_89 and newer; gfx942, gfx950), int8 where Triton
and the BLAS have an int8 tensor-core path (sm_80 and newer; CDNA GPUs); elsewhere the case is
skipped with the reason (:func:`hwbench.core.dtypes.gpu_unsupported`).

Device tensors of an fp8 case: each input ``X`` (host float32 holding e4m3 values) is scaled by
``2**e`` (the kernel's ``fp8_scale_exponents``, exact) and stored in the architecture's e4m3
format (``float8_e4m3fnuz`` on gfx942, ``float8_e4m3fn`` elsewhere), the inputs the kernel names in
``fp8_k_major`` K-major (column-major B, as cuBLASLt's fp8 GEMM requires and wgmma prefers), and
``scale_X`` is ``2**-e`` as a one-element fp32 tensor: every implementation gets the same operands
and scales, and parity checks that each applied them. int8 inputs are copied as they are. The
output has the dtype table's output type (fp8: float32, int8: int32).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hwbench.core.backend import DeviceInfo, Implementation
from hwbench.core.dtypes import fp8_torch_name, gpu_unsupported, torch_dtype, torch_output_dtype
from hwbench.core.kernel import Kernel, Shape

#: The dtypes this module lays out.
DTYPES = ("fp8", "int8")


def unsupported(impl: Implementation, dtype: str, device: DeviceInfo) -> str:
    """Why ``device`` cannot run ``dtype`` (fp8, int8) with ``impl`` (empty when it can, and for
    every other dtype)."""
    if dtype not in DTYPES:
        return ""
    return gpu_unsupported(dtype, device.arch)


def device_tensors(
    kernel: Kernel,
    inputs: Mapping[str, np.ndarray],
    shape: Shape,
    dtype: str,
    device: DeviceInfo,
    dev: str = "",
) -> tuple[dict[str, Any], Any]:
    """The case's device tensors (fp8: scaled, in the architecture's format, with ``scale_X``) and its
    zeroed output, on ``dev`` (default ``cuda:<index>``)."""
    import torch

    dev = dev or f"cuda:{device.index}"
    tensors: dict[str, Any] = {}
    if dtype == "fp8":
        kind = getattr(torch, fp8_torch_name(device.arch))
        exponents: Mapping[str, int] = getattr(kernel, "fp8_scale_exponents", {})
        k_major: tuple[str, ...] = getattr(kernel, "fp8_k_major", ())
        for name, values in inputs.items():
            exponent = int(exponents.get(name, 0))
            wide = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(dev)
            stored = (wide * 2.0**exponent).to(kind)
            tensors[name] = stored.t().contiguous().t() if name in k_major else stored.contiguous()
            tensors[f"scale_{name}"] = torch.full((1,), 2.0**-exponent, dtype=torch.float32, device=dev)
    else:
        kind = torch_dtype(dtype)
        tensors = {k: torch.from_numpy(v).to(dev).to(kind).contiguous() for k, v in inputs.items()}
    out = torch.zeros(kernel.output_shape(shape), dtype=torch_output_dtype(dtype), device=dev)
    return tensors, out
