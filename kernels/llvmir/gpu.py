"""GPU targets of the llvmlite kernels: NVPTX (CUDA) and AMDGCN (ROCm), and their compilers.

A program of a kernel body (see :mod:`.target`) is one GPU *thread*: the grid of
programs is laid over blocks of ``threads_per_block`` threads along axis 0 and
over the block grid's y and z along axes 1 and 2. The entry becomes
``void name(i64 grid0, i64 grid1, i64 grid2, args...)``; threads past ``grid0``
return at once. ``local_array`` is thread-private memory (an ``alloca``: local
memory on NVIDIA, scratch on AMD), so a program needs no barrier, exactly as on
the CPU, and the target caps it with ``private_bytes`` -- kernels size their
per-program tiles to fit (``gemm.llvm.block_limits``, ``attention.llvm.max_head_dim``).
The vector width is 1: the per-thread work is scalar, as a GPU thread is.

Compilation needs no GPU: :func:`compile_module` lowers a module to PTX text
(assembled by ``ptxas`` for a real architecture) or to an AMDGCN code object
(``hsaco``, linked with ``ld.lld`` or Triton's bundled linker).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llvmlite import ir

from hwbench.kernels.llvmir.irutil import I32, I64, PTR, VOID
from hwbench.kernels.llvmir.target import KernelBody, KernelContext, LLVMTarget

_init_lock = threading.Lock()
_initialized = False
_LOCAL_ALIGN = 16


def ensure_gpu_targets() -> None:
    """Initialise LLVM's NVPTX and AMDGPU code generators once."""
    global _initialized
    import llvmlite.binding as llvm

    with _init_lock:
        if not _initialized:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _initialized = True


class _ScratchAlloca(ir.instructions.AllocaInstr):
    """``alloca`` in a given address space (llvmlite's builder only makes addrspace 0)."""

    def __init__(self, parent: ir.Block, typ: ir.Type, name: str, addrspace: int) -> None:
        super().__init__(parent, typ, None, name)
        self.type = ir.PointerType(addrspace=addrspace)
        self._addrspace = addrspace

    def descr(self, buf: list[str]) -> None:
        buf.append(f"alloca {self.allocated_type}")
        if self.align is not None:
            buf.append(f", align {self.align}")
        if self._addrspace:
            buf.append(f", addrspace({self._addrspace})")


class _GPUContext(KernelContext):
    """Program ids from the block/thread registers; local arrays are thread-private allocas."""

    target: GPUTarget

    def __init__(
        self,
        target: GPUTarget,
        builder: ir.IRBuilder,
        entry: ir.Block,
        grid: Sequence[ir.Value],
        ids: Sequence[ir.Value],
    ) -> None:
        super().__init__(target, builder)
        self._entry = entry
        self._grid = list(grid)
        self._ids = list(ids)
        self.private_bytes = 0

    def program_id(self, axis: int) -> ir.Value:
        return self._ids[axis]

    def num_programs(self, axis: int) -> ir.Value:
        return self._grid[axis]

    def barrier(self) -> None:
        pass  # a program is one thread

    def local_array(self, elem: ir.Type, count: int) -> ir.Value:
        space = self.target.private_addrspace
        with self.builder.goto_block(self._entry):
            slot = _ScratchAlloca(self.builder.block, ir.ArrayType(elem, count), "", space)
            slot.align = _LOCAL_ALIGN
            self.builder._insert(slot)
            self.private_bytes += count * _bytes(elem)
            return self.builder.addrspacecast(slot, PTR) if space else slot


