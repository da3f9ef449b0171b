"""Code-generation targets of the llvmlite kernels, and the host CPU's program model.

:class:`LLVMTarget` is what every target has: triple, data layout, vector width, a
name for caches. Work-group targets (SPIR-V, NVPTX, AMDGCN) implement
:class:`~hwbench.kernels.llvmir.simt.SIMTTarget`. The host CPU runs *programs*: a
CPU kernel is written as ``body(ctx, args)`` emitting LLVM IR for ONE program (a
task a worker thread runs), and asks the :class:`KernelContext` it is handed:

* ``ctx.program_id(axis)`` / ``ctx.num_programs(axis)`` -- the grid;
* ``ctx.barrier()`` -- sync of the program's threads;
* ``ctx.local_array(elem, count)`` -- per-program scratch memory;
* ``target.vector_width(dtype)`` -- SIMD lanes the body should use;
* ``target.triple`` / ``target.data_layout`` / ``CPUTarget.define_kernel`` --
  the module header and how the entry point is declared.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.kernels.llvmir import cpu_model
from hwbench.kernels.llvmir.irutil import I64, PTR, VOID, for_range, i64
from hwbench.kernels.llvmir.jit import ensure_llvm_initialized

KernelBody = Callable[["KernelContext", list[ir.Argument]], None]

_LOCAL_ALIGN = 64


class KernelContext(ABC):
    """What a kernel body may ask of its target while emitting one program."""

    def __init__(self, target: LLVMTarget, builder: ir.IRBuilder) -> None:
        self.target = target
        self.builder = builder

    @abstractmethod
    def program_id(self, axis: int) -> ir.Value:
        """Index (i64) of this program along ``axis`` (0, 1 or 2) of the grid."""

    @abstractmethod
    def num_programs(self, axis: int) -> ir.Value:
        """Grid size (i64) along ``axis``."""

    @abstractmethod
    def barrier(self) -> None:
        """Synchronise all threads of this program (no-op when a program is one thread)."""

    @abstractmethod
    def local_array(self, elem: ir.Type, count: int) -> ir.Value:
        """Pointer to ``count`` elements of program-private scratch, 64-byte aligned."""

    def vector_width(self, dtype: str) -> int:
        """SIMD lanes for ``dtype`` on this target."""
        return self.target.vector_width(dtype)


class LLVMTarget(ABC):
    """A code-generation target: triple, data layout, vector width, kernel ABI."""

    name: str
    triple: str
    data_layout: str
    #: ``cpu``, ``spirv``, ``ptx`` or ``amdgcn``: kernels choose their blocking by it.
    kind: str = ""

    @abstractmethod
    def vector_width(self, dtype: str) -> int:
        """Elements of ``dtype`` per SIMD vector."""

    def new_module(self, name: str) -> ir.Module:
        """An empty module carrying this target's triple and data layout."""
        module = ir.Module(name=name)
        module.triple = self.triple
        module.data_layout = self.data_layout
        return module

    @property
    def cache_key(self) -> str:
        """Identifies generated code: equal keys mean identical machine code."""
        return self.name


def enabled_features(features: str) -> frozenset[str]:
    """The features an LLVM feature string (``+avx512f,-amx-tile,...``) switches on."""
    return frozenset(f[1:] for f in features.split(",") if f.startswith("+"))


