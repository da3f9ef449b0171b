"""One validity rule for every command: the schema's validator against jsonschema, finite and
non-negative figures, closed records, RFC 3339 times, and the keys hwbench really writes."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import needs
import numpy as np
import pytest
from test_results import make_doc

from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.core.records import empty_metrics, empty_parity, empty_timing, new_record
from hwbench.results import files as results
from hwbench.results.schema.validator import UNKNOWN_KEY, Validator, format_path, is_date_time
from hwbench.run.parity import Parity
from hwbench.run.stats import timing_section

DATA = Path(__file__).resolve().parents[1] / "data"
SCHEMA = results.schema()
RECORD = SCHEMA["$defs"]["record"]["properties"]


def specimen() -> dict[str, Any]:
    """A small valid document holding every part of the schema: records of several statuses,
    a collective summary and compile records (from the frozen report inputs)."""
    doc = make_doc()
    gpu = json.loads((DATA / "report" / "gpu-h100.json").read_text())
    cpu = json.loads((DATA / "report" / "full-cpu.json").read_text())
    doc["collective"] = gpu["collective"]
    doc["compile"] = cpu["compile"][:2]
    picked = {r["status"]: r for r in cpu["records"] + gpu["records"]}
    doc["records"] += list(picked.values())
    doc["records"].append(next(r for r in gpu["records"] if r["kernel"] == "allreduce" and r["status"] == "ok"))
    doc["backends"] += gpu["backends"]
    return doc


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*path, i))


def _at(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        doc = doc[part]
    return doc


REPLACEMENTS = [None, True, 0, -1, 1.5, "x", "2026-01-02T03:04:05Z", "2026-02-30T00:00:00Z", [], {"a": 1}]


def _changes(doc: dict[str, Any], under: tuple[Any, ...], skip: tuple[Any, ...] | None) -> Iterator[str]:
    """Change ``doc`` in place one way at a time under ``under`` (not under ``skip``), yielding what
    was changed while the change is in place: every value replaced, every key removed, an unknown
    key added to every object."""
    for path in list(_paths(_at(doc, under), under)):
        if skip is not None and path[: len(skip)] == skip and len(path) > len(skip):
            continue
        target = _at(doc, path)
        if isinstance(target, dict):
            target["zz_unknown"] = 1
            yield f"{format_path(path)} + zz_unknown"
            del target["zz_unknown"]
        if not path:
            continue
        parent, key = _at(doc, path[:-1]), path[-1]
        for value in REPLACEMENTS:
            parent[key] = value
            yield f"{format_path(path)} = {value!r}"
        parent[key] = target
        if isinstance(key, str):
            del parent[key]
            yield f"del {format_path(path)}"
            parent[key] = target  # (key order does not matter to either validator)


def mutants(doc: dict[str, Any]) -> Iterator[str]:
    """Change ``doc`` one way at a time, each record in a document of its own (for speed)."""
    records = doc["records"]
    doc["records"] = records[:1]
    yield from _changes(doc, (), ("records", 0))
    for record in records:
        doc["records"] = [record]
        yield from _changes(doc, ("records", 0), None)
    doc["records"] = records


def _rfc3339(text: str) -> bool:
    """An independent RFC 3339 check for jsonschema (its own needs a package hwbench does not install)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", text):
        return False
    try:
        dt.datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _reference() -> Any:
    jsonschema = needs.module("jsonschema")
    checker = jsonschema.FormatChecker()
    checker.checks("date-time")(lambda value: not isinstance(value, str) or _rfc3339(value))
    return jsonschema.Draft202012Validator(SCHEMA, format_checker=checker)


def test_validator_agrees_with_jsonschema_on_valid_and_invalid_documents() -> None:
    reference, ours = _reference(), Validator(SCHEMA)
    doc = specimen()
    assert list(reference.iter_errors(doc)) == [] and ours.problems(doc) == []
    disagreements, invalid, total = [], 0, 0
    for what in mutants(doc):
        theirs, mine = not reference.is_valid(doc), bool(ours.problems(doc))
        total += 1
        invalid += theirs
        if theirs != mine:
            disagreements.append(f"{what}: jsonschema {'in' if theirs else ''}valid, ours {'in' if mine else ''}valid")
    assert not disagreements, disagreements[:10]
    assert total > 2000 and 0.3 * total < invalid < total  # both kinds were tried, many of each
    assert ours.problems(doc) == []  # every change was undone


@pytest.mark.parametrize("path", sorted(DATA.glob("**/*.json")), ids=lambda p: p.name)
def test_validator_agrees_with_jsonschema_on_the_frozen_files(path: Path) -> None:
    doc = results.migrate(json.loads(path.read_text()))
    assert results.validate(doc) == [] and _reference().is_valid(doc)


