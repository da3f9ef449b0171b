"""The report's training section: loss curves and step times of ``train`` records, each drill's
timeline and resumed losses, text from the files escaped, and no section without such records.

The inputs are synthetic records (tests/synthetic_results.py), valid against the schema."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from synthetic_results import current_document, device, drill_record, record, train_record

from hwbench.report import build
from hwbench.results import files as results

DATA = Path(__file__).resolve().parents[1] / "data" / "report"
TRAIN_LOSSES = [5.5, 5.2, 4.9, 4.6, 4.4, 4.3, 4.1, 4.0]


class _Sections(HTMLParser):
    """Each section's start tags (``tag#id``), every element closed in order."""

    VOID = {"meta", "br", "img", "input", "link", "hr", "col"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.sections: dict[str, list[str]] = {}
        self.current: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "section":
            self.current = str(named["id"])
            self.sections[self.current] = []
        if self.current:
            self.sections[self.current].append(f"{tag}#{named.get('id') or ''}")
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()
        if tag == "section":
            self.current = None


def _page(records: list[dict], tmp_path: Path) -> str:
    return build([(tmp_path / "train.json", current_document(records))])


def _sections(page: str) -> dict[str, list[str]]:
    parsed = _Sections()
    parsed.feed(page)
    assert parsed.errors == [] and parsed.stack == [], (parsed.errors, parsed.stack)
    return parsed.sections


def _svg(page: str, ident: str) -> str:
    start = page.index(f'<svg id="{ident}"')
    return page[start : page.index("</svg>", start)]


def test_train_and_drill_records_get_their_charts(tmp_path: Path) -> None:
    records = [
        train_record(12.0, losses=TRAIN_LOSSES),
        train_record(30.0, impl="compiled", step_s=[20.0, 0.15, 0.14, 0.15, 0.15, 0.14, 0.15, 0.15]),
        drill_record(18.0),
    ]
    page = _page(records, tmp_path)
    sections = _sections(page)
    assert list(sections).index("train") == list(sections).index("compile") + 1
    svgs = [tag for tag in sections["train"] if tag.startswith("svg#")]
    assert svgs == ["svg#train-loss", "svg#train-step", "svg#drill-timeline-0", "svg#drill-losses-0"]
    assert '<a href="#train">Training</a>' in page
    loss = _svg(page, "train-loss")
    lines = re.findall(r'<polyline points="([^"]+)"', loss)
    assert len(lines) == 2 and all(len(points.split()) == len(TRAIN_LOSSES) for points in lines)
    assert "tiny eager fp32 ×1 cold: step 8, 4 loss" in loss and "tiny compiled fp32 ×1 cold" in loss
    steps = _svg(page, "train-step")
    assert "tiny compiled fp32 ×1 cold: step 1, 20 s" in steps and ">100<" in steps  # log axis to the first step
    assert ">12 s<" in page and "process launch" in page  # the table: submit to first step, its source


def _x_of(svg: str, tip: str) -> float:
    found = re.search(r'<(?:circle cx|polygon points)="([0-9.]+)[^>]*><title>' + re.escape(tip), svg)
    assert found, tip
    return float(found.group(1))


def test_the_drill_timeline_puts_events_in_time_order(tmp_path: Path) -> None:
    page = _page([drill_record(18.0)], tmp_path)
    svg = _svg(page, "drill-timeline-0")
    assert "time to resume: 18 s from the kill at 10 s to the first step after resuming" in svg
    for kind in ("launch", "step", "checkpoint", "kill", "restart", "resume", "done", "down (time to resume)"):
        assert f">{kind}</text>" in svg, kind
    kill = _x_of(svg, "kill at 10 s, step 5, rank 1")
    restart, resume = _x_of(svg, "restart at 16 s"), _x_of(svg, "resume at 26.2 s, step 4, rank 0")
    assert _x_of(svg, "launch at 0 s") < _x_of(svg, "checkpoint at 6.1 s, step 4") < kill < restart < resume
    assert "svg#train-loss" not in _sections(page)["train"]  # no train record: no loss curve
    assert ">18 s<" in page and ">1 (checkpoint every 4)<" in page and "0 of 10 differ (exact)" in page


def test_resumed_losses_that_differ_are_marked(tmp_path: Path) -> None:
    same = _svg(_page([drill_record(18.0)], tmp_path), "drill-losses-0")
    assert "differs" not in same and "uninterrupted run" in same and "resumed run" in same
    reference = [5.5, 5.2, 4.9, 4.6, 4.4, 4.3, 4.1, 4.0, 3.9, 3.8]
    resumed = [*reference[:5], 4.31, *reference[6:]]
    changed = drill_record(18.0, losses=resumed, reference_losses=reference)
    svg = _svg(_page([changed], tmp_path / "d"), "drill-losses-0")
    assert "step 6: resumed 4.31, uninterrupted 4.3" in svg and ">differs<" in svg
    assert svg.count("uninterrupted 4") == 1  # only the step that differs


def test_names_from_the_files_are_escaped(tmp_path: Path) -> None:
    hostile = "<script>alert(1)</script>\x1b[2J\u202e"
    where = {"device": hostile}
    train = train_record(12.0, impl="eager", preset=hostile, submit_source=hostile, **where)
    drill = drill_record(18.0, **where)
    drill["drill"]["preset"] = hostile
    drill["drill"]["timeline"][0]["event"] = hostile
    doc = current_document([train, drill], [device("cpu", hostile, "cpu")])
    page = build([(tmp_path / "hostile.json", doc)])
    section = page[page.index('<section id="train">') :]
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J\\u202e" in section
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", page)
    _sections(page)  # still well formed


def test_no_section_without_train_or_drill_records(tmp_path: Path) -> None:
    page = _page([record("gemm", "numpy", "fp32", {"M": 64, "N": 64, "K": 64}, tflops=1.0)], tmp_path)
    assert "train" not in _sections(page) and 'href="#train"' not in page
    frozen = build([(DATA / "full-cpu.json", results.load(DATA / "full-cpu.json"))])
    assert "train" not in _sections(frozen)


def test_records_without_curves_say_no_data(tmp_path: Path) -> None:
    bare = train_record(12.0, losses=[], step_s=[])
    drill = drill_record(18.0, losses=[], reference_losses=[])
    drill["drill"]["timeline"] = []
    page = _page([bare, drill], tmp_path)
    tags = _sections(page)["train"]
    assert not any(tag.startswith("svg#") for tag in tags)
    assert "the train records have no losses or step times" in page and "the drill record has no timeline" in page
