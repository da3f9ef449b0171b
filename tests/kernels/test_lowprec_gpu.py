"""fp8 and int8 GEMM for GPUs without a GPU: the dtype table and inputs (fp8 values exact in e4m3 and
e4m3fnuz after their power-of-two scales), which devices run them (sm_80 / sm_89 / sm_90 / gfx90a /
gfx942), the device layout (scaled, K-major B, scales) on CPU tensors, the libraries' shape limits,
``torch._scaled_mm``'s two signatures through stand-ins, the Triton kernels under the interpreter
(int8 exact, fp8 within the tolerance, on odd shapes), and their tensor-core instructions when
cross-compiled for sm_90 and gfx942 (no spills)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import ml_dtypes
import needs
import numpy as np
import pytest

from hwbench.backends.cuda import CUDABackend
from hwbench.backends.rocm import ROCmBackend
from hwbench.core.backend import DeviceInfo
from hwbench.core.dtypes import dtype, fp8_torch_name, gpu_unsupported, round_to_dtype
from hwbench.kernels.gemm import natives_gpu_lowp as lowp_natives
from hwbench.kernels.gemm.spec import FP8_SCALE_EXPONENTS, KERNEL

ODD = {"M": 37, "N": 45, "K": 83}


def _device(backend: str, arch: str) -> DeviceInfo:
    return DeviceInfo(backend=backend, index=0, name=f"fake {arch}", vendor="x", kind="gpu", arch=arch)


def test_fp8_is_e4m3_with_fp32_output_and_counted_as_flops() -> None:
    fp8 = dtype("fp8")
    assert (fp8.bytes, fp8.torch, fp8.triton, fp8.accumulator, fp8.output) == (
        1,
        "float8_e4m3fn",
        "fp8e4nv",
        "fp32",
        "float32",
    )
    assert not fp8.integer and dtype("int8").integer  # fp8 figures are TFLOPS, int8 TOPS
    assert fp8_torch_name("gfx942") == "float8_e4m3fnuz"
    assert fp8_torch_name("gfx950") == fp8_torch_name("sm_90") == "float8_e4m3fn"
    rounded = round_to_dtype(np.array([0.3, 1.0625, 1.0626, 1000.0, 2.0**-10]), "fp8")
    assert rounded.tolist() == [0.3125, 1.0, 1.125, 448.0, 0.0]


def test_fp8_inputs_stay_exact_in_both_e4m3_formats_after_their_scales() -> None:
    shape = {"M": 64, "N": 48, "K": 80}
    inputs = KERNEL.make_inputs(shape, "fp8", 5)
    for name, values in inputs.items():
        assert values.dtype == np.float32 and np.abs(values).max() <= 1.0
        scaled = values.astype(np.float64) * 2.0 ** FP8_SCALE_EXPONENTS[name]
        for fmt in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz):
            assert np.array_equal(scaled.astype(fmt).astype(np.float64), scaled), (name, fmt)
    assert len(np.unique(inputs["A"])) > 100  # not a handful of values
    assert KERNEL.bytes_moved(shape, "fp8") == (64 * 80 + 80 * 48) + 4 * 64 * 48  # fp32 C
    tol = KERNEL.tolerance("fp8", {"M": 1, "N": 1, "K": 8192})
    assert tol.atol == pytest.approx(2 * 8192 * 2.0**-14 + 4 * 8192**0.5 * 2.0**-24) and not tol.exact
    assert KERNEL.tolerance("int8", shape).exact


@pytest.mark.parametrize(
    ("arch", "fp8", "int8"),
    [
        ("sm_80", "no fp8 tensor cores on sm_80 (fp8 needs sm_89 or newer)", ""),
        ("sm_75", "no fp8 tensor cores on sm_75 (fp8 needs sm_89 or newer)", "int8 needs sm_80"),
        ("sm_89", "", ""),
        ("sm_90", "", ""),
        ("sm_100a", "", ""),
        ("gfx90a", "no fp8 matrix cores on gfx90a (fp8 needs gfx942 or gfx950)", ""),
        ("gfx942", "", ""),
        ("gfx950", "", ""),
        ("gfx1100", "fp8 needs gfx942", "int8 needs a CDNA GPU"),
    ],
)
def test_which_gpus_run_fp8_and_int8(arch: str, fp8: str, int8: str) -> None:
    backend = CUDABackend() if arch.startswith("sm_") else ROCmBackend()
    device = _device(backend.name, arch)
    impls = {i.name: i for i in backend.implementations("gemm")}
    native = impls["torch_scaled_mm"]
    for dt, want in (("fp8", fp8), ("int8", int8)):
        assert (want in gpu_unsupported(dt, arch)) and (bool(want) == bool(gpu_unsupported(dt, arch)))
        impl = native if dt == "fp8" else impls["torch_int_mm"]
        for one in (impl, impls["triton"]):
            found = backend.supports(one, dt, device)
            if want:
                assert not found.ok and want in found.reason, (one.name, dt, found)
            elif one.kind == "native":  # the natives need nothing beyond torch
                assert found.ok, (one.name, dt, found)
    assert not backend.supports(impls["torch_matmul"], "fp8", device).ok  # torch.matmul has no fp8


def test_the_libraries_shape_limits_are_reasons() -> None:
    assert lowp_natives.int_mm_unfit({"M": 17, "N": 8, "K": 16}) == ""
    why = lowp_natives.int_mm_unfit({"M": 16, "N": 517, "K": 259})
    assert why == (
        "torch._int_mm on the GPU cannot take M=16 (needs M > 16), K=259 (needs a multiple of 8), "
        "N=517 (needs a multiple of 8)"
    )
    assert lowp_natives.scaled_mm_unfit({"M": 333, "N": 4096, "K": 4096}) == ""
    assert "K=259, N=517" in lowp_natives.scaled_mm_unfit({"M": 333, "N": 517, "K": 259})
    with pytest.raises(lowp_natives.ShapeUnsupported, match="N=517"):
        lowp_natives.torch_int_mm({}, None, {"M": 333, "N": 517, "K": 256}, "int8")
    with pytest.raises(lowp_natives.ShapeUnsupported, match="multiples of 16"):
        lowp_natives.torch_scaled_mm({}, None, {"M": 333, "N": 512, "K": 8}, "fp8")


#: ``aten::_scaled_mm`` since torch 2.4 (2.11 on the GPU machine, 2.13 here), and as torch 2.1-2.3 had it.
SCHEMA_NOW = (
    "aten::_scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, "
    "Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor"
)
SCHEMA_OLD = (
    "aten::_scaled_mm(Tensor self, Tensor mat2, *, Tensor? bias=None, ScalarType? out_dtype=None, "
    "Tensor? scale_a=None, Tensor? scale_b=None, Tensor? scale_result=None, bool use_fast_accum=False) "
    "-> (Tensor, Tensor)"
)


def _now(self: Any, mat2: Any, scale_a: Any, scale_b: Any, bias: Any = None, scale_result: Any = None,
         out_dtype: Any = None, use_fast_accum: bool = False, *, out: Any = None) -> Any:  # fmt: skip
    product = self @ mat2 * (scale_a * scale_b)
    assert not use_fast_accum and out_dtype == "f32"
    if out is not None:
        out[...] = product
        return out
    return product


def _old(self: Any, mat2: Any, *, bias: Any = None, out_dtype: Any = None, scale_a: Any = None,
         scale_b: Any = None, scale_result: Any = None, use_fast_accum: bool = False) -> Any:  # fmt: skip
    assert scale_a is not None and scale_b is not None and out_dtype == "f32" and not use_fast_accum
    return self @ mat2 * (scale_a * scale_b), np.float32(0.0)  # (out, amax)


@pytest.mark.parametrize(("schema", "fn", "has_out"), [(SCHEMA_NOW, _now, True), (SCHEMA_OLD, _old, False)])
def test_scaled_mm_is_called_as_each_release_takes_it(schema: str, fn: Any, has_out: bool) -> None:
    adapter = lowp_natives.parse_schema(schema, has_out)
    assert adapter.returns_pair is (fn is _old)
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    out = np.zeros((2, 4))
    got = adapter.call(fn, a, b, (np.float64(0.5), np.float64(0.25)), "f32", out if has_out else None)
    assert np.array_equal(got, a @ b / 8)
    if has_out:
        assert got is out


def test_the_adapter_reads_this_torchs_schema() -> None:
    torch = needs.module("torch")
    adapter = lowp_natives.scaled_mm_adapter(torch)
    assert {"scale_a", "scale_b", "out_dtype"} <= set(adapter.positional + adapter.keywords)
    assert not adapter.returns_pair


def test_fp8_device_layout_scales_and_k_major_b() -> None:
    torch = needs.module("torch")
    from hwbench.backends import torch_gpu_lowp

    inputs = KERNEL.make_inputs(ODD, "fp8", 1)
    for arch, kind in (("sm_90", torch.float8_e4m3fn), ("gfx942", torch.float8_e4m3fnuz)):
        tensors, out = torch_gpu_lowp.device_tensors(KERNEL, inputs, ODD, "fp8", _device("cuda", arch), "cpu")
        a, b = tensors["A"], tensors["B"]
        assert a.dtype == b.dtype == kind and a.stride() == (83, 1) and b.stride() == (1, 83)  # B K-major
        assert tensors["scale_A"].item() == 2.0**-6 and tensors["scale_B"].item() == 2.0**-7
        assert out.dtype == torch.float32 and tuple(out.shape) == (37, 45)
        unscaled = a.double() * tensors["scale_A"].item()
        assert torch.equal(unscaled, torch.from_numpy(inputs["A"]).double())  # exact in both formats
    tensors, out = torch_gpu_lowp.device_tensors(KERNEL, KERNEL.make_inputs(ODD, "int8", 1), ODD, "int8",
                                                 _device("cuda", "sm_90"), "cpu")  # fmt: skip
    assert tensors["A"].dtype == torch.int8 and out.dtype == torch.int32 and set(tensors) == {"A", "B"}


_CHILD = textwrap.dedent("""
    import json, sys
    from hwbench.backends import torch_gpu_lowp
    from hwbench.backends.cuda import CUDABackend
    from hwbench.core.backend import DeviceInfo
    from hwbench.kernels.gemm.gpu import triton as gemm_tt
    from hwbench.kernels.gemm.spec import KERNEL
    from hwbench.kernels.gemm.gpu.triton_tiles import Config
    from hwbench.run import parity

    out = {}
    for dtype, arch, m, n, k in json.loads(sys.argv[1]):
        shape = {"M": m, "N": n, "K": k}
        inputs = KERNEL.make_inputs(shape, dtype, 7)
        device = DeviceInfo(backend="cuda", index=0, name="x", vendor="x", kind="gpu", arch=arch)
        tensors, c = torch_gpu_lowp.device_tensors(KERNEL, inputs, shape, dtype, device, "cpu")
        gemm_tt.launch_case(tensors, c, shape, dtype, Config(16, 32, 32, 2, 1, 1))
        res = parity.check(c.double().numpy(), KERNEL.reference(inputs, shape), KERNEL.tolerance(dtype, shape))
        out[f"{dtype} {arch} {m}x{n}x{k}"] = [res.passed, res.max_abs_err, res.reason]
    print(json.dumps(out))
