"""int8 and bf16 CPU GEMM on every x86-64 ISA level the host has (v2, v3, v4 without VNNI and
AVX512-BF16, v4 with them), their machine code and the int8 scheme's extremes."""

from __future__ import annotations

import copy
import dataclasses
import re

import needs
import numpy as np
import pytest

from hwbench.core.errors import UserError
from hwbench.kernels.gemm.spec import KERNEL as GEMM
from hwbench.run.parity import check

needs.module("llvmlite")

from hwbench.kernels.gemm.cpu import bf16 as llvm_bf16  # noqa: E402
from hwbench.kernels.gemm.cpu import driver as llvm_driver  # noqa: E402
from hwbench.kernels.gemm.cpu import lowp as llvm_lowp  # noqa: E402
from hwbench.kernels.llvmir import cpu_model, jit  # noqa: E402
from hwbench.kernels.llvmir import target as target_mod  # noqa: E402

#: Levels as (name, ISA level, host features switched off): v4 once without its dot products.
DOTS = ("avx512vnni", "avxvnni", "avx512bf16")
LEVELS = [
    ("v2", "x86-64-v2", ()),
    ("v3", "x86-64-v3", ()),
    ("v4-plain", "x86-64-v4", DOTS),
    ("v4", "x86-64-v4", ()),
]
ODD = [(1, 1, 1), (3, 5, 7), (17, 33, 65), (333, 517, 259)]


def _target(level: str, off: tuple[str, ...] = ()) -> object:
    """The host restricted to ``level`` with the features ``off`` switched off; skips where the
    host does not reach the level (or is not x86)."""
    if not target_mod.host_target().triple.startswith("x86_64"):
        pytest.skip("x86-64 ISA levels need an x86-64 host")
    try:
        restricted = target_mod.CPUTarget(isa_level=level)
    except UserError as err:
        pytest.skip(f"this host cannot run {level}: {err}")
    if not off:
        return restricted
    parts = [f"-{f[1:]}" if f[1:] in off else f for f in restricted.features.split(",")]
    return target_mod.CPUTarget(restricted.cpu_name, ",".join(parts))


def _has(target: object, feature: str) -> bool:
    return f"+{feature}" in target.features.split(",")


def _int8(target: object, shape: dict[str, int], inputs: dict[str, np.ndarray] | None = None, **kw: object) -> dict:
    inputs = inputs or GEMM.make_inputs(shape, "int8", seed=13)
    kernel = llvm_lowp.prepare_cpu(inputs, shape, threads=2, target=target, **kw)
    kernel.run()
    want = inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)
    assert kernel.output.dtype == np.int32
    assert np.array_equal(kernel.output.astype(np.int64), want), (shape, kernel.config)
    return kernel.config


