"""Outputs other tools read: ``show``'s nccl-tests form parsed as nccl-tests' stdout is, the
table as CSV and as rows for pandas, and pytest-benchmark records whose rounds hold a gate."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import needs
import pytest
from synthetic_results import document, record, write

import hwbench.results
from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.pytest_plugin import Budget
from hwbench.results.flat import COLUMNS
from hwbench.results.tables import comment, nccl_form, summary

pytest_plugins = ["pytester"]

#: nccl-tests' columns: size, count, type, redop, root, then time, algbw, busbw, #wrong twice.
NCCL_COLUMNS = 13
COUNTS = (1, 256, 65536)


def _allreduce(count: int, in_place: int, impl: str = "llvm_shm", status: str = "ok") -> dict[str, Any]:
    median = 1e-5 * (1 + count / 1e4) if status == "ok" else None
    algbw = count * 4 / median / 1e9 if median else None
    r = record(
        "allreduce",
        impl,
        "fp32",
        {"count": count, "ranks": 2, "in_place": in_place},
        median,
        status=status,
        impl_kind="native" if impl == "gloo" else "portable",
        algbw_gbps=algbw,
        busbw_gbps=algbw,
        **({"gbps": algbw} if algbw else {}),
    )
    r["parity"].update(exact=True, mismatches=0 if status == "ok" else None)
    return r


def _skipped_backend() -> dict[str, Any]:
    r = record("gemm", "*", "", {}, None, backend="cuda", device=None, index=-1, status="skipped", impl_kind=None)
    r["reason"] = "backend cuda unavailable: no GPU"
    return r


def _nccl_doc() -> dict[str, Any]:
    """Two implementations with the same sizes, a size that timed out, a GEMM, a backend skipped."""
    gemm = record("gemm", "llvm", "fp32", {"M": 64, "N": 64, "K": 64}, 1e-3, tflops=0.5, gbps=2.0)
    records = [gemm, _skipped_backend()]
    for impl in ("gloo", "llvm_shm"):
        records += [_allreduce(c, flag, impl) for c in COUNTS for flag in (0, 1)]
    records[-1] = _allreduce(65536, 1, "llvm_shm", status="timeout")
    doc = document(records)
    doc["backends"].append({"name": "cuda", "available": False, "reason": "no GPU", "devices": []})
    return doc


def _nccl_rows(text: str) -> list[list[str]]:
    """What the usual nccl-tests parser takes: every line not starting with '#' is a row."""
    return [line.split() for line in text.splitlines() if not line.startswith("#")]


def test_show_nccl_is_clean_nccl_tests_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "allreduce.json", _nccl_doc())
    assert main(["show", str(path), "--format", "nccl"]) == 0
    out = capsys.readouterr().out
    rows = _nccl_rows(out)
    # only the rows: three sizes per implementation, each with nccl-tests' columns, a timeout too
    assert [len(r) for r in rows] == [NCCL_COLUMNS] * 6
    assert [r[:3] for r in rows] == [[str(4 * c), str(c), "float"] for c in COUNTS] * 2
    assert rows[-1][9:] == ["timeout", "N/A", "N/A", "N/A"]
    for line in ("# hwbench ", "# host ", "# BLAS ", "# backend cpu", "# skipped: cuda gemm: backend cuda"):
        assert any(text.startswith(line) for text in out.splitlines()), line
    # one block per implementation, split where nccl-tests' logs split, each closed as nccl-tests closes
    blocks = out.split("# Collective test starting: ")[1:]
    assert [b.splitlines()[0] for b in blocks] == [
        "all_reduce_perf impl=gloo device=cpu:0 type=float ranks=2",
        "all_reduce_perf impl=llvm_shm device=cpu:0 type=float ranks=2",
    ]
    for block in blocks:
        assert len(_nccl_rows(block.split("\n", 1)[1].split("# Collective test concluded:")[0])) == 3
        assert f"#\n# Collective test concluded: {block.splitlines()[0]}\n" in block
        assert "# Avg bus bandwidth    : " in block and "# Out of bounds values : 0 OK" in block


def test_what_run_prints_after_the_table_stays_a_comment() -> None:
    doc = _nccl_doc()
    printed = summary(doc, warnings=False) + "\n" + comment("\nresults: results/x.json")
    assert [len(r) for r in _nccl_rows(printed)] == [NCCL_COLUMNS] * 6
    assert printed.endswith("\n#\n# results: results/x.json")
    assert nccl_form(doc) and not nccl_form(doc, "table")
    plain = document([record("gemm", "llvm", "fp32", {"M": 8, "N": 8, "K": 8})])
    assert not nccl_form(plain) and not summary(plain).startswith("#")  # no collective: the plain table


def _table_doc() -> dict[str, Any]:
    gemm = record("gemm", "llvm", "fp32", {"M": 1024, "N": 512, "K": 256}, 2e-3, tflops=0.27, gbps=1.5, pct_peak=12.5)
    gemm["metrics"]["speed_vs_native"] = 0.87
    gemm["warnings"] = ["noisy: CV 30.0% > 10%"]
    stream = record("stream", "llvm", "fp32", {"op": 3, "n": 4194304}, 2.5e-3, gbps=19.75, pct_bw_peak=40.0)
    hostile = record("gemm", "evil\x1b[2Jimpl", "fp32", {"M": 8, "N": 8, "K": 8}, status="parity_failed")
    return document([gemm, stream, _allreduce(256, 1), hostile, _skipped_backend()])


def test_rows_are_the_table_as_data(tmp_path: Path) -> None:
    path = write(tmp_path / "run.json", _table_doc())
    rows = hwbench.results.rows(path)
    assert [tuple(r) for r in rows] == [COLUMNS] * 5
    gemm, stream, allreduce, hostile, skipped = rows
    assert gemm == {
        "backend": "cpu",
        "device": "cpu:0",
        "kernel": "gemm",
        "impl": "llvm",
        "dtype": "fp32",
        "shape": "M=1024,N=512,K=256",
        "status": "ok",
        "median_s": 2e-3,
        "tflops": 0.27,
        "gbps": 1.5,
        "pct_peak": 12.5,
        "speed_vs_native": 0.87,
        "noisy": True,
        "reason": None,
    }
    assert stream["shape"] == "triad,n=4194304" and stream["pct_peak"] == 40.0  # its share of memory bandwidth
    assert allreduce["shape"] == "count=256,ranks=2,in_place=1" and allreduce["gbps"] == pytest.approx(0.09984, 1e-3)
    assert hostile["impl"] == "evil\x1b[2Jimpl" and hostile["reason"] == "parity_failed on purpose"  # data as it is
    assert skipped["device"] is None and skipped["impl"] == "*" and skipped["reason"].startswith("backend cuda")
    with pytest.raises(UserError, match="no such file"):
        hwbench.results.rows(tmp_path / "missing.json")


def test_show_csv_prints_the_same_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "run.json", _table_doc())
    assert main(["show", str(path), "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out and "synthetic test document" in captured.err  # warnings on stderr
    parsed = list(csv.DictReader(io.StringIO(captured.out)))
    expected = hwbench.results.rows(path)
    assert len(parsed) == len(expected) and list(parsed[0]) == list(COLUMNS)
    for got, want in zip(parsed, expected, strict=True):
        assert got["device"] == (want["device"] or "") and got["shape"] == want["shape"]
        assert got["median_s"] == ("" if want["median_s"] is None else repr(want["median_s"]))
    assert parsed[3]["impl"] == "evil\\x1b[2Jimpl"


def test_rows_make_a_pandas_frame(tmp_path: Path) -> None:
    pd = needs.module("pandas")
    frame = pd.DataFrame(hwbench.results.rows(write(tmp_path / "run.json", _table_doc())))
    assert list(frame.columns) == list(COLUMNS) and len(frame) == 5
    assert frame[frame.status == "ok"].groupby("kernel").median_s.max()["gemm"] == 2e-3
    assert frame.loc[0, "device"] == "cpu:0" and frame.loc[0, "shape"] == "M=1024,N=512,K=256"


def test_rounds_fill_the_budget_and_meet_a_gate_on_the_mean() -> None:
    noisy = [1e-3, 3e-3] * 10  # a CV of about 51 %
    steady = [2e-3] * 20
    plain = Budget(min_rounds=5, max_time_s=1.0)
    assert plain.rounds(noisy, steady) == 500  # rounds of 2 ms fill the second, as pytest-benchmark's own
    gated = Budget(min_rounds=5, max_time_s=1.0, mean_gates=(("mean:5%", 5.0, True),))
    # two means within 5 % at 99 %: n >= 2 (2.576 * 0.513 / 0.05)^2
    assert gated.rounds(noisy, steady) == pytest.approx(1397, abs=2)
    assert gated.rounds(noisy, [0.1] * 20) == 100  # never past ten times the budget
    assert Budget(min_rounds=7, max_time_s=0.001).rounds(steady, [1.0] * 3) == 7


#: pytest-benchmark's clock in these runs: 1 ms a round, 10 ms every 25th (a preempted call,
#: deterministically), the rounds counted from FAKE_CLOCK_OFFSET.
FAKE_CLOCK = """
import os

