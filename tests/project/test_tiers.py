"""tests/needs.py, the test tiers: it names only test modules that exist and markers pyproject registers,
and conftest applies it (this module is in no tier; the fast tier runs it)."""

from __future__ import annotations

from pathlib import Path

import needs
import pytest

from hwbench.core.loading import tomllib

TESTS = Path(__file__).resolve().parents[1]


def test_the_table_names_existing_modules_and_registered_markers() -> None:
    modules = {p.stem for p in TESTS.rglob("test_*.py")}
    assert set(needs.MODULES) <= modules, set(needs.MODULES) - modules
    assert {key.split("::")[0] for key in needs.TESTS} <= modules
    config = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    registered = {line.split(":")[0] for line in config["markers"]}
    used = {m for marks in [*needs.MODULES.values(), *needs.TESTS.values()] for m in marks}
    assert used <= registered == set(needs.MARKERS)


def test_markers_come_from_the_module_and_the_test() -> None:
    assert needs.markers_of("test_allreduce", "test_x") == ("cluster",)
    assert needs.markers_of("test_stream", "test_values_make_every_result_exact") == ("slow",)
    assert needs.markers_of("test_tiers", "test_markers_come_from_the_module_and_the_test") == ()


def test_conftest_applies_the_table(request: pytest.FixtureRequest) -> None:
    assert not [m.name for m in request.node.iter_markers() if m.name in needs.MARKERS]
