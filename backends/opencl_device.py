"""One OpenCL device as the opencl backend drives it: context, profiling queue, built programs,
buffers, and the launch of what a kernel's bindings describe.

Each launch returns an :class:`Enqueued` case whose ``run`` enqueues the work, waits, and
leaves its first and last events on the device's state, where :class:`EventTimer` reads
them: device time on the device's own clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

from hwbench.core import binary_cache
from hwbench.core.backend import Prepared, Timer
from hwbench.core.binary_cache import binary_key
from hwbench.core.dtypes import device_numpy
from hwbench.core.host import cpu_info
from hwbench.core.launch import OUTPUT, Arg, Launch

#: NumPy type of each scalar type a binding may pass.
INTEGERS = {"i32": np.int32, "i64": np.int64}
REALS = {"f32": np.float32, "f64": np.float64}
#: The element-type prelude every OpenCL C kernel is built behind.
PRELUDE = ("hwbench.kernels", "opencl_dtypes.cl")


class OpenCLBuildError(RuntimeError):
    """A program the OpenCL compiler rejected; the message is the build log's first error line."""


def first_error_line(log: str) -> str:
    """The first line of a build log that names an error (else its first non-empty line)."""
    lines = [re.sub(r"\S*?([\w-]+)\.cl:", "program.cl:", ln.strip()) for ln in log.splitlines() if ln.strip()]
    return next((ln for ln in lines if re.search(r"\berror\b", ln, re.I)), lines[0] if lines else "build failed")


def program_source(package: str, name: str) -> str:
    """A kernel's OpenCL C file behind the shared element-type prelude; ``#line 1`` keeps the
    build log's line numbers those of the kernel's own file."""
    prelude = files(PRELUDE[0]).joinpath(PRELUDE[1]).read_text()
    return f"{prelude}\n#line 1\n{files(package).joinpath(name).read_text()}"


class DeviceState:
    """Context, profiling queue, built programs and the latest run's events of one device."""

    def __init__(self, device: Any) -> None:
        import pyopencl as cl

        self.device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.programs: dict[Any, tuple[Any, float]] = {}
        #: (first, last) event of the latest run, for the timer.
        self.last_events: tuple[Any, Any] | None = None

    def program(self, key: Any, build: Callable[[], Any]) -> tuple[Any, float]:
        """A built program for ``key`` and the seconds its build took (0 when it was built before)."""
        if key in self.programs:
            return self.programs[key][0], 0.0
        t0 = time.perf_counter()
        self.programs[key] = (build(), time.perf_counter() - t0)
        return self.programs[key]

    def buffer(self, array: np.ndarray) -> Any:
        """A read-only device copy of ``array``."""
        import pyopencl as cl

        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        return cl.Buffer(self.context, flags, hostbuf=np.ascontiguousarray(array))

    def output(self, nbytes: int) -> Any:
        """An uninitialised read-write buffer of ``nbytes``."""
        import pyopencl as cl

        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(nbytes, 1))

    def zero(self, buffer: Any) -> Any:
        """Enqueue filling ``buffer`` with zero bytes; returns the event."""
        import pyopencl as cl

        return cl.enqueue_fill_buffer(self.queue, buffer, np.zeros(1, dtype=np.uint8), 0, buffer.size)


class Enqueued(Prepared):
    """Work on one device's queue: ``run`` enqueues, waits, and leaves its events for the timer."""

    def __init__(
        self,
        state: DeviceState,
        enqueue: Callable[[], tuple[Any, Any]],
        out: Any,
        shape: tuple[int, ...],
        dtype: str,
        config: Mapping[str, Any],
        compile_s: float,
        keepalive: Any = (),
    ) -> None:
        self._state, self._enqueue, self._out = state, enqueue, out
        self._shape, self._dtype, self._keep = shape, device_numpy(dtype), keepalive
        self.config, self.compile_s = dict(config), compile_s

    def run(self) -> None:
        first, last = self._enqueue()
        last.wait()
        self._state.last_events = (first, last)

    def buffers(self) -> list[Any]:
        """The device buffers the case reads and writes: its output and every buffer it holds."""
        import pyopencl as cl

        found: dict[int, Any] = {}

        def walk(value: Any, depth: int) -> None:
            if isinstance(value, cl.MemoryObject):
                found.setdefault(value.int_ptr, value)
            elif depth and isinstance(value, Mapping):
                for item in value.values():
                    walk(item, depth - 1)
            elif depth and isinstance(value, list | tuple):
                for item in value:
                    walk(item, depth - 1)

        walk([self._out, self._keep], 3)
        return [b for b in found.values() if b.size]

    def result(self) -> np.ndarray:
        import pyopencl as cl

        host = np.empty(self._shape, dtype=self._dtype)
        cl.enqueue_copy(self._state.queue, host, self._out)
        return host

    def clear_output(self) -> bool:
        import pyopencl as cl

        if self._dtype.kind != "f" or self._out.size % self._dtype.itemsize:
            return False
        cl.enqueue_fill_buffer(self._state.queue, self._out, np.full(1, np.nan, self._dtype), 0, self._out.size).wait()
        return True