@pytest.mark.parametrize(("name", "level", "off"), LEVELS, ids=[lv[0] for lv in LEVELS])
def test_int8_gemm_is_exact_on_every_level(name: str, level: str, off: tuple[str, ...]) -> None:
    target = _target(level, off)
    vnni = _has(target, "avx512vnni")
    if name == "v4" and not vnni:
        pytest.skip("this host's AVX-512 has no VNNI: v4-plain is its v4")
    for m, n, k in ODD:
        config = _int8(target, {"M": m, "N": n, "K": k})
    assert config["path"] == ("vnni" if vnni else "widening")
    assert config["instruction"] == ("vnni" if vnni else "vpmaddwd")
    assert ("cannot saturate" in config["scheme"]) != vnni
    desc = target.description
    assert (config["MR"], config["NR"] // config["VW"]) == cpu_model.register_tile(desc.vector_registers, desc.chains)
    assert config["VW"] == desc.vector_bytes // 4 and config["k_group"] == (4 if vnni else 2)
    derived = config["derived_from"]
    assert derived["isa_level"].startswith(level) and derived["l1d_bytes"] == desc.caches.l1d
    assert "register_tile" in derived and "L1d" in derived["blocking"]


@pytest.mark.parametrize(("name", "level", "off"), LEVELS, ids=[lv[0] for lv in LEVELS])
def test_bf16_gemm_within_fp32_bound_on_every_level(name: str, level: str, off: tuple[str, ...]) -> None:
    target = _target(level, off)
    dp = llvm_bf16.path(target) == "bf16dp"
    if name == "v4" and not dp:
        pytest.skip("this host's AVX-512 has no BF16: v4-plain is its v4")
    for m, n, k in ODD:
        shape = {"M": m, "N": n, "K": k}
        inputs = GEMM.make_inputs(shape, "bf16", seed=9)
        kernel = llvm_bf16.prepare_cpu(inputs, shape, threads=2, target=target)
        kernel.run()
        assert check(kernel.output, GEMM.reference(inputs, shape), GEMM.tolerance("fp32", shape)).passed, shape
    config = kernel.config
    assert config["path"] == ("bf16dp" if dp else "widening") and config["k_group"] == (2 if dp else 1)
    desc = target.description  # the tile an fp32 FMA kernel gets on this target
    assert (config["MR"], config["NR"] // config["VW"]) == cpu_model.register_tile(desc.vector_registers, desc.chains)


def _loops(asm: str, instruction: str) -> list[str]:
    """The basic blocks of ``asm`` that contain ``instruction`` and jump back to themselves."""
    found = []
    for block in re.split(r"\n(?=\.LBB\S*:)", asm):
        label = block.split(":", 1)[0]
        if (
            label.startswith(".LBB")
            and re.search(rf"\t{instruction}\t", block)
            and re.search(rf"\tj\w+\t{re.escape(label)}$", block, re.M)
        ):
            found.append(block)
    return found


@pytest.mark.parametrize(
    ("level", "off", "instruction", "register"),
    [("x86-64-v2", (), "pmaddwd", "xmm"), ("x86-64-v3", (), "vpmaddwd", "ymm"), ("x86-64-v4", DOTS, "vpmaddwd", "zmm")],
    ids=["v2", "v3", "v4-plain"],
)
def test_int8_microkernel_is_pmaddwd_without_spills(
    level: str, off: tuple[str, ...], instruction: str, register: str
) -> None:
    target = _target(level, off)
    compiled = jit.compile_module(llvm_lowp.build(target, "int8"), target.cpu_name, target.features)
    asm = compiled.assembly()
    loops = _loops(asm, instruction)  # the microkernel's k loop
    geo = llvm_lowp.tile(target)
    assert loops and "pmaddubsw" not in asm and "vpdpbusd" not in asm and "vpdpwssd" not in asm
    for loop in loops:
        # every accumulator gets one pmaddwd per group (LLVM may unroll the loop), none spilled
        count = len(re.findall(rf"\t{instruction}\t.*%{register}", loop))
        assert count and count % (geo.mr * geo.nr_vectors) == 0 and "rsp" not in loop, loop


def test_avx_vnni_on_256_bit_vectors_uses_vpdpbusd() -> None:
    target = _target("x86-64-v3")
    if not _has(target_mod.host_target(), "avxvnni"):
        pytest.skip("this host has no AVX-VNNI")
    vnni = target_mod.CPUTarget(target.cpu_name, target.features.replace("-avxvnni", "+avxvnni"))
    assert llvm_lowp.path(vnni) == "vnni" and vnni.description.vector_bytes == 32
    asm = jit.compile_module(llvm_lowp.build(vnni, "int8"), vnni.cpu_name, vnni.features).assembly()
    assert re.search(r"\tvpdpbusd\t.*%ymm", asm)
    _int8(vnni, {"M": 17, "N": 33, "K": 65})


@pytest.mark.parametrize(("name", "level", "off"), LEVELS[1:], ids=[lv[0] for lv in LEVELS[1:]])
def test_int8_extremes_cannot_saturate(name: str, level: str, off: tuple[str, ...]) -> None:
    target = _target(level, off)
    # K odd and so large that the all -128 sums, 16384 K, come within 2**14 of int32's end: a
    # pair that saturated (int16) or a lane that wrapped would show; every row and column differs
    k = 2**17 - 1
    for a_val, b_val in ((-128, -128), (127, 127), (-128, 127), (127, -128)):
        a = np.full((3, k), a_val, dtype=np.int8)
        b = np.full((k, 5), b_val, dtype=np.int8)
        a[1, ::2] = 127 if a_val < 0 else -128  # mixed signs within pairs of k
        b[::3, 2] = 0
        _int8(target, {"M": 3, "N": 5, "K": k}, {"A": a, "B": b})
    # pairs at the bound on every lane: each pmaddwd lane is exactly 2 * 128 * 128
    shape = {"M": 7, "N": 70, "K": 33}
    ends = {"A": np.full((7, 33), -128, dtype=np.int8), "B": np.full((33, 70), -128, dtype=np.int8)}
    _int8(target, shape, ends, blocks={"mc": 7, "nc": llvm_lowp.tile(target).nr, "kc": 4})


def test_blocking_follows_the_described_caches() -> None:
    target = _target("x86-64-v3")
    small = copy.copy(target)  # a smaller core's caches: 32 KiB L1d, 512 KiB L2
    caches = cpu_model.Caches(32 * 2**10, 512 * 2**10, 8 * 2**20, "test")
    small.description = dataclasses.replace(target.description, caches=caches)
    geo = llvm_lowp.tile(small)
    shape = {"M": 2048, "N": 2048, "K": 2048}
    blk = llvm_driver.blocking(geo, small, shape, workers=2)
    per_k = geo.bytes_per_k
    # A's micro-panel in its share of L1d, B's block in its share of L2, whole groups and panels
    assert geo.mr * blk["kc"] * per_k <= llvm_driver.L1_SHARE * caches.l1d
    assert blk["nc"] * blk["kc"] * per_k <= llvm_driver.L2_SHARE * caches.l2
    assert blk["kc"] % geo.k_unit == 0 and blk["nc"] % geo.nr == 0 and blk["mc"] % geo.mr == 0
    big = llvm_driver.blocking(llvm_lowp.tile(target), target, shape, workers=2)
    if target.description.caches.l2 > caches.l2:
        assert blk["kc"] * blk["nc"] < big["kc"] * big["nc"]
    shape = {"M": 150, "N": 700, "K": 1500}
    blk = llvm_lowp.blocking(shape, small, workers=2)
    config = _int8(small, shape)
    assert config["derived_from"]["l1d_bytes"] == caches.l1d and config["kc"] == blk["kc"]


def test_int8_pairs_in_plain_vector_ir_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # Off x86 the pairs are multiplied in plain IR; built here as if on another CPU. A distinct
    # feature string keeps it apart from the vpmaddwd module of the same level in the JIT cache.
    target = _target("x86-64-v3")
    other = target_mod.CPUTarget(target.cpu_name, target.features + ",-avxvnni")
    monkeypatch.setattr(llvm_lowp, "is_x86", lambda _target: False)
    assert llvm_lowp.instruction(other) == "generic" and llvm_lowp.path(other) == "widening"
    for m, n, k in ODD[:3]:
        assert _int8(other, {"M": m, "N": n, "K": k})["instruction"] == "generic"
    ends = {"A": np.full((3, 4095), -128, dtype=np.int8), "B": np.full((4095, 9), -128, dtype=np.int8)}
    _int8(other, {"M": 3, "N": 9, "K": 4095}, ends)


# --- tuning: int8 and bf16 candidates, and the one cache blocking of every dtype -------------------


@pytest.mark.parametrize("dtype", ["int8", "bf16"])
@pytest.mark.parametrize("level", ["x86-64-v3", None], ids=["v3", "host"])
def test_tuned_low_precision_candidates_keep_parity(dtype: str, level: str | None) -> None:
    from hwbench.kernels.gemm import llvm
    from hwbench.kernels.llvmir import cpu_launch

    target = _target(level) if level else target_mod.host_target()
    for m, n, k in ODD[1:]:
        shape = {"M": m, "N": n, "K": k}
        space = llvm.tuning_space(target, dtype, shape)
        derived = llvm.launch(shape, dtype, target, 2).config
        assert space and all(space[0][key] == derived[key] for key in ("mc", "nc", "kc"))  # the derived first
        inputs = GEMM.make_inputs(shape, dtype, seed=7)
        ref = GEMM.reference(inputs, shape)
        for config in (space[0], space[1 % len(space)], space[-1]):  # a blocking variant, another tile
            plan = llvm.launch(shape, dtype, target, 2, config=config)
            assert all(plan.config[key] == value for key, value in config.items()), (config, plan.config)
            kernel = cpu_launch.prepare(llvm.build, inputs, dtype, plan, 2, target)
            kernel.run()
            if dtype == "int8":
                assert np.array_equal(kernel.output.astype(np.int64), ref.astype(np.int64)), (shape, config)
            else:
                assert check(kernel.output, ref, GEMM.tolerance("fp32", shape)).passed, (shape, config)
    if derived["path"] != "amx":  # AMX's tile is fixed: its space is its blocking alone
        assert any((c["MR"], c["NR_VECTORS"]) != (derived["MR"], derived["NR_VECTORS"]) for c in space)


def test_every_dtype_takes_the_one_blocking_from_the_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.kernels.gemm import llvm

    seen: list[str] = []
    blocking = llvm_driver.blocking

    def spy(tile: object, target: object, shape: dict[str, int], workers: int = 1) -> dict[str, int]:
        seen.append(tile.dtype)
        return blocking(tile, target, shape, workers)

    monkeypatch.setattr(llvm_driver, "blocking", spy)
    shape = {"M": 2048, "N": 2048, "K": 2048}
    for level in ("x86-64-v3", None):
        target = _target(level) if level else target_mod.host_target()
        blocks: dict[str, list[dict[str, int]]] = {}
        for l1, l2 in ((32 * 2**10, 256 * 2**10), (64 * 2**10, 4 * 2**20)):
            fake = copy.copy(target)
            fake.description = dataclasses.replace(target.description, caches=cpu_model.Caches(l1, l2, 2**25, "t"))
            for dtype in ("fp32", "fp64", "int8", "bf16"):
                config = llvm.launch(shape, dtype, fake, 2).config
                blocks.setdefault(dtype, []).append({key: config[key] for key in ("mc", "nc", "kc")})
                assert config["derived_from"]["l2_bytes"] == l2 and "L2" in config["derived_from"]["blocking"]
        for dtype, (small, large) in blocks.items():
            assert small != large, (level, dtype, small)  # the caches change every dtype's blocking
    assert {"fp32", "fp64", "int8", "bf16"} <= set(seen)
