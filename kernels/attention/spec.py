"""Attention forward: O = softmax(Q K^T / sqrt(D)) V, optionally causal (top-left aligned)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from hwbench.core.dtypes import DTYPE_BYTES, UNIT_ROUNDOFF, accumulator, round_to_dtype, storage_dtype
from hwbench.core.errors import UserError
from hwbench.core.kernel import Kernel, Native, Shape, ShapeParam, Source, Tolerance, seeded_uniform, sqrt_int

#: Bounds of the inputs (inputs version 2): q in [-Q_BOUND, Q_BOUND], k in [-K_BOUND, K_BOUND],
#: v in [V_LOW, V_HIGH]. Scores q.k / sqrt(D) then spread with standard deviation
#: Q_BOUND * K_BOUND / 3 = 4 whatever D: each query's softmax is peaked (its largest weight about a
#: third, a few tens of keys carry it), so an output that misses one block of 64 keys is far outside
#: the tolerance, and every output, a mean of values of at least V_LOW, is far above atol.
Q_BOUND, K_BOUND = 4.0, 3.0
V_LOW, V_HIGH = 0.5, 1.5


def uniform_inputs(shape: tuple[int, ...], dtype: str, seed: int, salt: int, low: float, high: float) -> np.ndarray:
    """Uniform values in [low, high] rounded to ``dtype``, in host storage dtype."""
    unit = seeded_uniform(shape, "fp64", seed, salt)  # [-1, 1) in float64
    values = round_to_dtype(low + (high - low) * (unit + 1.0) / 2.0, dtype)
    return np.ascontiguousarray(values.astype(storage_dtype(dtype)))


def kept_pairs(shape: Shape) -> float:
    """Query-key pairs the mask keeps: Sq*Sk without one; with the top-left causal mask
    query i keeps keys 0..min(i, Sk - 1)."""
    sq, sk = shape["seq_q"], shape["seq_k"]
    if not shape["causal"]:
        return float(sq * sk)
    full = min(sq, sk)  # queries 0..full-1 keep i + 1 keys; the rest keep all Sk
    return float(full * (full + 1) // 2 + (sq - full) * sk)


def _attn(b: int, h: int, sq: int, sk: int, d: int, causal: int) -> dict[str, int]:
    return {"batch": b, "heads": h, "seq_q": sq, "seq_k": sk, "head_dim": d, "causal": causal}


#: SDPA on a GPU, the native of every backend torch drives GPUs through.
TORCH_SDPA_DEVICE = Native(
    "torch_sdpa",
    "torch",
    "torch scaled_dot_product_attention (flash, efficient, cuDNN or math: recorded)",
    ("fp16", "bf16", "fp32"),
    "natives:torch_sdpa_device",
)


class Attention(Kernel):
    """Scaled dot-product attention; q, k, v are (batch, heads, seq, head_dim)."""

    name = "attention"
    inputs_version = 2  # 1: q, k and v uniform in [-1, 1), a near-uniform softmax with outputs near 0
    description = "O = softmax(Q K^T / sqrt(D)) V; causal keeps keys j <= i (as torch's is_causal)"
    params = (
        ShapeParam("batch", "batch size", default=1, aliases=("B", "b")),
        ShapeParam("heads", "attention heads", default=1, aliases=("H", "h")),
        ShapeParam("seq_q", "query length", aliases=("Sq", "S", "seq")),
        ShapeParam("seq_k", "key/value length (default: seq_q)", default=0, aliases=("Sk",), minimum=0),
        ShapeParam("head_dim", "head dimension", default=64, aliases=("D", "d")),
        ShapeParam("causal", "1 for a causal mask, 0 for none", default=0, minimum=0),
    )
    dtypes = ("fp32", "fp64", "fp16", "bf16")
    profiles = {
        "quick": (_attn(1, 8, 512, 512, 64, 0), _attn(1, 8, 512, 512, 64, 1), _attn(2, 3, 77, 77, 40, 1)),
        "standard": (
            _attn(1, 8, 1024, 1024, 64, 0),
            _attn(1, 8, 1024, 1024, 64, 1),
            _attn(2, 16, 1024, 1024, 128, 1),
            _attn(1, 8, 1, 1000, 64, 0),
            _attn(2, 3, 333, 333, 80, 1),
        ),
        "full": (
            _attn(1, 8, 1024, 1024, 64, 0),
            _attn(1, 8, 1024, 1024, 64, 1),
            _attn(4, 32, 4096, 4096, 128, 1),
            _attn(4, 32, 4096, 4096, 128, 0),
            _attn(1, 16, 8192, 8192, 64, 1),
            _attn(2, 3, 333, 333, 80, 1),
        ),
    }

    sources = (
        Source(
            "opencl",
            "opencl-c",
            "opencl",
            ("fp32", "fp64", "fp16"),
            "OpenCL C: flash attention with online softmax, query rows in vector lanes",
        ),
        Source(
            "triton",
            "triton",
            "triton",
            ("fp16", "bf16", "fp32"),
            "Triton attention (kernels/attention/triton.py), tuned over a small per-arch space",
        ),
        Source(
            "llvm",
            "llvmlite",
            "llvm",
            ("fp32", "fp64", "fp16", "bf16"),
            "flash attention in llvmlite IR: SIMD programs on the CPU (fp32, fp64), work-groups on SIMT targets",
        ),
    )
    natives = {
        "cpu": (
            Native(
                "torch_sdpa",
                "torch",
                "torch.nn.functional.scaled_dot_product_attention on the CPU",
                ("fp32", "fp64"),
                "natives:torch_sdpa_host",
                listed_with=("torch",),
            ),
            Native(
                "numpy_attention",
                "numpy",
                "NumPy softmax(QK^T)V (torch is not installed, so no SDPA baseline)",
                ("fp32", "fp64"),
                "natives:numpy_attention",
                unless=("torch",),
            ),
        ),
        "cuda": (TORCH_SDPA_DEVICE,),
        "rocm": (TORCH_SDPA_DEVICE,),
    }

    def output_shape(self, shape: Shape) -> tuple[int, ...]:
        return (shape["batch"], shape["heads"], shape["seq_q"], shape["head_dim"])

    def derive(self, shape: dict[str, int]) -> dict[str, int]:
        if shape["seq_k"] == 0:
            shape["seq_k"] = shape["seq_q"]
        if shape["causal"] not in (0, 1):
            raise UserError(f"attention causal={shape['causal']}: use 0 or 1")
        return shape

    def flops(self, shape: Shape) -> float:
        # 4*D flops per query-key pair the mask keeps (QK^T and PV, 2*D each), as FlashAttention's
        # benchmarks count; causal keeps, top-left aligned, min(i + 1, Sk) keys for query i.
        return 4.0 * shape["batch"] * shape["heads"] * kept_pairs(shape) * shape["head_dim"]

    def bytes_moved(self, shape: Shape, dtype: str) -> float:
        bh, d = shape["batch"] * shape["heads"], shape["head_dim"]
        return float(DTYPE_BYTES[dtype] * bh * d * (2 * shape["seq_q"] + 2 * shape["seq_k"]))

    def make_inputs(self, shape: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        b, h, d = shape["batch"], shape["heads"], shape["head_dim"]
        q_shape, kv_shape = (b, h, shape["seq_q"], d), (b, h, shape["seq_k"], d)
        return {
            "q": uniform_inputs(q_shape, dtype, seed, 1, -Q_BOUND, Q_BOUND),
            "k": uniform_inputs(kv_shape, dtype, seed, 2, -K_BOUND, K_BOUND),
            "v": uniform_inputs(kv_shape, dtype, seed, 3, V_LOW, V_HIGH),
        }

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Shape) -> np.ndarray:
        q, k, v = (inputs[name].astype(np.float64) for name in ("q", "k", "v"))
        sq, sk = shape["seq_q"], shape["seq_k"]
        q *= 1.0 / math.sqrt(shape["head_dim"])  # scaled once, D per query rather than Sk
        masked = np.triu(np.ones((sq, sk), dtype=bool), k=1) if shape["causal"] else None
        out = np.empty(q.shape, dtype=np.float64)
        for b in range(q.shape[0]):  # one (batch, head) at a time bounds memory to Sq x Sk
            for h in range(q.shape[1]):
                weights = q[b, h] @ k[b, h].T
                if masked is not None:
                    np.copyto(weights, -np.inf, where=masked)
                weights -= weights.max(axis=1, keepdims=True)
                np.exp(weights, out=weights)
                # normalised after the product: Sq x D divisions rather than Sq x Sk
                out[b, h] = (weights @ v[b, h]) / weights.sum(axis=1, keepdims=True)
        return out

    def tolerance(self, dtype: str, shape: Shape) -> Tolerance:
        """Each output is a weighted mean of values in [V_LOW, V_HIGH], so |O| <= V_HIGH, and:

        - a score is a sum of D products, together at most Q_BOUND * K_BOUND * sqrt(D) after the
          scale; summed in the accumulator its error is about sqrt(D) * u_acc times that
          (rounding errors of D terms add as a random walk), D * Q_BOUND * K_BOUND * u_acc. exp
          turns a score's absolute error into its weight's relative error, which moves O by at
          most that times the values' range V_HIGH - V_LOW;
        - exp, the running rescale (once per block of keys: sqrt(Sk) as a random walk) and the
          final division each add a few u_acc relative: (64 + sqrt(Sk)) * u_acc * V_HIGH;
        - the weights rounded to a narrow dtype before P @ V (flash attention's P) each move by at
          most u_out relative, so O by at most u_out * V_HIGH: 4 u_out * V_HIGH allows a few roundings;
        - O rounded to its dtype: relative, rtol = 4 u_out.
        """
        u_acc, u_out = UNIT_ROUNDOFF[accumulator(dtype)], UNIT_ROUNDOFF[dtype]
        scores = shape["head_dim"] * Q_BOUND * K_BOUND * u_acc * (V_HIGH - V_LOW)
        steps = (64.0 + sqrt_int(shape["seq_k"])) * u_acc * V_HIGH
        return Tolerance(atol=scores + steps + 4.0 * u_out * V_HIGH, rtol=4.0 * u_out)


KERNEL = Attention()
