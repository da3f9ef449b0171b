"""Peaks measured right on any core (issue 28): the throughput loops of backends/cpu_peak.py and
backends/cpu_dot_peak.py take their accumulators from the target's description and keep them in
registers at every x86-64 level the host has and on aarch64 (NEON, SVE; cross-compiled), the
method cross-checks the microarchitecture table, a vendor library above the peak has it re-measured
before any record is refused, and an emulated ISA level gates the portable kernels on its own peak.

Machine code is inspected after the O3 pipeline the JIT runs: a loop body (a label and the branch
back to it) with a load or store relative to the stack pointer spills."""

from __future__ import annotations

import dataclasses
import platform
import re
from typing import Any

import needs
import pytest

from hwbench.core.errors import UserError
from hwbench.decide.catalog import Catalog
from hwbench.results.derive import add_metrics

needs.module("llvmlite")
import llvmlite.binding as llvm  # noqa: E402
from machine_code import stack_traffic  # noqa: E402
from synthetic_results import device, document, record  # noqa: E402

from hwbench.backends import cpu_dot_peak, cpu_peak  # noqa: E402
from hwbench.kernels.llvmir import cpu_model, cpu_uarch  # noqa: E402
from hwbench.kernels.llvmir.jit import assembly as jit_assembly  # noqa: E402
from hwbench.kernels.llvmir.target import CPUTarget  # noqa: E402
from hwbench.run.peaks import recheck_peaks  # noqa: E402

X86 = platform.machine().lower() in ("x86_64", "amd64")
LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")
ARM_TRIPLE = "aarch64-unknown-linux-gnu"
ARM_LEVELS = {"neon": "+neon,+fp-armv8,+dotprod,+bf16", "sve": "+neon,+fp-armv8,+sve,+sve2,+dotprod,+bf16"}
LABEL = re.compile(r"^(\.LBB\w+):")


def _function(asm: str, name: str) -> list[str]:
    """The assembly lines of function ``name``."""
    lines = asm.splitlines()
    start = lines.index(f"{name}:")
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(".Lfunc_end"))
    return lines[start:end]


def _loop_bodies(lines: list[str]) -> list[list[str]]:
    """Each loop: the lines from a label to a branch back to it."""
    seen: dict[str, int] = {}
    bodies = []
    for number, line in enumerate(lines):
        label = LABEL.match(line)
        if label:
            seen[label.group(1)] = number
            continue
        target = line.split()[-1] if line.strip() else ""
        if target in seen and not line.lstrip().startswith("."):
            bodies.append(lines[seen[target] : number + 1])
    return bodies


def _stack_traffic(bodies: list[list[str]], arch: str) -> list[str]:
    return [line for body in bodies for line in stack_traffic(body)]


def _host_level(level: str) -> CPUTarget:
    if not X86:
        pytest.skip(f"{level} is an x86-64 level; this host is {platform.machine()}")
    try:
        return CPUTarget(isa_level=level)
    except UserError as exc:
        pytest.skip(f"this host cannot run {level}: {exc}")


def _check_loop(asm: str, name: str, mnemonic: str, chains: int, arch: str) -> None:
    bodies = _loop_bodies(_function(asm, name))
    assert bodies, f"no loop found in {name}"
    assert _stack_traffic(bodies, arch) == [], f"{name} spills inside its loop"
    assert max(sum(mnemonic in line for line in body) for body in bodies) >= chains  # none folded away


def _dot_loops(features: str, description: cpu_model.CPUDescription) -> list[cpu_dot_peak.Instruction]:
    return [i for i in cpu_dot_peak.INSTRUCTIONS if cpu_dot_peak.fits(i, features, description)]


@pytest.mark.parametrize("level", LEVELS)
def test_every_peak_loop_keeps_its_accumulators_in_registers(level: str) -> None:
    target = _host_level(level)
    description = target.description
    loop = cpu_peak.FMALoop.for_target(target.triple, target.features, description)
    assert loop.chains + 2 <= description.vector_registers  # the accumulators and both operands fit
    assert loop.chains >= min(description.chains, description.vector_registers - 4)  # latency x pipes covered
    asm = jit_assembly(cpu_peak.build(loop), target.cpu_name, target.features)
    _check_loop(
        asm, "fmas", "vfmadd" if loop.fused else "mulps", loop.chains if loop.fused else loop.chains // 2, "x86_64"
    )
    for ins in _dot_loops(target.features, description):
        module = llvm.parse_assembly(cpu_dot_peak.loop_ir(ins, description, target.triple))
        asm = jit_assembly(module, target.cpu_name, target.features)
        _check_loop(asm, "loop", ins.mnemonic, cpu_dot_peak.chains_for(ins, description), "x86_64")
    if level == "x86-64-v3":
        assert {"vpmaddubsw-256", "vpmaddwd-256"} <= {i.name for i in _dot_loops(target.features, description)}


