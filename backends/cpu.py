"""The host CPU: llvmlite kernels JIT-compiled for its vector width, beside NumPy/OpenBLAS and torch.

Always available (NumPy is a core dependency); the llvmlite kernels need llvmlite and
say so when it is missing.

Natives on ``cpu`` are called as ``fn(inputs, shape, dtype)`` with the host input arrays
and return ``(call, config)``: ``call()`` computes and returns the output (a NumPy array,
or a torch tensor on the host), ``config`` is what the record says of it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from hwbench.core.backend import Availability, Backend, DeviceInfo, Flush, Implementation, Peak, Prepared, present
from hwbench.core.binary_cache import binary_key
from hwbench.core.host import (
    blas_info,
    blas_label,
    cpu_info,
    largest_cache_bytes,
    package_version,
    total_memory,
)
from hwbench.core.kernel import Kernel, Shape
from hwbench.core.loading import load_callable
from hwbench.core.tuning import Space, TuningKey, key_for
from hwbench.core.tuning import chosen as tuning_choice
from hwbench.kernels.llvmir.evict import evict_method, held_regions, line_evictor

if TYPE_CHECKING:
    from hwbench.kernels.llvmir.target import CPUTarget

#: dtypes of the llvmlite kernels' CPU (SIMD program) lowering; the 16-bit ones are SIMT-only,
#: except where :data:`CPU_LLVM_MORE` names a kernel's own dot-product kernels.
CPU_LLVM_DTYPES = ("fp32", "fp64")
CPU_LLVM_MORE = {"gemm": ("int8", "bf16")}
#: dtypes a CPU run has by default only where the CPU has a measured peak for them (a dot-product
#: instruction to time, :mod:`.cpu_dot_peak`); elsewhere only when ``--dtype`` names them, their
#: records having no share of peak to judge.
LOW_PRECISION = ("int8", "bf16")


def cpu_llvm_dtypes(kernel: str) -> tuple[str, ...]:
    """The dtypes ``kernel``'s llvmlite source computes on the CPU."""
    return CPU_LLVM_DTYPES + CPU_LLVM_MORE.get(kernel, ())


class HostCall(Prepared):
    """A host library call; ``result`` converts what it returned (an array or a host tensor)."""

    def __init__(
        self, call: Callable[[], Any], config: Mapping[str, Any], inputs: Mapping[str, Any] | None = None
    ) -> None:
        self._call = call
        self._last: Any = None
        self._inputs = dict(inputs or {})
        self.config = dict(config)

    def memory(self) -> list[tuple[int, int]]:
        """The case's inputs and output as the call holds them: the inputs, the arrays and
        tensors the call closes over (its converted operands, its output) and what it returned
        last. Scratch a library keeps to itself (OpenBLAS's packing buffers) is not among them."""
        return held_regions([self._inputs, self._call, self._last])

    def run(self) -> None:
        self._last = self._call()

    def result(self) -> np.ndarray:
        value = self._last
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            # NumPy has no bf16: such a tensor is widened (exactly) to float32 first.
            return (value.float() if str(value.dtype) == "torch.bfloat16" else value).numpy()
        return np.asarray(value)

    def clear_output(self) -> bool:
        """Fill a floating host tensor the call returned with NaN (``result`` converts a bf16 one,
        so the pipeline cannot fill what it hands back); never one holding an input's memory."""
        value = self._last
        if isinstance(value, np.ndarray) or not hasattr(value, "data_ptr") or not value.is_floating_point():
            return False
        start = value.data_ptr()
        for array in self._inputs.values():
            base = np.asarray(array).__array_interface__["data"][0]
            if base <= start < base + np.asarray(array).nbytes:
                return False
        if getattr(value, "is_inference", lambda: False)():
            import torch  # the tensor is torch's: an inference tensor is written in inference mode only

            with torch.inference_mode():
                value.fill_(float("nan"))
        else:
            value.fill_(float("nan"))
        return True


