"""A bounded spin-wait in native code, for the CPU worker pool's threads between launches.

A worker that sleeps on a lock between two launches of a kernel is woken by the OS when the next
launch comes, and on a virtual machine a halted virtual CPU can take longer to wake than a small
kernel runs (seen here: the second worker of a 0.4 ms GEMM started after the first had done every
program). BLAS libraries and OpenMP runtimes spin a while before they sleep; so does this pool:
``wait(generation, seen, iterations)`` polls a 64-bit counter with an atomic acquire load and the
CPU's spin-loop hint (``pause`` on x86) until it differs from ``seen`` or the iterations are spent,
with the GIL released (a ctypes call), and returns what it read last.
"""

from __future__ import annotations

import ctypes
import functools
import platform
import time
from collections.abc import Callable

import llvmlite.binding as llvm
from llvmlite import ir

from hwbench.kernels.llvmir.jit import CompiledModule, compile_module

#: How long a worker spins after a launch before it sleeps (OpenBLAS and GNU OpenMP spin for
#: about this long by default).
SPIN_S = 0.002

Wait = Callable[[int, int, int], int]


def _module() -> ir.Module:
    i64 = ir.IntType(64)
    module = ir.Module("hwbench_spin")
    module.triple = llvm.get_process_triple()
    fn = ir.Function(module, ir.FunctionType(i64, [i64.as_pointer(), i64, i64]), "wait")
    counter, seen, iterations = fn.args
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("loop")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    value = b.load_atomic(counter, "acquire", 8)
    if platform.machine().lower() in ("x86_64", "amd64"):
        pause = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        b.call(pause, [])
    nxt = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(nxt, loop)
    more = b.and_(b.icmp_signed("==", value, seen), b.icmp_signed("<", nxt, iterations))
    b.cbranch(more, loop, done)
    b.position_at_end(done)
    b.ret(value)
    return module


@functools.lru_cache(maxsize=1)
def _compiled() -> tuple[CompiledModule, Wait]:
    compiled = compile_module(_module())
    wait = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        compiled.function_address("wait")
    )
    return compiled, wait


def waiter() -> Wait:
    """The native ``wait(address, seen, iterations) -> value`` (compiled once per process)."""
    return _compiled()[1]


@functools.lru_cache(maxsize=1)
def iterations_for(seconds: float = SPIN_S) -> int:
    """Iterations of :func:`waiter`'s loop that take about ``seconds`` on this CPU (measured once)."""
    wait = waiter()
    counter = ctypes.c_int64(0)
    probe = 20_000
    start = time.perf_counter()
    wait(ctypes.addressof(counter), 0, probe)
    per_iteration = max((time.perf_counter() - start) / probe, 1e-10)
    return max(1, int(seconds / per_iteration))
