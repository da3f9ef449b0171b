"""The work-group (SIMT) target interface: one llvmlite kernel source for every GPU-class target.

A SIMT kernel body ``body(ctx, args)`` emits the code of ONE work-item, as CUDA, HIP and
OpenCL kernels are written: it asks :class:`SIMTContext` for its work-item and work-group
indices, for work-group shared memory (``ctx.shared``) and for barriers, and reads and
writes global buffers that arrive as pointers in the target's global address space.
Everything that differs between SPIR-V, NVPTX and AMDGCN lives in a :class:`SIMTTarget`
subclass: triple, data layout, address spaces, index builtins, the barrier, the kernel's
calling convention and launch-size annotations, and how a module is lowered to a binary.

The configuration of a kernel (work-group shape, register tile, shared-memory tile) is
chosen from the device's :class:`DeviceLimits` by the kernel's own bindings, so one source
serves a CPU OpenCL device (work-groups of one work-item with SIMD register tiles) and a
GPU (hundreds of threads staging tiles through shared memory) alike.

Adding an accelerator with an LLVM backend: subclass :class:`SIMTTarget` (``triple``,
``data_layout``, ``kernel_calling_convention``, address spaces, :meth:`~SIMTTarget.local_id`,
:meth:`~SIMTTarget.group_id`, :meth:`~SIMTTarget.barrier`, :meth:`~SIMTTarget.lower`) and
give the backend a loader for what :meth:`~SIMTTarget.lower` returns.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from typing import Any

from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.kernels.llvmir import vecmath
from hwbench.kernels.llvmir.irutil import F32, I32, I64, VOID, elem_size, fma, i64, imin, scalar_type, splat
from hwbench.kernels.llvmir.target import LLVMTarget

SIMTBody = Callable[["SIMTContext", list[ir.Argument]], None]


@dataclass(frozen=True)
class DeviceLimits:
    """What a SIMT kernel's configuration is chosen from (as the device reports it)."""

    #: ``cpu`` for a CPU OpenCL device (a work-item is a SIMD program), else ``gpu``.
    kind: str = "gpu"
    #: Shared (OpenCL local) memory per work-group, bytes.
    local_mem_bytes: int = 48 * 1024
    #: Largest work-group, work-items.
    max_work_group: int = 1024
    #: Warp / wavefront / sub-group width (1 where the device has none).
    subgroup: int = 32
    #: fp32 SIMD lanes one work-item should use (1 on GPUs: their lanes are the work-items).
    lanes: int = 1
    #: Whether the device computes in fp16 (``cl_khr_fp16``; all GPUs here).
    fp16: bool = True

    def as_dict(self) -> dict[str, Any]:
        """The limits as a plain mapping (for records and child processes)."""
        return asdict(self)


@dataclass(frozen=True)
class SIMTBinary:
    """A module lowered for one SIMT target."""

    entry: str
    binary: bytes  # SPIR-V words, PTX text (as bytes) or a linked AMDGCN code object
    assembly: str  # what a person reads: PTX, AMDGCN assembly, or empty for SPIR-V
    compile_s: float
    target: str


