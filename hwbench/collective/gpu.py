"""AllReduce on GPUs: one rank per GPU (``LOCAL_RANK`` picks it), buffers, checks and timing on the device.

* ``nccl`` (native): ``torch.distributed.all_reduce`` on an NCCL process group (RCCL on
  ROCm, through the same backend). Out of place is ``copy_`` then ``all_reduce``.
* ``triton_symm`` (portable): every rank's input and output live in torch symmetric memory
  (``torch.distributed._symmetric_memory``), so each rank reads its peers' buffers directly.
  Messages up to :data:`ONESHOT_MAX_BYTES` go one-shot (every rank sums the whole message
  from all peers); larger ones reduce-scatter (rank ``r`` sums its slice of every peer's
  buffer, ``hwbench.kernels.allreduce.triton``) then all-gather (peer copies). Ranks
  synchronise through the symmetric memory's signal pads (``barrier`` on the device, with
  a timeout), never through a process group. One node only.

Timing uses device events around each iteration; inputs are built and checked on the device.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from hwbench.collective.impls import Collective, torch_all_reduce
from hwbench.collective.shm import CollectiveError
from hwbench.collective.topology import World
from hwbench.core.dtypes import torch_dtype

#: Messages up to this many bytes take the one-shot path.
ONESHOT_MAX_BYTES = 256 * 1024
ALIGN = 4096
TORCH_DTYPES = ("fp32", "bf16", "fp16")


class GPUCollective(Collective):
    """Device buffers on this rank's GPU, filled, checked and timed there."""

    timer = "device events per iteration, max over ranks"
    resolution_s = 0.5e-6  # cudaEventElapsedTime's documented resolution

    def __init__(self, world: World) -> None:
        import torch

        found = torch.cuda.device_count()
        if world.local_rank >= found:
            raise CollectiveError(
                f"local rank {world.local_rank} needs GPU {world.local_rank}; this node has {found}", "skipped"
            )
        torch.cuda.set_device(world.local_rank)
        self.world = world
        self.device = torch.device("cuda", world.local_rank)

    def empty(self, count: int, dtype: str) -> Any:
        import torch

        return torch.empty(count, dtype=torch_dtype(dtype), device=self.device)

    def _repeat(self, buf: Any, pattern: np.ndarray) -> Any:
        import torch

        period = torch.tensor(pattern, dtype=torch.float64, device=self.device).to(buf.dtype)
        return period.repeat(-(-buf.numel() // period.numel()))[: buf.numel()]

    def fill(self, buf: Any, pattern: np.ndarray) -> None:
        buf.copy_(self._repeat(buf, pattern))

    def poison(self, buf: Any) -> None:
        buf.fill_(float("nan"))

    def check(self, buf: Any, pattern: np.ndarray) -> tuple[int, float]:
        import torch

        want = self._repeat(buf, pattern)
        wrong = int((buf != want).sum().item())  # NaN differs from everything
        if not wrong:
            return 0, 0.0
        diff = (buf.double() - want.double()).abs()
        return wrong, float(torch.where(torch.isfinite(diff), diff, torch.full_like(diff, float("inf"))).max().item())

    def time_once(self, op: Callable[[], None]) -> float:
        return float(self.time_loop(op, 1)[0])

    def time_loop(self, op: Callable[[], None], iters: int) -> np.ndarray:
        import torch

        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for start, end in zip(starts, ends, strict=False):
            start.record()
            op()
            end.record()
        ends[-1].synchronize()
        return np.array([s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=False)])


class NcclAllReduce(GPUCollective):
    """``torch.distributed.all_reduce`` on an NCCL (RCCL on ROCm) process group of all ranks."""

    name, kind, language = "nccl", "native", "torch.distributed"

    def __init__(self, world: World) -> None:
        super().__init__(world)
        import torch
        import torch.distributed as dist

        if not dist.is_nccl_available():
            raise CollectiveError(f"torch {torch.__version__} was built without NCCL", "skipped")
        self.group = dist.new_group(backend="nccl", timeout=dt.timedelta(seconds=world.timeout_s))
        probe = torch.ones(1, device=self.device)
        dist.all_reduce(probe, group=self.group)  # creates the communicator outside any timing
        if probe.item() != world.size:
            raise CollectiveError(f"NCCL's first all_reduce gave {probe.item()}, not {world.size}")
        version = torch.cuda.nccl.version()
        text = ".".join(map(str, version)) if isinstance(version, tuple) else str(version)
        self.config = {
            "library": f"{'RCCL' if torch.version.hip else 'NCCL'} {text}",
            "out_of_place": "copy_ then all_reduce",
            "gpu": torch.cuda.get_device_name(self.device),
        }
        self._keep: list[Any] = []

    def buffers(self, count: int, dtype: str, in_place: bool) -> tuple[Any, Any]:
        self._keep = [self.empty(count, dtype)] + ([] if in_place else [self.empty(count, dtype)])
        return self._keep[0], self._keep[-1]

    def operation(self, inp: Any, out: Any, dtype: str) -> Callable[[], None]:
        return torch_all_reduce(inp, out, inp is out, self.group)


class Handle(Protocol):
    """What the algorithm needs of a symmetric-memory handle (torch's ``_SymmetricMemory``)."""

    def get_remote_tensor(self, peer: int, sizes: tuple[int, ...], dtype: Any) -> Any: ...

    def barrier(self, channel: int = 0, timeout_ms: int = 0) -> None: ...


def slices(count: int, ranks: int, itemsize: int) -> list[tuple[int, int]]:
    """Each rank's ``[lo, hi)`` of a two-shot AllReduce (cache-line multiples, the last one short)."""
    per_line = max(1, 128 // itemsize)
    lines = -(-count // per_line)
    chunk = -(-lines // ranks) * per_line
    return [(min(r * chunk, count), min((r + 1) * chunk, count)) for r in range(ranks)]


def symmetric_operation(
    inputs: Any,
    outputs: Any,
    scratch: Any,
    rank: int,
    ranks: int,
    count: int,
    dtype: Any,
    in_place: bool,
    reduce: Callable[[Any, Sequence[Any], int, int], None],
    timeout_ms: int,
    oneshot_max_bytes: int = ONESHOT_MAX_BYTES,
) -> Callable[[], None]:
    """One AllReduce over symmetric buffers ``inputs``/``outputs`` (handles); synchronised by their signal pads.

    ``reduce(out, buffers, lo, hi)`` sums ``buffers`` into ``out`` over ``[lo, hi)``; ``scratch``
    is a local tensor of at least ``count`` elements (the one-shot in-place result).
    """
    peers_in = [inputs.get_remote_tensor(p, (count,), dtype) for p in range(ranks)]
    mine_in = peers_in[rank]
    barrier = inputs.barrier
    itemsize = mine_in.element_size()
    if count * itemsize <= oneshot_max_bytes:
        target = scratch[:count] if in_place else outputs.get_remote_tensor(rank, (count,), dtype)

        def oneshot() -> None:
            barrier(channel=0, timeout_ms=timeout_ms)  # every input written
            reduce(target, peers_in, 0, count)
            barrier(channel=1, timeout_ms=timeout_ms)  # every peer done reading this rank's input
            if in_place:
                mine_in.copy_(target)

        return oneshot
    bounds = slices(count, ranks, itemsize)
    results = peers_in if in_place else [outputs.get_remote_tensor(p, (count,), dtype) for p in range(ranks)]
    mine, (lo, hi) = results[rank], bounds[rank]

    def twoshot() -> None:
        barrier(channel=0, timeout_ms=timeout_ms)  # every input written
        reduce(mine, peers_in, lo, hi)  # reduce-scatter: this rank's slice of every input
        barrier(channel=1, timeout_ms=timeout_ms)  # every slice reduced
        for peer, (plo, phi) in enumerate(bounds):  # all-gather: peer copies
            if peer != rank and phi > plo:
                mine[plo:phi].copy_(results[peer][plo:phi])
        barrier(channel=2, timeout_ms=timeout_ms)  # every peer done reading this rank's slice

    return twoshot


class TritonSymmAllReduce(GPUCollective):
    """The Triton reduction over torch symmetric memory, signal-pad synchronisation."""

    name, kind, language = "triton_symm", "portable", "triton"

    def __init__(self, world: World, max_bytes: int) -> None:
        super().__init__(world)
        if world.nodes > 1:
            raise CollectiveError(
                f"triton_symm shares buffers among the GPUs of one node; this world spans {world.nodes} nodes",
                "skipped",
            )
        import torch
        import torch.distributed._symmetric_memory as symm_mem

        from hwbench.kernels.allreduce import triton as kernel  # imports Triton, which is optional

        if world.local_size > kernel.MAX_RANKS:
            raise CollectiveError(
                f"one launch of the Triton reduction reads up to {kernel.MAX_RANKS} GPUs' buffers, "
                f"not {world.local_size}",
                "skipped",
            )
        self.kernel = kernel
        self.region = -(-max(max_bytes, 1) // ALIGN) * ALIGN
        self.tensors = [symm_mem.empty(self.region, dtype=torch.uint8, device=self.device) for _ in range(2)]
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(world.group.group_name)
        self.handles = [symm_mem.rendezvous(t, world.group) for t in self.tensors]
        self.scratch = torch.empty(self.region, dtype=torch.uint8, device=self.device)
        self.timeout_ms = int(world.timeout_s * 1000)
        self.config = {
            "algorithm": f"one-shot <= {ONESHOT_MAX_BYTES} B, else reduce-scatter (Triton) + all-gather (peer copies)",
            "sync": "symmetric memory signal pads (device barrier)",
            "gpu": torch.cuda.get_device_name(self.device),
            "block": kernel.BLOCK,
        }

    def buffers(self, count: int, dtype: str, in_place: bool) -> tuple[Any, Any]:
        tdtype = torch_dtype(dtype)
        inp = self.handles[0].get_remote_tensor(self.world.local_rank, (count,), tdtype)
        return inp, inp if in_place else self.handles[1].get_remote_tensor(self.world.local_rank, (count,), tdtype)

    def operation(self, inp: Any, out: Any, dtype: str) -> Callable[[], None]:
        import torch

        scratch = self.scratch.view(torch.uint8)[: inp.numel() * inp.element_size()].view(inp.dtype)
        return symmetric_operation(
            self.handles[0],
            self.handles[1],
            scratch,
            self.world.local_rank,
            self.world.local_size,
            inp.numel(),
            inp.dtype,
            inp is out,
            lambda o, bufs, lo, hi: self.kernel.reduce(o, bufs, lo, hi),
            self.timeout_ms,
        )

    def close(self) -> None:
        self.handles, self.tensors = [], []
