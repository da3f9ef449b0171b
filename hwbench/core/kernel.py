"""What a kernel *is*: shapes, dtypes, work, inputs, a float64 reference and tolerances; which
portable sources and natives it has; and the kernels by name.

A kernel is a folder under ``kernels/``: ``spec.py`` subclasses :class:`Kernel` and names
its :class:`Source` files (one per language, each holding that language's bindings) and,
keyed by backend, its :class:`Native` calls. A kernel spec does no I/O and imports no
device SDK; backends read it and load the files it names when they prepare a case.
Registering a kernel is one line in :data:`BUILTIN_KERNELS` (or an entry point of the
``hwbench.kernels`` group, or for a quick trial ``HWBENCH_KERNELS="name=module:attr,..."`` in the
environment).
"""

from __future__ import annotations

import importlib
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np

from hwbench.core.dtypes import DTYPE_BYTES, round_to_dtype, storage_dtype
from hwbench.core.errors import UserError
from hwbench.core.loading import from_environment, group, load

Shape = Mapping[str, int]

PROFILES = ("quick", "standard", "full")

#: The kernels hwbench ships, in the order runs and tables list them: name -> its spec.
BUILTIN_KERNELS: dict[str, str] = {
    "gemm": "hwbench.kernels.gemm.spec:KERNEL",
    "attention": "hwbench.kernels.attention.spec:KERNEL",
    "allreduce": "hwbench.kernels.allreduce.spec:KERNEL",
    "stream": "hwbench.kernels.stream.spec:KERNEL",
    "transfer": "hwbench.kernels.transfer.spec:KERNEL",
}
KERNEL_GROUP = "hwbench.kernels"
ENV_KERNELS = "HWBENCH_KERNELS"


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


@dataclass(frozen=True)
class Source:
    """A portable implementation: one source in one language, with that language's bindings.

    ``module`` is relative to the kernel's package (``"llvm"`` in ``kernels/gemm`` is
    ``hwbench.kernels.gemm.llvm``). Every backend that compiles ``language`` offers it,
    unless ``backends`` names the only ones that do.
    """

    impl: str
    language: str
    module: str
    dtypes: tuple[str, ...]
    description: str
    backends: tuple[str, ...] = ()


@dataclass(frozen=True)
class Native:
    """The vendor call a user would make instead, on one backend.

    ``call`` is ``module:function`` relative to the kernel's package; the function takes
    what its backend hands natives (each backend's docstring says what). ``requires``
    maps each module it needs to the hint shown when that module is missing (the native is
    listed and skipped with that reason); a native is listed only where every module of
    ``listed_with`` is present, and only where no module of ``unless`` is (a stand-in for
    a better one). Natives of a kernel that spans ranks have no ``call``: ``hwbench.collective``
    runs them by name.
    """

    impl: str
    library: str
    description: str
    dtypes: tuple[str, ...]
    call: str = ""
    requires: Mapping[str, str] = field(default_factory=dict)
    listed_with: tuple[str, ...] = ()
    unless: tuple[str, ...] = ()
    #: What the library is known to do per dtype that can put it outside the tolerance every
    #: implementation is held to (e.g. accumulating fp16 in fp16); added to a failed parity's reason.
    #: Such a dtype runs only when ``--dtype`` names it (a default run records it as skipped).
    accuracy: Mapping[str, str] = field(default_factory=dict)


