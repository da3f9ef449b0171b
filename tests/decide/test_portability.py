"""Performance portability: hand-computed efficiencies, PP, cascade data and the p3 CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from synthetic_results import DATA, device, document, record, write

from hwbench.cli.main import main
from hwbench.decide.portability import cascade, p3_csv, portability
from hwbench.results.checked import load_checked
from hwbench.results.metrics import performance_portability

SHAPE = {"M": 256, "N": 256, "K": 256}
ON_GPU = {"backend": "cuda", "device": "GPU X"}


@pytest.fixture
def files(tmp_path: Path) -> list:
    cpu = [
        record("gemm", "numpy", "fp32", SHAPE, 1.0, impl_kind="native", pct_peak=80.0),
        record("gemm", "llvm", "fp32", SHAPE, 2.0, pct_peak=40.0),  # app 1.0 / 2.0 = 0.5
        record("gemm", "opencl", "fp32", SHAPE, 4.0, pct_peak=20.0, backend="opencl"),
        record("gemm", "fast", "fp32", SHAPE, 0.8, pct_peak=100.0),  # faster than the native: 1.25
    ]
    gpu = [
        record("gemm", "cublas", "fp32", SHAPE, 0.8, impl_kind="native", pct_peak=75.0, **ON_GPU),
        record("gemm", "llvm", "fp32", SHAPE, 1.0, pct_peak=60.0, **ON_GPU),  # app 0.8
        record("gemm", "opencl", "fp32", SHAPE, None, status="runtime_error", **{**ON_GPU, "backend": "opencl"}),
        record("gemm", "fast", "fp32", SHAPE, 0.8, pct_peak=75.0, **ON_GPU),  # app 1.0
    ]
    a = write(
        tmp_path / "cpu.json", document(cpu, [device("cpu", "Test CPU", "cpu"), device("opencl", "Test CPU", "cpu")])
    )
    b = write(tmp_path / "gpu.json", document(gpu, [device("cuda", "GPU X", "gpu"), device("opencl", "GPU X", "gpu")]))
    return [load_checked(a), load_checked(b)]


def _app(doc: dict, name: str) -> dict:
    (problem,) = doc["problems"]
    return next(a for a in problem["applications"] if a["application"] == name)


def test_pp_hand_computed(files: list) -> None:
    doc = portability(files)
    (problem,) = doc["problems"]
    assert problem["problem"] == "gemm fp32 M=256,N=256,K=256" and problem["platforms"] == ["Test CPU", "GPU X"]
    llvm = _app(doc, "llvm")
    assert llvm["app_efficiency"] == {"Test CPU": 0.5, "GPU X": 0.8}
    assert llvm["pp_app"] == pytest.approx(2 / (1 / 0.5 + 1 / 0.8))  # 0.6154
    assert llvm["arch_efficiency"] == {"Test CPU": pytest.approx(0.4), "GPU X": pytest.approx(0.6)}
    assert llvm["pp_arch"] == pytest.approx(2 / (1 / 0.4 + 1 / 0.6))  # 0.48
    assert llvm["cascade_app"] == [
        {"platform": "GPU X", "efficiency": 0.8, "pp": pytest.approx(0.8)},
        {"platform": "Test CPU", "efficiency": 0.5, "pp": pytest.approx(0.6153846)},
    ]


def test_pp_is_zero_when_missing_or_failing(files: list) -> None:
    doc = portability(files)
    for name, why in (("numpy", "missing"), ("cublas", "missing"), ("opencl", "runtime_error")):
        app = _app(doc, name)
        assert app["pp_app"] == 0.0 and app["pp_arch"] == 0.0, name
        assert why in app["status"].values()
    opencl = _app(doc, "opencl")
    assert opencl["missing_or_failing"] == ["GPU X"]
    assert opencl["cascade_app"][-1] == {"platform": "GPU X", "efficiency": 0.0, "pp": 0.0}


def test_faster_than_native_counts_as_one(files: list) -> None:
    fast = _app(portability(files), "fast")
    assert fast["app_efficiency"]["Test CPU"] == pytest.approx(1.25)  # shown as measured
    assert fast["pp_app"] == pytest.approx(1.0)  # best known in PP


def test_unknown_baseline_or_peak(tmp_path: Path) -> None:
    path = write(tmp_path / "x.json", document([record("gemm", "llvm", "fp32", SHAPE, 1.0)]))
    app = _app(portability([load_checked(path)]), "llvm")
    assert app["pp_app"] is None and "no ok native record on Test CPU" == app["pp_app_unknown"]
    assert app["pp_arch"] is None and app["pp_arch_unknown"] == "no peak on Test CPU"
    assert app["cascade_app"] == [{"platform": "Test CPU", "efficiency": None, "pp": None}]


def test_cascade_and_pennycook() -> None:
    assert performance_portability([0.5, 0.25]) == pytest.approx(1 / 3)
    assert performance_portability([0.5, None]) == 0.0
    steps = cascade({"a": 0.5, "b": 1.0, "c": 0.0})
    assert [s["platform"] for s in steps] == ["b", "a", "c"]
    assert [s["pp"] for s in steps] == [1.0, pytest.approx(2 / 3), 0.0]


def test_p3_csv(files: list) -> None:
    exported = p3_csv(files)
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert list(rows[0]) == ["problem", "platform", "application", "fom", "status", "native eff", "native speedup"]
    assert len(rows) == 8 and exported.duplicates == []  # every case tried, the failing one included
    problem = "gemm fp32 M=256,N=256,K=256"
    row = {"problem": problem, "platform": "GPU X", "application": "llvm", "fom": "1.0", "status": "ok"}
    assert {**row, "native eff": "0.8", "native speedup": "0.8"} in rows
    failed = {"problem": problem, "platform": "GPU X", "application": "opencl", "fom": "", "status": "runtime_error"}
    assert {**failed, "native eff": "0.0", "native speedup": ""} in rows  # p3 turns the empty fom into 0
    fast = {"problem": problem, "platform": "Test CPU", "application": "fast", "fom": "0.8", "status": "ok"}
    assert {**fast, "native eff": "1.0", "native speedup": "1.25"} in rows  # capped, the raw ratio beside it


def test_cli_on_frozen_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p3.csv"
    assert main(["pp", str(DATA / "cpu-base.json"), "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "gemm fp32 M=64,N=64,K=64" in text and "PP app" in text
    base = json.loads((DATA / "cpu-base.json").read_text())
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == sum(r["impl"] != "*" and bool(r["device"]) for r in base["records"])
    assert main(["pp", str(DATA / "cpu-base.json"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    llvm = next(
        a
        for p in doc["problems"]
        if p["problem"] == "gemm fp32 M=64,N=64,K=64"
        for a in p["applications"]
        if a["application"] == "llvm"
    )
    twin = [r for r in base["records"] if r["kernel"] == "gemm" and r["dtype"] == "fp32" and r["shape"]["M"] == 64]
    native, portable = (next(r for r in twin if r["impl"] == name) for name in ("numpy", "llvm"))
    assert llvm["app_efficiency"]["AMD EPYC (2 cores)"] == pytest.approx(
        native["timing"]["median_s"] / portable["timing"]["median_s"]
    )
    assert llvm["app_efficiency"]["AMD EPYC (2 cores)"] == pytest.approx(1 - portable["metrics"]["porting_overhead"])


def test_csv_never_overwrites(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "r.json"
    results.write_text((DATA / "cpu-base.json").read_text())
    before = results.read_text()

    def must_not_load(path: object) -> None:
        raise AssertionError("loaded the files although the CSV could not be written")

    with monkeypatch.context() as patch:
        patch.setattr("hwbench.cli.pp.load_checked", must_not_load)
        assert main(["pp", str(results), "--csv", str(results)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "r.json already exists" in err and "--csv" in err, err
    assert results.read_text() == before
    out = tmp_path / "p3.csv"

    def csv_while_another_writes(files: list) -> str:
        out.write_text("someone else's")
        return p3_csv(files)

    monkeypatch.setattr("hwbench.cli.pp.p3_csv", csv_while_another_writes)
    assert main(["pp", str(results), "--csv", str(out)]) == 2
    assert "p3.csv already exists" in capsys.readouterr().err
    assert out.read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p3.csv", "r.json"]
