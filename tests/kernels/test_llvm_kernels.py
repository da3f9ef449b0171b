"""Parity and plumbing tests for the llvmlite CPU kernels (GEMM, attention, vector math).

Tolerances:
* GEMM uses the classical a-priori bound for a recursively summed dot product,
  ``|fl(A@B) - A@B| <= gamma_K * (|A| @ |B|)`` elementwise with ``gamma_K ~ K*u``;
  we allow ``2*K*u`` (the kc-blocked sum adds one rounding per block). It holds
  for any inputs, yet an indexing bug (O(1) relative error) cannot hide under it.
* Attention outputs are convex combinations of rows of V, so errors are
  measured against ``max|V|``: ``64 * u * sqrt(D)`` covers the score dot
  products, the polynomial exp (~1 ulp), the online rescaling and the division
  (fp32: ~4e-5 at D=128, fp64: ~1e-13 < 1e-12).
"""

from __future__ import annotations

import ctypes
import math
import platform

import llvmlite.binding as llvm
import numpy as np
import pytest
from llvmlite import ir

from hwbench.kernels.attention import llvm as attn
from hwbench.kernels.gemm import llvm as gemm
from hwbench.kernels.llvmir import irutil, jit, vecmath
from hwbench.kernels.llvmir.gpu import NVPTXTarget
from hwbench.kernels.llvmir.target import CPUTarget, host_target

NP = {"fp32": np.float32, "fp64": np.float64}
U = {"fp32": 2.0**-24, "fp64": 2.0**-53}


@pytest.mark.parametrize("module", [gemm, attn], ids=["gemm", "attention"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("target", [CPUTarget, NVPTXTarget], ids=["cpu", "nvptx-simt"])
def test_build_produces_valid_ir(module, dtype: str, target) -> None:
    mod = module.build(target(), dtype)  # a SIMT target gets the work-group kernel in its default configuration
    parsed = llvm.parse_assembly(str(mod))
    parsed.verify()
    assert parsed.get_function(module.KERNEL) is not None


def test_cpu_vector_width_follows_features() -> None:
    t = CPUTarget(features="+avx512f,+avx2")
    assert (t.vector_width("fp32"), t.vector_width("fp64")) == (16, 8)
    assert CPUTarget(features="+avx2,-avx512f").vector_width("fp32") == 8
    assert CPUTarget(features="+sse2").vector_width("fp32") == 4


NARROW_TARGETS = [("x86-64-v3", "+avx2,+fma,-avx512f"), ("x86-64", "+sse2")]


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 features")
@pytest.mark.parametrize("cpu,features", NARROW_TARGETS, ids=["avx2", "sse2"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_kernels_correct_at_narrower_vector_widths(cpu: str, features: str, dtype: str) -> None:
    target = CPUTarget(cpu_name=cpu, features=features)
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-1, 1, (37, 29)).astype(NP[dtype]), rng.uniform(-1, 1, (29, 45)).astype(NP[dtype])
    pk = gemm.prepare_cpu({"A": a, "B": b}, {"M": 37, "N": 45, "K": 29}, dtype, target=target)
    pk.run()
    np.testing.assert_allclose(pk.output, a.astype(np.float64) @ b, atol=1e-5)
    assert pk.config["VW"] == target.vector_width(dtype) < 16
    q, k, v = (rng.standard_normal((1, 2, s, 24)).astype(NP[dtype]) for s in (19, 27, 27))
    shape = dict(batch=1, heads=2, seq_q=19, seq_k=27, head_dim=24, causal=1)
    pk = attn.prepare_cpu({"q": q, "k": k, "v": v}, shape, dtype, target=target)
    pk.run()
    np.testing.assert_allclose(pk.output, _attention_reference(q, k, v, 1), atol=1e-5)


GEMM_SHAPES = [
    (1, 1, 1),
    (1, 7, 33),
    (7, 1, 100),
    (33, 100, 1),
    (100, 33, 7),
    (64, 1000, 37),
    (1023, 17, 65),
    (257, 1023, 600),
]


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("m,n,k", GEMM_SHAPES)
def test_gemm_matches_float64_reference(m: int, n: int, k: int, dtype: str) -> None:
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a = rng.uniform(-1, 1, (m, k)).astype(NP[dtype])
    b = rng.uniform(-1, 1, (k, n)).astype(NP[dtype])
    pk = gemm.prepare_cpu({"A": a, "B": b}, {"M": m, "N": n, "K": k}, dtype)
    pk.output[...] = np.nan  # run() must overwrite, not accumulate into, C
    pk.run()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = 2 * k * U[dtype] * (np.abs(a64) @ np.abs(b64))
    err = np.abs(pk.output - a64 @ b64)
    assert pk.output.shape == (m, n) and pk.output.dtype == NP[dtype]
    assert np.all(err <= bound), f"max err {err.max():.3g}, bound {bound.max():.3g}"


def test_gemm_thread_count_does_not_change_result() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.random((300, 200), np.float32), rng.random((200, 700), np.float32)
    shape = {"M": 300, "N": 700, "K": 200}
    one = gemm.prepare_cpu({"A": a, "B": b}, shape, "fp32", threads=1)
    two = gemm.prepare_cpu({"A": a, "B": b}, shape, "fp32", threads=2)
    one.run()
    two.run()
    two.run()
    np.testing.assert_array_equal(one.output, two.output)
    assert one.config["threads"] == 1 and two.config["threads"] == 2


def _attention_reference(q, k, v, causal: int) -> np.ndarray:
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], dtype=bool), k=1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


ATTN_SHAPES = [
    (1, 1, 1, 1, 1),
    (1, 2, 1, 33, 64),
    (2, 1, 7, 7, 7),
    (1, 2, 33, 100, 40),
    (1, 1, 100, 33, 63),
    (1, 2, 64, 64, 80),
    (1, 1, 40, 130, 128),
]


@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("b,h,sq,sk,d", ATTN_SHAPES)
def test_attention_matches_float64_reference(b, h, sq, sk, d, dtype: str, causal: int) -> None:
    rng = np.random.default_rng(b + 3 * h + 5 * sq + 7 * sk + 11 * d)
    q, k, v = (rng.standard_normal((b, h, s, d)).astype(NP[dtype]) for s in (sq, sk, sk))
    shape = dict(batch=b, heads=h, seq_q=sq, seq_k=sk, head_dim=d, causal=causal)
    pk = attn.prepare_cpu({"q": q, "k": k, "v": v}, shape, dtype)
    pk.output[...] = np.nan
    pk.run()
    err = np.abs(pk.output - _attention_reference(q, k, v, causal)).max()
    assert err <= 64 * U[dtype] * max(1.0, math.sqrt(d)) * np.abs(v).max(), err


def test_attention_large_scores_do_not_overflow() -> None:
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 1, 20, 16)).astype(np.float32) * f for f in (30, 30, 1))
    shape = dict(batch=1, heads=1, seq_q=20, seq_k=20, head_dim=16, causal=1)
    pk = attn.prepare_cpu({"q": q, "k": k, "v": v}, shape, "fp32")
    pk.run()
    assert np.all(np.isfinite(pk.output))
    np.testing.assert_allclose(pk.output, _attention_reference(q, k, v, 1), atol=1e-4)


