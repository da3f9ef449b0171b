"""The host CPU's int8 and bf16 peaks, measured as its fp32 peak is: a throughput loop of each
dot-product instruction the target has, timed against the clock :mod:`.cpu_peak` measured.

Instructions, each with the operations one of them does (a multiply-add counts two):

* ``vpdpbusd`` (AVX-512 VNNI, 512-bit): 16 lanes x 4 byte products = 128 int8 operations; its
  256-bit AVX-VNNI form 64;
* ``vpmaddubsw`` (AVX2 256-bit, AVX-512BW 512-bit): u8 x s8 pairs summed into i16, 32 or 64
  multiply-adds = 64 or 128 operations: an AVX2 CPU without VNNI has an int8 peak;
* ``vpmaddwd`` (256/512-bit): i16 pairs summed into i32, 16 or 32 multiply-adds = 32 or 64;
* ``vdpbf16ps`` (AVX-512 BF16, 512-bit): 16 lanes x 2 bf16 products = 64 flops;
* ``tdpbssd`` / ``tdpbf16ps`` (AMX): a 16 x 64-byte tile times a 64-byte x 16 one into a
  16 x 16 tile, 32768 int8 operations or 16384 bf16 flops;
* ``sdot`` / ``bfdot`` (Arm dotprod / BF16, 128-bit): 32 int8 operations, 16 bf16 flops.

A vector loop keeps as many independent accumulators as the target's description allows
(:func:`~.cpu_peak.accumulators`), so it runs at the instruction's throughput: instructions per
cycle are rounded to whole units as FMAs are (:func:`~.cpu_peak.fma_units`), tile instructions to
whole cycles each. A dtype's peak is the highest of its instructions' (AMX where the CPU has it and
Linux grants it). Where the target has no bf16 dot product, bf16 GEMM widens to fp32: its peak is
the fp32 FMA peak, and the method says so.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from hwbench.backends.cpu_peak import accumulators, fma_units
from hwbench.kernels.llvmir.cpu_model import CPUDescription
from hwbench.kernels.llvmir.jit import compile_module
from hwbench.kernels.llvmir.target import CPUTarget, enabled_features

#: Independent accumulators of a tile loop: four of AMX's eight tile registers (the two operands
#: take two more), fixed by the architecture rather than by a core.
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
    tile: bool = False
    #: Vector types: the accumulator (or result) and each operand.
    acc: str = ""
    op: str = ""
    #: Whether the instruction adds into its accumulator (``vpdpbusd``); else its result is the
    #: next call's first operand (``vpmaddubsw``: a dependent chain all the same).
    accumulates: bool = True
    bits: int = 512
    arch: str = "x86_64"

    @property
    def mnemonic(self) -> str:
        """The instruction as the assembly names it."""
        return self.name.split("-")[0]


def _vector(
    name: str, dtype: str, intrinsic: str, ops: int, features: str, acc: str, op: str, accumulates: bool = True
) -> Instruction:
    """A vector instruction; ``name`` ends in its width where it has several (else 512-bit x86, or
    128-bit Arm for ``llvm.aarch64`` intrinsics)."""
    arm = intrinsic.startswith("llvm.aarch64")
    bits = int(name.rpartition("-")[2]) if "-" in name else (128 if arm else 512)
    arch = "aarch64" if arm else "x86_64"
    return Instruction(name, dtype, intrinsic, ops, tuple(features.split()), False, acc, op, accumulates, bits, arch)


X86, ARM = "llvm.x86.", "llvm.aarch64.neon."
INSTRUCTIONS = (
    _vector("vpdpbusd", "int8", X86 + "avx512.vpdpbusd.512", 128, "avx512vnni avx512f", "<16 x i32>", "<64 x i8>"),
    _vector("vpdpbusd-256", "int8", X86 + "avx512.vpdpbusd.256", 64, "avxvnni", "<8 x i32>", "<32 x i8>"),
    _vector("vpmaddubsw-256", "int8", X86 + "avx2.pmadd.ub.sw", 64, "avx2", "<16 x i16>", "<32 x i8>", False),
    _vector("vpmaddubsw-512", "int8", X86 + "avx512.pmaddubs.w.512", 128, "avx512bw", "<32 x i16>", "<64 x i8>", False),
    _vector("vpmaddwd-256", "int8", X86 + "avx2.pmadd.wd", 32, "avx2", "<8 x i32>", "<16 x i16>", False),
    _vector("vpmaddwd-512", "int8", X86 + "avx512.pmaddw.d.512", 64, "avx512bw", "<16 x i32>", "<32 x i16>", False),
    _vector(
        "vdpbf16ps", "bf16", X86 + "avx512bf16.dpbf16ps.512", 64, "avx512bf16 avx512f", "<16 x float>", "<32 x bfloat>"
    ),
    Instruction("tdpbssd", "int8", X86 + "tdpbssd.internal", 32768, ("amx-tile", "amx-int8"), True),
    Instruction("tdpbf16ps", "bf16", X86 + "tdpbf16ps.internal", 16384, ("amx-tile", "amx-bf16"), True),
    _vector("sdot", "int8", ARM + "sdot.v4i32.v16i8", 32, "dotprod", "<4 x i32>", "<16 x i8>"),
    _vector("bfdot", "bf16", ARM + "bfdot.v4f32.v8bf16", 16, "bf16", "<4 x float>", "<8 x bfloat>"),
)


@dataclass(frozen=True)
class DotPeaks:
    """Per-dtype peaks (10^12 operations per second) and what they came from."""

    tops: dict[str, float]
    #: Per instruction: instructions per cycle measured, and the whole number the peak counts.
    measured: dict[str, tuple[float, float]]
    method: str


def _loop_ir(declarations: str, entry: str, phis: str, body: str, done: str, triple: str) -> str:
    """``void loop(i64 n, ptr io)``: ``entry``, then ``n`` rounds of ``body`` (its accumulators in
    ``phis``), then ``done`` (which keeps the results, so nothing is folded away)."""
    return f"""target triple = "{triple}"
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


