"""The one dtype table: every element type hwbench knows, with its size and its name in each
library (NumPy host storage, torch, LLVM IR, Triton), its unit roundoff and accumulator.

Everything that maps a dtype name to something else reads it here. Importing this module
imports NumPy only; torch and llvmlite types are looked up by name when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DType:
    """One element type and its names elsewhere."""

    name: str
    bytes: int
    #: NumPy dtype holding values of this type on the host (bf16 and tf32 widen to float32).
    host: str
    #: NumPy dtype of this type's device storage where NumPy has one (bf16: none).
    device_numpy: str | None
    #: ``torch.<name>`` of its device storage.
    torch: str
    #: llvmlite IR type of one element.
    llvm: str
    #: Triton pointer element type.
    triton: str
    #: Half an ulp at 1.0 of the significand the arithmetic keeps.
    unit_roundoff: float
    #: Dtype in which a kernel of this dtype is expected to accumulate.
    accumulator: str
    #: NumPy dtype of a kernel's output where it is not ``host`` (int8 GEMM writes int32, fp8 GEMM float32).
    output: str = ""

    @property
    def integer(self) -> bool:
        """Whether arithmetic in this type is on integers (its operations are counted as OPS, not FLOPS)."""
        return np.dtype(self.host).kind in "iu"


TABLE: dict[str, DType] = {
    d.name: d
    for d in (
        DType("fp64", 8, "float64", "float64", "float64", "double", "fp64", 2.0**-53, "fp64"),
        DType("fp32", 4, "float32", "float32", "float32", "float", "fp32", 2.0**-24, "fp32"),
        DType("tf32", 4, "float32", "float32", "float32", "float", "fp32", 2.0**-11, "fp32"),
        DType("fp16", 2, "float16", "float16", "float16", "half", "fp16", 2.0**-11, "fp32"),
        DType("bf16", 2, "float32", None, "bfloat16", "bfloat", "bf16", 2.0**-8, "fp32"),
        # Integers: exact arithmetic (no roundoff); int8 products are summed in int32.
        DType("int8", 1, "int8", "int8", "int8", "i8", "int8", 0.0, "int32", output="int32"),
        DType("int32", 4, "int32", "int32", "int32", "i32", "int32", 0.0, "int32"),
        # fp8 is OCP e4m3 (``float8_e4m3fn``: 3 significand bits, max 448); AMD's gfx942 computes in
        # e4m3fnuz (max 240, one more binade below), which holds every value hwbench draws (|x| <= 240,
        # multiples of 2**-9). The host keeps the values in float32; products are summed in fp32 and the
        # GEMM writes fp32. No llvmlite type: ``llvm`` names the storage byte.
        DType("fp8", 1, "float32", None, "float8_e4m3fn", "i8", "fp8e4nv", 2.0**-4, "fp32", output="float32"),
    )
}

#: Bytes per element of every dtype hwbench knows.
DTYPE_BYTES: dict[str, int] = {name: d.bytes for name, d in TABLE.items()}

#: Unit roundoff (half an ulp at 1.0) of each dtype's significand.
UNIT_ROUNDOFF: dict[str, float] = {name: d.unit_roundoff for name, d in TABLE.items()}


def dtype(name: str) -> DType:
    """The table entry of ``name``; KeyError names the known ones."""
    try:
        return TABLE[name]
    except KeyError:
        raise KeyError(f"unknown dtype {name!r}; known: {', '.join(TABLE)}") from None


def storage_dtype(name: str) -> np.dtype[Any]:
    """NumPy dtype that holds inputs of ``name`` on the host (bf16 and tf32 widen to float32)."""
    return np.dtype(dtype(name).host)


def output_dtype(name: str) -> np.dtype[Any]:
    """NumPy dtype of a kernel's output for inputs of ``name`` (int8 -> int32, fp8 -> float32, else the
    host dtype)."""
    found = dtype(name)
    return np.dtype(found.output or found.host)


def is_integer(name: str) -> bool:
    """Whether ``name`` is an integer type (its throughput is read as TOPS)."""
    return name in TABLE and TABLE[name].integer


def device_numpy(name: str) -> np.dtype[Any]:
    """NumPy dtype of a device buffer of ``name`` (ValueError for bf16, which NumPy lacks)."""
    found = dtype(name).device_numpy
    if found is None:
        raise ValueError(f"NumPy has no {name} dtype")
    return np.dtype(found)


def torch_dtype(name: str) -> Any:
    """The torch dtype of device storage for ``name`` (tf32 is stored as fp32); imports torch."""
    import torch

    return getattr(torch, dtype(name).torch)


def torch_output_dtype(name: str) -> Any:
    """The torch dtype of a kernel's device output for inputs of ``name`` (int8 -> int32, fp8 -> float32,
    else the storage dtype); imports torch."""
    import torch

    found = dtype(name)
    return getattr(torch, found.output) if found.output else getattr(torch, found.torch)


def accumulator(name: str) -> str:
    """Dtype in which a kernel of ``name`` is expected to accumulate."""
    return dtype(name).accumulator


def round_to_dtype(x: np.ndarray, name: str) -> np.ndarray:
    """Round a float64 array to the values representable in ``name`` (returned as float64)."""
    if name == "fp64":
        return x
    if is_integer(name):
        info = np.iinfo(storage_dtype(name))
        clipped: np.ndarray = np.clip(np.rint(x), float(info.min), float(info.max))
        return clipped.astype(np.float64)
    if name in ("fp32", "fp16"):
        return x.astype(storage_dtype(name)).astype(np.float64)
    if name == "fp8":
        return _round_fp8(x)
    # bf16 and tf32: truncate float32 significands to 7 or 10 bits, rounding to nearest even.
    keep = 7 if name == "bf16" else 10
    drop = 23 - keep
    single = x.astype(np.float32)
    bits = single.view(np.uint32).astype(np.uint64)
    bias = ((bits >> np.uint64(drop)) & np.uint64(1)) + np.uint64((1 << (drop - 1)) - 1)
    kept = ((bits + bias) >> np.uint64(drop)) << np.uint64(drop)
    rounded = kept.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(single), single, rounded).astype(np.float64)  # NaN payloads must not carry


def _round_fp8(x: np.ndarray) -> np.ndarray:
    """``x`` rounded to e4m3 (``float8_e4m3fn``, to nearest even; beyond 448 saturated, NaN kept)."""
    # ml_dtypes (a NumPy dtype extension) is needed for fp8 alone; the other dtypes import NumPy only.
    import ml_dtypes

    clipped = np.clip(x, -448.0, 448.0)
    rounded: np.ndarray = clipped.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    return rounded


#: AMD architectures whose matrix cores compute fp8 e4m3, and in which format (CDNA3: fnuz; CDNA4: OCP).
AMD_FP8 = {"gfx940": "fnuz", "gfx941": "fnuz", "gfx942": "fnuz", "gfx950": "fn"}
#: AMD architectures with int8 matrix-core (mfma) instructions (CDNA).
AMD_INT8 = ("gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950")


def gpu_unsupported(name: str, arch: str) -> str:
    """Why GPU architecture ``arch`` (``sm_90``, ``gfx942``) has no tensor-core path for ``name``: fp8
    needs sm_89+ or gfx942/gfx950, int8 sm_80+ or a CDNA GPU (empty when it has one, and for other dtypes)."""
    if name not in ("fp8", "int8"):
        return ""
    if arch.startswith("sm_"):
        digits = "".join(ch for ch in arch[3:] if ch.isdigit())
        level = int(digits or 0)
        need = 89 if name == "fp8" else 80
        if level >= need:
            return ""
        what = "fp8 tensor cores" if name == "fp8" else "int8 tensor-core path in Triton"
        return f"no {what} on {arch} ({name} needs sm_{need} or newer)"
    if name == "fp8":
        return "" if arch in AMD_FP8 else f"no fp8 matrix cores on {arch} (fp8 needs gfx942 or gfx950)"
    return "" if arch in AMD_INT8 else f"no int8 matrix cores (mfma) on {arch} (int8 needs a CDNA GPU: gfx908 or newer)"


def fp8_torch_name(arch: str) -> str:
    """``torch.<name>`` of fp8 e4m3 storage on ``arch``: ``float8_e4m3fnuz`` on CDNA3 (gfx942), else
    ``float8_e4m3fn``."""
    return "float8_e4m3fnuz" if AMD_FP8.get(arch) == "fnuz" else "float8_e4m3fn"
