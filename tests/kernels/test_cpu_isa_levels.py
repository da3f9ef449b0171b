"""The CPU target's description and the kernels derived from it, at every x86-64 ISA level the
host has (x86-64-v2: SSE4.2, 16 x 128-bit registers; v3: AVX2 + FMA, 16 x 256-bit; v4: AVX-512,
32 x 512-bit), emulated by switching the host's features off; a level the host lacks is skipped."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import needs
import numpy as np
import pytest
from conftest import hwbench_cmd

needs.module("llvmlite")

from hwbench.core.errors import UserError  # noqa: E402
from hwbench.kernels.llvmir import cpu_model, cpu_uarch  # noqa: E402
from hwbench.kernels.llvmir.target import CPUTarget, host_target  # noqa: E402

LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")
V3_FEATURES = "+sse2,+sse4.2,+ssse3,+avx,+avx2,+fma,+f16c,-avx512f,-amx-tile"


def _host_level() -> str:
    return cpu_model.x86_level(frozenset(f[1:] for f in host_target().features.split(",") if f.startswith("+")))


def level_target(level: str) -> CPUTarget:
    """The host restricted to ``level``, or a skip saying the host lacks it."""
    try:
        return CPUTarget(isa_level=level)
    except UserError as exc:
        pytest.skip(f"this CPU cannot run {level}: {exc}")


def test_restricting_switches_off_every_vector_feature_above_the_level() -> None:
    host = (
        "+sse2,+sse4.2,+ssse3,+popcnt,+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl,"
        "+avx512vnni,+amx-tile,+bmi2,+avxvnni"
    )
    v3 = cpu_model.restrict_features(host, "x86-64-v3").split(",")
    assert {"+avx2", "+fma", "+bmi2", "+sse4.2"} <= set(v3)
    assert {"-avx512f", "-avx512bw", "-avx512vnni", "-amx-tile", "-avxvnni"} <= set(v3)
    v2 = cpu_model.restrict_features(host, "x86-64-v2").split(",")
    assert "+sse4.2" in v2 and "-avx" in v2 and "-avx2" in v2 and "-fma" in v2
    v4 = cpu_model.restrict_features(host, "x86-64-v4").split(",")
    assert "+avx512vnni" in v4 and "+amx-tile" in v4  # AVX-512's extensions stay with a v4 CPU


def test_a_level_above_the_cpu_or_unknown_is_one_clear_error() -> None:
    with pytest.raises(UserError, match="lacks avx512"):
        cpu_model.restrict_features(V3_FEATURES, "x86-64-v4")
    with pytest.raises(UserError, match="not an ISA level; use one of x86-64-v2"):
        cpu_model.restrict_features(V3_FEATURES, "avx9")


@pytest.mark.parametrize(
    ("features", "width", "registers", "level"),
    [
        ("+sse2,+sse4.2,+ssse3,-avx", 16, 16, "x86-64-v2"),
        (V3_FEATURES, 32, 16, "x86-64-v3"),
        ("+sse4.2,+ssse3,+avx2,+fma,+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl", 64, 32, "x86-64-v4"),
    ],
)
def test_description_follows_the_features(features: str, width: int, registers: int, level: str) -> None:
    desc = cpu_model.describe("x86_64-unknown-linux-gnu", features)
    assert (desc.vector_bytes, desc.vector_registers, desc.isa_level) == (width, registers, level)
    assert desc.lanes("fp32") == width // 4 and desc.lanes("fp64") == width // 8


def test_aarch64_description() -> None:
    desc = cpu_model.describe(
        "aarch64-unknown-linux-gnu",
        "+neon,+fp-armv8,+sve",
        identity=cpu_uarch.Identity("ARM", None, None, (0x41, 0xD40)),
    )
    assert (desc.vector_bytes, desc.vector_registers, desc.isa_level) == (16, 32, "sve")
    assert desc.uarch is not None and desc.uarch.name == "Neoverse V1" and desc.fma_pipes == 4


def test_register_tiles_fit_the_register_file() -> None:
    # 28 accumulators + 2 B vectors + 1 broadcast on 32 registers; 12 + 2 + 1 on 16 (BLIS's 6 x 16 on AVX2)
    assert cpu_model.register_tile(32, chains=10) == (14, 2)
    assert cpu_model.register_tile(16, chains=10) == (6, 2)
    for registers in (8, 16, 32):
        mr, nv = cpu_model.register_tile(registers, chains=10)
        assert mr * nv + nv + 1 < registers


def test_microarchitecture_table_and_identity() -> None:
    zen2 = cpu_uarch.read_identity("vendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 49\n\nvendor_id : x\n")
    assert (zen2.vendor, zen2.family, zen2.model) == ("AuthenticAMD", 23, 49)
    arch = cpu_uarch.lookup(zen2)
    assert arch is not None and arch.name == "Zen 2" and arch.pipes_for(256) == 2 and arch.fma_latency == 5
    zen4 = cpu_uarch.lookup(cpu_uarch.Identity("AuthenticAMD", 25, 0x11))
    assert zen4 is not None and zen4.pipes_for(512) == 1 and zen4.pipes_for(256) == 2
    spr = cpu_uarch.lookup(cpu_uarch.Identity("GenuineIntel", 6, 0x8F))
    assert spr is not None and spr.amx and spr.pipes_for(512) == 2
    assert cpu_uarch.lookup(cpu_uarch.Identity("GenuineIntel", 6, 0x01)) is None
    n1 = cpu_uarch.read_identity("processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n")
    assert cpu_uarch.lookup(n1) is not None and cpu_uarch.lookup(n1).name == "Neoverse N1"  # type: ignore[union-attr]


def test_a_reported_model_that_contradicts_the_cpu_is_not_believed() -> None:
    rocket = cpu_uarch.Identity("GenuineIntel", 6, 0xA7)  # what a hypervisor may report for a Sapphire Rapids
    amx = "+avx2,+fma,+avx512f,+avx512bw,+avx512cd,+avx512dq,+avx512vl,+amx-tile"
    desc = cpu_model.describe("x86_64-unknown-linux-gnu", amx, identity=rocket)
    assert desc.uarch is None and "lacks AMX, unlike this CPU" in desc.sources["fma"]
    assert (desc.fma_latency, desc.fma_pipes) == (cpu_model.LATENCY_BOUND, cpu_model.PIPES_BOUND)
    plain = cpu_model.describe("x86_64-unknown-linux-gnu", amx.replace("+amx-tile", "-amx-tile"), identity=rocket)
    assert plain.uarch is not None and plain.uarch.name == "Rocket Lake" and plain.fma_pipes == 1


def test_caches_from_sysfs(tmp_path) -> None:
    for index, (level, kind, size) in enumerate(
        [(1, "Data", "32K"), (1, "Instruction", "32K"), (2, "Unified", "512K"), (3, "Unified", "16384K")]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    caches = cpu_model.read_caches(tmp_path)
    assert (caches.l1d, caches.l2, caches.llc) == (32 * 2**10, 512 * 2**10, 16 * 2**20)
    assert cpu_model.read_caches(tmp_path / "missing").source.startswith("defaults")


def test_env_variable_restricts_the_host_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_model.ISA_ENV, "x86-64-v2")
    if _host_level() == "x86-64":
        pytest.skip("the host is below x86-64-v2")
    target = host_target()
    assert target.description.isa_level == "x86-64-v2" and target.description.restricted
    assert target.vector_width("fp32") == 4 and "x86-64-v2" in target.name
    monkeypatch.setenv(cpu_model.ISA_ENV, "x86-64-v9")
    with pytest.raises(UserError, match="HWBENCH_CPU_ISA='x86-64-v9' is not an ISA level"):
        host_target()


# --- GEMM: tiles and blocking derived from the description, parity at every level ---------------

ODD_SHAPES = [(1, 1, 1), (3, 5, 7), (17, 33, 65), (67, 45, 130), (133, 217, 259)]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_gemm_parity_at_each_level(level: str, dtype: str) -> None:
    from hwbench.kernels.gemm import llvm as gemm
    from hwbench.kernels.gemm.spec import KERNEL
    from hwbench.kernels.llvmir import cpu_launch
    from hwbench.run.parity import check

    target = level_target(level)
    expected = (14, 2) if target.description.vector_registers == 32 else (6, 2)
    assert gemm.register_tile(target, dtype) == expected
    for m, n, k in ODD_SHAPES:
        shape = {"M": m, "N": n, "K": k}
        inputs = KERNEL.make_inputs(shape, dtype, seed=3)
        ref = KERNEL.reference(inputs, shape)
        space = gemm.tuning_space(target, dtype, shape)
        assert space and space[0]["MR"] == expected[0]  # the derived configuration first
        # the derived one, a blocking variant and another register tile
        for config in (space[0], space[1 % len(space)], space[-1]):
            plan = gemm.launch(shape, dtype, target, 2, config=config)
            assert plan.config["derived_from"]["isa_level"].startswith(level)
            kernel = cpu_launch.prepare(gemm.build, inputs, dtype, plan, 2, target)
            kernel.run()
            assert check(kernel.output, ref, KERNEL.tolerance(dtype, shape)).passed, (level, dtype, shape, config)


def test_gemm_blocking_follows_the_caches() -> None:
    from hwbench.kernels.gemm import llvm as gemm

    target = level_target("x86-64-v3")
    shape = {"M": 2048, "N": 2048, "K": 2048}
    small = dataclasses.replace(target.description, caches=cpu_model.Caches(32 * 2**10, 512 * 2**10, 16 * 2**20, "t"))
    large = dataclasses.replace(target.description, caches=cpu_model.Caches(48 * 2**10, 2 * 2**20, 64 * 2**20, "t"))
    blocks = {}
    for name, desc in (("small", small), ("large", large)):
        target.description = desc
        blocks[name] = gemm.derived_blocking("fp32", shape, target, 6, 2, 2)
    mr, nr, size = 6, 16, 4
    for name, desc in (("small", small), ("large", large)):
        blk = blocks[name]
        assert mr * blk["kc"] * size <= desc.caches.l1d / 2  # the A micro-panel in half of L1
        assert blk["kc"] * blk["nc"] * size <= 0.75 * desc.caches.l2  # the packed B block in L2
        assert blk["nc"] % nr == 0 and blk["mc"] % mr == 0
    assert blocks["small"]["kc"] * blocks["small"]["nc"] < blocks["large"]["kc"] * blocks["large"]["nc"]


def test_gemm_rejects_a_tile_or_block_the_workspace_cannot_hold() -> None:
    from hwbench.kernels.gemm import llvm as gemm

    target = host_target()
    shape = {"M": 64, "N": 64, "K": 64}
    with pytest.raises(ValueError, match="outside"):
        gemm.launch(shape, "fp32", target, 1, config={"MR": 6, "NR_VECTORS": 2, "mc": 64, "nc": 10**6, "kc": 16})
    with pytest.raises(ValueError, match="register tile"):
        gemm.launch(shape, "fp32", target, 1, config={"MR": 99, "NR_VECTORS": 2})


@pytest.mark.parametrize("level", LEVELS)
def test_attention_parity_at_each_level(level: str) -> None:
    from hwbench.kernels.attention import llvm as attention
    from hwbench.kernels.attention.spec import KERNEL as ATTENTION
    from hwbench.run.parity import check

    target = level_target(level)
    for causal in (0, 1):
        shape = {"batch": 1, "heads": 2, "seq_q": 37, "seq_k": 53, "head_dim": 24, "causal": causal}
        inputs = ATTENTION.make_inputs(shape, "fp32", seed=2)
        kernel = attention.prepare_cpu(inputs, shape, "fp32", threads=2, target=target)
        kernel.run()
        ref = ATTENTION.reference(inputs, shape)
        assert check(np.asarray(kernel.output), ref, ATTENTION.tolerance("fp32", shape)).passed, (level, causal)


# --- the GEMM's k loop in registers: no spills at any level, nor on aarch64 -----------------------

AARCH64 = "aarch64-unknown-linux-gnu"
CROSS = {
    "aarch64-neon": ("neoverse-n1", "+neon,+fp-armv8"),
    "aarch64-sve": ("neoverse-v1", "+neon,+fp-armv8,+sve"),
}


def _cross_target(name: str) -> CPUTarget:
    cpu, features = CROSS[name]
    try:
        return CPUTarget(cpu, features, triple=AARCH64)
    except Exception as exc:  # an LLVM built without the AArch64 backend
        pytest.skip(f"llvmlite cannot target {AARCH64}: {exc}")


@pytest.mark.parametrize("level", [*LEVELS, *CROSS])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_gemm_k_loop_keeps_its_tile_in_registers(level: str, dtype: str) -> None:
    from machine_code import assembly, hot_loop, multiply_adds, stack_traffic

    from hwbench.kernels.gemm import llvm as gemm

    target = _cross_target(level) if level in CROSS else level_target(level)
    mr, nv = gemm.register_tile(target, dtype)
    loop = hot_loop(assembly(gemm.build(target, dtype), target.triple, target.cpu_name, target.features))
    # one FMA per accumulator and k step (SSE without FMA: a multiply and an add each)
    per_step = mr * nv * (2 if target.description.isa_level == "x86-64-v2" else 1)
    assert multiply_adds(loop) % per_step == 0 and multiply_adds(loop) >= per_step, loop
    assert stack_traffic(loop) == [], f"the {level} {dtype} k loop spills: {stack_traffic(loop)}"


def test_spills_are_seen() -> None:
    """The check above can fail: a tile larger than the register file spills in its k loop."""
    from machine_code import assembly, hot_loop, stack_traffic

    from hwbench.kernels.gemm import llvm as gemm

    target = level_target("x86-64-v3")
    module = gemm.build(target, "fp32", {"MR": 14, "NR_VECTORS": 2})  # AVX-512's tile on 16 registers
    assert stack_traffic(hot_loop(assembly(module, target.triple, target.cpu_name, target.features)))


# --- a run at a smaller ISA level, as a user previews a smaller CPU -------------------------------


def _cli(env_level: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(cpu_model.ISA_ENV, None)
    if env_level is not None:
        env[cpu_model.ISA_ENV] = env_level
    return subprocess.run(hwbench_cmd(*args), capture_output=True, text=True, timeout=600, env=env)


@pytest.mark.parametrize("value", ["x86-64-v9", "neon-2"])
def test_a_bad_isa_level_is_one_line_and_exit_2(value: str) -> None:
    done = _cli(value, "list")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "HWBENCH_CPU_ISA" in done.stderr and "Traceback" not in done.stderr


def test_a_level_this_cpu_cannot_run_is_refused() -> None:
    other = "neon" if host_target().triple.startswith("x86_64") else "x86-64-v3"
    done = _cli(other, "list")
    assert done.returncode == 2 and "HWBENCH_CPU_ISA" in done.stderr and "Traceback" not in done.stderr


def test_a_run_below_the_hosts_level_says_so_in_its_records(tmp_path) -> None:
    """A run at the level below the host's (v3 on an AVX-512 host, v2 on an AVX2 one) is emulated:
    its device carries the emulated level's own peak and its records the restricted tile."""
    host_level = _host_level() if host_target().triple.startswith("x86_64") else "x86-64"
    if host_level not in LEVELS[1:]:
        pytest.skip(f"no x86-64 level below this host's ({host_level}) to emulate")
    level = LEVELS[LEVELS.index(host_level) - 1]
    out = tmp_path / "below.json"
    done = _cli(
        level,
        "run", "--backend", "cpu", "--kernel", "gemm", "--impl", "llvm,numpy", "--dtype", "fp32",
        "--shape", "gemm:M=96,N=80,K=72", "--budget", "0.02", "-q", "-o", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    device = doc["backends"][0]["devices"][0] if doc["backends"][0]["name"] == "cpu" else None
    assert device is not None and f"{level} (emulated; the host is {host_level})" == device["extra"]["isa_level"]
    assert device["extra"]["portable_peak"]["isa_level"] == level
    assert device["arch"] == host_target().cpu_name  # the device is the host, whatever level is emulated
    records = {r["impl"]: r for r in doc["records"]}
    assert records["llvm"]["status"] == "ok" and records["numpy"]["status"] == "ok"
    derived = records["llvm"]["config"]["derived_from"]
    assert derived["isa_level"] == f"{level} (restricted)" and derived["vector_bits"] == (
        256 if level == "x86-64-v3" else 128
    )
    assert (records["llvm"]["config"]["MR"], records["llvm"]["config"]["NR_VECTORS"]) == (6, 2)


def test_the_hosts_own_level_restricts_nothing() -> None:
    host = host_target()
    level = _host_level()
    if level == "x86-64" or not host.triple.startswith("x86_64"):
        pytest.skip("not an x86-64-v2 or higher host")
    assert CPUTarget(isa_level=level).features == host.features


def test_the_cpu_tuning_key_names_the_compiled_features() -> None:
    from hwbench.backends import cpu
    from hwbench.core.registry import get_backend

    backend = get_backend("cpu")
    device = backend.devices()[0]
    impl = next(i for i in backend.implementations("gemm") if i.kind != "native")
    shape = {"M": 64, "N": 64, "K": 64}
    keys = {cpu._tuning_key(impl, shape, "fp32", device, 2, f) for f in ("+avx2,+avx512f", "+avx2,-avx512f")}
    assert len(keys) == 2  # a host whose hypervisor hides AVX-512 finds no entry tuned with it
