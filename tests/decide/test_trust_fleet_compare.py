"""``fleet`` and ``compare`` at the edges: one unit per case, outliers on both sides, unreadable nodes
named as missing, a gate that compared nothing fails, and text from the files printed escaped."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from benchmarks.bench_fleet import GPU, Faults, node_document
from synthetic_results import DATA, document, record, write

from hwbench.cli.main import main
from hwbench.decide.fleet import analyze
from hwbench.report import build

SHAPE = {"M": 8, "N": 8, "K": 8}
#: What a terminal would obey or reorder: ESC (an OSC title and a screen clear), BEL, DEL, a C1 CSI, a bidi override.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x7f\x9b\u202e"
RAW = ("\x1b", "\x07", "\x7f", "\x9b", "\u202e")


def _node(i: int, faults: Faults | None = None) -> dict[str, Any]:
    return node_document(f"node{i:02d}", i, faults, gpus=1, sizes=(2048,), allreduce=False)


def _gemm(doc: dict[str, Any], impl: str = "cublas", dtype: str = "fp32") -> dict[str, Any]:
    (found,) = [
        r for r in doc["records"] if (r["kernel"], r["backend"], r["impl"], r["dtype"]) == ("gemm", "cuda", impl, dtype)
    ]
    return found


def _case(doc: dict[str, Any], impl: str = "cublas", dtype: str = "fp32") -> dict[str, Any]:
    (found,) = [
        c for c in doc["cases"] if (c["kernel"], c["backend"], c["impl"], c["dtype"]) == ("gemm", "cuda", impl, dtype)
    ]
    return found


def _runs(docs: list[dict[str, Any]]) -> list[tuple[Path, dict[str, Any]]]:
    return [(Path(f"{d['host']['hostname']}.json"), d) for d in docs]


# Item 4: one unit per case, outliers on both sides, unreadable nodes missing.


def test_a_node_giving_0_tflops_is_compared_in_tflops_not_by_its_gbps_and_flagged() -> None:
    docs = [_node(i) for i in range(8)]
    _gemm(docs[2])["metrics"].update(tflops=0.0, gbps=900.0)  # far more than any TFLOPS figure of the case
    case = _case(analyze(_runs(docs)))
    assert (case["metric"], case["unit"], case["n"]) == ("tflops", "TFLOPS", 8)
    assert case["max"] < 60 and case["min"] == 0.0  # its GB/s is not the case's best
    assert [(o["node"], o["value"], o["side"]) for o in case["outliers"]] == [("node02", 0.0, "below")]
    assert case["outliers"][0]["below_pct"] == pytest.approx(100.0)


def test_a_node_giving_another_unit_only_is_not_compared_but_flagged() -> None:
    docs = [_node(i) for i in range(8)]
    _gemm(docs[4])["metrics"].update(tflops=None, gbps=900.0)
    doc = analyze(_runs(docs))
    case = _case(doc)
    assert case["unit"] == "TFLOPS" and case["n"] == 7 and case["max"] < 60
    (failed,) = case["failed"]
    assert failed["node"] == "node04" and "no TFLOPS figure" in failed["reason"] and "GB/s only" in failed["reason"]
    assert doc["summary"]["outlier_nodes"] == ["node04"]


def test_a_node_a_million_times_above_the_median_is_flagged() -> None:
    docs = [_node(i) for i in range(8)]
    _gemm(docs[5])["metrics"]["tflops"] *= 1e6
    doc = analyze(_runs(docs))
    case = _case(doc)
    (outlier,) = case["outliers"]
    assert (outlier["node"], outlier["side"]) == ("node05", "above") and outlier["below_pct"] < -1e7
    assert case["upper_threshold"] == pytest.approx(2 * case["median"] - case["threshold"])
    assert doc["summary"]["outlier_nodes"] == ["node05"] and doc["summary"]["found"]
    # A healthy fleet stays clean on both sides.
    assert analyze(_runs([_node(i) for i in range(8)]))["summary"]["outlier_nodes"] == []


def _folder_with_unreadable_nodes(folder: Path) -> Path:
    folder.mkdir()
    for i in range(6):
        write(folder / f"node{i:02d}.json", _node(i))
    (folder / "node06.json").write_text("this is not JSON\n")
    text = (folder / "node00.json").read_text().replace('"hostname": "node00"', '"hostname": "node07"')
    (folder / "node07.json").write_text(text.replace('"median_s": 0.', '"median_s": NaN, "x": 0.', 1))
    os.symlink("gone.json", folder / "node08.json")  # dangling
    os.symlink("node09.json", folder / "node09.json")  # a loop
    return folder


def test_every_unreadable_node_is_named_missing_and_the_rest_analysed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _folder_with_unreadable_nodes(tmp_path / "fleet")
    assert main(["fleet", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    names = [Path(m["file"]).name for m in doc["missing"]]
    assert names == ["node06.json", "node07.json", "node08.json", "node09.json"]
    reasons = " | ".join(m["reason"] for m in doc["missing"])
    assert "not valid JSON" in reasons and "not a finite number" in reasons and "no such file" in reasons
    assert "symbolic links" in reasons
    assert doc["summary"]["files"] == 6 and doc["summary"]["missing"] == 4 and doc["summary"]["found"]
    assert captured.err.count("counted as missing") == 4
    assert main(["fleet", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "missing: " in out and "4 file(s) missing: " in out and "node09.json" in out
    assert main(["fleet", str(folder), "--fail-on-outlier"]) == 1
    assert "4 file(s) missing" in capsys.readouterr().err
    # Files named one by one: one that is not there is missing the same way.
    named = [str(folder / "node00.json"), str(folder / "node01.json"), str(folder / "node02.json")]
    assert main(["fleet", *named, str(folder / "node17.json"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [Path(m["file"]).name for m in doc["missing"]] == ["node17.json"] and doc["summary"]["files"] == 3


def test_a_fleet_with_no_readable_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.json").write_text("{")
    assert main(["fleet", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "no readable results file" in err and "Traceback" not in err


# Item 5: a gate with nothing compared fails.


def _pair(tmp_path: Path, base: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[str, str]:
    return str(write(tmp_path / "base.json", document(base))), str(write(tmp_path / "new.json", document(new)))


def test_a_gate_that_compared_nothing_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, empty = _pair(tmp_path, [record("gemm", "llvm", "fp32", SHAPE, 1e-3)], [])
    assert main(["compare", base, empty, "--fail-on", "median:5%"]) == 1
    captured = capsys.readouterr()
    assert "nothing compared: no case in common (1 in base, 0 in new)" in captured.err
    assert "fail-on median:5%: nothing compared" in captured.out and "FAIL" in captured.out
    assert main(["compare", base, empty]) == 0  # no gate: a report only
    capsys.readouterr()
    burn = str(DATA / "acceptance" / "pass-burn.json")
    assert main(["compare", str(DATA / "cpu-base.json"), burn, "--fail-on", "median:5%"]) == 1
    assert "nothing compared" in capsys.readouterr().err
    # Cases in common, but failing on both sides: nothing was timed against anything.
    failing = [record("gemm", "llvm", "fp32", SHAPE, None, status="runtime_error")]
    (tmp_path / "failing").mkdir()
    a, b = _pair(tmp_path / "failing", failing, failing)
    assert main(["compare", a, b, "--fail-on", "median:5%", "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["compared"] == 0 and doc["gate"] == {
        "passed": False,
        "reason": "nothing compared: 1 case(s) in common, none ok on both sides",
    }
    # A gate with a case compared and no regression passes.
    same = str(DATA / "cpu-new-same.json")
    assert main(["compare", str(DATA / "cpu-base.json"), same, "--fail-on", "median:5%", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gate"]["passed"]


# Item 6: text from the files printed escaped.


def _no_raw(text: str) -> None:
    assert not [c for c in RAW if c in text], repr(text[:200])


def test_compare_prints_text_from_the_files_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base_rec = record(f"gemm{HOSTILE}", "llvm", "fp32", SHAPE, 1e-3, device=f"CPU{HOSTILE}")
    new_rec = record(f"gemm{HOSTILE}", "llvm", "fp32", SHAPE, None, device=f"CPU{HOSTILE}", status="runtime_error")
    new_rec.update(reason=f"crashed{HOSTILE}", inputs_version=2)
    base_doc, new_doc = document([base_rec]), document([new_rec])
    new_doc["host"]["hostname"] = f"evil{HOSTILE}"
    new_doc["software"]["numpy"] = f"9.9{HOSTILE}"
    a, b = write(tmp_path / "a.json", base_doc), write(tmp_path / "b.json", new_doc)
    assert main(["compare", str(a), str(b), "--fail-on", "median:5%"]) == 1
    captured = capsys.readouterr()
    _no_raw(captured.out)
    _no_raw(captured.err)
    assert "evil\\x1b]0;owned\\x07" in captured.out and "crashed\\x1b" in captured.out
    assert "hwbench: note: gemm\\x1b" in captured.err
    assert main(["compare", str(a), str(b), "--json"]) == 0
    captured = capsys.readouterr()
    _no_raw(captured.out)
    assert json.loads(captured.out)["cases"][0]["reason"] == f"crashed{HOSTILE}"  # the same document


def _hostile_fleet() -> list[dict[str, Any]]:
    docs = [_node(i, Faults(failed={(0, "fp16", 2048)}) if i == 1 else None) for i in range(6)]
    docs[3]["host"]["hostname"] = f"node03{HOSTILE}"
    _gemm(docs[3])["metrics"]["tflops"] *= 0.5  # an outlier named by its host
    _gemm(docs[1], dtype="fp16")["reason"] = f"crashed{HOSTILE}"
    docs[2]["software"]["torch"] = f"2.12{HOSTILE}"
    return docs


def test_fleet_prints_text_from_the_files_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "fleet"
    folder.mkdir()
    for i, doc in enumerate(_hostile_fleet()):
        write(folder / f"n{i}.json", doc)
    (folder / f"n9{HOSTILE}.json").write_text("{")  # a missing file whose very name is hostile
    assert main(["fleet", str(folder)]) == 0
    captured = capsys.readouterr()
    _no_raw(captured.out)
    _no_raw(captured.err)
    assert f"outlier: node03\\x1b]0;owned\\x07\\x1b[2J\\x7f\\x9b\\u202e cuda:0 cuda {GPU} gemm" in captured.out
    assert "crashed\\x1b" in captured.out and "2.12\\x1b" in captured.out and "missing: " in captured.out
    assert main(["fleet", str(folder), "--json"]) == 0
    captured = capsys.readouterr()
    _no_raw(captured.out)
    doc = json.loads(captured.out)  # still JSON, holding the very same text
    assert f"node03{HOSTILE}" in doc["summary"]["outlier_nodes"]
    assert any(f["field"] == "software.torch" and f"2.12{HOSTILE}" in f["values"] for f in doc["software"])


def test_the_reports_fleet_section_carries_no_control_character() -> None:
    page = build(_runs(_hostile_fleet()))
    fleet = page[page.index('<section id="fleet">') :]
    _no_raw(fleet)
    assert "node03\\x1b]0;owned" in fleet and "crashed\\x1b" in fleet and "2.12\\x1b" in fleet