def _vector_op_kernel(dtype: str, op) -> tuple[callable, int]:
    """Compile ``y[i:i+W] = op(x[i:i+W])`` over whole vectors; returns (fn, W)."""
    target = CPUTarget()
    width = target.vector_width(dtype)
    t = irutil.scalar_type(dtype)
    mod = target.new_module(f"vecop_{dtype}_{op.__name__}")
    fn = ir.Function(mod, ir.FunctionType(irutil.VOID, [irutil.PTR, irutil.PTR, irutil.I64]), name="vecop")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    x, y, n = fn.args
    with irutil.for_range(b, irutil.i64(0), n, width) as i:
        res = op(b, irutil.load_vec(b, x, t, i, width))
        if not isinstance(res.type, ir.VectorType):
            res = irutil.splat(b, res, width)
        irutil.store_vec(b, res, y, i)
    b.ret_void()
    compiled = jit.compile_module(mod)
    cfn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(compiled.function_address("vecop"))
    cfn.keepalive = compiled
    return cfn, width


def _apply(dtype: str, op, x: np.ndarray) -> np.ndarray:
    fn, width = _vector_op_kernel(dtype, op)
    pad = (-x.size) % width
    xp = np.concatenate([x, np.zeros(pad, x.dtype)])
    y = np.empty_like(xp)
    fn(xp.ctypes.data, y.ctypes.data, xp.size)
    return y[: x.size]


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_vector_exp_accuracy_and_specials(dtype: str) -> None:
    npd = NP[dtype]
    finfo = np.finfo(npd)
    x = np.concatenate(
        [
            np.linspace(-1000, 1000, 20001),
            np.linspace(-20, 20, 40001),
            [-np.inf, np.inf, np.nan, 0.0, -0.0, -1000.0, 1e-30],
        ]
    ).astype(npd)
    y = _apply(dtype, vecmath.exp, x)
    with np.errstate(over="ignore", under="ignore"):
        ref = np.exp(x.astype(np.float64))
    normal = (ref >= finfo.tiny) & (ref <= finfo.max)
    rel = np.abs(y[normal] - ref[normal]) / ref[normal]
    assert rel.max() < (1e-6 if dtype == "fp32" else 1e-14), rel.max()
    small = np.isfinite(ref) & (ref < finfo.tiny)
    assert np.all(np.abs(y[small] - ref[small]) <= finfo.smallest_subnormal)
    assert np.all(y[ref > finfo.max] == np.inf)
    assert y[x == -np.inf][0] == 0.0 and np.all(y[x == -1000.0] == 0.0)
    assert np.isnan(y[np.isnan(x)]).all()


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_horizontal_reductions(dtype: str) -> None:
    rng = np.random.default_rng(3)
    width = CPUTarget().vector_width(dtype)
    x = rng.standard_normal(4 * width).astype(NP[dtype])
    mx = _apply(dtype, vecmath.hmax, x).reshape(-1, width)
    sm = _apply(dtype, vecmath.hsum, x).reshape(-1, width)
    np.testing.assert_array_equal(mx[:, 0], x.reshape(-1, width).max(axis=1))
    np.testing.assert_allclose(sm[:, 0], x.reshape(-1, width).sum(axis=1), rtol=1e-5)


