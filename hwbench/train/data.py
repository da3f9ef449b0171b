"""The token shards (``hwbench.train.shards``) read back through a DataLoader.

``TokenShards`` maps the shards (``numpy.memmap``) and
serves sequences of ``seq + 1`` tokens. The sequences of step ``s`` on rank ``r`` are fixed by the
step, so a run resumed at step ``s`` reads what an uninterrupted run would have read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from hwbench.train.shards import TOKEN_DTYPE


class TokenShards(Dataset[torch.Tensor]):
    """Sequences of ``seq + 1`` tokens from the shards in ``folder``, in file order."""

    def __init__(self, folder: Path, seq: int) -> None:
        self.maps = [np.memmap(p, dtype=TOKEN_DTYPE, mode="r") for p in sorted(folder.glob("tokens-*.bin"))]
        if not self.maps:
            raise FileNotFoundError(f"no token shards (tokens-*.bin) in {folder}")
        self.window = seq + 1
        self.per_shard = [len(m) // self.window for m in self.maps]

    def __len__(self) -> int:
        return sum(self.per_shard)

    def __getitem__(self, index: int) -> torch.Tensor:
        for shard, count in zip(self.maps, self.per_shard, strict=True):
            if index < count:
                start = index * self.window
                return torch.from_numpy(shard[start : start + self.window].astype(np.int64))
            index -= count
        raise IndexError(index)


class StepSampler(Sampler[int]):
    """The sequence indices of steps ``first_step`` onward for one rank: step ``s`` takes the
    ``batch`` sequences from ``(s x ranks + rank) x batch`` on, wrapping around the data."""

    def __init__(self, sequences: int, batch: int, rank: int, ranks: int, first_step: int, steps: int) -> None:
        self.sequences, self.batch, self.rank, self.ranks = sequences, batch, rank, ranks
        self.first_step, self.steps = first_step, steps

    def __iter__(self) -> Iterator[int]:
        for step in range(self.first_step, self.steps):
            start = (step * self.ranks + self.rank) * self.batch
            yield from ((start + j) % self.sequences for j in range(self.batch))

    def __len__(self) -> int:
        return max(0, self.steps - self.first_step) * self.batch


def loader(
    folder: Path, seq: int, batch: int, rank: int, ranks: int, first_step: int, steps: int, workers: int
) -> DataLoader[torch.Tensor]:
    """A DataLoader of the batches of steps ``first_step`` to ``steps - 1`` for ``rank``."""
    data = TokenShards(folder, seq)
    sampler = StepSampler(len(data), batch, rank, ranks, first_step, steps)
    return DataLoader(data, batch_size=batch, sampler=sampler, num_workers=workers, drop_last=True)
