"""The Triton kernels on the CPU under ``TRITON_INTERPRET=1``, against the float64 reference.

The interpreter must be switched on before Triton is imported, so the kernels run in one
child process (this test process keeps Triton compiled mode). Shapes are small and odd:
no dimension is a multiple of a block. bf16 is skipped: the interpreter multiplies the
raw bits of bfloat16 ``tl.dot`` operands (triton-lang/triton#11584, not supported by
Triton); bf16 is covered by ``hwbench compile`` (tests/compile/test_compile.py) and on GPUs. The
persistent TMA GEMM runs here too (the interpreter takes tensor descriptors: zero-filled loads
and clipped stores past the edges); its generated code is read in tests/kernels/test_triton_codegen.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import needs
import pytest

needs.module("triton")
needs.module("torch", "the Triton interpreter runs on torch CPU tensors")

GEMM_CASES = [
    ("fp16", 37, 45, 70),
    ("fp32", 37, 45, 70),
    ("tf32", 33, 17, 65),
    ("fp32", 1, 63, 129),
    ("fp16", 70, 33, 16),
]
#: The persistent TMA GEMM: M anything, rows of N and K elements 16-byte multiples (as it needs);
#: 3 programs over 2 to 6 tiles each, so programs loop.
TMA_CASES = [("fp16", 37, 40, 72), ("tf32", 33, 20, 52), ("fp16", 1, 8, 8), ("fp32", 45, 36, 68)]
#: fp8's persistent TMA GEMM (B K-major, read through a descriptor over B^T): K a multiple of 16, N of 4.
FP8_TMA_CASES = [(37, 44, 80), (1, 8, 16), (70, 36, 48)]
ATTN_CASES = [
    (dtype, causal, d, sq, sk)
    for dtype in ("fp16", "fp32")
    for causal in (0, 1)
    for d in (64, 128)
    for sq, sk in ((37, 37), (45, 53 if not causal else 45))
] + [("fp32", 1, 40, 23, 23)]

_CHILD = textwrap.dedent("""
    import json, sys
    import torch
    from hwbench.run import parity
    from hwbench.kernels.gemm.gpu import triton as gemm_tt
    from hwbench.kernels.gemm.spec import KERNEL as GEMM
    from hwbench.kernels.attention import triton as attn_tt
    from hwbench.kernels.attention.spec import KERNEL as ATTN

    TD = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}
    out = {}
    for dtype, m, n, k in json.loads(sys.argv[1]):
        shape = {"M": m, "N": n, "K": k}
        inputs = GEMM.make_inputs(shape, dtype, 3)
        a, b = (torch.from_numpy(inputs[x]).to(TD[dtype]) for x in ("A", "B"))
        c = torch.full((m, n), float("nan"), dtype=TD[dtype])
        gemm_tt.launch(a, b, c, dtype, gemm_tt.Config(32, 32, 32, 2, 1, 1))
        res = parity.check(c.float().numpy(), GEMM.reference(inputs, shape), GEMM.tolerance(dtype, shape))
        out[f"gemm-{dtype}-{m}x{n}x{k}"] = [res.passed, res.max_abs_err, res.reason]
    for dtype, m, n, k in json.loads(sys.argv[3]):
        shape = {"M": m, "N": n, "K": k}
        inputs = GEMM.make_inputs(shape, dtype, 3)
        a, b = (torch.from_numpy(inputs[x]).to(TD[dtype]) for x in ("A", "B"))
        c = torch.full((m, n), float("nan"), dtype=TD[dtype])
        gemm_tt.launch(a, b, c, dtype, gemm_tt.Config(32, 16, 16, 2, 1, 1, tma=True), num_sms=3)
        res = parity.check(c.float().numpy(), GEMM.reference(inputs, shape), GEMM.tolerance(dtype, shape))
        out[f"gemm_tma-{dtype}-{m}x{n}x{k}"] = [res.passed, res.max_abs_err, res.reason]
    from hwbench.backends import torch_gpu_lowp
    from hwbench.core.backend import DeviceInfo
    from hwbench.kernels.gemm.gpu import triton_lowp

    hopper = DeviceInfo(backend="cuda", index=0, name="x", vendor="x", kind="gpu", arch="sm_90")
    for m, n, k in json.loads(sys.argv[4]):
        shape = {"M": m, "N": n, "K": k}
        inputs = GEMM.make_inputs(shape, "fp8", 3)
        tensors, c = torch_gpu_lowp.device_tensors(GEMM, inputs, shape, "fp8", hopper, "cpu")
        c.fill_(float("nan"))
        cfg = gemm_tt.Config(32, 16, 32, 2, 1, 1, tma=True)
        scales = (tensors["scale_A"], tensors["scale_B"])
        call = triton_lowp.plan(tensors["A"], tensors["B"], c, "fp8", cfg, scales, num_sms=3)
        call.run()
        res = parity.check(c.double().numpy(), GEMM.reference(inputs, shape), GEMM.tolerance("fp8", shape))
        out[f"gemm_fp8_tma-{m}x{n}x{k}"] = [res.passed, res.max_abs_err, res.reason, call.fn.__name__, call.grid]
    for dtype, causal, d, sq, sk in json.loads(sys.argv[2]):
        shape = {"batch": 1, "heads": 2, "seq_q": sq, "seq_k": sk, "head_dim": d, "causal": causal}
        inputs = ATTN.make_inputs(shape, dtype, 4)
        q, k, v = (torch.from_numpy(inputs[x]).to(TD[dtype]) for x in ("q", "k", "v"))
        o = torch.full_like(q, float("nan"))
        attn_tt.launch(q, k, v, o, causal, attn_tt.Config(32, 16, 1, 1))
        res = parity.check(o.float().numpy(), ATTN.reference(inputs, shape), ATTN.tolerance(dtype, shape))
        out[f"attention-{dtype}-c{causal}-d{d}-{sq}x{sk}"] = [res.passed, res.max_abs_err, res.reason]
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def interpreted() -> dict[str, list]:
    """Run every case once in a child with the interpreter on; results by case name."""
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, *(json.dumps(c) for c in (GEMM_CASES, ATTN_CASES, TMA_CASES, FP8_TMA_CASES))],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype,m,n,k", GEMM_CASES)
def test_gemm_interpreted_matches_reference(interpreted, dtype: str, m: int, n: int, k: int) -> None:
    passed, err, reason = interpreted[f"gemm-{dtype}-{m}x{n}x{k}"]
    assert passed, reason
    assert err is not None and err >= 0.0