def _type_bytes(ty: ir.Type) -> int:
    if isinstance(ty, ir.IntType):
        return max(1, ty.width // 8)
    if isinstance(ty, ir.VectorType):
        return ty.count * _type_bytes(ty.element)
    return {"float": 4, "double": 8, "half": 2}[str(ty)]


class _CPUContext(KernelContext):
    def __init__(
        self, target: CPUTarget, builder: ir.IRBuilder, entry: ir.Block, workspace: ir.Value, grid: Sequence[ir.Value]
    ) -> None:
        super().__init__(target, builder)
        self._entry = entry
        self._workspace = workspace
        self._grid = list(grid)
        self._ids: list[ir.Value] = []
        self.workspace_bytes = 0

    def _set_pid(self, pid: ir.Value) -> None:
        b = self.builder
        g0, g1, _ = self._grid
        x = b.srem(pid, g0)
        rest = b.sdiv(pid, g0)
        self._ids = [x, b.srem(rest, g1), b.sdiv(rest, g1)]

    def program_id(self, axis: int) -> ir.Value:
        return self._ids[axis]

    def num_programs(self, axis: int) -> ir.Value:
        return self._grid[axis]

    def barrier(self) -> None:
        pass  # one CPU thread runs a whole program

    def local_array(self, elem: ir.Type, count: int) -> ir.Value:
        offset = -(-self.workspace_bytes // _LOCAL_ALIGN) * _LOCAL_ALIGN
        nbytes = count * _type_bytes(elem)
        self.workspace_bytes = offset + nbytes
        with self.builder.goto_block(self._entry):
            return self.builder.gep(self._workspace, [i64(offset)], inbounds=True, source_etype=ir.IntType(8))


class CPUTarget(LLVMTarget):
    """The host CPU: a program is one task run by a worker thread.

    The entry becomes ``void name(i64 pid_begin, i64 pid_end, i64 grid0,
    i64 grid1, i64 grid2, ptr workspace, args...)`` and loops the body over
    flat program ids ``[pid_begin, pid_end)`` (``pid = (z*grid1 + y)*grid0 + x``).
    ``workspace`` is the calling worker's private, 64-byte aligned slice of
    at least ``<name>__workspace_bytes`` bytes (an exported i64 global).
    A second entry ``name__dynamic(ptr counter, i64 total, <same tail>)``
    claims program ids one at a time from an atomic i64 counter, so all
    workers share the grid with dynamic load balancing.
    Pointer arguments are marked ``noalias``: kernel buffers must not overlap.
    """

    kind = "cpu"

    def __init__(
        self,
        cpu_name: str | None = None,
        features: str | None = None,
        isa_level: str | None = None,
        triple: str | None = None,
    ) -> None:
        """The host CPU (or ``cpu_name`` with LLVM ``features``), restricted to ``isa_level``
        (:data:`~.cpu_model.X86_LEVELS`, ``neon``) where one is given; ``triple`` names another
        CPU architecture to cross-compile for (its code is inspected, never run)."""
        import llvmlite.binding as llvm

        ensure_llvm_initialized()
        if triple is not None:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
        host_cpu = cpu_name or llvm.get_host_cpu_name()
        # A restricted x86 level is scheduled by the level's own model (its loads, latencies and
        # register use), not the host's: the code for a level is then the same on every host.
        self.cpu_name = isa_level if cpu_name is None and isa_level in cpu_model.X86_LEVELS else host_cpu
        features = features if features is not None else llvm.get_host_cpu_features().flatten()
        self.isa_level = isa_level
        self.features = cpu_model.restrict_features(features, isa_level) if isa_level else features
        self.triple = triple or llvm.get_process_triple()
        tm = llvm.Target.from_triple(self.triple).create_target_machine(cpu=self.cpu_name, features=self.features)
        self.data_layout = str(tm.target_data)
        #: What every ISA-dependent choice of the CPU kernels is derived from.
        self.description = cpu_model.describe(
            self.triple, self.features, restricted=self.features != features, host_features=features
        )
        self._vector_bytes = self.description.vector_bytes
        level = f"-{isa_level}" if isa_level else ""
        self.name = f"cpu-{host_cpu}{level}-{self._vector_bytes * 8}b"

    @property
    def cache_key(self) -> str:
        return f"{self.name}|{self.triple}|{self.features}"

    def vector_width(self, dtype: str) -> int:
        return self._vector_bytes // DTYPE_BYTES[dtype]

    def define_kernel(
        self, module: ir.Module, name: str, arg_types: Sequence[ir.Type], body: KernelBody
    ) -> ir.Function:
        head = [I64, I64, I64, I64, I64, PTR]
        fn = ir.Function(module, ir.FunctionType(VOID, head + list(arg_types)), name=name)
        for arg in fn.args:
            if isinstance(arg.type, ir.PointerType):
                arg.add_attribute("noalias")
        fn.args[5].add_attribute("noalias")
        pid_begin, pid_end, g0, g1, g2, workspace = fn.args[:6]
        kernel_args = list(fn.args[6:])

        entry = fn.append_basic_block("entry")
        builder = ir.IRBuilder(entry)
        start = builder.append_basic_block("start")
        builder.branch(start)
        builder.position_at_end(start)
        ctx = _CPUContext(self, builder, entry, workspace, (g0, g1, g2))
        with for_range(builder, pid_begin, pid_end, name="pid") as pid:
            ctx._set_pid(pid)
            body(ctx, kernel_args)
        builder.ret_void()

        ws = ir.GlobalVariable(module, I64, name=f"{name}__workspace_bytes")
        ws.initializer = i64(max(ctx.workspace_bytes, _LOCAL_ALIGN))
        ws.global_constant = True
        self._define_dynamic(module, fn)
        return fn

    @staticmethod
    def _define_dynamic(module: ir.Module, kernel: ir.Function) -> ir.Function:
        tail = [a.type for a in kernel.args[2:]]
        fn = ir.Function(module, ir.FunctionType(VOID, [PTR, I64] + tail), name=f"{kernel.name}__dynamic")
        counter, total = fn.args[:2]
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        loop = b.append_basic_block("claim")
        run = b.append_basic_block("run")
        done = b.append_basic_block("done")
        b.branch(loop)
        b.position_at_end(loop)
        pid = b.atomic_rmw("add", counter, i64(1), "monotonic")
        b.cbranch(b.icmp_signed("<", pid, total), run, done)
        b.position_at_end(run)
        b.call(kernel, [pid, b.add(pid, i64(1))] + list(fn.args[2:]))
        b.branch(loop)
        b.position_at_end(done)
        b.ret_void()
        return fn


def host_target() -> CPUTarget:
    """The host CPU target, at the ISA level ``HWBENCH_CPU_ISA`` names (built once per level and
    process)."""
    return _host_target(cpu_model.isa_level_from_env())


@functools.lru_cache(maxsize=8)
def _host_target(isa_level: str | None) -> CPUTarget:
    return CPUTarget(isa_level=isa_level)
