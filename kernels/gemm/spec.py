"""GEMM: C = A @ B with A (M, K) and B (K, N); 2*M*N*K flops (operations, for int8)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hwbench.core.dtypes import DTYPE_BYTES, TABLE, UNIT_ROUNDOFF, accumulator, is_integer, output_dtype, storage_dtype
from hwbench.core.kernel import Kernel, Native, Shape, ShapeParam, Source, Tolerance, seeded_uniform, sqrt_int

TORCH_DTYPES = ("fp16", "bf16", "fp32", "tf32", "fp64")
TORCH_MISSING = "torch is not installed (pip install torch)"
#: Per-tensor scales of the fp8 implementations: operand X is kept on the device as X * 2**e (exact:
#: |X| <= 1 stays within e4m3's range, e4m3fnuz's included) and its scale is 2**-e.
FP8_SCALE_EXPONENTS = {"A": 6, "B": 7}
#: Unit roundoff of the fp8 tensor cores' own accumulation within one instruction group (about 14
#: significand bits on Hopper, reported for H800 in DeepSeek-V3's technical report, section 3.3.2).
FP8_TENSOR_CORE_ROUNDOFF = 2.0**-14
PYCLBLAST_MISSING = (
    "pyclblast is not installed (pip install 'hwbench[clblast]'; "
    "building it needs CLBlast: apt-get install libclblast-dev ocl-icd-opencl-dev)"
)


def _mnk(m: int, n: int, k: int) -> dict[str, int]:
    return {"M": m, "N": n, "K": k}


class GEMM(Kernel):
    """Dense matrix multiply; float inputs uniform in [-1, 1) so |C| grows like sqrt(K); int8
    inputs uniform integers in [-128, 127], summed exactly in int32 (C is int32); fp8 (e4m3) inputs
    uniform in [-1, 1] rounded to e4m3, so every product is exact, summed in fp32 (C is fp32). The
    fp8 implementations keep the operands scaled by powers of two on the device (per-tensor scales,
    :data:`FP8_SCALE_EXPONENTS`) and undo them on the fp32 sum: exact, so parity sees the scales."""

    name = "gemm"
    description = "C = A @ B, A: M x K, B: K x N, row-major"
    params = (
        ShapeParam("M", "rows of A and C", aliases=("m",)),
        ShapeParam("N", "columns of B and C", aliases=("n",)),
        ShapeParam("K", "columns of A, rows of B", aliases=("k",)),
    )
    dtypes = ("fp32", "fp64", "tf32", "fp16", "bf16", "int8", "fp8")
    profiles = {
        "quick": (_mnk(1024, 1024, 1024), _mnk(333, 517, 259)),
        "standard": (
            _mnk(512, 512, 512),
            _mnk(1024, 1024, 1024),
            _mnk(2048, 2048, 2048),
            _mnk(1000, 1000, 1000),
            _mnk(4096, 256, 4096),
        ),
        "full": (
            _mnk(1024, 1024, 1024),
            _mnk(2048, 2048, 2048),
            _mnk(4096, 4096, 4096),
            _mnk(8192, 8192, 8192),
            _mnk(1000, 1000, 1000),
            _mnk(16384, 128, 4096),
            _mnk(128, 16384, 4096),
        ),
    }

    sources = (
        Source(
            "opencl",
            "opencl-c",
            "gpu.opencl",
            ("fp32", "fp64", "fp16"),
            "OpenCL C: register-blocked vector tiles, one tile per work-item",
        ),
        Source(
            "triton",
            "triton",
            "gpu.triton",
            ("fp16", "bf16", "fp32", "tf32", "fp8", "int8"),
            "Triton gemm (kernels/gemm/gpu/triton.py; fp8 with per-tensor scales and int8 in triton_lowp.py), "
            "tuned over a small per-arch space",
        ),
        Source(
            "llvm",
            "llvmlite",
            "llvm",
            ("fp32", "fp64", "fp16", "bf16", "int8"),
            "llvmlite IR: packed-panel SIMD kernel on the CPU (fp32, fp64; int8 and bf16 on the CPU's dot "
            "products, vpdpbusd / vdpbf16ps, or widening multiply-adds), work-group kernel on SIMT targets",
        ),
    )
    #: The fp8 implementations' per-tensor scales (``backends/torch_gpu_lowp.py`` lays the operands out).
    fp8_scale_exponents = FP8_SCALE_EXPONENTS
    #: Operands the fp8 implementations take K-major (column-major B: cuBLASLt's fp8 GEMM needs it).
    fp8_k_major = ("B",)
    natives = {
        "cpu": (
            Native(
                "numpy", "numpy", "NumPy matmul on its BLAS (OpenBLAS or MKL)", ("fp32", "fp64"), "natives:numpy_matmul"
            ),
            Native(
                "torch_int_mm",
                "onednn",
                "torch._int_mm (int8 x int8 -> int32) on the CPU",
                ("int8",),
                "natives:torch_int_mm",
                {"torch": TORCH_MISSING},
            ),
            Native(
                "torch_matmul",
                "torch",
                "torch.matmul in bf16 on the CPU (oneDNN / MKL)",
                ("bf16",),
                "natives:torch_matmul_cpu",
                {"torch": TORCH_MISSING},
            ),
        ),
        "opencl": (
            Native(
                "clblast",
                "clblast",
                "CLBlast xGEMM through pyclblast",
                ("fp32", "fp64", "fp16"),
                "natives:clblast",
                {"pyclblast": PYCLBLAST_MISSING},
                accuracy={
                    "fp16": "CLBlast's HGEMM accumulates in fp16 (its kernels sum in the storage type), so its "
                    "error grows like K * u(fp16): the library's answer, not the device's"
                },
            ),
        ),
        "cuda": (
            Native("torch_matmul", "cublas", "torch.matmul on cuBLAS", TORCH_DTYPES, "natives:torch_matmul"),
            Native(
                "torch_scaled_mm",
                "cublaslt",
                "torch._scaled_mm on cuBLASLt: fp8 e4m3 x e4m3 with per-tensor scales, fp32 out (sm_89+)",
                ("fp8",),
                "natives_gpu_lowp:torch_scaled_mm",
            ),
            Native(
                "torch_int_mm",
                "cublas",
                "torch._int_mm on cuBLAS(Lt): int8 x int8 -> int32 (M > 16, K and N multiples of 8)",
                ("int8",),
                "natives_gpu_lowp:torch_int_mm",
            ),
            Native(
                "cupy_matmul",
                "cupy",
                "cupy.matmul on cuBLAS",
                ("fp16", "fp32", "fp64"),
                "natives:cupy_matmul",
                {"cupy": "CuPy is not installed (pip install cupy-cuda12x)"},
            ),
        ),
        "rocm": (
            Native(
                "torch_matmul",
                "rocblas/hipblaslt",
                "torch.matmul on rocBLAS/hipBLASLt",
                TORCH_DTYPES,
                "natives:torch_matmul",
            ),
            Native(
                "torch_scaled_mm",
                "hipblaslt",
                "torch._scaled_mm on hipBLASLt: fp8 e4m3 (fnuz on gfx942) with per-tensor scales, fp32 out",
                ("fp8",),
                "natives_gpu_lowp:torch_scaled_mm",
            ),
            Native(
                "torch_int_mm",
                "hipblaslt",
                "torch._int_mm on hipBLASLt: int8 x int8 -> int32 (M > 16, K and N multiples of 8)",
                ("int8",),
                "natives_gpu_lowp:torch_int_mm",
            ),
        ),
    }

    def output_shape(self, shape: Shape) -> tuple[int, ...]:
        return (shape["M"], shape["N"])

    def flops(self, shape: Shape) -> float:
        return 2.0 * shape["M"] * shape["N"] * shape["K"]

    def bytes_moved(self, shape: Shape, dtype: str) -> float:
        m, n, k = shape["M"], shape["N"], shape["K"]
        out_bytes = output_dtype(dtype).itemsize if TABLE[dtype].output else DTYPE_BYTES[dtype]
        return float(DTYPE_BYTES[dtype] * (m * k + k * n) + out_bytes * m * n)

    def make_inputs(self, shape: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        m, n, k = shape["M"], shape["N"], shape["K"]
        if is_integer(dtype):
            return {"A": _integers((m, k), dtype, seed, 1), "B": _integers((k, n), dtype, seed, 2)}
        return {"A": seeded_uniform((m, k), dtype, seed, 1), "B": seeded_uniform((k, n), dtype, seed, 2)}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Shape) -> np.ndarray:
        return inputs["A"].astype(np.float64) @ inputs["B"].astype(np.float64)

    def tolerance(self, dtype: str, shape: Shape) -> Tolerance:
        # Summation error grows at worst like K * u in the accumulator; rounding the
        # result to a narrow dtype adds u(dtype) relative, and tf32 rounds the inputs too.
        k = shape["K"]
        if is_integer(dtype):
            # int8 products summed in int32 are exact: no sum can leave int32 below K = 2**17
            # (K * 128 * 128 < 2**31), and the inputs' random signs keep |C| far smaller.
            return Tolerance(atol=0.0, rtol=0.0, exact=True)
        # fp8: the inputs are exact and every product too (4 x 4 significand bits); C is written in
        # fp32. The tensor cores sum the products of one instruction group in an accumulator narrower
        # than fp32 (Hopper keeps about 14 significand bits) before the fp32 sum takes them.
        u_acc = FP8_TENSOR_CORE_ROUNDOFF if dtype == "fp8" else UNIT_ROUNDOFF[accumulator(dtype)]
        u_out = UNIT_ROUNDOFF["fp32" if dtype == "fp8" else dtype]
        atol = 2.0 * k * u_acc + 4.0 * sqrt_int(k) * u_out
        return Tolerance(atol=atol, rtol=4.0 * u_out)


def _integers(dims: tuple[int, int], dtype: str, seed: int, salt: int) -> np.ndarray:
    """Uniform integers over the whole range of ``dtype`` (the float64 reference of their GEMM is exact)."""
    info = np.iinfo(storage_dtype(dtype))
    rng = np.random.default_rng([seed, salt])
    return np.ascontiguousarray(
        rng.integers(info.min, info.max, size=dims, endpoint=True, dtype=np.int64).astype(info.dtype)
    )


KERNEL = GEMM()
