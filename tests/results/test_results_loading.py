"""Loading results files fast and exactly as before: orjson parses where it is installed and
reads a document as the standard library's json does, json everywhere else; the schema's
quick checks are written into one function for the whole document."""

from __future__ import annotations

import collections
import json
import math
import random
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_results import make_doc

from hwbench.core.errors import UserError
from hwbench.results import files as results
from hwbench.results.schema.validator import INLINE_DEPTH, Validator

try:
    import orjson
except ImportError:
    orjson = None

NO_ORJSON = "orjson is not installed: json parses every document"

#: Documents where orjson, alone, would read otherwise or fail otherwise than json.
TRICKY = {
    "NaN": '{"a": NaN}',
    "Infinity": '{"a": [Infinity, -Infinity]}',
    "beyond a double": '{"a": 1e400, "b": -1e999}',
    "duplicate keys": '{"b": 1, "a": {"x": 1}, "b": 3, "a": [2]}',
    "2**64": '{"a": 18446744073709551616}',
    "2**64 - 1": '{"a": 18446744073709551615}',
    "below -2**63": '{"a": -9223372036854775809}',
    "30 digits": '{"a": [1, 123456789012345678901234567890]}',
    "5000 digits": '{"a": ' + "9" * 5000 + "}",
    "long fractions": '{"a": 0.00010103092783505155, "b": 1.2345678901234567e-300, "c": 5e-324}',
    "minus zero": '{"a": -0, "b": -0.0, "c": 0e5}',
    "nested 1100 deep": "[" * 1100 + "]" * 1100,
    "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "lone surrogate": '{"a": "\\ud800"}',
    "surrogate pair": '{"\\ud83d\\ude00": "\\u00e9"}',
    "non-ASCII": '{"é": "ü\u2028", "a": "日本"}',
    "byte order mark": '\ufeff{"a": 1}',
    "control character": '{"a": "\x01"}',
    "truncated": '{"a": [1, 2',
    "extra data": '{"a": 1} x',
    "leading zero": '{"a": 01}',
    "empty": "",
    "blank": " \n\t",
    "digits in a string": '{"id": " 12345678901234567890123"}',
    "top-level number": "123456789012345678901234567890",
}


def exact(value: Any) -> Any:
    """``value`` with every type, key order and float bit pattern spelled out (NaN equals NaN)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, list):
        return ("list", [exact(v) for v in value])
    assert type(value) is dict, type(value)
    return ("dict", [(k, exact(v)) for k, v in value.items()])


def outcome(parse: Any, text: str) -> Any:
    """What ``parse(text)`` gives: the exact value, or the kind and message of its error."""
    try:
        return exact(parse(text))
    except (ValueError, RecursionError) as exc:
        return (type(exc).__name__, str(exc))


@pytest.fixture(params=["orjson", "json"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each parser in turn: orjson first where installed, or json alone (as without orjson)."""
    if request.param == "orjson" and orjson is None:
        pytest.skip(NO_ORJSON)
    if request.param == "json":
        monkeypatch.setattr(results, "_orjson", None)
    return str(request.param)


class Counting:
    """orjson, counting the documents it parsed (it stands for the module in ``results``)."""

    def __init__(self) -> None:
        assert orjson is not None
        self.JSONDecodeError = orjson.JSONDecodeError
        self.parsed = 0

    def loads(self, text: str) -> Any:
        assert orjson is not None
        self.parsed += 1
        return orjson.loads(text)


@pytest.mark.parametrize("text", TRICKY.values(), ids=TRICKY.keys())
def test_every_parser_reads_a_document_as_json_does(text: str, parser: str) -> None:
    assert outcome(results.parse, text) == outcome(json.loads, text)


def test_random_numbers_are_read_to_the_same_bits(parser: str) -> None:
    rng = random.Random(7)
    numbers = [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(3000)]
    written = [f"{x!r}" for x in numbers if math.isfinite(x)] + [f"{x:.25e}" for x in numbers if math.isfinite(x)]
    written += [str(rng.randrange(-(2**70), 2**70)) for _ in range(500)]  # integers within and beyond 64 bits
    text = "[" + ", ".join(written) + "]"
    assert outcome(results.parse, text) == outcome(json.loads, text)


