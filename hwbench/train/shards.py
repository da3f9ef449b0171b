"""Synthetic training tokens, written as shards to the storage under test (NumPy only: the
commands that write them import no torch).

The tokens are phrases: a seeded table of ``PHRASES`` phrases of ``PHRASE_LEN`` tokens, each token
drawn from a Zipf-like distribution over the vocabulary, and a stream of phrases chosen at random.
A model can learn it (token frequencies first, then which token follows which), so a run whose loss
does not fall trained nothing; uniform random tokens would leave the loss at ln(vocab) forever.
Each shard is a flat little-endian ``uint32`` file; ``hwbench.train.data`` reads them back.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

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
