"""The vendor calls of low-precision GEMM on ``cuda`` and ``rocm``: ``torch._scaled_mm`` (fp8 on
cuBLASLt / hipBLASLt) and ``torch._int_mm`` (int8 -> int32 on cuBLAS(Lt) / hipBLASLt).

Both follow the GPU natives' convention ``fn(tensors, out, shape, dtype) -> (call, config)``. fp8
tensors come as the backends lay them out (``backends/torch_gpu_lowp.py``): ``A`` row-major, ``B``
K-major (the column-major layout cuBLASLt's fp8 GEMM requires), each scaled by a power of two, with
their per-tensor scales ``scale_A`` and ``scale_B`` (one-element fp32 tensors, as ``_scaled_mm`` takes
them). Each library refuses some shapes; :func:`scaled_mm_unfit` and :func:`int_mm_unfit` say which
(from the checks in ATen's ``Blas.cpp`` / ``ScaledBlas.cpp``), and the calls raise
:class:`ShapeUnsupported` with that reason instead of letting the library fail inside the timing.

``torch._scaled_mm``'s arguments have moved between torch releases (2.1-2.3: keyword-only scales,
``(out, amax)`` returned; 2.4 and later: positional ``scale_a, scale_b``, one tensor returned, and an
``out=`` overload); :func:`scaled_mm_adapter` reads the operator's schema and calls it as it stands.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hwbench.core.errors import NotApplicable
from hwbench.core.kernel import Shape
from hwbench.kernels.gemm.natives import Call, torch_blas


class ShapeUnsupported(NotApplicable):
    """The library refuses this shape; the message says which of its limits it breaks."""


def int_mm_unfit(shape: Shape) -> str:
    """Why ``torch._int_mm`` on a GPU refuses ``shape`` (empty when it takes it): ATen checks
    M > 16, K and N positive multiples of 8."""
    m, n, k = int(shape["M"]), int(shape["N"]), int(shape["K"])
    bad = [f"M={m} (needs M > 16)"] if m <= 16 else []
    bad += [f"{name}={v} (needs a multiple of 8)" for name, v in (("K", k), ("N", n)) if v <= 0 or v % 8]
    return f"torch._int_mm on the GPU cannot take {', '.join(bad)}" if bad else ""


def scaled_mm_unfit(shape: Shape) -> str:
    """Why ``torch._scaled_mm`` refuses ``shape`` (empty when it takes it): ATen checks that K and N
    are multiples of 16."""
    bad = [f"{name}={int(shape[name])}" for name in ("K", "N") if int(shape[name]) <= 0 or int(shape[name]) % 16]
    return f"torch._scaled_mm cannot take {', '.join(bad)} (K and N must be multiples of 16)" if bad else ""


@dataclass(frozen=True)
class ScaledMM:
    """How to call one release's ``_scaled_mm``: which of its arguments are positional, whether it
    takes ``out=`` and whether it returns ``(out, amax)``."""

    positional: tuple[str, ...]
    keywords: tuple[str, ...]
    returns_pair: bool
    has_out: bool

    def call(
        self,
        fn: Callable[..., Any],
        a: Any,
        b: Any,
        scales: tuple[Any, Any],
        out_dtype: Any,
        out: Any = None,
    ) -> Any:
        """``fn(a, b, ...)`` with the scales and ``out_dtype`` where this release takes them (and
        ``out=`` where it has one and ``out`` is given); returns the product tensor."""
        values = {"self": a, "mat2": b, "scale_a": scales[0], "scale_b": scales[1], "out_dtype": out_dtype}
        values["use_fast_accum"] = False  # fp32 accumulation, as the Triton kernel's
        missing = [n for n in ("scale_a", "scale_b", "out_dtype") if n not in self.positional + self.keywords]
        if missing:
            raise TypeError(f"this torch._scaled_mm takes no {', '.join(missing)}")
        leading = 0  # positional up to the first argument left at its default, keywords after it
        while leading < len(self.positional) and self.positional[leading] in values:
            leading += 1
        args = [values[n] for n in self.positional[:leading]]
        kwargs = {n: values[n] for n in self.positional[leading:] + self.keywords if n in values}
        if out is not None and self.has_out:
            kwargs["out"] = out
        result = fn(*args, **kwargs)
        return result[0] if self.returns_pair else result


def parse_schema(schema: str, has_out: bool) -> ScaledMM:
    """The :class:`ScaledMM` of an operator schema such as ``aten::_scaled_mm(Tensor self, Tensor mat2,
    Tensor scale_a, ...) -> Tensor`` (``has_out``: the operator has an ``out`` overload)."""
    found = re.match(r"^[\w:.]*\((.*)\)\s*->\s*(.+)$", schema.strip())
    if found is None:
        raise ValueError(f"not an operator schema: {schema!r}")
    positional: list[str] = []
    keywords: list[str] = []
    target = positional
    for part in (p.strip() for p in found.group(1).split(",")):
        if part == "*":
            target = keywords
            continue
        name = part.split("=")[0].split()[-1]
        target.append(name)
    return ScaledMM(tuple(positional), tuple(keywords), found.group(2).strip().startswith("("), has_out)


def scaled_mm_adapter(torch: Any) -> ScaledMM:
    """The :class:`ScaledMM` of this torch's ``aten::_scaled_mm``."""
    packet = torch.ops.aten._scaled_mm
    return parse_schema(str(packet.default._schema), "out" in packet.overloads())


def torch_scaled_mm(tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> Call:
    """cuda, rocm: ``torch._scaled_mm(A, B, scale_a, scale_b, out_dtype=float32)`` into ``out``
    (cuBLASLt / hipBLASLt); :class:`ShapeUnsupported` where it cannot take the shape."""
    import torch

    why = scaled_mm_unfit(shape)
    if why:
        raise ShapeUnsupported(why)
    adapter = scaled_mm_adapter(torch)
    a, b = tensors["A"], tensors["B"]
    scales = (tensors["scale_A"], tensors["scale_B"])
    if adapter.has_out:

        def call() -> Any:
            return adapter.call(torch._scaled_mm, a, b, scales, out.dtype, out)

    else:

        def call() -> Any:
            return out.copy_(adapter.call(torch._scaled_mm, a, b, scales, out.dtype))

    library = "hipBLASLt" if torch.version.hip else "cuBLASLt"
    config = {"library": library, "call": "torch._scaled_mm", "scales": "per-tensor", "fast_accum": False}
    config["fp8"] = str(a.dtype).rsplit(".", 1)[-1]
    return call, config


def torch_int_mm(tensors: Mapping[str, Any], out: Any, shape: Shape, dtype: str) -> Call:
    """cuda, rocm: ``torch._int_mm(A, B, out=C)``, int8 x int8 summed in int32 (cuBLAS(Lt) /
    hipBLASLt); :class:`ShapeUnsupported` where it cannot take the shape."""
    import torch

    why = int_mm_unfit(shape)
    if why:
        raise ShapeUnsupported(why)
    a, b = tensors["A"], tensors["B"]
    return (lambda: torch._int_mm(a, b, out=out)), {"library": torch_blas(), "call": "torch._int_mm"}
