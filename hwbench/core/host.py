"""Host, software stack and number-changing settings, for every results file."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

from hwbench import __version__

#: Environment variables that change what a benchmark measures.
SETTINGS = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_DEBUG_CPU_TYPE",
    "NVPL_BLAS_DEBUG_CPU_TYPE",
    "GOTO_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "TRITON_INTERPRET",
    "NUMBA_NUM_THREADS",
    "POCL_DEVICES",
    "POCL_MAX_PTHREAD_COUNT",
)
#: Settings that force a slower code path than the hardware would choose.
SLOWING = {
    "OPENBLAS_CORETYPE": "forces OpenBLAS onto the {value} kernel instead of the one it detects",
    "OPENBLAS_L2_SIZE": "overrides OpenBLAS's cache blocking (L2 size {value})",
}
CPU_FEATURES = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "neon",
    "asimd",
    "sve",
    "sve2",
)


def cpu_info() -> dict[str, Any]:
    """Model, core count and vector features of the host CPU."""
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model") and model in ("", platform.machine(), platform.processor()):
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return {
        "model": model or "unknown",
        "cores": cores,
        "logical_cpus": os.cpu_count() or cores,
        "machine": platform.machine(),
        "features": sorted(flags & set(CPU_FEATURES)),
    }


def memory_available() -> int | None:
    """Bytes of memory available to new allocations (MemAvailable), or None if unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_info() -> dict[str, Any]:
    """Where the run happened."""
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "kernel": platform.release(),
        "cpu": cpu_info(),
        "memory_bytes": total_memory(),
    }


def settings() -> dict[str, str | None]:
    """Every number-changing environment setting, None when unset."""
    return {name: os.environ.get(name) for name in SETTINGS}


def settings_warnings(values: dict[str, str | None]) -> list[str]:
    """Warnings for settings that slow a library down (recorded and shown, never changed)."""
    return [
        f"{name}={values[name]} is set: {text.format(value=values[name])}; native figures may be low"
        for name, text in SLOWING.items()
        if values.get(name)
    ]


def package_version(name: str) -> str | None:
    """Installed version of a distribution, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def blas_info() -> list[dict[str, Any]]:
    """BLAS libraries NumPy loaded, with the kernel each picked (via threadpoolctl)."""
    try:
        import numpy  # noqa: F401  (loads its BLAS so threadpoolctl can see it)
        from threadpoolctl import threadpool_info
    except ImportError as exc:
        return [{"error": f"threadpoolctl not installed ({exc})"}]
    keep = ("user_api", "internal_api", "version", "architecture", "threading_layer", "num_threads", "prefix")
    return [{k: lib.get(k) for k in keep} for lib in threadpool_info() if lib.get("user_api") == "blas"]


def blas_label() -> str:
    """``openblas 0.3.31, ...``: the BLAS libraries NumPy loaded (or "NumPy's BLAS")."""
    libs = [b for b in blas_info() if "internal_api" in b]
    return ", ".join(f"{b['internal_api']} {b['version']}" for b in libs) or "NumPy's BLAS"


def largest_cache_bytes(default: int = 32 * 2**20) -> int:
    """Size of the host CPU's largest cache, from sysfs (``default`` where sysfs says nothing)."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=default)


def total_memory() -> int | None:
    """Bytes of physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def git_commit() -> str | None:
    """Commit of the hwbench checkout this runs from, or None when installed from a wheel."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        timeout=5,
    ).stdout.strip()
    return commit + ("-dirty" if dirty else "")


def software_info() -> dict[str, Any]:
    """Versions of the Python-side stack (backends add their drivers and runtimes)."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }
    for dist in ("numpy", "llvmlite", "torch", "triton", "pyopencl", "cupy", "threadpoolctl"):
        info[dist] = package_version(dist)
    info["blas"] = blas_info()
    if info["llvmlite"]:
        try:
            import llvmlite.binding as llvm

            info["llvm"] = ".".join(str(part) for part in llvm.llvm_version_info)
        except Exception as exc:  # a broken llvmlite install is recorded, not fatal
            info["llvm"] = f"unavailable: {exc}"
    return info


def hwbench_info() -> dict[str, Any]:
    """This hwbench's version and commit."""
    return {"version": __version__, "git_commit": git_commit()}


def arch_of(props: Any, hip: bool) -> str:
    """The architecture Triton and LLVM take for a device as torch describes it (``props`` from
    ``torch.cuda.get_device_properties``): on a CUDA build ``sm_{major}{minor}`` (torch fills ``gcnArchName``
    with the device's name there), on a HIP build (``hip``) ``gcnArchName`` without its feature suffixes."""
    if not hip:
        return f"sm_{props.major}{props.minor}"
    return str(getattr(props, "gcnArchName", "") or "").split(":")[0].strip()


def describe_host() -> dict[str, Any]:
    """Host, software stack and settings, with warnings for number-changing settings."""
    values = settings()
    return {"host": host_info(), "software": software_info(), "settings": values, "warnings": settings_warnings(values)}
