"""The maximum achievable GEMM: shapes near a device's sweet spot, tried within a time budget.

Datasheet peaks are not reachable (mamf-finder's searches reach about 80 % of dense bf16 peak
on an H100, about half on an MI300X), so ``hwbench run --kernel gemm --search`` measures what
is. Each device gets a budget (:data:`BUDGET_S` by device kind unless given), shared by every
selected implementation and dtype: candidate shapes are tried in order, each for every
implementation and dtype, until the budget is spent; then the neighbours of the best shape so
far (one step up or down in each dimension) while it lasts; that shape is the summary's
``refined_around`` (the best figures themselves are the records', once checked: ``roofs``).
A case is never cut short: the budget is checked before each case, so a device may overrun
it by one case. Every candidate
is an ordinary record (checked against float64, re-checked after timing); the best of each
device, implementation and dtype is what the results' measured roofs take
(``hwbench.results.roofs``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from hwbench.core.kernel import get_kernel
from hwbench.core.results_types import Record
from hwbench.run.case import CaseRequest

#: Seconds of search per device, by device kind.
BUDGET_S = {"cpu": 20.0, "gpu": 60.0, "accelerator": 60.0}
#: Candidate (M, N, K) in the order they are tried: square from the sweet spot outwards, then
#: the rectangular shapes a model's layers have (wide N, short K). Every output is checked
#: against a float64 product on the host, which bounds the sizes worth planning.
CANDIDATES = {
    "cpu": [
        (2048, 2048, 2048),
        (1536, 1536, 1536),
        (3072, 3072, 3072),
        (1024, 1024, 1024),
        (2048, 4096, 1024),
        (4096, 2048, 2048),
        (2048, 2048, 512),
        (4096, 4096, 4096),
    ],
    "gpu": [
        (8192, 8192, 8192),
        (4096, 4096, 4096),
        (6144, 6144, 6144),
        (8192, 8192, 4096),
        (16384, 8192, 2048),
        (4096, 16384, 4096),
        (10240, 10240, 10240),
    ],
}
#: Warm-up and timed seconds per case when ``--budget`` is not given: many shapes, each briefly.
SEARCH_TIMING = (0.05, 0.25)
#: The refinement's step in each dimension, by device kind.
STEP = {"cpu": 256, "gpu": 1024}


@dataclass(frozen=True)
class SearchPlan:
    """A search: seconds per device (None: :data:`BUDGET_S` by kind)."""

    budget_s: float | None = None

    def budget_for(self, kind: str) -> float:
        """The budget of a device of ``kind``."""
        return self.budget_s if self.budget_s is not None else BUDGET_S.get(kind, BUDGET_S["gpu"])


def kind_of(kind: str) -> str:
    """The candidate list a device kind takes (accelerators search as GPUs do)."""
    return "cpu" if kind == "cpu" else "gpu"


def candidate_shapes(kind: str) -> list[dict[str, int]]:
    """The GEMM shapes planned for a device of ``kind``, in the order they are tried."""
    kernel = get_kernel("gemm")
    return [kernel.complete({"M": m, "N": n, "K": k}) for m, n, k in CANDIDATES[kind_of(kind)]]


def neighbours(shape: dict[str, int], step: int) -> list[dict[str, int]]:
    """``shape`` one ``step`` up and down in each of M, N and K (no dimension below ``step``)."""
    found = []
    for dim in ("M", "N", "K"):
        for delta in (step, -step):
            if shape[dim] + delta >= step:
                found.append({**shape, dim: shape[dim] + delta})
    return found


def tflops_of(record: Record) -> float | None:
    """The TFLOPS of an ok record from its median (metrics are derived after the run)."""
    median = (record.get("timing") or {}).get("median_s")
    if record.get("status") != "ok" or not isinstance(median, (int, float)) or median <= 0:
        return None
    return get_kernel(record["kernel"]).flops(record["shape"]) / median / 1e12


RunCases = Callable[[list[CaseRequest]], tuple[list[Record], bool]]


def search_device(
    templates: list[CaseRequest],
    kind: str,
    budget_s: float,
    run: RunCases,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[Record], bool, dict[str, Any]]:
    """Search one device: ``templates`` are its cases, one per implementation and dtype (their shape
    is replaced by each candidate's); ``run`` runs a list of cases. Returns the records, whether the
    run was interrupted, and what the search did."""
    start = clock()
    by_shape = {_key(s): [replace(t, shape=dict(s)) for t in templates] for s in candidate_shapes(kind)}
    queue = list(by_shape)
    tried: list[tuple[int, ...]] = []
    records: list[Record] = []
    best: tuple[float, tuple[int, ...]] | None = None
    refined: tuple[int, ...] | None = None
    while queue and clock() - start < budget_s:
        key = queue.pop(0)
        tried.append(key)
        for case in by_shape[key]:
            if clock() - start >= budget_s:
                break
            more, interrupted = run([case])
            records += more
            for record in more:
                figure = tflops_of(record)
                if figure is not None and (best is None or figure > best[0]):
                    best = (figure, key)
            if interrupted:
                return records, True, _summary(kind, budget_s, clock() - start, tried, by_shape, refined)
        if not queue and best is not None and refined is None:  # the planned shapes are done: refine the best
            refined = best[1]
            template = by_shape[best[1]]
            for shape in neighbours(dict(template[0].shape), STEP[kind_of(kind)]):
                if _key(shape) not in by_shape:
                    by_shape[_key(shape)] = [replace(c, shape=dict(shape)) for c in template]
                    queue.append(_key(shape))
    return records, False, _summary(kind, budget_s, clock() - start, tried, by_shape, refined)


def _key(shape: dict[str, int]) -> tuple[int, ...]:
    return tuple(shape[d] for d in sorted(shape))


def _summary(
    kind: str,
    budget_s: float,
    spent_s: float,
    tried: list[tuple[int, ...]],
    planned: dict[tuple[int, ...], list[CaseRequest]],
    refined: tuple[int, ...] | None,
) -> dict[str, Any]:
    """What the search did; the best figures are the records' (after their checks: ``roofs``)."""
    return {
        "kind": kind,
        "budget_s": budget_s,
        "spent_s": round(spent_s, 3),
        "shapes_tried": len(tried),
        "shapes_planned": len(planned),
        "refined_around": dict(planned[refined][0].shape) if refined else None,
    }


def run_search(
    cases: list[CaseRequest],
    backends: list[dict[str, Any]],
    plan: SearchPlan,
    run: RunCases,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[list[Record], bool, list[dict[str, Any]]]:
    """Search every device the cases name, one after another (the cases' shapes are placeholders:
    each device tries its kind's candidates); the records, whether interrupted, and one summary per
    device (backend, device index, budget, seconds spent, shapes tried, the best shape)."""
    kinds = {(b["name"], d["index"]): d.get("kind", "gpu") for b in backends for d in b.get("devices", [])}
    devices: dict[tuple[str, int], dict[tuple[str, str], CaseRequest]] = {}
    for case in cases:  # one template per implementation and dtype: the candidates replace its shape
        devices.setdefault((case.backend, case.device_index), {}).setdefault((case.impl, case.dtype), case)
    records: list[Record] = []
    summaries: list[dict[str, Any]] = []
    for (backend, index), mine in devices.items():
        kind = kinds.get((backend, index), "gpu")
        more, interrupted, summary = search_device(list(mine.values()), kind, plan.budget_for(kind), run, clock)
        records += more
        summaries.append({"backend": backend, "device_index": index, **summary})
        if interrupted:
            return records, True, summaries
    return records, False, summaries
