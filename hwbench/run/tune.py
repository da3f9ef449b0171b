"""Per-device autotuning: every candidate of a portable case's configuration space timed on its
device within a budget, checked against float64 before and after its timed calls, and the
fastest kept in the tuning cache (:mod:`hwbench.core.tuning`) for later runs.

Here in ``run`` because it is the case pipeline's work (resolve, inputs and reference, prepare,
parity, timing: :class:`~hwbench.run.case.Pipeline`) and the runner calls it for ``run --tune``;
``hwbench tune`` drives it as well. A backend offers a space through ``tuning_space(impl,
kernel, shape, dtype, device) -> Space | None`` (its first candidate the derived configuration)
and runs one candidate through ``prepare(..., config=candidate)``; a backend without them, a
native or a source without a space is ``untunable``, said with why.

The budget is seconds per device, shared by that device's cases in turn: each case gets what is
left divided by the cases left, so what one leaves over goes to the next. Within a case a
candidate starts only when the time it is expected to take (the slowest candidate so far, or
for the first one its timed calls three times over) still fits; the device's total may pass its
budget by at most one candidate's misestimate.

The candidates run in the worker process (:mod:`hwbench.run.worker`, which holds the child's
side: :func:`~hwbench.run.worker.tune_answer`), one request each: one that
crashes it (a JIT kernel's segfault) is dropped saying how the worker died, and the next request
starts a fresh worker; one that hangs is cut at ten times the slowest candidate so far (at least
:data:`HANG_FLOOR_S`) or where the case's budget ends, whichever comes first. This process keeps
the budget and files the entries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from hwbench.core.burn_types import TuningEntry
from hwbench.core.records import now
from hwbench.core.tuning import Entry, Space, TuningKey, TuningStore, shape_class
from hwbench.run.case import CaseRequest
from hwbench.run.timing import TimingConfig
from hwbench.run.worker import Tried, Worker, WorkerDied

#: Seconds of tuning per device when no budget is given (``run --tune``, ``hwbench tune``).
TUNE_BUDGET_S = 60.0
#: Seconds of timed calls per candidate, at least and at most (the budget decides between them).
CANDIDATE_S = (0.02, 1.0)
#: Seconds the worker may take to list a case's space or make its inputs and reference (a
#: backend's first probe may measure its device).
SETUP_TIMEOUT_S = 120.0
#: A candidate is hung past this many times the slowest one timed so far, and at least this many seconds.
HANG_FACTOR, HANG_FLOOR_S = 10.0, 10.0
#: What is left of a case's budget after every candidate was timed re-times the fastest
#: ``FINALISTS`` and the derived configuration against each other in alternating order, round after
#: round while the budget lasts, up to ``CONFIRM_ROUNDS`` rounds; the finalist with the lowest median
#: of its timings wins, and it must beat the derived configuration by ``MARGIN`` (one lucky sample on
#: a noisy machine decides nothing, and more rounds make the medians steadier).
FINALISTS, CONFIRM_ROUNDS, MARGIN = 3, 8, 0.03


@dataclass
class CaseTuning:
    """What tuning one case did. ``status``: ``tuned`` (an entry was filed), ``untunable`` (no
    space), ``skipped`` (the case cannot run here), ``unfit`` (its share of the budget fits no
    candidate) or ``failed`` (no candidate passed parity, or the space could not be listed)."""

    request: CaseRequest
    status: str
    reason: str = ""
    of: int = 0
    tried: list[Tried] = field(default_factory=list)
    budget_s: float = 0.0
    spent_s: float = 0.0
    entry: Entry | None = None
    #: Per finalist (its index in ``tried``), the medians of its first timing and its re-timings.
    confirmed: dict[int, list[float]] = field(default_factory=dict)

    @property
    def timed(self) -> list[Tried]:
        """The candidates that passed parity and were timed."""
        return [t for t in self.tried if t.median_s is not None]

    @property
    def dropped(self) -> list[Tried]:
        """The candidates dropped (wrong results, refused, failed), each with why."""
        return [t for t in self.tried if t.median_s is None]

    def summary(self) -> TuningEntry:
        """The case as a results document's ``tuning`` item (and ``hwbench tune --json``)."""
        r = self.request
        entry = self.entry
        return {
            "backend": r.backend,
            "device_index": r.device_index,
            "kernel": r.kernel,
            "impl": r.impl,
            "dtype": r.dtype,
            "shape": dict(r.shape),
            "status": self.status,
            "reason": self.reason,
            "candidates": len(self.tried),
            "of": self.of,
            "dropped": [{"config": t.config, "reason": t.reason} for t in self.dropped],
            "budget_s": round(self.budget_s, 3),
            "spent_s": round(self.spent_s, 3),
            "config": None if entry is None else entry.config,
            "median_s": None if entry is None else entry.median_s,
            "derived_median_s": None if entry is None else entry.derived_median_s,
            "speedup_vs_derived": None if entry is None else entry.speedup(),
        }


