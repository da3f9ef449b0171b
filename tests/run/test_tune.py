"""Per-device autotuning (``hwbench.run.tune``) and its cache (``hwbench.core.tuning``).

A fake backend (``tunefake``, below) offers GEMM through candidates that sleep a known time, one
of them fastest of all but wrong: the tuner must pick the fastest right one, drop the wrong one,
keep within its budget, and a run after it must run the tuned configuration. The real CPU llvm
GEMM is tuned once on a small shape. Triton's spaces need a GPU (``tests/backends/test_gpu_backends.py``
and the GPU check); here only the store and the tuner's contract with a backend are exercised.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hwbench.core.backend import Availability, Backend, DeviceInfo, Implementation, Prepared, present
from hwbench.core.errors import UserError
from hwbench.core.kernel import Kernel, Shape
from hwbench.core.registry import get_backend
from hwbench.core.tuning import Entry, Space, TuningStore, chosen, export, key_for, merge, read_export, shape_class
from hwbench.run.case import CaseRequest, CaseRunner
from hwbench.run.tune import tune_cases

TESTS = Path(__file__).resolve().parents[1]
#: This module's folder: the fakes below register from it (``tunefake=test_tune:TunableFake``).
HERE = Path(__file__).resolve().parent
SHAPE = {"M": 24, "N": 20, "K": 16}
#: The fake space: the first is the derived configuration; ``wrong`` is the fastest and wrong.
SPACE = [
    {"delay_us": 3000},
    {"delay_us": 1000},
    {"delay_us": 200, "wrong": 1},
    {"delay_us": 2000},
]


class _Sleeping(Prepared):
    def __init__(self, a: np.ndarray, b: np.ndarray, config: Mapping[str, Any]) -> None:
        self.a, self.b, self.delay = a, b, config["delay_us"] * 1e-6
        self.wrong = bool(config.get("wrong"))
        self.out = np.zeros((a.shape[0], b.shape[1]), dtype=a.dtype)

    def run(self) -> None:
        time.sleep(self.delay)
        np.matmul(self.a, self.b, out=self.out)
        if self.wrong:
            self.out *= 1.5

    def result(self) -> np.ndarray:
        return self.out.copy()


class TunableFake(Backend):
    """GEMM in sleeping configurations, tunable through ``tuning_space``."""

    name = "tunefake"
    description = "test backend with a known tuning space"
    #: What a prepared case is (a subclass may crash or hang in some configurations).
    prepared_type: type[_Sleeping] = _Sleeping

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(self.name, 0, "fake device", "tests", "cpu", arch="fake1", driver="1.0")]

    def implementations(self, kernel: str) -> list[Implementation]:
        return [Implementation("gemm", "sleepy", "portable", "fake", "sleeps", ("fp32",), "hwbench.kernels.gemm.spec")]

    def space(self, impl: Implementation, shape: Shape, dtype: str, device: DeviceInfo) -> Space:
        key = key_for(device, impl, dtype, shape, {"fake": os.environ.get("TUNEFAKE_VERSION", "1")})
        return Space(key, [dict(c) for c in json.loads(os.environ.get("TUNEFAKE_SPACE", json.dumps(SPACE)))])

    def tuning_space(
        self, impl: Implementation, kernel: Kernel, shape: Shape, dtype: str, device: DeviceInfo
    ) -> Space | None:
        return self.space(impl, shape, dtype, device)

    def prepare(
        self,
        impl: Implementation,
        kernel: Kernel,
        inputs: Mapping[str, np.ndarray],
        shape: Shape,
        dtype: str,
        device: DeviceInfo,
        config: Mapping[str, Any] | None = None,
    ) -> Prepared:
        space = self.space(impl, shape, dtype, device)
        config, tuning = chosen(space.key, config)
        prepared = self.prepared_type(inputs["A"], inputs["B"], config or space.candidates[0])
        prepared.config = {**(config or space.candidates[0]), "tuning": tuning}
        return prepared


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The fake backend registered and hwbench's cache folder in ``tmp_path``."""
    monkeypatch.setenv("HWBENCH_BACKENDS", "tunefake=test_tune:TunableFake")
    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), str(TESTS), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.syspath_prepend(str(TESTS))
    get_backend.cache_clear()
    yield tmp_path
    get_backend.cache_clear()


