"""The host CPU: llvmlite kernels JIT-compiled for its vector width, beside NumPy/OpenBLAS and torch.

Always available (NumPy is a core dependency); the llvmlite kernels need llvmlite and
say so when it is missing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from hwbench.core.backend import Availability, Backend, DeviceInfo, Implementation, Peak, Prepared
from hwbench.core.host import blas_info, cpu_info, package_version
from hwbench.core.kernel import Kernel, Shape

PORTABLE_DTYPES = ("fp32", "fp64")
#: Bytes written to evict the caches when the size of the last level is unknown.
DEFAULT_FLUSH_BYTES = 64 * 2**20


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _blas_label() -> str:
    libs = [b for b in blas_info() if "internal_api" in b]
    return ", ".join(f"{b['internal_api']} {b['version']}" for b in libs) or "NumPy's BLAS"


class _Native(Prepared):
    """A host library call writing into a preallocated output where the library allows it."""

    def __init__(self, call: Callable[[], Any], config: Mapping[str, Any]) -> None:
        self._call = call
        self._last: Any = None
        self.config = dict(config)

    def run(self) -> None:
        self._last = self._call()

    def result(self) -> np.ndarray:
        value = self._last
        return value.numpy() if hasattr(value, "numpy") and not isinstance(value, np.ndarray) else np.asarray(value)


class _Portable(Prepared):
    """An llvmlite kernel bound to its inputs (see ``hwbench.kernels.llvmir.cpu_launch``)."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self.compile_s = kernel.compile_s
        self.config = dict(kernel.config)

    def run(self) -> None:
        self._kernel.run()

    def result(self) -> np.ndarray:
        return self._kernel.output