def test_the_old_sixteen_chain_loop_spills_on_avx2() -> None:
    target = _host_level("x86-64-v3")
    old = cpu_peak.FMALoop(target.triple, 8, 16, True)  # 16 accumulators + 2 operands on 16 registers
    asm = jit_assembly(cpu_peak.build(old), target.cpu_name, target.features)
    assert _stack_traffic(_loop_bodies(_function(asm, "fmas")), "x86_64")  # the check sees a spill


@pytest.mark.parametrize("level", list(ARM_LEVELS))
@pytest.mark.parametrize("part", [(0x41, 0xD4F), (0x41, 0xFFF)], ids=["neoverse-v2", "unknown-core"])
def test_aarch64_loops_cross_compile_without_spills(level: str, part: tuple[int, int]) -> None:
    llvm.initialize_all_targets()
    try:
        llvm.Target.from_triple(ARM_TRIPLE)
    except RuntimeError as exc:
        pytest.skip(f"this llvmlite has no AArch64 target: {exc}")
    features = ARM_LEVELS[level]
    identity = cpu_uarch.Identity("ARM", None, None, part)
    caches = cpu_model.Caches(64 * 2**10, 2**20, 32 * 2**20, "test")
    description = cpu_model.describe(ARM_TRIPLE, features, cores=4, caches=caches, identity=identity)
    assert description.isa_level == level and description.vector_registers == 32
    loop = cpu_peak.FMALoop.for_target(ARM_TRIPLE, features, description)
    # No inline-asm clock: llvmlite has only the host's assembly parser.
    asm = jit_assembly(cpu_peak.build(loop, with_clock=False), "neoverse-v2", features)
    _check_loop(asm, "fmas", "fmla", loop.chains, "aarch64")
    loops = _dot_loops(features, description)
    assert {i.name for i in loops} == {"sdot", "bfdot"}
    for ins in loops:
        asm = jit_assembly(
            llvm.parse_assembly(cpu_dot_peak.loop_ir(ins, description, ARM_TRIPLE)), "neoverse-v2", features
        )
        _check_loop(asm, "loop", ins.mnemonic, cpu_dot_peak.chains_for(ins, description), "aarch64")


def _description(registers: int, arch: cpu_uarch.Microarchitecture | None, bits: int = 256) -> cpu_model.CPUDescription:
    caches = cpu_model.Caches(32 * 2**10, 2**20, 16 * 2**20, "test")
    identity = cpu_uarch.Identity("AuthenticAMD", 23, 49)
    base = cpu_model.describe("x86_64-unknown-linux-gnu", "+avx2,+fma", caches=caches, cores=2, identity=identity)
    latency, pipes = (arch.fma_latency, arch.pipes_for(bits)) if arch else (5, 2.0)
    return dataclasses.replace(
        base, vector_registers=registers, vector_bytes=bits // 8, uarch=arch, fma_latency=latency, fma_pipes=pipes
    )


def test_accumulators_cover_latency_times_pipes_within_the_register_file() -> None:
    zen2 = cpu_uarch.lookup(cpu_uarch.Identity("AuthenticAMD", 23, 49))
    assert zen2 is not None and zen2.name == "Zen 2"
    avx2 = _description(16, zen2)
    assert cpu_peak.accumulators(avx2, operands=2) == 12  # not 16: 16 + 2 operands spill on 16 registers
    assert cpu_peak.accumulators(avx2, operands=2) >= avx2.chains == 10
    avx512 = _description(32, None, 512)
    assert 16 <= cpu_peak.accumulators(avx512, operands=2) <= 28


def test_the_method_states_the_tables_pipes_and_whether_the_measurement_agrees() -> None:
    zen2 = cpu_uarch.lookup(cpu_uarch.Identity("AuthenticAMD", 23, 49))
    assert zen2 is not None
    described = _description(16, zen2)
    text, agrees = cpu_peak.table_check(described, 1.99)
    assert agrees is True and "Zen 2 (AuthenticAMD family 23 model 49), 2 x 256-bit FMA pipes" in text
    assert "2 256-bit FMAs/cycle" in text and "agrees" in text
    text, agrees = cpu_peak.table_check(described, 1.14)  # the spilling 16-chain loop's figure
    assert agrees is False and "disagrees (below 0.9x)" in text
    unknown = dataclasses.replace(described, uarch=None, sources={"fma": "the table's Rocket Lake lacks AMX: ..."})
    text, agrees = cpu_peak.table_check(unknown, 1.99)
    assert agrees is None and "no entry for this core (the table's Rocket Lake lacks AMX)" in text
    assert "as the OS schedules them" in cpu_peak.cores_phrase(described)


