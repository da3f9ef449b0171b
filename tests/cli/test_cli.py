"""The command line: a real run end to end, and one clear line for every kind of bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import hwbench_cmd

from hwbench.core.records import SCHEMA_VERSION


def hwbench(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(hwbench_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("run") / "small.json"
    result = hwbench(
        "run",
        "--backend",
        "cpu",
        "--kernel",
        "gemm,attention",
        "--shape",
        "gemm:M=37,N=45,K=29",
        "--shape",
        "attention:B=1,H=2,S=33,D=20,causal=1",
        "--budget",
        "0.02",
        "--price-per-hour",
        "0.5",
        "--out",
        str(out),
    )
    return result, out


def test_run_writes_a_valid_file_and_prints_the_table(small_run) -> None:
    result, out = small_run
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION and doc["run"]["incomplete"] is False
    impls = sorted((r["kernel"], r["impl"], r["dtype"]) for r in doc["records"])
    assert ("gemm", "llvm", "fp32") in impls and ("gemm", "numpy", "fp64") in impls
    assert ("attention", "llvm", "fp64") in impls
    # every case ran, but one whose optional module (torch, without the torch extra) is missing:
    # that one is skipped and says which module to install
    ran = [r for r in doc["records"] if not (r["status"] == "skipped" and "is not installed" in r["reason"])]
    assert ran and all(r["status"] == "ok" for r in ran), [r["reason"] for r in doc["records"]]
    assert all(r["impl"].startswith("torch") for r in doc["records"] if r not in ran)
    natives = {(r["kernel"], r["dtype"]) for r in ran if r["impl"] != "llvm"}
    portable = [r for r in doc["records"] if r["impl"] == "llvm"]
    overheads = [(r["metrics"]["porting_overhead"] is not None, (r["kernel"], r["dtype"]) in natives) for r in portable]
    assert all(has == native_ran for has, native_ran in overheads), overheads
    assert all(r["metrics"]["pct_peak"] is not None for r in ran)
    for r in ran:
        assert r["metrics"]["tflops_per_usd_hour"] == pytest.approx(r["metrics"]["tflops"] / 0.5)
    assert doc["run"]["price"]["source"] == "--price-per-hour"
    for header in ("kernel", "impl", "dtype", "shape", "status", "TFLOPS", "% peak", "vs native", "parity"):
        assert header in result.stdout
    assert "[1/" in result.stderr  # progress lines
    assert doc["software"]["numpy"] and doc["software"]["llvmlite"] and "OPENBLAS_CORETYPE" in doc["settings"]
    assert doc["run"]["hwbench"]["version"]


def test_show_and_validate_read_the_file(small_run) -> None:
    _, out = small_run
    shown = hwbench("show", str(out))
    assert shown.returncode == 0 and "gemm" in shown.stdout and "M=37,N=45,K=29" in shown.stdout
    valid = hwbench("validate", str(out))
    assert valid.returncode == 0 and "valid" in valid.stdout


def test_run_never_overwrites(small_run) -> None:
    _, out = small_run
    before = out.read_bytes()
    result = hwbench("run", "--backend", "cpu", "--kernel", "gemm", "--shape", "gemm:M=8,N=8,K=8", "--out", str(out))
    assert_one_line_error(result, "already exists", "--out")
    assert out.read_bytes() == before


def test_list_json_names_every_backend_with_a_reason() -> None:
    result = hwbench("list", "--json")
    assert result.returncode == 0
    data = json.loads(result.stdout)
    names = [b["name"] for b in data["backends"]]
    assert names[:4] == ["cpu", "opencl", "cuda", "rocm"]
    for backend in data["backends"]:
        assert backend["available"] or backend["reason"]
    cpu = data["backends"][0]
    assert cpu["available"] and cpu["devices"][0]["peak"]["tflops"]["fp32"] > 0
    assert {k["name"] for k in data["kernels"]} == {"gemm", "attention", "allreduce", "stream", "transfer"}


@pytest.mark.parametrize(
    "args,words",
    [
        (("run", "--backend", "tpu"), ("unknown backend 'tpu'", "cpu")),
        (("run", "--kernel", "conv"), ("unknown kernel 'conv'", "gemm")),
        (("run", "--dtype", "fp7"), ("unknown dtype 'fp7'", "fp32")),
        (("run", "--shape", "gemm:M=10,N=10"), ("needs K=",)),
        (("run", "--shape", "gemm M=10"), ("malformed --shape",)),
        (("run", "--shape", "gemm:M=ten,N=1,K=1"), ("not an integer",)),
        (("run", "--shape", "gemm:M=1,N=1,K=1,Q=3"), ("no dimension 'Q'",)),
        (("run", "--shape", "conv:M=1"), ("unknown kernel 'conv'",)),
        (("run", "--shape", "gemm:M=2000000,N=2000000,K=2000000"), ("GiB", "smaller shape")),
        (("run", "--timeout", "0"), ("--timeout",)),
        (("run", "--price-per-hour", "-1"), ("--price-per-hour",)),
        (("run", "--instance", "nosuch.large"), ("no price for instance",)),
        (("run", "--kernel", "gemm", "--shape", "attention:S=4"), ("--kernel does not select",)),
        (("run", "--device", "cpu"), ("BACKEND:INDEX",)),
        (("show", "/nonexistent/x.json"), ("no such file",)),
    ],
)
def test_bad_input_is_one_line(args: tuple[str, ...], words: tuple[str, ...]) -> None:
    assert_one_line_error(hwbench(*args, timeout=60), *words)


def test_bad_results_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert_one_line_error(hwbench("show", str(empty)), "empty")
    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"schema_version": 1, "records": [')
    assert_one_line_error(hwbench("show", str(truncated)), "truncated")
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"schema_version": 99}))
    assert_one_line_error(hwbench("show", str(newer)), "newer", "upgrade hwbench")
    invalid = tmp_path / "invalid.json"
    invalid.write_text(json.dumps({"schema_version": 1, "kind": "hwbench-results"}))
    result = hwbench("validate", str(invalid))
    assert result.returncode == 1 and "Traceback" not in result.stderr and "required" in result.stderr
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert_one_line_error(hwbench("show", str(binary)), "binary.json")


def test_a_device_that_does_not_exist_is_a_skipped_record(tmp_path: Path) -> None:
    out = tmp_path / "nodevice.json"
    result = hwbench(
        "run",
        "--backend",
        "cpu",
        "--kernel",
        "gemm",
        "--shape",
        "gemm:M=8,N=8,K=8",
        "--device",
        "cpu:7",
        "--budget",
        "0.01",
        "--out",
        str(out),
    )
    assert result.returncode == 1, result.stderr  # the named device ran nothing
    assert "no case ran: every case was skipped" in result.stderr
    doc = json.loads(out.read_text())
    assert [r["status"] for r in doc["records"]] == ["skipped"]
    assert "cpu has no device 7 (its devices: cpu:0)" in doc["records"][0]["reason"]
