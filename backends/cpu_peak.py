"""The host CPU's peak FLOPS from its core count, vector width, FMA units and a measured clock.

The clock is measured with a chain of dependent register-to-register integer adds (one
cycle each) written in inline assembly (not adds of an immediate: recent Intel cores fold
those at rename, and such a chain ran at an apparent 7.6 GHz on a 2.2 GHz Xeon); the FMA
units per core by timing independent vector FMAs against that clock. Both run on one core;
all cores are assumed to reach the same clock, which a thermally limited all-core load
may not.

The FMA loop is written for the target's description (:mod:`hwbench.kernels.llvmir.cpu_model`):
as many independent accumulators as cover latency x pipes, never more than the register file
holds beside the loop's operands (16 accumulators on AVX2's 16 registers spill, and measured half
the peak on a Zen 2). A target without FMA (x86-64-v2) runs separate multiplies and adds, a pair
counted as one FMA. The microarchitecture table (:mod:`~hwbench.kernels.llvmir.cpu_uarch`) is a
cross-check the method states, never the peak.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from hwbench.kernels.llvmir.cpu_model import CPUDescription
from hwbench.kernels.llvmir.jit import compile_module
from hwbench.kernels.llvmir.target import CPUTarget

ADDS_PER_ITERATION = 200
#: Vector registers a loop leaves free beside its operands and accumulators (the final sum, and
#: room for the register allocator).
SPARE_REGISTERS = 2
#: Accumulators per chain needed (latency x pipes): twice as many, where the registers allow, so
#: that a core slower than its table entry (or one the table does not know) is still covered.
CHAIN_MARGIN = 2
#: The microarchitecture table agrees with a measurement of at least this share of its pipes.
TABLE_AGREEMENT = 0.9


def accumulators(description: CPUDescription, operands: int) -> int:
    """Independent accumulators of a throughput loop with ``operands`` vector operands held in
    registers: :data:`CHAIN_MARGIN` x latency x pipes, at most what fits the register file."""
    fit = description.vector_registers - operands - SPARE_REGISTERS
    return max(1, min(fit, CHAIN_MARGIN * description.chains))


@dataclass(frozen=True)
class FMALoop:
    """How the fp32 throughput loop is written for one target."""

    triple: str
    lanes: int
    chains: int
    #: False where the target has no FMA: half the chains multiply, half add.
    fused: bool

    @classmethod
    def for_target(cls, triple: str, features: str, description: CPUDescription) -> FMALoop:
        """The loop for code compiled for ``triple`` with LLVM ``features``."""
        enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
        fused = not triple.startswith("x86_64") or "fma" in enabled
        return cls(triple, description.lanes("fp32"), accumulators(description, operands=2), fused)


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
    #: The loop's independent accumulators and the ISA level it was compiled for.
    chains: int = 0
    isa_level: str = ""
    #: Whether the measurement agrees with the microarchitecture table (None: the table does not know the core).
    table_agrees: bool | None = None


def add_chain_asm(triple: str) -> str | None:
    """The inline assembly of :data:`ADDS_PER_ITERATION` dependent adds for ``triple``'s ISA."""
    arch = triple.split("-")[0]
    if arch in ("x86_64", "amd64"):
        return "addq $2, $0\n" * ADDS_PER_ITERATION
    if arch in ("aarch64", "arm64"):
        return "add $0, $0, $2\n" * ADDS_PER_ITERATION
    return None


def _spin(module: Any, asm: str) -> None:
    """``i64 spin(i64 n)``: n iterations of :data:`ADDS_PER_ITERATION` dependent adds."""
    i64 = ir.IntType(64)
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


def build(loop: FMALoop, with_clock: bool = True) -> Any:  # -> llvmlite.ir.Module
    """The module of ``void fmas(i64 n, float* io)`` (``loop.chains`` accumulators, ``n`` rounds
    each, the multiplier and addend read from ``io``) and, ``with_clock``, of :func:`add_chain_asm`'s
    ``spin``; for ``loop.triple``, which need not be the host's."""
    i64, f32 = ir.IntType(64), ir.FloatType()
    vec = ir.VectorType(f32, loop.lanes)
    module = ir.Module("hwbench_cpu_peak")
    module.triple = loop.triple
    asm = add_chain_asm(loop.triple)
    if with_clock and asm is not None:
        _spin(module, asm)
    fmas = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, f32.as_pointer()]), "fmas")
    fma = ir.Function(module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fma.v{loop.lanes}f32")
    b = ir.IRBuilder(fmas.append_basic_block("entry"))
    n, io = fmas.args
    vptr = b.bitcast(io, vec.as_pointer())
    mul, add = b.load(vptr, align=4), b.load(b.gep(vptr, [ir.Constant(i64, 1)]), align=4)
    body, done = fmas.append_basic_block("loop"), fmas.append_basic_block("done")
    entry = b.block
    b.branch(body)
    b.position_at_end(body)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    accs = []
    for _ in range(loop.chains):
        acc = b.phi(vec)
        acc.add_incoming(add, entry)
        accs.append(acc)
    if loop.fused:
        nexts = [b.call(fma, [acc, mul, add]) for acc in accs]
    else:  # no FMA instruction: a multiply chain and an add chain alternate (the multiplier is 1)
        nexts = [b.fmul(acc, mul) if k % 2 == 0 else b.fadd(acc, add) for k, acc in enumerate(accs)]
    for acc, nxt in zip(accs, nexts, strict=True):
        acc.add_incoming(nxt, body)
    i2 = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i2, body)
    b.cbranch(b.icmp_signed("<", i2, n), body, done)
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