def _request(backend: str = "tunefake", impl: str = "sleepy", shape: dict[str, int] = SHAPE) -> CaseRequest:
    return CaseRequest("gemm", impl, backend, 0, "fp32", dict(shape))


def test_shape_class_is_the_power_of_two_at_or_above() -> None:
    assert shape_class({"M": 1000, "N": 1024, "K": 1025, "causal": 1, "z": 0}) == {
        "K": 2048,
        "M": 1024,
        "N": 1024,
        "causal": 1,
        "z": 0,
    }


def test_the_fastest_right_candidate_is_kept_and_the_wrong_one_dropped(fake: Path) -> None:
    results, interrupted = tune_cases([_request()], budget_s=20.0)
    assert not interrupted
    (result,) = results
    assert result.status == "tuned", result.reason
    assert result.of == 4 and len(result.tried) == 4
    assert result.entry is not None and result.entry.config == {"delay_us": 1000}
    (dropped,) = result.dropped
    assert dropped.config == {"delay_us": 200, "wrong": 1} and "wrong result" in dropped.reason
    assert result.entry.derived_median_s is not None
    assert 2.0 < result.entry.speedup() < 4.0  # 3 ms against 1 ms, and the sleeps' overhead
    assert TuningStore().get(result.entry.key) == result.entry


def test_a_run_after_tuning_runs_the_tuned_configuration(fake: Path) -> None:
    untuned = CaseRunner().run(_request())
    assert untuned["config"]["tuning"] == {"source": "derived"} and untuned["config"]["delay_us"] == 3000
    tune_cases([_request()], budget_s=20.0)
    record = CaseRunner().run(_request(shape={"M": 30, "N": 17, "K": 9}))  # another shape of the same class
    assert record["status"] == "ok", record["reason"]
    tuning = record["config"]["tuning"]
    assert tuning["source"] == "tuned" and tuning["budget_s"] == 20.0 and tuning["candidates"] == 4
    assert record["config"]["delay_us"] == 1000


