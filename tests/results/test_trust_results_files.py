"""Results files at the edges: the schema of every version the loader reads shipped and true to
its files, numbers finite as doubles wherever they are, a byte order mark passed over and a key
given twice refused, the same by every command that reads a results file."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import needs
import pytest
from test_results import make_doc
from test_results_validity import _rfc3339, mutants, specimen

from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.results import files as results
from hwbench.results.checked import load_checked
from hwbench.results.schema.validator import Validator

try:
    import orjson
except ImportError:
    orjson = None

ROOT = Path(__file__).resolve().parents[2]
V1_FILE = ROOT / "results" / "cpu-epyc-2core-standard.json"
DATA = Path(__file__).resolve().parents[1] / "data"
#: Every version the loader reads: the oldest it migrates from up to the current one.
VERSIONS = range(min(results.MIGRATIONS), results.SCHEMA_VERSION + 1)


@pytest.fixture(params=["orjson", "json"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each parser in turn: orjson where installed, then json alone (as without orjson)."""
    if request.param == "orjson" and orjson is None:
        pytest.skip("orjson is not installed: json parses every document")
    if request.param == "json":
        monkeypatch.setattr(results, "_orjson", None)
    return str(request.param)


def _reference(version: int) -> Any:
    """jsonschema's validator of the shipped schema of ``version``, as check-jsonschema runs it."""
    jsonschema = needs.module("jsonschema")
    schema = results.schema(version)
    jsonschema.Draft202012Validator.check_schema(schema)
    checker = jsonschema.FormatChecker()
    checker.checks("date-time")(lambda value: not isinstance(value, str) or _rfc3339(value))
    return jsonschema.Draft202012Validator(schema, format_checker=checker)