def test_the_schema_uses_only_what_the_validator_checks() -> None:
    for schema in (
        {"type": "object", "patternProperties": {"x": {}}},
        {"type": "string", "format": "email"},
        {"$ref": "other.json#/x"},
        {"properties": {"a": {"maxLength": 3}}},
    ):
        with pytest.raises(ValueError, match="not supported|only references"):
            Validator(schema)


@pytest.mark.parametrize(
    "text,valid",
    [
        ("2026-01-02T03:04:05+00:00", True),
        ("2026-01-02T03:04:05Z", True),
        ("2026-01-02t03:04:05.123456z", True),
        ("2024-02-29T23:59:59-05:30", True),
        ("2026-01-02 03:04:05+00:00", False),
        ("2026-01-02T03:04:05", False),
        ("2026-01-02", False),
        ("2026-13-01T00:00:00Z", False),
        ("2025-02-29T00:00:00Z", False),
        ("2026-04-31T00:00:00Z", False),
        ("2026-01-02T24:00:00Z", False),
        ("2026-01-02T03:60:00Z", False),
        ("2026-01-02T03:04:05+24:00", False),
        ("2026-1-2T03:04:05Z", False),
        ("yesterday", False),
    ],
)
def test_date_time(text: str, valid: bool) -> None:
    assert is_date_time(text) is valid
    assert _rfc3339(text) is valid  # the test's own check (given to jsonschema) agrees


def test_run_times_must_be_rfc_3339(tmp_path: Path) -> None:
    doc = make_doc()
    doc["run"]["started"] = "last Tuesday"
    with pytest.raises(UserError, match=r"run.started: 'last Tuesday' is not an RFC 3339 date-time"):
        results.load(_write(tmp_path / "r.json", doc))
    doc["run"]["started"], doc["run"]["finished"] = "2026-01-02T03:04:05+00:00", "2026-02-30T00:00:00+00:00"
    assert results.validate(doc) == [
        "run.finished: '2026-02-30T00:00:00+00:00' is not an RFC 3339 date-time such as 2026-01-02T03:04:05+00:00"
    ]


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")  # as Python writes it: NaN and Infinity included
    return path


#: Every figure of a record that is never negative (None: not measured).
NON_NEGATIVE = [
    *(("timing", k) for k in ("median_s", "iqr_s", "q1_s", "q3_s", "mean_s", "std_s", "cv", "min_s", "max_s")),
    *(("timing", k) for k in ("p99_s", "resolution_s", "n", "warmup")),
    *(("metrics", k) for k in ("tflops", "gbps", "pct_peak", "peak_tflops", "tflops_per_usd_hour", "usd_per_hour")),
    *(("metrics", k) for k in ("iops", "algbw_gbps", "busbw_gbps", "speed_vs_native", "speed_vs_fastest_native")),
    *(("parity", k) for k in ("max_abs_err", "max_rel_err", "atol", "rtol", "mismatches", "nonfinite", "elements")),
    (None, "compile_s"),
    (None, "wall_s"),
]


@pytest.mark.parametrize("section,name", NON_NEGATIVE, ids=lambda x: str(x))
@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, -math.inf])
def test_a_negative_or_non_finite_figure_is_invalid(section: str | None, name: str, bad: float, tmp_path: Path) -> None:
    doc = make_doc()
    record = doc["records"][0]
    (record[section] if section else record)[name] = bad
    where = f"records[0].{section}.{name}" if section else f"records[0].{name}"
    problems = results.validate(json.loads(_write(tmp_path / "bad.json", doc).read_text()))
    assert problems and all(p.startswith(f"{where}: ") for p in problems), problems


