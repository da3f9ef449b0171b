"""hwbench score's time to first step and recovery from training records: hwbench train's
submit-to-first-step over the GEMM startup probe, hwbench drill's time to resume beside the
platform file's MTTR, which one counts (the weights' ``counts``), the fallbacks and bad options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_results import current_document, device, drill_record, record, train_record, write

from hwbench.cli.main import main
from hwbench.decide.catalog import Catalog
from hwbench.decide.platform import parse_platform
from hwbench.decide.score import score_platforms
from hwbench.decide.weights import load_weights

GPU = device("cuda", "Test GPU", "gpu")
CPU = device("cpu", "Test CPU", "cpu")
ON_GPU = {"backend": "cuda", "device": "Test GPU"}
STARTUP = {"M": 1024, "N": 1024, "K": 1024}
MTTR = 'mttr_minutes = 60\nmttr_source = "SLA 4.2"\n'


def _startup(median: float, warm: int = 0, **where: str) -> dict:
    return record("startup", "llvm", "fp32", {**STARTUP, "warm_cache": warm}, median, **where)


def _platform(tmp_path: Path, records: list[dict], toml: str = "", devices: list[dict] | None = None) -> str:
    """A platform of one results file (valid at the current schema) and, with ``toml``, a platform file."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    results = write(tmp_path / "r.json", current_document(records, devices or [CPU]))
    if not toml:
        return f"P={results}"
    (tmp_path / "p.toml").write_text(f'name = "P"\n{toml}results = ["r.json"]\n')
    return str(tmp_path / "p.toml")


def _dimension(platform: str, name: str, weights: str | None = None, tmp_path: Path | None = None) -> dict:
    path = None
    if weights is not None:
        assert tmp_path is not None
        path = tmp_path / "w.toml"
        path.write_text(weights)
    dims, origin = load_weights(path)
    doc = score_platforms([parse_platform(platform)], dims, Catalog.load(), origin)
    return doc["platforms"][0]["dimensions"][name]


def test_training_submit_to_first_step_counts_over_the_gemm_probe(tmp_path: Path) -> None:
    platform = _platform(tmp_path, [_startup(45.0), train_record(12.0, submit_source="slurm submit time")])
    entry = _dimension(platform, "time_to_first_step")
    assert entry["raw"] == 12.0 and entry["score"] == 100.0
    source = entry["source"]
    assert source["source"] == "training submit-to-first-step" and source["submit_source"] == "slurm submit time"
    assert source["kernel"] == "train" and source["impl"] == "eager" and source["record"].endswith("#records[1]")
    assert source["cache"] == "cold" and source["preset"] == "tiny"
    assert "slurm submit time" in entry["note"]


def test_the_gemm_probe_counts_where_no_training_record_fits(tmp_path: Path) -> None:
    """A warm training run, a failed cold one and an ok cold one without the figure leave the
    cold-cache figure to the probe, labelled as such."""
    records = [
        train_record(5.0, warm_cache=1),
        train_record(6.0, status="runtime_error"),
        train_record(None),
        _startup(225.0),
    ]
    entry = _dimension(_platform(tmp_path, records), "time_to_first_step")
    assert entry["raw"] == 225.0 and entry["score"] == pytest.approx(50.0)
    assert entry["source"]["source"] == "GEMM startup probe" and entry["source"]["kernel"] == "startup"
    assert entry["source"]["samples"] == 1 and "note" not in entry


def test_warm_cache_takes_the_warm_training_run(tmp_path: Path) -> None:
    platform = _platform(tmp_path, [train_record(30.0), train_record(8.0, warm_cache=1), _startup(4.0, warm=1)])
    entry = _dimension(
        platform, "time_to_first_step", '[dimensions.time_to_first_step]\nweight = 100\ncache = "warm"\n', tmp_path
    )
    assert entry["raw"] == 8.0 and entry["source"]["cache"] == "warm"
    assert entry["source"]["source"] == "training submit-to-first-step"


def test_accelerators_first_then_the_eager_run_then_the_lowest(tmp_path: Path) -> None:
    records = [
        train_record(3.0),  # the CPU's: fastest, but the platform has an accelerator
        train_record(20.0, impl="compiled", **ON_GPU),  # faster than the eager runs, but compiled
        train_record(40.0, **ON_GPU),
        train_record(35.0, **ON_GPU),
    ]
    entry = _dimension(_platform(tmp_path, records, devices=[CPU, GPU]), "time_to_first_step")
    assert (entry["raw"], entry["source"]["backend"], entry["source"]["impl"]) == (35.0, "cuda", "eager")
    compiled_only = [train_record(3.0), train_record(20.0, impl="compiled", **ON_GPU)]
    entry = _dimension(_platform(tmp_path / "c", compiled_only, devices=[CPU, GPU]), "time_to_first_step")
    assert (entry["raw"], entry["source"]["impl"]) == (20.0, "compiled")


def test_time_to_first_step_missing_names_both_commands(tmp_path: Path) -> None:
    entry = _dimension(
        _platform(tmp_path, [record("gemm", "numpy", "fp32", STARTUP, tflops=1.0)]), "time_to_first_step"
    )
    assert entry["missing"] and "hwbench train" in entry["reason"] and "hwbench probe startup" in entry["reason"]