def test_the_budget_is_kept(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNEFAKE_SPACE", json.dumps([{"delay_us": 5000 + i} for i in range(60)]))
    start = time.monotonic()
    results, _ = tune_cases([_request(), _request(shape={"M": 100, "N": 20, "K": 16})], budget_s=1.5)
    spent = time.monotonic() - start
    # the device's budget is the cases' own time; the worker's start and the listing come before it
    assert sum(r.spent_s for r in results) < 1.5 + 0.1, [r.spent_s for r in results]
    assert spent < 1.5 + 3.0, spent
    assert all(r.status == "tuned" and len(r.tried) < r.of for r in results)
    assert all("left; a candidate takes" in r.reason for r in results), [r.reason for r in results]


def test_a_case_whose_share_fits_no_candidate_is_said(fake: Path) -> None:
    (result,), _ = tune_cases([_request()], budget_s=0.01)
    assert result.status == "unfit" and not result.tried and "a candidate takes" in result.reason


def test_the_cache_round_trips_and_its_key_names_the_software(fake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = get_backend("tunefake")
    device, impl = backend.devices()[0], backend.implementations("gemm")[0]
    key = backend.space(impl, SHAPE, "fp32", device).key
    entry = Entry(key, {"delay_us": 1000}, 1e-3, 3e-3, "2030-01-01T00:00:00+00:00", 5.0, 3, 4, dict(SHAPE), 1)
    store = TuningStore()
    store.put(entry)
    assert store.get(key) == entry and store.entries() == [entry]
    monkeypatch.setenv("TUNEFAKE_VERSION", "2")
    newer = backend.space(impl, SHAPE, "fp32", device).key
    assert newer != key and newer.digest() != key.digest() and store.get(newer) is None
    assert chosen(newer) == (None, {"source": "derived"})
    monkeypatch.setenv("HWBENCH_TUNING", "0")
    assert chosen(key) == (None, {"source": "derived"})


def test_export_never_overwrites_and_import_validates(fake: Path) -> None:
    tune_cases([_request()], budget_s=20.0)
    store = TuningStore()
    path = fake / "fleet.json"
    export(store.entries(), path)
    with pytest.raises(UserError, match="already exists"):
        export(store.entries(), path)
    (entry,) = read_export(path)
    assert merge(store, [entry]) == (1, 0)
    store.delete()
    assert store.entries() == [] and merge(store, read_export(path)) == (1, 0)
    bad = fake / "bad.json"
    data = json.loads(path.read_text())
    data["entries"][0]["median_s"] = -1
    bad.write_text(json.dumps(data))
    with pytest.raises(UserError, match="entry 0 is malformed"):
        read_export(bad)


def _hwbench(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hwbench", *args], capture_output=True, text=True, env=dict(env or os.environ)
    )


def test_cli_tune_show_export_delete(fake: Path) -> None:
    shape = "gemm:M=24,N=20,K=16"
    done = _hwbench("tune", "--backend", "tunefake", "--shape", shape, "--budget", "10", "-q")
    assert done.returncode == 0, done.stderr
    assert "1/1" not in done.stdout and "4/4" in done.stdout and "dropped delay_us=200 wrong=1" in done.stderr
    shown = _hwbench("tune", "--show", "--json")
    (entry,) = json.loads(shown.stdout)
    assert entry["config"] == {"delay_us": 1000} and entry["candidates"] == 4
    out = fake / "out.json"
    assert _hwbench("tune", "--export", str(out)).returncode == 0
    again = _hwbench("tune", "--export", str(out))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "already exists" in again.stderr
    removed = _hwbench("tune", "--delete")
    assert removed.returncode == 0 and "removed 1 entry" in removed.stdout
    assert json.loads(_hwbench("tune", "--show", "--json").stdout) == []
    assert _hwbench("tune", "--import", str(out)).returncode == 0
    assert len(json.loads(_hwbench("tune", "--show", "--json").stdout)) == 1


@pytest.mark.parametrize(
    "args",
    [
        ("tune", "--budget", "0"),
        ("tune", "--budget", "nan"),
        ("tune", "--backend", "nosuch"),
        ("tune", "--import", "/nonexistent/file.json"),
        ("tune", "--show", "--delete"),
        ("run", "--tune-budget", "5"),
        ("run", "--tune", "--tune-budget", "-1"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(fake: Path, args: tuple[str, ...]) -> None:
    done = _hwbench(*args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 or "usage:" in done.stderr


@pytest.mark.skipif(not present("llvmlite"), reason="llvmlite is not installed")
def test_cpu_llvm_gemm_tuned_then_run_with_the_cached_configuration(fake: Path) -> None:
    request = _request("cpu", "llvm", {"M": 40, "N": 36, "K": 24})
    space = get_backend("cpu").tuning_space(
        get_backend("cpu").implementations("gemm")[-1], None, request.shape, "fp32", get_backend("cpu").devices()[0]
    )
    if space is None or not space.candidates:
        pytest.skip("the CPU llvm GEMM offers no tuning space here")
    (result,), _ = tune_cases([request], budget_s=6.0)
    assert result.status == "tuned", result.reason
    assert not result.dropped, result.dropped
    assert result.entry is not None and result.entry.config in space.candidates
    record = CaseRunner().run(request)
    assert record["status"] == "ok", record["reason"]
    assert record["config"]["tuning"]["source"] == "tuned"
    assert {k: record["config"][k] for k in result.entry.config} == result.entry.config


def test_the_opencl_c_gemm_space_starts_with_the_derived_tile_and_launches_each() -> None:
    from hwbench.kernels.gemm.gpu import opencl

    for kind, lanes in (("cpu", 8), ("cpu", 4), ("gpu", 4)):
        space = opencl.tuning_space(kind, lanes, "fp32", SHAPE)
        assert space[0] == opencl.tiles(kind, lanes) and len(space) == len({tuple(c.items()) for c in space}) > 4
        for config in space:
            plan = opencl.launch(SHAPE, "fp32", kind, lanes, config=config)
            assert plan.defines == config and plan.local == (config["WG0"], 1)


class _ScriptedTuner:
    """A tuner whose candidates' medians come from a script: per configuration, one median per timing."""

    def __init__(self, medians: dict[int, list[float | None]]) -> None:
        self.medians = {k: list(v) for k, v in medians.items()}
        self.calls: list[int] = []
        self.readied = 0

    def ready(self, request: CaseRequest) -> Any:
        from hwbench.run.tune import Listing

        self.readied += 1
        return Listing("ok")

    def candidate(self, request: CaseRequest, config: dict[str, Any], timing: Any, cut: float) -> Any:
        from hwbench.run.worker import Tried

        self.calls.append(config["id"])
        script = self.medians[config["id"]]
        median = script.pop(0) if len(script) > 1 else script[0]
        return Tried(config, median, "" if median is not None else "wrong results after timing")


def _scripted(
    tmp_path: Path, medians: dict[int, list[float | None]], budget_s: float = 100.0
) -> tuple[Any, _ScriptedTuner]:
    from hwbench.run.tune import tune_case

    device = DeviceInfo("tunefake", 0, "fake device", "tests", "cpu", arch="fake1", driver="1.0")
    impl = Implementation("gemm", "sleepy", "portable", "fake", "sleeps", ("fp32",), "hwbench.kernels.gemm.spec")
    key = key_for(device, impl, "fp32", {"M": 8, "N": 8, "K": 8}, {"fake": "scripted"})
    space = Space(key, [{"id": i} for i in sorted(medians)])
    request = CaseRequest("gemm", "sleepy", "tunefake", 0, "fp32", {"M": 8, "N": 8, "K": 8})
    ticks = iter(range(10**6))
    tuner = _ScriptedTuner(medians)
    result = tune_case(tuner, request, space, budget_s, budget_s, lambda: float(next(ticks)) * 1e-3,
                       TuningStore(tmp_path))  # fmt: skip
    return result, tuner


def test_one_lucky_timing_does_not_displace_the_derived_configuration(tmp_path: Path) -> None:
    # candidate 2 timed fast once, then as slow as the derived one: re-timing keeps the derived
    result, tuner = _scripted(tmp_path, {0: [1.0, 1.0, 1.0, 1.0], 1: [1.5], 2: [0.6, 1.0, 0.99, 1.01]})
    assert result.status == "tuned" and result.entry is not None
    assert result.entry.config == {"id": 0}
    from hwbench.run.tune import CONFIRM_ROUNDS

    # the budget lasts: every round is run, each finalist timed once a round
    assert sorted(result.confirmed) == [0, 1, 2] and len(result.confirmed[2]) == 1 + CONFIRM_ROUNDS
    assert tuner.calls[:3] == [0, 1, 2]


def test_a_candidate_faster_on_every_re_timing_wins(tmp_path: Path) -> None:
    result, _ = _scripted(tmp_path, {0: [1.0], 1: [0.8, 0.81, 0.79, 0.8], 2: [0.9]})
    assert result.entry is not None and result.entry.config == {"id": 1}
    assert result.entry.median_s == pytest.approx(0.8, abs=0.011) and result.entry.derived_median_s == 1.0


def test_no_re_timing_where_the_budget_ran_out(tmp_path: Path) -> None:
    result, tuner = _scripted(tmp_path, {0: [1.0], 1: [0.5], 2: [0.7], 3: [0.9]}, budget_s=0.002)
    assert result.confirmed == {} and len(tuner.calls) < 4


def test_a_case_whose_share_fits_no_candidate_makes_no_reference(tmp_path: Path) -> None:
    result, tuner = _scripted(tmp_path, {0: [1.0], 1: [0.5]}, budget_s=0.001)
    assert result.status == "unfit" and tuner.readied == 0 and tuner.calls == []


def test_a_finalist_wrong_on_its_re_timing_is_never_filed(tmp_path: Path) -> None:
    # candidate 1 was fastest at first, then wrong; every other finalist wrong too: 1 must not win
    result, _ = _scripted(tmp_path, {0: [1.0, None], 1: [0.5, None], 2: [0.9, None]})
    assert result.entry is None or result.entry.config != {"id": 1}
    assert all(t.median_s is None for t in result.tried)


def test_the_cache_actions_refuse_selections_they_do_not_honour(tmp_path: Path) -> None:
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    for action in (["--delete"], ["--show"]):
        done = subprocess.run(
            [sys.executable, "-m", "hwbench", "tune", *action, "--shape", "gemm:M=8,N=8,K=8"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2 and "--shape" in done.stderr and "Traceback" not in done.stderr
