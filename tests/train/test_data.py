"""Synthetic token shards: seeded, learnable, written and read back, and a resumed run reads what an
uninterrupted one would have read."""

from __future__ import annotations

import math
from pathlib import Path

import needs
import numpy as np
import pytest

torch = needs.module("torch", "the training workload")

from hwbench.train.data import StepSampler, TokenShards, loader  # noqa: E402
from hwbench.train.shards import PHRASE_LEN, phrase_stream, write_shards  # noqa: E402


def test_the_stream_is_seeded() -> None:
    a, b, c = phrase_stream(512, 10_000, 1), phrase_stream(512, 10_000, 1), phrase_stream(512, 10_000, 2)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert a.dtype == np.dtype("<u4") and len(a) == 10_000 and a.max() < 512


def test_the_stream_can_be_learned() -> None:
    """Its next-token entropy given the token is far below ln(vocab), where uniform tokens would sit."""
    vocab = 4096
    tokens = phrase_stream(vocab, 200_000, 0).astype(np.int64)
    pairs = tokens[:-1] * vocab + tokens[1:]
    _, pair_counts = np.unique(pairs, return_counts=True)
    _, first_counts = np.unique(tokens[:-1], return_counts=True)
    n = len(pairs)
    joint = -(pair_counts / n * np.log(pair_counts / n)).sum()
    marginal = -(first_counts / n * np.log(first_counts / n)).sum()
    assert joint - marginal < 0.5 * math.log(vocab)


def test_shards_are_written_and_read_back(tmp_path: Path) -> None:
    paths, seconds = write_shards(tmp_path, 512, 10_000, 3, seed=5)
    assert len(paths) == 3 and seconds >= 0
    back = np.concatenate([np.fromfile(p, dtype="<u4") for p in paths])
    assert np.array_equal(back, phrase_stream(512, 10_000, 5))
    data = TokenShards(tmp_path, seq=32)
    assert len(data) == sum(len(np.fromfile(p, dtype="<u4")) // 33 for p in paths)
    assert data[0].tolist() == back[:33].tolist()


def test_an_empty_folder_has_no_shards(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no token shards"):
        TokenShards(tmp_path, seq=8)


def test_ranks_read_disjoint_sequences_and_a_resume_reads_the_rest() -> None:
    full = [list(StepSampler(1000, 4, r, 2, 0, 10)) for r in (0, 1)]
    assert not set(full[0]) & set(full[1])
    resumed = list(StepSampler(1000, 4, 1, 2, 6, 10))
    assert resumed == full[1][6 * 4 :]


def test_the_loader_batches_step_by_step(tmp_path: Path) -> None:
    write_shards(tmp_path, 512, 4 * 17 * 2 * 5 + PHRASE_LEN, 2, seed=0)
    whole = [b.clone() for b in loader(tmp_path, 16, 4, 0, 2, 0, 5, workers=0)]
    tail = [b.clone() for b in loader(tmp_path, 16, 4, 0, 2, 3, 5, workers=0)]
    assert len(whole) == 5 and whole[0].shape == (4, 17) and whole[0].dtype == torch.int64
    assert all(torch.equal(a, b) for a, b in zip(whole[3:], tail, strict=True))
