"""What the Triton kernels need from Triton beyond ``triton.language``, the same on Triton 3.6 to 3.9.

- :func:`jit_specialization` and :func:`ast_source`: the ahead-of-time source of a call, built
  as Triton's JIT builds it when the call runs (integers equal to 1 become constants; pointers,
  and integers divisible by 16, carry ``tt.divisibility`` 16; the backend's own hints, such as
  AMD's 32-bit pointer range, come from the backend), so a compile-only build is the kernel that
  runs.
- :class:`Pointer` and :class:`DescriptorArg`: compile-only stand-ins for a tensor and a tensor
  descriptor (no memory, no torch), and :func:`descriptor`, which makes a descriptor (or its
  stand-in) from a tensor (or a :class:`Pointer`).
- :class:`Call`: one launch (kernel, grid, arguments by name, options).
- :func:`tma_strides_ok`: whether a row-major 2-D tensor can be a tensor descriptor's base.

Importing this module imports Triton: only Triton kernel modules and ``hwbench compile`` do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import triton
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton.tools.tensor_descriptor import TensorDescriptor

from hwbench.core.dtypes import TABLE

#: Bytes of one element of each Triton element type of hwbench's dtypes.
ELEMENT_BYTES = {d.triton: d.bytes for d in TABLE.values()}
#: Alignment in bytes Triton's JIT checks for its divisibility hint, and TMA needs of a row stride.
ALIGN = 16


@dataclass(frozen=True)
class Pointer:
    """A tensor argument of a compile-only call: its element type, shape and address (no memory).

    The address is 0 (aligned, as a fresh allocation is) unless given; strides are row-major.
    """

    element: str
    shape: tuple[int, ...]
    address: int = 0

    def data_ptr(self) -> int:
        """The address, as a tensor's ``data_ptr``."""
        return self.address

    def stride(self) -> tuple[int, ...]:
        """Row-major strides in elements, as a contiguous tensor's ``stride()``."""
        strides = [1]
        for size in reversed(self.shape[1:]):
            strides.append(strides[-1] * size)
        return tuple(reversed(strides))

    def ptr_range(self) -> int:
        """Bytes the tensor spans (what AMD's backend checks for 32-bit buffer offsets)."""
        count = 1
        for size in self.shape:
            count *= size
        return count * ELEMENT_BYTES[self.element]


@dataclass(frozen=True)
class DescriptorArg:
    """A tensor-descriptor argument of a compile-only call: the tensor it covers and its block shape."""

    base: Pointer
    block_shape: tuple[int, ...]

    def signature(self) -> str:
        """The argument type Triton's JIT gives a host tensor descriptor."""
        return f"tensordesc<{self.base.element}[{', '.join(str(b) for b in self.block_shape)}]>"


@dataclass(frozen=True)
class Call:
    """One kernel launch: the kernel, its grid, every argument by name and the compile options."""

    fn: Any
    grid: tuple[int, ...]
    args: dict[str, Any]
    options: dict[str, Any]

    def run(self) -> None:
        """Launch it."""
        self.fn[self.grid](**self.args, **self.options)


def descriptor(tensor: Any, block_shape: Sequence[int]) -> Any:
    """A host tensor descriptor over ``tensor`` with ``block_shape`` (a :class:`DescriptorArg` for a
    :class:`Pointer`), as Triton 3.6 and 3.9 both take for ``tensordesc`` arguments."""
    if isinstance(tensor, Pointer):
        return DescriptorArg(tensor, tuple(block_shape))
    return TensorDescriptor(tensor, list(tensor.shape), list(tensor.stride()), list(block_shape))


def tma_strides_ok(cols: int, element_bytes: int) -> bool:
    """Whether a row-major 2-D tensor of ``cols`` columns can be a tensor descriptor's base (TMA):
    its row stride a multiple of 16 bytes."""
    return cols > 0 and (cols * element_bytes) % ALIGN == 0


