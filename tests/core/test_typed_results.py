"""The TypedDicts of ``hwbench.core.results_types`` and ``hwbench.core.burn_types`` against the
results schema and real runs (``hwbench run``, ``run --tune`` and ``hwbench burn``).

Walking the schema from the document down beside the TypedDicts' type hints, every key a class
declares is a property of its schema object, its required keys are the object's ``required``,
every property of the object is declared, and each value's type admits the JSON types the schema
allows (null included). A ``Described...`` class adds keys only where the schema leaves the object
open; an object the schema names keys of only through ``required`` declares those keys. A document
written by ``hwbench run`` (or ``burn``) then holds, at every level, the required keys and only
declared ones, each of its declared type.
"""

from __future__ import annotations

import json
import os
import types
import typing
from pathlib import Path
from typing import Any, Union

import pytest
from conftest import TESTS

from hwbench.cli.main import main
from hwbench.core import burn_types as bt
from hwbench.core import results_types as rt
from hwbench.core.records import SCHEMA_VERSION
from hwbench.core.registry import get_backend
from hwbench.results import files

#: A class that adds what hwbench writes beyond the schema -> the class that is the schema's object.
EXTENSIONS: dict[type, type] = {
    rt.DescribedDevice: rt.Device,
    rt.DescribedPeak: rt.Peak,
    rt.DescribedCpu: rt.Cpu,
    rt.DescribedHost: rt.Host,
    rt.BackendDescription: rt.BackendEntry,
}
#: Schema objects with properties that the types leave a free mapping: (class, key) -> why.
FREE = {
    (rt.Record, "config"): "an implementation's own configuration keys (and tuning)",
    **{
        (rt.Document, section): "an optional section, written by the one command or option that measures it"
        for section in ("sensors", "collective", "compile", "roofs", "search", "health")
    },
}
#: JSON Schema type -> the Python type a value of it is.
JSON_TYPES = {"string": str, "number": float, "integer": int, "boolean": bool, "null": type(None), "array": list}


def _typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and typing.is_typeddict(hint)


def _members(hint: Any) -> tuple[Any, ...]:
    """The members of a union (``X | None``), else the hint itself."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = schema
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _schema_types(node: dict[str, Any]) -> set[type]:
    """The Python types of the values ``node`` allows (dict for an object)."""
    if "const" in node:
        return {type(node["const"])}
    if "enum" in node:
        return {type(v) for v in node["enum"]}
    kinds = node.get("type", [])
    return {dict if k == "object" else JSON_TYPES[k] for k in ([kinds] if isinstance(kinds, str) else kinds)}


def _hint_types(hint: Any) -> set[type]:
    found: set[type] = set()
    for member in _members(hint):
        origin = typing.get_origin(member) or member
        found.add(dict if _typeddict(member) else origin)
    return found


def _own_keys(cls: type) -> tuple[set[str], set[str]]:
    """The keys and required keys of the schema's part of ``cls`` (its base, for an extension)."""
    base = EXTENSIONS.get(cls, cls)
    return set(typing.get_type_hints(base)), set(base.__required_keys__)  # type: ignore[attr-defined]


def _walk(schema: dict[str, Any], cls: type, node: dict[str, Any], where: str, seen: dict[type, str]) -> None:
    """Check ``cls`` against the schema object ``node`` and go down into the classes its keys hold."""
    seen.setdefault(cls, where)
    seen.setdefault(EXTENSIONS.get(cls, cls), where)
    node = _resolve(schema, node)
    # An object naming its keys only as required (a tuning item's ``dropped``) leaves their values open.
    properties = node.get("properties") or {key: {} for key in node.get("required", [])}
    keys, required = _own_keys(cls)
    assert keys == set(properties), (
        f"{cls.__name__} ({where}): declared but not in the schema: {sorted(keys - set(properties))}; "
        f"in the schema but not declared: {sorted(set(properties) - keys)}"
    )
    assert required == set(node.get("required", [])), f"{cls.__name__} ({where}): required keys differ"
    if cls in EXTENSIONS:
        assert node.get("additionalProperties", True) is not False, f"{cls.__name__}: {where} is closed"
        beyond = set(typing.get_type_hints(cls)) - keys
        assert beyond and not beyond & set(properties), cls.__name__
        assert not beyond & set(cls.__required_keys__), f"{cls.__name__}: keys beyond the schema are optional"  # type: ignore[attr-defined]
    hints = typing.get_type_hints(cls)
    for key in sorted(keys):
        prop = _resolve(schema, properties[key])
        hint = hints[key]
        assert _hint_types(hint) == _schema_types(prop) or (
            "type" not in prop and "enum" not in prop and "const" not in prop
        ), f"{cls.__name__}.{key}: {hint} against the schema's {prop.get('type', prop.get('enum'))}"
        for member in _members(hint):
            if typing.get_origin(member) is list and "items" in prop:
                (member,) = typing.get_args(member)
                prop = _resolve(schema, prop["items"])
            if _typeddict(member):
                _walk(schema, member, prop, f"{where}/{key}", seen)
            elif prop.get("properties") and member is not type(None):
                assert (cls, key) in FREE, f"{cls.__name__}.{key}: the schema gives its properties, the type none"


