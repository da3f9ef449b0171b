"""GPU targets of the llvmlite SIMT kernels: NVPTX (CUDA) and AMDGCN (ROCm), and their compilers.

Both implement the work-group interface of :mod:`.simt`: a work-group is a CUDA block /
HIP work-group, a work-item a thread; kernel buffers are global-space (1) pointers,
shared memory is address space 3 (``.shared`` / LDS), the barrier is ``bar.sync 0`` /
``s_barrier`` with work-group fences, and the fixed block size becomes the launch bound
(``nvvm.maxntid`` / ``amdgpu-flat-work-group-size``) so the register allocator knows it.

Compilation needs no GPU: :func:`compile_module` lowers a module to PTX text (assembled
by ``ptxas`` for a real architecture) or to an AMDGCN code object (``hsaco``). Code objects
are version 5 (the ``amdhsa_code_object_version`` module flag, as Triton and clang set it:
LLVM 22 would emit version 6, which older ROCm runtimes reject), linked by ROCm's
``ld.lld``, else Triton's, and only then by one on ``PATH`` (:func:`find_linker`).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from llvmlite import ir

from hwbench.kernels.llvmir.gpu_intrinsics import LDS_OCCUPANCY
from hwbench.kernels.llvmir.irutil import VOID, elem_size
from hwbench.kernels.llvmir.mma import MatrixInstruction, amdgcn_mfma, nvptx_mma
from hwbench.kernels.llvmir.simt import (
    DeviceLimits,
    SIMTBinary,
    SIMTBody,
    SIMTTarget,
    index_builtin,
    with_attributes,
)

_init_lock = threading.Lock()
_initialized = False

#: The AMDGPU code object version emitted (``e_ident[EI_ABIVERSION]`` 3 in the ELF header).
CODE_OBJECT_VERSION = 5
#: Where ROCm installs its LLVM linker when ``ROCM_PATH`` does not say.
OPT_ROCM = Path("/opt/rocm")
#: What :func:`find_linker` answers for Triton's in-process lld (``triton._C.libtriton.amd.link_hsaco``).
TRITON_IN_PROCESS = "triton (in process)"


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

    def mma(self, dtype: str) -> MatrixInstruction | None:
        """``mma.sync`` m16n8k16 in bf16 and fp16 on sm_80 and newer."""
        return nvptx_mma(dtype, self.arch)


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
        return {"amdgpu-flat-work-group-size": f"1,{_product(local_size)}"}

    def define_simt_kernel(
        self, module: ir.Module, name: str, params: Sequence[ir.Type], body: SIMTBody, local_size: Sequence[int]
    ) -> ir.Function:
        """The kernel; one whose body asked for it (``gpu_intrinsics.ask_lds_occupancy``) and whose
        LDS holds a SIMD to fewer waves than the wave slots would is asked for those waves
        (``amdgpu-waves-per-eu``, :meth:`waves_per_eu`): the register allocator may then use the
        VGPRs they leave (:meth:`vgpr_budget`), which costs no occupancy the LDS allows. Not every
        kernel's: the FMA GEMM (260 VGPRs, one wave by its registers) spills at the three its LDS allows."""
        fn = super().define_simt_kernel(module, name, params, body, local_size)
        threads = _product(local_size)
        waves = self.waves_per_eu(threads, shared_bytes(module, self.shared_space))
        if name in getattr(module, LDS_OCCUPANCY, ()) and 0 < waves < self.waves_per_eu(threads, 0):
            module.simt_entry_attributes = {**module.simt_entry_attributes, "amdgpu-waves-per-eu": str(waves)}
        return fn

    def register_file(self) -> RegisterFile | None:
        """The architecture's SIMD (:class:`RegisterFile`), None where not described here (RDNA)."""
        return register_file(self.arch)

    def waves_per_eu(self, threads: int, lds_bytes: int) -> int:
        """Waves of this kernel one SIMD holds as its work-groups' LDS and wave slots allow (0 where
        the architecture is not described): whole work-groups per CU (its LDS, ``local_mem_bytes``,
        over the group's), each putting ``ceil(waves / SIMDs)`` waves on a SIMD."""
        regs = self.register_file()
        if regs is None:
            return 0
        waves = -(-threads // self.limits.subgroup)
        per_simd = -(-waves // regs.simds)
        groups = regs.max_waves // per_simd
        if lds_bytes:
            groups = min(groups, self.limits.local_mem_bytes // lds_bytes)
        return max(1, groups * per_simd)

    def vgpr_budget(self, waves: int) -> int:
        """VGPRs (with AGPRs on a unified file) a wave may hold with ``waves`` waves on each SIMD:
        the file over the waves, in whole allocation granules, at most what one wave addresses."""
        regs = self.register_file()
        if regs is None:
            raise ValueError(f"{self.arch}: register file not described")
        return min(regs.per_wave, regs.per_lane // max(1, waves) // regs.granule * regs.granule)

    def mma(self, dtype: str) -> MatrixInstruction | None:
        """``v_mfma_f32_16x16x16`` in bf16 and fp16 on gfx90a and newer."""
        return amdgcn_mfma(dtype, self.arch)


@dataclass(frozen=True)
class RegisterFile:
    """One SIMD of an AMD CU: its VGPRs per lane (VGPRs and AGPRs together where the file is
    unified, gfx90a and newer), the most one wave holds, the allocation granule, its wave slots,
    and the SIMDs of a CU (AMD's CDNA ISA guides, "Vector General Purpose Registers")."""

    per_lane: int
    per_wave: int
    granule: int
    max_waves: int
    simds: int = 4


#: CDNA's SIMDs: gfx908's 256 VGPRs (its 256 AGPRs apart), gfx90a/gfx94x/gfx950's unified 512.
REGISTER_FILES = {
    "gfx908": RegisterFile(per_lane=256, per_wave=256, granule=4, max_waves=10),
    "gfx90a": RegisterFile(per_lane=512, per_wave=512, granule=8, max_waves=8),
    "gfx94": RegisterFile(per_lane=512, per_wave=512, granule=8, max_waves=8),
    "gfx950": RegisterFile(per_lane=512, per_wave=512, granule=8, max_waves=8),
}


def register_file(arch: str) -> RegisterFile | None:
    """:data:`REGISTER_FILES`' entry of ``arch`` (``gfx940``-``gfx942`` by their family ``gfx94``)."""
    base = arch.split(":")[0]
    return REGISTER_FILES.get(base) or REGISTER_FILES.get(base[:5] if base.startswith("gfx94") else base)


def shared_bytes(module: ir.Module, space: int) -> int:
    """Bytes of the module's global variables in address space ``space`` (LDS / shared arrays)."""
    total = 0
    for var in module.global_values:
        ty = getattr(var, "value_type", None)
        if isinstance(var, ir.GlobalVariable) and var.addrspace == space and isinstance(ty, ir.ArrayType):
            total += ty.count * elem_size(ty.element)
    return total


def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


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
    if isinstance(target, AMDGCNTarget):
        mod.link_in(llvm.parse_assembly(code_object_flag(target.triple, mod.data_layout)))
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


def code_object_flag(triple: str, data_layout: str) -> str:
    """An IR module holding only the module flag that sets the AMDGPU code object version
    (linked into a kernel's module; behaviour 1, an error on a different value)."""
    version = CODE_OBJECT_VERSION * 100
    return (
        f'target triple = "{triple}"\ntarget datalayout = "{data_layout}"\n'
        f'!llvm.module.flags = !{{!0}}\n!0 = !{{i32 1, !"amdhsa_code_object_version", i32 {version}}}\n'
    )


def triton_folder() -> Path | None:
    """The installed Triton package's folder (found without importing Triton), if any."""
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def triton_links_in_process() -> bool:
    """Whether the installed Triton links code objects in this process (``amd.link_hsaco``)."""
    try:
        from triton._C.libtriton import amd  # Triton bundles an lld for its own code objects
    except ImportError:
        return False
    return hasattr(amd, "link_hsaco")


def find_linker(
    environ: Mapping[str, str] | None = None,
    triton: Path | None = None,
    opt_rocm: Path = OPT_ROCM,
    in_process: Callable[[], bool] = triton_links_in_process,
) -> str:
    """The AMDGPU linker to use, in this order: ROCm's ``ld.lld`` (``$ROCM_PATH/llvm/bin``, then
    ``/opt/rocm/llvm/bin``), the one Triton's wheel bundles (``triton/backends/amd/llvm/bin``),
    Triton's in-process lld (:data:`TRITON_IN_PROCESS`), an ``ld.lld`` on ``PATH``; "" when none.
    ``environ`` defaults to this process's, ``triton`` to the installed package's folder."""
    environ = os.environ if environ is None else environ
    triton = triton_folder() if triton is None else triton
    folders = [Path(environ["ROCM_PATH"]) / "llvm" / "bin"] if environ.get("ROCM_PATH") else []
    folders.append(opt_rocm / "llvm" / "bin")
    if triton is not None:
        folders.append(triton / "backends" / "amd" / "llvm" / "bin")
    for folder in folders:
        lld = folder / "ld.lld"
        if lld.is_file() and os.access(lld, os.X_OK):
            return str(lld)
    if in_process():
        return TRITON_IN_PROCESS
    return shutil.which("ld.lld", path=environ.get("PATH", "")) or ""


def link_hsaco(obj: bytes) -> bytes:
    """Link a relocatable AMDGCN object into a loadable code object (``ld.lld -shared``)."""
    linker = find_linker()
    if not linker:
        raise RuntimeError(
            "no AMDGPU linker: install ROCm (ld.lld under $ROCM_PATH/llvm/bin) or Triton, or put an ld.lld on PATH"
        )
    with tempfile.TemporaryDirectory(prefix="hwbench-hsaco-") as tmp:
        src, out = Path(tmp, "k.o"), Path(tmp, "k.hsaco")
        src.write_bytes(obj)
        if linker == TRITON_IN_PROCESS:
            from triton._C.libtriton import amd  # Triton bundles an lld for its own code objects

            amd.link_hsaco(str(src), str(out))
        else:
            subprocess.run([linker, "-shared", str(src), "-o", str(out)], check=True, capture_output=True)
        return out.read_bytes()
