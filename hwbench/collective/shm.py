"""The shared-memory transport of the portable CPU AllReduce: one segment per node.

Local rank 0 creates a file in /dev/shm under a unique name, every local rank maps it,
and local rank 0 unlinks it as soon as all have mapped it, so nothing is left behind
even if every rank is killed afterwards. The segment holds the control block and slots
of :mod:`hwbench.kernels.allreduce.llvm` and a symmetric heap: one region per local
rank, where the buffers an operation reads and writes live at the same offset on every
rank (as torch's symmetric memory does on GPUs).
"""

from __future__ import annotations

import mmap
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hwbench.collective.debris import PREFIX, SHM_DIR, owner_token

PAGE = 4096
#: Messages up to this many bytes take the one-shot path (copy into a slot, one barrier).
ONESHOT_MAX_BYTES = 64 * 1024


class CollectiveError(RuntimeError):
    """A collective failed on this rank; ``status`` is the record status it maps to."""

    def __init__(self, message: str, status: str = "runtime_error") -> None:
        super().__init__(message)
        self.status = status


def _round_up(value: int, to: int) -> int:
    return -(-value // to) * to


def segment_name(token: str | None, node: int) -> str:
    """A fresh segment name for ``node``; ``token`` groups the names of one launch (the launcher sweeps
    ``PREFIX-TOKEN-*``); without one, this process owns the name (:mod:`.debris`)."""
    return f"{PREFIX}-{token or owner_token()}-n{node}-{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Layout:
    """Where everything lies in a segment for ``ranks`` local ranks and messages up to ``max_bytes``."""

    ranks: int
    max_bytes: int
    slot_bytes: int = ONESHOT_MAX_BYTES

    def __post_init__(self) -> None:
        from hwbench.kernels.allreduce.llvm import MAX_LOCAL_RANKS  # llvmlite, optional: only when used

        if not 1 <= self.ranks <= MAX_LOCAL_RANKS:
            raise CollectiveError(
                f"the shared-memory AllReduce takes 1 to {MAX_LOCAL_RANKS} ranks per node, got {self.ranks}"
            )

    @property
    def slots(self) -> int:
        from hwbench.kernels.allreduce.llvm import CONTROL_BYTES  # llvmlite, optional: only when used

        return CONTROL_BYTES

    @property
    def heap(self) -> int:
        return _round_up(self.slots + 2 * self.ranks * self.slot_bytes, PAGE)

    @property
    def out_offset(self) -> int:
        return _round_up(max(self.max_bytes, 1), PAGE)

    @property
    def stride(self) -> int:
        return 2 * self.out_offset

    @property
    def size(self) -> int:
        return self.heap + self.ranks * self.stride


class Segment:
    """A mapped shared segment; the creator unlinks it once every rank has mapped it."""

    def __init__(self, name: str, size: int, create: bool) -> None:
        self.name, self.size = name, size
        self.path: Path | None = SHM_DIR / name
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            elif os.fstat(fd).st_size < size:
                raise CollectiveError(f"shared segment {name} is smaller than expected")
            self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.array = np.frombuffer(self.map, dtype=np.uint8)
        self.address = self.array.ctypes.data
        if not create:
            self.path = None  # only the creator unlinks

    def unlink(self) -> None:
        """Remove the name (the mappings stay valid); safe to call twice."""
        if self.path is not None:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            self.path = None

    def close(self) -> None:
        """Unlink (if still linked) and unmap; views into the segment must be gone."""
        self.unlink()
        self.array = None  # type: ignore[assignment]
        try:
            self.map.close()
        except BufferError:  # a view is still alive; the mapping goes with the process
            pass


class ShmAllReduce:
    """AllReduce among the local ranks of one node through a mapped :class:`Segment`.

    ``timeout_s`` bounds every wait; a rank that does not arrive in time turns into a
    :class:`CollectiveError` with status ``timeout`` naming it, on every other rank.
    """

    def __init__(
        self, segment: Segment, layout: Layout, rank: int, timeout_s: float, spins: int = 200, yields: int = 4
    ) -> None:
        from hwbench.kernels.allreduce import llvm as kernels  # llvmlite, optional: only when used

        self.segment, self.layout, self.rank = segment, layout, rank
        self._kernels = kernels
        self._state = np.zeros(8, dtype=np.int64)  # barriers passed by this rank
        self._sync = (segment.address, rank, layout.ranks, self._state.ctypes.data, int(timeout_s * 1e9), spins, yields)
        self._bound: dict[str, Any] = {}
        self.timeout_s = timeout_s

    def kernels(self, dtype: str) -> Any:
        if dtype not in self._bound:
            self._bound[dtype] = self._kernels.load(dtype)
        return self._bound[dtype]

    def buffer(self, which: str, count: int, dtype: np.dtype) -> np.ndarray:
        """This rank's ``in`` or ``out`` buffer on the symmetric heap, as ``count`` elements."""
        nbytes = count * np.dtype(dtype).itemsize
        if nbytes > self.layout.max_bytes:
            raise ValueError(f"{nbytes} bytes exceed the segment's {self.layout.max_bytes}")
        start = self.layout.heap + self.rank * self.layout.stride + (self.layout.out_offset if which == "out" else 0)
        return self.segment.array[start : start + nbytes].view(dtype)

    def _heap_offset(self, buf: np.ndarray) -> int:
        offset = buf.ctypes.data - self.segment.address - self.layout.heap - self.rank * self.layout.stride
        if not 0 <= offset < self.layout.stride:
            raise ValueError("buffer is not on this rank's symmetric heap")
        return offset

    def check(self, rc: int) -> None:
        """Raise the error a kernel status stands for."""
        if rc == 0:
            return
        late = self.late_ranks()
        who = f"local rank(s) {', '.join(map(str, late))}" if late else "a rank"
        if rc == self._kernels.TIMED_OUT:
            raise CollectiveError(
                f"{who} did not arrive within {self.timeout_s:g} s (shared-memory barrier)", "timeout"
            )
        raise CollectiveError(f"another rank gave up waiting; {who} had not arrived", "timeout")

    def late_ranks(self) -> list[int]:
        """Local ranks whose last arrival is behind this rank's."""
        flags = self.segment.array[self._kernels.FLAGS :].view(np.int64)[:: self._kernels.LINE // 8]
        mine = int(self._state[0])
        return [r for r in range(self.layout.ranks) if int(flags[r]) < mine]

    def allreduce(self, inp: np.ndarray, out: np.ndarray, dtype: str) -> None:
        """``out = sum over local ranks of inp`` (``out`` may be ``inp``); both on the heap for large messages."""
        self.bind(inp, out, dtype)()

    def bind(self, inp: np.ndarray, out: np.ndarray, dtype: str) -> Callable[[], None]:
        """:meth:`allreduce` of these buffers as a call with every argument computed once."""
        k = self.kernels(dtype)
        if inp.nbytes <= self.layout.slot_bytes:
            fn = k.oneshot
            args = (
                *self._sync,
                self.segment.address + self.layout.slots,
                self.layout.slot_bytes,
                inp.ctypes.data,
                out.ctypes.data,
                inp.size,
            )
        else:
            fn = k.allreduce
            args = (
                *self._sync,
                self.segment.address + self.layout.heap,
                self.layout.stride,
                self._heap_offset(inp),
                self._heap_offset(out),
                inp.size,
            )
        check = self.check

        def call() -> None:
            rc = fn(*args)
            if rc:
                check(rc)

        return call

    def reduce_scatter(self, inp: np.ndarray, out: np.ndarray, dtype: str) -> tuple[int, int]:
        """Barrier, then this rank's slice of the sum into ``out``; returns the slice's element range."""
        k = self.kernels(dtype)
        self.check(
            k.reduce_scatter(
                *self._sync,
                self.segment.address + self.layout.heap,
                self.layout.stride,
                self._heap_offset(inp),
                self._heap_offset(out),
                inp.size,
            )
        )
        return self._kernels.slice_bounds(inp.size, self.layout.ranks, self.rank, inp.itemsize)

    def all_gather(self, out: np.ndarray, dtype: str) -> None:
        """Barrier, copy every other rank's slice of ``out`` into this rank's, barrier."""
        k = self.kernels(dtype)
        self.check(
            k.all_gather(
                *self._sync,
                self.segment.address + self.layout.heap,
                self.layout.stride,
                self._heap_offset(out),
                out.size,
            )
        )

    def barrier(self) -> None:
        """All local ranks meet (through the shared counter, not the network)."""
        self.check(self.kernels("fp32").barrier(*self._sync))
