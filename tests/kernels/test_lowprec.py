"""Low precision on the CPU: int8 (exact, int32 sums) and bf16 GEMM, their kernels, natives and runs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import needs
import numpy as np
import pytest
from conftest import hwbench_cmd

from hwbench.core.dtypes import is_integer, output_dtype, round_to_dtype
from hwbench.core.registry import get_backend
from hwbench.kernels.gemm.spec import KERNEL as GEMM
from hwbench.results.files import validate
from hwbench.results.tables import row
from hwbench.run.case import CaseRequest, CaseRunner
from hwbench.run.parity import check

needs.module("llvmlite")

from hwbench.kernels.gemm.cpu import bf16 as llvm_bf16  # noqa: E402
from hwbench.kernels.gemm.cpu import lowp as llvm_lowp  # noqa: E402
from hwbench.kernels.llvmir import target as target_mod  # noqa: E402

QUICK = {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3}
ODD = [
    {"M": 1, "N": 4097, "K": 3},
    {"M": 1, "N": 3, "K": 4097},
    {"M": 257, "N": 129, "K": 65},
    {"M": 33, "N": 70, "K": 7},
    {"M": 15, "N": 31, "K": 1},
]


def _shape(m: int, n: int, k: int) -> dict[str, int]:
    return {"M": m, "N": n, "K": k}


def _widening_target(*off: str) -> object:
    """The host target with the features ``off`` switched off: the portable path must take over."""
    host = target_mod.host_target()
    features = ",".join(f for f in host.features.split(",") if f[1:] not in off)
    return target_mod.CPUTarget(host.cpu_name, features + "".join(f",-{f}" for f in off))


def _exact(shape: dict[str, int], target: object | None = None, blocks: dict[str, int] | None = None) -> dict:
    inputs = GEMM.make_inputs(shape, "int8", seed=11)
    kernel = llvm_lowp.prepare_cpu(inputs, shape, threads=2, blocks=blocks, target=target)
    kernel.run()
    want = inputs["A"].astype(np.int64) @ inputs["B"].astype(np.int64)
    assert kernel.output.dtype == np.int32
    assert np.array_equal(kernel.output.astype(np.int64), want), shape
    return kernel.config


def test_int8_dtype_is_exact_with_int32_output() -> None:
    assert is_integer("int8") and not is_integer("bf16") and output_dtype("int8") == np.int32
    tol = GEMM.tolerance("int8", _shape(4, 4, 4097))
    assert tol.exact and tol.atol == 0.0 and tol.rtol == 0.0
    inputs = GEMM.make_inputs(_shape(64, 64, 64), "int8", seed=1)
    a = inputs["A"]
    assert a.dtype == np.int8 and a.min() == -128 and a.max() == 127  # the whole range, both ends
    assert GEMM.bytes_moved(_shape(2, 3, 4), "int8") == 2 * 4 + 4 * 3 + 4 * 2 * 3
    assert np.array_equal(round_to_dtype(np.array([-300.0, 1.4, 200.0]), "int8"), [-128.0, 1.0, 127.0])


@pytest.mark.parametrize("shape", ODD, ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_int8_llvm_gemm_is_exact_on_odd_shapes(shape: dict[str, int]) -> None:
    config = _exact(shape)
    host = target_mod.host_target()
    path = llvm_lowp.path(host)
    assert config["path"] == path and config["k_group"] == (4 if path == "vnni" else 2)


def test_int8_exact_across_k_slices_and_blocks() -> None:
    # several kc slices (the correction summed per slice), an odd last slice, edge tiles in M and N
    _exact(_shape(45, 77, 203), blocks={"mc": 28, "nc": 32, "kc": 24})


def test_int8_vnni_path_emits_vpdpbusd() -> None:
    host = target_mod.host_target()
    if llvm_lowp.path(host) != "vnni":
        pytest.skip("this CPU has no AVX-512 VNNI: the widening path runs (tested below)")
    import llvmlite.binding as llvm

    module = llvm.parse_assembly(str(llvm_lowp.build(host, "int8")))
    tm = llvm.Target.from_triple(host.triple).create_target_machine(cpu=host.cpu_name, features=host.features)
    assert "vpdpbusd" in tm.emit_assembly(module)


@pytest.mark.parametrize("shape", ODD[:3], ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_int8_widening_fallback_is_exact(shape: dict[str, int]) -> None:
    target = _widening_target("avx512vnni", "avxvnni")
    assert llvm_lowp.path(target) == "widening"
    assert _exact(shape, target=target)["path"] == "widening"


def test_low_precision_is_offered_on_the_cpu() -> None:
    backend = get_backend("cpu")
    impls = {i.name: i for i in backend.implementations("gemm")}
    assert {"int8", "bf16"} <= set(impls["llvm"].dtypes) and "int8" in impls["torch_int_mm"].dtypes
    assert "bf16" in impls["torch_matmul"].dtypes and "int8" not in impls["numpy"].dtypes
    # By default where the CPU has a measured peak for them, else only when --dtype names them.
    peak = backend.devices()[0].peak
    unmeasured = {d for d in ("int8", "bf16") if peak is None or d not in peak.tflops}
    assert set(impls["llvm"].on_request) == unmeasured and impls["numpy"].on_request == ()
    assert set(impls["torch_int_mm"].on_request) == unmeasured & {"int8"}
    attention = {i.name: i for i in get_backend("cpu").implementations("attention")}
    assert not {"int8", "bf16"} & set(attention["llvm"].dtypes)  # GEMM's kernels only


@pytest.fixture(scope="module")
def runner() -> CaseRunner:
    return CaseRunner()


@pytest.mark.parametrize(
    ("impl", "dtype"), [("llvm", "int8"), ("torch_int_mm", "int8"), ("torch_matmul", "bf16"), ("llvm", "bf16")]
)
def test_cpu_cases_pass_parity(runner: CaseRunner, impl: str, dtype: str) -> None:
    for shape in ODD[1:]:
        record = runner.run(CaseRequest("gemm", impl, "cpu", 0, dtype, shape, seed=5, timing=QUICK))
        if record["status"] == "skipped" and "torch is not installed" in record["reason"]:
            pytest.skip(record["reason"])
        assert record["status"] == "ok", (shape, record["reason"])
        assert record["parity"]["passed"], record["parity"]
        shown = row(dict(record, metrics={"tflops": 0.5}))[7]  # the table's TFLOPS column
        if dtype == "int8":
            assert record["parity"]["exact"] and record["parity"]["max_abs_err"] == 0
            assert shown == "0.5 TOPS"
        else:
            assert record["parity"]["max_abs_err"] <= record["parity"]["atol"] and not record["parity"]["exact"]
            assert shown == "0.5"
        if impl != "llvm":
            assert "torch" in record["config"]["library"]


def _bf16(shape: dict[str, int], target: object | None = None, blocks: dict[str, int] | None = None) -> dict:
    inputs = GEMM.make_inputs(shape, "bf16", seed=7)
    kernel = llvm_bf16.prepare_cpu(inputs, shape, threads=2, blocks=blocks, target=target)
    kernel.run()
    ref = GEMM.reference(inputs, shape)
    assert kernel.output.dtype == np.float32
    assert check(kernel.output, ref, GEMM.tolerance("bf16", shape)).passed
    # bf16 products are exact in fp32 and summed in fp32: as close as an fp32 GEMM must be.
    assert check(kernel.output, ref, GEMM.tolerance("fp32", shape)).passed, shape
    return kernel.config


@pytest.mark.parametrize("shape", ODD, ids=lambda s: f"{s['M']}x{s['N']}x{s['K']}")
def test_bf16_llvm_gemm_within_fp32_accumulation_bound(shape: dict[str, int]) -> None:
    config = _bf16(shape)
    path = llvm_bf16.path(target_mod.host_target())
    assert config["path"] == path and config["k_group"] == (2 if path == "bf16dp" else 1)


def test_bf16_across_k_slices_and_widening_fallback() -> None:
    _bf16(_shape(45, 77, 203), blocks={"mc": 28, "nc": 32, "kc": 24})
    target = _widening_target("avx512bf16")
    assert llvm_bf16.path(target) == "widening"
    for shape in ODD[:3]:
        assert _bf16(shape, target=target)["path"] == "widening"


def test_bf16_path_emits_vdpbf16ps() -> None:
    host = target_mod.host_target()
    if llvm_bf16.path(host) != "bf16dp":
        pytest.skip("this CPU has no AVX-512 BF16: the widening path runs (tested above)")
    import llvmlite.binding as llvm

    module = llvm.parse_assembly(str(llvm_bf16.build(host, "bf16")))
    tm = llvm.Target.from_triple(host.triple).create_target_machine(cpu=host.cpu_name, features=host.features)
    assert "vdpbf16ps" in tm.emit_assembly(module)


def test_bf16_tolerance_holds_for_bf16_rounding_and_refuses_fp16_error() -> None:
    shape = _shape(40, 24, 300)
    inputs = GEMM.make_inputs(shape, "bf16", seed=2)
    for name in ("A", "B"):  # inputs are bf16 values held in float32
        assert np.array_equal(round_to_dtype(inputs[name].astype(np.float64), "bf16"), inputs[name])
    ref = GEMM.reference(inputs, shape)
    tol = GEMM.tolerance("bf16", shape)
    assert check(round_to_dtype(ref, "bf16"), ref, tol).passed  # fp32 sums rounded once to bf16
    assert not check(ref + 0.05 * np.abs(ref).max(), ref, tol).passed


def test_hwbench_run_int8_on_the_cpu_writes_a_valid_file(tmp_path: Path) -> None:
    out = tmp_path / "int8.json"
    args = ["run", "--backend", "cpu", "--kernel", "gemm", "--dtype", "int8", "--impl", "llvm"]
    cmd = hwbench_cmd(*args, "--shape", "gemm:M=67,N=33,K=101", "--budget", "0.02", "--out", str(out))
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "TOPS" in result.stdout
    doc = json.loads(out.read_text())
    assert validate(doc) == []
    (record,) = doc["records"]
    assert record["dtype"] == "int8" and record["status"] == "ok" and record["parity"]["exact"]
    assert record["config"]["path"] in ("amx", "vnni", "widening") and record["metrics"]["tflops"] > 0
    (device,) = [d for b in doc["backends"] if b["name"] == "cpu" for d in b["devices"]]
    if "int8" in (device.get("peak") or {}).get("tflops", {}):  # a measured int8 peak gives a share of it
        assert 0 < record["metrics"]["pct_peak"] <= 100


def test_256_bit_target_without_avx512_runs_both_fallbacks() -> None:
    host = target_mod.host_target()
    if "+avx2" not in host.features.split(","):
        pytest.skip("the host has no AVX2 to build a 256-bit target from")
    drop = ("avx512", "avx10", "amx", "avxvnni", "evex512")
    kept = [f for f in host.features.split(",") if not f[1:].startswith(drop)]
    target = target_mod.CPUTarget(host.cpu_name, ",".join(kept + ["-avx512f", "-evex512"]))
    assert llvm_lowp.lanes(target) == 8 and llvm_lowp.path(target) == "widening"
    assert llvm_bf16.path(target) == "widening"
    _exact(ODD[1], target=target)
    _bf16(ODD[1], target=target)


def test_int8_rows_longer_than_the_workspace_are_exact() -> None:
    """A's rows beyond what the workspace holds are packed a piece at a time, B once per kc slice."""
    tile = llvm_lowp.tile(target_mod.host_target())
    m = 2 * tile.max_block["mc"] + 5
    config = _exact(
        _shape(m, tile.nr + 3, 2 * tile.k_unit * 9 + 1), blocks={"mc": m, "nc": tile.nr, "kc": 4 * tile.k_unit}
    )
    assert config["mc"] == m