""")

INTERPRETED = [("int8", "sm_90", 37, 45, 83), ("int8", "gfx942", 17, 8, 33), ("fp8", "sm_90", 37, 45, 83),
               ("fp8", "gfx942", 33, 20, 65), ("fp8", "sm_89", 1, 63, 129)]  # fmt: skip


def test_triton_fp8_and_int8_under_the_interpreter() -> None:
    needs.module("triton")
    needs.module("torch", "the Triton interpreter runs on torch CPU tensors")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(INTERPRETED)], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(INTERPRETED)
    for case, (passed, err, why) in results.items():
        assert passed, (case, why)
        if case.startswith("int8"):
            assert err == 0.0, case  # exact


def test_lowp_tuning_spaces_per_architecture() -> None:
    needs.module("triton")
    from hwbench.kernels.gemm.gpu import triton as gemm_tt

    assert gemm_tt.tuning_space("sm_80", "fp8", ODD) == []
    hopper = gemm_tt.tuning_space("sm_90", "fp8", ODD)
    assert hopper[0].constexprs() == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8}
    assert all(c.block_k >= 64 for arch in ("sm_80", "sm_90", "gfx942") for c in gemm_tt.configs(arch, "int8"))
    assert all(c.num_stages == 2 for c in gemm_tt.configs("gfx942", "fp8"))
    assert all(not c.tma for c in hopper)


def test_sm80_says_why_it_has_no_fp8_gemm() -> None:
    needs.module("triton")
    from hwbench.compile import stats
    from hwbench.kernels.gemm.gpu import triton_lowp

    variants = {v["name"]: v for v in triton_lowp.compile_variants("sm_80")}
    record = stats.variant_record("gemm", "sm_80", variants["gemm_fp8"], stats.triton_target("sm_80"))
    assert (record["status"], record["reason"]) == (
        "skipped",
        "no fp8 tensor cores on sm_80 (fp8 needs sm_89 or newer)",
    )
    assert "fn" in variants["gemm_int8"]  # int8 compiles there (mma s8)
    line = stats.summary_lines([record])[1]
    assert "skipped" in line and "no fp8 tensor cores on sm_80" in line


def test_a_shape_a_library_refuses_is_a_skipped_case_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A native raising NotApplicable (``ShapeUnsupported``) in prepare gives a ``skipped`` record
    saying which limit the shape breaks, not a runtime error."""
    from hwbench.core.errors import NotApplicable
    from hwbench.core.registry import get_backend
    from hwbench.run.case import CaseRequest, CaseRunner

    assert issubclass(lowp_natives.ShapeUnsupported, NotApplicable)
    backend = get_backend("cpu")
    why = lowp_natives.int_mm_unfit({"M": 333, "N": 517, "K": 259})

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise lowp_natives.ShapeUnsupported(why)

    monkeypatch.setattr(backend, "prepare", refuse)
    timing = {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3}
    request = CaseRequest("gemm", "numpy", "cpu", 0, "fp32", {"M": 333, "N": 517, "K": 259}, seed=1, timing=timing)
    record = CaseRunner().run(request)
    assert record["status"] == "skipped" and record["reason"] == why and "K=259" in why
