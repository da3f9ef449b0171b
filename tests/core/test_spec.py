"""Kernel specs: shape parsing and completion, flops, dtype rounding, inputs, references, tolerances."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hwbench.core.dtypes import DTYPE_BYTES, UNIT_ROUNDOFF, is_integer, round_to_dtype, storage_dtype
from hwbench.core.errors import UserError
from hwbench.core.kernel import PROFILES, parse_shape_arg
from hwbench.kernels.allreduce.spec import KERNEL as ALLREDUCE
from hwbench.kernels.attention.spec import KERNEL as ATTENTION
from hwbench.kernels.gemm.spec import KERNEL as GEMM
from hwbench.run import parity

# --- parse_shape_arg -------------------------------------------------------------------------


def test_parse_shape_arg_good() -> None:
    assert parse_shape_arg("gemm:M=1000,N=1000,K=1000") == ("gemm", {"M": 1000, "N": 1000, "K": 1000})
    assert parse_shape_arg(" attention : B=1 , H=8, S=1_024 ") == ("attention", {"B": 1, "H": 8, "S": 1024})
    assert parse_shape_arg("allreduce:count=-3") == ("allreduce", {"count": -3})  # range is complete()'s job


@pytest.mark.parametrize("text,value", [("true", 1), ("True", 1), ("FALSE", 0), ("false", 0)])
def test_parse_shape_arg_booleans(text: str, value: int) -> None:
    assert parse_shape_arg(f"attention:S=4,causal={text}") == ("attention", {"S": 4, "causal": value})


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("gemm", "expected KERNEL:NAME=INT"),  # missing colon
        ("gemm M=1", "expected KERNEL:NAME=INT"),
        (":M=1", "expected KERNEL:NAME=INT"),  # no kernel
        ("gemm:", "expected KERNEL:NAME=INT"),  # nothing after the colon
        ("gemm:M", "is not NAME=INT"),  # missing '='
        ("gemm:M=1,N", "is not NAME=INT"),
        ("gemm:M=1,", "is not NAME=INT"),  # trailing comma
        ("gemm:=5", "is not NAME=INT"),  # empty name
        ("gemm:M=x", "'x' is not an integer"),  # non-integer
        ("gemm:M=1.5", "'1.5' is not an integer"),
        ("gemm:M=", "'' is not an integer"),
        ("gemm:M=yes", "'yes' is not an integer"),
        ("gemm:M=1,M=2", "'M' is given twice"),  # duplicate key
    ],
)
def test_parse_shape_arg_malformed(text: str, fragment: str) -> None:
    with pytest.raises(UserError, match="malformed --shape") as info:
        parse_shape_arg(text)
    assert fragment in str(info.value)


# --- Kernel.complete -------------------------------------------------------------------------


def test_gemm_complete_with_aliases() -> None:
    assert GEMM.complete({"m": 2, "n": 3, "k": 4}) == {"M": 2, "N": 3, "K": 4}
    assert GEMM.complete({"M": 2, "n": 3, "K": 4}) == {"M": 2, "N": 3, "K": 4}


def test_gemm_complete_missing_k() -> None:
    with pytest.raises(UserError, match=r"gemm needs K="):
        GEMM.complete({"M": 2, "N": 3})


def test_gemm_complete_below_minimum() -> None:
    with pytest.raises(UserError, match="M=0 is below its minimum 1"):
        GEMM.complete({"M": 0, "N": 3, "K": 4})


def test_complete_rejects_dimension_given_twice_through_alias() -> None:
    with pytest.raises(UserError):
        GEMM.complete({"M": 1, "m": 2, "N": 3, "K": 4})


def test_attention_complete_s_sets_seq_q_and_seq_k_defaults_to_it() -> None:
    assert ATTENTION.complete({"S": 128}) == {
        "batch": 1,
        "heads": 1,
        "seq_q": 128,
        "seq_k": 128,
        "head_dim": 64,
        "causal": 0,
    }
    shape = ATTENTION.complete({"B": 2, "H": 8, "S": 100, "Sk": 50, "D": 32, "causal": 1})
    assert shape == {"batch": 2, "heads": 8, "seq_q": 100, "seq_k": 50, "head_dim": 32, "causal": 1}


def test_attention_complete_needs_seq_q() -> None:
    with pytest.raises(UserError, match="needs seq_q="):
        ATTENTION.complete({"B": 1})


@pytest.mark.parametrize("causal", [2, 5])
def test_attention_causal_must_be_0_or_1(causal: int) -> None:
    with pytest.raises(UserError, match=f"causal={causal}: use 0 or 1"):
        ATTENTION.complete({"S": 16, "causal": causal})


def test_attention_negative_causal_is_below_minimum() -> None:
    with pytest.raises(UserError, match="below its minimum"):
        ATTENTION.complete({"S": 16, "causal": -1})


def test_unknown_dimension_names_the_known_ones() -> None:
    with pytest.raises(UserError) as info:
        ATTENTION.complete({"S": 16, "window": 4})
    message = str(info.value)
    assert "no dimension 'window'" in message
    assert "batch, heads, seq_q, seq_k, head_dim, causal" in message
    with pytest.raises(UserError, match="its dimensions are M, N, K"):
        GEMM.complete({"M": 1, "N": 1, "K": 1, "L": 1})


def test_profile_shapes_are_complete() -> None:
    for kernel in (GEMM, ATTENTION, ALLREDUCE):
        for profile in PROFILES:
            shapes = kernel.shapes(profile)
            assert shapes
            for shape in shapes:
                assert kernel.complete(dict(shape)) == shape


# --- flops and bytes -------------------------------------------------------------------------


def test_gemm_flops_and_bytes() -> None:
    shape = {"M": 2, "N": 3, "K": 5}
    assert GEMM.flops(shape) == 60.0
    assert GEMM.flops({"M": 1024, "N": 1024, "K": 1024}) == 2.0 * 2**30
    assert GEMM.bytes_moved(shape, "fp32") == 4.0 * (10 + 15 + 6)
    assert GEMM.bytes_moved(shape, "bf16") == 2.0 * (10 + 15 + 6)


def test_attention_flops_4bhd_per_kept_pair() -> None:
    shape = {"batch": 2, "heads": 3, "seq_q": 5, "seq_k": 7, "head_dim": 11, "causal": 0}
    assert ATTENTION.flops(shape) == 4.0 * 2 * 3 * 5 * 7 * 11 == 9240.0
    # causal, 5 queries over 7 keys: query i keeps i + 1 keys, 1 + 2 + 3 + 4 + 5 = 15 pairs
    assert ATTENTION.flops({**shape, "causal": 1}) == 4.0 * 2 * 3 * 15 * 11


@pytest.mark.parametrize(("sq", "sk"), [(7, 300), (300, 7), (1, 1), (64, 64), (33, 17), (17, 33)])
def test_causal_attention_counts_the_pairs_its_mask_keeps(sq: int, sk: int) -> None:
    """The pairs counted are those the float64 reference keeps (not Sq*Sk/2): 7 queries over
    300 keys keep 28 pairs, 300 over 7 keep 2079."""
    shape = ATTENTION.complete({"seq_q": sq, "seq_k": sk, "head_dim": 2, "causal": 1})
    inputs = ATTENTION.make_inputs(shape, "fp64", 0)
    kept = 0
    for key in range(sk):  # a key changes a query's output only where the mask keeps the pair
        bumped = {**inputs, "v": inputs["v"].copy()}
        bumped["v"][..., key, :] += 1.0
        changed = ATTENTION.reference(bumped, shape) != ATTENTION.reference(inputs, shape)
        kept += int(changed.any(axis=-1).sum())
    assert ATTENTION.flops(shape) == 4.0 * kept * 2
    if (sq, sk) == (7, 300):
        assert kept == 28
    if (sq, sk) == (300, 7):
        assert kept == 2079


def test_allreduce_flops_and_bus_factor() -> None:
    shape = {"count": 1000, "ranks": 4}
    assert ALLREDUCE.flops(shape) == 3000.0
    assert ALLREDUCE.bytes_moved(shape, "fp16") == 2000.0
    assert ALLREDUCE.bus_factor(shape) == 1.5


# --- round_to_dtype --------------------------------------------------------------------------


@pytest.fixture
def wide_values() -> np.ndarray:
    rng = np.random.default_rng(1234)
    return np.concatenate(
        [rng.uniform(-4.0, 4.0, 2000), rng.standard_normal(2000) * 1e-3, rng.standard_normal(500) * 1e4]
    )


def test_bf16_values_have_low_16_bits_zero(wide_values) -> None:
    r = round_to_dtype(wide_values, "bf16")
    assert r.dtype == np.float64
    bits = r.astype(np.float32).view(np.uint32)
    assert np.all(bits & 0xFFFF == 0)
    assert np.all(r.astype(np.float32).astype(np.float64) == r)  # float32 holds them exactly
    assert np.all(np.abs(r - wide_values) <= UNIT_ROUNDOFF["bf16"] * np.abs(wide_values))


def test_tf32_values_have_low_13_bits_zero(wide_values) -> None:
    r = round_to_dtype(wide_values, "tf32")
    bits = r.astype(np.float32).view(np.uint32)
    assert np.all(bits & 0x1FFF == 0)
    assert np.count_nonzero(bits & 0xE000) > 0  # bits 13..15 are kept (10 significand bits, not 7)
    assert np.all(np.abs(r - wide_values) <= UNIT_ROUNDOFF["tf32"] * np.abs(wide_values))


def test_fp16_and_fp32_values_are_representable(wide_values) -> None:
    small = wide_values[:2000]  # within fp16 range
    r16 = round_to_dtype(small, "fp16")
    assert np.array_equal(r16.astype(np.float16).astype(np.float64), r16)
    assert np.all(np.abs(r16 - small) <= UNIT_ROUNDOFF["fp16"] * np.abs(small))
    r32 = round_to_dtype(wide_values, "fp32")
    assert np.array_equal(r32, wide_values.astype(np.float32).astype(np.float64))
    assert round_to_dtype(wide_values, "fp64") is wide_values


@pytest.mark.parametrize("dtype", ["bf16", "tf32", "fp16", "fp32"])
def test_rounding_is_idempotent(wide_values, dtype: str) -> None:
    once = round_to_dtype(wide_values[:2000], dtype)
    assert np.array_equal(round_to_dtype(once, dtype), once)


def test_bf16_and_tf32_round_half_to_even() -> None:
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20, -(1 + 3 * 2.0**-8)])
    assert round_to_dtype(x, "bf16").tolist() == [1.0, 1 + 2.0**-6, 1 + 2.0**-7, -(1 + 2.0**-6)]
    y = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-11 + 2.0**-20])
    assert round_to_dtype(y, "tf32").tolist() == [1.0, 1 + 2.0**-9, 1 + 2.0**-10]


def test_bf16_keeps_specials_and_overflows_to_inf() -> None:
    x = np.array([np.inf, -np.inf, 0.0, -0.0, 3.4e38])
    r = round_to_dtype(x, "bf16")
    assert r.tolist() == [np.inf, -np.inf, 0.0, 0.0, np.inf]
    assert math.copysign(1.0, r[3]) == -1.0
    assert np.isnan(round_to_dtype(np.array([np.nan]), "bf16")[0])


@pytest.mark.parametrize("dtype", ["bf16", "tf32"])
def test_nan_with_full_payload_stays_nan(dtype: str) -> None:
    nan = np.array([0x7FFFFFFF], dtype=np.uint32).view(np.float32).astype(np.float64)
    assert np.isnan(nan[0])
    assert np.isnan(round_to_dtype(nan, dtype)[0])


# --- inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kernel,shape",
    [
        (GEMM, {"M": 3, "N": 4, "K": 5}),
        (ATTENTION, {"batch": 1, "heads": 2, "seq_q": 3, "seq_k": 4, "head_dim": 5, "causal": 0}),
        (ALLREDUCE, {"count": 50, "ranks": 3}),
    ],
)
@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_make_inputs_deterministic_per_seed(kernel, shape, dtype: str) -> None:
    a = kernel.make_inputs(shape, dtype, seed=7)
    b = kernel.make_inputs(shape, dtype, seed=7)
    c = kernel.make_inputs(shape, dtype, seed=8)
    assert a.keys() == b.keys() == c.keys()
    for name in a:
        assert a[name].dtype == storage_dtype(dtype)
        assert np.array_equal(a[name], b[name])
    assert any(not np.array_equal(a[name], c[name]) for name in a)


def test_gemm_inputs_shapes_range_and_representable() -> None:
    inputs = GEMM.make_inputs({"M": 30, "N": 20, "K": 10}, "bf16", seed=0)
    assert inputs["A"].shape == (30, 10) and inputs["B"].shape == (10, 20)
    assert inputs["A"].dtype == np.float32
    for x in inputs.values():
        assert x.flags.c_contiguous
        assert np.all((x >= -1.0) & (x <= 1.0))
        assert np.all(x.view(np.uint32) & 0xFFFF == 0)
    assert not np.array_equal(inputs["A"][:10, :10], inputs["B"][:10, :10])  # different salts


def test_gemm_reference_is_float64_matmul() -> None:
    inputs = {"A": np.array([[1, 2], [3, 4]], dtype=np.float32), "B": np.array([[5, 6], [7, 8]], dtype=np.float32)}
    ref = GEMM.reference(inputs, {"M": 2, "N": 2, "K": 2})
    assert ref.dtype == np.float64
    assert ref.tolist() == [[19.0, 22.0], [43.0, 50.0]]
    shape = {"M": 7, "N": 5, "K": 9}
    inputs = GEMM.make_inputs(shape, "fp32", seed=3)
    ref = GEMM.reference(inputs, shape)
    a, b = inputs["A"].astype(np.float64), inputs["B"].astype(np.float64)
    by_hand = np.array([[sum(a[i, k] * b[k, j] for k in range(9)) for j in range(5)] for i in range(7)])
    np.testing.assert_allclose(ref, by_hand, rtol=0, atol=1e-14)


def _softmax_attention(q, k, v, causal):
    scores = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        sq, sk = scores.shape[-2:]
        scores = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return np.einsum("bhqk,bhkd->bhqd", weights / weights.sum(axis=-1, keepdims=True), v)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_reference_matches_softmax(causal: int) -> None:
    shape = {"batch": 2, "heads": 2, "seq_q": 6, "seq_k": 4, "head_dim": 8, "causal": causal}
    inputs = ATTENTION.make_inputs(shape, "fp32", seed=1)
    ref = ATTENTION.reference(inputs, shape)
    assert ref.shape == (2, 2, 6, 8) and ref.dtype == np.float64
    q, k, v = (inputs[n].astype(np.float64) for n in "qkv")
    np.testing.assert_allclose(ref, _softmax_attention(q, k, v, causal), rtol=0, atol=1e-13)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_reference_with_v_ones_is_ones(causal: int) -> None:
    shape = {"batch": 2, "heads": 3, "seq_q": 9, "seq_k": 9, "head_dim": 4, "causal": causal}
    inputs = ATTENTION.make_inputs(shape, "fp32", seed=0)
    inputs["v"] = np.ones_like(inputs["v"])
    np.testing.assert_allclose(ATTENTION.reference(inputs, shape), 1.0, rtol=0, atol=4e-16)


def test_attention_causal_first_row_is_v0() -> None:
    shape = {"batch": 2, "heads": 3, "seq_q": 5, "seq_k": 5, "head_dim": 4, "causal": 1}
    inputs = ATTENTION.make_inputs(shape, "fp32", seed=0)
    ref = ATTENTION.reference(inputs, shape)
    assert np.array_equal(ref[:, :, 0, :], inputs["v"][:, :, 0, :].astype(np.float64))
    # without the mask, row 0 mixes every value row
    full = ATTENTION.reference(inputs, {**shape, "causal": 0})
    assert not np.allclose(full[:, :, 0, :], ref[:, :, 0, :])


def test_allreduce_inputs_small_integers_and_exact_reference() -> None:
    shape = {"count": 1000, "ranks": 16}
    for dtype in ("fp16", "bf16", "fp32"):
        x = ALLREDUCE.make_inputs(shape, dtype, seed=5)["x"]
        assert x.shape == (16, 1000) and x.dtype == storage_dtype(dtype)
        assert np.all(x == np.round(x)) and np.all(np.abs(x) <= 8)
        ints = x.astype(np.int64)
        ref = ALLREDUCE.reference({"x": x}, shape)
        assert np.array_equal(ref, ints.sum(axis=0).astype(np.float64))
        # any order of additions in the storage dtype is exact
        acc = np.zeros(1000, dtype=x.dtype)
        for row in x[::-1]:
            acc = (acc + row).astype(x.dtype)
        assert np.array_equal(acc.astype(np.float64), ref)
    tol = ALLREDUCE.tolerance("fp32", shape)
    assert tol.exact and tol.atol == 0.0 and tol.rtol == 0.0


# --- tolerances ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [d for d in GEMM.dtypes if not is_integer(d)])
def test_gemm_tolerance_positive_and_growing_with_k(dtype: str) -> None:
    tols = [GEMM.tolerance(dtype, {"M": 8, "N": 8, "K": k}) for k in (1, 64, 1024, 16384)]
    assert all(t.atol > 0 and t.rtol > 0 and not t.exact for t in tols)
    atols = [t.atol for t in tols]
    assert atols == sorted(atols) and len(set(atols)) == 4
    assert len({t.rtol for t in tols}) == 1


def test_gemm_tolerance_value_and_dtype_order() -> None:
    k = 1024
    u32, u16 = 2.0**-24, 2.0**-11
    assert GEMM.tolerance("fp32", {"M": 1, "N": 1, "K": k}).atol == pytest.approx(2 * k * u32 + 4 * 32 * u32)
    assert GEMM.tolerance("fp16", {"M": 1, "N": 1, "K": k}).atol == pytest.approx(2 * k * u32 + 4 * 32 * u16)
    by_dtype = {d: GEMM.tolerance(d, {"M": 1, "N": 1, "K": k}).atol for d in GEMM.dtypes}
    assert by_dtype["fp64"] < by_dtype["fp32"] < by_dtype["fp16"] < by_dtype["bf16"]


@pytest.mark.parametrize("dtype", ATTENTION.dtypes)
def test_attention_tolerance_positive_and_growing_with_seq_k(dtype: str) -> None:
    base = {"batch": 1, "heads": 1, "seq_q": 16, "head_dim": 64, "causal": 0}
    small = ATTENTION.tolerance(dtype, {**base, "seq_k": 16})
    large = ATTENTION.tolerance(dtype, {**base, "seq_k": 65536})
    assert 0 < small.atol < large.atol
    assert small.rtol > 0


def test_memory_bytes_counts_storage_and_float64_twice() -> None:
    shape = {"M": 10, "N": 10, "K": 10}
    assert GEMM.memory_bytes(shape, "fp32") == 300 * (4 + 8) * 2
    assert GEMM.memory_bytes(shape, "bf16") == 300 * (4 + 8) * 2  # bf16 is held in float32
    assert DTYPE_BYTES["bf16"] == 2


def test_describe_shape() -> None:
    assert GEMM.describe_shape({"K": 3, "M": 1, "N": 2}) == "M=1,N=2,K=3"


# --- attention parity: discriminating inputs -------------------------------------------------

BLOCK = 64  # keys per block of a flash-attention kernel (Triton's BLOCK_N, SDPA flash's tiles)
LONG = {"batch": 1, "heads": 1, "seq_q": 4096, "seq_k": 4096, "head_dim": 64, "causal": 0}


def _round_weights(p: np.ndarray, dtype: str) -> np.ndarray:
    """float32 weights rounded to ``dtype``; fp16's subnormals (below 2**-14) rounded by hand, to
    multiples of 2**-24, where NumPy's own conversion of them is slow."""
    if dtype != "fp16":
        return round_to_dtype(p, dtype).astype(np.float32)
    tiny = p < 2.0**-14
    normal = np.where(tiny, np.float32(1.0), p).astype(np.float16).astype(np.float32)
    return np.where(tiny, np.round(p * np.float32(2.0**24)) * np.float32(2.0**-24), normal)


