"""GPU targets of the llvmlite SIMT kernels: NVPTX (CUDA) and AMDGCN (ROCm), and their compilers.

Both implement the work-group interface of :mod:`.simt`: a work-group is a CUDA block /
HIP work-group, a work-item a thread; kernel buffers are global-space (1) pointers,
shared memory is address space 3 (``.shared`` / LDS), the barrier is ``bar.sync 0`` /
``s_barrier`` with work-group fences, and the fixed block size becomes the launch bound
(``nvvm.maxntid`` / ``amdgpu-flat-work-group-size``) so the register allocator knows it.

Compilation needs no GPU: :func:`compile_module` lowers a module to PTX text (assembled
by ``ptxas`` for a real architecture) or to an AMDGCN code object (``hsaco``, linked with
``ld.lld`` or Triton's bundled linker).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from llvmlite import ir

from hwbench.kernels.llvmir.irutil import VOID
from hwbench.kernels.llvmir.simt import DeviceLimits, SIMTBinary, SIMTTarget, index_builtin, with_attributes

_init_lock = threading.Lock()
_initialized = False


def ensure_gpu_targets() -> None:
    """Initialise LLVM's NVPTX and AMDGPU code generators once."""
    global _initialized
    import llvmlite.binding as llvm

    with _init_lock:
        if not _initialized:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _initialized = True


class GPUTarget(SIMTTarget):
    """A GPU architecture (``sm_90``, ``gfx942``) as a SIMT target."""

    default_limits = DeviceLimits()

    def __init__(self, arch: str, limits: DeviceLimits | None = None) -> None:
        super().__init__(limits or self.default_limits)
        self.arch = arch
        self.name = f"{self.kind}-{arch}"

    def lower(self, module: ir.Module, entry: str) -> SIMTBinary:
        return compile_module(module, self, entry)


class NVPTXTarget(GPUTarget):
    """NVIDIA GPUs: PTX for ``arch`` (``sm_90``), assembled by ptxas or loaded by the driver's JIT."""

    kind = "ptx"
    triple = "nvptx64-nvidia-cuda"
    data_layout = "e-p3:32:32-p4:32:32-p5:32:32-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
    kernel_calling_convention = "ptx_kernel"
    default_limits = DeviceLimits(kind="gpu", local_mem_bytes=48 * 1024, max_work_group=1024, subgroup=32)

    def __init__(self, arch: str = "sm_90", limits: DeviceLimits | None = None) -> None:
        super().__init__(arch, limits)

    def local_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return index_builtin(builder, f"llvm.nvvm.read.ptx.sreg.tid.{'xyz'[axis]}")

    def group_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return index_builtin(builder, f"llvm.nvvm.read.ptx.sreg.ctaid.{'xyz'[axis]}")

    def barrier(self, builder: ir.IRBuilder) -> None:
        module = builder.module
        fn = module.globals.get("llvm.nvvm.barrier0") or ir.Function(
            module, ir.FunctionType(VOID, []), name="llvm.nvvm.barrier0"
        )
        builder.call(fn, [])

    def entry_attributes(self, local_size: Sequence[int]) -> dict[str, str]:
        return {"nvvm.maxntid": ",".join(str(int(v)) for v in (list(local_size) + [1, 1])[:3])}


class AMDGCNTarget(GPUTarget):
    """AMD GPUs: an AMDGCN code object for ``arch`` (``gfx942``) for the HIP runtime."""

    kind = "amdgcn"
    triple = "amdgcn-amd-amdhsa"
    data_layout = (
        "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-"
        "p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-"
        "v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
    )
    kernel_calling_convention = "amdgpu_kernel"
    private_space = 5
    default_limits = DeviceLimits(kind="gpu", local_mem_bytes=64 * 1024, max_work_group=1024, subgroup=64)

    def __init__(self, arch: str = "gfx942", limits: DeviceLimits | None = None) -> None:
        super().__init__(arch, limits)

    def local_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return index_builtin(builder, f"llvm.amdgcn.workitem.id.{'xyz'[axis]}")

    def group_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return index_builtin(builder, f"llvm.amdgcn.workgroup.id.{'xyz'[axis]}")

    def barrier(self, builder: ir.IRBuilder) -> None:
        module = builder.module
        fn = module.globals.get("llvm.amdgcn.s.barrier") or ir.Function(
            module, ir.FunctionType(VOID, []), name="llvm.amdgcn.s.barrier"
        )
        builder.fence("release", "workgroup")
        builder.call(fn, [])
        builder.fence("acquire", "workgroup")

    def entry_attributes(self, local_size: Sequence[int]) -> dict[str, str]:
        threads = 1
        for v in local_size:
            threads *= int(v)
        return {"amdgpu-flat-work-group-size": f"1,{threads}"}


def target_for(arch: str, limits: DeviceLimits | None = None) -> GPUTarget:
    """The GPU target of an architecture name: ``sm_NN`` is NVPTX, ``gfxNNN`` is AMDGCN."""
    if arch.startswith("sm_"):
        return NVPTXTarget(arch, limits)
    if arch.startswith("gfx"):
        return AMDGCNTarget(arch, limits)
    raise ValueError(f"unknown GPU architecture {arch!r}: expected sm_NN or gfxNNN")


def compile_module(module: ir.Module, target: GPUTarget, kernel: str, opt: int = 3) -> SIMTBinary:
    """Optimise ``module`` and lower it for ``target`` (no GPU needed)."""
    import llvmlite.binding as llvm

    ensure_gpu_targets()
    t0 = time.perf_counter()
    features = "+ptx80" if isinstance(target, NVPTXTarget) else ""
    tm = llvm.Target.from_triple(target.triple).create_target_machine(cpu=target.arch, features=features, opt=opt)
    text = with_attributes(str(module), getattr(module, "simt_entry_attributes", {}))
    mod = llvm.parse_assembly(text)
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    optimized = str(mod)  # code generation rewrites the module in place: emit each output from a copy
    assembly = tm.emit_assembly(mod)
    if isinstance(target, NVPTXTarget):
        binary = assembly.encode()
    else:
        binary = link_hsaco(tm.emit_object(llvm.parse_assembly(optimized)))
    return SIMTBinary(kernel, binary, assembly, time.perf_counter() - t0, target.name)


def link_hsaco(obj: bytes) -> bytes:
    """Link a relocatable AMDGCN object into a loadable code object (``ld.lld -shared``)."""
    with tempfile.TemporaryDirectory(prefix="hwbench-hsaco-") as tmp:
        src, out = Path(tmp, "k.o"), Path(tmp, "k.hsaco")
        src.write_bytes(obj)
        lld = shutil.which("ld.lld") or next((str(p) for p in Path("/opt/rocm/llvm/bin").glob("ld.lld")), None)
        if lld:
            subprocess.run([lld, "-shared", str(src), "-o", str(out)], check=True, capture_output=True)
        else:
            from triton._C.libtriton import amd  # Triton bundles an lld for its own hsaco

            amd.link_hsaco(str(src), str(out))
        return out.read_bytes()