def test_dot_product_instructions_count_each_multiply_add_as_two_operations() -> None:
    ops = {i.name: i.operations for i in cpu_dot_peak.INSTRUCTIONS}
    assert ops["vpmaddubsw-256"] == 64 and ops["vpmaddubsw-512"] == 128  # 32 / 64 u8 x s8 multiply-adds
    assert ops["vpmaddwd-256"] == 32 and ops["vpmaddwd-512"] == 64  # 16 / 32 i16 multiply-adds
    assert ops["vpdpbusd-256"] == 64 and ops["vpdpbusd"] == 128
    vnni = next(i for i in cpu_dot_peak.INSTRUCTIONS if i.name == "vpdpbusd-256")
    assert vnni.features == ("avxvnni",) and vnni.bits == 256


@pytest.mark.parametrize("level", LEVELS)
def test_the_peak_measured_at_each_level(level: str) -> None:
    target = _host_level(level)
    peak = cpu_peak.measure_peak(target, rounds=2)
    description = target.description
    print(
        f"{level}: {peak.fma_per_cycle_measured:.2f} FMAs/cycle, {peak.chains} accumulators, {peak.clock_ghz:.2f} GHz"
    )
    assert peak.isa_level == level and peak.lanes_fp32 == description.lanes("fp32")
    assert peak.fma_units == cpu_peak.fma_units(peak.fma_per_cycle_measured)
    if description.uarch is not None:
        expected = description.uarch.pipes_for(description.vector_bytes * 8)
        assert peak.fma_units >= 0.9 * expected and peak.table_agrees is not None
    else:
        assert peak.fma_per_cycle_measured > 0 and peak.table_agrees is None
    assert "as the OS schedules them" in peak.method and "table:" in peak.method
    assert peak.tflops["fp32"] == pytest.approx(
        description.cores * peak.lanes_fp32 * 2 * peak.fma_units * peak.clock_ghz * 1e9 / 1e12
    )
    dots = cpu_dot_peak.measure_dot_peaks(target, peak.clock_ghz * 1e9, peak.tflops["fp32"], rounds=1)
    if "avx2" in target.features.split(",+") and level != "x86-64-v2":
        assert "int8" in dots.tops  # vpmaddubsw: an AVX2 CPU without VNNI has an int8 peak
    if not any(i.dtype == "bf16" for i in _dot_loops(target.features, description)):
        assert dots.tops["bf16"] == peak.tflops["fp32"] and "widens to fp32" in dots.method


SHAPE = {"M": 64, "N": 64, "K": 64}  # 524,288 flops: 0.52 TFLOPS in a microsecond


