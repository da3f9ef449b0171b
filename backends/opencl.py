"""OpenCL devices through pyopencl: PoCL on any CPU, vendor drivers on GPUs and accelerators.

Portable implementations: ``opencl`` (OpenCL C beside each kernel's spec, tile sizes
chosen per device) and ``llvm`` (the CPU backend's llvmlite kernels lowered to SPIR-V,
for devices whose ``CL_DEVICE_IL_VERSION`` takes SPIR-V). Native GEMM: CLBlast through
pyclblast. Every call is timed with OpenCL profiling events.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from hwbench.backends._probe import missing_modules
from hwbench.core.backend import Availability, Backend, DeviceInfo, Implementation, Peak, Prepared, Timer
from hwbench.core.kernel import Kernel, Shape

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"
_C_DTYPES = ("fp32", "fp64", "fp16")
_NEEDS_EXT = {"fp64": "cl_khr_fp64", "fp16": "cl_khr_fp16"}
_LAST: dict[int, tuple[Any, Any]] = {}  # device index -> (first, last) event of the latest run


class OpenCLBuildError(RuntimeError):
    """A program the OpenCL compiler rejected; the message is the build log's first error line."""


def first_error_line(log: str) -> str:
    """The first line of a build log that names an error (else its first non-empty line)."""
    lines = [re.sub(r"\S*?([\w-]+)\.cl:", "program.cl:", ln.strip()) for ln in log.splitlines() if ln.strip()]
    return next((ln for ln in lines if re.search(r"\berror\b", ln, re.I)), lines[0] if lines else "build failed")


def _read(package: str, name: str, fallback: Path) -> str:
    try:
        from importlib.resources import files

        return files(package).joinpath(name).read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        return fallback.read_text()


def _source(kernel: str) -> str:
    """``kernels/<kernel>/opencl.cl`` behind the shared element-type prelude; ``#line 1`` keeps
    the build log's line numbers those of the kernel's own file."""
    prelude = _read("hwbench.kernels", "opencl_dtypes.cl", KERNELS_DIR / "opencl_dtypes.cl")
    body = _read(f"hwbench.kernels.{kernel}", "opencl.cl", KERNELS_DIR / kernel / "opencl.cl")
    return f"{prelude}\n#line 1\n{body}"


def _lanes(device: DeviceInfo, dtype: str) -> int:
    """Vector lanes for ``dtype`` arithmetic (fp16 computes in fp32), a power of two <= 16."""
    width = device.extra.get("native_vector_width", {}).get("fp64" if dtype == "fp64" else "fp32", 1) or 1
    return max(1, min(16, 1 << (int(width).bit_length() - 1)))


def gemm_tiles(device: DeviceInfo, dtype: str) -> dict[str, int]:
    """Register tile for the OpenCL C GEMM on ``device`` (measured on PoCL/AVX-512; GPU values are a start)."""
    vw = _lanes(device, dtype)
    if device.kind == "cpu":  # one work-item is a CPU microkernel: 32 vector registers on AVX-512
        return {"VW": vw, "TM": 12 if vw >= 8 else 6, "TNV": 2, "WG0": 1}
    return {"VW": min(vw, 4), "TM": 4, "TNV": 1, "WG0": 64}


def attention_tiles(device: DeviceInfo, dtype: str, head_dim: int) -> dict[str, int]:
    """Query/key blocking for the OpenCL C attention on ``device``."""
    vw = _lanes(device, dtype)
    if device.kind == "cpu":
        return {"HD": head_dim, "VW": vw, "QV": 1, "BK": 16, "WG0": 1}
    return {"HD": head_dim, "VW": min(vw, 4), "QV": 1, "BK": 8, "WG0": 64}


class _Launch(Prepared):
    """Work on one device's queue: ``run`` enqueues, waits, and leaves its events for the timer."""

    def __init__(
        self,
        state: _DeviceState,
        enqueue: Callable[[], tuple[Any, Any]],
        out: Any,
        shape: tuple[int, ...],
        np_dtype: Any,
        config: Mapping[str, Any],
        compile_s: float,
        keepalive: tuple[Any, ...] = (),
    ) -> None:
        self._state, self._enqueue, self._out = state, enqueue, out
        self._shape, self._dtype, self._keep = shape, np_dtype, keepalive
        self.config, self.compile_s = dict(config), compile_s

    def run(self) -> None:
        first, last = self._enqueue()
        last.wait()
        _LAST[self._state.index] = (first, last)

    def result(self) -> np.ndarray:
        import pyopencl as cl

        host = np.empty(self._shape, dtype=self._dtype)
        cl.enqueue_copy(self._state.queue, host, self._out)
        return host


class EventTimer(Timer):
    """Device time of the latest run: the last event's end minus the first event's start."""

    name = "opencl-profiling-events"

    def __init__(self, device: DeviceInfo) -> None:
        self._index = device.index
        self.resolution_s = float(device.extra.get("timer_resolution_ns") or 1) * 1e-9

    def time(self, fn: Callable[[], None]) -> float:
        fn()
        first, last = _LAST[self._index]
        return max(last.profile.end - first.profile.start, 0) * 1e-9


