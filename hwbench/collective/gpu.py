"""AllReduce on GPUs: one rank per GPU (``LOCAL_RANK`` picks it), buffers, checks and timing on the device.

* ``nccl`` (native): ``torch.distributed.all_reduce`` on an NCCL process group (RCCL on
  ROCm, through the same backend). Out of place is ``copy_`` then ``all_reduce``.
* ``triton_symm`` (portable): every rank's input and output live in torch symmetric memory
  (``torch.distributed._symmetric_memory``, pinned to its CUDA backend), so each rank reads
  its peers' buffers directly. One launch of ``hwbench.kernels.allreduce.triton`` per call,
  as NCCL's: messages up to :data:`ONESHOT_MAX_BYTES` go one-shot (every rank sums the whole
  message from all peers), larger ones two-shot (rank ``r`` sums its slice of every peer's
  buffer and writes it into every peer's output). Ranks synchronise inside that launch,
  through the signal pads, with bounded waits: a missing peer ends in a timeout record, never
  in a trap that poisons the context. One node only.

Timing uses device events around each iteration; inputs are built and checked on the device.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

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


def signal_pad_bytes(symm_mem: Any) -> int:
    """Bytes of each rank's signal pad: torch's own figure where it tells (2.9+), else 2048, the
    smallest default torch has had."""
    size = getattr(symm_mem, "get_signal_pad_size", None)
    return int(size()) if callable(size) else 2048


def pin_backend(symm_mem: Any, device: Any) -> str:
    """Pin torch's symmetric memory to its ``CUDA`` backend (peer-mapped buffers with signal pads,
    which the kernel reads through device tables; also what it is called on ROCm) where torch lets one
    choose; a process already set to another backend is a skip saying so."""
    if not hasattr(symm_mem, "set_backend"):
        return "CUDA"
    current = symm_mem.get_backend(device) if hasattr(symm_mem, "get_backend") else None
    if current not in (None, "CUDA"):
        raise CollectiveError(
            f"torch's symmetric memory is set to its {current} backend here; triton_symm needs its CUDA "
            "backend (peer-mapped buffers and signal pads)",
            "skipped",
        )
    if current is None:
        symm_mem.set_backend("CUDA")
    return "CUDA"


def enable_for_group(symm_mem: Any, group_name: str) -> None:
    """Register the group with symmetric memory where torch still needs it (before 2.11 or so);
    later torch marks ``enable_symm_mem_for_group`` deprecated (a FutureWarning) and needs nothing."""
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if enable is not None and getattr(enable, "__deprecated__", None) is None:
        enable(group_name)


class TritonSymmAllReduce(GPUCollective):
    """The Triton AllReduce over torch symmetric memory: one launch per call, synchronised on the device."""

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
                f"one launch of the Triton AllReduce serves up to {kernel.MAX_RANKS} GPUs, not {world.local_size}",
                "skipped",
            )
        self.kernel = kernel
        backend = pin_backend(symm_mem, self.device)
        region = -(-max(max_bytes, 1) // ALIGN) * ALIGN
        self.tensors = [symm_mem.empty(region, dtype=torch.uint8, device=self.device) for _ in range(2)]
        enable_for_group(symm_mem, world.group.group_name)
        self.handles = [symm_mem.rendezvous(t, world.group) for t in self.tensors]
        self.err = torch.zeros(1, dtype=torch.int32, device=self.device)
        self.programs = kernel.max_programs(signal_pad_bytes(symm_mem), world.local_size)
        self.clock = kernel.CLOCKS["memrealtime" if torch.version.hip else "globaltimer"]
        self.timeout_ns = int(world.timeout_s * 1e9)
        self.config = {
            "algorithm": f"one-shot <= {ONESHOT_MAX_BYTES} B, else reduce-scatter + all-gather, in one launch",
            "sync": "signal pads, program by program, inside the kernel: one lane a peer signals it "
            "(release), each polls its flag with acquire loads (bounded waits); the grid is checked "
            "co-resident before the first launch",
            "symm_mem_backend": backend,
            "gpu": torch.cuda.get_device_name(self.device),
            "block": kernel.BLOCK,
            "max_programs": self.programs,
        }

    def buffers(self, count: int, dtype: str, in_place: bool) -> tuple[Any, Any]:
        tdtype = torch_dtype(dtype)
        inp = self.handles[0].get_remote_tensor(self.world.local_rank, (count,), tdtype)
        return inp, inp if in_place else self.handles[1].get_remote_tensor(self.world.local_rank, (count,), tdtype)

    def operation(self, inp: Any, out: Any, dtype: str) -> Callable[[], None]:
        in_place = inp is out
        inputs, outputs = self.handles[0], self.handles[0 if in_place else 1]
        tables = {
            "inputs": inputs.buffer_ptrs_dev,
            "outputs": outputs.buffer_ptrs_dev,
            "pads": inputs.signal_pad_ptrs_dev,
        }
        rank, ranks, count = self.world.local_rank, self.world.local_size, inp.numel()
        step = self.kernel.plan(count, ranks, rank, inp.element_size(), ONESHOT_MAX_BYTES, self.programs)
        if self.device.type == "cuda":  # tensors on a GPU: its SMs must hold the whole grid at once
            step = self.co_resident(step, tables, out, in_place)
        self.config["programs"] = step["grid"][0]
        launch, err, clock, timeout = self.kernel.launch, self.err, self.clock, self.timeout_ns

        def allreduce() -> None:
            launch(tables, err, out, count, rank, ranks, step, in_place, timeout, clock)

        return allreduce

    def co_resident(self, step: dict[str, Any], tables: dict[str, int], out: Any, in_place: bool) -> dict[str, Any]:
        """``step`` where the GPU holds its whole grid at once (every program waits for its peers' programs,
        so one left without an SM would wait for ever), else the plan again with at most the programs that
        fit (two-shot programs stride over their slice); a grid that still cannot be resident is a skip
        saying why, never a launch."""
        import torch

        props = torch.cuda.get_device_properties(self.device)
        rank, ranks, count, size = self.world.local_rank, self.world.local_size, out.numel(), out.element_size()
        reason = ""
        for _ in range(2):  # the re-plan may pick the other variant, with another footprint
            kernel = self.kernel.compiled(
                tables, self.err, out, count, rank, ranks, step, in_place, self.timeout_ns, self.clock
            )
            used = self.kernel.footprint(kernel)
            reason = self.kernel.co_resident(step["grid"][0], props, used)
            per_sm, _ = self.kernel.resident_per_sm(props, used["registers"], used["shared"], used["threads"])
            self.config["resident_programs"] = per_sm * int(props.multi_processor_count)
            if not reason:
                return step
            fits = self.config["resident_programs"]
            if fits < 1:
                break
            step = self.kernel.plan(count, ranks, rank, size, ONESHOT_MAX_BYTES, min(self.programs, fits))
        raise CollectiveError(f"triton_symm: {reason}", "skipped")

    def timed_out(self) -> None:
        """Raise a timeout when any device barrier of this rank gave up waiting for a peer."""
        if int(self.err.item()):
            raise CollectiveError(
                f"rank {self.world.rank}: a device barrier of the Triton AllReduce waited over "
                f"{self.timeout_ns / 1e9:g} s for a peer and gave up (the context is intact; the signal "
                "pads are not, so this implementation stops here)",
                "timeout",
            )

    def check(self, buf: Any, pattern: np.ndarray) -> tuple[int, float]:
        self.timed_out()
        return super().check(buf, pattern)

    def time_loop(self, op: Callable[[], None], iters: int) -> np.ndarray:
        samples = super().time_loop(op, iters)
        self.timed_out()
        return samples

    def close(self) -> None:
        self.handles, self.tensors = [], []