def _llc_bytes() -> int:
    """Size of the largest CPU cache, from sysfs."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=DEFAULT_FLUSH_BYTES // 2)


class CPUBackend(Backend):
    """Kernels on the host's cores: llvmlite (portable) against NumPy/OpenBLAS and torch (native)."""

    name = "cpu"
    description = "host CPU: llvmlite JIT kernels vs NumPy/OpenBLAS and torch"
    _flush_buffer: np.ndarray | None = None
    _devices: list[DeviceInfo] | None = None

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            self._devices = self._describe_devices()
        return self._devices

    def _describe_devices(self) -> list[DeviceInfo]:
        info = cpu_info()
        vendor = "unknown"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith(("vendor_id", "CPU implementer")):
                    vendor = line.partition(":")[2].strip()
                    break
        except OSError:
            pass
        arch, peak, extra = info["machine"], None, {"features": info["features"]}
        if _has("llvmlite"):
            arch, peak, extra = self._llvm_facts(info, extra)
        return [
            DeviceInfo(
                backend=self.name,
                index=0,
                name=f"{info['model']} ({info['cores']} cores)",
                vendor=vendor,
                kind="cpu",
                arch=arch,
                compute_units=info["cores"],
                memory_bytes=_total_memory(),
                libraries={"blas": _blas_label()},
                extra=extra,
                peak=peak,
            )
        ]

    def _llvm_facts(self, info: dict[str, Any], extra: dict[str, Any]) -> tuple[str, Peak | None, dict[str, Any]]:
        from hwbench.backends.cpu_peak import measure_peak
        from hwbench.kernels.llvmir.target import CPUTarget

        target = CPUTarget()
        lanes = target.vector_width("fp32")
        isa = next((f for f in ("avx512f", "avx2", "avx", "asimd", "neon") if f in info["features"]), "scalar")
        extra = {**extra, "llvm_cpu": target.cpu_name, "vector_bits": lanes * 32, "cache_bytes": _llc_bytes()}
        try:
            measured = measure_peak(info["cores"], lanes, isa)
        except Exception as exc:  # a peak we cannot measure is reported as missing, with why
            return target.cpu_name, None, {**extra, "peak_error": str(exc)}
        extra.update(
            clock_ghz=measured.clock_ghz,
            fma_units=measured.fma_units,
            fma_per_cycle_measured=measured.fma_per_cycle_measured,
        )
        return target.cpu_name, Peak(measured.tflops, measured.method), extra

    def implementations(self, kernel: str) -> list[Implementation]:
        torch = _has("torch")
        if kernel == "gemm":
            return [
                Implementation(
                    "gemm", "numpy", "native", "numpy", "NumPy matmul on its BLAS (OpenBLAS or MKL)", ("fp32", "fp64")
                ),
                Implementation(
                    "gemm",
                    "llvm",
                    "portable",
                    "llvmlite",
                    "packed-panel register-blocked kernel, JIT for the host vector width, all cores",
                    PORTABLE_DTYPES,
                ),
            ]
        if kernel == "attention":
            native = (
                Implementation(
                    "attention",
                    "torch_sdpa",
                    "native",
                    "torch",
                    "torch.nn.functional.scaled_dot_product_attention on the CPU",
                    ("fp32", "fp64"),
                )
                if torch
                else Implementation(
                    "attention",
                    "numpy_attention",
                    "native",
                    "numpy",
                    "NumPy softmax(QK^T)V (torch is not installed, so no SDPA baseline)",
                    ("fp32", "fp64"),
                )
            )
            return [
                native,
                Implementation(
                    "attention",
                    "llvm",
                    "portable",
                    "llvmlite",
                    "flash-attention forward with online softmax, all cores",
                    PORTABLE_DTYPES,
                ),
            ]
        if kernel == "allreduce":  # run across processes by hwbench.collective, not by prepare()
            return [
                Implementation(
                    "allreduce",
                    "gloo",
                    "native",
                    "torch.distributed",
                    "torch.distributed.all_reduce on the gloo backend",
                    ("fp32", "fp64"),
                ),
                Implementation(
                    "allreduce",
                    "mpi",
                    "native",
                    "mpi4py",
                    "MPI.COMM_WORLD.Allreduce through mpi4py, ranks started by mpirun",
                    ("fp32", "fp64"),
                ),
                Implementation(
                    "allreduce",
                    "llvm_shm",
                    "portable",
                    "llvmlite",
                    "shared-memory one-shot / reduce-scatter + all-gather, reduction and "
                    "synchronisation in llvmlite IR; hierarchical across nodes",
                    PORTABLE_DTYPES,
                ),
            ]
        return []

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        if impl.language == "llvmlite" and not _has("llvmlite"):
            return Availability(False, "llvmlite is not installed (pip install 'hwbench[cpu]')")
        if impl.kernel == "allreduce" and not _has("torch"):
            return Availability(False, "torch is not installed: AllReduce ranks meet through torch.distributed")
        if impl.name == "mpi":
            from hwbench.collective.mpi import missing

            why = missing()
            if why:
                return Availability(False, why)
        return super().supports(impl, dtype, device)

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        if impl.language == "llvmlite":
            module = {"gemm": "hwbench.kernels.gemm.llvm", "attention": "hwbench.kernels.attention.llvm"}[impl.kernel]
            source = importlib.import_module(module)
            return _Portable(source.prepare_cpu(dict(inputs), dict(shape), dtype))
        if impl.name == "numpy":
            a, b = inputs["A"], inputs["B"]
            out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
            return _Native(lambda: np.matmul(a, b, out=out), {"library": _blas_label()})
        if impl.name == "torch_sdpa":
            return _torch_sdpa(inputs, shape)
        if impl.name == "numpy_attention":
            return _numpy_attention(inputs, shape)
        raise ValueError(f"cpu has no implementation {impl.name}")

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        return (RuntimeError,) if _has("llvmlite") else ()

    def flush(self, device: DeviceInfo) -> Callable[[], None]:
        nbytes = 2 * int(device.extra.get("cache_bytes") or _llc_bytes())
        if self._flush_buffer is None or self._flush_buffer.nbytes != nbytes:
            self._flush_buffer = np.zeros(nbytes // 8, dtype=np.float64)
        buffer = self._flush_buffer

        def flush() -> None:
            np.add(buffer, 1.0, out=buffer)  # read and write every line: evicts inputs and outputs

        return flush

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "blas": blas_info(),
            "numpy": package_version("numpy"),
            "llvmlite": package_version("llvmlite"),
            "torch": package_version("torch"),
            "threads": os.cpu_count(),
        }
        if _has("llvmlite"):
            import llvmlite.binding as llvm

            env["llvm"] = ".".join(map(str, llvm.llvm_version_info))
            env["llvm_host_cpu"] = llvm.get_host_cpu_name()
        return env


def _total_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _torch_sdpa(inputs: Mapping[str, np.ndarray], shape: Shape) -> Prepared:
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    q, k, v = (torch.from_numpy(inputs[name]) for name in ("q", "k", "v"))
    causal = bool(shape["causal"])

    def call() -> Any:
        with torch.inference_mode():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return _Native(call, {"library": f"torch {torch.__version__}", "threads": torch.get_num_threads()})


def _numpy_attention(inputs: Mapping[str, np.ndarray], shape: Shape) -> Prepared:
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    scale = q.dtype.type(1.0 / np.sqrt(shape["head_dim"]))
    mask = np.triu(np.ones((shape["seq_q"], shape["seq_k"]), dtype=bool), k=1) if shape["causal"] else None

    def call() -> np.ndarray:
        scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
        if mask is not None:
            scores[..., mask] = -np.inf
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        return np.matmul(scores, v)

    return _Native(call, {"library": f"numpy {np.__version__}", "note": "torch not installed"})