def _vector_ir(ins: Instruction, chains: int, triple: str) -> str:
    acc, op = ins.acc, ins.op
    add = "fadd" if "float" in acc else "add"
    entry = f"""  %a = load {acc}, ptr %io, align 1
  %px = getelementptr i8, ptr %io, i64 64
  %x = load {op}, ptr %px, align 1
  %py = getelementptr i8, ptr %io, i64 128
  %y = load {op}, ptr %py, align 1"""
    phis = "\n".join(f"  %c{i} = phi {acc} [%a, %entry], [%n{i}, %loop]" for i in range(chains))
    if ins.accumulates:
        declaration = f"declare {acc} @{ins.intrinsic}({acc}, {op}, {op})"
        calls = [f"  %n{i} = call {acc} @{ins.intrinsic}({acc} %c{i}, {op} %x, {op} %y)" for i in range(chains)]
    else:
        declaration = f"declare {acc} @{ins.intrinsic}({op}, {op})"
        calls = [
            f"  %b{i} = bitcast {acc} %c{i} to {op}\n  %n{i} = call {acc} @{ins.intrinsic}({op} %b{i}, {op} %y)"
            for i in range(chains)
        ]
    sums = [f"  %s0 = {add} {acc} %n0, zeroinitializer"]
    sums += [f"  %s{i} = {add} {acc} %s{i - 1}, %n{i}" for i in range(1, chains)]
    done = "\n".join(sums) + f"\n  store {acc} %s{chains - 1}, ptr %io, align 1"
    return _loop_ir(declaration, entry, phis, "\n".join(calls), done, triple)


def _tile_ir(ins: Instruction, triple: str) -> str:
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
    return _loop_ir(declarations, entry, phis, body, done, triple)


def chains_for(ins: Instruction, description: CPUDescription) -> int:
    """Independent accumulators of ``ins``'s loop on a target: the tile loop's fixed count, else as
    many as the description's register file holds beside the two operands."""
    return TILE_CHAINS if ins.tile else accumulators(description, operands=2)


