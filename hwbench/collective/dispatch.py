"""Which AllReduce implementation a case names, on which backend: create it on a rank, or say
why it cannot run here.

The implementations a node offers are those the allreduce kernel's folder declares per
backend (``hwbench.core.registry.implementations``); this module maps each name to its
class and to what it needs.
"""

from __future__ import annotations

from hwbench.collective.gpu import NcclAllReduce, TritonSymmAllReduce
from hwbench.collective.impls import Collective, GlooAllReduce, ShmPortableAllReduce
from hwbench.collective.mpi import MpiAllReduce
from hwbench.collective.mpi import missing as mpi_missing
from hwbench.collective.shm import CollectiveError
from hwbench.collective.topology import World
from hwbench.core.backend import Availability, Implementation, present

GPU_BACKENDS = ("cuda", "rocm")


def create(name: str, world: World, max_bytes: int, timeout_s: float, backend: str = "cpu") -> Collective:
    """The implementation ``name`` of ``backend`` on this rank (set-up is collective: every rank calls it)."""
    if backend in GPU_BACKENDS:
        if name == "nccl":
            return NcclAllReduce(world)
        if name == "triton_symm":
            return TritonSymmAllReduce(world, max_bytes)
        raise CollectiveError(f"no AllReduce implementation '{name}' on {backend}")
    if backend != "cpu":
        raise CollectiveError(f"hwbench runs AllReduce on the cpu, cuda and rocm backends, not on {backend}", "skipped")
    if name == "gloo":
        return GlooAllReduce(world)
    if name == "llvm_shm":
        return ShmPortableAllReduce(world, max_bytes, timeout_s)
    if name == "mpi":
        return MpiAllReduce(world)
    raise CollectiveError(f"no AllReduce implementation '{name}' on the CPU")


def support(impl: Implementation, dtype: str, backend: str) -> Availability:
    """Whether ``impl`` can run ``dtype`` on ``backend`` here, and why not."""
    if backend in GPU_BACKENDS:
        why = _gpu_missing(impl, backend)
    elif not present("torch"):
        why = "torch is not installed: AllReduce ranks meet through torch.distributed"
    elif impl.language == "llvmlite" and not present("llvmlite"):
        why = "llvmlite is not installed (pip install 'hwbench[cpu]')"
    else:
        why = mpi_missing() if impl.name == "mpi" else ""
    if not why and dtype not in impl.dtypes:
        why = f"{impl.name} has no {dtype} variant on {backend}"
    return Availability(not why, why)


def _gpu_missing(impl: Implementation, backend: str) -> str:
    if impl.language == "triton" and not present("triton"):
        return f"triton is not installed (pip install 'hwbench[{backend}]')"
    if not present("torch"):
        return f"torch is not installed (pip install 'hwbench[{backend}]')"
    import torch

    found = torch.cuda.device_count()
    if found < 2:
        return f"needs at least 2 GPUs, found {found}"
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_nccl_available():
        return f"torch {torch.__version__} was built without NCCL"
    if impl.name == "triton_symm":
        try:
            import torch.distributed._symmetric_memory  # noqa: F401
        except ImportError as exc:
            return f"torch {torch.__version__} has no symmetric memory: {exc}"
    return ""