def test_prepared_kernels_are_cached_per_kernel_and_dtype() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.random((5, 6), np.float32), rng.random((6, 7), np.float32)
    gemm.prepare_cpu({"A": a, "B": b}, {"M": 5, "N": 7, "K": 6}, "fp32")
    before = jit.cache_size()
    a2, b2 = rng.random((9, 3), np.float32), rng.random((3, 4), np.float32)
    again = gemm.prepare_cpu({"A": a2, "B": b2}, {"M": 9, "N": 4, "K": 3}, "fp32")
    assert again.compile_s == 0.0 and jit.cache_size() == before
    assert {"MR", "NR", "VW", "mc", "nc", "kc", "grid", "threads"} <= set(again.config)


def test_rejects_bad_inputs() -> None:
    a = np.ones((4, 6), np.float32)[:, ::2]
    with pytest.raises(ValueError):
        gemm.prepare_cpu({"A": a, "B": np.ones((3, 2), np.float32)}, {"M": 4, "N": 2, "K": 3}, "fp32")
    with pytest.raises(ValueError):
        gemm.prepare_cpu({"A": np.ones((2, 2)), "B": np.ones((2, 2))}, {"M": 2, "N": 2, "K": 2}, "fp16")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_a_block_longer_than_the_workspace_is_packed_a_piece_at_a_time(dtype: str) -> None:
    """The side that is not re-read (A's rows for a vector tile) may be longer than the workspace
    holds: each program packs B once per kc slice and A a workspace-long piece at a time."""
    target = host_target()
    tile = gemm.tile(target, dtype)
    m, n, k = 2 * tile.max_block["mc"] + 7, tile.nr + 5, 70
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (m, k)).astype(NP[dtype])
    b = rng.uniform(-1, 1, (k, n)).astype(NP[dtype])
    blocks = {"mc": m, "nc": 2 * tile.nr, "kc": 32}  # one program row, three pieces, three kc slices
    pk = gemm.prepare_cpu({"A": a, "B": b}, {"M": m, "N": n, "K": k}, dtype, blocking=blocks)
    pk.output[...] = np.nan
    pk.run()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    err = np.abs(pk.output - a64 @ b64)
    assert pk.config["mc"] == m and np.all(err <= 2 * k * U[dtype] * (np.abs(a64) @ np.abs(b64)))


def test_the_derived_blocking_packs_the_re_read_block_for_the_longest_other_side() -> None:
    """2048^3 on two workers: B's blocks in L2, A's rows split only so that each worker has two
    programs (not to fit a workspace), so each B block is packed by two programs, not six."""
    target = host_target()
    shape = {"M": 2048, "N": 2048, "K": 2048}
    blk = gemm.blocking(shape, "fp32", target, workers=2)
    tile = gemm.tile(target, "fp32")
    if tile.b_resident or not tile.nr_vectors:
        pytest.skip(f"the host's fp32 tile ({tile.path}) keeps B's micro-panel resident")
    columns, rows = -(-2048 // blk["nc"]), -(-2048 // blk["mc"])
    assert rows * columns >= 4 and rows == -(-4 // columns)
    assert blk["mc"] > tile.max_block["mc"] or rows * tile.max_block["mc"] >= 2048