def _int_type(value: int) -> str:
    if -(2**31) <= value < 2**31:
        return "i32"
    if 2**63 <= value < 2**64:
        return "u64"
    if -(2**63) <= value < 2**63:
        return "i64"
    raise ValueError(f"integer argument {value} does not fit 64 bits")


def _specialize(backend: Any, value: Any, specialize: bool, align: bool) -> tuple[str, Any]:
    """(type, attribute key or constant) of one argument, as the JIT's binder derives it."""
    if value is None:
        return "constexpr", None
    if isinstance(value, bool):
        return "u1", None
    if isinstance(value, int):
        if not specialize:
            return _int_type(value), None
        if value == 1:
            return "constexpr", 1
        return _int_type(value), backend.get_int_specialization(value, align=align)
    if isinstance(value, float):
        return "fp32", None
    if isinstance(value, DescriptorArg):
        return value.signature(), None
    if isinstance(value, Pointer):
        key = backend.get_tensor_specialization(value, align=align) if specialize else None
        return f"*{value.element}", key
    if isinstance(value, str):
        return "constexpr", value
    raise TypeError(f"no compile-only form for an argument of type {type(value).__name__}")


def jit_specialization(
    fn: Any, args: Mapping[str, Any], target: Any
) -> tuple[dict[str, str], dict[tuple[int, ...], Any], dict[tuple[int, ...], Any]]:
    """Signature, constants and attributes Triton's JIT compiles a call of ``fn`` with on ``target``.

    ``args`` names every parameter (constexprs included): integers, floats and strings as given,
    :class:`Pointer` for tensors, :class:`DescriptorArg` for tensor descriptors. Constexpr
    parameters and integers equal to 1 (unless ``do_not_specialize`` or annotated) become
    constants; the others get the backend's attributes (``tt.divisibility`` 16 where 16 divides
    the value or address, unless ``do_not_specialize_on_alignment``).
    """
    backend = make_backend(target)
    missing = [p.name for p in fn.params if p.name not in args]
    unknown = sorted(set(args) - {p.name for p in fn.params})
    if missing or unknown:
        raise ValueError(f"{fn.__name__}: arguments missing {missing}, unknown {unknown}")
    signature: dict[str, str] = {}
    constants: dict[tuple[int, ...], Any] = {}
    attrs: dict[tuple[int, ...], Any] = {}
    for i, param in enumerate(fn.params):
        value = args[param.name]
        specialize, align = not param.do_not_specialize, not param.do_not_specialize_on_alignment
        annotation = param.annotation_type if isinstance(param.annotation_type, str) else ""
        if param.is_constexpr:
            kind, key = "constexpr", value
        elif annotation:  # an annotated type is kept; bools and floats are never specialized
            plain = annotation == "u1" or annotation[:2] in ("fp", "bf") or not specialize
            kind, key = annotation, None if plain else _specialize(backend, value, True, align)[1]
        else:
            kind, key = _specialize(backend, value, specialize, align)
        signature[param.name] = kind
        if kind == "constexpr":
            constants[(i,)] = key
        elif isinstance(key, str):
            attrs[(i,)] = backend.parse_attr(key)
    return signature, constants, attrs


def ast_source(fn: Any, args: Mapping[str, Any], target: Any) -> Any:
    """``triton.compiler.ASTSource`` of a call of ``fn`` with ``args``, as the JIT builds it
    (:func:`jit_specialization`)."""
    signature, constants, attrs = jit_specialization(fn, args, target)
    return ASTSource(fn, signature, constants, attrs)


def compile_call(fn: Any, args: Mapping[str, Any], target: Any, options: Mapping[str, Any]) -> Any:
    """Compile a call of ``fn`` for ``target`` without its GPU (``triton.compile`` of :func:`ast_source`)."""
    return triton.compile(ast_source(fn, args, target), target=target, options=dict(options))
