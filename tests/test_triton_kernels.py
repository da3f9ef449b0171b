"""The Triton kernels on the CPU under ``TRITON_INTERPRET=1``, against the float64 reference.

The interpreter must be switched on before Triton is imported, so the kernels run in one
child process (this test process keeps Triton compiled mode). Shapes are small and odd:
no dimension is a multiple of a block. bf16 is skipped: the interpreter multiplies the
raw bits of bfloat16 ``tl.dot`` operands (triton-lang/triton#11584, not supported by
Triton); bf16 is covered by ``hwbench compile`` (tests/test_compile.py) and on GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install 'hwbench[gpu-compile]')")
pytest.importorskip("torch", reason="the Triton interpreter runs on torch CPU tensors; torch is not installed")

GEMM_CASES = [
    ("fp16", 37, 45, 70),
    ("fp32", 37, 45, 70),
    ("tf32", 33, 17, 65),
    ("fp32", 1, 63, 129),
    ("fp16", 70, 33, 16),
]
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
    from hwbench.kernels.gemm import triton as gemm_tt
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
        [sys.executable, "-c", _CHILD, json.dumps(GEMM_CASES), json.dumps(ATTN_CASES)],
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
    from hwbench.kernels.gemm import triton as gemm_tt

    for dtype in gemm_tt.DTYPES:
        space = gemm_tt.configs(arch, dtype)
        assert 2 <= len(space) <= 6
        assert all(c.block_m % 16 == 0 and c.block_n % 16 == 0 and c.block_k % 16 == 0 for c in space)
    for dtype in attn_tt.DTYPES:
        for d in (40, 64, 128):
            for c in attn_tt.configs(arch, dtype, d):
                assert c.block_m % c.block_n == 0, c  # the causal split needs block-aligned diagonals
    assert attn_tt.block_d(40) == 64 and attn_tt.block_d(128) == 128 and attn_tt.block_d(8) == 16
