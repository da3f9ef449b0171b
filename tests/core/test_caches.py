"""Cache folders (hwbench/core/caches.py): a user's writable setting kept, an unwritable one (or an
unwritable default) moved under hwbench's cache folder with a note, hwbench's own fallbacks.

"Not writable" is simulated as root cannot bypass it: HOME=/proc/self (no folder can be made
there) and folders beneath a regular file.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

from hwbench.core import caches
from hwbench.core.caches import TOOLS, CacheChoice, cache_root, choose, ensure_caches, writable

READ_ONLY_HOME = "/proc/self"


@pytest.fixture
def blocker(tmp_path: Path) -> Path:
    """A regular file: nothing can be made beneath it, even by root."""
    path = tmp_path / "a-file"
    path.write_text("")
    return path


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No choice carried over between tests; the temporary-folder fallback inside tmp_path."""
    monkeypatch.setattr(caches, "_CHOSEN", {})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()


def test_writable_is_tried_not_read_from_permission_bits(tmp_path: Path, blocker: Path) -> None:
    assert writable(tmp_path / "new" / "deep")
    assert (tmp_path / "new" / "deep").is_dir() and list((tmp_path / "new" / "deep").iterdir()) == []
    assert not writable(blocker / "below")
    assert not writable(Path(READ_ONLY_HOME) / ".cache")
    assert not writable(blocker)  # a file is not a folder


def test_a_users_writable_setting_is_kept(tmp_path: Path) -> None:
    env = {"HOME": READ_ONLY_HOME, "POCL_CACHE_DIR": str(tmp_path / "mine"), "HWBENCH_CACHE_DIR": str(tmp_path)}
    choice = choose("pocl", env)
    assert choice == CacheChoice("pocl", tmp_path / "mine")
    assert (tmp_path / "mine").is_dir()  # made: PoCL ignores a POCL_CACHE_DIR that does not exist


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_an_unwritable_default_moves_under_hwbenchs_cache(tool: str, tmp_path: Path) -> None:
    env = {"HOME": READ_ONLY_HOME, "HWBENCH_CACHE_DIR": str(tmp_path / "cache")}
    choice = choose(tool, env)
    assert choice.folder == tmp_path / "cache" / TOOLS[tool].subfolder and choice.folder.is_dir()
    assert choice.moved_from is not None and str(choice.moved_from).startswith(READ_ONLY_HOME)
    assert f"{TOOLS[tool].variable}={choice.folder}" in choice.note and "not writable" in choice.note


def test_an_unwritable_setting_of_the_users_moves(tmp_path: Path, blocker: Path) -> None:
    env = {"HOME": str(tmp_path), "TRITON_CACHE_DIR": str(blocker / "triton"), "HWBENCH_CACHE_DIR": str(tmp_path / "c")}
    choice = choose("triton", env)
    assert choice.folder == tmp_path / "c" / "triton"
    assert f"TRITON_CACHE_DIR={blocker / 'triton'} is not writable" in choice.note


def test_pocl_follows_the_cache_home(tmp_path: Path) -> None:
    env = {"HOME": READ_ONLY_HOME, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert choose("pocl", env).folder == tmp_path / "xdg" / "pocl" / "kcache"


def test_hwbenchs_own_folder_falls_back(tmp_path: Path, blocker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert cache_root({"HOME": str(tmp_path / "home")}) == tmp_path / "home" / ".cache" / "hwbench"
    assert cache_root({"HOME": READ_ONLY_HOME}) == tmp_path / "venv" / "var" / "hwbench"
    monkeypatch.setattr(sys, "prefix", str(blocker / "venv"))
    temp = cache_root({"HOME": READ_ONLY_HOME})
    assert temp is not None and temp.parent == tmp_path / "tmp" and temp.name.startswith("hwbench-cache-")
    assert temp.stat().st_mode & 0o777 == 0o700
    monkeypatch.setattr(tempfile, "tempdir", str(blocker))
    assert cache_root({"HOME": READ_ONLY_HOME}) is None
    nowhere = choose("pocl", {"HOME": READ_ONLY_HOME})
    assert nowhere.folder is None and "nor is any cache folder of hwbench's" in nowhere.note


def test_a_temporary_fallback_that_is_a_link_is_refused(
    tmp_path: Path, blocker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(blocker / "venv"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    uid = os.getuid() if hasattr(os, "getuid") else 0
    (tmp_path / "tmp" / f"hwbench-cache-{uid}").symlink_to(elsewhere)
    assert cache_root({"HOME": READ_ONLY_HOME}) is None


def test_ensure_sets_only_the_moved_variables_once(tmp_path: Path) -> None:
    env = {"HOME": READ_ONLY_HOME, "HWBENCH_CACHE_DIR": str(tmp_path / "cache")}
    first = ensure_caches(["xdg", "pocl"], env)
    assert env["XDG_CACHE_HOME"] == str(tmp_path / "cache" / "xdg")
    assert "POCL_CACHE_DIR" not in env  # PoCL's default now lies in the moved cache home
    assert first[1].folder == tmp_path / "cache" / "xdg" / "pocl" / "kcache" and first[1].note == ""
    assert ensure_caches(["xdg", "pocl"], env) == first  # the note of the move survives
