"""``hwbench pp --csv`` against the p3-analysis-library's input contract.

p3 (https://github.com/intel/p3-analysis-library) needs Python >= 3.12 and pandas, so it is
not installed here; ``p3_application_efficiency`` and ``p3_pp`` below redo what its
``p3analysis.metrics.application_efficiency(df, foms="lower")`` and ``p3analysis.metrics.pp``
do with a DataFrame read from the CSV by ``pandas.read_csv``:

- an empty field is NaN; a NaN fom has application efficiency 0, any other fom the best
  (lowest) fom of any application on its (problem, platform) divided by its own;
- ``pp`` keeps only efficiencies in [0, 1] (NaN read as 0), refuses a (platform,
  application) pair with other than one distinct efficiency (across problems too, so it
  takes one problem at a time), adds every (problem, platform, application) combination
  missing from the frame with efficiency 0, and takes the harmonic mean per (problem,
  application).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable
from itertools import product
from pathlib import Path
from statistics import harmonic_mean
from typing import Any

import pytest
from synthetic_results import device, document, record, write

from hwbench.cli.main import main
from hwbench.decide.portability import p3_csv, portability, problem_name
from hwbench.results.checked import load_checked

KEY = ("problem", "platform", "application")
SMALL, LARGE = {"M": 256, "N": 256, "K": 256}, {"M": 512, "N": 512, "K": 512}
P_SMALL, P_LARGE = "gemm fp32 M=256,N=256,K=256", "gemm fp32 M=512,N=512,K=512"
GPU_X = {"backend": "cuda", "device": "GPU X"}
GPU_Y = {"backend": "rocm", "device": "GPU Y"}


def _number(value: Any) -> float:
    """A value as pandas holds it after ``read_csv`` and ``to_numeric``: an empty field is NaN."""
    return math.nan if value is None or value == "" else float(value)


def p3_application_efficiency(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``application_efficiency(df, foms="lower")``: the key and fom columns plus ``app eff``."""
    best: dict[tuple[str, str], float] = {}
    for row in rows:
        fom = _number(row["fom"])
        where = (row["problem"], row["platform"])
        if not math.isnan(fom):
            best[where] = min(best.get(where, fom), fom)
    return [
        {
            **{k: row[k] for k in (*KEY, "fom")},
            "app eff": 0.0
            if math.isnan(_number(row["fom"]))
            else best[row["problem"], row["platform"]] / float(row["fom"]),
        }
        for row in rows
    ]


def p3_pp(rows: list[dict[str, Any]], column: str = "app eff") -> dict[tuple[str, str], float]:
    """``pp(df)`` on ``column``: (problem, application) -> PP; ValueError where p3 raises one."""
    values = [_number(row[column]) for row in rows]
    if not all(0.0 <= (0.0 if math.isnan(v) else v) <= 1.0 for v in values):
        raise ValueError(f"{column} must in range [0, 1]")
    distinct: dict[tuple[str, str], set[float]] = {}
    for row, value in zip(rows, values, strict=True):
        distinct.setdefault((row["platform"], row["application"]), set())
        if not math.isnan(value):
            distinct[row["platform"], row["application"]].add(value)
    if any(len(v) != 1 for v in distinct.values()):
        raise ValueError("Each (application, platform) pair must be associated with exactly one efficiency value.")
    cells = {tuple(row[k] for k in KEY): (0.0 if math.isnan(v) else v) for row, v in zip(rows, values, strict=True)}
    axes = [list(dict.fromkeys(row[k] for row in rows)) for k in KEY]
    per_app: dict[tuple[str, str], list[float]] = {}
    for row in rows:
        per_app.setdefault((row["problem"], row["application"]), [])
    for problem, platform, application in product(*axes):
        per_app.setdefault((problem, application), []).append(cells.get((problem, platform, application), 0.0))
    return {key: harmonic_mean(effs) for key, effs in per_app.items()}


def _one_problem(rows: Iterable[dict[str, Any]], problem: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["problem"] == problem]


@pytest.fixture
def paths(tmp_path: Path) -> list[Path]:
    """Three devices in three files and a fourth file rerunning two cases (one faster, one slower)."""
    cpu = [
        record("gemm", "numpy", "fp32", SMALL, 1.0, impl_kind="native"),
        record("gemm", "llvm", "fp32", SMALL, 2.0),
        record("gemm", "opencl", "fp32", SMALL, None, status="skipped", backend="opencl"),
        record("gemm", "numpy", "fp32", LARGE, 4.0, impl_kind="native"),
        record("gemm", "llvm", "fp32", LARGE, 5.0),
        record("gemm", "fast", "fp32", LARGE, 3.0),  # faster than the native
    ]
    gpu_x = [
        record("gemm", "cublas", "fp32", SMALL, 0.5, impl_kind="native", **GPU_X),
        record("gemm", "llvm", "fp32", SMALL, 1.0, **GPU_X),
        record("gemm", "opencl", "fp32", SMALL, None, status="runtime_error", **{**GPU_X, "backend": "opencl"}),
        record("gemm", "cublas", "fp32", LARGE, 2.0, impl_kind="native", **GPU_X),
        record("gemm", "llvm", "fp32", LARGE, 2.5, **GPU_X),
        record("gemm", "fast", "fp32", LARGE, 1.5, **GPU_X),
    ]
    gpu_y = [
        record("gemm", "rocblas", "fp32", SMALL, 0.4, impl_kind="native", **GPU_Y),
        record("gemm", "llvm", "fp32", SMALL, 0.5, **GPU_Y),
        record("gemm", "opencl", "fp32", SMALL, 0.8, **{**GPU_Y, "backend": "opencl"}),
    ]
    rerun = [
        record("gemm", "llvm", "fp32", SMALL, 0.9, **GPU_X),  # faster: kept
        record("gemm", "numpy", "fp32", SMALL, 1.2, impl_kind="native"),  # slower: dropped
    ]
    cpus = [device("cpu", "Test CPU", "cpu"), device("opencl", "Test CPU", "cpu")]
    return [
        write(tmp_path / "cpu.json", document(cpu, cpus)),
        write(
            tmp_path / "gpu-x.json", document(gpu_x, [device("cuda", "GPU X", "gpu"), device("opencl", "GPU X", "gpu")])
        ),
        write(
            tmp_path / "gpu-y.json", document(gpu_y, [device("rocm", "GPU Y", "gpu"), device("opencl", "GPU Y", "gpu")])
        ),
        write(
            tmp_path / "rerun.json", document(rerun, [device("cpu", "Test CPU", "cpu"), device("cuda", "GPU X", "gpu")])
        ),
    ]