_state = {"calls": 0, "now": 0.0, "offset": int(os.environ.get("FAKE_CLOCK_OFFSET", "0"))}


def clock():
    if _state["calls"] % 2:  # the end of a round
        k = _state["calls"] // 2 + _state["offset"]
        _state["now"] += 0.010 if k % 25 == 24 else 0.001
    _state["calls"] += 1
    return _state["now"]
"""


def _gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, options: str) -> pytest.RunResult:
    """A baseline run, then a run of the same code against it with ``--benchmark-compare-fail=mean:5%``,
    its rare slow round falling elsewhere."""
    pytester.makepyfile(
        fakeclock=FAKE_CLOCK,
        test_gated=f"""
def test_gemm(hwbench_case):
    hwbench_case("gemm", {{"M": 8, "N": 8, "K": 8}}, impl="native", native=False, flush=False{options})
""",
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(pytester.path), os.environ.get("PYTHONPATH", "")]))
    common = ["-p", "no:cacheprovider", "--benchmark-timer=fakeclock.clock", "--benchmark-max-time=0.05"]
    monkeypatch.setenv("FAKE_CLOCK_OFFSET", "0")
    pytester.runpytest_subprocess(*common, "--benchmark-autosave").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_CLOCK_OFFSET", "5")
    return pytester.runpytest_subprocess(
        *common, "--benchmark-compare", "--benchmark-compare-fail=mean:5%", "--benchmark-json=new.json"
    )


def test_unchanged_code_passes_a_gate_on_the_mean(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = _gate(pytester, monkeypatch, "")
    assert result.ret == 0, result.stdout.str()
    rounds = json.loads((pytester.path / "new.json").read_text())["benchmarks"][0]["stats"]["rounds"]
    assert rounds >= 200  # a slow round in 25 moves a mean of this many rounds by well under 5 %


def test_a_gate_within_the_noise_of_few_rounds_warns(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _gate(pytester, monkeypatch, ", rounds=20")
    assert result.ret != 0  # 20 rounds: the one slow round moves the mean by 45 %
    result.stdout.fnmatch_lines(
        [
            "*--benchmark-compare-fail=mean:5% is within this benchmark's noise: over 20 rounds*"
            "gate on the median (--benchmark-compare-fail=median:10%)*hwbench compare --fail-on median:5%*"
        ]
    )


def test_a_run_with_allreduce_prints_clean_nccl_tests_stdout(tmp_path: Path) -> None:
    """``hwbench run``'s own stdout, AllReduce beside a GEMM: every line that is not a row of
    nccl-tests' columns is a comment, the ``results:`` line after the table included."""
    import subprocess

    from conftest import hwbench_cmd

    out = tmp_path / "r.json"
    done = subprocess.run(
        hwbench_cmd(
            "run", "--backend", "cpu", "--kernel", "allreduce,gemm", "--impl", "llvm_shm,numpy", "--ranks", "2",
            "--shape", "allreduce:count=64", "--shape", "gemm:M=32,N=32,K=32", "--budget", "0.05", "--quiet",
            "--out", str(out),
        ),
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _nccl_rows(done.stdout)
    assert rows and all(len(r) == NCCL_COLUMNS for r in rows), done.stdout
    assert f"# results: {out}" in done.stdout.splitlines()
