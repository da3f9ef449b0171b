"""int8 and bf16 GEMM on AMX tiles (kernels/gemm/cpu/amx.py) and the CPU's int8/bf16 peaks
from dot-product throughput loops (backends/cpu_dot_peak.py).

What needs AMX hardware (and Linux's grant of the tile state) is skipped elsewhere, saying so;
the generated code is inspected for a target with AMX's features on any x86-64 host."""

from __future__ import annotations

import platform

import needs
import numpy as np
import pytest

from hwbench.core.registry import get_kernel
from hwbench.run.parity import check

needs.module("llvmlite")
from hwbench.backends import cpu_dot_peak  # noqa: E402
from hwbench.backends.cpu_peak import fma_units  # noqa: E402
from hwbench.kernels.gemm import llvm  # noqa: E402
from hwbench.kernels.gemm.cpu import amx as llvm_amx  # noqa: E402
from hwbench.kernels.gemm.cpu import driver as llvm_driver  # noqa: E402
from hwbench.kernels.llvmir import cpu_launch  # noqa: E402
from hwbench.kernels.llvmir import target as target_mod  # noqa: E402

GEMM = get_kernel("gemm")
X86 = platform.machine().lower() in ("x86_64", "amd64")
ODD = [
    {"M": 1, "N": 4097, "K": 3},
    {"M": 1, "N": 3, "K": 4097},
    {"M": 257, "N": 129, "K": 65},
    {"M": 33, "N": 70, "K": 7},
    {"M": 15, "N": 31, "K": 1},
    {"M": 64, "N": 96, "K": 130},
]
AMX_FEATURES = "+avx512f,+avx512bw,+avx512vl,+avx512dq,+avx512vnni,+avx512bf16,+amx-tile,+amx-int8,+amx-bf16"


def _host_amx(dtype: str) -> target_mod.CPUTarget:
    host = target_mod.host_target()
    if not llvm_amx.has_features(host, dtype):
        pytest.skip(f"this CPU has no AMX {dtype} (its LLVM features lack {', '.join(llvm_amx.KINDS[dtype].features)})")
    if not llvm_amx.amx_granted():
        pytest.skip("Linux did not grant this process the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM)")
    return host


def _run(shape: dict[str, int], dtype: str, blocks: dict[str, int] | None = None) -> tuple[np.ndarray, dict, dict]:
    target = target_mod.host_target()
    inputs = GEMM.make_inputs(shape, dtype, seed=5)
    plan = llvm.launch(shape, dtype, target, 2, blocks)
    kernel = cpu_launch.prepare(llvm.build, inputs, dtype, plan, 2, target)
    kernel.run()
    return kernel.output, inputs, kernel.config


@pytest.mark.parametrize("shape", ODD, ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_amx_int8_is_exact_on_odd_shapes(shape: dict[str, int]) -> None:
    _host_amx("int8")
    out, inputs, config = _run(shape, "int8")
    assert config["path"] == "amx" and out.dtype == np.int32
    want = inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)
    assert np.array_equal(out.astype(np.int64), want)


def test_amx_int8_slices_of_k_and_many_programs_add_up_exactly() -> None:
    _host_amx("int8")
    shape = {"M": 200, "N": 170, "K": 1000}
    out, inputs, config = _run(shape, "int8", {"mc": 64, "nc": 96, "kc": 192})  # 6 slices, 4 x 2 programs
    assert (config["mc"], config["nc"], config["kc"]) == (64, 96, 192)
    assert np.array_equal(out.astype(np.int64), inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64))


@pytest.mark.parametrize("shape", ODD + [{"M": 130, "N": 70, "K": 1100}], ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_amx_bf16_is_within_the_derived_tolerance(shape: dict[str, int]) -> None:
    _host_amx("bf16")
    out, inputs, config = _run(shape, "bf16")
    assert config["path"] == "amx" and out.dtype == np.float32
    result = check(out, GEMM.reference(inputs, shape), GEMM.tolerance("bf16", shape))
    assert result.passed, result


def test_amx_bf16_inputs_travel_as_their_16_bit_patterns() -> None:
    values = np.array([1.0, -2.5, 0.0, 3.0e38, -1.0e-38, 0.15625], dtype=np.float32)
    bits = cpu_launch.device_array(values, "bf16")
    assert bits.dtype == np.uint16
    assert np.array_equal(bits.astype(np.uint32) << 16, values.view(np.uint32) & np.uint32(0xFFFF0000))
    assert cpu_launch.device_array(values, "fp32") is values


def test_without_amx_the_vector_dot_product_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    host = target_mod.host_target()
    features = ",".join(f for f in host.features.split(",") if not f[1:].startswith("amx"))
    plain = target_mod.CPUTarget(host.cpu_name, features + ",-amx-tile,-amx-int8,-amx-bf16")
    shape = {"M": 40, "N": 50, "K": 60}
    assert not llvm_amx.usable(plain, "int8") and llvm.launch(shape, "int8", plain).config["path"] in (
        "vnni",
        "widening",
    )
    monkeypatch.setattr(llvm_amx, "amx_granted", lambda: False)  # a kernel that refuses the tile state
    assert not llvm_amx.usable(host, "int8") and not llvm_amx.usable(host, "bf16")
    assert llvm.launch(shape, "bf16", host).config["path"] in ("bf16dp", "widening")
    with pytest.raises(RuntimeError, match="did not grant"):
        llvm_amx.launch(shape, "int8", host)


@pytest.mark.skipif(not X86, reason="AMX is an x86-64 extension; this host's LLVM target is not x86")
@pytest.mark.parametrize(("dtype", "instruction"), [("int8", "tdpbssd"), ("bf16", "tdpbf16ps")])
def test_amx_code_is_tile_loads_and_dot_products(dtype: str, instruction: str) -> None:
    import llvmlite.binding as binding

    target = target_mod.CPUTarget("sapphirerapids", AMX_FEATURES)
    module = binding.parse_assembly(str(llvm_amx.build(target, dtype)))
    machine = binding.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu_name, features=target.features, opt=3
    )
    asm = machine.emit_assembly(module)
    assert asm.count(instruction) >= 4  # the 2 x 2 block of C tiles
    assert "ldtilecfg" in asm and "tileloadd" in asm and "tilestored" in asm and "tilerelease" in asm


