"""What the CUDA and ROCm backends share: torch's two GPU builds drive the device.

Portable sources: Triton (each kernel's ``triton.py``, prepared in ``torch_gpu_triton.py``: the
candidate ``hwbench tune`` gives, else the tuned configuration from the tuning cache, else the
derived one) and llvmlite lowered to PTX or AMDGCN (``hwbench.kernels.llvmir.gpu``; loaded by
the vendor's module API, in its derived configuration). Timing uses device events with the
device kept busy ahead of the start event (:class:`EventTimer`), so launch and host overhead
are not counted. The flush writes a
buffer twice the last-level cache before each timed call: the L2 torch reports or, where
larger, the catalog's last-level cache (MI300X: 256 MB Infinity Cache behind 4 MB L2s).
Vendor specifics (library versions, loading a code object) live in ``cuda.py`` and
``rocm.py``.

Natives on ``cuda`` and ``rocm`` are called as ``fn(tensors, out, shape, dtype)`` with the inputs
as device tensors (fp8 and int8 as ``torch_gpu_lowp.py`` lays them out) and an output tensor of the
case's shape and output dtype, and return ``(call, config)``: ``call()`` computes and returns the
output tensor (``out`` or a new one; where ``call.out`` names it, e.g. a host tensor, that is the
one cleared before the timed calls).
"""

from __future__ import annotations

import functools
import importlib
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from hwbench.backends import torch_gpu_lowp as lowp
from hwbench.backends import torch_gpu_triton as triton_case
from hwbench.core.backend import (
    Availability,
    Backend,
    DeviceInfo,
    Flush,
    Implementation,
    Observers,
    Prepared,
    Timer,
    present,
)
from hwbench.core.caches import cache_notes, ensure_caches
from hwbench.core.dtypes import is_integer
from hwbench.core.host import arch_of, package_version
from hwbench.core.kernel import Kernel, Shape
from hwbench.core.launch import OUTPUT, Launch
from hwbench.core.loading import load_callable
from hwbench.core.tuning import Space
from hwbench.decide.catalog import Catalog
from hwbench.kernels.transfer.link import link_facts, read_link

#: Spin cycles queued ahead of the start event at first (about 100 µs at 2 GHz).
BUSY_CYCLES = 200_000
#: The shortest and the longest spin ahead of one timed call, seconds.
MIN_BUSY_S, MAX_BUSY_S = 20e-6, 0.05
#: Timings of one call at most, while the spin ahead of it is lengthened.
BUSY_TRIES = 4
#: The oldest Triton the kernels are written for (``kernels/triton_compat.py``, the extras' floor),
#: and the distributions its module comes in (PyPI's, torch's nightlies', ROCm's).
TRITON_OLDEST = (3, 6)
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm")


@functools.cache
def _triton_version() -> str:
    """The installed Triton's version ("" where none says one), read once: every case asks."""
    return next((v for v in map(package_version, TRITON_DISTRIBUTIONS) if v), "")


def triton_too_old(extra: str) -> str:
    """Why the installed Triton cannot run hwbench's Triton kernels (empty where it can or says no version)."""
    version = _triton_version()
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found.group(1)), int(found.group(2))) >= TRITON_OLDEST:
        return ""
    return (
        f"triton {version} is older than {TRITON_OLDEST[0]}.{TRITON_OLDEST[1]}, which hwbench's Triton kernels need "
        f"(pip install 'hwbench[{extra}]')"
    )


def flush_bytes(extra: Mapping[str, Any]) -> int:
    """Bytes the flush writes: twice the larger of the runtime's L2 and the catalog's LLC (64 MiB when neither)."""
    largest = max(int(extra.get("l2_bytes") or 0), int(extra.get("llc_bytes") or 0))
    return 2 * (largest or 64 * 2**20)


class KernelCompileError(RuntimeError):
    """A portable kernel that the device's compiler rejected (a compile_error record)."""


class TorchPrepared(Prepared):
    """A call on device tensors; ``result`` copies its output to the host (narrow dtypes as fp32)."""

    def __init__(
        self,
        call: Callable[[], Any],
        config: Mapping[str, Any],
        compile_s: float = 0.0,
        keepalive: Any = None,
        out: Any = None,
    ) -> None:
        self._call = call
        self._last: Any = None
        self._keepalive = keepalive
        self._out = out
        self.config = dict(config)
        self.compile_s = compile_s

    def run(self) -> None:
        self._last = self._call()

    def result(self) -> np.ndarray:
        import torch

        torch.cuda.synchronize()
        out = self._last
        if out.dtype in (torch.float16, torch.bfloat16):
            out = out.float()
        return np.asarray(out.cpu().numpy())

    def clear_output(self) -> bool:
        if self._out is None or not self._out.is_floating_point():
            return False
        self._out.fill_(float("nan"))
        return True


