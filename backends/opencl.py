"""OpenCL devices through pyopencl: PoCL on any CPU, vendor drivers on GPUs and accelerators.

Languages: OpenCL C (each kernel's ``opencl.cl``, launched as its ``opencl.py`` bindings say
for the device's kind and vector lanes) and llvmlite (the same sources as the CPU's, lowered
to SPIR-V for devices whose ``CL_DEVICE_IL_VERSION`` takes it). Every call is timed with
OpenCL profiling events (:mod:`.opencl_device`). Intel's OpenCL CPU runtime, where pip installed
it, is added to the ICD loader's drivers before the first platform query (:mod:`.opencl_icd`), so
every x86 machine has a device that takes SPIR-V beside PoCL. PoCL's kernel cache and pyopencl's
caches go to a writable folder before that query too (a PoCL that cannot write its cache lists
no device): where the user's is not writable, hwbench's choice is the probe's note and is in the
backend's environment (``caches``).

Natives on ``opencl`` are called as ``fn(queue, buffers, out, shape, dtype)`` with the
profiling queue, the inputs as device buffers and an output buffer, and return
``(enqueue, config)``: ``enqueue()`` enqueues the work and returns its first and last events.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import numpy as np

from hwbench.backends import opencl_device as launcher
from hwbench.backends.opencl_device import DeviceState, EventTimer, OpenCLBuildError
from hwbench.backends.opencl_icd import ensure_icd_vendors, intel_note
from hwbench.core.backend import (
    Availability,
    Backend,
    DeviceInfo,
    Flush,
    Implementation,
    Peak,
    Prepared,
    Timer,
    present,
)
from hwbench.core.caches import cache_notes, ensure_caches
from hwbench.core.dtypes import is_integer
from hwbench.core.host import package_version
from hwbench.core.kernel import Kernel, Shape, get_kernel
from hwbench.core.loading import load_callable
from hwbench.core.registry import get_backend
from hwbench.core.tuning import Space, TuningKey, key_for
from hwbench.core.tuning import chosen as tuning_choice
from hwbench.kernels.llvmir.evict import evict_method, line_evictor

_NEEDS_EXT = {"fp64": "cl_khr_fp64", "fp16": "cl_khr_fp16"}


#: Short names of OpenCL platforms whose own names are long.
PLATFORM_LABELS = {"Portable Computing Language": "PoCL"}


def platform_label(name: str) -> str:
    """The platform's name as a device name's suffix: a device says whose runtime drives it (the
    same CPU under PoCL and under Intel's runtime are two devices)."""
    name = " ".join(name.replace("(R)", "").replace("(TM)", "").split())
    return PLATFORM_LABELS.get(name, name)


def lanes(device: DeviceInfo, dtype: str) -> int:
    """Vector lanes for ``dtype`` arithmetic (fp16 computes in fp32), a power of two <= 16."""
    width = device.extra.get("native_vector_width", {}).get("fp64" if dtype == "fp64" else "fp32", 1) or 1
    return max(1, min(16, 1 << (int(width).bit_length() - 1)))


#: The caches an OpenCL process writes, in the order they are chosen: the cache home first, where
#: PoCL's kernel cache, pyopencl's compiler cache and its invoker cache (pytools) go by default.
CACHES = ("xdg", "pocl")


def _cl_devices() -> list[tuple[Any, Any]]:
    ensure_caches(CACHES)  # before the first platform query: PoCL's device needs a writable cache
    ensure_icd_vendors()  # before pyopencl's first platform query: the ICD loader reads its drivers once
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


def takes_spirv(il_versions: list[str]) -> bool:
    """Whether a device with this CL_DEVICE_IL_VERSION list takes the SPIR-V LLVM writes."""
    return any(v >= SPIRV_VERSION for v in spirv_versions(il_versions))


class OpenCLBackend(Backend):
    """Every OpenCL platform's devices."""

    name = "opencl"
    description = "OpenCL devices through pyopencl: OpenCL C and llvmlite SPIR-V kernels vs CLBlast"
    kind = "portable"

    languages = ("opencl-c", "llvmlite")
    lowering = {"llvmlite": "the work-group (SIMT) kernels lowered to SPIR-V"}

    def __init__(self) -> None:
        self._states: dict[int, DeviceState] = {}
        self._devices: list[DeviceInfo] | None = None

    def probe(self) -> Availability:
        if not present("pyopencl"):
            return Availability(False, "pyopencl is not installed (pip install 'hwbench[opencl]')")
        try:
            platforms = _cl_devices()
        except Exception as exc:  # no ICD loader or a broken driver: the reason is the message
            return Availability(
                False,
                f"no OpenCL platform: {' '.join(str(exc).split())} "
                "(Debian/Ubuntu: apt-get install pocl-opencl-icd ocl-icd-libopencl1)",
            )
        notes = cache_notes(ensure_caches(CACHES))
        if not platforms:
            return Availability(False, "; ".join(["OpenCL platforms found, but no devices", *notes]))
        return Availability(True, "; ".join(n for n in [*notes, intel_note(p.name for p, _ in platforms)] if n))

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
            name=f"{device.name.strip()} ({platform_label(platform.name)})",
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
        try:
            own = get_backend("cpu").devices()[0].peak
        except Exception:  # a peak we cannot measure stays missing
            return None
        return Peak(own.tflops, f"host CPU, as the cpu backend measures it: {own.method}") if own else None

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        base = super().supports(impl, dtype, device)
        if not base.ok:
            return base
        extension = _NEEDS_EXT.get(dtype)
        if extension and extension not in device.extra.get("extensions", []):
            return Availability(False, f"{device.name} lacks {extension}, so no {dtype}")
        if impl.language == "llvmlite":
            return self._spirv_support(impl.kernel, dtype, device)
        return Availability(True)

    def _spirv_support(self, kernel: str, dtype: str, device: DeviceInfo) -> Availability:
        if dtype == "bf16":
            return Availability(False, "OpenCL buffers here take no bf16 (NumPy has no bf16 dtype to fill them)")
        if is_integer(dtype):
            return Availability(False, f"no {dtype} work-group kernel (CPU only)")
        if not present("llvmlite"):
            return Availability(False, "llvmlite is not installed (pip install 'hwbench[cpu]')")
        source = get_kernel(kernel).source_module("llvmlite")
        if not hasattr(source, "simt_config"):
            return Availability(False, f"{kernel}'s llvmlite source has no work-group (SIMT) kernel")
        try:
            limits = simt_limits(device)
            size = len(
                _spirv(kernel, dtype, limits, _config_key(source.simt_config(_spirv_target(limits), dtype))).binary
            )
        except RuntimeError as exc:
            return Availability(False, f"SPIR-V lowering failed: {' '.join(str(exc).split())[:300]}")
        built = f"the SPIR-V {'.'.join(map(str, SPIRV_VERSION))} module builds ({size} bytes)"
        ils = device.extra.get("il_versions", [])
        if not ils:
            return Availability(False, f"device takes no IL (CL_DEVICE_IL_VERSION empty); {built}")
        if not takes_spirv(ils):
            return Availability(
                False, f"device takes {' '.join(ils)}, not SPIR-V {'.'.join(map(str, SPIRV_VERSION))}; {built}"
            )
        return Availability(True)

    def _state(self, device: DeviceInfo) -> DeviceState:
        if device.index not in self._states:
            self._states[device.index] = DeviceState(_cl_devices()[device.index][1])
        return self._states[device.index]

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
        config: Mapping[str, Any] | None = None,
    ) -> Prepared:
        """The case on the device: a native, or the OpenCL C kernel in ``config`` (a candidate
        ``hwbench tune`` times), else its tuned tile from the tuning cache, else the derived tile
        (``config.tuning`` says which); llvmlite sources as SPIR-V in their derived configuration."""
        state = self._state(device)
        if impl.kind == "native":
            return launcher.native(state, load_callable(impl.entry), inputs, kernel.output_shape(shape), shape, dtype)
        source = importlib.import_module(impl.entry)
        if impl.language == "opencl-c":
            chosen, tuning = tuning_choice(_tuning_key(impl, shape, dtype, device), config)
            extra = {} if chosen is None else {"config": chosen}
            plan = source.launch(shape, dtype, device.kind, lanes(device, dtype), **extra)
            package = source.__name__.rpartition(".")[0]
            program, compile_s = launcher.build_opencl_c(state, package, source.SOURCE, dtype, plan.defines)
            prepared = launcher.launch(state, program, plan, inputs, dtype, compile_s)
            prepared.config = {**prepared.config, "tuning": tuning}
            return prepared
        return self._spirv_case(state, (impl, kernel), source, inputs, shape, dtype, device, config)

    def tuning_space(
        self, impl: Implementation, kernel: Kernel, shape: Shape, dtype: str, device: DeviceInfo
    ) -> Space | None:
        """What ``hwbench tune`` tries for a portable case: an OpenCL C kernel's bindings' tiles, a
        llvmlite work-group kernel's configurations for the device's limits (each its own SPIR-V
        module); the derived one first. None for natives."""
        if impl.kind == "native":
            return None
        source = importlib.import_module(impl.entry)
        key = _tuning_key(impl, shape, dtype, device)
        if not hasattr(source, "tuning_space"):
            return Space(key, [], f"{impl.name} has no tuning space")
        if impl.language == "llvmlite":
            target = _spirv_target(simt_limits(device))
            return Space(key, [dict(c) for c in source.tuning_space(target, dtype, shape)])
        return Space(key, [dict(c) for c in source.tuning_space(device.kind, lanes(device, dtype), dtype, shape)])

    def _spirv_case(
        self,
        state: DeviceState,
        case: tuple[Implementation, Kernel],
        source: Any,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
        config: Mapping[str, Any] | None = None,
    ) -> Prepared:
        """The llvmlite work-group kernel lowered to SPIR-V: in ``config`` (a candidate), else the
        tuned configuration of the case's key where the source is tunable, else the one the
        device's limits give; each configuration is a module (and a device binary) of its own."""
        impl, kernel = case
        limits = simt_limits(device)
        target = _spirv_target(limits)
        chosen: Mapping[str, Any] | None = config
        tuning: dict[str, Any] = {"source": "derived"}
        if hasattr(source, "tuning_space"):
            chosen, tuning = tuning_choice(_tuning_key(impl, shape, dtype, device), config)
        chosen = chosen or source.simt_config(target, dtype, shape)
        module = _spirv(kernel.name, dtype, limits, _config_key(chosen))
        program, compile_s = launcher.build_spirv(state, module, kernel.name, dtype)
        plan = source.launch(shape, dtype, target, config=dict(chosen))
        config = {**plan.config, "spirv_bytes": len(module.binary), "grid": list(plan.grid), "tuning": tuning}
        return launcher.launch(state, program, plan, inputs, dtype, compile_s + module.compile_s, (), config)

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        return (OpenCLBuildError,)

    def timer(self, device: DeviceInfo) -> Timer:
        return EventTimer(self._state(device), device.extra.get("timer_resolution_ns"))

    def case_flush(self, device: DeviceInfo, prepared: Prepared) -> Flush | None:
        """On a CPU device, every line of the case's buffers (its inputs and output) flushed from the
        host's caches (``clflushopt``, through a map of each) where the host can and a map hands
        out the buffer's own memory; else :meth:`flush`."""
        if device.kind != "cpu":
            return super().case_flush(device, prepared)
        buffers = prepared.buffers() if isinstance(prepared, launcher.Enqueued) else []
        evictor = line_evictor() if buffers and present("llvmlite") else None
        if evictor is None or not launcher.maps_own_memory(self._state(device), buffers):
            host = get_backend("cpu")
            return host.case_flush(host.devices()[0], prepared)
        state = self._state(device)
        method = evict_method(evictor, [(0, b.size) for b in buffers])
        return Flush(lambda: launcher.evict_mapped(state, buffers, evictor), f"{method}, each buffer mapped")

    def flush(self, device: DeviceInfo) -> Callable[[], None] | None:
        if device.kind == "cpu":  # the device's caches are the host's: evict them as the cpu backend does
            host = get_backend("cpu")
            return host.flush(host.devices()[0])
        state = self._state(device)
        scratch = state.output(2 * int(device.extra.get("global_mem_cache_bytes") or 2**25))

        def flush() -> None:
            state.zero(scratch).wait()

        return flush

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {"pyopencl": package_version("pyopencl"), "pyclblast": package_version("pyclblast")}
        moved = [c for c in ensure_caches(CACHES) if c.note]
        if moved:  # hwbench chose these folders: the user's were not writable
            env["caches"] = {c.tool: c.as_json() for c in moved}
        try:
            env["platforms"] = sorted({f"{p.name} ({p.version})" for p, _ in _cl_devices()})
        except Exception:
            pass
        return env