def test_amx_blocking_keeps_every_worker_busy_and_tiles_whole() -> None:
    for dtype in ("int8", "bf16"):
        step = llvm_amx.KINDS[dtype].k_per_tile
        for shape in ({"M": 2048, "N": 2048, "K": 2048}, {"M": 64, "N": 4096, "K": 100}, {"M": 1, "N": 1, "K": 1}):
            blk = llvm_amx.blocking(shape, dtype, workers=2)
            programs = -(-shape["M"] // blk["mc"]) * -(-shape["N"] // blk["nc"])
            assert blk["mc"] % llvm_amx.BLOCK == 0 and blk["nc"] % llvm_amx.BLOCK == 0 and blk["kc"] % step == 0
            assert programs >= 4 or max(blk["mc"], blk["nc"]) == llvm_amx.BLOCK
    with pytest.raises(ValueError, match="multiple of 32"):
        llvm_driver.check_blocking(llvm_amx.tile(target_mod.host_target(), "bf16"), {"mc": 32, "nc": 32, "kc": 48})


@pytest.mark.skipif(not X86, reason="the dot-product instructions timed are x86-64 ones")
@pytest.mark.parametrize("ins", cpu_dot_peak.INSTRUCTIONS, ids=lambda i: i.name)
def test_each_throughput_loop_is_its_instruction(ins: cpu_dot_peak.Instruction) -> None:
    import llvmlite.binding as binding

    if ins.arch != "x86_64":
        pytest.skip(f"{ins.name} is an {ins.arch} instruction (tests/backends/test_cpu_peak_isa.py cross-compiles it)")
    target = target_mod.CPUTarget("sapphirerapids", AMX_FEATURES + ",+avxvnni")
    module = binding.parse_assembly(cpu_dot_peak.loop_ir(ins, target.description, target.triple))
    machine = binding.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu_name, features=target.features, opt=3
    )
    asm = machine.emit_assembly(module)
    chains = cpu_dot_peak.chains_for(ins, target.description)
    assert asm.count(ins.mnemonic) >= chains  # independent accumulators, none folded away


def test_dot_peaks_come_from_the_instructions_the_cpu_has() -> None:
    host = target_mod.host_target()
    assert not cpu_dot_peak.available(cpu_dot_peak.INSTRUCTIONS[0], "+avx2,-avx512vnni")
    peaks = cpu_dot_peak.measure_dot_peaks(host, 2.0e9)
    have = [i for i in cpu_dot_peak.INSTRUCTIONS if cpu_dot_peak.available(i, host.features, host.description)]
    assert set(peaks.measured) == {i.name for i in have} and set(peaks.tops) == {i.dtype for i in have}
    cores = host.description.cores
    for ins in have:
        per_cycle, counted = peaks.measured[ins.name]
        assert per_cycle > 0 and ins.name in peaks.method
        own = cores * ins.operations * counted * 2.0e9 / 1e12
        assert peaks.tops[ins.dtype] >= own * (1 - 1e-12)  # a dtype's peak is its fastest instruction's
        if ins.tile:
            assert counted == 1 / round(1 / per_cycle)  # whole cycles per tile instruction
        else:
            assert counted == fma_units(per_cycle)  # whole units, as FMAs are counted
    if not have:
        assert peaks.tops == {} and peaks.method == ""


def test_amx_int8_columns_longer_than_the_workspace_are_exact() -> None:
    """AMX keeps B's tiles resident and re-reads A's block: B's columns beyond the workspace's nc
    are packed a piece at a time, A once per kc slice."""
    _host_amx("int8")
    n = llvm_amx.MAX_BLOCK["nc"] * 2 + 40
    shape = {"M": 40, "N": n, "K": 300}
    nc = -(-n // llvm_amx.BLOCK) * llvm_amx.BLOCK
    out, inputs, config = _run(shape, "int8", {"mc": 32, "nc": nc, "kc": 128})
    assert config["nc"] == nc
    assert np.array_equal(out.astype(np.int64), inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64))