class EventTimer(Timer):
    """Device events around the call (CUDA or HIP events), a spin kernel (``torch.cuda._sleep``)
    queued ahead of the start event so the host has enqueued the call before the device reaches
    it: the events bracket device work, not launch and host overhead. Each spin lasts twice the
    host's last time from the spin to the call's return; where the host outlasted it, the call is
    timed again behind a longer one.
    The name says the method (``cuda_event+busy_ahead``; the bare event name without ``_sleep``).
    ``cuda`` (``torch.cuda``) and ``clock`` are seams for tests."""

    def __init__(self, name: str, cuda: Any = None, clock: Callable[[], float] = time.perf_counter) -> None:
        if cuda is None:
            import torch

            cuda = torch.cuda
        self._sleep = getattr(cuda, "_sleep", None)
        self._clock = clock
        self.name = f"{name}+busy_ahead" if self._sleep is not None else name
        self.resolution_s = 0.5e-6  # documented resolution of cudaEventElapsedTime
        self._ahead, self._start, self._end = (cuda.Event(enable_timing=True) for _ in range(3))
        #: Spin cycles queued ahead of the start event.
        self.cycles = BUSY_CYCLES

    def time(self, fn: Callable[[], None]) -> float:
        for _ in range(BUSY_TRIES):
            seconds, host_s, busy_s = self._once(fn)
            if self._sleep is None or busy_s <= 0:
                break
            before = self.cycles
            self.cycles = int(self.cycles / busy_s * min(MAX_BUSY_S, max(MIN_BUSY_S, 2 * host_s)))
            if host_s < busy_s or self.cycles <= before:  # covered, or the spin cannot grow
                break
        return seconds

    def _once(self, fn: Callable[[], None]) -> tuple[float, float, float]:
        """(seconds between the events, host seconds from the spin to the call's return, spin seconds)."""
        t0 = self._clock()
        if self._sleep is not None:
            self._ahead.record()
            self._sleep(self.cycles)
        self._start.record()
        fn()
        host_s = self._clock() - t0
        self._end.record()
        self._end.synchronize()
        busy_s = float(self._ahead.elapsed_time(self._start)) * 1e-3 if self._sleep is not None else 0.0
        return float(self._start.elapsed_time(self._end)) * 1e-3, host_s, busy_s


