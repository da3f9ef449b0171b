"""GEMM ``C = A @ B`` written once in llvmlite IR (BLIS/Goto structure).

On work-group targets (SPIR-V, NVPTX, AMDGCN) the kernel is :mod:`.simt`'s; on the host CPU every
dtype runs the one blocked driver of :mod:`.llvm_driver` (per ``kc`` slice of K: pack the B block,
pack the A block, the microkernel on every pair of micro-panels, edge tiles masked, so any M, N, K
works in bounds), with the tile, microkernel and packing of the dtype's kernel: here fp32/fp64's,
an ``MR x NR`` register tile of NR/VW vector loads of B, MR broadcasts of A and ``MR * NR/VW``
FMAs per k step (:mod:`.llvm_panels`); for int8 and bf16, chosen by the host's features, AMX
tiles (:mod:`.llvm_amx`) where the CPU has them and Linux grants them, else the vector dot
products of :mod:`.llvm_lowp` (int8) and :mod:`.llvm_bf16`, else their widening fallbacks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from llvmlite import ir

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.kernel import Shape
from hwbench.core.launch import Launch
from hwbench.kernels.gemm.cpu import amx as llvm_amx
from hwbench.kernels.gemm.cpu import bf16 as llvm_bf16
from hwbench.kernels.gemm.cpu import driver as llvm_driver
from hwbench.kernels.gemm.cpu import lowp as llvm_lowp
from hwbench.kernels.gemm.cpu import panels as llvm_panels
from hwbench.kernels.gemm.cpu.driver import Parts, Tile
from hwbench.kernels.gemm.gpu import simt
from hwbench.kernels.llvmir.cpu_launch import PreparedKernel
from hwbench.kernels.llvmir.irutil import fma, scalar_type
from hwbench.kernels.llvmir.simt import SIMTTarget
from hwbench.kernels.llvmir.target import CPUTarget, LLVMTarget

DTYPES = ("fp32", "fp64")
KERNEL = "gemm"
#: Upper bounds of ``nc`` and ``kc`` in elements, baked into the workspace (``mc``'s is the tile's,
#: :data:`.llvm_panels.MAX_MC_PANELS` register tiles). They bound what tuning may try, not what the
#: derivation picks.
_MAX_NC = {"fp32": 4096, "fp64": 2048}
_MAX_KC = {"fp32": 1024, "fp64": 512}


def register_tile(target: CPUTarget, dtype: str) -> tuple[int, int]:
    """``(MR, NR_VECTORS)`` for ``target``: the most accumulators its vector registers hold beside
    the B vectors and a broadcast, covering its FMA latency x pipes (:func:`.cpu_model.register_tile`);
    14 x 2 on AVX-512's 32 registers, 6 x 2 on AVX2's or SSE's 16, 6 x 4 on NEON's 32 (A's values
    four to a register for the by-element FMLA)."""
    derived = tile(target, dtype)
    return derived.mr, derived.nr_vectors


def tile(target: CPUTarget, dtype: str, config: Mapping[str, Any] | None = None) -> Tile:
    """The fp32/fp64 tile: ``config``'s register tile (``MR``, ``NR_VECTORS``) or
    :func:`register_tile`'s, one value per packed element."""
    lanes = target.description.lanes(dtype) if target.description.lane_multiply_add else None
    caps = {"nc": _MAX_NC[dtype], "kc": _MAX_KC[dtype]}
    path = ("fma", f"{dtype} multiply-adds (llvm.fmuladd), one broadcast of A per row")
    return llvm_panels.vector_tile(target, dtype, path, (1, DTYPE_BYTES[dtype], caps), config, a_lanes=lanes)


def parts(target: CPUTarget, dtype: str, config: Mapping[str, Any] | None = None) -> Parts:
    """The fp32/fp64 kernel's tile, microkernel and packers on ``target`` (for :mod:`.llvm_driver`)."""
    geo = tile(target, dtype, config)
    t = scalar_type(dtype)
    vw = geo.nr // geo.nr_vectors

    def dot(b: ir.IRBuilder, acc: ir.Value, a: ir.Value, bv: ir.Value) -> ir.Value:
        return fma(b, a, bv, acc)

    def first(b: ir.IRBuilder, group: ir.Value) -> ir.Value:
        return b.extract_element(group, ir.Constant(ir.IntType(32), 0))

    micro = llvm_panels.micro(geo, f"{KERNEL}_micro_{dtype}", t, ir.VectorType(t, vw), dot, False)
    pack_b = llvm_panels.pack_b(geo, t, lambda b, rows: rows[0])
    pack_a = llvm_panels.pack_a(geo, t, first)
    return Parts(f"{KERNEL}_{dtype}_{geo.mr}x{geo.nr_vectors}", geo, t, t, micro, pack_a, pack_b)


#: ``tile(target, dtype, config)`` and ``parts(target, dtype, config)`` of one CPU kernel.
Kernel = tuple[Callable[..., Tile], Callable[..., Parts]]


def cpu_kernel(target: LLVMTarget, dtype: str) -> Kernel:
    """The CPU kernel ``dtype`` runs on ``target``: AMX where usable, the int8 or bf16 vector
    kernels, or fp32/fp64's."""
    if not isinstance(target, CPUTarget):
        raise TypeError(f"no GEMM lowering for {type(target).__name__}")
    if dtype in llvm_amx.DTYPES and llvm_amx.usable(target, dtype):
        return llvm_amx.tile, llvm_amx.parts
    if dtype in llvm_lowp.DTYPES:
        return llvm_lowp.tile, llvm_lowp.parts
    if dtype in llvm_bf16.DTYPES:
        return llvm_bf16.tile, llvm_bf16.parts
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES + llvm_lowp.DTYPES + llvm_bf16.DTYPES}, got {dtype!r}")
    return tile, parts


