"""AMD GPUs through torch's ROCm (HIP) build.

Natives: ``torch.matmul`` (rocBLAS or hipBLASLt, whichever torch prefers; recorded) and
``scaled_dot_product_attention``. Portable: Triton kernels, and the llvmlite kernels
lowered to an AMDGCN code object loaded with the HIP module API (``hipModuleLoadData``)
of the ``libamdhip64`` torch itself uses. Timing uses HIP events (torch.cuda.Event).
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwbench.backends.torch_gpu import TorchGPUBackend
from hwbench.core.backend import DeviceInfo


def _hip_library() -> ctypes.CDLL:
    """The HIP runtime torch loaded (or the system's)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "libamdhip64.so" in path:
            return ctypes.CDLL(path)
    return ctypes.CDLL("libamdhip64.so")


def _check(status: int, what: str, hip: ctypes.CDLL) -> None:
    if status != 0:
        hip.hipGetErrorString.restype = ctypes.c_char_p
        raise RuntimeError(f"{what} failed: {hip.hipGetErrorString(status).decode()} ({status})")


class ROCmBackend(TorchGPUBackend):
    """ROCm devices (Triton and llvmlite-AMDGCN kernels beside rocBLAS/hipBLASLt and SDPA)."""

    name = "rocm"
    description = "AMD GPUs through torch (ROCm/HIP build)"
    flavor = "hip"
    vendor = "AMD"
    readers = "amdsmi"
    event_name = "hip_event"
    lowering = {"llvmlite": "the work-group (SIMT) kernels lowered to AMDGCN"}

    def driver_version(self) -> str:
        for path in ("/sys/module/amdgpu/version", "/proc/driver/amdgpu/version"):
            try:
                return Path(path).read_text().strip()
            except OSError:
                continue
        return ""

    def device_extra(self, index: int, props: Any) -> dict[str, Any]:
        extra = super().device_extra(index, props)
        extra["gcn_arch"] = getattr(props, "gcnArchName", "")
        try:
            node = sorted(Path("/sys/class/drm").glob("card*/device/pp_dpm_sclk"))[index]
            levels = [int(m) for m in re.findall(r"(\d+)Mhz", node.read_text())]
            extra["max_sm_clock_mhz"] = max(levels) if levels else None
        except (IndexError, OSError, ValueError):
            pass
        return extra

    def libraries(self) -> dict[str, str]:
        import torch

        libs = super().libraries()
        libs["hip_runtime"] = str(torch.version.hip)
        try:
            from torch.backends.cuda import preferred_blas_library

            libs["blas"] = str(preferred_blas_library()).rsplit(".", 1)[-1]
        except Exception:  # older torch: no preference to report
            pass
        for name, fn in (("rocblas", "rocblas_get_version_string"),):
            try:
                lib = next(
                    (
                        ctypes.CDLL(line.split()[-1])
                        for line in Path("/proc/self/maps").read_text().splitlines()
                        if "librocblas.so" in line.split()[-1]
                    ),
                    None,
                )
                if lib is not None:
                    buf = ctypes.create_string_buffer(128)
                    getattr(lib, fn)(buf, ctypes.c_size_t(128))
                    libs[name] = buf.value.decode()
            except (OSError, AttributeError):
                pass
        return {k: v for k, v in libs.items() if v}

    def loader_missing(self) -> str:
        try:
            _hip_library()
        except OSError:
            return "loading AMDGCN code objects needs libamdhip64 (the HIP runtime), not found"
        return ""

    def loader_name(self) -> str:
        return "hip module api"

    def load_binary(self, binary: Any, device: DeviceInfo) -> Callable[..., None]:
        import torch

        hip = _hip_library()
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        image = ctypes.create_string_buffer(binary.binary, len(binary.binary))
        _check(hip.hipModuleLoadData(ctypes.byref(module), image), "hipModuleLoadData", hip)
        _check(
            hip.hipModuleGetFunction(ctypes.byref(function), module, binary.entry.encode()),
            "hipModuleGetFunction",
            hip,
        )

        def launch(blocks: tuple[int, int, int], threads: tuple[int, int, int], args: list[tuple[Any, str]]) -> None:
            values = [_hip_arg(v, kind) for v, kind in args]
            params = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            _check(
                hip.hipModuleLaunchKernel(
                    function,
                    *[ctypes.c_uint(x) for x in blocks],
                    *[ctypes.c_uint(x) for x in threads],
                    ctypes.c_uint(0),
                    stream,
                    params,
                    None,
                ),
                "hipModuleLaunchKernel",
                hip,
            )

        launch.keep = (module, image)  # type: ignore[attr-defined]  # the module must outlive the launches
        return launch


def _hip_arg(value: Any, kind: str) -> Any:
    if kind == "ptr":
        return ctypes.c_void_p(value.data_ptr())
    scalar = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float, "f64": ctypes.c_double}[kind]
    return scalar(value)