class SIMTTarget(LLVMTarget):
    """A code-generation target whose kernels run as work-groups of work-items."""

    #: Address space of kernel buffer arguments, of work-group shared memory and of
    #: per-work-item private arrays (``alloca``).
    global_space = 1
    shared_space = 3
    private_space = 0
    kernel_calling_convention = ""

    def __init__(self, limits: DeviceLimits) -> None:
        self.limits = limits

    def vector_width(self, dtype: str) -> int:
        """SIMD lanes a work-item uses for ``dtype`` (1 on GPUs): the fp32 lanes, scaled by the
        compute type's width, at most 16 (the widest vector OpenCL and SPIR-V have)."""
        return max(1, min(16, self.limits.lanes * 4 // DTYPE_BYTES[compute_dtype(dtype)]))

    @property
    def cache_key(self) -> str:
        return f"{self.name}|{self.triple}|{sorted(self.limits.as_dict().items())}"

    @abstractmethod
    def local_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        """Index (i64) of the work-item within its work-group along ``axis``."""

    @abstractmethod
    def group_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        """Index (i64) of the work-group along ``axis``."""

    @abstractmethod
    def barrier(self, builder: ir.IRBuilder) -> None:
        """Work-group barrier that also orders shared-memory accesses."""

    def linear_local_id(self, builder: ir.IRBuilder, local_size: Sequence[int]) -> ir.Value:
        """Flat index (i64) of the work-item in its work-group: ``(z * ny + y) * nx + x``."""
        nx, ny = local_size[0], local_size[1]
        flat = self.local_id(builder, 0) if nx > 1 else i64(0)
        if ny > 1:
            flat = builder.add(builder.mul(self.local_id(builder, 1), i64(nx)), flat)
        if len(local_size) > 2 and local_size[2] > 1:
            flat = builder.add(builder.mul(self.local_id(builder, 2), i64(nx * ny)), flat)
        return flat

    def annotate(self, module: ir.Module, fn: ir.Function, local_size: Sequence[int]) -> None:
        """Mark ``fn`` with its fixed work-group size where the target has a way to say it."""

    def entry_attributes(self, local_size: Sequence[int]) -> dict[str, str]:
        """String attributes of the kernel entry (llvmlite cannot write them; see :func:`with_attributes`)."""
        return {}

    def exp(self, builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``exp(x)`` element-wise: the portable polynomial of :mod:`.vecmath` unless the target
        has an accurate one of its own."""
        return vecmath.exp(builder, x)

    def mma(self, dtype: str) -> Any:
        """The target's matrix-multiply instruction for ``dtype`` (a
        :class:`~hwbench.kernels.llvmir.mma.MatrixInstruction`), or None: kernels then use FMAs."""
        return None

    @abstractmethod
    def lower(self, module: ir.Module, entry: str) -> SIMTBinary:
        """Optimise ``module`` and lower it to what the device's runtime loads."""

    def define_simt_kernel(
        self,
        module: ir.Module,
        name: str,
        params: Sequence[ir.Type],
        body: SIMTBody,
        local_size: Sequence[int],
    ) -> ir.Function:
        """Create entry ``name(params...)`` (pointer params in the global space) and emit ``body``."""
        glob = ir.PointerType(addrspace=self.global_space)
        types = [glob if isinstance(p, ir.PointerType) else p for p in params]
        fn = ir.Function(module, ir.FunctionType(VOID, types), name=name)
        fn.calling_convention = self.kernel_calling_convention
        for arg in fn.args:
            if isinstance(arg.type, ir.PointerType):
                arg.add_attribute("noalias")
        fn.attributes.add("nounwind")
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        ctx = SIMTContext(self, builder, name, tuple(local_size))
        body(ctx, list(fn.args))
        builder.ret_void()
        self.annotate(module, fn, local_size)
        module.simt_entry_attributes = self.entry_attributes(local_size)
        return fn


class SIMTContext:
    """What a SIMT kernel body may ask of its target while emitting one work-item."""

    def __init__(self, target: SIMTTarget, builder: ir.IRBuilder, kernel: str, local_size: tuple[int, ...]) -> None:
        self.target = target
        self.builder = builder
        self.local_size = local_size
        self._kernel = kernel
        self._entry = builder.block
        self.shared_bytes = 0

    def local_id(self, axis: int) -> ir.Value:
        """Work-item index (i64) within the work-group along ``axis``."""
        return self.target.local_id(self.builder, axis) if self.local_size[axis] > 1 else i64(0)

    def linear_id(self) -> ir.Value:
        """Flat work-item index (i64) within the work-group."""
        return self.target.linear_local_id(self.builder, self.local_size)

    def group_id(self, axis: int) -> ir.Value:
        """Work-group index (i64) along ``axis``."""
        return self.target.group_id(self.builder, axis)

    def barrier(self) -> None:
        """Synchronise the work-group (nothing to do for a work-group of one work-item)."""
        if _product(self.local_size) > 1:
            self.target.barrier(self.builder)

    def shared(self, elem: ir.Type, count: int) -> ir.Value:
        """``count`` elements of work-group shared memory (a pointer in the shared space)."""
        arr = ir.ArrayType(elem, count)
        name = f"{self._kernel}.shared{len(self.builder.module.globals)}"
        var = ir.GlobalVariable(self.builder.module, arr, name, addrspace=self.target.shared_space)
        var.type = ir.PointerType(addrspace=self.target.shared_space)  # opaque, as everything else
        var.linkage = "internal"
        var.initializer = ir.Constant(arr, ir.Undefined)
        var.align = 16
        self.shared_bytes += count * elem_size(elem)
        return var

    def private(self, elem: ir.Type, count: int) -> ir.Value:
        """``count`` elements private to the work-item (an ``alloca`` in the entry block)."""
        with self.builder.goto_block(self._entry):
            self.builder.position_at_start(self._entry)
            slot = _SpaceAlloca(self._entry, ir.ArrayType(elem, count), self.target.private_space)
            slot.align = 64
            self.builder._insert(slot)
            return slot


def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


class _SpaceAlloca(ir.instructions.AllocaInstr):
    """``alloca`` in a given address space (llvmlite's builder only makes address space 0)."""

    def __init__(self, parent: ir.Block, typ: ir.Type, addrspace: int) -> None:
        super().__init__(parent, typ, None, "")
        self.type = ir.PointerType(addrspace=addrspace)
        self._addrspace = addrspace

    def descr(self, buf: list[str]) -> None:
        buf.append(f"alloca {self.allocated_type}")
        if self.align is not None:
            buf.append(f", align {self.align}")
        if self._addrspace:
            buf.append(f", addrspace({self._addrspace})")


def index_builtin(
    builder: ir.IRBuilder, name: str, ret: ir.Type = I32, args: Sequence[ir.Value] = (), cc: str = ""
) -> ir.Value:
    """Call the index builtin ``name`` (returning ``ret``) and widen its result to i64."""
    module = builder.module
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, [a.type for a in args]), name=name)
        fn.calling_convention = cc
    call = builder.call(fn, list(args))
    call.calling_convention = cc
    return call if ret == I64 else builder.zext(call, I64)


