"""Cheats and bad inputs at the edges of a run: a third-party kernel that reuses its first answer
(the reuse and cheat configurations of tests/fakes/backend.py), a third-party backend that hangs while
imported, a seed NumPy refuses, a backend registered without a name, the count an interrupted
run gives."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import needs
import numpy as np
import pytest

from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.core.kernel import get_kernel
from hwbench.core.registry import ENV_BACKENDS, backend_targets, get_backend
from hwbench.run import parity, runner
from hwbench.run.case import CaseRequest, base_record
from hwbench.run.runner import Plan, execute
from hwbench.run.timing import TimingConfig

TESTS = Path(__file__).resolve().parents[1]
SHAPE = "gemm:M=32,N=32,K=32"


@pytest.fixture
def plugins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """tests/ and tmp_path importable here and in the worker; set HWBENCH_BACKENDS on the result."""
    path = os.pathsep.join([str(TESTS), str(tmp_path), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.delenv("HWBENCH_CHEAT_TIMER", raising=False)
    monkeypatch.delenv("HWBENCH_CHEAT_PEAK", raising=False)
    get_backend.cache_clear()
    yield monkeypatch
    get_backend.cache_clear()


def _run(tmp_path: Path, backend: str, *extra: str) -> tuple[int, dict[tuple[str, str], dict[str, Any]], Path]:
    out = tmp_path / f"{backend}.json"
    args = ["run", "--backend", backend, "--shape", SHAPE, "--budget", "0.02", "--no-energy", "--quiet"]
    code = main([*args, "--out", str(out), *extra])
    doc = json.loads(out.read_text())
    assert main(["validate", str(out)]) == 0
    return code, {(r["impl"], r["dtype"]): r for r in doc["records"]}, out


def _unverified(record: dict[str, Any]) -> list[str]:
    return [w for w in record["warnings"] if w.startswith("timed calls not verified")]


def test_a_kernel_reusing_its_first_answer_in_its_one_output_array_fails_parity(
    plugins: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The backend cannot clear its output; the pipeline fills the array result() hands back
    (NaN for floats, the smallest int32 for int8's output) and the re-check catches the reuse."""
    plugins.setenv(ENV_BACKENDS, "reuse=fakes.backend:reuse")
    code, records, _ = _run(tmp_path, "reuse", "--impl", "reuses,honest", "--dtype", "fp32,int8")
    assert code == 1
    for dtype, fill in (("fp32", "NaN"), ("int8", "-2147483648")):
        cheat = records[("reuses", dtype)]
        assert cheat["status"] == "parity_failed", cheat
        assert f"wrong after the timed calls (the output was filled with {fill} before them)" in cheat["reason"]
        honest = records[("honest", dtype)]
        assert honest["status"] == "ok", honest
        assert honest["parity"]["after_timing"] == f"filled with {fill} before the timed calls"
        assert not _unverified(honest)


