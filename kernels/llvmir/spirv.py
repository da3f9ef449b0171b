"""SPIR-V for OpenCL devices from the llvmlite SIMT kernel sources.

:class:`SPIRVTarget` implements the work-group interface of :mod:`.simt` with OpenCL's
builtins (``get_local_id``, ``get_group_id``, ``barrier``), the CrossWorkgroup (1),
Workgroup (3) and Function (0) address spaces, and ``reqd_work_group_size``;
:func:`emit_spirv` runs LLVM's SPIR-V backend (shipped in llvmlite) and returns the
binary module a device whose ``CL_DEVICE_IL_VERSION`` lists SPIR-V accepts through
``clCreateProgramWithIL``.
"""

from __future__ import annotations

import inspect
import shutil
import time
from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

from llvmlite import ir

from hwbench.core import binary_cache
from hwbench.core.binary_cache import binary_key
from hwbench.core.kernel import get_kernel
from hwbench.kernels.llvmir.irutil import I32, I64, VOID, intrinsic_suffix
from hwbench.kernels.llvmir.simt import DeviceLimits, SIMTBinary, SIMTTarget, index_builtin

if TYPE_CHECKING:
    import llvmlite.binding as llvm

TRIPLE = "spirv64-unknown-unknown"
#: First word of every SPIR-V module (little-endian on disk: 03 02 23 07).
SPIRV_MAGIC = 0x07230203
_CLK_LOCAL_MEM_FENCE = 1


class SPIRVTarget(SIMTTarget):
    """OpenCL SPIR-V (``spirv64``) for a device with the given limits."""

    triple = TRIPLE
    kind = "spirv"
    kernel_calling_convention = "spir_kernel"

    def __init__(self, limits: DeviceLimits | None = None) -> None:
        super().__init__(limits or DeviceLimits(kind="cpu", lanes=4))
        self.data_layout = str(_machine().target_data)
        self.name = f"spirv64-{self.limits.kind}"

    def _builtin(self, builder: ir.IRBuilder, name: str, axis: int) -> ir.Value:
        return index_builtin(builder, name, I64, [ir.Constant(I32, axis)], cc="spir_func")

    def local_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._builtin(builder, "_Z12get_local_idj", axis)

    def group_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._builtin(builder, "_Z12get_group_idj", axis)

    def linear_local_id(self, builder: ir.IRBuilder, local_size: Sequence[int]) -> ir.Value:
        # OpenCL's own builtin: LLVM 22's SPIR-V backend miscompiles ``(y * nx + x) & mask``
        # (narrowed to i8 with the wrong sign) when x and y come from get_local_id.
        return index_builtin(builder, "_Z19get_local_linear_idv", I64, [], cc="spir_func")

    def barrier(self, builder: ir.IRBuilder) -> None:
        module = builder.module
        fn = module.globals.get("_Z7barrierj")
        if fn is None:
            fn = ir.Function(module, ir.FunctionType(VOID, [I32]), name="_Z7barrierj")
            fn.calling_convention = "spir_func"
        builder.call(fn, [ir.Constant(I32, _CLK_LOCAL_MEM_FENCE)]).calling_convention = "spir_func"

    def exp(self, builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
        # OpenCL's own exp (OpenCL.std, at most 3 ulp in fp32): the device's compiler vectorises it.
        name = f"llvm.exp.{intrinsic_suffix(x.type)}"
        module = builder.module
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(x.type, [x.type]), name=name)
        return builder.call(fn, [x])

    def annotate(self, module: ir.Module, fn: ir.Function, local_size: Sequence[int]) -> None:
        sizes = list(local_size) + [1] * (3 - len(local_size))
        fn.set_metadata("reqd_work_group_size", module.add_metadata([ir.Constant(I32, int(v)) for v in sizes]))

    def lower(self, module: ir.Module, entry: str) -> SIMTBinary:
        return emit_spirv(module, self, entry)


def _machine() -> llvm.TargetMachine:
    """LLVM's SPIR-V target machine; RuntimeError when this llvmlite was built without it."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    try:
        # Code-generation optimisation off: LLVM 22's SPIR-V backend at -O1 and above miscompiles
        # index arithmetic of multi-work-item kernels (e.g. ``x & 3`` emitted as ``x & 255``);
        # the middle-end clean-up runs before it, and the device's compiler optimises the rest.
        return llvm.Target.from_triple(TRIPLE).create_target_machine(opt=0)
    except RuntimeError as exc:
        raise RuntimeError(f"this llvmlite's LLVM has no SPIR-V backend: {exc}") from None


def emit_spirv(module: ir.Module, target: SPIRVTarget, entry: str) -> SIMTBinary:
    """Verify, optimise (O3) and lower ``module`` to a SPIR-V binary with LLVM's SPIR-V backend.

    Raises RuntimeError when llvmlite's LLVM has no SPIR-V backend or rejects the module.
    """
    import llvmlite.binding as llvm

    t0 = time.perf_counter()
    machine = _machine()
    mod = llvm.parse_assembly(str(module))
    mod.triple, mod.data_layout = TRIPLE, str(machine.target_data)
    mod.verify()
    _clean_up(mod, machine)
    binary = machine.emit_object(mod)
    if int.from_bytes(binary[:4], "little") != SPIRV_MAGIC:
        raise RuntimeError("LLVM's SPIR-V backend produced no SPIR-V module")
    return SIMTBinary(entry, binary, "", time.perf_counter() - t0, target.name)


def _clean_up(mod: llvm.ModuleRef, machine: llvm.TargetMachine) -> None:
    """Scalar clean-up passes only: the device's compiler optimises the SPIR-V itself, and the
    O3 pipeline's VectorCombine makes ``<1 x float>`` loads, which SPIR-V cannot express."""
    import llvmlite.binding as llvm

    pm = llvm.create_new_module_pass_manager()
    for add in (
        pm.add_sroa_pass,
        pm.add_instruction_combine_pass,
        pm.add_simplify_cfg_pass,
        pm.add_sccp_pass,
        pm.add_new_gvn_pass,
        pm.add_instruction_combine_pass,
        pm.add_aggressive_dce_pass,
        pm.add_simplify_cfg_pass,
    ):
        add()
    pm.run(mod, llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=2)))


