"""One AllReduce case on every rank, measured the way nccl-tests measures it.

Inputs follow ``kernels/allreduce/spec.py`` (small integers, so every reduction order is
exact), built per rank without the other ranks' rows. Parity is checked once before any
timing (a wrong implementation is never timed) and again after the timed loop; both
counts of wrong elements are summed over all ranks. The number of warm-up and timed
iterations comes from the slowest rank's estimate, so every rank runs the same count;
each iteration's time is the maximum over ranks (gathered after the loop), and each rank's
own median is kept beside it (``rank_p50_s``, index = rank: a straggler's stands out). Control
messages go through the default process group, never inside the timed loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from hwbench.collective.impls import Collective
from hwbench.collective.pattern import row_pattern, sum_pattern
from hwbench.collective.topology import World
from hwbench.run.stats import stability_warnings, summarize, timing_section

MIN_ITERS, MAX_ITERS, MAX_WARMUP = 5, 1000, 100


def _max_over_ranks(value: float, world: World) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=world.group)
    return float(t.item())


def _gather(values: np.ndarray, world: World) -> np.ndarray:
    """Every rank's ``values`` as rows (on every rank)."""
    import torch
    import torch.distributed as dist

    mine = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float64))
    rows = [torch.empty_like(mine) for _ in range(world.size)]
    dist.all_gather(rows, mine, group=world.group)
    return torch.stack(rows).numpy()


def _verify(
    impl: Collective, op: Callable[[], None], inp: Any, out: Any, row: np.ndarray, want: np.ndarray
) -> tuple[int, float]:
    impl.fill(inp, row)
    if out is not inp:
        impl.poison(out)  # an output the operation never writes cannot pass
    op()
    return impl.check(out, want)


def run_case(
    impl: Collective, case: dict[str, Any], world: World, mark: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Measure one case on this rank; every rank returns the same summary dict.

    ``mark`` hears each step as it begins (``buffers``, ``check``, ``timing``, ``last check``).
    """
    mark = mark or (lambda what: None)
    dtype, count, in_place, seed = case["dtype"], case["count"], bool(case["in_place"]), case["seed"]
    mark("buffers")
    inp, out = impl.buffers(count, dtype, in_place)
    row, want = row_pattern(world.rank, seed), sum_pattern(world.size, seed)
    op = impl.operation(inp, out, dtype)

    mark("check")
    wrong_before, worst_before = _verify(impl, op, inp, out, row, want)
    totals = _gather(np.array([wrong_before, worst_before]), world)
    if totals[:, 0].sum() > 0:
        return {
            "status": "parity_failed",
            "mismatches": int(totals[:, 0].sum()),
            "max_abs_err": float(totals[:, 1].max()),
            "elements": count * world.size,
            "samples": [],
            "when": "before timing",
        }

    mark("timing")
    op()
    estimate = _max_over_ranks(impl.time_once(op), world)
    warmup = int(min(MAX_WARMUP, case["warmup_s"] / max(estimate, 1e-9)))
    iters = int(min(MAX_ITERS, max(MIN_ITERS, case["budget_s"] / max(estimate, 1e-9))))
    for _ in range(warmup):
        op()
    samples = impl.time_loop(op, iters)
    mark("last check")
    wrong_after, worst_after = _verify(impl, op, inp, out, row, want)
    rows = _gather(np.concatenate([samples, [wrong_after, worst_after]]), world)
    per_iter = rows[:, :iters].max(axis=0)
    rank_p50 = np.median(rows[:, :iters], axis=1)
    wrong = int(rows[:, iters].sum())
    result = {
        "status": "ok" if wrong == 0 else "parity_failed",
        "mismatches": wrong,
        "max_abs_err": float(rows[:, iters + 1].max()),
        "elements": count * world.size,
        "samples": per_iter.tolist(),
        "rank_p50_s": rank_p50.tolist(),
        "warmup": warmup + 3,
        "when": f"after {iters} timed iterations",
        "timer": impl.timer,
        "resolution_s": impl.resolution_s,
    }
    del op, inp, out
    return result


def to_record(base: dict[str, Any], result: dict[str, Any], resolution_s: float) -> dict[str, Any]:
    """Fill a record's parity and timing from :func:`run_case`'s result."""
    record = dict(base)
    passed = result["mismatches"] == 0
    record["parity"] = {
        "max_abs_err": result["max_abs_err"],
        "max_rel_err": None,
        "atol": 0.0,
        "rtol": 0.0,
        "exact": True,
        "mismatches": result["mismatches"],
        "nonfinite": None,
        "elements": result["elements"],
        "passed": passed,
    }
    if not passed:
        record["status"] = "parity_failed"
        record["reason"] = (
            f"{result['mismatches']} of {result['elements']} elements wrong over all ranks "
            f"({result['when']}; largest error {result['max_abs_err']:g})"
        )
    if result["samples"]:
        s = summarize(result["samples"])
        record["timing"] = timing_section(
            result["samples"],
            timer=result.get("timer", Collective.timer),
            resolution_s=result.get("resolution_s") or resolution_s,
            flushed=False,
            warmup=result["warmup"],
            stopped_by="budget",
            **({"rank_p50_s": result["rank_p50_s"]} if result.get("rank_p50_s") else {}),
        )
        record["warnings"] = stability_warnings(s, resolution_s)
    return record
