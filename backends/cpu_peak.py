"""The host CPU's peak FLOPS from its core count, vector width, FMA units and a measured clock.

The clock is measured with a chain of dependent register-to-register integer adds (one
cycle each) written in inline assembly (not adds of an immediate: recent Intel cores fold
those at rename, and such a chain ran at an apparent 7.6 GHz on a 2.2 GHz Xeon); the FMA
units per core by timing independent vector FMAs against that clock. Both run on one core;
all cores are assumed to reach the same clock, which a thermally limited all-core load
may not.
"""

from __future__ import annotations

import math
import platform
import time
from dataclasses import dataclass

from hwbench.kernels.llvmir.jit import compile_module

ADDS_PER_ITERATION = 200
FMA_CHAINS = 16


@dataclass(frozen=True)
class CPUPeak:
    """Per-dtype peak and the figures it came from."""

    tflops: dict[str, float]
    clock_ghz: float
    fma_units: int
    fma_per_cycle_measured: float
    lanes_fp32: int
    cores: int
    method: str


def _add_chain_asm() -> str | None:
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "addq $2, $0\n" * ADDS_PER_ITERATION
    if machine in ("aarch64", "arm64"):
        return "add $0, $0, $2\n" * ADDS_PER_ITERATION
    return None


def _build(lanes: int, asm: str):  # -> llvmlite.ir.Module
    import llvmlite.binding as llvm
    from llvmlite import ir

    i64, f32 = ir.IntType(64), ir.FloatType()
    vec = ir.VectorType(f32, lanes)
    module = ir.Module("hwbench_cpu_peak")
    module.triple = llvm.get_process_triple()
    # i64 spin(i64 n): n iterations of ADDS_PER_ITERATION dependent adds.
    spin = ir.Function(module, ir.FunctionType(i64, [i64]), "spin")
    b = ir.IRBuilder(spin.append_basic_block("entry"))
    loop, done = spin.append_basic_block("loop"), spin.append_basic_block("done")
    b.branch(loop)
    b.position_at_end(loop)
    i, x = b.phi(i64), b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), spin.entry_basic_block)
    x.add_incoming(ir.Constant(i64, 0), spin.entry_basic_block)
    x2 = b.asm(ir.FunctionType(i64, [i64, i64]), asm, "=r,0,r", [x, ir.Constant(i64, 1)], side_effect=True)
    i2 = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i2, loop)
    x.add_incoming(x2, loop)
    b.cbranch(b.icmp_signed("<", i2, spin.args[0]), loop, done)
    b.position_at_end(done)
    b.ret(x2)
    # void fmas(i64 n, float* io): FMA_CHAINS independent accumulators, n rounds each.
    fmas = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, f32.as_pointer()]), "fmas")
    fma = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{lanes}f32")
    b = ir.IRBuilder(fmas.append_basic_block("entry"))
    n, io = fmas.args
    vptr = b.bitcast(io, vec.as_pointer())
    mul, add = b.load(vptr, align=4), b.load(b.gep(vptr, [ir.Constant(i64, 1)]), align=4)
    loop, done = fmas.append_basic_block("loop"), fmas.append_basic_block("done")
    entry = b.block
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    accs = []
    for _ in range(FMA_CHAINS):
        acc = b.phi(vec)
        acc.add_incoming(add, entry)
        accs.append(acc)
    nexts = [b.call(fma, [acc, mul, add]) for acc in accs]
    for acc, nxt in zip(accs, nexts, strict=False):
        acc.add_incoming(nxt, loop)
    i2 = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i2, loop)
    b.cbranch(b.icmp_signed("<", i2, n), loop, done)
    b.position_at_end(done)
    total = nexts[0]
    for nxt in nexts[1:]:
        total = b.fadd(total, nxt)
    b.store(total, vptr, align=4)
    b.ret_void()
    return module


#: Rounds of (clock, FMA) measurements, a few milliseconds each and a pause apart; the best of
#: each counts. Spreading them in time outlasts a neighbour's burst on a shared core.
ROUNDS, PAUSE_S = 8, 0.005
#: Contention only lowers the measured FMAs per cycle (and a low clock reading raises it a little):
#: a count this far above a whole number is the next one (1.33 measured on a core with two units).
UNIT_SLACK = 0.2


def _best_rate(fn, n: int, repeats: int = 5) -> float:
    """Best (highest) iterations per second over a few timed calls of ``fn(n)``."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        fn(n)
        best = max(best, n / (time.perf_counter() - start))
    return best


def fma_units(per_cycle: float) -> int:
    """FMA units per core from the vector FMAs per cycle measured: the next whole number once the
    count is :data:`UNIT_SLACK` above one (contention never makes a core look faster)."""
    return max(1, math.ceil(per_cycle - UNIT_SLACK))


def measure_peak(cores: int, lanes_fp32: int, vector_isa: str) -> CPUPeak:
    """Measure the clock and FMA throughput on this core and derive per-dtype peaks."""
    import ctypes

    import numpy as np

    asm = _add_chain_asm()
    if asm is None:
        raise RuntimeError(f"no clock measurement for {platform.machine()}")
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmparser()  # inline assembly needs the parser, not just the printer
    compiled = compile_module(_build(lanes_fp32, asm))
    spin = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compiled.function_address("spin"))
    fmas_fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(compiled.function_address("fmas"))
    io = np.full(2 * lanes_fp32, 0.5, dtype=np.float32)
    io[lanes_fp32:] = 1e-3
    spin(100_000)  # wake the core up to its boost clock
    # Best of many short calls spread in time: another process sharing the core slows some of them,
    # and a peak measured low would refuse honest figures as above it.
    clock_hz = fma_rate = 0.0
    for _ in range(ROUNDS):
        clock_hz = max(clock_hz, _best_rate(spin, 200_000, 3) * ADDS_PER_ITERATION)
        fma_rate = max(fma_rate, _best_rate(lambda n: fmas_fn(n, io.ctypes.data), 2_000_000, 3) * FMA_CHAINS)
        time.sleep(PAUSE_S)
    per_cycle = fma_rate / clock_hz
    units = fma_units(per_cycle)
    fp32 = cores * lanes_fp32 * 2 * units * clock_hz / 1e12
    method = (
        f"{cores} cores x {lanes_fp32} fp32 lanes ({vector_isa}) x 2 flop/FMA x {units} FMA/cycle "
        f"(measured {per_cycle:.2f} vector FMAs/cycle) x {clock_hz / 1e9:.2f} GHz (measured on one core "
        f"with a dependent-add chain); fp64 = fp32 / 2"
    )
    return CPUPeak({"fp32": fp32, "fp64": fp32 / 2}, clock_hz / 1e9, units, per_cycle, lanes_fp32, cores, method)
