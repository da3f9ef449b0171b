"""Byte-size sweeps as nccl-tests' -b/-e/-f/-i take them: parse_sizes and sizes_to_counts."""

from __future__ import annotations

import pytest

from hwbench.collective.sizes import MAX_SIZES, parse_size, parse_sizes, sizes_to_counts
from hwbench.core.errors import UserError


def test_factor_sweep_is_nccl_tests_b8_e128M_f2() -> None:
    sizes = parse_sizes("8:128M:x2")
    assert sizes[:4] == [8, 16, 32, 64]
    assert sizes[-1] == 128 * 2**20
    assert len(sizes) == 25  # 2**3 .. 2**27
    assert all(b == 2 * a for a, b in zip(sizes, sizes[1:], strict=False))


def test_suffixes_are_powers_of_1024_in_either_case() -> None:
    assert parse_size("1K") == parse_size("1k") == 1024
    assert parse_size("128M") == 134217728
    assert parse_size("2G") == 2 * 2**30
    assert parse_size("0.5M") == 524288
    assert parse_size(" 8 ") == 8


def test_step_sweep_and_lists() -> None:
    assert parse_sizes("1M:4M:+1M") == [2**20, 2 * 2**20, 3 * 2**20, 4 * 2**20]
    assert parse_sizes("1K:4K:+1K,64") == [64, 1024, 2048, 3072, 4096]
    assert parse_sizes("4K") == [4096]
    assert parse_sizes("8:8:x2") == [8]


def test_the_end_is_kept_only_where_the_steps_land_on_it() -> None:
    assert parse_sizes("8:100:x2") == [8, 16, 32, 64]
    assert parse_sizes("10:25:+10") == [10, 20]


def test_repeats_run_once_ascending() -> None:
    assert parse_sizes("64,8:32:x2,16") == [8, 16, 32, 64]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("  ", "empty"),
        ("8,,16", "empty item"),
        ("8MB", "is not a size"),
        ("-8", "is not a size"),
        ("1e3", "is not a size"),
        ("0", "no bytes"),
        ("0:8:x2", "no bytes"),
        ("1.3K", "whole number of bytes"),
        ("0.5", "whole number of bytes"),
        ("128:8:x2", "starts above its end"),
        ("8:128", "add the step"),
        ("8:128:x2:4", "MIN:MAX:xFACTOR"),
        ("8:128:x1", "at least 2"),
        ("8:128:x1.5", "at least 2"),
        ("8:128:x\u00b2", "at least 2"),
        ("8:128:x", "at least 2"),
        ("8:128:2", "steps by '2'"),
        ("8:128:+0", "no bytes"),
        ("8:128M:+8", "more than"),
    ],
)
def test_bad_sizes_are_one_line(text: str, says: str) -> None:
    with pytest.raises(UserError) as caught:
        parse_sizes(text)
    message = str(caught.value)
    assert says in message
    assert "\n" not in message
    assert message.startswith("--sizes")


def test_too_many_sizes_across_items() -> None:
    items = ",".join(str(n) for n in range(1, MAX_SIZES + 2))
    with pytest.raises(UserError, match=f"more than {MAX_SIZES}"):
        parse_sizes(items)
    assert len(parse_sizes(f"1:{MAX_SIZES}:+1")) == MAX_SIZES


def test_counts_are_bytes_over_the_element_size() -> None:
    assert sizes_to_counts([8, 1024, 2**20], "fp32") == [2, 256, 262144]
    assert sizes_to_counts([8, 1024], "fp16") == [4, 512]
    assert sizes_to_counts([8, 1024], "bf16") == [4, 512]
    assert sizes_to_counts([8, 1024], "fp64") == [1, 128]


def test_counts_round_down_as_nccl_tests_and_merge() -> None:
    assert sizes_to_counts([10], "fp32") == [2]
    assert sizes_to_counts(parse_sizes("8:12:+1"), "fp32") == [2, 3]


def test_sizes_below_one_element_or_unknown_dtypes_are_refused() -> None:
    with pytest.raises(UserError, match="less than one fp64 element"):
        sizes_to_counts([4, 8], "fp64")
    with pytest.raises(UserError, match="unknown dtype 'int3'"):
        sizes_to_counts([8], "int3")