class HostKernel(Prepared):
    """An llvmlite kernel bound to its inputs (see ``hwbench.kernels.llvmir.cpu_launch``)."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel
        self.compile_s = kernel.compile_s
        self.config = dict(kernel.config)

    def run(self) -> None:
        self._kernel.run()

    def result(self) -> np.ndarray:
        return np.asarray(self._kernel.output)

    def memory(self) -> list[tuple[int, int]]:
        """The kernel's inputs and output (its workspaces are its own scratch)."""
        return held_regions(self._kernel.memory())

    def clear_output(self) -> bool:
        output = np.asarray(self._kernel.output)
        if output.dtype.kind != "f":
            return False
        output.fill(np.nan)
        return True


def _tuning_key(
    impl: Implementation, shape: Shape, dtype: str, device: DeviceInfo, threads: int, features: str
) -> TuningKey:
    """A CPU case's tuning key: the device, llvmlite's and LLVM's versions, the cores the kernel
    runs on, any ISA restriction (``HWBENCH_CPU_ISA``) and the LLVM features the code is compiled
    with (two hosts of one model may expose different features: a hypervisor may hide AVX-512)."""
    software = {
        "llvmlite": package_version("llvmlite"),
        "threads": threads,
        "isa": os.environ.get("HWBENCH_CPU_ISA", ""),
        "features": binary_key(features),
    }
    return key_for(device, impl, dtype, shape, software, ("hwbench.kernels.llvmir",))


def _vendor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("vendor_id", "CPU implementer")):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "unknown"


#: How much more thoroughly a re-measurement runs: rounds and the length of each timed call.
REMEASURE = (3, 2.0)


def measured_peak(target: CPUTarget, thorough: bool = False) -> tuple[Peak, dict[str, Any]]:
    """The fp32/fp64 and dot-product peaks of ``target`` (a ``CPUTarget``) and the device facts
    they came from; ``thorough``: :data:`REMEASURE`. Needs llvmlite."""
    # The peak modules import llvmlite, which is optional: imported only once it is known to be there.
    from hwbench.backends.cpu_dot_peak import ROUNDS as DOT_ROUNDS
    from hwbench.backends.cpu_dot_peak import measure_dot_peaks  # needs llvmlite (see above)
    from hwbench.backends.cpu_peak import ROUNDS, measure_peak  # needs llvmlite (see above)

    scale, length = REMEASURE if thorough else (1, 1.0)
    measured = measure_peak(target, rounds=ROUNDS * scale, length=length)
    facts: dict[str, Any] = {
        "clock_ghz": measured.clock_ghz,
        "fma_units": measured.fma_units,
        "fma_per_cycle_measured": measured.fma_per_cycle_measured,
        "fma_chains": measured.chains,
        "fma_table_agrees": measured.table_agrees,
    }
    peaks, method = dict(measured.tflops), measured.method
    try:
        dots = measure_dot_peaks(target, measured.clock_ghz * 1e9, peaks["fp32"], DOT_ROUNDS * scale, length)
    except Exception as exc:  # the fp32 and fp64 peaks stand without them
        return Peak(peaks, f"{method}; int8 and bf16 peaks not measured: {exc}"), facts
    peaks.update(dots.tops)
    facts["dot_per_cycle"] = {name: {"measured": m, "counted": c} for name, (m, c) in dots.measured.items()}
    return Peak(peaks, f"{method}; {dots.method}" if dots.method else method), facts