def _best_rate(fn: Callable[[int], Any], n: int, repeats: int = 5) -> float:
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


def table_check(description: CPUDescription, per_cycle: float) -> tuple[str, bool | None]:
    """What the microarchitecture table says of this core's FMA pipes at the description's vector
    width, and whether ``per_cycle`` (measured) agrees: at least :data:`TABLE_AGREEMENT` of them."""
    arch, bits = description.uarch, description.vector_bytes * 8
    if arch is None:
        why = description.sources.get("fma", f"not in the table ({description.identity})").split(":")[0]
        return f"table: no entry for this core ({why}); the measurement stands alone", None
    pipes = arch.pipes_for(bits)
    agrees = per_cycle >= TABLE_AGREEMENT * pipes
    verdict = "agrees" if agrees else f"disagrees (below {TABLE_AGREEMENT:g}x)"
    note = f"; {arch.note}" if arch.note else ""
    return (
        f"table: {arch.name} ({description.identity}), {arch.fma_pipes} x {arch.fma_bits}-bit FMA pipes = "
        f"{pipes:g} {bits}-bit FMAs/cycle{note}: the measurement {verdict}"
    ), agrees


def cores_phrase(description: CPUDescription) -> str:
    """How the cores are counted: as the OS schedules them, and whether SMT siblings share pipes."""
    smt = "SMT siblings share their core's pipes" if description.smt_shared else "no SMT siblings"
    return f"{description.cores} cores as the OS schedules them ({smt})"


def measure_peak(target: CPUTarget, rounds: int = ROUNDS, length: float = 1.0) -> CPUPeak:
    """Measure the clock and FMA throughput on this core for ``target`` (a
    :class:`~hwbench.kernels.llvmir.target.CPUTarget`, possibly restricted to an ISA level: its
    peak is the smaller CPU's) and derive per-dtype peaks; ``rounds`` and ``length`` (a factor on
    each timed call) make a re-measurement more thorough."""
    import ctypes

    import numpy as np

    description: CPUDescription = target.description
    if add_chain_asm(target.triple) is None:
        raise RuntimeError(f"no clock measurement for {target.triple}")
    llvm.initialize_native_target()
    llvm.initialize_native_asmparser()  # inline assembly needs the parser, not just the printer
    loop = FMALoop.for_target(target.triple, target.features, description)
    compiled = compile_module(build(loop), cpu_name=target.cpu_name, features=target.features)
    spin = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compiled.function_address("spin"))
    fmas_fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(compiled.function_address("fmas"))
    io = np.full(2 * loop.lanes, 0.5 if loop.fused else 1.0, dtype=np.float32)
    io[loop.lanes :] = 1e-3
    spin(100_000)  # wake the core up to its boost clock
    # Best of many short calls spread in time: another process sharing the core slows some of them,
    # and a peak measured low would refuse honest figures as above it.
    clock_hz = fma_rate = 0.0
    spins, calls = int(200_000 * length), int(2_000_000 * length)
    for _ in range(rounds):
        clock_hz = max(clock_hz, _best_rate(spin, spins, 3) * ADDS_PER_ITERATION)
        fma_rate = max(fma_rate, _best_rate(lambda n: fmas_fn(n, io.ctypes.data), calls, 3) * loop.chains)
        time.sleep(PAUSE_S)
    per_cycle = fma_rate / clock_hz / (1 if loop.fused else 2)  # a multiply and an add: one FMA's work
    units = fma_units(per_cycle)
    cores = description.cores
    fp32 = cores * loop.lanes * 2 * units * clock_hz / 1e12
    table, agrees = table_check(description, per_cycle)
    how = "FMA" if loop.fused else f"multiply-add pair (no FMA at {description.isa_level})"
    method = (
        f"{cores_phrase(description)} x {loop.lanes} fp32 lanes ({description.isa_level}, "
        f"{description.vector_bytes * 8}-bit) x 2 flop/{how} x {units} FMA/cycle (measured {per_cycle:.2f} "
        f"vector FMAs/cycle over {loop.chains} independent accumulators, best of {rounds} rounds) x "
        f"{clock_hz / 1e9:.2f} GHz (measured on one core with a dependent-add chain); fp64 = fp32 / 2; {table}"
    )
    return CPUPeak(
        {"fp32": fp32, "fp64": fp32 / 2},
        clock_hz / 1e9,
        units,
        per_cycle,
        loop.lanes,
        cores,
        method,
        chains=loop.chains,
        isa_level=description.isa_level,
        table_agrees=agrees,
    )