class Kernel(ABC):
    """A kernel declared once: every backend and every portable source reads this."""

    name: str
    description: str
    params: tuple[ShapeParam, ...]
    dtypes: tuple[str, ...]
    #: Shapes per profile; each shape is a dict of every parameter.
    profiles: Mapping[str, tuple[Mapping[str, int], ...]]
    #: Portable sources, in the order they are listed after the natives.
    sources: tuple[Source, ...] = ()
    #: Natives per backend name; the first is the porting-overhead baseline.
    natives: Mapping[str, tuple[Native, ...]] = {}
    #: A collective: one case runs on several processes (``hwbench.collective``), not in one.
    spans_ranks: bool = False
    #: Version of the values :meth:`make_inputs` draws, written into every record: raised when they
    #: change, so that results made from other inputs are told apart (``hwbench compare`` warns).
    inputs_version: int = 1
    #: Bound by memory, not compute (STREAM): records get their GB/s as a share of the device's
    #: memory bandwidth (``pct_bw_peak``), which tables show in place of the TFLOPS share.
    bandwidth_bound: bool = False

    @property
    def package(self) -> str:
        """The package of the kernel's folder (``hwbench.kernels.gemm``)."""
        return type(self).__module__.rpartition(".")[0]

    def entry(self, relative: str) -> str:
        """Absolute form of a module or ``module:function`` named relative to the kernel's package."""
        return f"{self.package}.{relative}"

    def source(self, impl: str) -> Source | None:
        """The portable source called ``impl``, if the kernel has one."""
        return next((s for s in self.sources if s.impl == impl), None)

    def source_in(self, language: str) -> Source | None:
        """The kernel's first portable source in ``language``, if it has one."""
        return next((s for s in self.sources if s.language == language), None)

    def source_module(self, language: str) -> ModuleType:
        """The module of the kernel's source in ``language``; RuntimeError when it has none."""
        source = self.source_in(language)
        if source is None:
            raise RuntimeError(f"kernel {self.name} has no {language} source")
        return importlib.import_module(self.entry(source.module))

    def bus_factor(self, shape: Shape) -> float:
        """Of a collective: busbw / algbw (nccl-tests' factor; all_reduce's is 2(n-1)/n)."""
        return 1.0

    def output_shape(self, shape: Shape) -> tuple[int, ...]:
        """Dimensions of the output of one call (what :meth:`reference` returns)."""
        raise NotImplementedError(f"kernel {self.name} does not say the shape of its output")

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

    def device_shapes(self, shape: Shape, index: int, count: int) -> tuple[list[dict[str, int]], str]:
        """The shapes ``shape`` runs as on device ``index`` of a backend's ``count``, and why none
        where it runs on none (a transfer's peer copies: one shape per other device)."""
        return [dict(shape)], ""

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


def kernels_from_env() -> dict[str, str]:
    """The kernels ``HWBENCH_KERNELS="name=module:attr,..."`` registers; UserError on a malformed entry."""
    return from_environment(ENV_KERNELS, "kernel", "axpy=example_kernel.spec:KERNEL")


def kernel_targets() -> dict[str, str]:
    """Every known kernel name and where its spec lives (built-ins first, then entry points, then
    :data:`ENV_KERNELS`'s); UserError on a malformed ``HWBENCH_KERNELS``."""
    return {**BUILTIN_KERNELS, **group(KERNEL_GROUP), **kernels_from_env()}


@cache
def get_kernel(name: str) -> Kernel:
    """The kernel spec called ``name``; UserError if no kernel has that name, or if what its
    registration names cannot be loaded, is not a :class:`Kernel` or calls itself otherwise."""
    targets = kernel_targets()
    if name not in targets:
        raise UserError(f"unknown kernel '{name}'; known kernels: {', '.join(targets)}")
    target = targets[name]
    try:
        kernel = load(target)
    except (ImportError, AttributeError) as exc:
        hint = "" if name in BUILTIN_KERNELS else " (is its folder on PYTHONPATH, or its package installed?)"
        raise UserError(f"kernel '{name}' ({target}) cannot be loaded: {exc}{hint}") from None
    if not isinstance(kernel, Kernel):
        raise UserError(f"kernel '{name}' ({target}) is not an hwbench Kernel")
    if kernel.name != name:
        raise UserError(f"kernel '{name}' ({target}) calls itself '{kernel.name}': register it as {kernel.name}=")
    return kernel