def loop_ir(ins: Instruction, description: CPUDescription, triple: str) -> str:
    """The LLVM IR of ``ins``'s throughput loop for ``triple`` (which need not be the host's)."""
    return _tile_ir(ins, triple) if ins.tile else _vector_ir(ins, chains_for(ins, description), triple)


def _rate(ins: Instruction, target: CPUTarget, rounds: int, length: float) -> float:
    """Best instructions per second of ``ins`` over a few rounds on this core."""
    import llvmlite.binding as llvm
    import numpy as np

    module = llvm.parse_assembly(loop_ir(ins, target.description, target.triple))
    compiled = compile_module(module, cpu_name=target.cpu_name, features=target.features)
    loop: Callable[[int, int], None] = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(
        compiled.function_address("loop")
    )
    io = np.zeros(4096, dtype=np.uint8)  # operands: zero bits (no denormal or special-value slow paths)
    chains = chains_for(ins, target.description)
    n = int((20_000 if ins.tile else 200_000) * length)
    loop(n // 10, io.ctypes.data)
    best = 0.0
    for _ in range(rounds):
        for _ in range(3):
            start = time.perf_counter()
            loop(n, io.ctypes.data)
            best = max(best, n * chains / (time.perf_counter() - start))
        time.sleep(PAUSE_S)
    return best


def fits(ins: Instruction, features: str, description: CPUDescription | None = None) -> bool:
    """Whether code for LLVM ``features`` (and, where given, ``description``'s architecture and
    vector width) may hold ``ins``: what compiling its loop needs."""
    if not set(ins.features) <= enabled_features(features):
        return False
    if description is not None and not ins.tile:
        return description.arch == ins.arch and ins.bits <= description.vector_bytes * 8
    return True


def available(ins: Instruction, features: str, description: CPUDescription | None = None) -> bool:
    """Whether a target with LLVM ``features`` runs ``ins`` (:func:`fits`; AMX also needs Linux's grant)."""
    if not fits(ins, features, description):
        return False
    if ins.tile:
        # The AMX kernel module imports llvmlite, as this one's callers already have.
        from hwbench.kernels.gemm.cpu.amx import amx_granted

        return amx_granted()
    return True


def measure_dot_peaks(
    target: CPUTarget, clock_hz: float, fp32_tflops: float | None = None, rounds: int = ROUNDS, length: float = 1.0
) -> DotPeaks:
    """int8 and bf16 peaks of the description's cores at ``clock_hz`` from the instructions
    ``target`` has (compiled for its CPU and features, so a restricted ISA level times the smaller
    CPU's); int8 without one is absent, bf16 without one is ``fp32_tflops`` (widened to fp32)."""
    description = target.description
    cores = description.cores
    tops: dict[str, float] = {}
    measured: dict[str, tuple[float, float]] = {}
    parts: list[str] = []
    for ins in INSTRUCTIONS:
        if not available(ins, target.features, description):
            continue
        per_cycle = _rate(ins, target, rounds, length) / clock_hz
        if ins.tile:
            cycles = max(1, round(1 / per_cycle))
            counted = 1 / cycles
            how = f"1 per {cycles} cycles (measured {1 / per_cycle:.1f})"
        else:
            counted = float(fma_units(per_cycle))
            how = f"{counted:.0f}/cycle (measured {per_cycle:.2f}, {chains_for(ins, description)} accumulators)"
        value = cores * ins.operations * counted * clock_hz / 1e12
        measured[ins.name] = (per_cycle, counted)
        if value > tops.get(ins.dtype, 0.0):
            tops[ins.dtype] = value
        parts.append(f"{ins.dtype} {ins.name}: {cores} cores x {ins.operations} ops x {how} = {value:.3g} T")
    method = "; ".join(parts) + " (each dtype's peak: its fastest instruction)" if parts else ""
    if "bf16" not in tops and fp32_tflops:
        tops["bf16"] = fp32_tflops
        widened = (
            f"bf16: no bf16 dot product at {description.isa_level}, so bf16 GEMM widens to fp32: the fp32 FMA peak"
        )
        method = f"{method}; {widened}" if method else widened
    return DotPeaks({d: v for d, v in tops.items() if math.isfinite(v)}, measured, method)