class _Worker:
    """Answers ``remeasure_peak`` with a chosen peak and counts the requests."""

    def __init__(self, fp32: float) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fp32 = fp32

    def request(self, message: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        self.requests.append(message)
        return {"peak": {"tflops": {"fp32": self.fp32}, "method": "a thorough FMA loop", "mem_gbps": None}}


def _doc(*records: dict[str, Any], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    cpu = device("cpu", "Test CPU", "cpu", peak={"fp32": 0.1, "fp64": 0.05})
    cpu["extra"] = dict(extra or {})
    return document(list(records), [cpu])


def _native(median: float, impl: str = "numpy_gemm") -> dict[str, Any]:
    return record("gemm", impl, "fp32", SHAPE, median, impl_kind="native")


def test_a_native_above_the_peak_triggers_one_remeasure_and_names_both_possibilities() -> None:
    doc = _doc(_native(1e-6), _native(2e-6, "torch_gemm"), record("gemm", "llvm_gemm", "fp32", SHAPE, 1e-5))
    worker = _Worker(fp32=0.2)  # the re-measurement finds the peak no higher than 0.52 TFLOPS
    assert recheck_peaks(doc, doc["records"], worker, 60) == 1
    assert worker.requests == [{"op": "remeasure_peak", "backend": "cpu", "index": 0}]  # once per device
    cpu = doc["backends"][0]["devices"][0]
    assert cpu["peak"]["tflops"] == {"fp32": 0.2, "fp64": 0.05}  # fp64 not re-measured: its first figure
    assert cpu["peak"]["method"].startswith(
        "re-measured (the higher of two measurements kept), as numpy_gemm (gemm fp32) ran at 0.5243 TFLOPS"
    )
    assert cpu["extra"]["peak_remeasured"]["first_tflops"] == {"fp32": 0.1, "fp64": 0.05}
    add_metrics(doc, Catalog.load())
    native, torch, portable = doc["records"]
    assert native["status"] == torch["status"] == "implausible"
    assert "2.62x the device's fp32 peak of 0.2 TFLOPS (re-measured" in native["reason"]
    assert (
        "either the device's peak is wrong (it was re-measured before refusing and still below it" in native["reason"]
    )
    assert "or the library's timed calls did not do the work counted" in native["reason"]
    assert portable["status"] == "ok" and portable["metrics"]["pct_peak"] == pytest.approx(100 * 0.0524288 / 0.2)


def test_a_lower_remeasurement_keeps_the_first_figure() -> None:
    doc = _doc(_native(1e-6))
    recheck_peaks(doc, doc["records"], _Worker(fp32=0.05), 60)  # a neighbour's load during the second
    assert doc["backends"][0]["devices"][0]["peak"]["tflops"]["fp32"] == 0.1


def test_a_native_the_remeasured_peak_covers_is_ok() -> None:
    doc = _doc(_native(1e-6))
    recheck_peaks(doc, doc["records"], _Worker(fp32=0.6), 60)
    add_metrics(doc, Catalog.load())
    assert doc["records"][0]["status"] == "ok" and doc["records"][0]["metrics"]["peak_tflops"] == 0.6


def test_a_portable_kernel_above_the_peak_is_not_remeasured_and_is_implausible() -> None:
    doc = _doc(record("gemm", "llvm_gemm", "fp32", SHAPE, 1e-6), _native(1e-3))
    worker = _Worker(fp32=10.0)
    assert recheck_peaks(doc, doc["records"], worker, 60) == 0 and worker.requests == []
    add_metrics(doc, Catalog.load())
    portable = doc["records"][0]
    assert portable["status"] == "implausible" and "5.24x the device's fp32 peak of 0.1 TFLOPS" in portable["reason"]
    assert "either" not in portable["reason"] and "did not do the work counted" in portable["reason"]


def test_an_emulated_level_gates_portable_kernels_on_its_peak_and_natives_on_the_hosts() -> None:
    portable_peak = {"tflops": {"fp32": 0.02}, "method": "8 fp32 lanes (x86-64-v3)", "isa_level": "x86-64-v3"}
    at_004 = 524288 / 0.04e12  # 0.04 TFLOPS: under the host's 0.1, twice the emulated level's 0.02
    doc = _doc(
        record("gemm", "llvm_gemm", "fp32", SHAPE, at_004), _native(at_004), extra={"portable_peak": portable_peak}
    )
    add_metrics(doc, Catalog.load())
    portable, native = doc["records"]
    assert (
        portable["status"] == "implausible"
        and "peak of 0.02 TFLOPS (the portable kernels' peak at x86-64-v3" in portable["reason"]
    )
    assert native["status"] == "ok" and native["metrics"]["peak_tflops"] == 0.1


def test_the_cpu_device_describes_an_emulated_level(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.backends.cpu import CPUBackend

    host = CPUTarget()
    below = {"x86-64-v4": "x86-64-v3", "x86-64-v3": "x86-64-v2"}.get(host.description.isa_level)
    if not X86 or below is None:
        pytest.skip(f"no x86-64 level below this host's ({host.description.isa_level}) to emulate")
    monkeypatch.setenv(cpu_model.ISA_ENV, below)
    cpu = CPUBackend().devices()[0]
    assert cpu.peak is not None and cpu.extra["isa_level"].startswith(f"{below} (emulated")
    portable = cpu.extra["portable_peak"]
    assert portable["isa_level"] == below and f"({below}," in portable["method"]
    assert cpu.peak.tflops["fp32"] > 1.5 * portable["tflops"]["fp32"]  # twice the lanes on the host


def test_the_worker_remeasures_the_cpu_peak() -> None:
    from hwbench.run.worker import Worker

    with Worker() as worker:
        answer = worker.request({"op": "remeasure_peak", "backend": "cpu", "index": 0}, 300)
    assert answer["peak"]["tflops"]["fp32"] > 0 and "best of 24 rounds" in answer["peak"]["method"]