def _as_v1(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as a version 1 file holds it: no record of the status version 2 added."""
    doc = copy.deepcopy(doc)
    doc["schema_version"] = 1
    doc["records"] = [r for r in doc["records"] if r["status"] != "implausible"]
    return doc


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- item 7: the schema of every version read, and validate's word on the version ---------------


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_the_loader_reads_has_its_schema_shipped(version: int) -> None:
    assert results.schema_shipped(version)
    schema = results.schema(version)
    assert schema["properties"]["schema_version"] == {"const": version}
    assert schema["$id"].endswith(f"/results-v{version}.json") and f"schema_version {version}" in schema["title"]
    Validator(schema)  # uses only what hwbench's own validator checks
    _reference(version)  # and is a valid draft 2020-12 schema


def test_the_version_1_file_in_results_is_valid_against_the_version_1_schema() -> None:
    doc = json.loads(V1_FILE.read_text())
    assert doc["schema_version"] == 1
    assert [e.message for e in _reference(1).iter_errors(doc)] == []
    assert not _reference(2).is_valid(doc)  # the current schema is not the one that describes it
    assert results.validate(doc) == [] and _reference(2).is_valid(results.migrate(copy.deepcopy(doc)))


@pytest.mark.parametrize("path", sorted(DATA.glob("**/*.json")), ids=lambda p: p.name)
def test_version_1_documents_the_loader_accepts_are_valid_version_1(path: Path) -> None:
    doc = _as_v1(json.loads(path.read_text()))
    assert results.validate(doc) == []
    assert _reference(1).is_valid(doc)


def test_the_loader_and_the_version_1_schema_agree_on_valid_and_invalid_documents() -> None:
    reference, doc = _reference(1), _as_v1(specimen())
    assert results.validate(doc) == [] and reference.is_valid(doc)
    disagreements, invalid, total = [], 0, 0
    for what in mutants(doc):
        theirs, mine = not reference.is_valid(doc), bool(results.validate(doc))
        total += 1
        invalid += theirs
        if theirs != mine:
            disagreements.append(
                f"{what}: jsonschema {'in' if theirs else ''}valid, hwbench {'in' if mine else ''}valid"
            )
    assert not disagreements, disagreements[:10]
    assert total > 2000 and 0.3 * total < invalid < total


def test_a_version_1_file_holds_no_status_version_2_added(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _as_v1(make_doc())
    doc["records"][0].update(status="implausible", reason="9000 TFLOPS is above the device's peak")
    assert not _reference(1).is_valid(doc)
    path = _write(tmp_path / "v1.json", json.dumps(doc))
    with pytest.raises(
        UserError, match=r"invalid results file \(schema_version 1\): records\[0\]\.status: 'implausible'"
    ):
        results.load(path)
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{path}: invalid results file (schema_version 1): 1 problem(s)\n")


def test_validate_says_the_file_s_own_version_and_when_it_is_migrated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = len(json.loads(V1_FILE.read_text())["records"])
    assert main(["validate", str(V1_FILE)]) == 0
    assert capsys.readouterr().out == f"{V1_FILE}: valid (schema_version 1, migrated to 2 on load, {records} records)\n"
    current = results.save(make_doc(), tmp_path / "v2.json")
    assert main(["validate", str(current)]) == 0
    assert capsys.readouterr().out == f"{current}: valid (schema_version 2, 2 records)\n"
    assert main(["validate", "--json", str(V1_FILE), str(current)]) == 0
    verdicts = json.loads(capsys.readouterr().out)["files"]
    assert [(v["schema_version"], v["migrated_to"]) for v in verdicts] == [(1, 2), (2, None)]
    assert load_checked(V1_FILE).doc["schema_version"] == 2  # every command reads it as migrated


# --- item 11: every number finite as a double ----------------------------------------------------


def test_an_integer_beyond_a_double_is_refused_by_validate_and_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], parser: str
) -> None:
    text = json.dumps(make_doc(), indent=1)
    assert text.count('"median_s": 0.000125') == 1
    text = text.replace('"median_s": 0.000125', '"median_s": 1' + "0" * 400, 1)
    path = _write(tmp_path / "big.json", text)
    where = "records[0].timing.median_s: an integer of 401 digits is not a finite number"
    assert main(["validate", str(path)]) == 1
    assert where in capsys.readouterr().err
    report = tmp_path / "report.html"
    for command in (["show", str(path)], ["report", str(path), "-o", str(report)], ["compare", str(path), str(path)]):
        assert main(command) == 2, command
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and where in err and "Traceback" not in err, (command, err)
    assert not report.exists()


FREE = {  # numbers where the schema gives no type, and integers where it does
    "host.memory_bytes": ("host", "memory_bytes"),
    "software.blas[1].threads": ("software", "blas"),
    "run.timing.budget_s": ("run", "timing", "budget_s"),
    "records[0].config.threads": ("records", 0, "config", "threads"),
    "records[0].shape.M": ("records", 0, "shape", "M"),
    "records[0].timing.n": ("records", 0, "timing", "n"),
    "host.cpu.cores": ("host", "cpu", "cores"),
}


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = [None, {"threads": value}] if path[-1] == "blas" else value


INTEGER_FIELDS = ("records[0].shape.M", "records[0].timing.n", "host.cpu.cores")  # a float there: not an integer
BAD = {
    "10**400": 10**400,
    "2**1024 - 2**970": 2**1024 - 2**970,
    "-2**1024": -(2**1024),
    "nan": math.nan,
    "inf": math.inf,
}


@pytest.mark.parametrize(
    "where,bad",
    [
        pytest.param(where, value, id=f"{where}={name}")
        for where in FREE
        for name, value in BAD.items()
        if isinstance(value, int) or where not in INTEGER_FIELDS
    ],
)
def test_a_number_a_double_cannot_hold_is_refused_wherever_it_is(where: str, bad: Any, tmp_path: Path) -> None:
    doc = make_doc()
    _set(doc, FREE[where], bad)
    problems = results.validate(doc)
    assert problems and all(p.startswith(f"{where}: ") for p in problems), problems
    assert any("is not a finite number" in p for p in problems), problems
    assert not Validator(results.schema()).is_valid(doc)
    if isinstance(bad, int):  # as written in a file: one line from every loader
        path = _write(tmp_path / "bad.json", json.dumps(doc))
        with pytest.raises(UserError, match=re.escape(f"invalid results file: {where}: ")):
            load_checked(path)


@pytest.mark.parametrize("where", FREE)
@pytest.mark.parametrize(
    "fits", [2**1023, 2**1024 - 2**970 - 1, -(2**1024 - 2**970 - 1)], ids=["2**1023", "max", "min"]
)
def test_an_integer_a_double_holds_is_a_number_like_any_other(where: str, fits: int) -> None:
    doc = make_doc()
    _set(
        doc,
        FREE[where],
        abs(fits) if where in ("records[0].shape.M", "records[0].timing.n", "host.cpu.cores") else fits,
    )
    assert results.validate(doc) == []
    assert math.isfinite(float(abs(fits)))


def test_a_free_value_nested_deeper_than_python_recurses_is_checked(tmp_path: Path) -> None:
    doc = make_doc()
    deep: Any = [math.nan]
    for _ in range(3000):
        deep = [deep]
    doc["software"]["nested"] = deep
    (problem,) = results.validate(doc)
    assert problem.startswith("software.nested[0][0]") and problem.endswith("nan is not a finite number")
    doc["software"]["nested"] = [[[1.0]]]
    assert results.validate(doc) == []


# --- item 16: a byte order mark, a key given twice ----------------------------------------------


def test_a_byte_order_mark_is_passed_over(tmp_path: Path, capsys: pytest.CaptureFixture[str], parser: str) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + results.dumps(make_doc()).encode())
    assert results.load(path) == make_doc()
    assert load_checked(path).doc == make_doc()
    assert main(["validate", str(path)]) == 0
    assert "valid (schema_version 2, 2 records)" in capsys.readouterr().out
    assert main(["show", str(path)]) == 0
    assert main(["compare", str(path), str(path)]) == 0


#: Documents whose keys all differ, each written to trip one shortcut of the duplicate check.
UNIQUE = {
    "plain": '{"a": 1, "b": {"a": 2}}',
    "a string opening with a colon": '{"a": ":x", "b": [":", ":y"]}',
    "a quote and a colon in a string": '{"a": "say \\": here", "b\\"": 1}',
    "an escaped colon": '{"a": "\\u003ax", "b": "\\u003A"}',
    "a key spaced from its colon": '{"a" : 1, "b"\n: 2}',
    "a key ending in a backslash": '{"a\\\\": 1, "a": 2}',
    "non-ASCII escaped": '{"\\u00e9": 1, "\\u00e8": 2}',
    "a quote written as an escape": '{"a": "\\u0022:", "b": 1}',
}
#: The same documents, each with a key given twice, and the key.
REPEATED = {
    "plain": ('{"a": 1, "b": {"a": 2, "a": 3}}', "a"),
    "a string opening with a colon": ('{"a": ":x", "b": [":", ":y"], "b": 1}', "b"),
    "a quote and a colon in a string": ('{"a": "say \\": here", "b\\"": 1, "a": 2}', "a"),
    "an escaped colon": ('{"a": "\\u003ax", "b": "x", "b": "\\u003A"}', "b"),
    "a key spaced from its colon": ('{"a" : 1, "a"\n: 2}', "a"),
    "a key ending in a backslash": ('{"a\\\\": 1, "a\\\\": 2}', "a\\"),
    "non-ASCII escaped": ('{"\\u00e9": 1, "\\u00e9": 2}', "é"),
    "a quote written as an escape": ('{"a": "\\u0022:", "c": 1, "c": 1}', "c"),
    "top level": ('{"kind": "hwbench-results", "kind": "other"}', "kind"),
}


def _results_text(inner: str) -> str:
    """A valid results file with the JSON object ``inner`` as ``software.extra``."""
    text = results.dumps(make_doc())
    return text.replace('"software": {', '"software": {"extra": ' + inner + ",", 1)


@pytest.mark.parametrize("name", UNIQUE)
def test_a_document_whose_keys_all_differ_is_read(name: str, tmp_path: Path, parser: str) -> None:
    path = _write(tmp_path / "r.json", _results_text(UNIQUE[name]))
    assert results.load(path)["software"]["extra"] == json.loads(UNIQUE[name])


@pytest.mark.parametrize("name", REPEATED)
def test_a_key_given_twice_is_refused_naming_it(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], parser: str
) -> None:
    inner, key = REPEATED[name]
    path = _write(tmp_path / "r.json", _results_text(inner))
    line = f"{path}: the key {key!r} is given twice in one object"
    for read in (results.load, results.read, results.read_document, load_checked):
        with pytest.raises(UserError) as caught:
            read(path)
        assert str(caught.value).startswith(line), (read, caught.value)
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err.startswith(line)
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert line in err and err.count("\n") == 1