@cache
def _lowering_source() -> str:
    """The source of the functions that lower a module, part of every cache key: a changed
    lowering makes new keys (read once per process)."""
    return "".join(inspect.getsource(f) for f in (_machine, _clean_up, emit_spirv))


def spirv_problem(binary: bytes) -> str | None:
    """``spirv-val``'s first complaint about ``binary``; None when valid or when spirv-val is absent."""
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


def _ir(kernel: str, dtype: str, limits: Mapping[str, Any], config: Mapping[str, int]) -> tuple[ir.Module, Any, str]:
    """The kernel's SIMT module for a device with ``limits``, its target, and its entry's name."""
    source = get_kernel(kernel).source_module("llvmlite")
    target = SPIRVTarget(DeviceLimits(**limits))
    return source.build(target, dtype, config), target, source.KERNEL


def _build_here(kernel: str, dtype: str, limits: Mapping[str, Any], config: Mapping[str, int]) -> SIMTBinary:
    module, target, entry = _ir(kernel, dtype, limits, config)
    return target.lower(module, entry)


def _build_in_child(kernel: str, dtype: str, limits: Mapping[str, Any], config: Mapping[str, int]) -> SIMTBinary:
    """The same build in a fresh interpreter (see :func:`build_spirv` for why)."""
    import base64
    import dataclasses
    import json
    import subprocess
    import sys

    code = (
        "import base64, dataclasses, json, sys; from hwbench.kernels.llvmir.spirv import _build_here; "
        "a = json.loads(sys.stdin.read()); m = dataclasses.asdict(_build_here(*a)); "
        "m['binary'] = base64.b64encode(m['binary']).decode(); print(json.dumps(m))"
    )
    request = json.dumps([kernel, dtype, dict(limits), dict(config)])
    proc = subprocess.run([sys.executable, "-c", code], input=request, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"SPIR-V build in a child process failed: {proc.stderr.strip()[-300:]}")
    fields = json.loads(proc.stdout.strip().splitlines()[-1])
    fields["binary"] = base64.b64decode(fields["binary"])
    return SIMTBinary(**{f.name: fields[f.name] for f in dataclasses.fields(SIMTBinary)})


#: Fresh-process rebuilds tried when LLVM's SPIR-V backend emits an invalid module.
SPIRV_RETRIES = 3


def build_spirv(kernel: str, dtype: str, limits: DeviceLimits, config: Mapping[str, int]) -> SIMTBinary:
    """The SIMT llvmlite source of ``kernel`` (``gemm``, ``attention``) in ``dtype`` as SPIR-V
    for a device with ``limits``, in configuration ``config``.

    LLVM 22's SPIR-V backend occasionally emits a module with a duplicated result id
    ("Id N is defined more than once") for the same IR, depending on the process's memory
    layout. Where ``spirv-val`` is installed every module is validated, and an invalid one is
    rebuilt in a fresh interpreter; RuntimeError (a compile_error record) if none validates.
    A module ``spirv-val`` validated is kept in the binary cache, by the hash of its IR and LLVM's
    version, and taken from there next time.
    """
    import llvmlite
    import llvmlite.binding as llvm

    start = time.perf_counter()
    ir_module, target, entry = _ir(kernel, dtype, limits.as_dict(), config)
    key = binary_key("spirv", llvmlite.__version__, llvm.llvm_version_info, TRIPLE, _lowering_source(), str(ir_module))
    cached = binary_cache.load("spirv", key)
    if cached is not None:
        return SIMTBinary(entry, cached, "", time.perf_counter() - start, target.name)
    module = target.lower(ir_module, entry)
    problem = spirv_problem(module.binary)
    for _ in range(SPIRV_RETRIES):
        if problem is None:
            break
        module = _build_in_child(kernel, dtype, limits.as_dict(), config)
        problem = spirv_problem(module.binary)
    if problem is not None:
        raise RuntimeError(f"LLVM's SPIR-V backend emitted an invalid module for {kernel} {dtype}: {problem}")
    if shutil.which("spirv-val"):  # only a validated module is kept: a defective one must not persist
        binary_cache.store("spirv", key, module.binary)
    return module