@pytest.mark.parametrize("dtype,m,n,k", TMA_CASES)
def test_tma_gemm_interpreted_matches_reference(interpreted, dtype: str, m: int, n: int, k: int) -> None:
    passed, err, reason = interpreted[f"gemm_tma-{dtype}-{m}x{n}x{k}"]
    assert passed, reason


@pytest.mark.parametrize("m,n,k", FP8_TMA_CASES)
def test_fp8_tma_gemm_interpreted_matches_reference(interpreted, m: int, n: int, k: int) -> None:
    passed, err, reason, kernel, grid = interpreted[f"gemm_fp8_tma-{m}x{n}x{k}"]
    assert passed, reason
    assert kernel == "gemm_fp8_tma_kernel" and grid == [min(3, -(-m // 32) * -(-n // 16))]


@pytest.mark.parametrize("dtype,causal,d,sq,sk", ATTN_CASES)
def test_attention_interpreted_matches_reference(
    interpreted, dtype: str, causal: int, d: int, sq: int, sk: int
) -> None:
    passed, err, reason = interpreted[f"attention-{dtype}-c{causal}-d{d}-{sq}x{sk}"]
    assert passed, reason


@pytest.mark.skip(
    reason="Triton's interpreter does not support bfloat16 tl.dot (it multiplies the raw bits: "
    "triton-lang/triton#11584); bf16 is checked by hwbench compile and on GPUs"
)
def test_bf16_interpreted() -> None:
    raise AssertionError("unreachable")


def test_this_process_is_not_interpreting() -> None:
    assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "gfx90a", "gfx942"])
def test_tuning_spaces_are_well_formed(arch: str) -> None:
    from hwbench.kernels.attention import triton as attn_tt
    from hwbench.kernels.gemm.gpu import triton as gemm_tt

    for dtype in gemm_tt.DTYPES:
        space = gemm_tt.configs(arch, dtype)
        assert 2 <= len(space) <= 6
        assert all(c.block_m % 16 == 0 and c.block_n % 16 == 0 and c.block_k % 16 == 0 for c in space)
    for dtype in attn_tt.DTYPES:
        for d in (40, 64, 128):
            for c in attn_tt.configs(arch, dtype, d):
                assert c.block_m % c.block_n == 0, c  # the causal split needs block-aligned diagonals
    assert attn_tt.block_d(40) == 64 and attn_tt.block_d(128) == 128 and attn_tt.block_d(8) == 16


@pytest.mark.parametrize("arch", ["sm_90", "sm_100", "sm_80", "gfx942"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32", "tf32", "fp8", "int8"])
def test_gemm_tuning_space_lists_the_tma_kernel_on_sm90_and_newer_only(arch: str, dtype: str) -> None:
    from hwbench.kernels.gemm.gpu import triton as gemm_tt

    space = gemm_tt.tuning_space(arch, dtype, {"M": 4096, "N": 4096, "K": 4096})
    tma = [c for c in space if c.tma]
    assert bool(tma) == (arch in ("sm_90", "sm_100") and dtype not in ("fp32", "int8"))
    assert tma == gemm_tt.tma_configs(arch, dtype) and space[: len(tma)] == tma  # the TMA kernel first
    assert [c for c in space if not c.tma] == gemm_tt.configs(arch, dtype)  # the classic kernel is always there
    assert all(c.as_dict()["kernel"] == ("tma_persistent" if c.tma else "classic") for c in space)
    assert not any(c.note for c in space)


@pytest.mark.parametrize("shape", [{"M": 333, "N": 517, "K": 259}, {"M": 64, "N": 64, "K": 100}])
def test_gemm_falls_back_to_the_classic_kernel_where_tma_cannot_take_the_rows(shape: dict) -> None:
    from hwbench.kernels.gemm.gpu import triton as gemm_tt

    space = gemm_tt.tuning_space("sm_90", "bf16", shape)
    assert space and not any(c.tma for c in space)
    assert all("classic kernel" in c.as_dict()["note"] and "16 bytes" in c.as_dict()["note"] for c in space)
    assert gemm_tt.tuning_space("sm_90", "fp32", {"M": 7, "N": 4, "K": 12})[0].tma is False
    assert gemm_tt.tuning_space("sm_90", "tf32", {"M": 7, "N": 4, "K": 12})[0].tma is True  # 16-byte rows of fp32


def test_tma_gemm_refuses_tensors_it_cannot_describe() -> None:
    from hwbench.kernels import triton_compat as compat
    from hwbench.kernels.gemm.gpu import triton as gemm_tt

    cfg = gemm_tt.tma_configs("sm_90", "bf16")[0]
    a, b, c = compat.Pointer("bf16", (64, 64)), compat.Pointer("bf16", (64, 60)), compat.Pointer("bf16", (64, 60))
    with pytest.raises(ValueError, match="16 bytes"):
        gemm_tt.plan(a, b, c, "bf16", cfg, 132)
    shifted = compat.Pointer("bf16", (64, 64), address=8)
    with pytest.raises(ValueError, match="16-byte aligned"):
        gemm_tt.plan(a, shifted, compat.Pointer("bf16", (64, 64)), "bf16", cfg, 132)


def test_fp8_tma_gemm_reads_b_k_major_and_falls_back_where_tma_cannot_take_the_rows() -> None:
    from hwbench.kernels.gemm.gpu import triton as gemm_tt
    from hwbench.kernels.gemm.gpu import triton_lowp as lowp

    for shape, bad in (({"M": 64, "N": 64, "K": 100}, "K=100"), ({"M": 64, "N": 30, "K": 64}, "N=30")):
        space = gemm_tt.tuning_space("sm_90", "fp8", shape)
        assert [c for c in space if not c.tma] == space and len(space) == len(lowp.configs("sm_90", "fp8"))
        assert all(bad in c.note and "16 bytes" in c.note for c in space), [c.note for c in space]
    assert gemm_tt.tuning_space("sm_90", "fp8", {"M": 7, "N": 4, "K": 16})[0].tma  # 16 fp8 bytes, 4 fp32s
    cfg = lowp.tma_configs("sm_90", "fp8")[0]
    a, c = lowp.SizedPointer("fp8e4nv", (300, 32)), lowp.SizedPointer("fp32", (300, 48), itemsize=4)
    scales = (lowp.SizedPointer("fp32", (1,), itemsize=4),) * 2
    call = lowp.plan(a, lowp.KMajor("fp8e4nv", (32, 48)), c, "fp8", cfg, scales, 132)
    bt = call.args["bt_desc"]  # a descriptor over B^T: [N][K] row-major, the K-major B as stored
    assert call.fn is lowp.gemm_fp8_tma_kernel and call.grid == (3,)
    assert bt.base.shape == (48, 32) and bt.base.stride() == (32, 1) and bt.block_shape == (cfg.block_n, cfg.block_k)
    assert call.args["a_desc"].block_shape == (cfg.block_m, cfg.block_k)
    with pytest.raises(ValueError, match="K-major"):
        lowp.plan(a, lowp.SizedPointer("fp8e4nv", (32, 48)), c, "fp8", cfg, scales, 132)
    with pytest.raises(ValueError, match="16-byte aligned"):
        lowp.plan(a, lowp.KMajor("fp8e4nv", (32, 48), 8), c, "fp8", cfg, scales, 132)
    with pytest.raises(ValueError, match="16 bytes"):
        lowp.plan(lowp.SizedPointer("fp8e4nv", (300, 40)), lowp.KMajor("fp8e4nv", (40, 48)), c, "fp8", cfg, scales, 132)


def test_tma_gemm_grid_is_the_device_sms_or_the_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from hwbench.kernels import triton_compat as compat
    from hwbench.kernels.gemm.gpu import triton as gemm_tt

    cfg = gemm_tt.tma_configs("sm_90", "fp16")[0]  # 128 x 128 tiles
    big = [compat.Pointer("fp16", (4096, 4096)) for _ in range(3)]
    assert gemm_tt.plan(*big, "fp16", cfg, 132).grid == (132,)
    small = [compat.Pointer("fp16", (256, 256)) for _ in range(3)]
    assert gemm_tt.plan(*small, "fp16", cfg, 132).grid == (4,)  # never more programs than tiles

    class Props:
        multi_processor_count = 78

    class OnDevice(compat.Pointer):
        device = "cuda:1"

    seen: list[str] = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: seen.append(device) or Props())
    on_device = [OnDevice("fp16", (4096, 4096)) for _ in range(3)]
    call = gemm_tt.plan(*on_device, "fp16", cfg)
    assert call.grid == (78,) and seen == ["cuda:1"] and call.fn is gemm_tt.gemm_tma_kernel
