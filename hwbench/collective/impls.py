"""AllReduce implementations as every rank sees them: buffers, one operation, clean-up.

* ``gloo`` (native): ``torch.distributed.all_reduce`` on the gloo backend. torch has no
  out-of-place all_reduce, so out-of-place is what a user writes: copy, then reduce.
* ``llvm_shm`` (portable): the llvmlite kernels of ``hwbench.kernels.allreduce.llvm`` over
  a shared segment per node; across nodes the native collective joins the per-node
  results (reduce-scatter in shared memory, all_reduce of each rank's slice among the
  ranks with the same local rank, all-gather in shared memory).
* ``mpi`` (native): ``MPI.COMM_WORLD.Allreduce`` through mpi4py (:mod:`.mpi`; ranks started by mpirun).
* ``nccl`` and ``triton_symm`` on GPUs (:mod:`.gpu`): one rank per GPU.

:mod:`.dispatch` creates the one a case names and says why one cannot run here.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import numpy as np

from hwbench.collective.pattern import count_wrong, fill_periodic
from hwbench.collective.shm import Layout, Segment, ShmAllReduce, segment_name
from hwbench.collective.topology import World
from hwbench.core.dtypes import device_numpy, torch_dtype

#: How a waiting rank passes time before it sleeps on the futex: CPU pauses, then sched_yield calls
#: (tuning knobs: HWBENCH_AR_SPINS, HWBENCH_AR_YIELDS; recorded in each record's config).
SPINS, YIELDS = 50, 2


class Collective(ABC):
    """One implementation on one rank."""

    name: str
    kind: str
    language: str
    config: dict[str, Any]
    #: How :meth:`time_loop` times an iteration (in every record's timing), and its resolution.
    timer: str = "perf_counter_ns per iteration, max over ranks"
    resolution_s: float | None = None

    @abstractmethod
    def buffers(self, count: int, dtype: str, in_place: bool) -> tuple[Any, Any]:
        """Input and output buffers of ``count`` elements (the same object when in place)."""

    @abstractmethod
    def operation(self, inp: Any, out: Any, dtype: str) -> Callable[[], None]:
        """A call that performs one AllReduce of ``inp`` into ``out`` on every rank."""

    def close(self) -> None:  # noqa: B027  (a no-op by default, not abstract)
        """Release what :meth:`buffers` and set-up acquired."""

    # Host buffers by default; device implementations fill, check and time on the device.
    def fill(self, buf: Any, pattern: np.ndarray) -> None:
        """Write ``pattern`` repeated over ``buf``."""
        fill_periodic(buf, pattern)

    def poison(self, buf: Any) -> None:
        """Fill ``buf`` with NaN, so an output the operation never writes fails the check."""
        buf.fill(np.nan)

    def check(self, buf: Any, pattern: np.ndarray) -> tuple[int, float]:
        """Elements of ``buf`` that differ from ``pattern`` repeated, and the largest difference."""
        return count_wrong(buf, pattern)

    def time_once(self, op: Callable[[], None]) -> float:
        """Seconds one call of ``op`` takes."""
        start = time.perf_counter()
        op()
        return time.perf_counter() - start

    def time_loop(self, op: Callable[[], None], iters: int) -> np.ndarray:
        """Seconds of each of ``iters`` back-to-back calls of ``op``."""
        samples = np.empty(iters, dtype=np.int64)
        clock = time.perf_counter_ns
        for i in range(iters):
            t0 = clock()
            op()
            samples[i] = clock() - t0
        return samples * 1e-9


def torch_all_reduce(src: Any, dst: Any, in_place: bool, group: Any) -> Callable[[], None]:
    """One ``torch.distributed.all_reduce`` into ``dst``; out of place copies ``src`` first
    (torch has no out-of-place all_reduce)."""
    import torch.distributed as dist

    if in_place:
        return lambda: dist.all_reduce(dst, group=group)

    def out_of_place() -> None:
        dst.copy_(src)
        dist.all_reduce(dst, group=group)

    return out_of_place


class GlooAllReduce(Collective):
    """torch.distributed.all_reduce on the default (gloo) process group."""

    name, kind, language = "gloo", "native", "torch.distributed"

    def __init__(self, world: World) -> None:
        import torch

        self.world = world
        self.config = {"library": f"torch {torch.__version__} gloo", "out_of_place": "copy_ then all_reduce"}
        self._keep: list[Any] = []

    def buffers(self, count: int, dtype: str, in_place: bool) -> tuple[np.ndarray, np.ndarray]:
        import torch

        self._keep = [torch.empty(count, dtype=torch_dtype(dtype))]
        if not in_place:
            self._keep.append(torch.empty(count, dtype=torch_dtype(dtype)))
        arrays = [t.numpy() for t in self._keep]
        return arrays[0], arrays[-1]

    def operation(self, inp: np.ndarray, out: np.ndarray, dtype: str) -> Callable[[], None]:
        import torch

        return torch_all_reduce(torch.from_numpy(inp), torch.from_numpy(out), inp is out, self.world.group)


class ShmPortableAllReduce(Collective):
    """The llvmlite shared-memory AllReduce, hierarchical when the world spans nodes."""

    name, kind, language = "llvm_shm", "portable", "llvmlite"

    def __init__(self, world: World, max_bytes: int, timeout_s: float) -> None:
        import torch.distributed as dist

        spins, yields = (
            int(os.environ.get(f"HWBENCH_AR_{what}", default))
            for what, default in (("SPINS", SPINS), ("YIELDS", YIELDS))
        )

        self.world = world
        self.layout = Layout(world.local_size, max_bytes)
        name = segment_name(world.token, world.node) if world.local_rank == 0 else ""
        names: list[Any] = [None] * world.size
        dist.all_gather_object(names, name, group=world.group)
        name = names[world.node_leader]
        self.segment: Segment | None = None
        creator = world.local_rank == 0
        try:  # set-up only, through the process group: create, then map everywhere, then unlink
            if creator:
                self.segment = Segment(name, self.layout.size, create=True)
            dist.barrier(group=world.group)
            if not creator:
                self.segment = Segment(name, self.layout.size, create=False)
            dist.barrier(group=world.group)
        finally:
            if self.segment is not None and creator:
                self.segment.unlink()
        assert self.segment is not None
        self.comm = ShmAllReduce(self.segment, self.layout, world.local_rank, timeout_s, spins, yields)
        self.cross = world.cross_group()
        self.config = {
            "local_ranks": world.local_size,
            "nodes": world.nodes,
            "oneshot_max_bytes": self.layout.slot_bytes,
            "algorithm": "one-shot <= slot, else reduce-scatter + all-gather"
            + ("; across nodes: gloo all_reduce of each slice" if world.nodes > 1 else ""),
            "spins": spins,
            "yields": yields,
        }

    def buffers(self, count: int, dtype: str, in_place: bool) -> tuple[np.ndarray, np.ndarray]:
        inp = self.comm.buffer("in", count, device_numpy(dtype))
        return inp, inp if in_place else self.comm.buffer("out", count, device_numpy(dtype))

    def operation(self, inp: np.ndarray, out: np.ndarray, dtype: str) -> Callable[[], None]:
        if self.cross is None:
            return self.comm.bind(inp, out, dtype)
        import torch
        import torch.distributed as dist

        group, whole = self.cross, torch.from_numpy(out)
        if inp.nbytes <= self.layout.slot_bytes:

            def small() -> None:
                self.comm.allreduce(inp, out, dtype)
                dist.all_reduce(whole, group=group)

            return small

        def hierarchical() -> None:
            lo, hi = self.comm.reduce_scatter(inp, out, dtype)
            if hi > lo:
                dist.all_reduce(whole[lo:hi], group=group)
            self.comm.all_gather(out, dtype)

        return hierarchical

    def close(self) -> None:
        if self.segment is not None:
            self.segment.close()
            self.segment = None