def test_each_typed_dict_declares_its_schema_object() -> None:
    schema = files.schema()
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    seen: dict[type, str] = {}
    _walk(schema, rt.Document, schema, "#", seen)
    _walk(schema, rt.BackendDescription, schema["properties"]["backends"]["items"], "#/backends", seen)
    declared = {
        v for v in vars(rt).values() if _typeddict(v) and v.__module__ == rt.__name__ and not v.__name__.startswith("_")
    }
    assert declared - set(seen) == {rt.Implementation}  # not in results files: checked against a description below
    burn_declared = {
        v for v in vars(bt).values() if _typeddict(v) and v.__module__ == bt.__name__ and not v.__name__.startswith("_")
    }
    assert burn_declared - set(seen) == {bt.BurnFigures}  # a part of BurnEntry, checked below
    assert seen[bt.BurnEntry] == "#/burn" and seen[bt.TuningEntry] == "#/tuning"


def test_the_burn_figures_are_a_part_of_the_burn_entry() -> None:
    figures, entry = typing.get_type_hints(bt.BurnFigures), typing.get_type_hints(bt.BurnEntry)
    assert figures == {key: entry[key] for key in figures}
    assert bt.BurnFigures.__required_keys__ == bt.BurnEntry.__required_keys__ & set(figures)


def _check(value: Any, hint: Any, where: str) -> None:
    """``value`` is of type ``hint``: a TypedDict's required keys present and only declared ones."""
    members = _members(hint)
    if len(members) > 1:
        problems = []
        for member in members:
            try:
                _check(value, member, where)
                return
            except AssertionError as exc:
                problems.append(str(exc))
        raise AssertionError(f"{where}: {value!r} is none of {hint}: {problems}")
    if hint is Any:
        return
    if hint is type(None):
        assert value is None, f"{where}: {value!r} is not None"
    elif _typeddict(hint):
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        hints = typing.get_type_hints(hint)
        missing = set(hint.__required_keys__) - set(value)
        assert not missing, f"{where}: {hint.__name__} lacks {sorted(missing)}"
        assert set(value) <= set(hints), f"{where}: {hint.__name__} does not declare {sorted(set(value) - set(hints))}"
        for key, item in value.items():
            _check(item, hints[key], f"{where}.{key}")
    elif typing.get_origin(hint) is list:
        assert isinstance(value, list), f"{where}: {value!r} is not a list"
        (item,) = typing.get_args(hint)
        for number, element in enumerate(value):
            _check(element, item, f"{where}[{number}]")
    elif typing.get_origin(hint) is dict:
        assert isinstance(value, dict), f"{where}: {value!r} is not an object"
        key_type, item = typing.get_args(hint)
        for key, element in value.items():
            _check(key, key_type, f"{where} key")
            _check(element, item, f"{where}.{key}")
    elif hint is float:
        assert isinstance(value, (int, float)) and not isinstance(value, bool), f"{where}: {value!r} is not a number"
    else:
        assert isinstance(value, hint) and (hint is bool or not isinstance(value, bool)), (
            f"{where}: {value!r} is not {hint.__name__}"
        )


def test_the_value_check_refuses_what_the_types_do_not_allow() -> None:
    record = json.loads(json.dumps({"max_abs_err": 0.0, "max_rel_err": None, "atol": 1, "rtol": 0.5, "passed": True}))
    _check(record, rt.Parity, "parity")
    for broken in (
        {**record, "passed": "yes"},
        {**record, "unknown": 1},
        {k: v for k, v in record.items() if k != "atol"},
    ):
        with pytest.raises(AssertionError):
            _check(broken, rt.Parity, "parity")


def test_a_run_s_document_holds_the_typed_keys(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    shape = ["--shape", "gemm:M=8,N=8,K=8", "--budget", "0.01", "--quiet"]
    code = main(["run", "--backend", "cpu,cuda", "--kernel", "gemm", "--impl", "numpy,llvm", *shape, "--out", str(out)])
    assert code == 0
    doc = files.load(out)
    statuses = {r["status"] for r in doc["records"]}
    assert {"ok", "skipped"} <= statuses and any(r.get("energy") is None for r in doc["records"])
    assert not files.validate(doc)
    _check(doc, rt.Document, "doc")


def test_a_backend_s_description_holds_the_typed_keys() -> None:
    from hwbench.run.describe import describe_backend

    described = describe_backend("cpu")
    assert described["available"] and described["implementations"]["gemm"]
    _check(json.loads(json.dumps(described)), rt.BackendDescription, "cpu")


def test_a_tuned_run_s_document_holds_the_typed_keys(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    shape = ["--shape", "gemm:M=8,N=8,K=8", "--budget", "0.01", "--tune", "--tune-budget", "1", "--quiet"]
    assert main(["run", "--backend", "cpu", "--kernel", "gemm", "--impl", "llvm", *shape, "--out", str(out)]) == 0
    doc = files.load(out)
    assert doc["tuning"] and not files.validate(doc)
    _check(doc, rt.Document, "doc")


def test_a_burn_s_document_holds_the_typed_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HWBENCH_BACKENDS", "burnfaulty=fakes.backend:burnfaulty")  # a device that burns wrongly
    monkeypatch.setenv("HWBENCH_BURN_FAULT_AT", "120")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    get_backend.cache_clear()
    out = tmp_path / "b.json"
    args = ["--backend", "burnfaulty", "--impl", "flip", "--shape", "gemm:M=24,N=16,K=32", "--check-iterations", "50"]
    try:
        assert main(["burn", *args, "--duration", "1", "--interval", "0.25", "-q", "-o", str(out)]) == 1
    finally:
        get_backend.cache_clear()
    doc = json.loads(out.read_text())
    (entry,) = doc["burn"]
    assert entry["mismatches"] and entry["series"] and not files.validate(doc)
    _check(doc, rt.Document, "doc")
