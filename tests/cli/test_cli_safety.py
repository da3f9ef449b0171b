"""What every command shares: names from drivers and files printed escaped, numbers and files
checked before work, the same writer for every output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.decide.weights import load_weights

TESTS = Path(__file__).resolve().parents[1]


def test_list_prints_a_hostile_device_name_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hwbench.core.registry import get_backend

    monkeypatch.setenv("HWBENCH_BACKENDS", "cheat=fakes.backend:cheat")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HWBENCH_CHEAT_DEVICE", "GPU\x1b[2J\x1b[31mred\rover")
    get_backend.cache_clear()
    try:
        assert main(["list", "--backend", "cheat"]) == 0
    finally:
        get_backend.cache_clear()
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out
    assert "GPU\\x1b[2J\\x1b[31mred\\rover" in out


def test_an_error_line_prints_control_characters_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(tmp_path / "a\x1b]0;title\x07b.json")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;title\\x07b.json" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["-1", "0", "inf", "nan"])
def test_the_startup_probe_refuses_a_timeout_that_is_no_time(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    assert main(["probe", "startup", "--timeout", value, "--out", str(out)]) == 2
    assert "--timeout must be a positive" in capsys.readouterr().err and not out.exists()


def test_a_weights_file_that_is_a_fifo_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "weights.toml"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="weights file"):
        load_weights(fifo)


def test_compile_refuses_an_unwritable_out_before_compiling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = main(["compile", "--target", "sm_90", "--kernel", "gemm", "--out", str(blocker / "c.json")])
    assert code == 2
    err = capsys.readouterr().err
    assert "is a file, not a folder" in err and len(err.strip().splitlines()) == 1


def test_run_help_reads_in_sections(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    positions = [text.index(f"\n{title}:\n") for title in ("what to run", "how to measure", "cost", "output")]
    assert positions == sorted(positions)
    assert "-o OUT, --out OUT" in text and "-q, --quiet" in text and "--json" in text


def _cpu_run(*args: str) -> list[str]:
    return [
        "run",
        "--backend",
        "cpu",
        "--impl",
        "numpy",
        "--dtype",
        "fp32",
        "--shape",
        "gemm:M=8,N=8,K=8",
        "--budget",
        "0.01",
        *args,
    ]


def test_run_json_prints_the_document_on_stdout_and_the_table_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    assert main(_cpu_run("--json", "-q", "-o", str(out))) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == json.loads(out.read_text())
    assert "M=8,N=8,K=8" in captured.err and f"results: {out}" in captured.err


def test_out_dash_writes_the_document_to_stdout_and_no_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(_cpu_run("-o", "-", "--quiet")) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["records"][0]["status"] == "ok"
    assert "M=8,N=8,K=8" in captured.err and "results:" not in captured.err
    assert list(tmp_path.iterdir()) == []


def test_run_warnings_go_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hwbench.core.registry import get_backend

    monkeypatch.setenv("HWBENCH_BACKENDS", "cheat=fakes.backend:cheat")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("HWBENCH_CHEAT_PEAK", "nan")  # the derived metrics warn that the peak was dropped
    get_backend.cache_clear()
    try:
        main(
            [
                "run",
                "--backend",
                "cheat",
                "--impl",
                "honest",
                "--shape",
                "gemm:M=8,N=8,K=8",
                "--budget",
                "0.01",
                "-q",
                "-o",
                str(tmp_path / "r.json"),
            ]
        )
    finally:
        get_backend.cache_clear()
    captured = capsys.readouterr()
    assert "hwbench: warning: cheat:0 reported a fp32 peak that is not a number" in captured.err
    assert "warning:" not in captured.out


def test_probe_and_compile_take_out_dash_for_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["probe", "storage", "--dir", str(tmp_path), "--size", "1MiB", "--runtime", "1", "-o", "-"])
    captured = capsys.readouterr()
    assert code in (0, 1) and json.loads(captured.out)["records"][0]["kernel"] == "storage"
    assert "results:" not in captured.err
    code = main(["compile", "--target", "sm_90", "--kernel", "gemm", "--impl", "llvm", "-q", "-o", "-"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["compile"]
    assert "wrote the document to stdout" in captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_validate_json_says_per_file_whether_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from synthetic_results import document, record, write

    good = write(tmp_path / "good.json", document([record("gemm", "numpy", "fp32", {"M": 1, "N": 1, "K": 1})]))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["validate", "--json", str(good), str(bad)]) == 1
    verdicts = {Path(v["path"]).name: v for v in json.loads(capsys.readouterr().out)["files"]}
    assert verdicts["good.json"]["valid"] is True and verdicts["good.json"]["records"] == 1
    assert verdicts["bad.json"]["valid"] is False and "not valid JSON" in verdicts["bad.json"]["problems"][0]


def test_score_and_report_take_out_dash_for_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from synthetic_results import document, record, write

    doc = document([record("gemm", "numpy", "fp32", {"M": 64, "N": 64, "K": 64}, impl_kind="native", tflops=0.1)])
    path = write(tmp_path / "r.json", doc)
    assert main(["report", str(path), "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("<!DOCTYPE html>") and "report: stdout" in captured.err
    assert main(["score", str(path), "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["platforms"] and captured.err.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
