"""AllReduce (sum) of one buffer per rank; inputs make every reduction order exact."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from hwbench.core.dtypes import DTYPE_BYTES, storage_dtype
from hwbench.core.kernel import Kernel, Native, Shape, ShapeParam, Source, Tolerance

GPU_DTYPES = ("fp32", "bf16", "fp16")
#: Host memory of one rank process before its buffers: Python, torch with gloo, llvmlite, NumPy.
#: Measured as the peak PSS of a rank of ``hwbench run --ranks 2 --impl gloo,llvm_shm`` at
#: count=64 (torch 2.13 CPU, Linux x86_64): 215 MiB (gloo alone 181 MiB, with mpi 220 MiB).
RANK_BASELINE_BYTES = 224 * 2**20


def _ar(count: int, ranks: int = 2) -> dict[str, int]:
    return {"count": count, "ranks": ranks}


class AllReduce(Kernel):
    """Sum of ``ranks`` buffers of ``count`` elements, as nccl-tests' all_reduce_perf.

    Every input element is a small integer (|x| <= 8), so any order of additions gives
    the exact sum in fp32, fp16 and bf16 for up to 16 ranks: parity counts wrong elements.
    """

    name = "allreduce"
    description = "sum of one buffer per rank, result on every rank (exact verification)"
    params = (
        ShapeParam("count", "elements per rank", aliases=("n", "N")),
        ShapeParam("ranks", "participating ranks", default=2, aliases=("R",)),
    )
    dtypes = ("fp32", "fp16", "bf16", "fp64")
    profiles = {
        "quick": tuple(_ar(n) for n in (1, 65536, 16 * 2**20)),  # latency, the middle, bandwidth
        "standard": tuple(_ar(4**i) for i in range(0, 13)) + (_ar(64 * 2**20),),
        "full": tuple(_ar(4**i) for i in range(0, 14)) + (_ar(128 * 2**20),),
    }

    spans_ranks = True
    sources = (
        Source(
            "llvm_shm",
            "llvmlite",
            "llvm",
            ("fp32", "fp64"),
            "shared-memory one-shot / reduce-scatter + all-gather, reduction and synchronisation in "
            "llvmlite IR; hierarchical across nodes",
            backends=("cpu",),
        ),
        Source(
            "triton_symm",
            "triton",
            "triton",
            GPU_DTYPES,
            "Triton reduction over torch symmetric memory: one-shot, or reduce-scatter + all-gather; "
            "signal-pad synchronisation",
            backends=("cuda", "rocm"),
        ),
    )
    natives = {
        "cpu": (
            Native("gloo", "torch.distributed", "torch.distributed.all_reduce on the gloo backend", ("fp32", "fp64")),
            Native(
                "mpi", "mpi4py", "MPI.COMM_WORLD.Allreduce through mpi4py, ranks started by mpirun", ("fp32", "fp64")
            ),
        ),
        "cuda": (
            Native("nccl", "torch.distributed", "torch.distributed.all_reduce on NCCL (the nccl backend)", GPU_DTYPES),
        ),
        "rocm": (
            Native("nccl", "torch.distributed", "torch.distributed.all_reduce on RCCL (the nccl backend)", GPU_DTYPES),
        ),
    }

    def output_shape(self, shape: Shape) -> tuple[int, ...]:
        return (shape["count"],)

    def flops(self, shape: Shape) -> float:
        return float((shape["ranks"] - 1) * shape["count"])

    def bytes_moved(self, shape: Shape, dtype: str) -> float:
        return float(DTYPE_BYTES[dtype] * shape["count"])

    def memory_bytes(self, shape: Shape, dtype: str) -> int:
        """Host bytes of all ``ranks`` rank processes (every rank taken as local): each rank's own
        input and output, its input and output on the shared segment's symmetric heap, and
        :data:`RANK_BASELINE_BYTES`. (Measured at count=2**24 fp32 on 4 ranks: 1.51 GiB summed
        PSS; this gives 1.86 GiB.)"""
        buffer = DTYPE_BYTES[dtype] * shape["count"]
        return shape["ranks"] * (RANK_BASELINE_BYTES + 2 * buffer + 2 * buffer)

    def bus_factor(self, shape: Shape) -> float:
        """busbw = algbw * 2 (n - 1) / n, as nccl-tests defines it for all_reduce."""
        ranks = shape["ranks"]
        return 2.0 * (ranks - 1) / ranks

    def make_inputs(self, shape: Shape, dtype: str, seed: int) -> dict[str, np.ndarray]:
        count, ranks = shape["count"], shape["ranks"]
        index = np.arange(count, dtype=np.int64)
        rows = [((index * 7 + rank * 13 + seed) % 17 - 8) for rank in range(ranks)]
        return {"x": np.stack(rows).astype(storage_dtype(dtype))}

    def reference(self, inputs: Mapping[str, np.ndarray], shape: Shape) -> np.ndarray:
        return inputs["x"].astype(np.float64).sum(axis=0)

    def tolerance(self, dtype: str, shape: Shape) -> Tolerance:
        return Tolerance(atol=0.0, rtol=0.0, exact=True)


KERNEL = AllReduce()
