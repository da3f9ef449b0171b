"""AllReduce cases from the runner's plan to records: expand, check, launch (or join), collect.

An AllReduce case spans N processes, so it does not go through the single worker: the
runner hands every ``allreduce`` case here. Each case runs in place and out of place; all
cases with the same rank count share one launch of the ranks (start-up is paid once).
Under torchrun this process is rank 0 of an existing world and runs the cases itself.
On GPUs one rank drives one GPU (``LOCAL_RANK``), so a case stands for the node's GPUs, not
one device, and a profile's sweep continues to at least :data:`GPU_SWEEP_MIN_BYTES`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

from hwbench.collective.debris import sweep_stale
from hwbench.collective.dispatch import GPU_BACKENDS, support
from hwbench.collective.launch import Launch
from hwbench.collective.rank import serve
from hwbench.collective.rendezvous import init_process_group, join_timeout
from hwbench.collective.shm import CollectiveError
from hwbench.collective.topology import World, describe_rank, joined_rank
from hwbench.core.backend import WallTimer
from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.registry import get_backend, get_kernel, implementations
from hwbench.core.results_types import Record
from hwbench.run.case import CaseRequest, base_record, failed
from hwbench.run.runner import fill_coordinates

DEFAULT_DTYPE = "fp32"
#: On GPUs a profile's sweep goes on by factors of 4 until its largest message is at least this.
GPU_SWEEP_MIN_BYTES = 256 * 2**20
Progress = Callable[[int, int, Record | None, CaseRequest | None], None]


def expand(cases: list[CaseRequest]) -> list[CaseRequest]:
    """Every case out of place (``in_place=0``) and in place (``in_place=1``)."""
    return [replace(c, shape={**c.shape, "in_place": flag}) for c in cases for flag in (0, 1)]


def _support(case: CaseRequest, backends: list[dict[str, Any]]) -> str | None:
    """Why ``case`` cannot run here, or None (with the worker's description of the backend)."""
    described: dict[str, Any] = next((b for b in backends if b["name"] == case.backend), {"devices": []})
    impl = next((i for i in implementations(get_backend(case.backend), case.kernel) if i.name == case.impl), None)
    device = next((d for d in described["devices"] if d["index"] == case.device_index), None)
    if impl is None or device is None:
        return f"{case.backend} has no implementation '{case.impl}' or device {case.device_index}"
    if case.impl == "mpi" and joined_rank() is not None:
        return (
            "under torchrun the ranks are not MPI processes: run the mpi cases with --ranks N "
            "(hwbench starts them with mpirun)"
        )
    if case.backend in GPU_BACKENDS and case.shape["ranks"] > len(described["devices"]):
        return (
            f"{case.shape['ranks']} ranks need one GPU each; {case.backend} has {len(described['devices'])} "
            "(use --ranks to match)"
        )
    verdict = support(impl, case.dtype, case.backend)
    return None if verdict.ok else verdict.reason


def gpu_cases(cases: list[CaseRequest]) -> list[CaseRequest]:
    """GPU cases once per node (not per device), with a profile's sweep extended to GPU sizes."""
    kernel = get_kernel("allreduce")
    cpu = [c for c in cases if c.backend not in GPU_BACKENDS]
    seen: dict[tuple[Any, ...], CaseRequest] = {}
    for c in cases:
        if c.backend in GPU_BACKENDS:
            seen.setdefault((c.backend, c.impl, c.dtype, tuple(sorted(c.shape.items()))), c)
    gpu = list(seen.values())
    counts = sorted({c.shape["count"] for c in gpu})
    if not counts or not any(counts == sorted({s["count"] for s in p}) for p in kernel.profiles.values()):
        return cpu + gpu  # sizes the user chose (--shape): kept as they are
    grown = []
    for case in (c for c in gpu if c.shape["count"] == counts[-1]):
        count = case.shape["count"]
        while count * DTYPE_BYTES[case.dtype] < GPU_SWEEP_MIN_BYTES:
            count *= 4
            grown.append(replace(case, shape={**case.shape, "count": count}))
    return cpu + gpu + grown


def _job(cases: list[CaseRequest], backends: list[dict[str, Any]], timeout_s: float) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    max_bytes: dict[str, int] = {}
    for index, case in enumerate(cases):
        timing = case.timing or {}
        nbytes = case.shape["count"] * DTYPE_BYTES[case.dtype]
        max_bytes[case.impl] = max(max_bytes.get(case.impl, 0), nbytes)
        items.append(
            {
                "index": index,
                "impl": case.impl,
                "backend": case.backend,
                "dtype": case.dtype,
                "count": case.shape["count"],
                "ranks": case.shape["ranks"],
                "in_place": case.shape["in_place"],
                "seed": case.seed,
                "budget_s": float(timing.get("budget_s", 0.25)),
                "warmup_s": float(timing.get("warmup_s", 0.05)),
                "record": fill_coordinates(base_record(case, None, None), backends),
            }
        )
    return {"cases": items, "max_bytes": max_bytes, "timeout_s": timeout_s, "resolution_s": WallTimer().resolution_s}


class _Sink:
    """Forwards rank 0's events to the progress line and keeps the records."""

    def __init__(self, cases: list[CaseRequest], progress: Progress | None, offset: int, total: int) -> None:
        self.cases, self.progress, self.offset, self.total = cases, progress, offset, total
        self.records: dict[int, dict[str, Any]] = {}

    def __call__(self, event: dict[str, Any]) -> None:
        index = event.get("index")
        if index is None or not self.progress:
            return
        case = self.cases[index]
        if event["event"] == "start":
            self.progress(self.offset + index + 1, self.total, None, case)
        elif event["event"] == "record":
            self.progress(self.offset + index + 1, self.total, event["record"], case)


def _run_local(
    cases: list[CaseRequest], ranks: int, backends: list[dict[str, Any]], timeout_s: float, sink: _Sink
) -> tuple[dict[int, dict[str, Any]], bool, list[dict[str, Any]]]:
    """Launch ranks until every case has a record (fresh ranks after each failure)."""
    job = _job(cases, backends, timeout_s)
    records: dict[int, dict[str, Any]] = {}
    participants: list[dict[str, Any]] = []
    pending = list(job["cases"])
    try:  # an interrupt between launches keeps the records so far
        while pending:
            use_mpi = any(c["impl"] == "mpi" for c in pending)  # then mpirun starts the ranks
            outcome = Launch({**job, "cases": pending}, ranks, timeout_s, sink, use_mpi=use_mpi).run()
            records.update(outcome.records)
            participants = outcome.participants or participants
            if outcome.interrupted:
                return records, True, participants
            done = set(outcome.records)
            if outcome.status is not None:
                doomed = [
                    c
                    for c in pending
                    if c["index"] not in done
                    and (
                        c["index"] == outcome.in_flight
                        or not outcome.ready
                        or (outcome.failed_impl is not None and c["impl"] == outcome.failed_impl)
                    )
                ]
                if not doomed:  # failed between cases: blame the next one so the loop always advances
                    doomed = [next(c for c in pending if c["index"] not in done)]
                for item in doomed:
                    record = failed(dict(item["record"]), outcome.status, outcome.reason)
                    records[item["index"]] = record
                    sink({"event": "record", "index": item["index"], "record": record})
            pending = [c for c in pending if c["index"] not in records]
    except KeyboardInterrupt:
        return records, True, participants
    return records, False, participants


def _run_joined(
    cases: list[CaseRequest], backends: list[dict[str, Any]], timeout_s: float, sink: _Sink
) -> tuple[dict[int, dict[str, Any]], bool, list[dict[str, Any]]]:
    """Rank 0 under torchrun: hand the job to every rank and run it here (when the ranks cannot
    meet, every case is a ``timeout`` record saying so)."""
    import torch.distributed as dist  # torch, optional: only a torchrun world imports it here

    world = World.from_env()
    job = _job(cases, backends, timeout_s)
    try:
        init_process_group(world, timeout_s, join_timeout(timeout_s))
    except CollectiveError as exc:
        unmet = {c["index"]: failed(dict(c["record"]), exc.status, str(exc)) for c in job["cases"]}
        for index, record in unmet.items():
            sink({"event": "record", "index": index, "record": record})
        return unmet, False, []
    participants: list[Any] = [None] * world.size
    records: dict[int, dict[str, Any]] = {}
    current: list[int] = []

    def emit(event: dict[str, Any]) -> None:
        if event["event"] == "start":
            current[:] = [event["index"]]
        elif event["event"] == "record":
            records[event["index"]] = event["record"]
        sink(event)

    try:
        dist.broadcast_object_list([job], src=0, group=world.group)
        gpu = any(c.backend in GPU_BACKENDS for c in cases)
        dist.all_gather_object(participants, describe_rank(world, gpu), group=world.group)
        serve(world, job, emit)
    except KeyboardInterrupt:
        return records, True, [p for p in participants if p is not None]
    except Exception as exc:
        status = getattr(exc, "status", None) or ("timeout" if "timed out" in str(exc).lower() else "runtime_error")
        reason = " ".join(str(exc).split())[:400]
        left = [item for item in job["cases"] if item["index"] not in records]
        blamed = current[0] if current else left[0]["index"] if left else None
        stopped = f"not run: the ranks stopped after case {blamed} failed"
        for item in left:
            if item["index"] == blamed:
                record = failed(dict(item["record"]), status, f"rank 0: {reason}")
            else:
                record = failed(dict(item["record"]), "skipped", stopped)
            records[item["index"]] = record
            sink({"event": "record", "index": item["index"], "record": record})
    finally:
        dist.destroy_process_group()
    return records, False, [p for p in participants if p is not None]


def _default_dtypes(cases: list[CaseRequest], asked: list[str] | None) -> tuple[list[CaseRequest], list[Record]]:
    """Without ``--dtype`` the sweep runs fp32 only; one skipped record says how to get the others."""
    if asked:
        return cases, []
    kept = [c for c in cases if c.dtype == DEFAULT_DTYPE]
    notes = []
    for backend, dtype in sorted({(c.backend, c.dtype) for c in cases if c.dtype != DEFAULT_DTYPE}):
        stub = CaseRequest("allreduce", "*", backend, -1, dtype, {})
        notes.append(
            failed(
                base_record(stub, None, None),
                "skipped",
                f"AllReduce sweeps {DEFAULT_DTYPE} unless --dtype asks for others (e.g. --dtype {dtype})",
            )
        )
    return kept, notes


def run_collective(
    cases: list[CaseRequest],
    backends: list[dict[str, Any]],
    timeout_s: float,
    progress: Progress | None = None,
    dtypes: list[str] | None = None,
) -> tuple[list[Record], bool, dict[str, Any]]:
    """Records of every AllReduce case (both in-place variants), whether interrupted, and run facts.

    What killed runs left behind (launch folders, shared segments) is swept first.
    """
    sweep_stale()
    cases, records = _default_dtypes(cases, dtypes)
    expanded = expand(gpu_cases(cases))
    runnable: list[CaseRequest] = []
    for case in expanded:
        why = _support(case, backends)
        if why:
            records.append(failed(fill_coordinates(base_record(case, None, None), backends), "skipped", why))
        else:
            runnable.append(case)
    info: dict[str, Any] = {"participants": [], "launches": []}
    joined = joined_rank() is not None
    groups: dict[tuple[int, str], list[CaseRequest]] = {}
    for case in runnable:  # a launch per rank count and backend (a GPU failure never stops the CPU's cases);
        # under torchrun the one world runs everything
        groups.setdefault((case.shape["ranks"], "" if joined else case.backend), []).append(case)
    offset, total = 0, len(runnable)
    for (ranks, _backend), group in groups.items():
        sink = _Sink(group, progress, offset, total)
        started = time.monotonic()
        if joined:
            got, interrupted, participants = _run_joined(group, backends, timeout_s, sink)
        else:
            got, interrupted, participants = _run_local(group, ranks, backends, timeout_s, sink)
        info["launches"].append(
            {"ranks": ranks, "mode": "torchrun" if joined else "local", "wall_s": time.monotonic() - started}
        )
        if len(participants) >= len(info["participants"]):
            info["participants"] = participants
        records += [cast(Record, got[i]) for i in sorted(got)]  # the ranks' records, as JSON
        offset += len(group)
        if interrupted:
            return records, True, info
    return records, False, info