def candidate_timing(budget_s: float, candidates: int) -> TimingConfig:
    """Timed calls of one candidate: about a third of its share of the case's budget, within
    :data:`CANDIDATE_S`; flushed as a run's are; no energy windows."""
    each = min(max(budget_s / max(candidates, 1) / 3, CANDIDATE_S[0]), CANDIDATE_S[1])
    return TimingConfig(warmup_s=each / 5, budget_s=each, min_samples=5, max_samples=200, target_cv=0.02, energy_s=0.0)


@dataclass(frozen=True)
class Listing:
    """A case's space as the worker listed it, or why it has none (``status``: ``ok``,
    ``untunable``, ``skipped`` or ``failed``)."""

    status: str
    reason: str = ""
    space: Space | None = None


class Tuner:
    """Tuning's requests to the worker process: a candidate that crashes it or hangs is a dropped
    candidate (the worker killed, and a fresh one started for the next request), not the end."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def _ask(self, op: str, request: CaseRequest, timeout: float, **more: Any) -> dict[str, Any]:
        try:
            return self.worker.request({"op": op, "case": asdict(request), **more}, timeout)
        except WorkerDied as died:
            return {"status": died.status, "reason": died.reason, "died": True}

    def listing(self, request: CaseRequest) -> Listing:
        """The case's space, listed in the worker (a backend's probe may crash)."""
        got = self._ask("tune_space", request, SETUP_TIMEOUT_S)
        status = got.get("status")
        if status != "ok":
            why = got.get("reason", got.get("error"))
            if status in ("untunable", "skipped"):
                return Listing(str(status), str(why))
            return Listing("failed", f"listing its configurations: {status}: {why}")
        key = TuningKey.from_json(got["key"])
        return Listing("ok", "", Space(key, [dict(c) for c in got["candidates"]], str(got.get("note", ""))))

    def ready(self, request: CaseRequest) -> Listing:
        """The case's inputs and float64 reference made in the worker, before its candidates."""
        got = self._ask("tune_ready", request, SETUP_TIMEOUT_S)
        status = got.get("status")
        if status == "ok":
            return Listing("ok")
        why = got.get("reason", got.get("error"))
        return Listing("skipped", str(why)) if status == "skipped" else Listing("failed", f"{status}: {why}")

    def candidate(self, request: CaseRequest, config: dict[str, Any], timing: TimingConfig, timeout: float) -> Tried:
        """One candidate prepared, checked and timed in the worker within ``timeout`` seconds."""
        began = time.perf_counter()
        got = self._ask("tune_candidate", request, timeout, config=config, timing=asdict(timing))
        if "tried" in got:
            return Tried(**{**got["tried"], "config": config})
        why = f"{got.get('status')}: {got.get('reason', got.get('error'))}"
        return Tried(config, None, why, time.perf_counter() - began, bool(got.get("died")))


def tune_case(
    tuner: Tuner,
    request: CaseRequest,
    space: Space,
    budget_s: float,
    device_budget_s: float,
    clock: Callable[[], float] = time.monotonic,
    store: TuningStore | None = None,
) -> CaseTuning:
    """Tune one case's ``space`` within ``budget_s`` and file the fastest candidate that passed
    parity (the entry says ``device_budget_s``, the budget the user gave the device)."""
    start = clock()
    result = CaseTuning(request, "failed", budget_s=budget_s, of=len(space.candidates))
    timing = candidate_timing(budget_s, result.of)
    expected = 3 * (timing.budget_s + timing.warmup_s)
    ready = False
    for config in space.candidates:
        left = budget_s - (clock() - start)
        if expected > left:  # checked before the inputs and reference are made: they cost time too
            result.reason = (
                f"{max(left, 0.0):.2f} s of the case's {budget_s:.2f} s left; a candidate takes {expected:.2f} s"
            )
            break
        if not ready:  # first, and again in the fresh worker after a crash
            made = tuner.ready(request)
            if made.status != "ok":
                result.status, result.reason, result.spent_s = made.status, made.reason, clock() - start
                return result
            ready = True
            left = budget_s - (clock() - start)
        began = clock()
        cut = min(left, max(HANG_FACTOR * expected, HANG_FLOOR_S))
        tried = tuner.candidate(request, dict(config), timing, cut)
        result.tried.append(tried)
        if tried.died:
            ready = False
        elif tried.median_s is not None:  # how long a candidate takes: the slowest timed so far
            expected = max(expected if len(result.timed) > 1 else 0.0, clock() - began)
    else:
        result.confirmed = _confirm(tuner, request, result, timing, budget_s - (clock() - start), expected, clock)
    result.spent_s = clock() - start
    return _finish(result, space, device_budget_s, store)


