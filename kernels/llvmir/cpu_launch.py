"""Host side of :class:`~.target.CPUTarget`: run a compiled kernel over a grid on all cores.

Workers are persistent Python threads that call the kernel through ``ctypes``
(which releases the GIL), woken through per-worker locks, so a launch costs
tens of microseconds. Workers pull program ids from an atomic counter inside
the generated ``<kernel>__dynamic`` entry, which balances uneven programs
(e.g. causal attention) without any Python in the loop.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import output_dtype, storage_dtype
from hwbench.core.launch import OUTPUT, Launch
from hwbench.kernels.llvmir import spin
from hwbench.kernels.llvmir.jit import CompiledModule, get_or_compile
from hwbench.kernels.llvmir.target import CPUTarget, host_target

_HEAD = [ctypes.c_int64] * 5 + [ctypes.c_void_p]


def default_threads() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


class WorkerPool:
    """``n`` persistent workers; worker 0 is the calling thread itself.

    Between launches each worker spins (:mod:`.spin`, in native code with the GIL released) for
    about :data:`~.spin.SPIN_S` before it sleeps on its lock, so a launch soon after the last one
    finds it awake; each launch bumps a generation counter the spin watches."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._job: Callable[[int], None] | None = None
        self._start = [threading.Lock() for _ in range(n)]
        self._done = [threading.Lock() for _ in range(n)]
        self._errors: list[BaseException] = []
        self._launch_lock = threading.Lock()
        self._generation = np.zeros(8, dtype=np.int64)  # its own cache line
        self._wait = spin.waiter() if n > 1 else None
        self._spins = spin.iterations_for() if n > 1 else 0
        for w in range(1, n):
            self._start[w].acquire()
            self._done[w].acquire()
            threading.Thread(target=self._loop, args=(w,), daemon=True, name=f"hwbench-llvm-{w}").start()

    def _loop(self, w: int) -> None:
        seen = 0
        while True:
            if self._wait is not None:  # awake for the next launch if it comes soon
                self._wait(self._generation.ctypes.data, seen, self._spins)
            self._start[w].acquire()
            seen = int(self._generation[0])
            try:
                self._job(w)  # type: ignore[misc]
            except BaseException as exc:  # surfaced by launch()
                self._errors.append(exc)
            self._done[w].release()

    def launch(self, job: Callable[[int], None], n: int | None = None) -> None:
        """Run ``job(w)`` for ``w in range(n)`` concurrently and wait for all of them."""
        n = self.n if n is None else min(n, self.n)
        with self._launch_lock:
            self._job = job
            self._generation[0] += 1
            for w in range(1, n):
                self._start[w].release()
            try:
                job(0)
            finally:
                for w in range(1, n):
                    self._done[w].acquire()
                self._job = None
            if self._errors:
                err, self._errors = self._errors[0], []
                raise err


#: The worker pools of this process, by size (forgotten in a forked child, whose threads did not survive).
_pools: dict[int, WorkerPool] = {}
_pools_lock = threading.Lock()


def _forget_pools_after_fork() -> None:
    global _pools_lock
    _pools.clear()  # the workers did not survive the fork
    _pools_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_after_fork)


def get_pool(n: int) -> WorkerPool:
    """The process-wide pool with ``n`` workers (created on first use, again after fork)."""
    with _pools_lock:
        if n not in _pools:
            _pools[n] = WorkerPool(n)
        return _pools[n]


def _aligned_buffer(nbytes: int, align: int = 64) -> tuple[np.ndarray, int]:
    raw = np.zeros(nbytes + align, dtype=np.uint8)
    addr = raw.ctypes.data
    return raw, addr + (-addr) % align


