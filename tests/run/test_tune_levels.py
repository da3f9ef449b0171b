"""``hwbench tune`` at every x86-64 ISA level the host has (``HWBENCH_CPU_ISA``): the CPU llvm GEMM
tuned on a small shape within a small budget, its parity-checked entry filed under a key of that
level's own, and a run at that level after it running the tuned configuration. A level the host
lacks is skipped, saying why."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import needs
import pytest
from conftest import hwbench_cmd

needs.module("llvmlite")

from hwbench.core.errors import UserError  # noqa: E402
from hwbench.kernels.llvmir import cpu_model  # noqa: E402
from hwbench.kernels.llvmir.target import CPUTarget, host_target  # noqa: E402

LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4")
SHAPE = "gemm:M=40,N=36,K=24"
SELECT = ("--backend", "cpu", "--kernel", "gemm", "--impl", "llvm", "--dtype", "fp32", "--shape", SHAPE)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tuning cache for every level, so that their keys can be told apart."""
    return tmp_path_factory.mktemp("tune-levels")


def _hwbench(level: str, cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, cpu_model.ISA_ENV: level, "HWBENCH_CACHE_DIR": str(cache)}
    return subprocess.run(hwbench_cmd(*args), capture_output=True, text=True, timeout=300, env=env)


def _entries(cache: Path) -> list[dict]:
    shown = subprocess.run(
        hwbench_cmd("tune", "--show", "--json"),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HWBENCH_CACHE_DIR": str(cache)},
    )
    entries: list[dict] = json.loads(shown.stdout)
    return entries


@pytest.mark.parametrize("level", LEVELS)
def test_tuned_at_each_level_under_its_own_key_and_used_by_the_next_run(level: str, cache: Path) -> None:
    if not host_target().triple.startswith("x86_64"):
        pytest.skip(f"not an x86-64 host ({host_target().triple})")
    try:
        CPUTarget(isa_level=level)
    except UserError as exc:
        pytest.skip(f"this CPU cannot run {level}: {exc}")
    before = {json.dumps(e["key"], sort_keys=True) for e in _entries(cache)}
    done = _hwbench(level, cache, "tune", *SELECT, "--budget", "3", "--json")
    assert done.returncode == 0, done.stderr
    (summary,) = json.loads(done.stdout)
    assert summary["status"] == "tuned" and summary["candidates"] >= 2, summary
    assert not summary["dropped"], summary["dropped"]  # every candidate timed passed parity, before and after
    filed = [e for e in _entries(cache) if json.dumps(e["key"], sort_keys=True) not in before]
    (entry,) = filed  # a key no other level filed
    assert entry["key"]["software"]["isa"] == level and entry["config"] == summary["config"]
    out = cache / f"run-{level}.json"
    ran = _hwbench(level, cache, "run", *SELECT, "--budget", "0.05", "-q", "--out", str(out))
    doc = json.loads(out.read_text())
    (record,) = doc["records"]
    assert record["status"] == "ok", (record["reason"], ran.stderr)
    assert record["config"]["tuning"]["source"] == "tuned", record["config"]
    assert {k: record["config"][k] for k in entry["config"]} == entry["config"]
