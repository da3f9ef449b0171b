"""NVIDIA GPUs through torch's CUDA build.

Natives are the kernel folders' (``torch.matmul`` on cuBLAS/cuBLASLt, SDPA, ``cupy.matmul``).
Portable: Triton kernels, and the llvmlite kernels lowered to PTX and loaded through CuPy
(``cuModuleLoadData`` on the PTX, JIT-assembled by the driver).
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hwbench.backends.torch_gpu import TorchGPUBackend
from hwbench.core.backend import DeviceInfo, present
from hwbench.core.host import package_version
from hwbench.kernels.cupy_compat import Streams


def _nvidia_smi(index: int, fields: str) -> list[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", str(index)],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [v.strip() for v in out.stdout.strip().split(",")] if out.returncode == 0 else []


def _loaded_library(fragment: str) -> str | None:
    """Path of a shared library this process has mapped whose name contains ``fragment``."""
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1]
            if fragment in Path(path).name and ".so" in path:
                return path
    except OSError:
        pass
    return None


def cublas_version() -> str:
    """cuBLAS version through ``cublasGetProperty`` of the library torch loaded."""
    import torch

    torch.ones(1, 1, device="cuda") @ torch.ones(1, 1, device="cuda")  # makes torch load cuBLAS
    path = _loaded_library("libcublas.so") or "libcublas.so"
    try:
        lib = ctypes.CDLL(path)
        parts = []
        for prop in range(3):  # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
            value = ctypes.c_int()
            if lib.cublasGetProperty(prop, ctypes.byref(value)) != 0:
                return ""
            parts.append(str(value.value))
        return ".".join(parts)
    except (OSError, AttributeError):
        return ""


#: The names CuPy's wheels are installed under (the generic one, then one per CUDA major version).
CUPY_PACKAGES = ("cupy", "cupy-cuda13x", "cupy-cuda12x")


class CUDABackend(TorchGPUBackend):
    """CUDA devices (Triton and llvmlite-PTX kernels beside cuBLAS, SDPA and CuPy)."""

    name = "cuda"
    description = "NVIDIA GPUs through torch (CUDA build)"
    flavor = "cuda"
    caches = ("triton", "cuda", "cupy")
    vendor = "NVIDIA"
    readers = "nvml"
    event_name = "cuda_event"
    lowering = {"llvmlite": "the work-group (SIMT) kernels lowered to PTX"}

    def driver_version(self) -> str:
        try:
            text = Path("/proc/driver/nvidia/version").read_text()
            found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text)
            if found:
                return found.group(1)
        except OSError:
            pass
        values = _nvidia_smi(0, "driver_version")
        return values[0] if values else ""

    def device_extra(self, index: int, props: Any) -> dict[str, Any]:
        extra = super().device_extra(index, props)
        extra["compute_capability"] = f"{props.major}.{props.minor}"
        clocks = _nvidia_smi(index, "clocks.max.sm,clocks.max.memory,clocks.sm")
        if len(clocks) == 3:
            extra.update(
                max_sm_clock_mhz=_int(clocks[0]), max_mem_clock_mhz=_int(clocks[1]), sm_clock_mhz=_int(clocks[2])
            )
        return extra

    def libraries(self) -> dict[str, str]:
        import torch

        libs = super().libraries()
        libs["cuda_runtime"] = str(torch.version.cuda)
        libs["cublas"] = cublas_version()
        libs["cudnn"] = str(torch.backends.cudnn.version() or "")
        if present("cupy"):
            libs["cupy"] = next((v for v in map(package_version, CUPY_PACKAGES) if v), "installed")
        return {k: v for k, v in libs.items() if v}

    def loader_missing(self) -> str:
        if not present("cupy"):
            return "loading llvmlite PTX needs CuPy (pip install 'hwbench[cupy]', or 'hwbench[cupy-cuda13]' on CUDA 13)"
        return ""

    def loader_name(self) -> str:
        return "cupy"

    def load_binary(self, binary: Any, device: DeviceInfo) -> Callable[..., None]:
        import cupy
        import torch

        path = Path(_scratch_dir()) / f"{binary.entry}-{binary.target}-{id(binary)}.ptx"
        path.write_bytes(binary.binary)
        module = cupy.RawModule(path=str(path))
        function = module.get_function(binary.entry)
        streams = Streams(cupy)

        def launch(blocks: tuple[int, int, int], threads: tuple[int, int, int], args: list[tuple[Any, str]]) -> None:
            with streams.get(torch.cuda.current_stream()):
                function(blocks, threads, tuple(_cupy_arg(v, kind) for v, kind in args))

        launch.module = module  # type: ignore[attr-defined]  # keeps the module loaded
        return launch


def _cupy_arg(value: Any, kind: str) -> Any:
    if kind == "ptr":
        return np.uint64(value.data_ptr())
    return {"i32": np.int32, "i64": np.int64, "f32": np.float32, "f64": np.float64}[kind](value)


def _scratch_dir() -> str:
    import tempfile

    path = Path(tempfile.gettempdir()) / "hwbench-ptx"
    path.mkdir(exist_ok=True)
    return str(path)


def _int(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None
