"""A new GPU backend without a line of hwbench changed: the test backend "xpu" (``tests/fakes/xpu_backend.py``,
kind ``gpu``, NumPy computing on devices with memory of their own), registered through
``HWBENCH_BACKENDS``, runs gemm and stream, is what ``hwbench burn`` burns when no backend is
named, is judged by ``hwbench check`` on the GPU floors and is compared by ``hwbench fleet``.

Every command runs through the real CLI in a subprocess, on four xpu devices of which xpu:3 does
each call's work 8 times (``HWBENCH_XPU_SLOW``): the slow GPU of a node for check and fleet to find.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TESTS, hwbench_cmd

from hwbench.core.backend import described_kind

DEVICES, SLOW, FACTOR = 4, 3, 8
GEMM = "gemm:M=256,N=256,K=256"
STREAM = "stream:op=3,n=1000003"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HWBENCH_BACKENDS="xpu=fakes.xpu_backend:XpuBackend",
        PYTHONPATH=os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")]),
        HWBENCH_XPU_DEVICES=str(DEVICES),
        HWBENCH_XPU_SLOW=f"{SLOW}:{FACTOR}",
        # One BLAS thread per call: on a shared 2-core machine two threads that wait on each other
        # turn every GEMM's time into the scheduler's.
        OPENBLAS_NUM_THREADS="1",
        OMP_NUM_THREADS="1",
    )
    return env


def _hwbench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(hwbench_cmd(*args), env=_env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """A node's files: a run of gemm and stream on the xpu devices, and a burn naming no backend."""
    folder = tmp_path_factory.mktemp("xpu")
    run, burn = folder / "run.json", folder / "burn.json"
    done = _hwbench(
        "run", "--backend", "xpu", "--kernel", "gemm,stream", "--shape", GEMM, "--shape", STREAM,
        "--budget", "0.2", "-q", "-o", str(run),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = _hwbench("burn", "--shape", GEMM, "--duration", "2", "--interval", "0.5", "-q", "-o", str(burn))
    assert done.returncode == 0, done.stderr
    yield {"run": run, "burn": burn}


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_run_gemm_and_stream_on_every_xpu_device(files: dict[str, Path]) -> None:
    doc = _load(files["run"])
    (xpu,) = doc["backends"]
    # Read as every reader reads it: its kind where the file says it, else its devices' kind.
    assert xpu["name"] == "xpu" and described_kind(xpu) == "gpu" and xpu["available"]
    assert [d["kind"] for d in xpu["devices"]] == ["gpu"] * DEVICES
    records = doc["records"]
    cases = {(r["kernel"], r["impl"], r["device_index"], r["dtype"]) for r in records}
    natives = {"gemm": "xpu_gemm", "stream": "xpu_stream"}  # the backend's own natives
    assert cases == {(k, natives[k], i, d) for k in natives for i in range(DEVICES) for d in ("fp32", "fp64")}
    for r in records:
        assert r["status"] == "ok", (r["device_index"], r["kernel"], r["reason"])
        assert r["parity"]["passed"] is True and r["parity"]["after_timing"] == "cleared before the timed calls"
        assert r["metrics"]["tflops"] > 0 and r["metrics"]["peak_check"].startswith("at most")
    assert all(r["parity"]["exact"] for r in records if r["kernel"] == "stream")
    gemm = {(r["device_index"], r["dtype"]): r["timing"]["median_s"] for r in records if r["kernel"] == "gemm"}
    for dtype in ("fp32", "fp64"):  # the slow device does 8 calls' work per call
        assert gemm[(SLOW, dtype)] > 2 * max(gemm[(i, dtype)] for i in range(DEVICES) if i != SLOW)


def test_burn_naming_no_backend_burns_the_xpu_devices(files: dict[str, Path]) -> None:
    doc = _load(files["burn"])
    # What a burn naming no backend loads: the backends of kind gpu (cuda and rocm unavailable
    # here, xpu available), not the cpu backend, since a GPU was found.
    kinds = {b["name"]: b["kind"] for b in doc["backends"]}
    assert set(kinds.values()) == {"gpu"} and "xpu" in kinds and "cpu" not in kinds
    burned = sorted((e["backend"], e["device_index"]) for e in doc["burn"])
    assert burned == [("xpu", i) for i in range(DEVICES)]
    for entry in doc["burn"]:
        assert entry["status"] == "ok" and entry["kernel"] == "gemm" and entry["impl"] == "xpu_gemm"
        assert entry["check"] == "exact" and entry["checks"] >= 1 and entry["mismatched_checks"] == 0
        assert entry["iterations"] > 0 and entry["dtype"] == "fp32"  # the highest peak
    assert {(h["backend"], h["device_index"]) for h in doc["health"]} == set(burned)


def _check(*args: str) -> tuple[int, dict[str, Any]]:
    done = _hwbench("check", *args, "--json", timeout=120)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _rows(verdict: dict[str, Any], check: str) -> dict[tuple[int, str | None], dict[str, Any]]:
    return {(r["device_index"], r["dtype"]): r for r in verdict["checks"] if r["check"] == check}


def test_check_judges_the_xpu_devices_on_the_gpu_floors(files: dict[str, Path]) -> None:
    code, verdict = _check(str(files["run"]), str(files["burn"]))
    assert code == 1 and not verdict["passed"]
    devices = {(r["backend"], r["device_index"]) for r in verdict["checks"]}
    assert devices == {("xpu", i) for i in range(DEVICES)}
    gemm = _rows(verdict, "gemm_pct_peak")
    assert set(gemm) == {(i, d) for i in range(DEVICES) for d in ("fp32", "fp64")}
    # A GPU's floors (the shipped [gpu] section): 50 % of the datasheet, which NumPy on one
    # thread of the host's cores does not reach.
    for row in gemm.values():
        assert row["floor_origin"].endswith("floors.toml [gpu]") and row["floor"] == 50 and row["verdict"] == "FAIL"
    decay = _rows(verdict, "burn_decay_pct")
    assert {r["floor_origin"] for r in decay.values()} == {"hwbench/decide/data/floors.toml [gpu]"}
    wrong = _rows(verdict, "mismatches")
    assert {r["verdict"] for r in wrong.values()} == {"PASS"} and len(wrong) == DEVICES
    health = _rows(verdict, "health_clean")
    assert {r["verdict"] for r in health.values()} == {"MISSING"}
    assert all("no health readers" in r["detail"] for r in health.values())


def _floors(path: Path, gemm_pct: float) -> Path:
    path.write_text(
        "[gpu]\n"
        f"gemm_pct_peak = {gemm_pct}\n"
        'reasons.gemm_pct_peak = "the xpu test devices: a share of the pretend datasheet NumPy reaches"\n'
        "burn_decay_pct = false\n"
    )
    return path


def test_check_with_own_floors_fails_the_slow_device_alone(files: dict[str, Path], tmp_path: Path) -> None:
    records = _load(files["run"])["records"]
    pct = {(r["device_index"], r["dtype"]): r["metrics"]["pct_peak"] for r in records if r["kernel"] == "gemm"}
    fast = min(p for (i, _), p in pct.items() if i != SLOW)
    slow = max(p for (i, _), p in pct.items() if i == SLOW)
    assert slow < fast / 2
    # A floor between the slow device and the others: xpu:3's GEMM fails, nothing else does.
    floors = _floors(tmp_path / "between.toml", round((slow * fast) ** 0.5, 4))
    code, verdict = _check(str(files["run"]), str(files["burn"]), "--floors", str(floors), "--allow-missing")
    assert code == 1
    failed = {(r["device_index"], r["check"], r["dtype"]) for r in verdict["checks"] if r["verdict"] == "FAIL"}
    assert failed == {(SLOW, "gemm_pct_peak", "fp32"), (SLOW, "gemm_pct_peak", "fp64")}
    decay = [r for r in verdict["not_judged"] if r["check"] == "burn_decay_pct"]
    assert len(decay) == DEVICES and all(r["figure"] is not None for r in decay)  # measured, turned off
    # A floor under the slow device too: the node passes, health readings missing allowed.
    code, verdict = _check(
        str(files["run"]), str(files["burn"]), "--floors", str(_floors(tmp_path / "under.toml", round(slow / 2, 4))),
        "--allow-missing",
    )  # fmt: skip
    assert code == 0 and verdict["passed"] and verdict["summary"]["FAIL"] == 0
    assert verdict["summary"]["PASS"] == DEVICES * 3  # GEMM fp32 and fp64, wrong results, per device


def test_fleet_finds_the_slow_xpu_device(files: dict[str, Path]) -> None:
    done = _hwbench("fleet", str(files["run"]), str(files["burn"]), "--json", "--fail-on-outlier", timeout=120)
    assert done.returncode == 1, done.stderr  # something found: the slow device
    doc = json.loads(done.stdout)
    assert doc["summary"]["files"] == 2 and doc["summary"]["missing"] == 0
    cases = {(c["kernel"], c["dtype"]): c for c in doc["cases"]}
    assert set(cases) == {(k, d) for k in ("gemm", "stream") for d in ("fp32", "fp64")}
    assert all(c["backend"] == "xpu" and c["n"] == DEVICES and not c["failed"] for c in cases.values())
    for dtype in ("fp32", "fp64"):
        gemm = cases[("gemm", dtype)]
        assert gemm["unit"] == "TFLOPS"
        assert [(o["device_index"], o["side"]) for o in gemm["outliers"]] == [(SLOW, "below")]
        assert gemm["outliers"][0]["below_pct"] > 50
        stream = cases[("stream", dtype)]
        assert stream["unit"] == "GB/s" and stream["min"] < stream["median"] / 2  # xpu:3's