class TorchGPUBackend(Backend):
    """GPUs that torch drives: ``flavor`` is "cuda" (NVIDIA) or "hip" (AMD ROCm)."""

    kind = "gpu"
    flavor = "cuda"
    vendor = "NVIDIA"
    #: The vendor's readers of its GPUs (``hwbench.sensors``): ``nvml`` or ``amdsmi``.
    readers = "nvml"
    event_name = "cuda_event"
    languages = ("triton", "llvmlite")

    # -- availability and description ---------------------------------------------------
    #: Caches of the tools this backend starts (``hwbench.core.caches.TOOLS``), chosen before they start.
    caches: tuple[str, ...] = ("triton", "cupy")

    def probe(self) -> Availability:
        notes = cache_notes(ensure_caches(self.caches))  # before torch, Triton or CuPy read their folders
        found = self._probe()
        return Availability(found.ok, "; ".join(n for n in [found.reason, *notes] if n)) if notes else found

    def _probe(self) -> Availability:
        if not present("torch"):
            return Availability(False, f"torch is not installed (pip install 'hwbench[{self.name}]')")
        try:
            import torch
        except Exception as exc:  # a broken install is a reason, not a crash
            return Availability(False, f"torch fails to import: {exc}")
        build = getattr(torch.version, self.flavor, None)
        if not build:
            other = "HIP" if torch.version.hip else "CUDA" if torch.version.cuda else "CPU-only"
            return Availability(
                False, f"torch {torch.__version__} is a {other} build, not a {self.flavor.upper()} build"
            )
        if not torch.cuda.is_available():
            return Availability(
                False, f"torch {torch.__version__} ({self.flavor} {build}) sees no GPU: no device or no driver"
            )
        if not present("triton"):
            return Availability(
                True, f"triton is not installed: Triton kernels are skipped (pip install 'hwbench[{self.name}]')"
            )
        old = triton_too_old(self.name)
        return Availability(True, f"{old}: Triton kernels are skipped" if old else "")

    def devices(self) -> list[DeviceInfo]:
        import torch

        found = []
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            found.append(
                DeviceInfo(
                    backend=self.name,
                    index=index,
                    name=props.name,
                    vendor=self.vendor,
                    kind="gpu",
                    arch=self.arch(index),
                    compute_units=props.multi_processor_count,
                    memory_bytes=props.total_memory,
                    driver=self.driver_version(),
                    runtime=f"{self.flavor} {getattr(torch.version, self.flavor)}",
                    libraries=self.libraries(),
                    extra=self.device_extra(index, props),
                )
            )
        return found

    def observers(self, device: Mapping[str, Any] | None) -> Observers:
        """The vendor's readers (:attr:`readers`), the device found by its index in torch's numbering
        (the vendor runtime's) where its description names no UUID or PCI bus id."""
        return Observers(self.readers, by_index=True)

    def arch(self, index: int) -> str:
        """Architecture name Triton and LLVM take: ``sm_90`` or ``gfx942`` (see :func:`arch_of`)."""
        import torch

        return arch_of(torch.cuda.get_device_properties(index), hip=bool(torch.version.hip))

    def device_extra(self, index: int, props: Any) -> dict[str, Any]:
        """Facts beyond DeviceInfo's fields (vendors add clocks and more): the host link (``host_link*``,
        NVML/amdsmi else the catalog) and the catalog's last-level cache (``llc_bytes``, ``llc_source``)."""
        extra = {
            "l2_bytes": getattr(props, "L2_cache_size", None),
            "warp_size": getattr(props, "warp_size", None),
            "shared_memory_per_block": getattr(props, "shared_memory_per_block", None),
            "multi_processor_count": props.multi_processor_count,
        }
        catalog = Catalog.load()
        extra.update(link_facts(read_link(self.readers, props), catalog.host_link(str(props.name))))
        llc = catalog.last_level_cache(str(props.name))
        if llc is not None:
            extra["llc_bytes"] = llc.bytes
            extra["llc_source"] = f"catalog {llc.key}: {llc.level} ({llc.source}, {llc.as_of})"
        return extra

    def driver_version(self) -> str:
        """Kernel driver version (vendor specific)."""
        return ""

    def libraries(self) -> dict[str, str]:
        """Versions of torch, Triton and the vendor libraries."""
        import torch

        found = {
            "torch": torch.__version__,
            "triton": package_version("triton"),
            "llvmlite": package_version("llvmlite"),
        }
        return {k: v for k, v in found.items() if v}

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "torch": package_version("torch"),
            "triton": package_version("triton"),
            "llvmlite": package_version("llvmlite"),
        }
        moved = [c for c in ensure_caches(self.caches) if c.note]
        if moved:  # hwbench chose these folders: the user's were not writable
            env["caches"] = {c.tool: c.as_json() for c in moved}
        if self.probe().ok:
            env.update(self.libraries())
            env["driver"] = self.driver_version()
        return env

    # -- what runs here -------------------------------------------------------------------
    def loader_missing(self) -> str:
        """Why llvmlite code objects cannot be loaded here (empty when they can)."""
        return ""

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        if impl.language == "triton" and not present("triton"):
            return Availability(False, f"triton is not installed (pip install 'hwbench[{self.name}]')")
        if impl.language == "triton" and (old := triton_too_old(self.name)):
            return Availability(False, old)
        if impl.language == "llvmlite":
            if not present("llvmlite"):
                return Availability(False, "llvmlite is not installed (pip install 'hwbench[cpu]')")
            why = self.loader_missing() or (f"no {dtype} work-group kernel (CPU only)" if is_integer(dtype) else "")
            if why:
                return Availability(False, why)
        why = lowp.unsupported(impl, dtype, device)
        return Availability(False, why) if why else super().supports(impl, dtype, device)

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        errors: list[type[BaseException]] = [KernelCompileError]
        if present("triton"):
            from triton.compiler.errors import CompilationError

            errors.append(CompilationError)
        return tuple(errors)

    def timer(self, device: DeviceInfo) -> Timer:
        import torch

        torch.cuda.set_device(device.index)
        return EventTimer(self.event_name)

    def case_flush(self, device: DeviceInfo, prepared: Prepared) -> Flush | None:
        return Flush(self.flush(device), f"writes {flush_bytes(device.extra) >> 20} MiB on the device")

    def flush(self, device: DeviceInfo) -> Callable[[], None]:
        import torch

        buffer = torch.empty(flush_bytes(device.extra) // 4, dtype=torch.int32, device=f"cuda:{device.index}")

        def flush() -> None:  # writes every line of a buffer twice the last-level cache: inputs and outputs go
            buffer.zero_()

        return flush

    # -- preparing cases ------------------------------------------------------------------
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
        """The case on the device: a native's call, a Triton kernel in ``config`` (a candidate
        ``hwbench tune`` times), else its tuned entry, else its derived configuration (the record's
        ``config.tuning`` says which), or an llvmlite kernel in its derived configuration."""
        import torch

        if config is not None and (impl.kind == "native" or impl.language != "triton"):
            raise ValueError(f"{impl.name} takes no configuration on {self.name}: only Triton kernels are tuned")
        torch.cuda.set_device(device.index)
        tensors, out = lowp.device_tensors(kernel, inputs, shape, dtype, device)  # fp8: scaled, with scales
        if impl.kind == "native":
            _set_fp32_precision(dtype)
            call, native_config = load_callable(impl.entry)(tensors, out, shape, dtype)
            return TorchPrepared(call, native_config, out=getattr(call, "out", out))
        source = importlib.import_module(impl.entry)
        if impl.language == "triton":
            call, run_config, compile_s = triton_case.prepare(source, impl, tensors, out, shape, dtype, device, config)
            return TorchPrepared(call, run_config, compile_s=compile_s, out=out)
        return self._llvm(source, tensors, out, shape, dtype, device)

    def tuning_space(
        self, impl: Implementation, kernel: Kernel, shape: Shape, dtype: str, device: DeviceInfo
    ) -> Space | None:
        """What ``hwbench tune`` tries for a Triton case: its ``triton.py``'s space for the device's
        architecture (the derived configuration first), as plain dicts; None for natives and
        llvmlite kernels (their work-group configurations are derived, not tuned, on GPUs)."""
        if impl.kind == "native" or impl.language != "triton":
            return None
        source = importlib.import_module(impl.entry) if present("triton") else None
        return triton_case.space(source, impl, shape, dtype, device)

    def _llvm(self, source: Any, t: dict[str, Any], out: Any, shape: Shape, dtype: str, device: DeviceInfo) -> Prepared:
        # The GPU lowering imports llvmlite, which is optional (supports() checked it is here).
        from hwbench.kernels.llvmir.gpu import target_for

        if not hasattr(source, "simt_config"):
            raise KernelCompileError(f"llvmlite {source.KERNEL}: no work-group (SIMT) kernel")
        target = target_for(device.arch, simt_limits(device))
        config = source.simt_config(target, dtype, shape)
        start = time.perf_counter()
        try:
            binary = target.lower(source.build(target, dtype, config), source.KERNEL)
        except Exception as exc:
            raise KernelCompileError(f"llvmlite {source.KERNEL} for {device.arch}: {exc}") from exc
        launch = self.load_binary(binary, device)
        compile_s = time.perf_counter() - start
        plan: Launch = source.launch(shape, dtype, target, config=config)
        blocks = tuple(plan.grid) + (1,) * (3 - len(plan.grid))
        threads = tuple(plan.local) + (1,) * (3 - len(plan.local))
        args: list[tuple[Any, str]] = [
            ((out if a.buffer == OUTPUT else t[a.buffer]), "ptr") if a.buffer else (a.value, a.ctype) for a in plan.args
        ]
        run_config = {**plan.config, "arch": device.arch, "loader": self.loader_name()}

        def call() -> Any:
            if plan.programs:
                launch(blocks, threads, args)
            return out

        return TorchPrepared(call, run_config, compile_s=compile_s, keepalive=binary, out=out)

    def loader_name(self) -> str:
        """Name of the library that loads llvmlite code objects."""
        return ""

    def load_binary(self, binary: Any, device: DeviceInfo) -> Callable[..., None]:
        """Load a compiled llvmlite module; returns ``launch(blocks, threads, [(value, kind), ...])``
        where ``kind`` is ``ptr`` (a tensor) or a scalar type (``i32``, ``i64``, ``f32``, ``f64``)."""
        raise NotImplementedError


def simt_limits(device: DeviceInfo) -> Any:
    """The work-group kernels' view of a GPU (``hwbench.kernels.llvmir.simt.DeviceLimits``), from
    what torch reports of it (shared memory per block, warp size) where it says."""
    # The SIMT interface imports llvmlite, which is optional (callers checked it is here).
    from hwbench.kernels.llvmir.simt import DeviceLimits

    extra = device.extra
    warp = int(extra.get("warp_size") or (64 if device.arch.startswith("gfx") else 32))
    shared = int(extra.get("shared_memory_per_block") or (64 * 1024 if warp == 64 else 48 * 1024))
    return DeviceLimits(kind="gpu", local_mem_bytes=shared, max_work_group=1024, subgroup=warp, lanes=1)


def _set_fp32_precision(dtype: str) -> None:
    """fp32 runs in IEEE single precision, tf32 on the tensor cores' TF32 path (torch's global switch)."""
    import torch

    tf32 = dtype == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
