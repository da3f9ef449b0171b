"""Collective records as nccl-tests prints them (``show``, the run table), and ``--format table``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from synthetic_results import device, document, record, write

from hwbench.cli.main import main
from hwbench.results.nccl import BUSBW_NOTE, float_cell, is_collective, nccl_tables
from hwbench.results.tables import summary

COUNTS = (1, 256, 65536)
#: nccl-tests' column header (writeResultHeader without -I and -S), whitespace-split.
COLUMNS = ["#", "size", "count", "type", "redop", "root", *(["time", "algbw", "busbw", "#wrong"] * 2)]


def allreduce(
    count: int,
    in_place: int,
    median: float | None,
    *,
    impl: str = "llvm_shm",
    dtype: str = "fp32",
    ranks: int = 4,
    status: str = "ok",
    wrong: int | None = 0,
    **metrics: Any,
) -> dict[str, Any]:
    """An AllReduce record with algbw and busbw from its median (bus factor 2(n-1)/n)."""
    size = count * {"fp32": 4, "fp64": 8, "fp16": 2, "bf16": 2}[dtype]
    algbw = size / median / 1e9 if median and status == "ok" else None
    figures = {"algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (ranks - 1) / ranks if algbw else None}
    if algbw:
        figures["gbps"] = algbw
    r = record(
        "allreduce",
        impl,
        dtype,
        {"count": count, "ranks": ranks, "in_place": in_place},
        median,
        status=status,
        impl_kind="native" if impl == "gloo" else "portable",
        **figures,
        **metrics,
    )
    r["parity"].update(exact=True, mismatches=wrong)
    return r


def sweep(impl: str = "llvm_shm", **kwargs: Any) -> list[dict[str, Any]]:
    """Out of place and in place for every count in COUNTS (in place 1.5x slower)."""
    return [
        allreduce(c, flag, 1e-5 * (1 + c / 1e4) * (1.5 if flag else 1.0), impl=impl, **kwargs)
        for c in COUNTS
        for flag in (0, 1)
    ]


def data_rows(lines: list[str]) -> list[list[str]]:
    """The rows of nccl blocks: every line that is not a comment."""
    return [line.split() for line in lines if not line.startswith("#")]


def test_columns_and_order_are_nccl_tests() -> None:
    records = sweep()
    lines = nccl_tables(list(reversed(records)))  # rows come by count whatever the file's order
    header = [line for line in lines if line.split()[:2] == ["#", "size"]]
    assert header[0].split() == COLUMNS
    at = lines.index(header[0])
    assert lines[at - 1].split() == ["#", "out-of-place", "in-place"]
    assert lines[at + 1].split() == ["#", "(B)", "(elements)", *(["(us)", "(GB/s)", "(GB/s)"] * 2)]
    # the widths of writeBenchmarkLinePreamble (%12li %12li %8s %6s %6s) and Body (%7s %6s %6s %6g)
    preamble, body = 12 + 2 + 12 + 2 + 8 + 2 + 6 + 2 + 6, 2 + 7 + 2 + 6 + 2 + 6 + 2 + 6
    assert header[0].index("size") + len("size") == 12
    assert header[0].index("#wrong") + len("#wrong") == preamble + body
    assert header[0].rindex("#wrong") + len("#wrong") == len(header[0]) == preamble + 2 * body
    rows = data_rows(lines)
    assert [r[:5] for r in rows] == [[str(4 * c), str(c), "float", "sum", "-1"] for c in COUNTS]
    for row, count in zip(rows, COUNTS, strict=True):
        out, inp = (
            next(r for r in records if r["shape"] == {"count": count, "ranks": 4, "in_place": f}) for f in (0, 1)
        )
        for cells, r in ((row[5:9], out), (row[9:13], inp)):
            assert cells == [
                format(r["timing"]["median_s"] * 1e6, ".2f"),
                format(r["metrics"]["algbw_gbps"], ".2f"),
                format(r["metrics"]["busbw_gbps"], ".2f"),
                "0",
            ]
    assert all(len(line) == len(lines[at]) for line in lines if not line.startswith("#"))


def test_one_block_per_backend_impl_dtype_and_ranks() -> None:
    records = (
        sweep("gloo")
        + sweep()
        + sweep(ranks=2)
        + sweep(dtype="fp16")
        + sweep(dtype="bf16")
        + [allreduce(8, 0, 1e-5, dtype="fp64")]
    )
    lines = nccl_tables(records)
    titles = [line for line in lines if line.startswith("# allreduce on")]
    assert titles == [
        "# allreduce on cpu: gloo (native), float, 4 ranks",
        "# allreduce on cpu: llvm_shm (portable), float, 4 ranks",
        "# allreduce on cpu: llvm_shm (portable), float, 2 ranks",
        "# allreduce on cpu: llvm_shm (portable), half, 4 ranks",
        "# allreduce on cpu: llvm_shm (portable), bfloat16, 4 ranks",
        "# allreduce on cpu: llvm_shm (portable), double, 4 ranks",
    ]
    assert sum(line.startswith("# Avg bus bandwidth") for line in lines) == 6
    rows = data_rows(lines)
    assert [r[0] for r in rows if r[2] == "half"] == [str(2 * c) for c in COUNTS]
    assert rows[-1][:3] == ["64", "8", "double"]


def test_avg_bus_bandwidth_is_the_mean_over_both_placements() -> None:
    records = sweep()
    lines = nccl_tables(records)
    mean = sum(r["metrics"]["busbw_gbps"] for r in records) / len(records)
    assert f"# Avg bus bandwidth    : {mean:g}" in lines
    assert "# Out of bounds values : 0 OK" in lines


def test_failed_sizes_show_their_status_in_place_of_numbers() -> None:
    records = sweep()
    records[3] = allreduce(256, 1, None, status="timeout", wrong=None)
    records[4] = allreduce(65536, 0, 2e-3, status="parity_failed", wrong=17)
    records[5] = allreduce(65536, 1, None, status="skipped", wrong=None)
    lines = nccl_tables(records)
    rows = data_rows(lines)
    assert rows[1][5:] == [*rows[1][5:9], "timeout", "N/A", "N/A", "N/A"]
    assert rows[2][5:] == ["parity_failed", "N/A", "N/A", "17", "skipped", "N/A", "N/A", "N/A"]
    ok = [r["metrics"]["busbw_gbps"] for r in records if r["status"] == "ok"]
    assert f"# Avg bus bandwidth    : {sum(ok) / len(ok):g} (3 of 6 timings ok)" in lines
    assert "# Out of bounds values : 1 FAILED" in lines
    block = [line for line in lines if not line.startswith("#")]
    assert len({len(line) for line in block}) == 1  # a status keeps the columns where they are


def test_nothing_ok_and_a_missing_placement() -> None:
    lines = nccl_tables([allreduce(64, 0, None, status="crashed", wrong=None)])
    assert data_rows(lines) == [["256", "64", "float", "sum", "-1", "crashed", "N/A", "N/A", "N/A", "-", "-", "-", "-"]]
    assert "# Avg bus bandwidth    : N/A (no timing ok)" in lines


def test_speed_against_the_natives_and_noise_close_a_block() -> None:
    records = sweep(speeds_vs_natives={"gloo": 2.5, "mpi": 0.5})
    records[0]["metrics"]["speeds_vs_natives"] = {"gloo": 12.0, "mpi": 0.5}
    records[1]["warnings"] = ["noisy: CV 40.0% > 10%"]
    lines = nccl_tables(records)
    assert "# Speed vs native      : gloo 2.5x-12x, mpi 0.5x (t_native / t)" in lines
    assert "# Noisy timings        : 1 of 6, CV above 10 % (each record's warnings give it)" in lines
    assert not any("Speed vs native" in line for line in nccl_tables(sweep("gloo")))


def test_float_cells_are_nccl_tests_getfloatstr() -> None:
    assert float_cell(12.345, 7) == "  12.35"
    assert float_cell(12345.67, 7) == "12345.7"
    assert float_cell(1234567.8, 7) == "1234568"
    assert float_cell(123456789.0, 7) == "1.2e+08"
    assert float_cell(1234567.0, 6) == " 1e+06"
    assert float_cell(None, 6) == "     -"


def test_which_records_are_collective() -> None:
    assert is_collective(allreduce(8, 0, 1e-5))
    assert not is_collective(record("gemm", "llvm", "fp32", {"M": 8, "N": 8, "K": 8}))
    assert not is_collective(record("unknown_kernel", "x", "fp32", {"count": 8}))
    assert not is_collective(record("allreduce", "*", "fp32", {}, status="skipped"))


def mixed() -> dict[str, Any]:
    gemm = record("gemm", "llvm", "fp32", {"M": 64, "N": 64, "K": 64}, 1e-3, tflops=0.5, gbps=2.0)
    gemm["warnings"] = ["noisy: CV 30.0% > 10%"]
    noisy = allreduce(65536, 1, 3e-4)
    noisy["warnings"] = ["noisy: CV 50.0% > 10%"]
    return document([gemm, *sweep()[:-1], noisy, allreduce(1024, 0, None, status="timeout", wrong=None)])


def test_summary_prints_collectives_as_nccl_tests_and_the_rest_in_the_table() -> None:
    text = summary(mixed())
    at = text.index("# time:")
    table, nccl = text[:at], text[at:]
    assert "gemm" in table and "allreduce" not in table and BUSBW_NOTE not in text
    assert "# allreduce on cpu: llvm_shm (portable), float, 4 ranks" in nccl
    blocks = nccl.split("\n#\n\n")[0].splitlines()  # the blocks end with '#', the notes follow
    assert len(data_rows(blocks)) == 4
    assert "timeout: cpu allreduce llvm_shm fp32 count=1024,ranks=4,in_place=0: timeout on purpose" in text
    # the ~ note counts the records the table marks; the nccl block counts its own
    assert "~ after a median: noisy, CV above 10 % (1 records;" in text
    assert "# Noisy timings        : 1 of 7" in text


def test_only_collectives_print_no_empty_table() -> None:
    text = summary(document(sweep()))
    assert "no cases ran" not in text and "backend  kernel" not in text
    assert "# allreduce on cpu" in text


def test_format_table_puts_collectives_in_the_table_with_its_busbw_said() -> None:
    doc = mixed()
    text = summary(doc, collective="table")
    assert "# size" not in text and "Avg bus bandwidth" not in text
    assert BUSBW_NOTE in text and "algbw" in BUSBW_NOTE and "metrics.gbps" in BUSBW_NOTE
    rows = [line.split() for line in text.splitlines() if line.startswith("cpu      allreduce")]
    assert len(rows) == 7
    busbw = doc["records"][1]["metrics"]["busbw_gbps"]
    assert format(busbw, ".4g") in rows[0] and format(doc["records"][1]["metrics"]["gbps"], ".4g") not in rows[0]
    assert "~ after a median: noisy, CV above 10 % (2 records;" in text
    with pytest.raises(ValueError, match="'nccl' or 'table'"):
        summary(doc, collective="csv")


def test_device_names_the_block_when_a_backend_has_several(tmp_path: Path) -> None:
    records = sweep(backend="opencl", index=1)
    devices = [device("opencl", "A", "cpu", 0), device("opencl", "B", "cpu", 1)]
    text = summary(document(records, devices))
    assert "# allreduce on opencl:1: llvm_shm (portable), float, 4 ranks" in text


def test_show_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "mixed.json", mixed())
    assert main(["show", str(path)]) == 0
    default = capsys.readouterr().out
    assert "# Avg bus bandwidth" in default
    assert main(["show", str(path), "--format", "nccl"]) == 0
    assert capsys.readouterr().out == default
    assert main(["show", str(path), "--format", "table"]) == 0
    table = capsys.readouterr().out
    assert "Avg bus bandwidth" not in table and BUSBW_NOTE in table
    with pytest.raises(SystemExit) as usage:
        main(["show", str(path), "--format", "xml"])
    assert usage.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_names_from_the_file_print_escaped() -> None:
    hostile = allreduce(64, 0, 1e-5, impl="evil\x1b[2J\rname")
    hostile["dtype"] = "int8\x07"
    lines = nccl_tables([hostile])
    assert "\x1b" not in "".join(lines) and "\r" not in "".join(lines) and "\x07" not in "".join(lines)
    assert "# allreduce on cpu: evil\\x1b[2J\\rname (portable), int8\\x07, 4 ranks" in lines
    assert data_rows(lines)[0][:3] == ["-", "64", "int8\\x07"]  # no size for a dtype hwbench does not know
