"""The host CPU's int8 and bf16 peaks, measured as its fp32 peak is: a throughput loop of each
dot-product instruction the CPU has, timed against the clock :mod:`.cpu_peak` measured.

Instructions, each with the operations one of them does (a multiply-add counts two):

* ``vpdpbusd`` (AVX-512 VNNI, 512-bit): 16 lanes x 4 byte products = 128 int8 operations;
* ``vdpbf16ps`` (AVX-512 BF16, 512-bit): 16 lanes x 2 bf16 products = 64 flops;
* ``tdpbssd`` / ``tdpbf16ps`` (AMX): a 16 x 64-byte tile times a 64-byte x 16 one into a
  16 x 16 tile, 32768 int8 operations or 16384 bf16 flops.

A loop keeps many independent accumulators in registers, so it runs at the instructions'
throughput: vector instructions per cycle are rounded to whole units as FMAs are
(:func:`~.cpu_peak.fma_units`), tile instructions to whole cycles each. A dtype's peak is the
highest of its instructions' (AMX where the CPU has it and Linux grants it).
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from hwbench.backends.cpu_peak import fma_units
from hwbench.kernels.llvmir.jit import compile_module
from hwbench.kernels.llvmir.target import enabled_features

#: Independent accumulators of a vector loop (latency 4-5 cycles x up to 2 per cycle, with room).
VECTOR_CHAINS = 12
#: Independent accumulators of a tile loop (four of the eight tile registers; the operands take two).
TILE_CHAINS = 4
ROUNDS, PAUSE_S = 4, 0.005


@dataclass(frozen=True)
class Instruction:
    """One dot-product instruction and how it is looped."""

    name: str
    dtype: str
    intrinsic: str
    operations: int
    #: Features the target needs (LLVM's names).
    features: tuple[str, ...]
    tile: bool


INSTRUCTIONS = (
    Instruction("vpdpbusd", "int8", "llvm.x86.avx512.vpdpbusd.512", 128, ("avx512vnni", "avx512f"), False),
    Instruction("vdpbf16ps", "bf16", "llvm.x86.avx512bf16.dpbf16ps.512", 64, ("avx512bf16", "avx512f"), False),
    Instruction("tdpbssd", "int8", "llvm.x86.tdpbssd.internal", 32768, ("amx-tile", "amx-int8"), True),
    Instruction("tdpbf16ps", "bf16", "llvm.x86.tdpbf16ps.internal", 16384, ("amx-tile", "amx-bf16"), True),
)


@dataclass(frozen=True)
class DotPeaks:
    """Per-dtype peaks (10^12 operations per second) and what they came from."""

    tops: dict[str, float]
    #: Per instruction: instructions per cycle measured, and the whole number the peak counts.
    measured: dict[str, tuple[float, float]]
    method: str


def _loop_ir(declarations: str, entry: str, phis: str, body: str, done: str) -> str:
    """``void loop(i64 n, ptr io)``: ``entry``, then ``n`` rounds of ``body`` (its accumulators in
    ``phis``), then ``done`` (which keeps the results, so nothing is folded away)."""
    return f"""
{declarations}
define void @loop(i64 %n, ptr %io) {{
entry:
{entry}
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i2, %loop]
{phis}
{body}
  %i2 = add i64 %i, 1
  %more = icmp slt i64 %i2, %n
  br i1 %more, label %loop, label %done
done:
{done}
  ret void
}}"""


def _vector_ir(ins: Instruction) -> str:
    acc, op = ("<16 x i32>", "<64 x i8>") if ins.dtype == "int8" else ("<16 x float>", "<32 x bfloat>")
    add = "add" if ins.dtype == "int8" else "fadd"
    chains = range(VECTOR_CHAINS)
    entry = f"""  %a = load {acc}, ptr %io, align 1
  %px = getelementptr i8, ptr %io, i64 64
  %x = load {op}, ptr %px, align 1
  %py = getelementptr i8, ptr %io, i64 128
  %y = load {op}, ptr %py, align 1"""
    phis = "\n".join(f"  %c{i} = phi {acc} [%a, %entry], [%n{i}, %loop]" for i in chains)
    body = "\n".join(f"  %n{i} = call {acc} @{ins.intrinsic}({acc} %c{i}, {op} %x, {op} %y)" for i in chains)
    sums = [f"  %s0 = {add} {acc} %n0, zeroinitializer"]
    sums += [f"  %s{i} = {add} {acc} %s{i - 1}, %n{i}" for i in chains if i]
    done = "\n".join(sums) + f"\n  store {acc} %s{VECTOR_CHAINS - 1}, ptr %io, align 1"
    return _loop_ir(f"declare {acc} @{ins.intrinsic}({acc}, {op}, {op})", entry, phis, body, done)


def _tile_ir(ins: Instruction) -> str:
    chains = range(TILE_CHAINS)
    tile = "i16 16, i16 64"
    declarations = f"""declare x86_amx @llvm.x86.tilezero.internal(i16, i16)
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @{ins.intrinsic}(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)"""
    entry = "\n".join(
        [f"  %{v} = call x86_amx @llvm.x86.tileloadd64.internal({tile}, ptr %io, i64 64)" for v in ("x", "y")]
        + [f"  %z{i} = call x86_amx @llvm.x86.tilezero.internal({tile})" for i in chains]
    )
    phis = "\n".join(f"  %c{i} = phi x86_amx [%z{i}, %entry], [%n{i}, %loop]" for i in chains)
    body = "\n".join(
        f"  %n{i} = call x86_amx @{ins.intrinsic}({tile}, i16 64, x86_amx %c{i}, x86_amx %x, x86_amx %y)"
        for i in chains
    )
    done = "\n".join(
        f"  call void @llvm.x86.tilestored64.internal({tile}, ptr %io, i64 64, x86_amx %n{i})" for i in chains
    )
    return _loop_ir(declarations, entry, phis, body, done)


def _rate(ins: Instruction, features: str) -> float:
    """Best instructions per second of ``ins`` over a few rounds on this core."""
    import llvmlite.binding as llvm
    import numpy as np

    module = llvm.parse_assembly(_tile_ir(ins) if ins.tile else _vector_ir(ins))
    compiled = compile_module(module, features=features)
    loop: Callable[[int, int], None] = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(
        compiled.function_address("loop")
    )
    io = np.zeros(4096, dtype=np.uint8)  # operands: zero bits (no denormal or special-value slow paths)
    chains = TILE_CHAINS if ins.tile else VECTOR_CHAINS
    n = 20_000 if ins.tile else 200_000
    loop(n // 10, io.ctypes.data)
    best = 0.0
    for _ in range(ROUNDS):
        for _ in range(3):
            start = time.perf_counter()
            loop(n, io.ctypes.data)
            best = max(best, n * chains / (time.perf_counter() - start))
        time.sleep(PAUSE_S)
    return best


def available(ins: Instruction, features: str) -> bool:
    """Whether a target with LLVM ``features`` runs ``ins`` (AMX also needs Linux's grant)."""
    enabled = enabled_features(features)
    if not set(ins.features) <= enabled:
        return False
    if ins.tile:
        # The AMX kernel module imports llvmlite, as this one's callers already have.
        from hwbench.kernels.gemm.llvm_amx import amx_granted

        return amx_granted()
    return True


def measure_dot_peaks(cores: int, clock_hz: float, features: str) -> DotPeaks:
    """int8 and bf16 peaks of ``cores`` cores at ``clock_hz`` from the instructions ``features``
    has; dtypes without one are absent."""
    tops: dict[str, float] = {}
    measured: dict[str, tuple[float, float]] = {}
    parts: list[str] = []
    for ins in INSTRUCTIONS:
        if not available(ins, features):
            continue
        per_cycle = _rate(ins, features) / clock_hz
        if ins.tile:
            cycles = max(1, round(1 / per_cycle))
            counted = 1 / cycles
            how = f"1 per {cycles} cycles (measured {1 / per_cycle:.1f})"
        else:
            counted = float(fma_units(per_cycle))
            how = f"{counted:.0f}/cycle (measured {per_cycle:.2f})"
        value = cores * ins.operations * counted * clock_hz / 1e12
        measured[ins.name] = (per_cycle, counted)
        if value > tops.get(ins.dtype, 0.0):
            tops[ins.dtype] = value
        parts.append(f"{ins.dtype} {ins.name}: {cores} cores x {ins.operations} ops x {how} = {value:.3g} T")
    method = "; ".join(parts) + " (each dtype's peak: its fastest instruction)" if parts else ""
    return DotPeaks({d: v for d, v in tops.items() if math.isfinite(v)}, measured, method)
