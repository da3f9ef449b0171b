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
    assert summary["best_shape"] == {"M": best[0], "N": best[1] + search.STEP["cpu"], "K": best[2]}


def test_failed_cases_do_not_count_as_the_best_and_interruption_stops_the_search() -> None:
    clock = Clock()
    run = _runner(clock, lambda case: None, cost=0.1, stop_after=3)
    records, interrupted, summary = search.search_device(_templates("numpy"), "cpu", 100.0, run, clock)
    assert interrupted and len(records) == 3 and summary["best_shape"] is None
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