class _DeviceState:
    """Context, profiling queue and built programs of one device (kept for the process)."""

    def __init__(self, index: int, device: Any) -> None:
        import pyopencl as cl

        self.index, self.device = index, device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.programs: dict[Any, tuple[Any, float]] = {}

    def program(self, key: Any, build: Callable[[], Any]) -> tuple[Any, float, bool]:
        """A built program for ``key`` (built now, timed, on first use)."""
        if key not in self.programs:
            t0 = time.perf_counter()
            self.programs[key] = (build(), time.perf_counter() - t0)
            return self.programs[key][0], self.programs[key][1], True
        return self.programs[key][0], 0.0, False

    def buffer(self, array: np.ndarray) -> Any:
        import pyopencl as cl

        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return cl.Buffer(self.context, flags, hostbuf=np.ascontiguousarray(array))

    def output(self, nbytes: int) -> Any:
        import pyopencl as cl

        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))


def _cl_devices() -> list[tuple[Any, Any]]:
    import pyopencl as cl

    return [(p, d) for p in cl.get_platforms() for d in p.get_devices()]


def _il_versions(device: Any) -> list[str]:
    try:
        return str(device.il_version or "").split()
    except Exception:  # OpenCL < 2.1 has no CL_DEVICE_IL_VERSION
        return []


def spirv_versions(il_versions: list[str]) -> list[tuple[int, int]]:
    """SPIR-V versions named in a CL_DEVICE_IL_VERSION list (``SPIR-V_1.2`` -> (1, 2))."""
    found = (re.fullmatch(r"SPIR-V_(\d+)\.(\d+)", v) for v in il_versions)
    return [(int(m[1]), int(m[2])) for m in found if m]


#: SPIR-V version LLVM's backend writes by default (vector selects on scalar conditions need it).
SPIRV_VERSION = (1, 4)


