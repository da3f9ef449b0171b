"""``hwbench check`` on frozen node files (pass, fail, missing), floors files and bad input.

The inputs in tests/data/acceptance/ come from tests/data/acceptance/make_acceptance.py.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from synthetic_results import device, document, record, write

from hwbench.cli.main import main
from hwbench.core.loading import tomllib
from hwbench.decide.acceptance import judge
from hwbench.decide.catalog import Catalog
from hwbench.decide.floors import CHECKS, Floors
from hwbench.results.checked import load_checked

DATA = Path(__file__).resolve().parents[1] / "data" / "acceptance"
PASS, PASS_BURN, FAIL, MISSING = (DATA / n for n in ("pass.json", "pass-burn.json", "fail.json", "missing.json"))


def _doc(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, dict[str, Any]]:
    status = main(["check", *map(str, args), "--json"])
    return status, json.loads(capsys.readouterr().out)


def _verdicts(doc: dict[str, Any]) -> dict[tuple[Any, ...], str]:
    return {(r["device_index"], r["check"], r["dtype"]): r["verdict"] for r in doc["checks"]}


def test_a_passing_node_passes_on_its_run_and_burn_files(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = _doc(capsys, PASS, PASS_BURN)
    assert status == 0 and doc["passed"]
    assert doc["summary"] == {"PASS": 13, "FAIL": 0, "MISSING": 0}
    rows = {(r["device_index"], r["check"], r["dtype"]): r for r in doc["checks"]}
    assert rows[(0, "gemm_pct_peak", "bf16")]["figure"] == pytest.approx(70.0)
    assert rows[(0, "gemm_pct_peak", "bf16")]["floor"] == 60.0  # the H100's own floor, not the [gpu] one
    assert rows[(0, "gemm_pct_peak", "bf16")]["floor_origin"].endswith("[devices.nvidia-h100-sxm]")
    assert rows[(1, "stream_gbps", None)]["figure"] == pytest.approx(2900.0)
    assert rows[(0, "burn_decay_pct", None)]["figure"] == 2.0 and rows[(0, "burn_decay_pct", None)]["floor"] == 5.0
    busbw = rows[(None, "allreduce_busbw_gbps", None)]
    assert busbw["figure"] == pytest.approx(4 * 2**26 / (15e-6 + 4 * 2**26 / 360e9) / 1e9)
    assert [r["check"] for r in doc["not_judged"]] == ["allreduce_latency_us"]  # no datasheet gives a latency
    assert doc["not_judged"][0]["figure"] == pytest.approx(15e-6 * 1e6 + 4 * 256 / 360e9 * 1e6)
    assert all(r["floor_reason"] for r in doc["checks"])  # every shipped floor says why


def test_each_failing_check_fails_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = _doc(capsys, FAIL)
    assert status == 1 and not doc["passed"]
    assert _verdicts(doc) == {
        (0, "gemm_pct_peak", "bf16"): "FAIL",  # 45 % < 60 %
        (0, "stream_gbps", None): "FAIL",  # 2300 < 2500 GB/s
        (0, "burn_decay_pct", None): "PASS",
        (0, "mismatches", None): "FAIL",  # one check of the burn found wrong values
        (0, "health_clean", None): "PASS",
        (1, "gemm_pct_peak", "bf16"): "PASS",
        (1, "stream_gbps", None): "FAIL",
        (1, "burn_decay_pct", None): "FAIL",  # 9 % > 5 %
        (1, "mismatches", None): "PASS",
        (1, "health_clean", None): "FAIL",  # uncorrectable ECC errors
        (None, "allreduce_busbw_gbps", None): "FAIL",  # under 200 GB/s < 315
    }
    health = next(r for r in doc["checks"] if r["check"] == "health_clean" and r["device_index"] == 1)
    assert health["detail"] == "2 uncorrectable ECC errors since boot"
    assert health["source"] == f"{FAIL}#health[1]"
    assert main(["check", str(FAIL)]) == 1
    text = capsys.readouterr().out
    assert "FAIL: h100-node NVIDIA H100 80GB HBM3 (cuda:0) wrong results: 1 in 1 burn(s); 0 of 2 records" in text
    assert "check: 4 PASS, 7 FAIL, 0 MISSING: FAIL" in text


def test_missing_measurements_fail_unless_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = _doc(capsys, MISSING)
    assert status == 1
    verdicts = _verdicts(doc)
    assert verdicts[(0, "gemm_pct_peak", "bf16")] == "PASS"
    missing = sorted({check for (_, check, _), v in verdicts.items() if v == "MISSING"})
    assert missing == ["allreduce_busbw_gbps", "burn_decay_pct", "health_clean", "stream_gbps"]
    assert verdicts[(0, "mismatches", None)] == "PASS"  # no burn, but the run's records were checked
    assert doc["summary"] == {"PASS": 4, "FAIL": 0, "MISSING": 7}
    stream = next(r for r in doc["checks"] if r["check"] == "stream_gbps")
    assert "hwbench run --kernel stream" in stream["detail"]
    status, doc = _doc(capsys, MISSING, "--allow-missing")
    assert status == 0 and doc["passed"] and doc["summary"]["MISSING"] == 7
    assert main(["check", str(FAIL), "--allow-missing"]) == 1  # a FAIL still fails
    capsys.readouterr()


def test_a_users_floors_override_the_shipped_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    floors = tmp_path / "floors.toml"
    floors.write_text(
        "[gpu]\ngemm_pct_peak = 40\nreasons.gemm_pct_peak = 'our contract says 40 %'\n"
        "[devices.nvidia-h100-sxm]\nstream_gbps = false\nallreduce_busbw_gbps = 150\nallreduce_latency_us = 10\n"
        "[default]\nburn_decay_pct = 10\n"
    )
    status, doc = _doc(capsys, FAIL, "--floors", floors)
    rows = {(r["device_index"], r["check"], r["dtype"]): r for r in doc["checks"]}
    gemm = rows[(0, "gemm_pct_peak", "bf16")]
    # The user's [gpu] wins over the shipped model section: every floor a user sets wins.
    assert (gemm["verdict"], gemm["floor"], gemm["floor_reason"]) == ("PASS", 40.0, "our contract says 40 %")
    assert gemm["floor_origin"] == f"{floors} [gpu]"
    assert (0, "stream_gbps", None) not in rows  # turned off: listed as not judged
    assert any(r["check"] == "stream_gbps" for r in doc["not_judged"])
    assert rows[(None, "allreduce_busbw_gbps", None)]["verdict"] == "PASS"
    latency = rows[(None, "allreduce_latency_us", None)]
    assert (latency["verdict"], latency["floor_reason"], latency["floor_origin"]) == (
        "FAIL",
        "",
        f"{floors} [devices.nvidia-h100-sxm]",
    )
    assert rows[(1, "burn_decay_pct", None)]["verdict"] == "PASS"  # 9 % <= the user's 10 %
    assert status == 1  # the mismatch and the ECC errors still fail


def test_a_section_for_a_model_the_catalog_lacks_matches_by_name(tmp_path: Path) -> None:
    floors = tmp_path / "floors.toml"
    floors.write_text('[devices.epyc-9654]\nmatch = ["EPYC 9654"]\ngemm_pct_peak = 70\n')
    loaded = Floors.load(floors)
    assert loaded.model("AMD EPYC 9654 96-Core Processor (96 cores)") == "epyc-9654"
    assert loaded.model("AMD EPYC 96540") is None  # whole words, as the catalog matches
    assert loaded.for_device("AMD EPYC 9654 (96 cores)", "cpu")["gemm_pct_peak"].value == 70.0
    assert loaded.for_device("Intel Xeon", "cpu")["gemm_pct_peak"].value == 50.0  # the shipped [cpu]


def test_per_dtype_gemm_floors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    floors = tmp_path / "floors.toml"
    floors.write_text("[gpu]\ngemm_pct_peak = { bf16 = 72, tf32 = 50 }\n")
    status, doc = _doc(capsys, PASS, PASS_BURN, "--floors", floors)
    verdicts = _verdicts(doc)
    assert verdicts[(0, "gemm_pct_peak", "bf16")] == "FAIL"  # 70 % < 72 %
    assert verdicts[(0, "gemm_pct_peak", "tf32")] == "MISSING"  # named, never measured
    assert (0, "gemm_pct_peak", "fp32") not in verdicts  # no floor for fp32 (no default in the table)
    assert status == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[gpu]\ngemm_pct_peek = 50\n", "unknown key 'gemm_pct_peek'"),
        ("[gpu]\nstream_gbps = -1\n", "stream_gbps must not be negative"),
        ("[gpu]\ngemm_pct_peak = 150\n", "gemm_pct_peak is a percentage: at most 100"),
        ("[gpu]\nmismatches = 0.5\n", "mismatches must be a whole number"),
        ("[gpu]\nhealth_clean = 1\n", "health_clean must be true or false"),
        ("[gpu]\nstream_gbps = 'fast'\n", "stream_gbps must be a number"),
        ("[gpu]\ngemm_pct_peak = { bf61 = 50 }\n", "gemm_pct_peak.bf61 is not a dtype"),
        ("[gpus]\nstream_gbps = 1\n", "unknown table [gpus]"),
        ("[devices.my-gpu]\nstream_gbps = 1\n", "is not a catalog device and gives no match"),
        ("[gpu]\nreasons.stream = 'x'\n", "reasons.stream names no floor"),
        ("[gpu\n", "not valid TOML"),
    ],
)
def test_bad_floors_are_one_line_and_exit_2(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    floors = tmp_path / "floors.toml"
    floors.write_text(text)
    assert main(["check", str(PASS), "--floors", str(floors)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"floors file {floors}" in err and expected in err, err


def test_unreadable_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 2, "kind": "hwbench-results"')
    assert main(["check", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "absent.json")]) == 2
    assert main(["check", str(PASS), "--floors", str(tmp_path / "absent.toml")]) == 2
    capsys.readouterr()


def test_out_writes_the_document_and_never_overwrites(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "verdict.json"
    assert main(["check", str(PASS), str(PASS_BURN), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["passed"] is True
    assert "check: 13 PASS, 0 FAIL, 0 MISSING: PASS" in capsys.readouterr().out
    before = out.read_bytes()
    assert main(["check", str(FAIL), "-o", str(out)]) == 2
    assert out.read_bytes() == before and "already exists" in capsys.readouterr().err


def test_share_of_peak_unknown_and_health_unreadable_are_missing(tmp_path: Path) -> None:
    gpu = "Mystery GPU 9000"
    r = record("gemm", "cublas", "bf16", {"M": 64, "N": 64, "K": 64}, 1e-5, backend="cuda", device=gpu, tflops=0.05)
    r["metrics"]["peak_check"] = "not checked: no bf16 peak known for this device"
    doc = document([r], [device("cuda", gpu, "gpu")])
    doc["health"] = [
        {"backend": "cuda", "device_index": 0, "device": gpu, "sources": [], "readings": {}, "problems": [],
         "skipped": {"nvml": "libnvidia-ml.so.1 not found"}, "clean": None}
    ]  # fmt: skip
    verdict = judge([load_checked(write(tmp_path / "mystery.json", doc))], Floors.load())
    rows = {r["check"]: r for r in verdict["checks"]}
    assert rows["gemm_pct_peak"]["verdict"] == "MISSING" and "no bf16 peak known" in rows["gemm_pct_peak"]["detail"]
    assert rows["health_clean"]["verdict"] == "MISSING"
    assert rows["health_clean"]["detail"] == "nothing readable (nvml: libnvidia-ml.so.1 not found)"


def test_parity_failures_count_as_wrong_results(tmp_path: Path) -> None:
    good = record("gemm", "numpy", "fp32", {"M": 64, "N": 64, "K": 64}, 1e-5, device="Test CPU", tflops=0.05)
    bad = copy.deepcopy(good) | {"impl": "llvm", "status": "parity_failed", "reason": "max abs err 1 > atol"}
    for r in (good, bad):
        r["parity"]["passed"] = r["status"] == "ok"
    doc = document([good, bad])
    rows = {r["check"]: r for r in judge([load_checked(write(tmp_path / "cpu.json", doc))], Floors.load())["checks"]}
    assert (rows["mismatches"]["figure"], rows["mismatches"]["verdict"]) == (1, "FAIL")
    assert rows["mismatches"]["detail"] == "no burn; 1 of 2 records failed parity"


def test_nothing_to_judge_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path / "empty.json", document([]))
    assert main(["check", str(path), "--allow-missing"]) == 1
    assert "nothing to judge" in capsys.readouterr().out


def test_the_shipped_floors_give_a_reason_each_and_name_catalog_devices() -> None:
    data = tomllib.loads((Path(__file__).resolve().parents[2] / "hwbench/decide/data/floors.toml").read_text())
    catalog = Catalog.load()
    assert set(data["devices"]) <= set(catalog.devices)
    for section in [data["default"], data["cpu"], data["gpu"], *data["devices"].values()]:
        floors = set(section) - {"reasons", "match"}
        assert floors <= set(CHECKS) and floors == set(section["reasons"]), section
        assert all(len(reason) > 40 for reason in section["reasons"].values())
    Floors.load()  # and it loads


def test_wrong_results_count_every_mismatched_check_not_only_those_listed(tmp_path: Path) -> None:
    doc = json.loads(FAIL.read_text())
    doc["burn"][0]["mismatched_checks"] = 1500  # the list keeps the first ones only
    rows = judge([load_checked(write(tmp_path / "many.json", doc))], Floors.load())["checks"]
    wrong = next(r for r in rows if r["check"] == "mismatches" and r["device_index"] == 0)
    assert (wrong["figure"], wrong["verdict"], wrong["source"]) == (1500, "FAIL", f"{tmp_path / 'many.json'}#burn[0]")


def test_a_figure_whose_timed_calls_were_not_verified_passes_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = json.loads(PASS.read_text())
    gemms = [r for r in doc["records"] if r["kernel"] == "gemm" and r["status"] == "ok" and r["dtype"] == "bf16"]
    best = max(gemms, key=lambda r: r["metrics"].get("tflops") or 0.0)
    best["parity"]["after_timing"] = (
        "not verified: result() handed back a new array each time; the output checked after the timed calls may "
        "be the first call's"
    )
    path = write(tmp_path / "unverified.json", doc)
    assert main(["check", str(path), str(PASS_BURN)]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert any("gemm" in n.lower() and "timed calls not verified: result() handed back" in n for n in notes), out