@pytest.mark.skipif(orjson is None, reason=NO_ORJSON)
def test_orjson_parses_a_results_file_where_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting()
    monkeypatch.setattr(results, "_orjson", counting)
    path = results.save(make_doc(), tmp_path / "r.json")
    assert exact(results.load(path)) == exact(results.migrate(json.loads(path.read_text())))
    assert counting.parsed == 1


@pytest.mark.skipif(orjson is None, reason=NO_ORJSON)
@pytest.mark.parametrize(
    "text,by_orjson",
    [
        ('{"a": 0.00010103092783505155, "b": [0.0051893812244897955]}', True),  # long fractions: orjson reads them
        ('{"a": 999999999999999999, "b": 1e19}', True),  # 18 digits: orjson
        ('{"a": 18446744073709551616}', False),  # beyond 64 bits: json alone
        ('{"a":[-99999999999999999999]}', False),
        ('{"a":\n 10000000000000000000}', False),  # 19 digits or more after a space: json, to be sure
        ('{"id": "x 1234567890123456789012"}', False),  # in a string: json too (slower, the same)
    ],
)
def test_an_integer_beyond_64_bits_is_read_by_json(text: str, by_orjson: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    counting = Counting()
    monkeypatch.setattr(results, "_orjson", counting)
    assert exact(results.parse(text)) == exact(json.loads(text))
    assert counting.parsed == int(by_orjson)


@pytest.mark.skipif(orjson is None, reason=NO_ORJSON)
def test_a_long_integer_across_two_pieces_of_the_scan_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "_SCAN_CHUNK", 16)
    for pad in range(40):
        text = '{"p": "' + "x" * pad + '", "a": 18446744073709551616}'
        value = results.parse(text)["a"]
        assert type(value) is int and value == 2**64, pad


FILES = {
    "NaN figure": '{"schema_version": 2, "records": [NaN]}',
    "nested too deep": "[" * 100_000 + "]" * 100_000,
    "5000 digits": '{"a": ' + "9" * 5000 + "}",
    "truncated": '{"schema_version": 2, "records": [',
    "top level a list": "[1, 2]",
    "byte order mark": '\ufeff{"a": 1}',
}


def test_a_bad_file_is_refused_with_the_same_line_by_either_parser(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if orjson is None:
        pytest.skip(NO_ORJSON)
    paths = {name: tmp_path / f"{i}.json" for i, name in enumerate(FILES)}
    for name, text in FILES.items():
        paths[name].write_text(text, encoding="utf-8")
    (tmp_path / "binary.json").write_bytes(b'{"a": "\xff"}')
    (tmp_path / "empty.json").write_bytes(b"")
    doc = make_doc()
    doc["records"][0]["metrics"]["tflops"] = math.nan
    (tmp_path / "nan.json").write_text(json.dumps(doc), encoding="utf-8")  # as Python writes it: NaN
    messages: dict[str, list[str]] = {"orjson": [], "json": []}
    for which in messages:
        if which == "json":
            monkeypatch.setattr(results, "_orjson", None)
        for path in sorted(tmp_path.iterdir()):
            with pytest.raises(UserError) as caught:
                results.load(path)
            messages[which].append(str(caught.value))
    assert messages["orjson"] == messages["json"]
    assert any("nan is not a finite number" in m for m in messages["json"])
    assert all("\n" not in m for m in messages["json"])


def test_without_orjson_installed_the_files_load_with_json(tmp_path: Path) -> None:
    """As on a machine where hwbench was installed without its dependencies."""
    path = results.save(make_doc(), tmp_path / "r.json")
    code = (
        "import sys; sys.modules['orjson'] = None\n"  # import orjson now fails as if it were not installed
        "from hwbench.results import files\n"
        "assert files._orjson is None\n"
        "print(len(files.load(sys.argv[1])['records']))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(make_doc()["records"]))


def _nested(levels: int) -> dict[str, Any]:
    """A schema of ``levels`` closed objects one inside the other, each with a count ``n``."""
    node: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}
    node["additionalProperties"] = False
    for _ in range(levels - 1):
        node = {
            "type": "object",
            "properties": {"n": {"type": "integer", "minimum": 0}, "inner": node},
            "required": ["inner"],
            "additionalProperties": False,
        }
    return node


def test_a_schema_deeper_than_what_is_written_inline_is_checked_to_the_bottom() -> None:
    levels = 3 * INLINE_DEPTH
    validator = Validator(_nested(levels))
    doc: dict[str, Any] = {"n": 1}
    for _ in range(levels - 1):
        doc = {"n": 1, "inner": doc}
    assert validator.problems(doc) == []
    bottom = doc
    for _ in range(levels - 1):
        bottom = bottom["inner"]
    bottom["n"] = -1
    path = ("inner",) * (levels - 1) + ("n",)
    assert validator.problems(doc) == [(path, "-1 is below the minimum 0")]
    bottom["n"] = 1
    bottom["extra"] = 1
    assert [message for _, message in validator.problems(doc)] == [
        "unknown key 'extra' (not in this schema_version: a newer hwbench may have written it)"
    ]


def test_a_recursive_reference_is_checked_at_every_level() -> None:
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                "required": ["v"],
                "additionalProperties": False,
            }
        },
        "$ref": "#/$defs/node",
    }
    validator = Validator(tree)
    doc: dict[str, Any] = {"v": 0}
    for depth in range(30):
        doc = {"v": depth, "kids": [doc, {"v": -depth}]}
    assert validator.problems(doc) == []
    leaf = doc
    for _ in range(30):
        leaf = leaf["kids"][0]
    leaf["v"] = "zero"
    assert validator.problems(doc) == [(("kids", 0) * 30 + ("v",), "'zero' is not an integer")]


