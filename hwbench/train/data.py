"""Synthetic training tokens: written as shards to the storage under test, read back by a DataLoader.

The tokens are phrases: a seeded table of ``PHRASES`` phrases of ``PHRASE_LEN`` tokens, each token
drawn from a Zipf-like distribution over the vocabulary, and a stream of phrases chosen at random.
A model can learn it (token frequencies first, then which token follows which), so a run whose loss
does not fall trained nothing; uniform random tokens would leave the loss at ln(vocab) forever.

Each shard is a flat little-endian ``uint32`` file; ``TokenShards`` maps them (``numpy.memmap``) and
serves sequences of ``seq + 1`` tokens. The sequences of step ``s`` on rank ``r`` are fixed by the
step, so a run resumed at step ``s`` reads what an uninterrupted run would have read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

PHRASES = 512
PHRASE_LEN = 16
#: Offset of the Zipf-like weights 1 / (rank + ZIPF_OFFSET): how skewed the token frequencies are.
ZIPF_OFFSET = 8
TOKEN_DTYPE = np.dtype("<u4")
SHARD_NAME = "tokens-{:04d}.bin"


def phrase_stream(vocab: int, n_tokens: int, seed: int) -> np.ndarray:
    """``n_tokens`` tokens of seeded phrases (the same for one seed, vocabulary and length)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(vocab) + ZIPF_OFFSET)
    phrases = rng.choice(vocab, size=(PHRASES, PHRASE_LEN), p=weights / weights.sum()).astype(TOKEN_DTYPE)
    chosen = rng.integers(0, PHRASES, size=-(-n_tokens // PHRASE_LEN))
    return phrases[chosen].reshape(-1)[:n_tokens]


def write_shards(folder: Path, vocab: int, n_tokens: int, shards: int, seed: int) -> tuple[list[Path], float]:
    """Write the stream as ``shards`` files in ``folder`` (each flushed to the device with fsync);
    the paths and the seconds the writes took."""
    tokens = phrase_stream(vocab, n_tokens, seed)
    paths = []
    start = time.perf_counter()
    for index, part in enumerate(np.array_split(tokens, shards)):
        path = folder / SHARD_NAME.format(index)
        with open(path, "wb") as handle:
            handle.write(part.tobytes())
            handle.flush()
            os.fsync(handle.fileno())
        paths.append(path)
    return paths, time.perf_counter() - start


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
