"""tests/needs.py, what tests need installed: every optional import a test skips without goes through
``needs.module``, and every module it is asked for has a line saying what installs it."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path

import needs
import pytest

from hwbench.core.loading import tomllib

TESTS = Path(__file__).resolve().parents[1]


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    yield from (node for node in ast.walk(tree) if isinstance(node, ast.Call))


def _trees() -> Iterator[tuple[Path, ast.AST]]:
    for path in sorted(TESTS.rglob("*.py")):
        if path.name != "needs.py" and "data" not in path.relative_to(TESTS).parts:
            yield path, ast.parse(path.read_text(), str(path))


def test_no_test_calls_importorskip_itself() -> None:
    direct = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            named = isinstance(node, ast.Attribute) and node.attr == "importorskip"
            named |= isinstance(node, ast.Name) and node.id == "importorskip"
            named |= isinstance(node, ast.ImportFrom) and any(a.name == "importorskip" for a in node.names)
            if named:
                direct.append(f"{path.relative_to(TESTS)}:{getattr(node, 'lineno', '?')}")
    assert not direct, f"call needs.module instead of pytest.importorskip: {direct}"


def test_every_module_asked_for_says_what_installs_it() -> None:
    asked = set()
    for path, tree in _trees():
        if path == Path(__file__).resolve():
            continue  # this file asks for made-up modules, with lines of their own
        for call in _calls(tree):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "module" and getattr(func.value, "id", "") == "needs":
                assert call.args and isinstance(call.args[0], ast.Constant), ast.unparse(call)
                asked.add(call.args[0].value)
    assert {"llvmlite", "torch", "triton", "pyopencl"} <= asked  # the scan sees the calls
    missing = []
    for name in sorted(asked):
        try:
            needs.install_hint(name)
        except LookupError:
            missing.append(name)
    assert not missing, f"add these to tests/needs.py INSTALLS: {missing}"


def test_every_hint_names_an_extra_pyproject_has_or_a_package() -> None:
    extras = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, hint in needs.INSTALLS.items():
        assert hint.startswith("pip install "), (name, hint)
        named = re.findall(r"'\.\[([\w-]+)\]'", hint)
        assert set(named) <= set(extras), (name, hint)
        if not named:
            assert "in no extra" in hint, (name, hint)  # then it says why no extra has it
        if named:
            # the first extra named carries the module's distribution (its own name, or the one in brackets)
            distribution = re.search(r"\(([\w-]+)\)$", hint)
            wanted = (distribution.group(1) if distribution else name).lower()
            assert any(re.split(r"[<>=; \[]", req)[0].lower() == wanted for req in extras[named[0]]), (name, hint)


def test_a_missing_module_skips_with_why_and_what_installs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(needs.INSTALLS, "hwbench_absent", "pip install hwbench-absent")
    with pytest.raises(pytest.skip.Exception) as skipped:
        needs.module("hwbench_absent.sub", "the test reads its tables")
    assert str(skipped.value) == (
        "hwbench_absent.sub is not installed (the test reads its tables): pip install hwbench-absent"
    )
    assert skipped.value.allow_module_level  # a test module may call it at its top
    with pytest.raises(pytest.skip.Exception, match=r"^hwbench_absent is not installed: pip install"):
        needs.module("hwbench_absent")


def test_an_installed_module_comes_back_unless_older_than_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(needs.INSTALLS, "json", "pip install json")
    assert needs.module("json") is json
    monkeypatch.setattr(json, "__version__", "2.0.9")
    assert needs.module("json", minversion="2.0") is json
    with pytest.raises(pytest.skip.Exception, match="required is: '2.1'"):
        needs.module("json", minversion="2.1")


def test_a_module_without_a_line_is_an_error_not_a_skip() -> None:
    with pytest.raises(LookupError, match="no line in tests/needs.py INSTALLS"):
        needs.module("json")
    assert needs.install_hint("torch.distributed") == needs.INSTALLS["torch"]
