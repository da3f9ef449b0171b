"""Probes that feed hwbench score: fio storage (real, absent, failing) and time to first step."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from conftest import hwbench_cmd

from hwbench.cli.main import main
from hwbench.probes.storage import fio_command, parse_size
from hwbench.results.files import load

needs_fio = pytest.mark.skipif(
    shutil.which("fio") is None, reason="fio is not installed (ci/apt-packages.txt installs it in CI)"
)


@needs_fio
def test_storage_with_fio(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    out = tmp_path / "storage.json"
    assert main(["probe", "storage", "--dir", str(folder), "--size", "4MiB", "--runtime", "2", "--out", str(out)]) == 0
    assert "IOPS (4 KiB random read, queue depth 32)" in capsys.readouterr().out
    (rec,) = load(out)["records"]
    assert (rec["kernel"], rec["impl"], rec["backend"], rec["status"]) == ("storage", "fio_randread", "fio", "ok")
    assert rec["metrics"]["iops"] > 0 and rec["timing"]["median_s"] > 0 and rec["timing"]["n"] > 0
    assert rec["shape"] == {"block_bytes": 4096, "iodepth": 32, "size_bytes": 4 << 20, "runtime_s": 2}
    assert 1500 <= rec["config"]["runtime_ms"] <= 4000
    assert rec["metrics"]["gbps"] == pytest.approx(rec["metrics"]["iops"] * 4096 / 1e9, rel=0.05)
    assert list(folder.iterdir()) == []  # the test file is removed


def test_fio_command_is_the_matrix_job() -> None:
    command = fio_command(Path("/d/f"), 1 << 20, 2)
    for option in (
        "--rw=randread",
        "--bs=4096",
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=32",
        "--size=1048576",
        "--runtime=2",
        "--time_based",
        "--output-format=json",
    ):
        assert option in command


def _no_fio_path(tmp_path: Path) -> str:
    empty = tmp_path / "bin"
    empty.mkdir()
    return str(empty)


def test_storage_without_fio_is_skipped(tmp_path: Path) -> None:
    out = tmp_path / "storage.json"
    env = dict(os.environ, PATH=_no_fio_path(tmp_path))
    done = subprocess.run(
        hwbench_cmd("probe", "storage", "--dir", str(tmp_path), "--size", "1MiB", "--runtime", "1", "--out", str(out)),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    doc = load(out)
    (rec,) = doc["records"]
    assert rec["status"] == "skipped" and "fio is not installed" in rec["reason"]
    assert doc["backends"][0] == {"name": "fio", "available": False, "reason": rec["reason"], "devices": []}


def test_storage_fio_failure_is_a_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "bin" / "fio"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\necho 'fio: pid=1, err=22/file:filesetup.c:805, func=open, error=Invalid argument' >&2\nexit 1\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    out = tmp_path / "storage.json"
    assert (
        main(["probe", "storage", "--dir", str(tmp_path), "--size", "1MiB", "--runtime", "1", "--out", str(out)]) == 1
    )
    (rec,) = load(out)["records"]
    assert rec["status"] == "runtime_error" and "error=Invalid argument" in rec["reason"]
    assert "probe failed" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--dir", "/no/such/folder"], "is not a directory"),
        (["--size", "lots"], "is not a size"),
        (["--size", "4k"], "at least 1MiB"),
        (["--size", "100000GiB"], "more than half"),
        (["--runtime", "0"], "between 1 and 600"),
    ],
)
def test_storage_bad_arguments(
    args: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["probe", "storage", "--dir", str(tmp_path), "--out", str(tmp_path / "x.json")]
    assert main(argv + args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err
    assert not (tmp_path / "x.json").exists()


def test_parse_size() -> None:
    assert [parse_size(t) for t in ("256MiB", "1GiB", "64m", "4096", "2k")] == [
        256 << 20,
        1 << 30,
        64 << 20,
        4096,
        2048,
    ]


def test_startup_on_the_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "startup.json"
    assert (
        main(["probe", "startup", "--backend", "cpu", "--shape", "M=64,N=48,K=40", "--repeat", "2", "--out", str(out)])
        == 0
    )
    assert "to the first step" in capsys.readouterr().out
    doc = load(out)
    cold, warm = doc["records"]
    assert (cold["shape"]["warm_cache"], warm["shape"]["warm_cache"]) == (0, 1)
    for rec in (cold, warm):
        assert (rec["kernel"], rec["impl"], rec["backend"], rec["dtype"], rec["status"]) == (
            "startup",
            "llvm",
            "cpu",
            "fp32",
            "ok",
        )
        assert rec["shape"] == {"M": 64, "N": 48, "K": 40, "warm_cache": rec["shape"]["warm_cache"]}
        assert rec["timing"]["n"] == 2 and len(rec["timing"]["samples_s"]) == 2
        assert rec["parity"]["passed"] is True
        phases = rec["config"]["phases_s"]
        assert list(phases) == ["launch", "import", "init", "inputs", "compile", "first_step"]
        assert all(v >= 0 for v in phases.values()) and phases["compile"] > 0
        # the phases of the median sample add up to that sample (two samples: the median lies between them)
        assert min(rec["timing"]["samples_s"]) - 1e-6 <= sum(phases.values()) <= max(rec["timing"]["samples_s"]) + 1e-6
        assert all(p >= s for p, s in zip(rec["config"]["process_s"], rec["timing"]["samples_s"], strict=False))
    assert warm["config"]["priming_run_s"] > 0 and cold["config"]["priming_run_s"] is None
    assert doc["backends"][0]["name"] == "cpu" and doc["backends"][0]["available"]


@pytest.mark.parametrize(
    "impl,status,reason",
    [
        ("segfault", "crashed", "killed by signal 11"),
        ("compile_error", "compile_error", "expected ';'"),
        ("wrong", "parity_failed", "outside tolerance"),
        ("raise", "runtime_error", "device lost"),
    ],
)
def test_startup_failures_are_records(
    impl: str, status: str, reason: str, faulty_env: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "startup.json"
    assert (
        main(
            [
                "probe",
                "startup",
                "--backend",
                "faulty",
                "--impl",
                impl,
                "--shape",
                "M=8,N=8,K=8",
                "--repeat",
                "1",
                "--out",
                str(out),
            ]
        )
        == 1
    )
    records = load(out)["records"]
    assert [r["status"] for r in records] == [status, status]
    assert all(reason in r["reason"] for r in records), records[0]["reason"]
    assert records[0]["device"] == "Faulty Device" and records[0]["dtype"] == "fp32"


def test_startup_hang_is_a_timeout(faulty_env: dict, tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    assert (
        main(
            [
                "probe",
                "startup",
                "--backend",
                "faulty",
                "--impl",
                "hang",
                "--shape",
                "M=8,N=8,K=8",
                "--repeat",
                "1",
                "--timeout",
                "2",
                "--out",
                str(out),
            ]
        )
        == 1
    )
    records = load(out)["records"]
    assert [r["status"] for r in records] == ["timeout", "timeout"]
    assert "no first step within the 2 s timeout" in records[0]["reason"]


def test_startup_unknown_impl(faulty_env: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "startup", "--backend", "faulty", "--impl", "nope", "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no GEMM implementation 'nope'" in err


def test_probe_files_validate_and_feed_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(__file__).resolve().parents[1] / "data"
    files = [data / "probe-storage.json", data / "probe-startup.json"]
    assert main(["validate", *map(str, files)]) == 0
    capsys.readouterr()
    assert main(["score", ",".join(map(str, files)), "--json"]) == 0
    dims = json.loads(capsys.readouterr().out)["platforms"][0]["dimensions"]
    assert not dims["storage"]["missing"] and not dims["time_to_first_step"]["missing"]
    assert dims["compute_density"]["missing"] and dims["recovery"]["missing"]
