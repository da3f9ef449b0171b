"""SPIR-V for OpenCL devices from the same llvmlite kernel sources as the CPU JIT.

:class:`SPIRVTarget` lowers a kernel body (``kernels/<name>/llvm.py``) to an OpenCL
``spir_kernel`` for ``spirv64-unknown-unknown``; :func:`emit_spirv` runs LLVM's SPIR-V
backend (shipped in llvmlite) and returns the binary module a device whose
``CL_DEVICE_IL_VERSION`` lists SPIR-V accepts through ``clCreateProgramWithIL``.

A program is one OpenCL work-group of a single work-item, as on the CPU a program is
one task: the bodies already use the target's vector width for SIMD. The bodies speak
of one flat address space (``ptr``); here that becomes OpenCL's generic space
(``addrspace(4)``), global buffers arrive as ``addrspace(1)`` and are cast to it.
``ctx.local_array`` hands out slices of a global workspace buffer, one slice per
program, because the CPU kernels' scratch (packed GEMM panels) exceeds local memory.

Entry: ``name(ptr addrspace(1) workspace, i64 workspace_stride, args...)``, with
``stride >= workspace_bytes(name)``, launched over ``grid`` work-groups of size 1.
"""

from __future__ import annotations

import importlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.kernel import get_kernel
from hwbench.kernels.llvmir.irutil import I32, I64, PTR, VOID, i64
from hwbench.kernels.llvmir.target import KernelBody, KernelContext, LLVMTarget

if TYPE_CHECKING:
    import llvmlite.binding as llvm

TRIPLE = "spirv64-unknown-unknown"
#: First word of every SPIR-V module (little-endian on disk: 03 02 23 07).
SPIRV_MAGIC = 0x07230203
GLOBAL = ir.PointerType(addrspace=1)
_ALIGN = 64
_CLK_LOCAL_MEM_FENCE = 1
_BUILTINS = {"group": "_Z12get_group_idj", "groups": "_Z14get_num_groupsj"}


def _builtin(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, list(args)), name=name)
        fn.calling_convention = "spir_func"
    return fn


