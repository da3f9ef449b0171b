"""Shared test set-up: compiler and runtime caches go to a temporary folder, never $HOME."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# One folder for the whole test session, pytest runs that tests start included (they inherit
# it), removed when the session that made it ends.
if "HWBENCH_TEST_CACHE" in os.environ:
    _CACHE = Path(os.environ["HWBENCH_TEST_CACHE"])
else:
    _CACHE = Path(tempfile.mkdtemp(prefix="hwbench-test-cache-"))
    os.environ["HWBENCH_TEST_CACHE"] = str(_CACHE)
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
for _var in ("TRITON_CACHE_DIR", "POCL_CACHE_DIR", "CUDA_CACHE_PATH", "CUPY_CACHE_DIR", "XDG_CACHE_HOME"):
    os.environ.setdefault(_var, str(_CACHE / _var.lower()))

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def faulty_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Environment in which the test-only 'faulty' backend (tests/fakes/backend.py: faulty) is registered."""
    from hwbench.core.registry import get_backend

    monkeypatch.setenv("HWBENCH_BACKENDS", "faulty=fakes.backend:faulty")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    get_backend.cache_clear()
    yield dict(os.environ)
    get_backend.cache_clear()


def hwbench_cmd(*args: str) -> list[str]:
    """Command line running the hwbench CLI with this interpreter."""
    return [sys.executable, "-m", "hwbench", *args]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets the markers ``tests/needs.py`` gives its module and name (the test tiers)."""
    from needs import markers_of  # tests/ is on sys.path under pytest's rootdir conftest

    for item in items:
        module = Path(str(item.fspath)).stem
        for marker in markers_of(module, getattr(item, "originalname", item.name)):
            item.add_marker(getattr(pytest.mark, marker))