class EventTimer(Timer):
    """Device time of the latest run: the last event's end minus the first event's start."""

    name = "opencl-profiling-events"

    def __init__(self, state: DeviceState, resolution_ns: float | None) -> None:
        self._state = state
        self.resolution_s = float(resolution_ns or 1) * 1e-9

    def time(self, fn: Callable[[], None]) -> float:
        fn()
        assert self._state.last_events is not None, "the timed call enqueued nothing"
        first, last = self._state.last_events
        return max(last.profile.end - first.profile.start, 0) * 1e-9


def _mapped(state: DeviceState, buffers: list[Any], use: Callable[[list[tuple[int, int]]], Any]) -> Any:
    """``use`` of the ``(address, bytes)`` of each buffer mapped for reading; unmapped after."""
    import pyopencl as cl

    maps: list[Any] = []
    try:
        for buffer in buffers:
            mapped = cl.enqueue_map_buffer(
                state.queue, buffer, cl.map_flags.READ, 0, (buffer.size,), np.dtype(np.uint8)
            )
            maps.append(mapped[0])
        return use([(a.ctypes.data, a.nbytes) for a in maps])
    finally:
        for array in maps:
            array.base.release(state.queue)
        state.queue.finish()


def maps_own_memory(state: DeviceState, buffers: list[Any]) -> bool:
    """Whether mapping ``buffers`` hands out their own memory, as CPU devices do: the device shares
    the host's memory (``CL_DEVICE_HOST_UNIFIED_MEMORY``) and two maps of each buffer give the same
    address. A runtime that maps through a copy would make a flush of the map evict only the copy."""
    try:
        if not state.device.host_unified_memory:
            return False
    except Exception:  # the query is deprecated in OpenCL 2 and later: a runtime may refuse it
        return False
    first = _mapped(state, buffers, list)
    return first == _mapped(state, buffers, list)


def evict_mapped(state: DeviceState, buffers: list[Any], evict: Callable[[list[tuple[int, int]]], None]) -> None:
    """Flush ``buffers`` of a CPU device from the host's caches: each is mapped (where
    :func:`maps_own_memory`, the map is the buffer's own memory), its lines evicted by ``evict``,
    then unmapped."""
    _mapped(state, buffers, evict)


def scalar(arg: Arg) -> Any:
    """A scalar argument as the NumPy scalar of its C type."""
    if arg.ctype in INTEGERS:
        return INTEGERS[arg.ctype](int(arg.value))
    return REALS[arg.ctype](float(arg.value))


def _bind(state: DeviceState, plan: Launch, inputs: Mapping[str, np.ndarray], dtype: str) -> tuple[Any, list[Any]]:
    """The output buffer and the argument list of ``plan`` (input buffers copied to the device)."""
    out = state.output(int(np.prod(plan.output)) * device_numpy(dtype).itemsize)
    args = [
        (out if a.buffer == OUTPUT else state.buffer(inputs[a.buffer])) if a.buffer else scalar(a) for a in plan.args
    ]
    return out, args