class _SPIRVContext(KernelContext):
    """Grid from OpenCL's work-group builtins; scratch from the global workspace."""

    def __init__(self, target: SPIRVTarget, builder: ir.IRBuilder, workspace: ir.Value) -> None:
        super().__init__(target, builder)
        self._workspace = workspace
        self.workspace_bytes = 0

    def _call(self, which: str, axis: int) -> ir.Value:
        fn = _builtin(self.builder.module, _BUILTINS[which], I64, [I32])
        call = self.builder.call(fn, [ir.Constant(I32, axis)])
        call.calling_convention = "spir_func"
        return call

    def program_id(self, axis: int) -> ir.Value:
        return self._call("group", axis)

    def num_programs(self, axis: int) -> ir.Value:
        return self._call("groups", axis)

    def barrier(self) -> None:
        fn = _builtin(self.builder.module, "_Z7barrierj", VOID, [I32])
        self.builder.call(fn, [ir.Constant(I32, _CLK_LOCAL_MEM_FENCE)]).calling_convention = "spir_func"

    def local_array(self, elem: ir.Type, count: int) -> ir.Value:
        offset = -(-self.workspace_bytes // _ALIGN) * _ALIGN
        self.workspace_bytes = offset + count * _type_bytes(elem)
        return self.builder.gep(self._workspace, [i64(offset)], inbounds=True, source_etype=ir.IntType(8))


def _type_bytes(ty: ir.Type) -> int:
    if isinstance(ty, ir.VectorType):
        return ty.count * _type_bytes(ty.element)
    if isinstance(ty, ir.IntType):
        return max(1, ty.width // 8)
    return {"float": 4, "double": 8, "half": 2}[str(ty)]


class SPIRVTarget(LLVMTarget):
    """OpenCL SPIR-V (``spirv64``) for a device with ``lanes`` fp32 SIMD lanes per work-item."""

    triple = TRIPLE
    kind = "spirv"

    def __init__(self, lanes: int = 4) -> None:
        self.data_layout = str(_machine().target_data)
        self.lanes = max(1, int(lanes))
        self.name = f"spirv64-v{self.lanes}"
        self.workspace: dict[str, int] = {}

    def vector_width(self, dtype: str) -> int:
        return max(1, self.lanes * 4 // DTYPE_BYTES[dtype])

    def define_kernel(
        self, module: ir.Module, name: str, arg_types: Sequence[ir.Type], body: KernelBody
    ) -> ir.Function:
        params = [GLOBAL, I64] + [GLOBAL if t == PTR else t for t in arg_types]
        fn = ir.Function(module, ir.FunctionType(VOID, params), name=name)
        fn.calling_convention = "spir_kernel"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ws_global, stride = fn.args[:2]
        args = [b.addrspacecast(a, PTR) if a.type == GLOBAL else a for a in fn.args[2:]]
        ctx = _SPIRVContext(self, b, workspace=None)
        flat = b.add(
            b.mul(b.add(b.mul(ctx.program_id(2), ctx.num_programs(1)), ctx.program_id(1)), ctx.num_programs(0)),
            ctx.program_id(0),
        )
        mine = b.gep(ws_global, [b.mul(flat, stride)], inbounds=True, source_etype=ir.IntType(8))
        ctx._workspace = b.addrspacecast(mine, PTR)
        body(ctx, args)
        b.ret_void()
        self.workspace[name] = max(ctx.workspace_bytes, _ALIGN)
        return fn


_FLAT_PTR = re.compile(r"(?<![%@.\w\"])ptr(?![\w.\"])(?!\s+addrspace)")
_P0_SUFFIX = re.compile(r"(@\"?llvm\.[\w.]*?)\.p0\b")


def _masked_lanes(fn: ir.Function, store: bool) -> None:
    """Give a masked load/store declaration a lane-by-lane body (SPIR-V has no masked memory ops)."""
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if store:
        value, ptr, _, mask = fn.args
        vty = value.type
    else:
        ptr, _, mask, value = fn.args
        vty = fn.function_type.return_type
    for lane in range(vty.count):
        index = ir.Constant(I32, lane)
        on = b.extract_element(mask, index)
        before = b.block
        with b.if_then(on):
            where = b.gep(ptr, [i64(lane)], inbounds=True, source_etype=vty.element)
            if store:
                b.store(b.extract_element(value, index), where)
            else:
                loaded = b.insert_element(value, b.load(where, typ=vty.element), index)
                inside = b.block
        if not store:
            merged = b.phi(vty)
            merged.add_incoming(loaded, inside)
            merged.add_incoming(value, before)
            value = merged
    b.ret_void() if store else b.ret(value)


def _lower_masked(module: ir.Module) -> None:
    """Replace ``llvm.masked.load/store`` declarations by internal lane-by-lane functions."""
    for fn in list(module.functions):
        for kind in ("load", "store"):
            if fn.name.startswith(f"llvm.masked.{kind}.") and fn.is_declaration:
                fn.name = fn.name.replace("llvm.masked.", "hwbench.masked.").replace(".", "_")
                fn.linkage = "internal"
                _masked_lanes(fn, kind == "store")


def to_generic_ir(module: ir.Module) -> str:
    """The module's IR with the bodies' flat ``ptr`` moved to OpenCL's generic space."""
    _lower_masked(module)
    text = _FLAT_PTR.sub("ptr addrspace(4)", str(module))
    return _P0_SUFFIX.sub(r"\1.p4", text)


@dataclass(frozen=True)
class SPIRVModule:
    """A SPIR-V binary and what launching its entry needs."""

    binary: bytes
    entry: str
    workspace_bytes: int
    compile_s: float
    target: str


def _machine() -> llvm.TargetMachine:
    """LLVM's SPIR-V target machine; RuntimeError when this llvmlite was built without it."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    try:
        return llvm.Target.from_triple(TRIPLE).create_target_machine(opt=3)
    except RuntimeError as exc:
        raise RuntimeError(f"this llvmlite's LLVM has no SPIR-V backend: {exc}") from None


def emit_spirv(module: ir.Module, target: SPIRVTarget, entry: str) -> SPIRVModule:
    """Verify, optimise (O3) and lower ``module`` to a SPIR-V binary with LLVM's SPIR-V backend.

    Raises RuntimeError when llvmlite's LLVM has no SPIR-V backend or rejects the module.
    """
    import llvmlite.binding as llvm

    t0 = time.perf_counter()
    machine = _machine()
    mod = llvm.parse_assembly(to_generic_ir(module))
    mod.triple, mod.data_layout = TRIPLE, str(machine.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(machine, pto)
    pb.getModulePassManager().run(mod, pb)
    binary = machine.emit_object(mod)
    if int.from_bytes(binary[:4], "little") != SPIRV_MAGIC:
        raise RuntimeError("LLVM's SPIR-V backend produced no SPIR-V module")
    return SPIRVModule(binary, entry, target.workspace[entry], time.perf_counter() - t0, target.name)


def spirv_problem(binary: bytes) -> str | None:
    """``spirv-val``'s first complaint about ``binary``; None when valid or when spirv-val is absent."""
    import shutil
    import subprocess
    import tempfile

    validator = shutil.which("spirv-val")
    if validator is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".spv") as handle:
        handle.write(binary)
        handle.flush()
        proc = subprocess.run([validator, handle.name], capture_output=True, text=True, timeout=60)
    return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip().splitlines()[0]


def llvm_source(kernel: str) -> Any:
    """The module of ``kernel``'s llvmlite source (its folder's ``Source`` in that language)."""
    spec = get_kernel(kernel)
    source = spec.source_in("llvmlite")
    if source is None:
        raise RuntimeError(f"kernel {kernel} has no llvmlite source")
    return importlib.import_module(spec.entry(source.module))


def _build_here(kernel: str, dtype: str, lanes: int) -> SPIRVModule:
    source = llvm_source(kernel)
    target = SPIRVTarget(lanes)
    return emit_spirv(source.build(target, dtype), target, source.KERNEL)


def _build_in_child(kernel: str, dtype: str, lanes: int) -> SPIRVModule:
    """The same build in a fresh interpreter (see :func:`build_spirv` for why)."""
    import base64
    import json
    import subprocess
    import sys

    code = (
        "import base64, dataclasses, json; from hwbench.kernels.llvmir.spirv import _build_here; "
        f"m = dataclasses.asdict(_build_here({kernel!r}, {dtype!r}, {lanes})); "
        "m['binary'] = base64.b64encode(m['binary']).decode(); print(json.dumps(m))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"SPIR-V build in a child process failed: {proc.stderr.strip()[-300:]}")
    fields = json.loads(proc.stdout.strip().splitlines()[-1])
    fields["binary"] = base64.b64decode(fields["binary"])
    return SPIRVModule(**fields)


#: Fresh-process rebuilds tried when LLVM's SPIR-V backend emits an invalid module.
SPIRV_RETRIES = 3


def build_spirv(kernel: str, dtype: str, lanes: int) -> SPIRVModule:
    """The llvmlite source of ``kernel`` (``gemm``, ``attention``, ...) in ``dtype`` as SPIR-V for ``lanes`` fp32 lanes.

    LLVM 22's SPIR-V backend occasionally emits a module with a duplicated result id
    ("Id N is defined more than once") for the same IR, depending on the process's memory
    layout. Where ``spirv-val`` is installed every module is validated, and an invalid one is
    rebuilt in a fresh interpreter; RuntimeError (a compile_error record) if none validates.
    """
    module = _build_here(kernel, dtype, lanes)
    problem = spirv_problem(module.binary)
    for _ in range(SPIRV_RETRIES):
        if problem is None:
            return module
        module = _build_in_child(kernel, dtype, lanes)
        problem = spirv_problem(module.binary)
    if problem is not None:
        raise RuntimeError(f"LLVM's SPIR-V backend emitted an invalid module for {kernel} {dtype}: {problem}")
    return module