def build(target: LLVMTarget, dtype: str, config: Mapping[str, Any] | None = None) -> ir.Module:
    """The GEMM kernel module for ``target``: the work-group kernel of :mod:`.simt` on a SIMT
    target (in ``config``, default :func:`simt_config`), else :func:`.llvm_driver.build` with the
    dtype's kernel (:func:`cpu_kernel`) and the register tile ``config`` names (``MR``,
    ``NR_VECTORS``; default :func:`register_tile`'s).

    Entry ``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)``; grid ``(ceil(N/nc), ceil(M/mc))``;
    needs ``mc``, ``nc`` (a multiple of NR) and ``kc`` within the tile's ``max_block``.
    """
    if isinstance(target, SIMTTarget):
        return simt.build(target, dtype, dict(config or simt_config(target, dtype)))
    return llvm_driver.build(target, cpu_kernel(target, dtype)[1](target, dtype, config))


def derived_blocking(dtype: str, shape: Shape, target: CPUTarget, mr: int, nv: int, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc of the fp32/fp64 kernel with an ``mr x nv`` register tile: :func:`.llvm_driver.blocking`,
    the one cache blocking every CPU GEMM kernel takes from the target's caches."""
    return llvm_driver.blocking(tile(target, dtype, {"MR": mr, "NR_VECTORS": nv}), target, shape, workers)


def blocking(shape: Shape, dtype: str, target: CPUTarget, workers: int = 1) -> dict[str, int]:
    """mc/nc/kc of the kernel ``dtype`` runs on ``target`` (its derived tile), evened out over ``workers``."""
    return llvm_driver.blocking(cpu_kernel(target, dtype)[0](target, dtype), target, shape, workers)


def tuning_space(target: LLVMTarget, dtype: str, shape: Shape) -> list[dict[str, int]]:
    """Candidate configurations for ``shape``, the derived one first (:func:`.llvm_driver.tuning_space`):
    on the CPU, for every dtype, the derived tile with its blocking varied, then (vector kernels)
    the other register tiles the registers hold with their derived blocking (``MR``,
    ``NR_VECTORS``, ``mc``, ``nc``, ``kc``; AMX: its blocking alone); on a SIMT target
    :func:`.simt.tuning_space`'s. Empty where the dtype has no tunable kernel here."""
    if isinstance(target, SIMTTarget):
        return simt.tuning_space(target, dtype, shape)
    if not isinstance(target, CPUTarget) or dtype not in DTYPES + llvm_lowp.DTYPES + llvm_bf16.DTYPES:
        return []
    tile_of = cpu_kernel(target, dtype)[0]
    derived = tile_of(target, dtype)

    def other(mr: int, nv: int) -> Tile:
        return tile_of(target, dtype, {"MR": mr, "NR_VECTORS": nv})

    return llvm_driver.tuning_space(derived, target, shape, other if derived.nr_vectors else None)


def simt_config(target: SIMTTarget, dtype: str, shape: Shape | None = None) -> dict[str, int]:
    """The work-group kernel's configuration for ``target``'s device (see :mod:`.simt`), its
    blocks no larger than ``shape`` needs where given."""
    cfg = simt.config_for(target, dtype)
    return simt.fit_config(cfg, shape) if shape is not None else cfg


def launch(
    shape: Shape,
    dtype: str,
    target: LLVMTarget,
    workers: int = 1,
    blocks: dict[str, int] | None = None,
    config: dict[str, int] | None = None,
) -> Launch:
    """On the CPU, ``gemm(A, B, C, M, N, K, lda, ldb, ldc, mc, nc, kc)`` over ``(ceil(N/nc),
    ceil(M/mc))`` programs (:func:`.llvm_driver.launch`, with the tile as compile-time
    definitions where it is a register tile); on a SIMT target, the work-group kernel's launch in
    ``config``.

    ``blocks`` overrides :func:`blocking` (for tests); ``config`` on the CPU is one of
    :func:`tuning_space`'s (``MR``, ``NR_VECTORS``, ``mc``, ``nc``, ``kc``, or the blocking alone);
    a problem under 2 MFLOP runs on one worker (waking more costs more than it saves).
    """
    if isinstance(target, SIMTTarget):
        return simt.launch(shape, dtype, target, dict(config or simt_config(target, dtype)))
    if dtype in llvm_amx.DTYPES and llvm_amx.usable(target, dtype):
        return llvm_amx.launch(shape, dtype, target, workers, blocks, config)
    tile_of = cpu_kernel(target, dtype)[0]
    return llvm_driver.launch(tile_of(target, dtype, config), shape, target, workers, blocks, config)


def prepare_cpu(
    inputs: dict[str, np.ndarray],
    shape: dict[str, int],
    dtype: str,
    threads: int | None = None,
    blocking: dict[str, int] | None = None,
    target: CPUTarget | None = None,
) -> PreparedKernel:
    """Bind ``C = A @ B`` for the host CPU; compiles on first use per (dtype, target, tile).

    ``blocking`` overrides the cache blocking (``mc``, ``nc``, ``kc``) and
    ``target`` the CPU model/features (default: the host) -- both for tuning/tests.
    """
    known = DTYPES + llvm_lowp.DTYPES + llvm_bf16.DTYPES
    if dtype not in known:
        raise ValueError(f"dtype must be one of {known}, got {dtype!r}")

    def tile_for(cpu: CPUTarget) -> Tile:
        return cpu_kernel(cpu, dtype)[0](cpu, dtype)

    return llvm_driver.prepare(tile_for, build, inputs, shape, threads=threads, blocks=blocking, target=target)
