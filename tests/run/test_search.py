"""The maximum-achievable GEMM search: candidate order, the per-device budget, refinement around
the best shape, interruption, and ``hwbench run --search`` end to end on the CPU."""

from __future__ import annotations

from typing import Any

import pytest

from hwbench.core.kernel import get_kernel
from hwbench.run import search
from hwbench.run.case import CaseRequest


class Clock:
    """A clock that advances by ``cost(case)`` per case run."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _runner(clock: Clock, speed: Any, cost: float = 1.0, stop_after: int | None = None) -> Any:
    ran: list[CaseRequest] = []

    def run(cases: list[CaseRequest]) -> tuple[list[dict[str, Any]], bool]:
        records = []
        for case in cases:
            ran.append(case)
            clock.now += cost
            flops = get_kernel("gemm").flops(case.shape)
            tflops = speed(case)
            timing = {"median_s": flops / (tflops * 1e12)} if tflops else None
            status = "ok" if tflops else "runtime_error"
            records.append(
                {
                    "kernel": "gemm",
                    "shape": case.shape,
                    "dtype": case.dtype,
                    "status": status,
                    "timing": timing,
                    "impl": case.impl,
                }
            )
        return records, stop_after is not None and len(ran) >= stop_after

    run.ran = ran  # type: ignore[attr-defined]
    return run


def _templates(*impls: str) -> list[CaseRequest]:
    return [CaseRequest("gemm", impl, "cpu", 0, "fp32", {"M": 1, "N": 1, "K": 1}) for impl in impls]


def test_candidates_are_tried_in_order_until_the_budget_is_spent() -> None:
    clock = Clock()
    run = _runner(clock, lambda case: 1.0)
    records, interrupted, summary = search.search_device(_templates("numpy", "llvm"), "cpu", 5.0, run, clock)
    assert not interrupted and len(records) == 5  # 1 s a case, checked before each: five cases in 5 s
    shapes = [(c.shape["M"], c.shape["N"], c.shape["K"]) for c in run.ran]
    assert shapes == [search.CANDIDATES["cpu"][i // 2] for i in range(5)]  # both implementations of each shape
    assert [c.impl for c in run.ran] == ["numpy", "llvm", "numpy", "llvm", "numpy"]
    assert summary["shapes_tried"] == 3 and summary["budget_s"] == 5.0 and summary["spent_s"] == 5.0


def test_the_best_shape_is_refined_once_the_planned_ones_are_done() -> None:
    clock = Clock()
    best = search.CANDIDATES["cpu"][2]

    def speed(case: CaseRequest) -> float:  # fastest at the third candidate, and one step larger in N
        m, n, k = case.shape["M"], case.shape["N"], case.shape["K"]
        if (m, n, k) == (best[0], best[1] + search.STEP["cpu"], best[2]):
            return 3.0
        return 2.0 if (m, n, k) == best else 1.0

    run = _runner(clock, speed, cost=0.01)
    _records, _, summary = search.search_device(_templates("numpy"), "cpu", 100.0, run, clock)
    planned = len(search.CANDIDATES["cpu"])
    assert summary["shapes_tried"] == planned + 6  # every neighbour of the best, once
    assert summary["refined_around"] == {"M": best[0], "N": best[1], "K": best[2]}
    fastest = max(run.ran, key=speed)
    assert (fastest.shape["M"], fastest.shape["N"]) == (best[0], best[1] + search.STEP["cpu"])  # a neighbour ran


def test_failed_cases_do_not_count_as_the_best_and_interruption_stops_the_search() -> None:
    clock = Clock()
    run = _runner(clock, lambda case: None, cost=0.1, stop_after=3)
    records, interrupted, summary = search.search_device(_templates("numpy"), "cpu", 100.0, run, clock)
    assert interrupted and len(records) == 3 and summary["refined_around"] is None
    assert search.tflops_of({"status": "ok", "timing": {"median_s": 0}, "kernel": "gemm"}) is None


def test_every_device_gets_its_own_budget_by_kind() -> None:
    clock = Clock()
    run = _runner(clock, lambda case: 1.0, cost=1.0)
    cases = [
        CaseRequest("gemm", "numpy", "cpu", 0, "fp32", {"M": 8, "N": 8, "K": 8}),
        CaseRequest("gemm", "numpy", "cpu", 0, "fp32", {"M": 9, "N": 9, "K": 9}),  # same template
        CaseRequest("gemm", "torch", "cuda", 0, "bf16", {"M": 8, "N": 8, "K": 8}),
    ]
    backends = [
        {"name": "cpu", "devices": [{"index": 0, "kind": "cpu"}]},
        {"name": "cuda", "devices": [{"index": 0, "kind": "gpu"}]},
    ]
    plan = search.SearchPlan()
    assert plan.budget_for("cpu") == 20.0 and plan.budget_for("gpu") == 60.0
    records, interrupted, summaries = search.run_search(cases, backends, search.SearchPlan(budget_s=2.0), run, clock)
    assert not interrupted and [(s["backend"], s["kind"], s["budget_s"]) for s in summaries] == [
        ("cpu", "cpu", 2.0),
        ("cuda", "gpu", 2.0),
    ]
    gpu_shapes = [c.shape["M"] for c in run.ran if c.backend == "cuda"]
    assert gpu_shapes == [search.CANDIDATES["gpu"][0][0], search.CANDIDATES["gpu"][1][0]]
    assert len(records) == 4


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_candidate_shapes_are_complete_gemm_shapes(kind: str) -> None:
    shapes = search.candidate_shapes(kind)
    assert len({tuple(sorted(s.items())) for s in shapes}) == len(shapes)
    assert all(set(s) == {"M", "N", "K"} for s in shapes)
    for shape in shapes:
        for near in search.neighbours(shape, search.STEP[kind]):
            assert min(near.values()) >= search.STEP[kind]


def test_hwbench_run_search_records_the_shapes_tried_and_the_measured_roof(tmp_path: Any) -> None:
    import json
    import subprocess

    from conftest import hwbench_cmd

    out = tmp_path / "search.json"
    args = ["run", "--search", "--search-budget", "2", "--backend", "cpu", "--impl", "numpy", "--dtype", "fp32"]
    proc = subprocess.run(hwbench_cmd(*args, "-o", str(out), "-q"), capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr  # 1 only where a figure was refused (a busy machine's peak)
    doc = json.loads(out.read_text())
    (summary,) = doc["search"]
    assert summary["backend"] == "cpu" and summary["budget_s"] == 2.0 and summary["shapes_tried"] >= 1
    first = search.CANDIDATES["cpu"][0]
    assert (doc["records"][0]["shape"]["M"], doc["records"][0]["shape"]["N"]) == first[:2]
    ok = [r for r in doc["records"] if r["status"] == "ok"]
    if ok:  # the roof is the best checked record
        roof = doc["roofs"][0]["compute"]["fp32"]
        assert roof["tflops"] == max(r["metrics"]["tflops"] for r in ok)
        assert max(r["metrics"]["pct_achievable"] for r in ok) == 100.0
    valid = subprocess.run(hwbench_cmd("validate", str(out)), capture_output=True, text=True, timeout=120)
    assert valid.returncode == 0, valid.stdout + valid.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--search", "--kernel", "attention"], "use it with --kernel gemm alone"),
        (["--search", "--shape", "gemm:M=8,N=8,K=8"], "drop --shape"),
        (["--search-budget", "5"], "--search-budget applies to --search only"),
        (["--search", "--search-budget", "-1"], "--search-budget"),
    ],
)
def test_search_options_are_checked_before_anything_runs(args: list[str], message: str, tmp_path: Any) -> None:
    import subprocess

    from conftest import hwbench_cmd

    proc = subprocess.run(hwbench_cmd("run", *args), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written