def launch(
    state: DeviceState,
    program: Any,
    plan: Launch,
    inputs: Mapping[str, np.ndarray],
    dtype: str,
    compile_s: float,
    head: tuple[Any, ...] = (),
    config: Mapping[str, Any] | None = None,
) -> Enqueued:
    """``plan``'s entry of the built ``program`` over its grid (``head`` goes before its arguments);
    a grid without programs fills the output with zeros instead."""
    import pyopencl as cl

    out, args = _bind(state, plan, inputs, dtype)
    kernel = cl.Kernel(program, plan.entry)
    kernel.set_args(*head, *args)
    local = tuple(plan.local) + (1,) * (len(plan.grid) - len(plan.local))

    def enqueue() -> tuple[Any, Any]:
        if not plan.programs:  # nothing to compute: the output is zeros
            event = state.zero(out)
        else:
            event = cl.enqueue_nd_range_kernel(state.queue, kernel, plan.global_size, local)
        return event, event

    return Enqueued(state, enqueue, out, plan.output, dtype, config or plan.config, compile_s, (args, head, kernel))


#: pyopencl saves the source of a program that failed to build in the temporary folder, and says where.
SAVED_SOURCE = re.compile(r"\n?\(source saved as (\S+\.cl)\)")


def drop_saved_source(message: str) -> str:
    """``message`` without pyopencl's "(source saved as FILE)", and FILE removed: the source is
    hwbench's own, and nothing of a run is left in the temporary folder."""
    for path in SAVED_SOURCE.findall(message):
        Path(path).unlink(missing_ok=True)
    return SAVED_SOURCE.sub("", message)


def build_opencl_c(
    state: DeviceState, package: str, name: str, dtype: str, defines: Mapping[str, int]
) -> tuple[Any, float]:
    """The OpenCL C program in ``package``'s file ``name`` for ``dtype`` with ``defines``."""
    import pyopencl as cl

    flags = [f"-DDTYPE_{dtype.upper()}"] + [f"-D{k}={v}" for k, v in sorted(defines.items())]
    kernel = package.removeprefix("hwbench.kernels.").split(".")[0]

    def build() -> Any:
        try:
            return cl.Program(state.context, program_source(package, name)).build(options=flags)
        except cl.Error as exc:
            text = drop_saved_source(str(exc))
            raise OpenCLBuildError(f"{kernel} {dtype} {' '.join(flags)}: {first_error_line(text)}") from None

    return state.program(("opencl-c", package, name, dtype, tuple(flags)), build)


def build_spirv(state: DeviceState, module: Any, kernel: str, dtype: str) -> tuple[Any, float]:
    """The program of a SPIR-V module (``hwbench.kernels.llvmir.simt.SIMTBinary``): the device's
    binary of it from the binary cache where this device and driver built it before, else built
    from the IL (and its binary kept)."""
    import pyopencl as cl

    device = state.device
    key = binary_key("opencl-program", device.platform.name, device.platform.version, device.name)
    key = binary_key(key, device.version, device.driver_version, module.binary)
    if device.type & cl.device_type.CPU:  # its binary is the host's machine code: name the host's CPU too
        host = cpu_info()
        key = binary_key(key, host["model"], host["machine"], *host["features"])

    def build() -> Any:
        cached = binary_cache.load("opencl", key)
        if cached is not None:
            try:
                return cl.Program(state.context, [device], [cached]).build()
            except cl.Error:  # a binary this driver no longer takes: build from the IL again
                pass
        try:
            program = cl.Program(state.context, module.binary).build()
        except cl.Error as exc:
            raise OpenCLBuildError(f"SPIR-V {kernel} {dtype}: {first_error_line(str(exc))}") from None
        binaries = program.get_info(cl.program_info.BINARIES)
        if binaries and binaries[0]:
            binary_cache.store("opencl", key, bytes(binaries[0]))
        return program

    return state.program(("spirv", kernel, dtype, module.target, hash(module.binary)), build)


def native(
    state: DeviceState,
    call: Callable[..., Any],
    inputs: Mapping[str, np.ndarray],
    output: tuple[int, ...],
    shape: Mapping[str, int],
    dtype: str,
) -> Enqueued:
    """A native (``fn(queue, buffers, out, shape, dtype) -> (enqueue, config)``) on this device."""
    buffers = {name: state.buffer(array) for name, array in inputs.items()}
    out = state.output(int(np.prod(output)) * device_numpy(dtype).itemsize)
    enqueue, config = call(state.queue, buffers, out, shape, dtype)
    return Enqueued(state, enqueue, out, output, dtype, config, 0.0, (buffers,))