def test_the_drill_counts_by_default_with_the_mttr_beside_it(tmp_path: Path) -> None:
    """2700 s to resume is 45 min: the dimension's unit, scored on its points (30 -> 100, 120 -> 0)."""
    platform = _platform(tmp_path, [drill_record(2700.0), drill_record(9000.0, launcher="slurm")], MTTR)
    entry = _dimension(platform, "recovery")
    assert entry["raw"] == pytest.approx(45.0) and entry["unit"] == "min"
    assert entry["score"] == pytest.approx(100 * 75 / 90)
    source = entry["source"]
    assert source["source"] == "drill time to resume" and source["counts"] == "drill"
    assert source["time_to_resume_s"] == 2700.0 and source["launcher"] == "torchrun" and source["kernel"] == "drill"
    assert source["mttr"] == {
        "source": "platform file MTTR",
        "minutes": 60.0,
        "platform_file": str(tmp_path / "p.toml"),
        "mttr_source": "SLA 4.2",
    }
    assert entry["note"].startswith("drill time to resume counts") and "60 min (SLA 4.2)" in entry["note"]


def test_the_drill_without_a_platform_file_still_scores(tmp_path: Path) -> None:
    entry = _dimension(_platform(tmp_path, [drill_record(90.0)]), "recovery")
    assert entry["raw"] == pytest.approx(1.5) and entry["score"] == 100.0
    assert entry["source"]["mttr"] is None and "no hardware MTTR" in entry["note"]


def test_only_an_mttr_falls_back_to_it_and_says_so(tmp_path: Path) -> None:
    """The default counts the drill; a platform that measured none scores its MTTR as before,
    and the note says the figure is the MTTR. A drill that never resumed is not a figure."""
    records = [_startup(45.0), drill_record(None, status="runtime_error")]
    entry = _dimension(_platform(tmp_path, records, MTTR), "recovery")
    assert entry["raw"] == 60.0 and entry["score"] == pytest.approx(100 * 60 / 90)
    source = entry["source"]
    assert source["source"] == "platform file MTTR" and source["counts"] == "drill" and source["drill"] is None
    assert source["mttr_source"] == "SLA 4.2" and source["platform_file"] == str(tmp_path / "p.toml")
    assert 'counts = "drill" falls back' in entry["note"]


def test_counts_mttr_takes_the_mttr_with_the_drill_beside_it(tmp_path: Path) -> None:
    weights = '[dimensions.recovery]\nweight = 100\ncounts = "mttr"\n'
    platform = _platform(tmp_path, [drill_record(120.0)], MTTR)
    entry = _dimension(platform, "recovery", weights, tmp_path)
    assert entry["raw"] == 60.0 and entry["source"]["source"] == "platform file MTTR"
    assert entry["source"]["counts"] == "mttr" and entry["source"]["drill"]["minutes"] == pytest.approx(2.0)
    assert "the drill resumed in 2 min" in entry["note"] and "falls back" not in entry["note"]
    alone = _dimension(_platform(tmp_path / "m", [_startup(45.0)], MTTR), "recovery", weights, tmp_path)
    assert alone["raw"] == 60.0 and "note" not in alone  # as before the drill existed


def test_counts_mttr_without_one_is_missing_even_with_a_drill(tmp_path: Path) -> None:
    weights = '[dimensions.recovery]\nweight = 100\ncounts = "mttr"\n'
    entry = _dimension(_platform(tmp_path, [drill_record(120.0)]), "recovery", weights, tmp_path)
    assert entry["missing"] and entry["raw"] is None
    assert "no mttr_minutes" in entry["reason"] and 'counts = "mttr"' in entry["reason"]
    assert "the drill resumed in 2 min" in entry["reason"] and entry["source"]["drill"]["time_to_resume_s"] == 120.0


def test_recovery_missing_without_either(tmp_path: Path) -> None:
    entry = _dimension(_platform(tmp_path, [_startup(45.0)]), "recovery")
    assert entry["missing"] and "no ok drill record" in entry["reason"] and "no mttr_minutes" in entry["reason"]


def test_the_default_matrix_says_what_recovery_counts() -> None:
    dims, _ = load_weights()
    assert dims["recovery"].options == {"counts": "drill"} and dims["recovery"].as_json()["counts"] == "drill"


@pytest.mark.parametrize(
    "text,expected",
    [
        ('[dimensions.recovery]\nweight = 100\ncounts = "sla"\n', 'counts must be "drill" or "mttr", got \'sla\''),
        ("[dimensions.recovery]\nweight = 100\ncounts = 1\n", "counts must be a str"),
        ('[dimensions.network]\nweight = 100\ncounts = "drill"\n', "unknown key 'counts'"),
    ],
)
def test_bad_counts_is_one_line(text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    platform = _platform(tmp_path, [drill_record(120.0)], MTTR)
    (tmp_path / "w.toml").write_text(text)
    assert main(["score", platform, "--weights", str(tmp_path / "w.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hwbench: error: ") and expected in err, err


def test_cli_shows_both_dimensions_measured_with_their_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    platform = _platform(tmp_path, [_startup(45.0), train_record(12.0), drill_record(90.0)], MTTR)
    out = tmp_path / "score.json"
    assert main(["score", platform, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "100 (12 s)" in text and "100 (1.5 min)" in text
    assert "note: P time to first step: training submit-to-first-step of hwbench train" in text
    assert f"note: P recovery: drill time to resume counts (torchrun, {tmp_path / 'r.json'}#records[2]); " in text
    assert "the hardware MTTR is 60 min (SLA 4.2)" in text
    dims = json.loads(out.read_text())["platforms"][0]["dimensions"]
    assert dims["time_to_first_step"]["source"]["source"] == "training submit-to-first-step"
    assert dims["recovery"]["source"]["source"] == "drill time to resume"
