"""``hwbench report`` on frozen results files: every section, missing sections, the SVG axes, offline-only HTML.

The inputs in tests/data/report/ come from tests/data/report/make_report_data.py.
"""

from __future__ import annotations

import math
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import hwbench_cmd

from hwbench.report import build
from hwbench.report.cascade import cascades
from hwbench.report.data import Run, allreduce_points, rows
from hwbench.report.svg import Scale, data_range, fmt_bytes, fmt_number
from hwbench.results import files as results

DATA = Path(__file__).resolve().parents[1] / "data" / "report"


def _runs(*names: str) -> list[tuple[Path, dict]]:
    return [(DATA / n, results.load(DATA / n)) for n in names]


class _Structure(HTMLParser):
    """Tags and section contents of a page, and whether it parses with every element closed."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "col"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.sections: dict[str, list[str]] = {}
        self.current: str | None = None
        self.errors: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self.current = dict(attrs)["id"]
            self.sections[self.current] = []
        if self.current:
            self.sections[self.current].append(tag + "." + (dict(attrs).get("class") or ""))
        self.urls += [v for k, v in attrs if k in ("href", "src") and v and not v.startswith("#")]
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()
        if tag == "section":
            self.current = None


def _parse(page: str) -> _Structure:
    parsed = _Structure()
    parsed.feed(page)
    assert parsed.errors == [] and parsed.stack == [], (parsed.errors, parsed.stack)
    return parsed


def test_full_report_has_every_section_with_charts_and_tables() -> None:
    page = build(_runs("full-cpu.json", "gpu-h100.json"))
    tags = _parse(page).sections
    assert list(tags) == ["summary", "roofline", "overhead", "portability", "allreduce", "parity", "compile"]
    assert all("p.nodata" not in t for t in tags.values())
    assert [t.count("svg.chart") for t in tags.values()] == [0, 3, 2, 3, 2, 0, 0]
    assert all(t.count("table.") >= 1 for t in tags.values())
    # What an evaluator looks for, in words and numbers.
    assert "no ROCm runtime (libamdhip64.so not found)" in page  # an unavailable backend and why
    assert "triton: out of shared memory" in page and "worker died with SIGSEGV" in page  # failures and why
    assert "cpu has no implementation of allreduce" in page  # a skip and why
    assert "datasheet memory bandwidth unknown for this device: its compute roofs are drawn flat" in page  # CPU
    assert "measured fp32 roof" in page  # the best GEMM of the run, beside the datasheet's
    assert "measure the memory bandwidth roof with `hwbench run --kernel stream" in page  # what would measure it
    assert "memory roof 3350 GB/s (datasheet nvidia-h100-sxm" in page  # GPU roofline from the catalog
    assert "1 of 102 failed parity" in page
    assert "attention_fp16_d128_causal" in page and "triton is not installed" in page  # compile section


def test_report_is_offline_only() -> None:
    page = build(_runs("full-cpu.json", "gpu-h100.json", "sparse.json", "minimal.json"))
    parsed = _parse(page)
    assert parsed.urls == []
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|<script|<link|@import|url\((?!#)", page, re.I)


def test_minimal_file_says_no_data_everywhere() -> None:
    page = build(_runs("minimal.json"))
    tags = _parse(page).sections
    for name in ("roofline", "overhead", "portability", "allreduce", "parity", "compile"):
        assert tags[name].count("p.nodata") == 1 and "svg.chart" not in tags[name], name
    assert "llvmlite is not installed" in page  # the skip reason reaches the summary and AllReduce section
    assert "no compile-only section in these files" in page


def test_sparse_file_reads_what_is_there() -> None:
    page = build(_runs("sparse.json"))
    tags = _parse(page).sections
    # No byte counts: no roofline; no porting overhead; but the cascade and AllReduce (derived busbw) are drawn.
    assert tags["roofline"].count("p.nodata") == 1 and tags["overhead"].count("p.nodata") == 1
    assert tags["portability"].count("svg.chart") == 1 and tags["allreduce"].count("svg.chart") == 2
    assert "derived here from the record" in page


def test_allreduce_bandwidths_follow_nccl_tests() -> None:
    found = rows([Run(p, d) for p, d in _runs("gpu-h100.json", "sparse.json")])
    points = allreduce_points(found)
    assert len(points) == 21
    for p in points:
        assert p["algbw"] == pytest.approx(p["bytes"] / p["p50_s"] / 1e9)
        ranks = p["ranks"]
        assert p["busbw"] == pytest.approx(p["algbw"] * 2 * (ranks - 1) / ranks)
    assert sum(p["derived"] for p in points) == 11  # 5 + 5 H100 sizes without stated bandwidth, 1 sparse


def test_cascade_efficiencies_and_pp() -> None:
    found = {
        (c.kernel, c.impl): c for c in cascades(rows([Run(p, d) for p, d in _runs("full-cpu.json", "gpu-h100.json")]))
    }
    gemm_llvm = found[("gemm", "llvm")]
    # On the H100 the llvm GEMM was set to 35% of peak against cuBLAS at 80%: efficiency 0.4375 on every case.
    effs = {s.device.name: s.efficiency for s in gemm_llvm.steps}
    assert effs["NVIDIA H100 80GB HBM3"] == pytest.approx(0.35 / 0.80)
    first, second = gemm_llvm.steps
    assert first.efficiency >= second.efficiency and first.pp == pytest.approx(first.efficiency)
    assert second.pp == pytest.approx(2 / (1 / first.efficiency + 1 / second.efficiency))
    # Triton never ran on the CPU: PP over both devices is 0.
    triton = found[("gemm", "triton")]
    assert [s.device.backend for s in triton.steps] == ["cuda", "cpu"] and triton.steps[-1].pp == 0.0


def test_scales_and_ticks() -> None:
    log = Scale(1e-3, 1e3, 0, 600, log=True)
    assert log(1.0) == pytest.approx(300) and log(1e-3) == 0 and log(1e3) == pytest.approx(600)
    assert log.ticks() == [1e-3, 1e-2, 1e-1, 1, 10, 100, 1000]
    assert Scale(10, 1000, 0, 1, log=True).ticks() == [10, 20, 50, 100, 200, 500, 1000]
    linear = Scale(-2.0, 1.0, 100, 400)
    assert linear(0.0) == pytest.approx(300) and linear.ticks() == [-2, -1, 0, 1]
    assert data_range([0.0034, 270.0], log=True) == (1e-3, 1e3)
    assert data_range([-1.68, 0.69], log=False, include_zero=True) == (-2.0, 1.0)
    assert fmt_number(1e6) == "1e6" and fmt_number(0.25) == "0.25" and fmt_bytes(4096) == "4.096 kB"
    assert all(math.isfinite(log(v)) for v in (0.0, -1.0))  # out-of-domain values are clamped, not NaN


def test_cli_writes_report_and_rejects_bad_input(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = subprocess.run(
        hwbench_cmd("report", str(DATA / "full-cpu.json"), "-o", str(out)), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text().startswith("<!DOCTYPE html>") and "report:" in done.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    for args in ([str(bad)], [str(tmp_path / "missing.json")], [str(DATA / "minimal.json"), "-o", str(tmp_path)]):
        done = subprocess.run(hwbench_cmd("report", *args), capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def test_report_never_overwrites(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.cli.main import main

    source = tmp_path / "r.json"
    source.write_text((DATA / "minimal.json").read_text())
    before = source.read_text()

    def must_not_build(*args, **kwargs):
        raise AssertionError("built the page although it could not be written")

    with monkeypatch.context() as patch:
        patch.setattr("hwbench.cli.report.build", must_not_build)
        for target in (source, tmp_path / "old.html"):
            target.write_text(target.read_text() if target.exists() else "an older report")
            assert main(["report", str(source), "-o", str(target)]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and f"{target.name} already exists" in err and "-o" in err, err
    assert source.read_text() == before and (tmp_path / "old.html").read_text() == "an older report"
    out = tmp_path / "report.html"

    def build_while_another_writes(*args, **kwargs):
        out.write_text("someone else's")
        return build(*args, **kwargs)

    monkeypatch.setattr("hwbench.cli.report.build", build_while_another_writes)
    assert main(["report", str(source), "-o", str(out)]) == 2
    assert "report.html already exists" in capsys.readouterr().err
    assert out.read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.html", "r.json", "report.html"]


def test_the_overhead_section_shows_speed_ratios_on_a_log_axis() -> None:
    """t_native / t_portable people can read (0.87x, 5.4x), not an overhead unbounded below."""
    from hwbench.report import charts, sections

    page = build(_runs("full-cpu.json"))
    section = page[page.index('<section id="overhead"') :]
    section = section[: section.index("</section>")]
    assert "speed against the native, t_native / t_portable (log; right of 1x: faster)" in section
    assert "median speed" in section and "x the native&#x27;s speed (overhead" in section
    rows = [
        dict(r, ratio=v, overhead=1 - v)
        for r, v in zip(
            [{"kernel": "gemm", "impl": "a", "native": "n", "dtype": "fp32", "shape": "s"}] * 2,
            (0.0016, 600.0),
            strict=True,
        )
    ]
    svg = charts.overhead("t", "t", rows)
    assert ">0.001x<" in svg and ">1000x<" in svg  # whole decades around both ends
    assert sections.speed(600.0) == "600x"


def test_text_from_the_files_reaches_the_page_printable(tmp_path: Path) -> None:
    """Host, device and reason text carrying a terminal escape, a C1 control and a bidi mark is
    shown as visible escapes: the page holds no control character (tabs and line breaks of its own aside)."""
    doc = results.load(DATA / "full-cpu.json")
    hostile = "evil\x1b[2J\x9b\u202e"
    doc["host"]["hostname"] = hostile
    for backend in doc.get("backends", []):
        for device in backend.get("devices", []):
            device["name"] = hostile
    for record in doc["records"]:
        record["device"] = hostile
        if record.get("reason"):
            record["reason"] = hostile
    page = build([(tmp_path / "hostile.json", doc)])
    assert "evil\\x1b[2J\\x9b\\u202e" in page
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", page)


def test_figures_near_the_largest_double_still_make_a_page(tmp_path: Path) -> None:
    """A finite figure near the double's maximum (a log axis would need 10**309) is drawn, not a crash."""
    assert data_range([1e-3, 1.7e308], log=True) == (1e-3, 1e308)
    assert data_range([1.7e308], log=True) == (1e307, 1e308)
    doc = results.load(DATA / "full-cpu.json")
    for record in doc["records"]:
        for key, value in list((record.get("metrics") or {}).items()):
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value:
                record["metrics"][key] = 2.0**1023
    assert "<svg" in build([(tmp_path / "extreme.json", doc)])