def _flash_attention(inputs: dict[str, np.ndarray], dtype: str, block: int = 512) -> np.ndarray:
    """Flash attention as the GPU kernels compute it, on one (batch, head): float32 scores, an online
    softmax over blocks of keys in float32, the weights rounded to ``dtype`` before P @ V (float32
    sums), the output rounded to ``dtype``."""
    q, k, v = (inputs[n][0, 0].astype(np.float32) for n in "qkv")
    q *= np.float32(1.0 / math.sqrt(q.shape[1]))
    m = np.full((q.shape[0], 1), -np.inf, dtype=np.float32)
    total = np.zeros((q.shape[0], 1), dtype=np.float32)
    acc = np.zeros(q.shape, dtype=np.float32)
    for start in range(0, k.shape[0], block):
        s = q @ k[start : start + block].T
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        p, alpha = np.exp(s - m_new), np.exp(m - m_new)
        total = total * alpha + p.sum(axis=1, keepdims=True)
        acc = acc * alpha + _round_weights(p, dtype) @ v[start : start + block]
        m = m_new
    return round_to_dtype(acc / total, dtype)[None, None]


def _without_each_block(inputs: dict[str, np.ndarray], dtype: str) -> list[np.ndarray]:
    """For each block of 64 keys, the exact output of a kernel that skips it, rounded to ``dtype``."""
    q, k, v = (inputs[n][0, 0].astype(np.float64) for n in "qkv")
    scores = (q @ k.T) / math.sqrt(q.shape[1])
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    total, weighted = weights.sum(axis=1), weights @ v
    blocks = weights.reshape(q.shape[0], -1, BLOCK)  # (query, block, key in block)
    outs = []
    for first in range(0, blocks.shape[1], 16):  # 16 blocks at a time bound the memory
        part = blocks[:, first : first + 16]
        values = v.reshape(-1, BLOCK, v.shape[1])[first : first + 16]
        dropped = np.matmul(part.transpose(1, 0, 2), values)  # (block, query, dim)
        kept = (weighted - dropped) / (total - part.sum(axis=2).T)[:, :, None]
        outs += [round_to_dtype(out, dtype)[None, None] for out in kept]
    return outs


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_attention_parity_fails_a_kernel_that_skips_one_block_of_keys(dtype: str) -> None:
    inputs = ATTENTION.make_inputs(LONG, dtype, seed=0)
    ref, tol = ATTENTION.reference(inputs, LONG), ATTENTION.tolerance(dtype, LONG)
    honest = parity.check(_flash_attention(inputs, dtype), ref, tol)
    assert honest.passed, honest.reason
    assert honest.max_abs_err is not None and honest.max_abs_err < tol.atol + tol.rtol * 0.5  # well inside
    for number, skipped in enumerate(_without_each_block(inputs, dtype)):
        assert not parity.check(skipped, ref, tol).passed, f"skipping keys {number * BLOCK}..+{BLOCK} passed"
    assert np.abs(ref).min() > 10 * tol.atol  # no output is lost in atol: outputs of 0 fail


def test_attention_inputs_make_a_peaked_softmax() -> None:
    shape = {**LONG, "seq_q": 256}
    inputs = ATTENTION.make_inputs(shape, "fp32", seed=0)
    q, k = (inputs[n][0, 0].astype(np.float64) for n in "qk")
    scores = q @ k.T / 8.0
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    assert 3.5 < scores.std() < 4.5  # Q_BOUND * K_BOUND / 3
    assert np.median(weights.max(axis=1)) > 0.2  # uniform would be 1 / 4096
    for name, (low, high) in {"q": (-4, 4), "k": (-3, 3), "v": (0.5, 1.5)}.items():
        assert low <= inputs[name].min() and inputs[name].max() <= high
    assert ATTENTION.inputs_version == 2