def _confirm(
    tuner: Tuner,
    request: CaseRequest,
    result: CaseTuning,
    timing: TimingConfig,
    left_s: float,
    expected: float,
    clock: Callable[[], float],
) -> dict[int, list[float]]:
    """The finalists (see :data:`FINALISTS`) re-timed within ``left_s``: per index in
    ``result.tried``, its medians; a finalist that fails a re-timing is out."""
    timed = [i for i, t in enumerate(result.tried) if t.median_s is not None]
    if len(timed) < 2:
        return {}
    order = sorted(timed, key=lambda i: result.tried[i].median_s or 0.0)[:FINALISTS]
    if 0 in timed and 0 not in order:
        order.append(0)
    samples = {i: [result.tried[i].median_s or 0.0] for i in order}
    start = clock()
    for turn in range(CONFIRM_ROUNDS):
        for i in order if turn % 2 else order[::-1]:
            left = left_s - (clock() - start)
            if i not in samples:
                continue
            if expected > left:
                return samples
            cut = min(left, max(HANG_FACTOR * expected, HANG_FLOOR_S))
            tried = tuner.candidate(request, dict(result.tried[i].config), timing, cut)
            if tried.median_s is None:  # wrong, or failed, this time: out, and never filed
                samples.pop(i)
                result.tried[i] = tried
                if tried.died and tuner.ready(request).status != "ok":
                    return samples
            else:
                samples[i].append(tried.median_s)
    return samples


def _best(result: CaseTuning) -> tuple[Tried, float, float | None]:
    """The winner, its median and the derived configuration's: the fastest first timing, or where
    finalists were re-timed the lowest median of theirs, the derived one unless beaten by MARGIN."""
    derived = result.tried[0]
    if not result.confirmed:
        best = min(result.timed, key=lambda t: t.median_s or 0.0)
        return best, best.median_s or 0.0, derived.median_s
    medians = {i: float(sorted(v)[len(v) // 2]) for i, v in result.confirmed.items()}
    index = min(medians, key=lambda i: medians[i])
    if 0 in medians and index != 0 and medians[index] > (1 - MARGIN) * medians[0]:
        index = 0
    return result.tried[index], medians[index], medians.get(0, derived.median_s)


def _finish(result: CaseTuning, space: Space, device_budget_s: float, store: TuningStore | None) -> CaseTuning:
    """File the best candidate of ``result`` and say what happened."""
    timed = result.timed
    if not result.tried:
        result.status = "unfit"
        return result
    if not timed:
        result.status, result.reason = "failed", f"no candidate passed parity; the first: {result.tried[0].reason}"
        return result
    best, best_median, derived_median = _best(result)
    derived = result.tried[0]
    result.entry = Entry(
        space.key,
        best.config,
        best_median,
        derived_median,
        now(),
        device_budget_s,
        len(result.tried),
        result.of,
        dict(result.request.shape),
        len(result.dropped),
        derived.config,
    )
    (store or TuningStore()).put(result.entry)
    notes = [result.reason] if result.reason else []
    if derived.median_s is None:
        notes.append(f"the derived configuration was dropped: {derived.reason}")
    result.status, result.reason = "tuned", "; ".join(notes)
    return result


Progress = Callable[[CaseTuning], None]


def tune_cases(
    requests: list[CaseRequest],
    budget_s: float,
    worker: Worker | None = None,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
    store: TuningStore | None = None,
) -> tuple[list[CaseTuning], bool]:
    """Tune ``requests`` device by device in ``worker`` (by default a fresh one, ended here),
    ``budget_s`` seconds per device shared by its cases in turn; the results and whether Ctrl-C
    stopped it (each case's entry is filed when it ends, so what was tuned is kept)."""
    devices: dict[tuple[str, int], dict[tuple[Any, ...], CaseRequest]] = {}
    for r in requests:  # one case per shape class: a second would be filed under the same key
        classed = (r.kernel, r.impl, r.dtype, tuple(shape_class(r.shape).items()))
        devices.setdefault((r.backend, r.device_index), {}).setdefault(classed, r)
    results: list[CaseTuning] = []
    tuner = Tuner(worker or Worker())
    try:
        for by_class in devices.values():
            # Listed before the device's clock starts, so that only the cases with a space share its budget.
            listed = [(r, tuner.listing(r)) for r in by_class.values()]
            results += [CaseTuning(r, got.status, got.reason) for r, got in listed if got.space is None]
            mine = [(r, got.space) for r, got in listed if got.space is not None]
            start = clock()
            for number, (request, space) in enumerate(mine):
                share = max(budget_s - (clock() - start), 0.0) / (len(mine) - number)
                results.append(tune_case(tuner, request, space, share, budget_s, clock, store))
                if progress is not None:
                    progress(results[-1])
    except KeyboardInterrupt:
        return results, True
    finally:
        if worker is None:
            tuner.worker.kill()
    return results, False


def portable_cases(requests: list[CaseRequest], backends: list[dict[str, Any]]) -> list[CaseRequest]:
    """Of ``requests``, those of portable implementations (as the described ``backends`` list them)."""
    kinds = {
        (b["name"], kernel, impl["name"]): impl["kind"]
        for b in backends
        for kernel, impls in b.get("implementations", {}).items()
        for impl in impls
    }
    return [r for r in requests if kinds.get((r.backend, r.kernel, r.impl)) == "portable"]
