"""GPU intrinsics of the kernels' data paths: on NVPTX asynchronous copies global -> shared
(``cp.async``, sm_80 and newer), warp-wide fragment loads from shared memory (``ldmatrix``),
and the launch bound that caps registers (``.minnctapersm``); on AMDGPU the scheduling barrier
and the request for the waves per SIMD a kernel's LDS allows (``amdgpu-waves-per-eu``).

Each wrapper declares its intrinsic in the builder's module on first use. The PTX ISA
describes them: ``cp.async.cg.shared.global [dst], [src], 16, src_size`` copies 16 bytes and
fills with zeros past ``src_size``; ``cp.async.commit_group`` closes a group of copies and
``cp.async.wait_group N`` waits until at most ``N`` groups are pending;
``ldmatrix.sync.aligned.m8n8.xR[.trans].b16`` loads ``R`` 8 x 8 matrices of 16-bit elements,
lane ``8 i + r`` giving the address of row ``r`` of matrix ``i`` (16 bytes), and lane ``t``
receiving, of each matrix, the 32-bit register of row ``t / 4``, elements ``2 (t % 4)`` and
``2 (t % 4) + 1`` (with ``.trans``: rows ``2 (t % 4)`` and ``2 (t % 4) + 1`` of column ``t / 4``).
"""

from __future__ import annotations

from llvmlite import ir

from hwbench.kernels.llvmir.irutil import I32, VOID, intrinsic

SHARED = ir.PointerType(addrspace=3)
GLOBAL = ir.PointerType(addrspace=1)
#: The module attribute naming the kernels that asked for their LDS's waves (:func:`ask_lds_occupancy`).
LDS_OCCUPANCY = "simt_lds_occupancy"


def cp_async_16(builder: ir.IRBuilder, dst: ir.Value, src: ir.Value, src_bytes: ir.Value) -> None:
    """16 bytes from global ``src`` to shared ``dst``, bytes past ``src_bytes`` (an i32, 0 or 16
    here) zero-filled without being read."""
    fn = intrinsic(builder.module, "llvm.nvvm.cp.async.cg.shared.global.16.s", VOID, [SHARED, GLOBAL, I32])
    builder.call(fn, [dst, src, src_bytes])


def cp_async_commit(builder: ir.IRBuilder) -> None:
    """Close the group of this thread's asynchronous copies issued since the last one."""
    builder.call(intrinsic(builder.module, "llvm.nvvm.cp.async.commit.group", VOID, []), [])


def cp_async_wait(builder: ir.IRBuilder, pending: int) -> None:
    """Wait until at most ``pending`` of this thread's groups of copies are still in flight."""
    fn = intrinsic(builder.module, "llvm.nvvm.cp.async.wait.group", VOID, [I32])
    builder.call(fn, [ir.Constant(I32, pending)])


def ldmatrix(builder: ir.IRBuilder, row: ir.Value, count: int, trans: bool) -> list[ir.Value]:
    """``ldmatrix`` of ``count`` (2 or 4) 8 x 8 matrices, this lane giving the shared address
    ``row`` (see the module): the lane's ``count`` 32-bit registers, matrix by matrix."""
    name = f"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.b16"
    fn = intrinsic(builder.module, name, ir.LiteralStructType([I32] * count), [SHARED])
    out = builder.call(fn, [row])
    return [builder.extract_value(out, i) for i in range(count)]


def min_blocks_per_multiprocessor(function: ir.Function, blocks: int) -> None:
    """Ask for ``blocks`` resident blocks per SM (``.minnctapersm``): ptxas then keeps the
    registers within what that many blocks of the kernel's fixed size leave each thread."""
    module = function.module
    annotations = module.add_named_metadata("nvvm.annotations")
    annotations.add(module.add_metadata([function, ir.MetaDataString(module, "minctasm"), ir.Constant(I32, blocks)]))


def sched_barrier(builder: ir.IRBuilder) -> None:
    """AMDGPU: no instruction is scheduled across this point (``llvm.amdgcn.sched.barrier`` with
    mask 0); it orders code only, not memory, so it bounds how many loads are in flight at once."""
    fn = intrinsic(builder.module, "llvm.amdgcn.sched.barrier", VOID, [I32])
    builder.call(fn, [ir.Constant(I32, 0)])


def ask_lds_occupancy(function: ir.Function) -> None:
    """Ask, from a kernel's body, for the waves per SIMD its LDS allows (AMDGCN: ``amdgpu-waves-per-eu``
    from :meth:`hwbench.kernels.llvmir.gpu.AMDGCNTarget.define_simt_kernel`; other targets ignore it)."""
    module = function.module
    setattr(module, LDS_OCCUPANCY, (*getattr(module, LDS_OCCUPANCY, ()), function.name))