class CPUBackend(Backend):
    """Kernels on the host's cores: llvmlite (portable) against NumPy/OpenBLAS and torch (native)."""

    name = "cpu"
    description = "host CPU: llvmlite JIT kernels vs NumPy/OpenBLAS and torch"
    kind = "cpu"
    languages = ("llvmlite",)
    lowering = {"llvmlite": "JIT for the host vector width, all cores"}

    def __init__(self) -> None:
        self._devices: list[DeviceInfo] | None = None
        self._flush_buffer: np.ndarray | None = None

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        if self._devices is None:
            self._devices = [self._describe()]
        return self._devices

    def _describe(self) -> DeviceInfo:
        info = cpu_info()
        arch, peak, extra = info["machine"], None, {"features": info["features"]}
        if present("llvmlite"):
            arch, peak, extra = self._llvm_facts(info, extra)
        return DeviceInfo(
            backend=self.name,
            index=0,
            name=f"{info['model']} ({info['cores']} cores)",
            vendor=_vendor(),
            kind="cpu",
            arch=arch,
            compute_units=info["cores"],
            memory_bytes=total_memory(),
            libraries={"blas": blas_label()},
            extra=extra,
            peak=peak,
        )

    def _llvm_facts(self, info: dict[str, Any], extra: dict[str, Any]) -> tuple[str, Peak | None, dict[str, Any]]:
        # These modules import llvmlite, which is optional: imported only once it is known to be there.
        from hwbench.kernels.llvmir.target import CPUTarget, host_target

        target, host = host_target(), CPUTarget()
        description = target.description
        extra = {
            **extra,
            "llvm_cpu": target.cpu_name,
            "vector_bits": description.vector_bytes * 8,
            "isa_level": description.isa_level,
            "cache_bytes": largest_cache_bytes(),
        }
        try:
            # A vendor library keeps its own ISA: the device's peak is the host's, whatever level is emulated.
            peak, facts = measured_peak(host)
        except Exception as exc:  # a peak we cannot measure is reported as missing, with why
            return host.cpu_name, None, {**extra, "peak_error": str(exc)}
        extra.update(facts)
        if target.features != host.features:
            extra["isa_level"] = f"{description.isa_level} (emulated; the host is {host.description.isa_level})"
            try:
                portable, portable_facts = measured_peak(target)
                level = description.isa_level
                extra["portable_peak"] = {
                    "tflops": dict(portable.tflops),
                    "method": portable.method,
                    "isa_level": level,
                    "vector_bits": description.vector_bytes * 8,
                    **{k: v for k, v in portable_facts.items() if k != "dot_per_cycle"},
                }
            except Exception as exc:  # the portable kernels are then gated against the host's peak
                extra["portable_peak_error"] = str(exc)
        return host.cpu_name, peak, extra

    def remeasure_peak(self, device: DeviceInfo) -> Peak | None:
        """The host's peak measured again, :data:`REMEASURE` times as thoroughly (more rounds,
        longer calls), for a vendor library's record above the first measurement."""
        if not present("llvmlite"):
            return None
        from hwbench.kernels.llvmir.target import CPUTarget  # needs llvmlite (see above)

        return measured_peak(CPUTarget(), thorough=True)[0]

    def implementations(self, kernel: str) -> list[Implementation]:
        """The kernel's implementations, its llvmlite sources narrowed to the SIMD kernels' dtypes;
        int8 and bf16 only on request where the CPU has no peak for them."""
        impls = [
            replace(i, dtypes=tuple(d for d in i.dtypes if d in cpu_llvm_dtypes(kernel)))
            if i.language == "llvmlite"
            else i
            for i in super().implementations(kernel)
        ]
        peak = self.devices()[0].peak
        unmeasured = [d for d in LOW_PRECISION if peak is None or d not in peak.tflops]
        return [
            replace(i, on_request=tuple(d for d in i.dtypes if d in unmeasured or d in i.on_request)) for i in impls
        ]

    def supports(self, impl: Implementation, dtype: str, device: DeviceInfo) -> Availability:
        if impl.language == "llvmlite" and not present("llvmlite"):
            return Availability(False, "llvmlite is not installed (pip install 'hwbench[cpu]')")
        computed = cpu_llvm_dtypes(impl.kernel)
        if impl.language == "llvmlite" and dtype not in computed:
            return Availability(False, f"the CPU's llvmlite SIMD kernels compute {', '.join(computed)}, not {dtype}")
        return super().supports(impl, dtype, device)

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
        """The case bound and compiled: a native's call, or the llvmlite kernel in ``config`` (a
        candidate ``hwbench tune`` times), else the tuned entry of the case's key in the tuning
        cache, else the configuration derived from the target; its record's ``config.tuning`` says which."""
        if impl.kind == "native":
            call, native_config = load_callable(impl.entry)(inputs, shape, dtype)
            return HostCall(call, native_config, inputs)
        # The CPU launcher and the kernel's source import llvmlite, which is optional.
        from hwbench.kernels.llvmir import cpu_launch
        from hwbench.kernels.llvmir.target import host_target  # needs llvmlite (see above)

        source = importlib.import_module(impl.entry)
        target, threads = host_target(), cpu_launch.default_threads()
        chosen, tuning = tuning_choice(_tuning_key(impl, shape, dtype, device, threads, target.features), config)
        try:
            plan = source.launch(shape, dtype, target, threads, **({} if chosen is None else {"config": chosen}))
        except ValueError as exc:  # a tuned entry the kernel no longer takes: the derived one runs
            if config is not None or chosen is None:
                raise
            plan, tuning = source.launch(shape, dtype, target, threads), {"source": "derived", "note": str(exc)}
        prepared = HostKernel(cpu_launch.prepare(source.build, inputs, dtype, plan, threads, target))
        prepared.config = {**prepared.config, "tuning": tuning}
        return prepared

    def tuning_space(
        self, impl: Implementation, kernel: Kernel, shape: Shape, dtype: str, device: DeviceInfo
    ) -> Space | None:
        """What ``hwbench tune`` tries for an llvmlite case: its source's ``tuning_space`` for the
        host target (the derived configuration first), under the case's key; None for a native."""
        if impl.kind == "native":
            return None
        # The kernel's source and the host target import llvmlite, which is optional.
        from hwbench.kernels.llvmir import cpu_launch
        from hwbench.kernels.llvmir.target import host_target  # needs llvmlite (see above)

        source = importlib.import_module(impl.entry)
        target = host_target()
        key = _tuning_key(impl, shape, dtype, device, cpu_launch.default_threads(), target.features)
        if not hasattr(source, "tuning_space"):
            return Space(key, [], f"{impl.name} has no tuning space on the CPU")
        found = source.tuning_space(target, dtype, shape)
        return Space(key, [dict(c) for c in found], "" if found else f"no tunable {impl.name} {dtype} kernel here")

    def compile_errors(self) -> tuple[type[BaseException], ...]:
        return (RuntimeError,) if present("llvmlite") else ()

    def case_flush(self, device: DeviceInfo, prepared: Prepared) -> Flush | None:
        """Every line of the case's inputs and output flushed from all cache levels (``clflushopt``),
        where the host can and the case says what they are; else :meth:`flush`. Each
        implementation's own scratch is left as its last call left it."""
        owned = prepared if isinstance(prepared, HostCall | HostKernel) else None
        regions = owned.memory() if owned is not None else []
        evictor = line_evictor() if regions and present("llvmlite") else None
        if owned is None or evictor is None:
            run = self.flush(device)
            size = self._flush_nbytes(device) / 2**20
            return Flush(run, f"reads and writes {size:.0f} MiB (twice the last-level cache)")
        # The regions are taken anew at each flush, from the objects the case holds then.
        return Flush(lambda: evictor(owned.memory()), evict_method(evictor, regions))

    @staticmethod
    def _flush_nbytes(device: DeviceInfo) -> int:
        return 2 * int(device.extra.get("cache_bytes") or largest_cache_bytes())

    def flush(self, device: DeviceInfo) -> Callable[[], None]:
        nbytes = self._flush_nbytes(device)
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
        if present("llvmlite"):
            import llvmlite.binding as llvm

            env["llvm"] = ".".join(map(str, llvm.llvm_version_info))
            env["llvm_host_cpu"] = llvm.get_host_cpu_name()
        return env
