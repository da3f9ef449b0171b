"""Intel's OpenCL CPU runtime beside the system's drivers (backends/opencl_icd.py): the vendors folder
it writes (the loader's drivers plus intel-cpu.icd), a user's OCL_ICD_VENDORS kept, the fallback
when the cache is not writable, the opt-out, nothing left in the temporary folder; and in fresh
processes, the Intel platform listed beside PoCL, or the line saying how to add it.

The folder tests need no OpenCL; the process tests skip, saying why, where pyopencl, the Intel
runtime or an OpenCL device is missing.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import needs
import pytest
from conftest import hwbench_cmd

from hwbench.backends import opencl_icd
from hwbench.backends.opencl_icd import (
    INSTALL_HINT,
    INTEL_ICD,
    INTEL_PLATFORM,
    SYSTEM_VENDORS,
    icd_entries,
    intel_library,
    plan_vendors,
    write_vendors,
)

X86_LINUX = sys.platform == "linux" and platform.machine() == "x86_64"
needs_x86 = pytest.mark.skipif(
    not X86_LINUX, reason=f"Intel's OpenCL CPU runtime is x86_64 Linux only, not {platform.machine()}"
)


@pytest.fixture
def fake_lib(tmp_path: Path) -> Path:
    lib = tmp_path / "prefix" / "lib" / "libintelocl.so"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"\x7fELF")
    return lib


def _env(tmp_path: Path, lib: Path, **more: str) -> dict[str, str]:
    return {"HWBENCH_CACHE_DIR": str(tmp_path / "cache"), "HWBENCH_INTEL_OPENCL_LIB": str(lib), **more}


def _folder(setup: opencl_icd.IcdSetup) -> dict[str, str]:
    """The .icd files of the folder ``setup`` wrote, name -> content, after checking it holds nothing else."""
    assert setup.status == "applied", setup.reason
    assert setup.folder is not None
    files = {p.name: p.read_text() for p in setup.folder.iterdir()}
    assert all(name.endswith(".icd") for name in files), files
    return files


def _user_vendors(tmp_path: Path) -> Path:
    user = tmp_path / "user-vendors"
    user.mkdir()
    (user / "a.icd").write_text("libfoo.so.1\n")
    (user / "b.icd").write_text("\n/opt/bar/libbar.so\n")
    (user / "notes.txt").write_text("not a driver")
    return user


@needs_x86
def test_folder_holds_the_system_drivers_and_intel(tmp_path: Path, fake_lib: Path) -> None:
    setup = plan_vendors(_env(tmp_path, fake_lib))
    files = _folder(setup)
    assert setup.folder is not None and setup.folder.is_relative_to(tmp_path / "cache")
    system = (
        {p.name: p.read_text().strip() for p in Path(SYSTEM_VENDORS).glob("*.icd")}
        if Path(SYSTEM_VENDORS).is_dir()
        else {}
    )
    system = {name: line for name, line in system.items() if line}
    assert files == {
        **{n: f"{line.splitlines()[0]}\n" for n, line in system.items()},
        INTEL_ICD: f"{fake_lib.resolve()}\n",
    }
    again = plan_vendors(_env(tmp_path, fake_lib))
    assert again.folder == setup.folder and _folder(again) == files


@needs_x86
def test_a_users_vendors_are_kept(tmp_path: Path, fake_lib: Path) -> None:
    user = _user_vendors(tmp_path)
    files = _folder(plan_vendors(_env(tmp_path, fake_lib, OCL_ICD_VENDORS=str(user))))
    assert files == {"a.icd": "libfoo.so.1\n", "b.icd": "/opt/bar/libbar.so\n", INTEL_ICD: f"{fake_lib}\n"}
    one = _folder(plan_vendors(_env(tmp_path, fake_lib, OCL_ICD_VENDORS=str(user / "b.icd"))))
    assert one == {"b.icd": "/opt/bar/libbar.so\n", INTEL_ICD: f"{fake_lib}\n"}
    library = _folder(plan_vendors(_env(tmp_path, fake_lib, OCL_ICD_VENDORS="libpocl.so.2")))
    assert library == {"libpocl.so.2.icd": "libpocl.so.2\n", INTEL_ICD: f"{fake_lib}\n"}
    older = _folder(plan_vendors(_env(tmp_path, fake_lib, OPENCL_VENDOR_PATH=str(user))))
    assert set(older) == {"a.icd", "b.icd", INTEL_ICD}


@needs_x86
def test_a_set_that_has_intel_already_is_left_alone(tmp_path: Path, fake_lib: Path) -> None:
    user = _user_vendors(tmp_path)
    (user / "intel.icd").write_text("/opt/intel/oclcpuexp/x64/libintelocl.so\n")
    setup = plan_vendors(_env(tmp_path, fake_lib, OCL_ICD_VENDORS=str(user)))
    assert setup.status == "present" and setup.folder is None
    assert not (tmp_path / "cache").exists()


@needs_x86
def test_nothing_once_the_loader_ran(tmp_path: Path, fake_lib: Path) -> None:
    user = _user_vendors(tmp_path)
    setup = plan_vendors(_env(tmp_path, fake_lib, OCL_ICD_VENDORS=str(user)), loaded={"libbar.so"})
    assert setup.status == "late" and setup.folder is None and "already ran" in setup.reason


@needs_x86
def test_an_unwritable_cache_falls_back(tmp_path: Path, fake_lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder below a file cannot be made, even by root
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    setup = plan_vendors(_env(tmp_path, fake_lib, HWBENCH_CACHE_DIR=str(blocker / "cache")))
    assert setup.folder is not None and setup.folder.is_relative_to(tmp_path / "venv" / "var" / "hwbench")
    assert _folder(setup)[INTEL_ICD] == f"{fake_lib}\n"
    assert write_vendors({"x.icd": "libx.so"}, [blocker / "a", blocker / "b"]) is None
    monkeypatch.setattr(sys, "prefix", str(blocker / "venv"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    in_temp = plan_vendors(_env(tmp_path, fake_lib, HWBENCH_CACHE_DIR=str(blocker / "cache")))
    assert in_temp.folder is not None and in_temp.folder.is_relative_to(tmp_path / "tmp")  # this user's own
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    nowhere = plan_vendors(_env(tmp_path, fake_lib, HWBENCH_CACHE_DIR=str(blocker / "cache")))
    assert nowhere.status == "unwritable" and nowhere.folder is None
    assert str(blocker / "cache") in nowhere.reason and str(blocker / "venv") in nowhere.reason


def test_opting_out_and_a_missing_library(tmp_path: Path, fake_lib: Path) -> None:
    off = plan_vendors(_env(tmp_path, fake_lib, HWBENCH_INTEL_OPENCL="0"))
    assert off.status == "disabled" and off.folder is None and not (tmp_path / "cache").exists()
    if X86_LINUX:
        absent = plan_vendors(_env(tmp_path, tmp_path / "nonexistent"))
        assert absent.status == "absent" and absent.reason == INSTALL_HINT and absent.folder is None


def test_the_library_is_found_in_the_environments_lib(fake_lib: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", str(fake_lib.parent.parent))
    assert intel_library({}) == fake_lib.resolve()
    assert intel_library({"HWBENCH_INTEL_OPENCL_LIB": str(fake_lib.parent / "missing.so")}) is None


@needs_x86
def test_nothing_is_left_in_the_temporary_folder(
    tmp_path: Path, fake_lib: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    setup = plan_vendors(_env(tmp_path, fake_lib, OCL_ICD_VENDORS=str(_user_vendors(tmp_path))))
    _folder(setup)  # no temporary files beside the .icd ones
    assert list(temp.iterdir()) == []
    # Not even passing through it: with a temporary folder that cannot be written the folder is still built.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing-tmp"))
    assert _folder(plan_vendors(_env(tmp_path / "second", fake_lib)))[INTEL_ICD] == f"{fake_lib}\n"


def test_concurrent_writers_agree(tmp_path: Path) -> None:
    entries = {f"v{i}.icd": f"/opt/v{i}/libv.so" for i in range(20)}
    folders: list[Path | None] = []
    threads = [threading.Thread(target=lambda: folders.append(write_vendors(entries, [tmp_path]))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(folders)) == 1 and folders[0] is not None
    assert {p.name: p.read_text() for p in folders[0].iterdir()} == {n: f"{v}\n" for n, v in entries.items()}


def test_icd_entries_skip_what_is_not_a_driver(tmp_path: Path) -> None:
    user = _user_vendors(tmp_path)
    (user / "empty.icd").write_text("\n")
    assert icd_entries(str(user)) == {"a.icd": "libfoo.so.1", "b.icd": "/opt/bar/libbar.so"}
    assert icd_entries(str(tmp_path / "missing-dir" / "x.icd")) == {}


def _child_env(tmp_path: Path, **more: str) -> dict[str, str]:
    """A fresh process's environment: the loader's default drivers, caches under ``tmp_path``."""
    drop = ("OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH", "HWBENCH_INTEL_OPENCL", "HWBENCH_INTEL_OPENCL_LIB")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(HWBENCH_CACHE_DIR=str(tmp_path / "cache"), POCL_CACHE_DIR=str(tmp_path / "pocl"))
    env.update(PYOPENCL_CACHE_DIR=str(tmp_path / "pyopencl"), XDG_CACHE_HOME=str(tmp_path / "xdg"), **more)
    return env


def _list_opencl(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = hwbench_cmd("list", "--backend", "opencl", *args)
    done = subprocess.run(cmd, env=_child_env(tmp_path, **env), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


@needs_x86
def test_hwbench_list_shows_intel_beside_pocl(tmp_path: Path) -> None:
    if intel_library() is None:
        pytest.skip(f"{INSTALL_HINT} (no libintelocl.so under {sys.prefix}/lib)")
    (backend,) = json.loads(_list_opencl(tmp_path, "--json").stdout)["backends"]
    if not backend["available"]:
        pytest.skip(f"OpenCL unavailable: {backend['reason']}")
    platforms = [d["extra"]["platform"] for d in backend["devices"]]
    assert INTEL_PLATFORM in platforms, backend
    intel = next(d for d in backend["devices"] if d["extra"]["platform"] == INTEL_PLATFORM)
    assert any(v.startswith("SPIR-V_1.4") for v in intel["extra"]["il_versions"]), intel["extra"]["il_versions"]
    if (Path(SYSTEM_VENDORS) / "pocl.icd").is_file():
        assert "Portable Computing Language" in platforms, platforms
    assert backend["reason"] == ""
    assert list((tmp_path / "cache" / "opencl-vendors").glob("*/intel-cpu.icd")), "the folder is in HWBENCH_CACHE_DIR"


@needs_x86
def test_hwbench_list_says_how_to_add_intel(tmp_path: Path) -> None:
    done = _list_opencl(tmp_path, HWBENCH_INTEL_OPENCL_LIB=str(tmp_path / "nonexistent"))
    if "unavailable" in done.stdout:
        pytest.skip(f"OpenCL unavailable: {done.stdout.strip()}")
    assert f"note: {INSTALL_HINT}" in done.stdout
    assert INTEL_PLATFORM not in done.stdout and "Intel(R) Corporation" not in done.stdout
    opted_out = _list_opencl(tmp_path, HWBENCH_INTEL_OPENCL="0")
    assert "note:" not in opted_out.stdout and "Intel(R) Corporation" not in opted_out.stdout


@needs_x86
def test_a_process_whose_loader_ran_is_left_alone(tmp_path: Path) -> None:
    needs.module("pyopencl")
    code = (
        "import json, os, pyopencl as cl\n"
        "try:\n    names = [p.name for p in cl.get_platforms()]\nexcept Exception as e:\n    names = None\n"
        "from hwbench.backends.opencl_icd import ensure_icd_vendors\n"
        "s = ensure_icd_vendors()\n"
        "print(json.dumps([names, s.status, os.environ.get('OCL_ICD_VENDORS')]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], env=_child_env(tmp_path), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    names, status, variable = json.loads(done.stdout)
    if not names:
        pytest.skip("no system OpenCL platform to load before the set-up")
    if intel_library() is None:
        assert status == "absent"
    else:
        assert status == "late" and variable is None
