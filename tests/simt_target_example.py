"""A SIMT target defined outside hwbench: 32-bit SPIR-V (``spirv32``), as a new accelerator's
LLVM backend would be added. It implements the interface of ``hwbench.kernels.llvmir.simt``
and nothing else, and the llvmlite kernels lower to it unchanged."""

from __future__ import annotations

import time
from collections.abc import Sequence

import llvmlite.binding as llvm
from llvmlite import ir

from hwbench.kernels.llvmir.irutil import I32, VOID
from hwbench.kernels.llvmir.simt import DeviceLimits, SIMTBinary, SIMTTarget, index_builtin

TRIPLE = "spirv32-unknown-unknown"


def _machine() -> llvm.TargetMachine:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm.Target.from_triple(TRIPLE).create_target_machine(opt=0)


class SPIRV32Target(SIMTTarget):
    """OpenCL SPIR-V with 32-bit pointers and ``size_t``: its index builtins return i32."""

    triple = TRIPLE
    kind = "spirv32"
    kernel_calling_convention = "spir_kernel"

    def __init__(self, limits: DeviceLimits | None = None) -> None:
        super().__init__(limits or DeviceLimits(kind="gpu", local_mem_bytes=32 * 1024, max_work_group=256))
        self.data_layout = str(_machine().target_data)
        self.name = "spirv32-example"

    def _call(self, builder: ir.IRBuilder, name: str, axis: int) -> ir.Value:
        return index_builtin(builder, name, I32, [ir.Constant(I32, axis)], cc="spir_func")

    def local_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._call(builder, "_Z12get_local_idj", axis)

    def group_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._call(builder, "_Z12get_group_idj", axis)

    def barrier(self, builder: ir.IRBuilder) -> None:
        fn = builder.module.globals.get("_Z7barrierj") or ir.Function(
            builder.module, ir.FunctionType(VOID, [I32]), name="_Z7barrierj"
        )
        fn.calling_convention = "spir_func"
        builder.call(fn, [ir.Constant(I32, 1)]).calling_convention = "spir_func"

    def annotate(self, module: ir.Module, fn: ir.Function, local_size: Sequence[int]) -> None:
        sizes = list(local_size) + [1] * (3 - len(local_size))
        fn.set_metadata("reqd_work_group_size", module.add_metadata([ir.Constant(I32, int(v)) for v in sizes]))

    def lower(self, module: ir.Module, entry: str) -> SIMTBinary:
        t0 = time.perf_counter()
        machine = _machine()
        mod = llvm.parse_assembly(str(module))
        mod.triple, mod.data_layout = TRIPLE, str(machine.target_data)
        mod.verify()
        return SIMTBinary(entry, machine.emit_object(mod), "", time.perf_counter() - t0, self.name)