def _tuning_key(impl: Implementation, shape: Shape, dtype: str, device: DeviceInfo) -> TuningKey:
    """An OpenCL case's tuning key: the device, its driver, pyopencl's version (and llvmlite's,
    which lowers a llvmlite source to SPIR-V)."""
    software = {"pyopencl": package_version("pyopencl")}
    lowering: tuple[str, ...] = ("hwbench.kernels",)
    if impl.language == "llvmlite":
        software["llvmlite"] = package_version("llvmlite")
        lowering += ("hwbench.kernels.llvmir",)  # the SIMT interface and the SPIR-V lowering
    return key_for(device, impl, dtype, shape, software, lowering)


def simt_limits(device: DeviceInfo) -> Any:
    """The work-group kernels' view of an OpenCL device (``hwbench.kernels.llvmir.simt.DeviceLimits``)."""
    # The SIMT interface imports llvmlite, which is optional (callers checked it is here).
    from hwbench.kernels.llvmir.simt import DeviceLimits

    extra = device.extra
    return DeviceLimits(
        kind="cpu" if device.kind == "cpu" else "gpu",
        local_mem_bytes=int(extra.get("local_mem_bytes") or 32 * 1024),
        max_work_group=int(extra.get("max_work_group_size") or 256),
        subgroup=1 if device.kind == "cpu" else 32,
        lanes=lanes(device, "fp32") if device.kind == "cpu" else 1,
        fp16="cl_khr_fp16" in extra.get("extensions", []),
    )


def _spirv_target(limits: Any) -> Any:
    # The SPIR-V target imports llvmlite, which is optional (callers checked it is here).
    from hwbench.kernels.llvmir.spirv import SPIRVTarget

    return SPIRVTarget(limits)


def _config_key(config: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((k, int(v)) for k, v in config.items()))


@cache
def _spirv(kernel: str, dtype: str, limits: Any, config: tuple[tuple[str, int], ...]) -> Any:
    """``kernel``'s work-group kernel in ``config`` as a SPIR-V module for a device with ``limits``
    (built once per process)."""
    # The SPIR-V lowering imports llvmlite, which is optional (callers checked it is here).
    from hwbench.kernels.llvmir.spirv import build_spirv

    return build_spirv(kernel, dtype, limits, dict(config))
