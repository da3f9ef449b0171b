"""What a kernel *is*: shapes, dtypes, work, inputs, a float64 reference and tolerances.

A kernel spec does no I/O and imports no device SDK; backends and portable sources
live elsewhere and only read it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from hwbench.core.dtypes import DTYPE_BYTES, round_to_dtype, storage_dtype
from hwbench.core.errors import UserError

Shape = Mapping[str, int]

PROFILES = ("quick", "standard", "full")


@dataclass(frozen=True)
class Tolerance:
    """Element-wise bound: ``|out - ref| <= atol + rtol * |ref|``; ``exact`` counts wrong elements."""

    atol: float
    rtol: float
    exact: bool = False


@dataclass(frozen=True)
class ShapeParam:
    """One named dimension of a kernel's shape."""

    name: str
    doc: str
    default: int | None = None
    aliases: tuple[str, ...] = ()
    minimum: int = 1


class Kernel(ABC):
    """A kernel declared once: every backend and every portable source reads this."""

    name: str
    description: str
    params: tuple[ShapeParam, ...]
    dtypes: tuple[str, ...]
    #: Shapes per profile; each shape is a dict of every parameter.
    profiles: Mapping[str, tuple[Mapping[str, int], ...]]

    @abstractmethod
    def flops(self, shape: Shape) -> float:
        """Floating-point operations of one call (multiply and add counted apart)."""

    @abstractmethod
    def bytes_moved(self, shape: Shape, dtype: str) -> float:
        """Minimum bytes read and written by one call."""

    @abstractmethod
    def make_inputs(self, shape: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        """Deterministic inputs, exactly representable in ``dtype``, in host storage dtype."""

    @abstractmethod
    def reference(self, inputs: Mapping[str, np.ndarray], shape: Shape) -> np.ndarray:
        """The float64 result computed from ``inputs``."""

    @abstractmethod
    def tolerance(self, dtype: str, shape: Shape) -> Tolerance:
        """Parity bound for an output of ``dtype`` at ``shape``."""

    def memory_bytes(self, shape: Shape, dtype: str) -> int:
        """Host bytes one case needs: inputs and output in storage dtype and in float64, twice over."""
        elements = self.bytes_moved(shape, dtype) / DTYPE_BYTES[dtype]
        return int(elements * (storage_dtype(dtype).itemsize + 8) * 2)

    def shapes(self, profile: str) -> list[dict[str, int]]:
        """The shapes a profile runs."""
        return [dict(s) for s in self.profiles[profile]]

    def complete(self, given: Mapping[str, int]) -> dict[str, int]:
        """Fill defaults and check a user's shape; raise UserError on anything wrong."""
        names = {p.name: p for p in self.params}
        alias = {a: p.name for p in self.params for a in p.aliases}
        shape: dict[str, int] = {}
        for key, value in given.items():
            name = key if key in names else alias.get(key)
            if name is None:
                known = ", ".join(p.name for p in self.params)
                raise UserError(f"{self.name} has no dimension '{key}'; its dimensions are {known}")
            if name in shape:
                raise UserError(f"{self.name} dimension {name} is given twice (as '{key}' and another name)")
            shape[name] = value
        for p in self.params:
            if p.name not in shape:
                if p.default is None:
                    raise UserError(f"shape for {self.name} needs {p.name}= ({p.doc})")
                shape[p.name] = p.default
            if shape[p.name] < p.minimum:
                raise UserError(f"{self.name} {p.name}={shape[p.name]} is below its minimum {p.minimum}")
        return self.derive(shape)

    def derive(self, shape: dict[str, int]) -> dict[str, int]:
        """Hook for dimensions that default to others (attention's seq_k to seq_q)."""
        return shape

    def describe_shape(self, shape: Shape) -> str:
        """Compact human form of a shape, e.g. ``M=1024,N=1024,K=1024``."""
        return ",".join(f"{p.name}={shape[p.name]}" for p in self.params if p.name in shape)


def parse_shape_arg(text: str) -> tuple[str, dict[str, int]]:
    """Parse ``KERNEL:NAME=INT,NAME=INT`` into the kernel name and its dimensions.

    Raises UserError with the expected syntax when the text is malformed.
    """
    syntax = "expected KERNEL:NAME=INT,... e.g. gemm:M=1000,N=1000,K=1000"
    kernel, sep, rest = text.partition(":")
    if not sep or not kernel.strip() or not rest.strip():
        raise UserError(f"malformed --shape '{text}': {syntax}")
    dims: dict[str, int] = {}
    for part in rest.split(","):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise UserError(f"malformed --shape '{text}': '{part}' is not NAME=INT ({syntax})")
        if value.lower() in ("true", "false"):
            value = "1" if value.lower() == "true" else "0"
        try:
            number = int(value.replace("_", ""))
        except ValueError:
            raise UserError(f"malformed --shape '{text}': '{value}' is not an integer ({syntax})") from None
        if key in dims:
            raise UserError(f"malformed --shape '{text}': '{key}' is given twice")
        dims[key] = number
    return kernel.strip(), dims


def sqrt_int(n: int) -> float:
    """sqrt of a positive count, as float (used by tolerance models)."""
    return math.sqrt(max(int(n), 1))


def seeded_uniform(shape: tuple[int, ...], dtype: str, seed: int, salt: int) -> np.ndarray:
    """Uniform values in [-1, 1) rounded to ``dtype``, returned in host storage dtype."""
    rng = np.random.default_rng([seed, salt])
    values = round_to_dtype(rng.uniform(-1.0, 1.0, size=shape), dtype)
    return np.ascontiguousarray(values.astype(storage_dtype(dtype)))


def describe_kernel(kernel: Kernel) -> dict[str, Any]:
    """Kernel facts for ``hwbench list --json``."""
    return {
        "name": kernel.name,
        "description": kernel.description,
        "dtypes": list(kernel.dtypes),
        "dimensions": [
            {"name": p.name, "doc": p.doc, "default": p.default, "aliases": list(p.aliases)} for p in kernel.params
        ],
        "profiles": {name: kernel.shapes(name) for name in PROFILES},
    }
