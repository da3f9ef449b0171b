"""``hwbench fleet``: the outlier rule on synthetic fleets, stragglers, software stacks, exit codes, the report."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from benchmarks.bench_fleet import Faults, node_document
from synthetic_results import record, write

from hwbench.cli.main import main
from hwbench.collective.sweep import to_record
from hwbench.decide.fleet import MIN_SPREAD_PCT, Rule, analyze, spread
from hwbench.report import build
from hwbench.results import files as results


def _fleet(
    nodes: int, faults: dict[int, Faults] | None = None, *, noise: float = 0.02, gpus: int = 1, allreduce: bool = False
) -> list[tuple[Path, dict[str, Any]]]:
    faults = faults or {}
    return [
        (
            Path(f"node{i:02d}.json"),
            node_document(f"node{i:02d}", i, faults.get(i), gpus=gpus, noise=noise, sizes=(2048,), allreduce=allreduce),
        )
        for i in range(nodes)
    ]


def _flagged(doc: dict[str, Any]) -> set[tuple[str, str, str, str | None, int]]:
    return {
        (o["node"], c["kernel"], c["impl"], c["dtype"], o["device_index"]) for c in doc["cases"] for o in c["outliers"]
    }


def test_the_rule_needs_both_the_robust_deviations_and_the_percentage() -> None:
    rule = Rule()  # 3.5 robust standard deviations and 5 %
    assert rule.margin(100.0, 0.0) == pytest.approx(5.0)  # MAD 0: the percentage (3.5 x 0.5 % floor is less)
    assert rule.margin(100.0, 2.0) == pytest.approx(3.5 * 1.4826 * 2.0)  # a noisy case: the deviations
    assert Rule(mad_k=3.5, below_pct=0).margin(100.0, 0.0) == pytest.approx(3.5 * MIN_SPREAD_PCT)  # the floor
    assert spread([1.0, 2.0, 3.0, 4.0, 100.0]) == (3.0, 1.0)


def test_one_slow_node_in_64_is_found() -> None:
    doc = analyze(_fleet(64, {17: Faults(slow={("gemm", 0): 0.85})}))
    # Every GEMM case of its one GPU, and nothing else.
    assert _flagged(doc) == {
        ("node17", "gemm", impl, dtype, 0) for impl in ("cublas", "triton") for dtype in ("bf16", "fp16", "fp32")
    }
    case = next(c for c in doc["cases"] if c["outliers"])
    (outlier,) = case["outliers"]
    assert outlier["below_pct"] == pytest.approx(100 * (1 - outlier["value"] / case["median"]))
    assert 12 < outlier["below_pct"] < 18 and outlier["robust_z"] > 5
    assert case["n"] == 64 and case["min"] == outlier["value"] and case["threshold"] > outlier["value"]
    assert doc["summary"]["outlier_nodes"] == ["node17"] and doc["summary"]["found"]


def test_a_healthy_fleet_has_no_outlier() -> None:
    doc = analyze(_fleet(64, {5: Faults(slow={("gemm", 0): 0.97})}))  # 3 % slow: within what a node varies
    assert _flagged(doc) == set() and not doc["summary"]["found"] and doc["software"] == []
    assert all(c["mad"] > 0 for c in doc["cases"])


def test_a_perfectly_uniform_fleet_has_no_outlier_and_mad_0_is_no_trap() -> None:
    runs = _fleet(16, noise=0.0)
    doc = analyze(runs)
    assert _flagged(doc) == set() and all(c["mad"] == 0 for c in doc["cases"])
    # MAD = 0: a node 0.2 % below (a rounding's worth) is no outlier, even on the MAD rule alone ...
    nudged = _fleet(16, {3: Faults(slow={("gemm", 0): 0.998})}, noise=0.0)
    assert _flagged(analyze(nudged)) == set() and _flagged(analyze(nudged, Rule(below_pct=0))) == set()
    # ... and one 10 % below is.
    slow = analyze(_fleet(16, {3: Faults(slow={("gemm", 0): 0.90})}, noise=0.0))
    assert {f[0] for f in _flagged(slow)} == {"node03"} and len(_flagged(slow)) == 6


def test_a_failed_case_is_flagged_and_the_outlier_needs_three_members() -> None:
    doc = analyze(_fleet(8, {2: Faults(failed={(0, "fp16", 2048)})}))
    (case,) = [c for c in doc["cases"] if c["failed"]]
    assert (case["dtype"], case["impl"], case["n"]) == ("fp16", "cublas", 7)
    assert case["failed"] == [
        {"node": "node02", "device_index": 0, "status": "runtime_error", "reason": "runtime_error on purpose"}
    ]
    assert doc["summary"]["outlier_nodes"] == ["node02"]
    two = analyze(_fleet(2, {1: Faults(slow={("gemm", 0): 0.5})}))
    assert _flagged(two) == set() and all(c["n"] == 2 for c in two["cases"])


def test_a_straggler_rank_is_found_with_its_host() -> None:
    runs = _fleet(4, {1: Faults(straggler=(2, 1.5))}, gpus=4, allreduce=True)
    doc = analyze(runs)
    (straggler,) = doc["stragglers"]
    assert (straggler["node"], straggler["rank"], straggler["rank_host"], straggler["rank_device"]) == (
        "node01",
        2,
        "node01",
        "cuda:2",
    )
    assert straggler["slow_records"] == straggler["records"] == 16
    assert 45 < straggler["worst_above_pct"] < 55
    assert "node01" in doc["summary"]["outlier_nodes"]
    assert analyze(_fleet(4, gpus=4, allreduce=True))["stragglers"] == []


def test_a_node_on_another_software_stack_is_found() -> None:
    doc = analyze(_fleet(5, {3: Faults(torch="2.12.0+cu130")}))
    assert doc["software"] == [
        {
            "field": "software.torch",
            "majority": "2.13.0+cu130",
            "split": False,
            "values": {"2.13.0+cu130": 4, "2.12.0+cu130": 1},
            "outliers": [{"node": "node03", "value": "2.12.0+cu130"}],
        }
    ]
    assert doc["summary"]["outlier_nodes"] == ["node03"]
    split = analyze(_fleet(4, {0: Faults(torch="2.12"), 1: Faults(torch="2.12")}))
    assert [(f["field"], f["split"], f["outliers"]) for f in split["software"]] == [("software.torch", True, [])]
    assert split["summary"]["found"] and split["summary"]["outlier_nodes"] == []


def _write_fleet(folder: Path, faults: dict[int, Faults] | None = None) -> Path:
    folder.mkdir()
    for path, doc in _fleet(8, faults):
        write(folder / path.name, doc)
    return folder


def test_fail_on_outlier_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slow = _write_fleet(tmp_path / "slow", {6: Faults(slow={("stream", 0): 0.8})})
    healthy = _write_fleet(tmp_path / "healthy")
    assert main(["fleet", str(slow)]) == 0
    out = capsys.readouterr().out
    assert "outlier: node06 cuda:0 cuda NVIDIA H100 80GB HBM3 stream native fp32" in out
    assert "1 node(s) flagged: node06" in out
    assert main(["fleet", str(slow), "--fail-on-outlier"]) == 1
    assert "1 node(s) flagged" in capsys.readouterr().err
    assert main(["fleet", str(healthy), "--fail-on-outlier"]) == 0
    capsys.readouterr()
    # A looser rule lets the 20 % slow node pass.
    assert main(["fleet", str(slow), "--fail-on-outlier", "--below-pct", "25"]) == 0
    capsys.readouterr()


def test_json_out_files_and_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write_fleet(tmp_path / "fleet", {6: Faults(slow={("stream", 0): 0.8})})
    out = folder / "fleet.json"
    assert main(["fleet", str(folder), "-o", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["kind"] == "hwbench-fleet" and written["summary"]["nodes"] == 8
    capsys.readouterr()
    # The document written into the folder is passed over the next time, with a note.
    files = sorted(str(p) for p in folder.glob("node0[0-3].json"))
    assert main(["fleet", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["summary"]["files"] == 8 and "fleet.json is not a results file" in captured.err
    assert main(["fleet", *files, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == ["node00", "node01", "node02", "node03"]
    assert main(["fleet", str(folder), "-o", str(out)]) == 2  # never overwritten
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--mad-k", "-1"], "--mad-k must be a finite number of at least 0"),
        (["--below-pct", "100"], "--below-pct must be a percentage"),
        (["--mad-k", "0", "--below-pct", "0"], "cannot both be 0"),
        (["--mad-k", "nan"], "--mad-k must be a finite number"),
    ],
)
def test_bad_options_exit_2(args: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _write_fleet(tmp_path / "fleet")
    assert main(["fleet", str(folder), *args]) == 2
    assert expected in capsys.readouterr().err


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["fleet", str(empty)]) == 2
    assert "holds no *.json results file" in capsys.readouterr().err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "node.json").write_text('{"schema_version": 2')
    assert main(["fleet", str(broken)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


class _Sections(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self.sections.append(str(dict(attrs)["id"]))
        if tag not in ("meta", "br", "img", "input", "link", "hr", "col"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack.pop() == tag


def test_the_report_shows_the_fleet_with_its_outliers_marked() -> None:
    runs = _fleet(8, {4: Faults(slow={("gemm", 0): 0.8}), 5: Faults(torch="2.12.0+cu130")})
    page = build(runs)
    parsed = _Sections()
    parsed.feed(page)
    assert parsed.stack == [] and "fleet" in parsed.sections
    fleet = page[page.index('<section id="fleet">') :]
    assert fleet.count('<svg id="fleet-') == 12  # the cases with outliers first, at most 12 drawn
    assert "node04 cuda:0: " in fleet and "OUTLIER" in fleet and "<polygon" in fleet  # the outlier's marker
    assert "6 outlier(s)" in fleet and "flagged: node04, node05" in fleet
    assert "software.torch" in fleet and "node05 (2.12.0+cu130)" in fleet
    one_host = build(runs[:1])
    assert '<section id="fleet">' not in one_host


def test_collective_records_carry_each_ranks_median() -> None:
    base = record("allreduce", "gloo", "fp32", {"count": 256, "ranks": 3, "in_place": 0}, None, status="skipped")
    base.update(status="ok", reason="", device="Test CPU", device_index=0)
    result = {
        "status": "ok",
        "mismatches": 0,
        "max_abs_err": 0.0,
        "elements": 768,
        "samples": [3e-5, 3.2e-5, 3.1e-5],
        "rank_p50_s": [2.4e-5, 3.0e-5, 2.6e-5],
        "warmup": 4,
        "when": "after 3 timed iterations",
    }
    out = to_record(base, result, 1e-7)
    assert out["timing"]["rank_p50_s"] == [2.4e-5, 3.0e-5, 2.6e-5] and out["timing"]["median_s"] == 3.1e-5
    doc = json.loads(results.dumps({**node_document("n", 0, gpus=1, sizes=(64,), allreduce=False), "records": [out]}))
    assert results.validate(doc) == []
    doc["records"][0]["timing"]["rank_p50_s"] = [-1.0]
    assert any("rank_p50_s" in p for p in results.validate(doc))