@pytest.mark.parametrize("bad", [-2.0, math.nan, math.inf])
def test_every_command_refuses_what_validate_refuses(
    bad: float, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = make_doc()
    doc["records"][0]["metrics"]["tflops"] = bad
    path = _write(tmp_path / "bad.json", doc)
    where = "records[0].metrics.tflops"
    assert main(["validate", str(path)]) == 1
    assert where in capsys.readouterr().err
    for command in (["show", str(path)], ["compare", str(path), str(path)], ["pp", str(path)], ["score", str(path)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and where in err, (command, err)
    report = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(report)]) == 2 and not report.exists()
    assert where in capsys.readouterr().err


@pytest.mark.parametrize("name", ["porting_overhead", "host_native_overhead"])
def test_overheads_may_be_negative_but_not_infinite(name: str) -> None:
    doc = make_doc()
    doc["records"][0]["metrics"][name] = -0.5  # faster than the native
    assert results.validate(doc) == []
    doc["records"][0]["metrics"][name] = -math.inf
    assert results.validate(doc) == [f"records[0].metrics.{name}: -inf is not a finite number"]


def test_samples_are_finite_times(tmp_path: Path) -> None:
    doc = make_doc()
    doc["records"][0]["timing"]["samples_s"] = [1e-4, -1e-4, math.nan]
    assert results.validate(doc) == [
        "records[0].timing.samples_s[1]: -0.0001 is below the minimum 0",
        "records[0].timing.samples_s[2]: nan is not a finite number",
    ]


@pytest.mark.parametrize("section", [None, "timing", "metrics", "parity"])
def test_records_are_closed(section: str | None, tmp_path: Path) -> None:
    doc = make_doc()
    record = doc["records"][0]
    (record[section] if section else record)["speedup"] = 2.0
    where = f"records[0].{section}" if section else "records[0]"
    assert results.validate(doc) == [f"{where}: unknown key 'speedup' {UNKNOWN_KEY}"]
    assert "a newer hwbench may have written it" in UNKNOWN_KEY
    with pytest.raises(UserError, match=re.escape(f"{where}: unknown key 'speedup'")):
        results.load(_write(tmp_path / "r.json", doc))


def test_odd_keys_are_shown_escaped() -> None:
    doc = make_doc()
    doc["records"][0]["shape"]["\x1b[31mM"] = -1
    (problem,) = results.validate(doc)
    assert problem.startswith("records[0].shape['\\x1b[31mM']: -1 is below the minimum 0") and "\x1b" not in problem


def test_every_key_hwbench_writes_is_in_the_schema() -> None:
    record = new_record("gemm", "numpy", "cpu", 0, "fp32", {"M": 1}, impl_kind="native", language="blas", device="x")
    record["wall_s"] = 0.5
    assert set(record) <= set(RECORD)
    timing = timing_section(
        [1e-3, 2e-3], timer="perf_counter", resolution_s=1e-9, flushed=True, warmup=3, stopped_by="noise"
    )
    assert set(timing) | set(empty_timing()) <= set(RECORD["timing"]["properties"])
    parity = {f for f in Parity.__dataclass_fields__ if f != "reason"} | {"exact", "after_timing"}
    assert parity | set(empty_parity()) <= set(RECORD["parity"]["properties"])
    assert set(empty_metrics()) <= set(RECORD["metrics"]["properties"])


def test_validate_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = make_doc()
    doc["records"][0]["metrics"]["tflops"] = -1.0
    doc["records"][0]["status"], doc["records"][0]["reason"] = "weird", "made up"
    doc["records"][1]["reason"] = ""
    path = _write(tmp_path / "bad.json", doc)
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{path}: invalid results file: 3 problem(s)"
    assert err[1:] == [
        "  records[0].status: 'weird' is not one of ok, skipped, compile_error, runtime_error, parity_failed, "
        "implausible, timeout, crashed",
        "  records[0].metrics.tflops: -1.0 is below the minimum 0",
        "  records[1].reason: '' must not be empty",
    ]
    with pytest.raises(UserError, match=r"invalid results file: records\[0\].status: .* \(and 2 more\)"):
        results.load(path)


def _conditions(node: Any, inside: bool = False) -> Iterator[int]:
    """The ids of every schema node within an ``if`` (walked to choose ``then`` or ``else``)."""
    if isinstance(node, dict):
        if inside:
            yield id(node)
        for key, sub in node.items():
            yield from _conditions(sub, inside or key == "if")
    elif isinstance(node, list):
        for sub in node:
            yield from _conditions(sub, inside)


def test_a_valid_document_is_answered_by_the_quick_checks_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """What keeps a 200,000-record file fast: no keyword-by-keyword walk of a valid document
    (only a failed record's ``if`` is walked, to choose its branch)."""
    validator = Validator(SCHEMA)
    doc = specimen()
    doc["records"] = [copy.deepcopy(r) for r in doc["records"] for _ in range(50)]
    conditions, walked = set(_conditions(SCHEMA)), []
    real = validator._walk

    def walk(node: Any, *args: Any) -> None:
        walked.append(id(node))
        real(node, *args)

    monkeypatch.setattr(validator, "_walk", walk)
    assert validator.problems(doc) == []
    assert walked and set(walked) <= conditions
    doc["records"][7]["timing"]["cv"] = -1.0
    assert validator.problems(doc) == [(("records", 7, "timing", "cv"), "-1.0 is below the minimum 0")]
    assert not set(walked) <= conditions


def test_numbers_of_other_float_types_are_numbers() -> None:
    doc = make_doc()
    doc["records"][0]["metrics"]["tflops"] = np.float64(0.5)
    doc["records"][0]["timing"]["n"] = 20.0  # an integral float is an integer, as JSON Schema says
    assert results.validate(doc) == []
    doc["records"][0]["metrics"]["tflops"] = np.float64("nan")
    assert results.validate(doc) == ["records[0].metrics.tflops: nan is not a finite number"]


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, '{"a": ' + "9" * 5000 + "}"], ids=["deep", "long-number"]
)
def test_unreadable_json_is_one_line(text: str, tmp_path: Path) -> None:
    path = tmp_path / "odd.json"
    path.write_text(text)
    with pytest.raises(UserError, match="not a JSON document hwbench can read"):
        results.load(path)
