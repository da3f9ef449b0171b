"""Which AllReduce implementation a case names, on which backend: create it on a rank, or say
why it cannot run here.

The implementations a node offers are those the allreduce kernel's folder declares per
backend (``hwbench.core.registry.implementations``); this module maps each name to its
class and to what it needs. A backend of kind ``gpu`` runs them on its GPUs (one per rank,
through torch's devices), one of kind ``cpu`` on the host's cores.
"""

from __future__ import annotations

from hwbench.collective.gpu import NcclAllReduce, TritonSymmAllReduce
from hwbench.collective.impls import Collective, GlooAllReduce, ShmPortableAllReduce
from hwbench.collective.mpi import MpiAllReduce
from hwbench.collective.mpi import missing as mpi_missing
from hwbench.collective.shm import CollectiveError
from hwbench.collective.topology import World
from hwbench.core.backend import Availability, Implementation, present
from hwbench.core.registry import get_backend


def kind_of(backend: str) -> str:
    """The kind of the backend called ``backend`` (:attr:`hwbench.core.backend.Backend.kind`)."""
    return get_backend(backend).kind


def on_gpus(backend: str) -> bool:
    """Whether AllReduce on ``backend`` runs on GPUs, one per rank (a backend of kind ``gpu``)."""
    return kind_of(backend) == "gpu"


class _GpuBackends:
    """The backends of kind ``gpu``: ``name in GPU_BACKENDS`` asks the backend's kind."""

    def __contains__(self, backend: object) -> bool:
        return isinstance(backend, str) and on_gpus(backend)


#: ``name in GPU_BACKENDS``: whether the backend called ``name`` is of kind ``gpu`` (:func:`on_gpus`).
GPU_BACKENDS = _GpuBackends()


def create(name: str, world: World, max_bytes: int, timeout_s: float, backend: str) -> Collective:
    """The implementation ``name`` of ``backend`` on this rank (set-up is collective: every rank calls it)."""
    kind = kind_of(backend)
    if kind == "gpu":
        if name == "nccl":
            return NcclAllReduce(world)
        if name == "triton_symm":
            return TritonSymmAllReduce(world, max_bytes)
        raise CollectiveError(f"no AllReduce implementation '{name}' on {backend}")
    if kind != "cpu":
        raise CollectiveError(
            f"hwbench runs AllReduce on backends of kind cpu and gpu, not on {backend} (of kind {kind})", "skipped"
        )
    if name == "gloo":
        return GlooAllReduce(world)
    if name == "llvm_shm":
        return ShmPortableAllReduce(world, max_bytes, timeout_s)
    if name == "mpi":
        return MpiAllReduce(world)
    raise CollectiveError(f"no AllReduce implementation '{name}' on the CPU")


def support(impl: Implementation, dtype: str, backend: str) -> Availability:
    """Whether ``impl`` can run ``dtype`` on ``backend`` here, and why not."""
    if on_gpus(backend):
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
