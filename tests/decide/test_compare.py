"""hwbench compare: the U test on hand-computed samples, verdicts on frozen files, --fail-on, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import needs
import pytest
from synthetic_results import DATA, document, record, write

from hwbench.cli.main import main
from hwbench.core.kernel import get_kernel
from hwbench.decide.compare import compare, parse_fail_on
from hwbench.decide.mann_whitney import mann_whitney_u
from hwbench.results.checked import load_checked
from hwbench.results.files import validate
from hwbench.run.case import CaseRequest, base_record

BASE, SAME, REGRESSED = DATA / "cpu-base.json", DATA / "cpu-new-same.json", DATA / "cpu-new-regressed.json"
SHAPE = {"M": 8, "N": 8, "K": 8}


@pytest.mark.parametrize(
    "x,y,u,p,method",
    [
        ([1, 2, 3], [4, 5, 6], 0.0, 2 / 20, "exact"),  # 1 of C(6,3) = 20 orderings, both tails
        ([1, 2, 3, 4], [5, 6, 7, 8], 0.0, 2 / 70, "exact"),  # C(8,4) = 70
        ([1, 3, 5], [2, 4, 6], 3.0, 2 * 7 / 20, "exact"),  # P(U <= 3) = (1 + 1 + 2 + 3) / 20
        ([4, 5, 6], [1, 2, 3], 9.0, 2 / 20, "exact"),
    ],
)
def test_u_test_exact(x: list[float], y: list[float], u: float, p: float, method: str) -> None:
    test = mann_whitney_u(x, y)
    assert (test.u, test.method) == (u, method)
    assert test.p == pytest.approx(p)


def test_u_test_asymptotic_without_ties() -> None:
    test = mann_whitney_u(list(range(10)), list(range(10, 20)))
    # U = 0, mean 50, variance 10 * 10 * 21 / 12 = 175, z = (50 - 0.5) / sqrt(175)
    assert test.method == "asymptotic" and test.u == 0.0
    assert test.p == pytest.approx(math.erfc(49.5 / math.sqrt(175) / math.sqrt(2)))
    assert test.p == pytest.approx(1.8267e-4, rel=1e-3)


def test_u_test_with_ties() -> None:
    # ranks: 1 | 2,2,2 -> 3 | 3,3,3 -> 6 | 8; x ranks 1 + 3 + 3 + 6 = 13, U = 13 - 10 = 3
    # tie groups 3 and 3: sum(t^3 - t) = 48; variance = 16 / 12 * (9 - 48 / 56); z = (13 - 8 - 0.5) / sqrt(var)
    test = mann_whitney_u([1, 2, 2, 3], [2, 3, 3, 4])
    variance = 16 / 12 * (9 - 48 / 56)
    assert test.u == 3.0 and test.method == "asymptotic"
    assert test.p == pytest.approx(math.erfc(4.5 / math.sqrt(variance) / math.sqrt(2)))
    assert test.p == pytest.approx(0.1720, abs=1e-4)
    assert mann_whitney_u([2.0] * 5, [2.0] * 7).p == 1.0


def test_u_test_agrees_with_scipy_when_installed() -> None:
    stats = needs.module("scipy.stats", "a cross-check: the hand-computed cases above run without it")
    rng = [((i * 37) % 101) / 7 for i in range(40)]
    for x, y in ((rng[:5], rng[5:11]), (rng[:30], [v * 1.1 for v in rng[10:40]]), ([1, 2, 2, 3], [2, 3, 3, 4])):
        assert mann_whitney_u(x, y).p == pytest.approx(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)


def _case(doc: dict, kernel: str, impl: str, dtype: str, **shape: int) -> dict:
    hits = [
        c
        for c in doc["cases"]
        if (c["kernel"], c["impl"], c["dtype"]) == (kernel, impl, dtype)
        and all(c["shape"][k] == v for k, v in shape.items())
    ]
    assert len(hits) == 1
    return hits[0]


def test_frozen_regressed() -> None:
    doc = compare(load_checked(BASE), load_checked(REGRESSED), thresholds=[parse_fail_on("median:5%")])
    slower = _case(doc, "gemm", "llvm", "fp32", M=64)
    assert slower["verdict"] == "slower" and slower["regression"]
    assert slower["change"] == pytest.approx(0.5) and slower["p"] < 0.05
    faster = _case(doc, "gemm", "numpy", "fp32", M=96)
    assert faster["verdict"] == "faster" and not faster["regression"] and faster["change"] == pytest.approx(-0.3)
    broken = _case(doc, "attention", "llvm", "fp32")
    assert broken["verdict"] == "broken" and broken["regression"] and "SIGSEGV" in broken["reason"]
    same = _case(doc, "gemm", "llvm", "fp64", M=64)
    assert same["verdict"] == "same" and same["p"] == 1.0 and same["change"] == 0.0
    assert doc["summary"] == {"same": 8, "slower": 1, "faster": 1, "broken": 1}
    assert doc["regressions"] == 2
    assert [(k["impl"], k["dtype"], k["shape"]["M"]) for k in doc["only_base"]] == [("numpy", "fp64", 64)]
    assert [(k["impl"], k["dtype"], k["shape"]["M"]) for k in doc["only_new"]] == [("llvm", "fp32", 128)]
    assert doc["warnings"] == [
        "hosts differ: hostname vm -> ci-runner-b",
        f"software stacks differ: numpy {json.loads(BASE.read_text())['software']['numpy']} -> 9.9.9",
    ]


def test_frozen_cli_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(BASE), str(REGRESSED), "--fail-on", "median:5%"]) == 1
    captured = capsys.readouterr()
    assert "slower REGRESSION" in captured.out and "only in base: cpu gemm numpy fp64 M=64,N=64,K=64" in captured.out
    assert "warning: hosts differ" in captured.out and "2 case(s) regressed" in captured.err
    assert main(["compare", str(BASE), str(REGRESSED)]) == 0  # reports, fails only when asked
    assert main(["compare", str(BASE), str(REGRESSED), "--fail-on", "median:60%"]) == 1  # the crash still counts
    assert main(["compare", str(BASE), str(SAME), "--fail-on", "median:5%"]) == 0
    capsys.readouterr()
    assert main(["compare", str(BASE), str(SAME), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {c["verdict"] for c in doc["cases"]} == {"same"} and doc["warnings"] == []
    assert all(c["change"] == pytest.approx(0.005) for c in doc["cases"])


def _pair(tmp_path: Path, base: list[float], new: list[float], **extra: object) -> tuple[Path, Path]:
    a = write(
        tmp_path / "a.json",
        document([record("gemm", "llvm", "fp32", SHAPE, sorted(base)[len(base) // 2], samples=base, **extra)]),
    )
    b = write(
        tmp_path / "b.json",
        document([record("gemm", "llvm", "fp32", SHAPE, sorted(new)[len(new) // 2], samples=new, **extra)]),
    )
    return a, b


def test_a_big_change_without_significance_is_same(tmp_path: Path) -> None:
    a, b = _pair(tmp_path, [1e-3, 2e-3, 3e-3], [4e-3, 5e-3, 6e-3])
    case = compare(load_checked(a), load_checked(b), thresholds=[parse_fail_on("median:5%")])["cases"][0]
    assert case["p"] == pytest.approx(0.1) and case["verdict"] == "same" and not case["regression"]
    a, b = _pair(tmp_path, [1e-3, 2e-3, 3e-3, 4e-3], [5e-3, 6e-3, 7e-3, 8e-3])
    case = compare(load_checked(a), load_checked(b), thresholds=[parse_fail_on("median:5%")])["cases"][0]
    assert case["p"] == pytest.approx(2 / 70) and case["verdict"] == "slower" and case["regression"]


def test_threshold_and_noise(tmp_path: Path) -> None:
    base = [1e-3 * (1 + i / 1000) for i in range(20)]
    a, b = _pair(tmp_path, base, [t * 1.03 for t in base])
    files = load_checked(a), load_checked(b)
    case = compare(*files, thresholds=[parse_fail_on("median:5%")])["cases"][0]
    assert case["verdict"] == "slower" and not case["regression"] and case["change"] == pytest.approx(0.03)
    assert compare(*files, thresholds=[parse_fail_on("median:2%")])["cases"][0]["regression"]
    assert compare(*files, thresholds=[parse_fail_on("min:2.5%")])["cases"][0]["regression"]
    assert compare(*files, noise=0.05)["cases"][0]["verdict"] == "same"


def test_records_without_samples_compare_medians(tmp_path: Path) -> None:
    a = write(
        tmp_path / "a.json",
        document(
            [
                record(
                    "storage",
                    "fio_randread",
                    None,
                    {"block_bytes": 4096},
                    4e-4,
                    backend="fio",
                    device="nfs",
                    samples=[],
                    iops=1000.0,
                )
            ]
        ),
    )
    b = write(
        tmp_path / "b.json",
        document(
            [
                record(
                    "storage",
                    "fio_randread",
                    None,
                    {"block_bytes": 4096},
                    5e-4,
                    backend="fio",
                    device="nfs",
                    samples=[],
                    iops=800.0,
                )
            ]
        ),
    )
    case = compare(load_checked(a), load_checked(b), thresholds=[parse_fail_on("median:10%")])["cases"][0]
    assert case["verdict"] == "slower" and case["regression"] and case["p"] is None and "medians only" in case["test"]


def test_duplicate_case_warns(tmp_path: Path) -> None:
    rec = record("gemm", "llvm", "fp32", SHAPE, 1e-3)
    a = write(tmp_path / "a.json", document([rec, rec]))
    doc = compare(load_checked(a), load_checked(a))
    assert len(doc["cases"]) == 1 and "appears twice" in doc["warnings"][0]


@pytest.mark.parametrize(
    "value,expected",
    [
        ("median:5", "as a percentage"),
        ("p90:5%", "STAT one of median, mean, min"),
        ("median:abc%", "not a percentage"),
        ("median", "STAT:N%"),
    ],
)
def test_bad_fail_on(value: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(BASE), str(SAME), "--fail-on", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_bad_alpha(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(BASE), str(SAME), "--alpha", "2"]) == 2
    assert "--alpha must lie in (0, 1)" in capsys.readouterr().err


def test_records_carry_their_kernels_inputs_version_and_the_schema_takes_it() -> None:
    attention = base_record(CaseRequest("attention", "llvm", "cpu", 0, "fp32", {"seq_q": 4}), None, None)
    gemm = base_record(CaseRequest("gemm", "numpy", "cpu", 0, "fp32", SHAPE), None, None)
    assert attention["inputs_version"] == get_kernel("attention").inputs_version == 2
    assert gemm["inputs_version"] == get_kernel("gemm").inputs_version == 1
    assert "inputs_version" not in base_record(CaseRequest("nosuch", "x", "cpu", 0, "fp32", {}), None, None)
    doc = document([{**record("gemm", "llvm", "fp32", SHAPE), "inputs_version": 2}])
    assert validate(doc) == []
    doc["records"][0]["inputs_version"] = 0
    assert validate(doc) and "inputs_version" in validate(doc)[0]


def _versioned(tmp_path: Path, name: str, versions: dict[str, int | None]) -> Path:
    records = []
    for kernel, version in versions.items():
        shape = SHAPE if kernel == "gemm" else {"seq_q": 8}
        rec = record(kernel, "llvm", "fp32", shape, 1e-3, samples=[1e-3, 1.001e-3, 0.999e-3])
        if version is not None:
            rec["inputs_version"] = version
        records.append(rec)
    return write(tmp_path / name, document(records))


def test_compare_notes_a_kernel_whose_inputs_version_differs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _versioned(tmp_path, "old.json", {"gemm": None, "attention": None})  # an older file: version 1
    new = _versioned(tmp_path, "new.json", {"gemm": 1, "attention": 2})
    doc = compare(load_checked(old), load_checked(new))
    assert [(n["kernel"], n["base"], n["new"]) for n in doc["inputs_versions"]] == [("attention", [1], [2])]
    assert "inputs version 1 in base, 2 in new" in doc["inputs_versions"][0]["note"]
    assert compare(load_checked(new), load_checked(new))["inputs_versions"] == []
    assert main(["compare", str(old), str(new)]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("hwbench: note: attention: inputs version 1 in base, 2 in new") == 1
    assert "inputs version" not in captured.out  # the table stays on stdout, the note on stderr
    assert main(["compare", str(old), str(new), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["inputs_versions"][0]["kernel"] == "attention"
    assert "hwbench: note: attention" in captured.err
    assert main(["compare", str(new), str(new)]) == 0 and "note" not in capsys.readouterr().err


def test_cases_flushed_differently_get_a_warning(tmp_path: Path) -> None:
    old = record("gemm", "llvm", "fp32", SHAPE, 1e-3)  # no timing.flush: a whole-cache write
    lines = json.loads(json.dumps(old))
    lines["timing"]["flush"] = "clflushopt on every line of the case's inputs and output (3 regions, 0.1 MiB)"
    a, b = write(tmp_path / "a.json", document([old])), write(tmp_path / "b.json", document([lines]))
    doc = compare(load_checked(a), load_checked(b))
    assert any("cache flushes differ in 1 matched cases (whole cache -> lines)" in w for w in doc["warnings"])
    assert not any("flushes differ" in w for w in compare(load_checked(b), load_checked(b))["warnings"])