class OpenCLBackend(Backend):
    """Every OpenCL platform's devices."""

    name = "opencl"
    description = "OpenCL devices through pyopencl: OpenCL C and llvmlite SPIR-V kernels vs CLBlast"

    def __init__(self) -> None:
        self._states: dict[int, _DeviceState] = {}
        self._devices: list[DeviceInfo] | None = None
        self._flush_buffer: Any = None

    def probe(self) -> Availability:
        if missing_modules("pyopencl"):
            return Availability(False, "pyopencl is not installed (pip install 'hwbench[opencl]')")
        try:
            platforms = _cl_devices()
        except Exception as exc:  # no ICD loader or a broken driver: the reason is the message
            return Availability(
                False,
                f"no OpenCL platform: {' '.join(str(exc).split())} "
                "(Debian/Ubuntu: apt-get install pocl-opencl-icd ocl-icd-libopencl1)",
            )
        if not platforms:
            return Availability(False, "OpenCL platforms found, but no devices")
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            self._devices = self._list_devices()
        return self._devices

    def _list_devices(self) -> list[DeviceInfo]:
        return [self._describe(index, platform, device) for index, (platform, device) in enumerate(_cl_devices())]

    def _describe(self, index: int, platform: Any, device: Any) -> DeviceInfo:
        import pyopencl as cl

        kind = (
            "cpu" if device.type & cl.device_type.CPU else "gpu" if device.type & cl.device_type.GPU else "accelerator"
        )
        extensions = device.extensions.split()
        extra: dict[str, Any] = {
            "platform": platform.name,
            "platform_version": platform.version,
            "opencl_version": device.version,
            "opencl_c_version": device.opencl_c_version,
            "max_clock_mhz": device.max_clock_frequency,
            "global_mem_bytes": device.global_mem_size,
            "global_mem_cache_bytes": device.global_mem_cache_size,
            "local_mem_bytes": device.local_mem_size,
            "max_work_group_size": device.max_work_group_size,
            "native_vector_width": {
                "fp32": device.native_vector_width_float,
                "fp64": device.native_vector_width_double,
                "fp16": device.native_vector_width_half,
            },
            "extensions": extensions,
            "il_versions": _il_versions(device),
            "timer_resolution_ns": device.profiling_timer_resolution,
            "host_cpu": kind == "cpu",
        }
        peak = self._host_peak() if kind == "cpu" else None
        return DeviceInfo(
            backend=self.name,
            index=index,
            name=device.name.strip(),
            vendor=device.vendor.strip(),
            kind=kind,
            arch=device.version,
            compute_units=device.max_compute_units,
            memory_bytes=device.global_mem_size,
            driver=device.driver_version,
            runtime=platform.version,
            extra=extra,
            peak=peak,
        )

    @staticmethod
    def _host_peak() -> Peak | None:
        """A CPU OpenCL device runs on the host's cores: its peak is the cpu backend's measured one."""
        from hwbench.core.registry import get_backend

        try:
            own = get_backend("cpu").devices()[0].peak
        except Exception:  # a peak we cannot measure stays missing
            return None
        return Peak(own.tflops, f"host CPU, as the cpu backend measures it: {own.method}") if own else None

    def implementations(self, kernel: str) -> list[Implementation]:
        if kernel not in ("gemm", "attention"):
            return []
        impls = []
        if kernel == "gemm":
            impls.append(
                Implementation(
                    "gemm", "clblast", "native", "clblast", "CLBlast xGEMM through pyclblast", ("fp32", "fp64", "fp16")
                )
            )
        what = (
            "register-blocked vector tiles, one tile per work-item"
            if kernel == "gemm"
            else "flash attention with online softmax, query rows in vector lanes"
        )
        impls.append(Implementation(kernel, "opencl", "portable", "opencl-c", f"OpenCL C: {what}", _C_DTYPES))
        impls.append(
            Implementation(
                kernel,
                "llvm",
                "portable",
                "llvmlite",
                "the cpu backend's llvmlite kernel lowered to SPIR-V",
                ("fp32", "fp64"),
            )
        )
        return impls

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        base = super().supports(impl, dtype, device)
        if not base.ok:
            return base
        extension = _NEEDS_EXT.get(dtype)
        if extension and extension not in device.extra.get("extensions", []):
            return Availability(False, f"{device.name} lacks {extension}, so no {dtype}")
        if impl.name == "clblast" and missing_modules("pyclblast"):
            return Availability(
                False,
                "pyclblast is not installed (pip install 'hwbench[clblast]'; "
                "building it needs CLBlast: apt-get install libclblast-dev ocl-icd-opencl-dev)",
            )
        if impl.name == "llvm":
            return self._spirv_support(impl.kernel, dtype, device)
        return Availability(True)

    def _spirv_support(self, kernel: str, dtype: str, device: DeviceInfo) -> Availability:
        if missing_modules("llvmlite"):
            return Availability(False, "llvmlite is not installed (pip install 'hwbench[cpu]')")
        try:
            size = len(_spirv(kernel, dtype, _lanes(device, "fp32")).binary)
        except RuntimeError as exc:
            return Availability(False, f"SPIR-V lowering failed: {' '.join(str(exc).split())[:300]}")
        built = f"the SPIR-V {'.'.join(map(str, SPIRV_VERSION))} module builds ({size} bytes)"
        ils = device.extra.get("il_versions", [])
        if not ils:
            return Availability(False, f"device takes no IL (CL_DEVICE_IL_VERSION empty); {built}")
        if not any(v >= SPIRV_VERSION for v in spirv_versions(ils)):
            return Availability(
                False, f"device takes {' '.join(ils)}, not SPIR-V {'.'.join(map(str, SPIRV_VERSION))}; {built}"
            )
        return Availability(True)

    def _state(self, device: DeviceInfo) -> _DeviceState:
        if device.index not in self._states:
            self._states[device.index] = _DeviceState(device.index, _cl_devices()[device.index][1])
        return self._states[device.index]

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
    ) -> Prepared:
        from hwbench.backends import opencl_launch as launch

        state = self._state(device)
        if impl.name == "opencl":
            return launch.opencl_c(state, impl.kernel, inputs, shape, dtype, device)
        if impl.name == "clblast":
            return launch.clblast(state, inputs, shape, dtype)
        if impl.name == "llvm":
            return launch.spirv(
                state, impl.kernel, inputs, shape, dtype, _spirv(impl.kernel, dtype, _lanes(device, "fp32"))
            )
        raise ValueError(f"opencl has no implementation {impl.name}")

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        return (OpenCLBuildError,)

    def timer(self, device: DeviceInfo) -> Timer:
        return EventTimer(device)

    def flush(self, device: DeviceInfo) -> Callable[[], None] | None:
        if device.kind == "cpu":  # the device's caches are the host's: evict them as the cpu backend does
            from hwbench.backends.cpu import _llc_bytes

            nbytes = 2 * _llc_bytes()
            if self._flush_buffer is None or self._flush_buffer.nbytes != nbytes:
                self._flush_buffer = np.zeros(nbytes // 8)
            buffer = self._flush_buffer

            def evict() -> None:
                np.add(buffer, 1.0, out=buffer)  # read and write every line

            return evict
        state = self._state(device)
        scratch = state.output(2 * int(device.extra.get("global_mem_cache_bytes") or 2**25))

        def flush() -> None:
            import pyopencl as cl

            cl.enqueue_fill_buffer(state.queue, scratch, np.uint32(0), 0, scratch.size).wait()

        return flush

    def environment(self) -> dict[str, Any]:
        from hwbench.core.host import package_version

        env: dict[str, Any] = {"pyopencl": package_version("pyopencl"), "pyclblast": package_version("pyclblast")}
        try:
            env["platforms"] = sorted({f"{p.name} ({p.version})" for p, _ in _cl_devices()})
        except Exception:
            pass
        return env


@cache
def _spirv(kernel: str, dtype: str, lanes: int) -> Any:
    from hwbench.kernels.llvmir.spirv import build_spirv

    return build_spirv(kernel, dtype, lanes)


def scale_log2e(head_dim: int) -> float:
    """Q's prescale for the exp2-based softmax: log2(e) / sqrt(head_dim)."""
    return math.log2(math.e) / math.sqrt(head_dim)