def test_a_mapping_of_another_type_is_checked_by_the_walk_and_left_as_it_was() -> None:
    doc = make_doc()
    record = doc["records"][0]
    del record["timing"]
    doc["records"][0] = collections.defaultdict(dict, record)
    assert results.validate(doc) == ["records[0]: 'timing' is required"]
    assert "timing" not in doc["records"][0]  # never added by a look-up
    doc = make_doc()
    doc["records"][0] = collections.OrderedDict(doc["records"][0])
    assert results.validate(doc) == []


@pytest.mark.parametrize("bound", [0, 0.5, -3, 2**53 + 1, 2**80, 10**400])
@pytest.mark.parametrize("keyword", ["minimum", "exclusiveMinimum"])
def test_a_bound_holds_for_floats_and_integers_alike(bound: Any, keyword: str, monkeypatch: pytest.MonkeyPatch) -> None:
    validator = Validator({"type": "number", keyword: bound})
    monkeypatch.setattr(validator, "_walk", lambda *args: pytest.fail("a valid number was walked"))
    near = [bound - 1, bound, bound + 1] if isinstance(bound, int) else [bound - 0.25, bound, bound + 0.25]
    try:
        near += [math.nextafter(float(bound), -math.inf), float(bound), math.nextafter(float(bound), math.inf)]
    except OverflowError:  # no float that near: the largest float is below it
        near += [sys.float_info.max]
    for value in near:
        valid = value >= bound if keyword == "minimum" else value > bound
        valid = valid and value < 2**1024 - 2**970  # an integer beyond a double's range is never a finite number
        if valid:
            assert validator.problems(value) == [], value
        else:
            monkeypatch.undo()
            assert validator.problems(value), value
            monkeypatch.setattr(validator, "_walk", lambda *args: pytest.fail("a valid number was walked"))


def test_an_integer_beyond_any_float_is_not_a_finite_figure(tmp_path: Path, parser: str) -> None:
    doc = make_doc()
    doc["records"][0]["metrics"]["tflops"] = 2**1023  # the largest power of two a double holds: valid
    path = results.save(doc, tmp_path / "big.json")
    assert results.load(path)["records"][0]["metrics"]["tflops"] == 2**1023
    doc["records"][0]["metrics"]["tflops"] = 10**400  # a double cannot hold it: float() of it overflows
    path = results.save(doc, tmp_path / "bad.json")
    with pytest.raises(UserError, match=r"records\[0\]\.metrics\.tflops: an integer of 401 digits is not a finite"):
        results.load(path)