def with_attributes(text: str, attributes: Mapping[str, str]) -> str:
    """Module IR ``text`` with string attributes on its first kernel definition."""
    if not attributes:
        return text
    head, sep, rest = text.partition("define ")
    if not sep:
        return text
    brace = rest.index("{")
    attrs = " ".join(f'"{k}"="{v}"' for k, v in attributes.items())
    return head + sep + rest[:brace] + "#901 " + rest[brace:] + f"\nattributes #901 = {{ {attrs} }}\n"


#: Storage types of the 16-bit dtypes (bf16 is kept as its bits and converted by integer ops).
_STORAGE = {"fp16": ir.HalfType(), "bf16": ir.IntType(16)}
I16 = ir.IntType(16)


def compute_dtype(dtype: str) -> str:
    """The dtype the kernels compute in: fp32 for the 16-bit storage dtypes."""
    return "fp32" if dtype in _STORAGE else dtype


class Elements:
    """Loads, stores and arithmetic of one dtype at ``vw`` lanes (plain scalars when ``vw == 1``).

    Values are in the compute type (fp32 for fp16 and bf16, which are converted on load
    and rounded to nearest even on store), pointers hold the storage type.
    """

    def __init__(self, builder: ir.IRBuilder, dtype: str, vw: int) -> None:
        self.b = builder
        self.dtype = dtype
        self.vw = vw
        self.ty = F32 if dtype in _STORAGE else scalar_type(dtype)
        self.store_ty = _STORAGE.get(dtype, self.ty)
        self.vty = self.ty if vw == 1 else ir.VectorType(self.ty, vw)

    def const(self, value: float) -> ir.Value:
        """``value`` in every lane."""
        return ir.Constant(self.vty, value if self.vw == 1 else [value] * self.vw)

    def splat(self, x: ir.Value) -> ir.Value:
        """A scalar broadcast to every lane."""
        return x if self.vw == 1 else splat(self.b, x, self.vw)

    def fma(self, a: ir.Value, b: ir.Value, c: ir.Value) -> ir.Value:
        """``a * b + c`` rounded once."""
        return fma(self.b, a, b, c)

    def _widen(self, x: ir.Value, ty: ir.Type) -> ir.Value:
        if self.dtype == "fp16":
            return self.b.fpext(x, ty)
        if self.dtype == "bf16":
            wide = ir.IntType(32) if ty == F32 else ir.VectorType(ir.IntType(32), self.vw)
            return self.b.bitcast(self.b.shl(self.b.zext(x, wide), _int_splat(wide, 16)), ty)
        return x

    def _narrow(self, x: ir.Value, ty: ir.Type) -> ir.Value:
        if self.dtype == "fp16":
            return self.b.fptrunc(x, ty)
        if self.dtype == "bf16":
            b = self.b
            wide = ir.IntType(32) if x.type == F32 else ir.VectorType(ir.IntType(32), self.vw)
            bits = b.bitcast(x, wide)
            odd = b.and_(b.lshr(bits, _int_splat(wide, 16)), _int_splat(wide, 1))
            rounded = b.add(bits, b.add(odd, _int_splat(wide, 0x7FFF)))
            return b.trunc(b.lshr(rounded, _int_splat(wide, 16)), ty)
        return x

    def load(self, ptr: ir.Value, index: ir.Value) -> ir.Value:
        """One element ``ptr[index]`` as a compute-type scalar."""
        return self._widen(self.load_raw(ptr, index), self.ty)

    def load_vec(self, ptr: ir.Value, index: ir.Value, align: int | None = None) -> ir.Value:
        """``vw`` contiguous elements from ``ptr[index]``."""
        if self.vw == 1:
            return self.load(ptr, index)
        return self._widen(self.load_raw_vec(ptr, index, self.vw, align or _bytes(self.store_ty)), self.vty)

    def gather(self, ptr: ir.Value, indices: Sequence[ir.Value]) -> ir.Value:
        """One element per lane from ``ptr[indices[lane]]``."""
        if self.vw == 1:
            return self.load(ptr, indices[0])
        out: ir.Value = ir.Constant(self.vty, ir.Undefined)
        for lane, index in enumerate(indices):
            out = self.b.insert_element(out, self.load(ptr, index), ir.Constant(I32, lane))
        return out

    def load_raw(self, ptr: ir.Value, index: ir.Value) -> ir.Value:
        """``ptr[index]`` in the storage type, unconverted."""
        return self.b.load(self.b.gep(ptr, [index], inbounds=True, source_etype=self.store_ty), typ=self.store_ty)

    def load_raw_vec(self, ptr: ir.Value, index: ir.Value, count: int, align: int) -> ir.Value:
        """``count`` contiguous elements from ``ptr[index]`` in the storage type, ``align`` bytes aligned."""
        where = self.b.gep(ptr, [index], inbounds=True, source_etype=self.store_ty)
        return self.b.load(where, typ=ir.VectorType(self.store_ty, count), align=align)

    def store_raw(self, value: ir.Value, ptr: ir.Value, index: ir.Value) -> None:
        """Store a storage-type element to ``ptr[index]``."""
        self.b.store(value, self.b.gep(ptr, [index], inbounds=True, source_etype=self.store_ty))

    def store_raw_vec(self, value: ir.Value, ptr: ir.Value, index: ir.Value, align: int) -> None:
        """Store a vector of storage-type elements from ``ptr[index]``, ``align`` bytes aligned."""
        self.b.store(value, self.b.gep(ptr, [index], inbounds=True, source_etype=self.store_ty), align=align)

    def lane(self, value: ir.Value, lane: int) -> ir.Value:
        """Lane ``lane`` of a vector value (the value itself when ``vw == 1``)."""
        return value if self.vw == 1 else self.b.extract_element(value, ir.Constant(I32, lane))

    def store(self, value: ir.Value, ptr: ir.Value, index: ir.Value) -> None:
        """Store a compute-type scalar to ``ptr[index]``."""
        self.store_raw(self._narrow(value, self.store_ty), ptr, index)

    def store_vec(self, value: ir.Value, ptr: ir.Value, index: ir.Value, align: int | None = None) -> None:
        """Store ``vw`` lanes to ``ptr[index:index+vw]``."""
        if self.vw == 1:
            self.store(value, ptr, index)
            return
        narrow = self._narrow(value, ir.VectorType(self.store_ty, self.vw))
        self.store_raw_vec(narrow, ptr, index, align or _bytes(self.store_ty))