def _bytes(ty: ir.Type) -> int:
    return {"float": 4, "double": 8, "half": 2}.get(str(ty), getattr(ty, "width", 64) // 8)


class GPUTarget(LLVMTarget):
    """Common lowering of a program grid onto GPU threads; vendors supply registers and ABI."""

    threads_per_block = 128
    private_bytes: int = 8192  #: scratch a program may use (kernels size their tiles to this)
    private_addrspace = 0
    calling_convention = ""
    kind = ""  # "ptx" or "amdgcn"

    def __init__(self, arch: str) -> None:
        self.arch = arch
        self.name = f"{self.kind}-{arch}"

    def vector_width(self, dtype: str) -> int:
        return 1

    @property
    def cache_key(self) -> str:
        return f"{self.name}|{self.triple}"

    def _read(self, builder: ir.IRBuilder, name: str) -> ir.Value:
        module = builder.module
        fn = module.globals.get(name) or ir.Function(module, ir.FunctionType(I32, []), name=name)
        return builder.zext(builder.call(fn, []), I64)

    def block_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        """Index (i64) of this thread's block along ``axis``."""
        raise NotImplementedError

    def thread_id(self, builder: ir.IRBuilder) -> ir.Value:
        """Index (i64) of this thread within its block along x."""
        raise NotImplementedError

    def define_kernel(
        self, module: ir.Module, name: str, arg_types: Sequence[ir.Type], body: KernelBody
    ) -> ir.Function:
        fn = ir.Function(module, ir.FunctionType(VOID, [I64, I64, I64] + list(arg_types)), name=name)
        fn.calling_convention = self.calling_convention
        for arg in fn.args[3:]:
            if isinstance(arg.type, ir.PointerType):
                arg.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        builder = ir.IRBuilder(entry)
        start, run, done = (builder.append_basic_block(n) for n in ("start", "run", "done"))
        builder.branch(start)
        builder.position_at_end(start)
        x = builder.add(
            builder.mul(self.block_id(builder, 0), ir.Constant(I64, self.threads_per_block)), self.thread_id(builder)
        )
        ids = [x, self.block_id(builder, 1), self.block_id(builder, 2)]
        builder.cbranch(builder.icmp_signed("<", x, fn.args[0]), run, done)
        builder.position_at_end(run)
        ctx = _GPUContext(self, builder, entry, fn.args[:3], ids)
        body(ctx, list(fn.args[3:]))
        builder.branch(done)
        builder.position_at_end(done)
        builder.ret_void()
        if ctx.private_bytes > self.private_bytes:
            raise ValueError(
                f"{name} needs {ctx.private_bytes} bytes of private memory per program; "
                f"{self.name} allows {self.private_bytes}"
            )
        self.annotate(module, fn)
        return fn

    def annotate(self, module: ir.Module, fn: ir.Function) -> None:
        """Vendor metadata of a kernel entry (launch bounds)."""

    def launch_grid(self, grid: Sequence[int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(blocks, threads) of a launch covering ``grid`` programs."""
        g = list(grid) + [1] * (3 - len(grid))
        tpb = self.threads_per_block
        return ((max(1, -(-g[0] // tpb)), max(1, g[1]), max(1, g[2])), (tpb, 1, 1))


class NVPTXTarget(GPUTarget):
    """NVIDIA GPUs: PTX for ``arch`` (``sm_90``), assembled by ptxas or loaded by the driver's JIT."""

    kind = "ptx"
    triple = "nvptx64-nvidia-cuda"
    data_layout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
    calling_convention = "ptx_kernel"

    def __init__(self, arch: str = "sm_90") -> None:
        super().__init__(arch)

    def block_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._read(builder, f"llvm.nvvm.read.ptx.sreg.ctaid.{'xyz'[axis]}")

    def thread_id(self, builder: ir.IRBuilder) -> ir.Value:
        return self._read(builder, "llvm.nvvm.read.ptx.sreg.tid.x")

    def annotate(self, module: ir.Module, fn: ir.Function) -> None:
        fn.attributes.add("nounwind")


class AMDGCNTarget(GPUTarget):
    """AMD GPUs: an AMDGCN code object for ``arch`` (``gfx942``) for the HIP runtime."""

    kind = "amdgcn"
    triple = "amdgcn-amd-amdhsa"
    data_layout = (
        "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-"
        "p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-"
        "v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
    )
    calling_convention = "amdgpu_kernel"
    threads_per_block = 256
    private_addrspace = 5

    def __init__(self, arch: str = "gfx942") -> None:
        super().__init__(arch)

    def block_id(self, builder: ir.IRBuilder, axis: int) -> ir.Value:
        return self._read(builder, f"llvm.amdgcn.workgroup.id.{'xyz'[axis]}")

    def thread_id(self, builder: ir.IRBuilder) -> ir.Value:
        return self._read(builder, "llvm.amdgcn.workitem.id.x")


def target_for(arch: str) -> GPUTarget:
    """The GPU target of an architecture name: ``sm_NN`` is NVPTX, ``gfxNNN`` is AMDGCN."""
    if arch.startswith("sm_"):
        return NVPTXTarget(arch)
    if arch.startswith("gfx"):
        return AMDGCNTarget(arch)
    raise ValueError(f"unknown GPU architecture {arch!r}: expected sm_NN or gfxNNN")


@dataclass
class GPUBinary:
    """A module lowered for one GPU architecture."""

    target: GPUTarget
    kernel: str
    assembly: str  # PTX text, or AMDGCN assembly with its metadata
    binary: bytes  # PTX (as bytes) or the linked hsaco
    compile_s: float


def _finalize_ir(module: ir.Module, target: GPUTarget) -> str:
    """Module text with the launch bound of AMD kernels (llvmlite has no string attributes)."""
    text = str(module)
    if isinstance(target, AMDGCNTarget):
        # Lets the register allocator use the budget of the real block size, not 1024 threads.
        head, sep, rest = text.partition("define amdgpu_kernel void")
        if sep:
            brace = rest.index("{")
            text = head + sep + rest[:brace] + "#900 " + rest[brace:]
            text += f'\nattributes #900 = {{ "amdgpu-flat-work-group-size"="1,{target.threads_per_block}" }}\n'
    return text


def compile_module(module: ir.Module, target: GPUTarget, kernel: str, opt: int = 3) -> GPUBinary:
    """Optimise ``module`` and lower it for ``target`` (no GPU needed)."""
    import llvmlite.binding as llvm

    ensure_gpu_targets()
    t0 = time.perf_counter()
    features = "+ptx80" if isinstance(target, NVPTXTarget) else ""
    tm = llvm.Target.from_triple(target.triple).create_target_machine(cpu=target.arch, features=features, opt=opt)
    mod = llvm.parse_assembly(_finalize_ir(module, target))
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
    return GPUBinary(target, kernel, assembly, binary, time.perf_counter() - t0)


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