def _rows(paths: list[Path]) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(p3_csv([load_checked(p) for p in paths]).text)))


def test_a_row_per_key_tried_failed_and_skipped_with_empty_fom(paths: list[Path]) -> None:
    rows = _rows(paths)
    keys = [tuple(row[k] for k in KEY) for row in rows]
    assert len(keys) == len(set(keys))  # one row per (problem, platform, application)
    tried = {(problem_name(r), r["device"], r["impl"]) for p in paths for _, r in load_checked(p).records()}
    assert set(keys) == tried  # every platform each case was tried on, no other
    by_key = dict(zip(keys, rows, strict=True))
    skipped, failed = by_key[P_SMALL, "Test CPU", "opencl"], by_key[P_SMALL, "GPU X", "opencl"]
    assert (skipped["fom"], skipped["status"], skipped["native eff"]) == ("", "skipped", "0.0")
    assert (failed["fom"], failed["status"], failed["native eff"]) == ("", "runtime_error", "0.0")
    effs = {tuple(r[k] for k in KEY): r["app eff"] for r in p3_application_efficiency(rows)}
    assert effs[P_SMALL, "Test CPU", "opencl"] == effs[P_SMALL, "GPU X", "opencl"] == 0.0
    assert by_key[P_SMALL, "GPU X", "llvm"]["fom"] == "0.9"  # the faster rerun
    assert by_key[P_SMALL, "Test CPU", "numpy"]["fom"] == "1.0"  # not the slower one
    fast = by_key[P_LARGE, "GPU X", "fast"]
    assert (fast["native eff"], float(fast["native speedup"])) == ("1.0", pytest.approx(2.0 / 1.5))


def test_native_eff_fed_to_p3_pp_is_hwbench_pp(paths: list[Path]) -> None:
    rows = _rows(paths)
    doc = portability([load_checked(p) for p in paths])
    for problem in doc["problems"]:
        ours = {a["application"]: a["pp_app"] for a in problem["applications"]}
        assert None not in ours.values()
        theirs = p3_pp(_one_problem(rows, problem["problem"]), "native eff")
        assert theirs == {(problem["problem"], app): pytest.approx(value) for app, value in ours.items()}
    llvm_small = next(a for a in doc["problems"][0]["applications"] if a["application"] == "llvm")
    assert llvm_small["pp_app"] == pytest.approx(harmonic_mean([0.5, 0.5 / 0.9, 0.8]))
    with pytest.raises(ValueError, match="exactly one efficiency"):
        p3_pp(rows, "native eff")  # p3's pp takes one problem at a time


def test_p3_baseline_is_the_fastest_application(paths: list[Path]) -> None:
    """Where the native is the fastest application everywhere, p3's own efficiencies give hwbench's PP."""
    rows = _rows(paths)
    doc = {p["problem"]: p for p in portability([load_checked(p) for p in paths])["problems"]}
    small = p3_pp(p3_application_efficiency(_one_problem(rows, P_SMALL)))
    assert small == {(P_SMALL, a["application"]): pytest.approx(a["pp_app"]) for a in doc[P_SMALL]["applications"]}
    large = p3_pp(p3_application_efficiency(_one_problem(rows, P_LARGE)))
    llvm = next(a for a in doc[P_LARGE]["applications"] if a["application"] == "llvm")
    assert llvm["pp_app"] == pytest.approx(0.8)  # against numpy and cublas
    assert large[P_LARGE, "llvm"] == pytest.approx(0.6)  # against "fast", faster than both natives


def test_cli_csv_file_and_stdout_say_the_duplicates(
    paths: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = p3_csv([load_checked(p) for p in paths]).text
    assert main(["pp", *map(str, paths), "--csv", "-"]) == 0
    out, err = capsys.readouterr()
    assert out == expected
    assert err.count("\n") == 1 and err.startswith("hwbench: note: 2 (problem, platform, application)"), err
    assert f"numpy on Test CPU for {P_SMALL}: {paths[0]}, {paths[3]}; and 1 more)" in err
    assert "keeps the fastest ok record of each" in err
    target = tmp_path / "p3.csv"
    assert main(["pp", *map(str, paths), "--csv", str(target)]) == 0
    out, err = capsys.readouterr()
    assert target.read_text() == expected and "PP app" in out and "note: 2 " in err
    assert main(["pp", *map(str, paths[:3]), "--csv", "-"]) == 0
    assert capsys.readouterr().err == ""  # no duplicates, no note