def share_rounds(
    builder: ir.IRBuilder, tid: ir.Value, threads: int, lines: int, per_line: int, vec: int
) -> Iterator[tuple[ir.Value, ir.Value]]:
    """A work-group's copy of a tile of ``lines`` x ``per_line`` pieces of ``vec`` elements, the
    work-items taking pieces in turn: yields, round by round, this work-item's (line, first
    element in the line); the code emitted for a piece lands inside the guard of the last,
    partial round (work-items past the tile skip it)."""
    total = lines * per_line
    for s in range(-(-total // threads)):
        piece = builder.add(tid, i64(s * threads))
        if per_line & (per_line - 1) == 0:
            line = builder.lshr(piece, i64(per_line.bit_length() - 1))
            minor = builder.and_(piece, i64(per_line - 1))
        else:
            line, minor = builder.udiv(piece, i64(per_line)), builder.urem(piece, i64(per_line))
        partial = total % threads and s == total // threads
        with builder.if_then(builder.icmp_signed("<", piece, i64(total))) if partial else nullcontext():
            yield line, builder.mul(minor, i64(vec))


def clamped_lanes(
    builder: ir.IRBuilder, at: tuple[ir.Value, ir.Value], size: tuple[ir.Value, ir.Value], width: ir.Value, count: int
) -> list[tuple[ir.Value, ir.Value]]:
    """For ``count`` elements from (row, column) ``at`` of a row-major matrix of ``size`` (rows,
    columns) and row length ``width``: each one's index with row and column clamped into the
    matrix, and whether it lies inside (an i1), so edges read in bounds and store zeros."""
    b = builder
    (row, col), (rows, cols) = at, size
    row_ok = b.icmp_signed("<", row, rows)
    where_row = b.mul(imin(b, row, b.sub(rows, i64(1))), width)
    lanes = []
    for lane in range(count):
        cl = b.add(col, i64(lane))
        ok = b.and_(row_ok, b.icmp_signed("<", cl, cols))
        lanes.append((b.add(where_row, imin(b, cl, b.sub(cols, i64(1)))), ok))
    return lanes


def _int_splat(ty: ir.Type, value: int) -> ir.Constant:
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [value] * ty.count)
    return ir.Constant(ty, value)


def _bytes(ty: ir.Type) -> int:
    return {"half": 2, "i16": 2, "float": 4, "double": 8}[str(ty)]