class PreparedKernel:
    """A compiled kernel bound to its inputs, output, grid and workspaces.

    ``run()`` executes the kernel once into ``output``: no allocation, no
    compilation and no copies happen in Python; everything is in the kernel.
    """

    def __init__(
        self,
        compiled: CompiledModule,
        kernel: str,
        args: Sequence[Any],
        argtypes: Sequence[Any],
        grid: Sequence[int],
        threads: int,
        output: np.ndarray,
        compile_s: float,
        config: dict[str, Any],
        keepalive: Sequence[Any] = (),
    ) -> None:
        self.output = output
        self.compile_s = compile_s
        g = (list(grid) + [1, 1, 1])[:3]
        self.total = int(g[0] * g[1] * g[2])
        self.threads = max(1, min(threads, self.total))
        self.config = dict(config, grid=tuple(g), threads=self.threads)
        ws_bytes = compiled.global_i64(f"{kernel}__workspace_bytes")
        self._buffers = [_aligned_buffer(ws_bytes) for _ in range(self.threads)]
        self._keepalive = (compiled, list(keepalive))
        self._counter = np.zeros(8, dtype=np.int64)  # own cache line: padded
        tail = list(argtypes)
        static = ctypes.CFUNCTYPE(None, *_HEAD, *tail)(compiled.function_address(kernel))
        dynamic = ctypes.CFUNCTYPE(None, ctypes.c_void_p, *_HEAD[1:], *tail)(
            compiled.function_address(f"{kernel}__dynamic")
        )
        self._static, self._dynamic = static, dynamic
        grid_args = (g[0], g[1], g[2])
        self._static_args = (0, self.total) + grid_args + (self._buffers[0][1],) + tuple(args)
        counter_ptr = self._counter.ctypes.data
        self._worker_args = [(counter_ptr, self.total) + grid_args + (buf[1],) + tuple(args) for buf in self._buffers]

    def memory(self) -> list[np.ndarray]:
        """The kernel's inputs (as bound: bf16 as its 16-bit patterns) and its output; not its
        workspaces, which are its own scratch, as a library's are."""
        return [a for a in self._keepalive[1] if isinstance(a, np.ndarray)] + [self.output]

    def _work(self, w: int) -> None:
        self._dynamic(*self._worker_args[w])

    def run(self) -> None:
        """Execute the kernel once (blocking) over the whole grid."""
        if self.total == 0:
            return
        if self.threads == 1:
            self._static(*self._static_args)
            return
        self._counter[0] = 0
        get_pool(self.threads).launch(self._work, self.threads)


def ptr(a: np.ndarray) -> int:
    """Address of a C-contiguous array's data."""
    if not a.flags.c_contiguous:
        raise ValueError("kernel operands must be C-contiguous")
    return a.ctypes.data


#: ctypes of each scalar type a binding may pass.
CTYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float, "f64": ctypes.c_double}


def device_array(array: np.ndarray, dtype: str) -> np.ndarray:
    """``array`` (host storage) in ``dtype``'s own storage: bf16 held in float32 as its upper 16
    bits (exact for bf16 values), other dtypes as they are."""
    if dtype != "bf16":
        return array
    return np.ascontiguousarray((np.ascontiguousarray(array, np.float32).view(np.uint32) >> 16).astype(np.uint16))


def prepare(
    build: Callable[..., ir.Module],
    inputs: Mapping[str, np.ndarray],
    dtype: str,
    plan: Launch,
    threads: int | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Compile ``build(target, dtype)`` for the host (once per process; ``build(target, dtype,
    plan.defines)`` where the plan has compile-time definitions, e.g. a register tile) and bind it
    to ``inputs`` as ``plan`` says: buffers by name, a zeroed output of ``plan.output``, scalars by
    type, the grid on at most ``threads`` workers (``plan.workers`` may lower it)."""
    target = target or host_target()
    defines = dict(plan.defines)
    key = (f"{build.__module__}.{build.__qualname__}", dtype, target.cache_key, repr(sorted(defines.items())))

    def make() -> ir.Module:
        return build(target, dtype, defines) if defines else build(target, dtype)

    compiled, fresh = get_or_compile(key, make, target.cpu_name, target.features)
    threads = min(threads or default_threads(), plan.workers or threads or default_threads())
    host = storage_dtype(dtype)
    for name in plan.buffers():
        if name != OUTPUT and inputs[name].dtype != host:
            raise ValueError(f"input {name} is {inputs[name].dtype}, not the {host} that {dtype} is held in")
    if plan.device_storage:
        inputs = {name: device_array(array, dtype) for name, array in inputs.items()}
    out = np.zeros(plan.output, dtype=output_dtype(dtype))
    args: list[Any] = []
    types: list[Any] = []
    for arg in plan.args:
        if arg.buffer is not None:
            args.append(ptr(out if arg.buffer == OUTPUT else inputs[arg.buffer]))
            types.append(ctypes.c_void_p)
        else:
            args.append(arg.value)
            types.append(CTYPES[arg.ctype])
    return PreparedKernel(
        compiled,
        plan.entry,
        args,
        types,
        plan.grid,
        threads,
        out,
        compiled.compile_s if fresh else 0.0,
        dict(plan.config),
        keepalive=tuple(inputs.values()),
    )