def test_a_copy_per_call_that_cannot_be_cleared_is_ok_with_a_warning_show_repeats(
    plugins: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kernel reusing its first answer behind result()'s fresh copy (or a read-only array) cannot
    be caught: its record stays ok but says its timed calls were not verified, and show says so."""
    plugins.setenv(ENV_BACKENDS, "reuse=fakes.backend:reuse")
    code, records, out = _run(tmp_path, "reuse", "--impl", "copies,frozen,fresh")
    assert code == 0
    for impl, why in (("copies", "returns a new copy on each call"), ("frozen", "the same array before and after")):
        record = records[(impl, "fp32")]
        assert record["status"] == "ok"
        assert record["parity"]["after_timing"].startswith("not verified: ")
        (warning,) = _unverified(record)
        assert why in warning
    fresh = records[("fresh", "fp32")]  # a new object from every call: verified by its identity
    assert fresh["status"] == "ok" and not _unverified(fresh)
    assert fresh["parity"]["after_timing"] == "a new output object from the last timed call"
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "note: reuse gemm copies fp32 M=32,N=32,K=32: timed calls not verified: result() returns" in shown
    assert "note: reuse gemm frozen fp32 M=32,N=32,K=32: timed calls not verified" in shown


def test_the_cheating_backends_stale_output_is_flagged_not_verified(
    plugins: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plugins.setenv(ENV_BACKENDS, "cheat=fakes.backend:cheat")
    code, records, _ = _run(tmp_path, "cheat", "--impl", "honest,stale")
    assert code == 0
    assert records[("stale", "fp32")]["status"] == "ok" and _unverified(records[("stale", "fp32")])
    assert records[("honest", "fp32")]["parity"]["after_timing"] == "cleared before the timed calls"
    assert not _unverified(records[("honest", "fp32")])


def test_an_output_that_is_an_input_is_never_filled() -> None:
    """An in-place kernel's output is one of its inputs: filling it would corrupt the next cases."""
    inputs = [np.ones(8, dtype=np.float32)]
    guard = parity.poison(inputs[0], inputs[0], inputs)
    assert guard.how == "watched" and np.all(inputs[0] == 1)
    assert parity.poison(inputs[0][:4], inputs[0][:4], []).how == "poisoned" and np.isnan(inputs[0][:4]).all()
    assert parity.poison(np.ones(3, bool), np.ones(3, bool), []).how == "unverifiable"  # two objects


HANGING = """
import time
time.sleep(600)
"""


@pytest.fixture
def hanging(plugins: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A backend 'hang' whose module never finishes importing."""
    (tmp_path / "hwbench_test_hanging.py").write_text(HANGING)
    plugins.setenv(ENV_BACKENDS, "hang=hwbench_test_hanging:Backend")
    plugins.setattr(runner, "PLUGIN_NOTE_S", 0.2)
    return plugins


def test_run_gives_a_hanging_third_party_backend_its_timeout_and_names_it(
    hanging: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.monotonic()
    out = tmp_path / "r.json"
    code = main(["run", "--backend", "hang", "--kernel", "gemm", "--timeout", "2", "--quiet", "--out", str(out)])
    assert time.monotonic() - start < 30  # not the 120 s a built-in backend's import is allowed
    assert code == 1
    (record,) = json.loads(out.read_text())["records"]
    assert "backend hang (hwbench_test_hanging:Backend) did not answer within 2 s" in record["reason"]
    assert "hwbench: waiting for backend hang (hwbench_test_hanging:Backend)" in capsys.readouterr().err


def test_list_gives_a_hanging_third_party_backend_the_same_limit(
    hanging: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --timeout (120 s), a third-party backend has PLUGIN_PROBE_S, as in every command."""
    hanging.setattr(runner, "PLUGIN_PROBE_S", 2.0)
    start = time.monotonic()
    assert main(["list", "--backend", "hang"]) == 0
    assert time.monotonic() - start < 30
    captured = capsys.readouterr()
    assert "unavailable: probe timeout: backend hang (hwbench_test_hanging:Backend) did not answer within 2 s" in (
        captured.out
    )
    assert "waiting for backend hang" in captured.err


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_numpy_refuses_is_bad_input(seed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code = main(["run", "--backend", "cpu", "--kernel", "gemm", "--seed", seed, "--quiet", "--out", str(out)])
    assert code == 2 and not out.exists()
    assert f"--seed must be a whole number from 0 to 2**63-1 (inputs are generated from it), got {seed}" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_tune_refuses_a_seed_numpy_refuses(seed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tune", "--backend", "cpu", "--kernel", "gemm", "--seed", seed, "--budget", "1", "--quiet"])
    assert code == 2
    assert f"--seed must be a whole number from 0 to 2**63-1 (inputs are generated from it), got {seed}" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("entry", ["=mod:attr", " =mod:attr", "a b=mod:attr", "x:y=mod:attr"])
def test_a_backend_without_a_usable_name_is_refused(entry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_BACKENDS, entry)
    with pytest.raises(UserError, match="HWBENCH_BACKENDS entry .* NAME=module:attribute"):
        backend_targets()
    assert main(["list", "--backend", "cpu"]) == 2


def test_a_backend_without_module_or_attribute_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for entry in ("a=:attr", "a=mod:"):
        monkeypatch.setenv(ENV_BACKENDS, entry)
        with pytest.raises(UserError, match="is not NAME=module:attribute"):
            backend_targets()


class _Described:
    """A worker that describes one backend with one AllReduce implementation."""

    def request(self, message: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        if message["op"] == "host":
            return {"host": {}, "software": {}, "settings": {}, "warnings": []}
        impl = {"name": "gloo", "kind": "native", "language": "gloo", "dtypes": ["fp32"]}
        return {
            "name": "cpu",
            "available": True,
            "reason": "",
            "devices": [{"index": 0, "name": "CPU"}],
            "implementations": {"allreduce": [impl]},
        }

    def kill(self) -> None:
        """Nothing to kill."""


def test_an_interrupted_collective_counts_the_cases_it_planned() -> None:
    """The collective expands its cases (sizes, in place or not): its progress's total is the plan."""
    shape = get_kernel("allreduce").complete({"count": 1024, "ranks": 2})

    def collective(cases: list[CaseRequest], backends: Any, timeout: float, progress: Any, dtypes: Any) -> Any:
        records = []
        for number in range(1, 8):
            record = base_record(cases[0], None, None)
            progress(number, 54, None, cases[0])
            progress(number, 54, record, cases[0])
            records.append(record)
        progress(8, 54, None, cases[0])  # the eighth is running when Ctrl-C comes
        return records, True, {}

    plan = Plan(backends=["cpu"], kernels=["allreduce"], timing=TimingConfig(budget_s=0.01))
    doc = execute(plan, {"allreduce": ("fp32",)}, {"allreduce": [shape]}, worker=_Described(), collective=collective)
    assert doc["run"]["incomplete"] is True
    assert doc["warnings"][-1] == "interrupted: 7 of 54 planned cases finished"


def test_a_host_tensor_the_call_returns_is_cleared_so_bf16_torch_is_verified(tmp_path: Path) -> None:
    """torch's bf16 matmul on the CPU: ``result()`` widens a copy, so the cpu backend clears the
    returned tensor itself and the record's timed calls are verified."""
    needs.module("torch")
    out = tmp_path / "r.json"
    argv = ["run", "--backend", "cpu", "--kernel", "gemm", "--impl", "torch_matmul", "--dtype", "bf16"]
    assert main([*argv, "--shape", "gemm:M=48,N=40,K=32", "--budget", "0.02", "--quiet", "--out", str(out)]) == 0
    (rec,) = [r for r in json.loads(out.read_text())["records"] if r["status"] == "ok"]
    assert rec["parity"]["after_timing"] == "cleared before the timed calls"
    assert not [w for w in rec["warnings"] if w.startswith("timed calls not verified")]
