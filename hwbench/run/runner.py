"""The one place where kernel x backend x implementation x shape x dtype meet.

The runner asks the worker to describe each backend, lays out the matrix of cases, runs
each in the worker (one record per case, whatever happens), hands the cases of kernels
that span ranks to the collective runner its caller gives, has a device's peak re-measured
where a vendor library's record is above it (:mod:`.peaks`), lets the caller finish the
document (derived metrics) and returns it. Ctrl-C returns the records finished so far,
marked incomplete.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, cast

from hwbench.core.errors import UserError
from hwbench.core.kernel import get_kernel
from hwbench.core.records import build_document, now
from hwbench.core.registry import plugin_target
from hwbench.core.results_types import BackendEntry, Document, Record
from hwbench.core.text import printable
from hwbench.run.case import CaseRequest, base_record, failed
from hwbench.run.peaks import recheck_peaks
from hwbench.run.search import SearchPlan, run_search
from hwbench.run.signals import StopSignals
from hwbench.run.timing import TimingConfig
from hwbench.run.tune import portable_cases, tune_cases
from hwbench.run.worker import Worker, WorkerDied

#: Seconds allowed for describing the host and each backend, at least (a backend's first
#: import, e.g. torch or an OpenCL driver, may take long; a case's --timeout may be shorter).
PROBE_TIMEOUT_S = 120.0
#: Seconds a third-party backend (an ``hwbench.backends`` entry point, ``HWBENCH_BACKENDS``) has
#: to import and probe in every command, or the command's ``--timeout`` where that is shorter.
PLUGIN_PROBE_S = 30.0
#: Seconds of waiting for a third-party backend's import and probe before saying so on stderr.
PLUGIN_NOTE_S = 5.0


@dataclass
class Plan:
    """What the user asked to run."""

    backends: list[str]
    kernels: list[str]
    profile: str = "quick"
    shapes: dict[str, list[dict[str, int]]] = field(default_factory=dict)
    dtypes: list[str] | None = None
    impls: list[str] | None = None
    devices: dict[str, list[int]] | None = None  # backend -> device indices; None: all
    seed: int = 0
    timeout_s: float = 300.0
    timing: TimingConfig = field(default_factory=TimingConfig)
    price: dict[str, Any] | None = None
    command: list[str] = field(default_factory=list)
    search: SearchPlan | None = None  # GEMM shapes searched per device, not the planned ones
    #: The kernels are hwbench's default selection, not the user's: one that only some backends
    #: implement is left out where none of them is available (:func:`runnable_kernels`).
    kernels_by_default: bool = False
    #: Seconds of tuning per device before the cases run (``run --tune``); None: no tuning.
    tune_s: float | None = None


#: Runs the cases of kernels that span ranks: records, whether interrupted, run-level facts.
CollectiveRunner = Callable[
    [list[CaseRequest], list[dict[str, Any]], float, "Progress | None", "list[str] | None"],
    tuple[list[Record], bool, dict[str, Any]],
]
Progress = Callable[[int, int, Record | None, CaseRequest | None], None]


def describe_all(
    worker: Worker, names: Iterable[str], timeout: float, plugin_timeout: float | None = None
) -> list[dict[str, Any]]:
    """Describe each backend in the worker; a probe that crashes or hangs makes it unavailable.

    A built-in backend has ``timeout`` seconds; a third-party one, whose module hwbench does not
    know, ``plugin_timeout`` (default: ``timeout``, at most :data:`PLUGIN_PROBE_S`) to import and
    probe, said on stderr after :data:`PLUGIN_NOTE_S`; the one that does not answer is named."""
    described = []
    for name in names:
        target = plugin_target(name)
        limit = timeout if target is None else (plugin_timeout or min(timeout, PLUGIN_PROBE_S))
        note = threading.Timer(PLUGIN_NOTE_S, _waiting, (name, target, limit))
        note.daemon = True
        if target is not None:
            note.start()
        try:
            answer = worker.request({"op": "describe", "backend": name}, limit)
            if "error" in answer:
                answer = _unavailable(name, f"probe failed: {answer['error']}")
        except WorkerDied as died:
            reason = f"probe {died.status}: {died.reason}"
            if target is not None and died.status == "timeout":
                reason = (
                    f"probe timeout: backend {name} ({target}) did not answer within {limit:g} s while imported "
                    f"and probed; the worker was killed (a third-party backend has at most {PLUGIN_PROBE_S:g} s, "
                    "or the command's --timeout where shorter)"
                )
            answer = _unavailable(name, reason)
        finally:
            note.cancel()
        described.append(answer)
    return described


def _waiting(name: str, target: str, limit: float) -> None:
    """Say on stderr which third-party backend is still importing or probing."""
    line = f"hwbench: waiting for backend {name} ({target}) to import and probe (at most {limit:g} s)"
    print(printable(line), file=sys.stderr, flush=True)


def _unavailable(name: str, reason: str) -> dict[str, Any]:
    """The description of a backend that could not be described."""
    return {"name": name, "available": False, "reason": reason, "devices": [], "implementations": {}}


def _dtypes_for(impls: list[dict[str, Any]], kernel_dtypes: Iterable[str], wanted: list[str] | None) -> list[str]:
    """The dtypes asked for, else every dtype an implementation offers (those it runs only on
    request included: their skipped records say how to run them)."""
    if wanted:
        return list(wanted)
    offered = {d for impl in impls for d in impl["dtypes"]}
    return [d for d in kernel_dtypes if d in offered]


def only_on(kernel: str) -> list[str]:
    """The backends a kernel without portable sources declares natives for (empty: it has portable
    sources, or is not a built-in or registered kernel, and may run anywhere)."""
    try:
        spec = get_kernel(kernel)
    except UserError:
        return []
    return [] if spec.sources else list(spec.natives)


def runnable_kernels(kernels: list[str], backends: list[dict[str, Any]]) -> list[str]:
    """Of a default selection, the kernels that can run here: a kernel without portable sources
    (natives on some backends only, e.g. GPU transfers) is left out where no available backend
    offers an implementation of it; asked for by name, it is kept and skipped with the reason."""
    offered = {k for b in backends if b["available"] for k, impls in b["implementations"].items() if impls}
    return [k for k in kernels if not only_on(k) or k in offered]


def _on_request(case: CaseRequest) -> str:
    """Why a default selection leaves ``case`` out, and how to run it."""
    try:
        natives = get_kernel(case.kernel).natives.get(case.backend, ())
    except UserError:
        natives = ()
    known = next((n.accuracy.get(case.dtype, "") for n in natives if n.impl == case.impl), "")
    why = f"{known}; " if known else ""
    return f"{why}{case.impl} runs {case.dtype} only when --dtype names it"


def _none_here(name: str, kernel: str, offered: list[dict[str, Any]], impls: list[str] | None) -> str:
    """Why backend ``name`` runs no implementation of ``kernel``."""
    has = ", ".join(i["name"] for i in offered) or "none"
    if impls:
        return f"{name} has none of the selected implementations ({', '.join(impls)}) of {kernel}; it has: {has}"
    where = only_on(kernel)
    if where and not offered:
        return f"{name} has no implementation of {kernel}: it runs only on {', '.join(where)}"
    return f"{name} has no implementation of {kernel}"


def _on_devices(
    plan: Plan, backend: dict[str, Any], kernel: str, indices: list[int], shapes: list[dict[str, int]]
) -> tuple[list[tuple[int, dict[str, int]]], list[Record]]:
    """(device, shape) pairs of ``kernel`` on ``backend``, as its spec expands each shape per device
    (``Kernel.device_shapes``), and a skipped record where a shape runs on no device."""
    try:
        spec = get_kernel(kernel)
    except UserError:
        return [(i, s) for i in indices for s in shapes], []
    pairs: list[tuple[int, dict[str, int]]] = []
    skipped: list[Record] = []
    for index in indices:
        for shape in shapes:
            expanded, why = spec.device_shapes(shape, index, len(backend["devices"]))
            pairs += [(index, s) for s in expanded]
            if not expanded:
                stub = CaseRequest(kernel, "*", backend["name"], index, "", dict(shape), plan.seed)
                skipped.append(failed(base_record(stub, None, None), "skipped", why))
    return pairs, skipped


def _skipped(kernel: str, backend: str, index: int, why: str) -> Record:
    """The skipped record of every case of ``kernel`` on ``backend`` (device ``index``, -1: any)."""
    return failed(base_record(CaseRequest(kernel, "*", backend, index, "", {}), None, None), "skipped", why)


def plan_cases(
    plan: Plan,
    backends: list[dict[str, Any]],
    kernel_dtypes: Mapping[str, tuple[str, ...]],
    shapes: Mapping[str, list[dict[str, int]]],
) -> tuple[list[CaseRequest], list[Record]]:
    """Cases to run, and records for what cannot run at all (with the reason). A default selection
    (``plan.kernels_by_default``) leaves out kernels nothing here implements (:func:`runnable_kernels`)."""
    cases: list[CaseRequest] = []
    skipped: list[Record] = []
    timing = asdict(plan.timing)
    kernels = runnable_kernels(plan.kernels, backends) if plan.kernels_by_default else plan.kernels
    for backend in backends:
        name = backend["name"]
        for kernel in kernels:
            if not backend["available"]:
                skipped.append(_skipped(kernel, name, -1, f"backend {name} unavailable: {backend['reason']}"))
                continue
            offered = backend["implementations"].get(kernel, [])
            impls = [i for i in offered if plan.impls is None or i["name"] in plan.impls]
            if not impls:
                skipped.append(_skipped(kernel, name, -1, _none_here(name, kernel, offered, plan.impls)))
                continue
            indices = [d["index"] for d in backend["devices"]]
            if plan.devices and name in plan.devices:
                for absent in sorted(set(plan.devices[name]) - set(indices)):
                    listed = ", ".join(f"{name}:{i}" for i in indices)
                    skipped.append(
                        _skipped(kernel, name, absent, f"{name} has no device {absent} (its devices: {listed})")
                    )
                indices = [i for i in indices if i in plan.devices[name]]
            pairs, unplaced = _on_devices(plan, backend, kernel, indices, shapes[kernel])
            skipped += unplaced
            for index, shape in pairs:
                for dtype in _dtypes_for(impls, kernel_dtypes[kernel], plan.dtypes):
                    # Unasked, a dtype runs on the implementations that offer it but those that
                    # take it only on request (a skipped record says why); asked for, on all
                    # (those without it are skipped records that say so).
                    for impl in (i for i in impls if plan.dtypes or dtype in i["dtypes"]):
                        request = CaseRequest(kernel, impl["name"], name, index, dtype, dict(shape), plan.seed, timing)
                        if not plan.dtypes and dtype in impl.get("on_request", ()):
                            record = failed(base_record(request, None, None), "skipped", _on_request(request))
                            skipped.append(fill_coordinates(record, backends))
                        else:
                            cases.append(request)
    return cases, skipped


def check_impl_names(plan: Plan, backends: list[dict[str, Any]]) -> None:
    """UserError when ``plan.impls`` names an implementation that no selected kernel declares and
    no described backend offers (a known one that cannot run here is a skipped case instead)."""
    if not plan.impls:
        return
    known: dict[str, None] = {}
    for kernel in plan.kernels:
        spec = get_kernel(kernel)
        known.update(dict.fromkeys(s.impl for s in spec.sources))
        known.update(dict.fromkeys(n.impl for natives in spec.natives.values() for n in natives))
        for backend in backends:
            known.update(dict.fromkeys(i["name"] for i in backend["implementations"].get(kernel, [])))
    unknown = [name for name in plan.impls if name not in known]
    if unknown:
        raise UserError(
            f"unknown implementation '{unknown[0]}' of {', '.join(plan.kernels)}; known implementations: "
            + ", ".join(known)
        )


def fill_coordinates(record: Record, backends: list[dict[str, Any]]) -> Record:
    """Device name and implementation kind for a record the worker could not write itself."""
    for backend in backends:
        if backend["name"] != record["backend"]:
            continue
        impl = next(
            (i for i in backend["implementations"].get(record["kernel"], []) if i["name"] == record["impl"]), None
        )
        device = next((d for d in backend["devices"] if d["index"] == record["device_index"]), None)
        if impl:
            record["impl_kind"], record["language"] = impl["kind"], impl["language"]
        if device:
            record["device"] = device["name"]
    return record


def run_cases(
    cases: list[CaseRequest],
    worker: Worker,
    timeout: float,
    progress: Progress | None = None,
    backends: list[dict[str, Any]] | None = None,
) -> tuple[list[Record], bool]:
    """Run every case; returns the records and whether the run was interrupted."""
    records: list[Record] = []
    try:
        for number, case in enumerate(cases, 1):
            if progress:
                progress(number, len(cases), None, case)
            try:
                answer = worker.request({"op": "case", "case": asdict(case)}, timeout)
                record: Record = answer.get("record") or failed(
                    base_record(case, None, None), "runtime_error", f"worker error: {answer.get('error')}"
                )
            except WorkerDied as died:
                record = failed(base_record(case, None, None), died.status, died.reason)
            if record["device"] is None and backends:
                record = fill_coordinates(record, backends)
            records.append(record)
            if progress:
                progress(number, len(cases), record, case)
    except KeyboardInterrupt:
        worker.kill()
        return records, True
    return records, False


def _numbered(
    worker: Worker, timeout: float, progress: Progress | None, backends: list[dict[str, Any]]
) -> Callable[[list[CaseRequest]], tuple[list[Record], bool]]:
    """:func:`run_cases` for the search, which runs its cases a few at a time: the progress line
    numbers them all through (total 0: the budget, not a count, ends the search)."""
    done = [0]

    def counted(number: int, total: int, record: Record | None, case: CaseRequest | None) -> None:
        if progress is not None:
            progress(done[0] + number, 0, record, case)

    def run(cases: list[CaseRequest]) -> tuple[list[Record], bool]:
        records, interrupted = run_cases(cases, worker, timeout, counted, backends)
        done[0] += len(records)
        return records, interrupted

    return run


class _Tally:
    """The progress the cases report, counted and passed on: cases finished, and how many each
    part of the run (the cases, the collective's expanded ones) planned."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress, self.finished, self.planned = progress, 0, dict[str, int]()

    def part(self, name: str) -> Progress:
        """The progress callback of one part of the run."""

        def report(number: int, total: int, record: Record | None, case: CaseRequest | None) -> None:
            self.planned[name] = max(self.planned.get(name, 0), total)
            self.finished += record is not None
            if self.progress is not None:
                self.progress(number, total, record, case)

        return report

    def interrupted(self, cases: int, spanning: int, search: bool) -> str:
        """The document's warning of a run stopped before its end."""
        if search:
            return f"interrupted: {self.finished} cases of the search finished (its budget, not a count, ends it)"
        planned = cases + self.planned.get("collective", spanning)
        return f"interrupted: {self.finished} of {planned} planned cases finished"


def execute(
    plan: Plan,
    kernel_dtypes: Mapping[str, tuple[str, ...]],
    shapes: Mapping[str, list[dict[str, int]]],
    progress: Progress | None = None,
    worker: Worker | None = None,
    collective: CollectiveRunner | None = None,
    finish: Callable[[Document], None] | None = None,
    stops: StopSignals | None = None,
) -> Document:
    """Run ``plan`` and return the results document (complete or marked incomplete).

    Cases of kernels that span ranks go to ``collective`` (``hwbench.collective.run``);
    ``finish`` completes the document before it is stamped finished (derived metrics). From
    the end of the cases on, ``stops`` only notes stop signals: what finished is kept. An
    implementation name nobody knows is a UserError once the backends are described.
    """
    started = now()
    own_worker = worker is None
    worker = worker or Worker()
    doc = build_document(
        plan.command or list(sys.argv),
        started=started,
        incomplete=True,
        profile=plan.profile,
        seed=plan.seed,
        timeout_s=plan.timeout_s,
        price=plan.price,
        timing=asdict(plan.timing),
    )
    cases: list[CaseRequest] = []
    spanning: list[CaseRequest] = []
    records: list[Record] = []
    skipped: list[Record] = []
    interrupted = False
    tally = _Tally(progress)
    try:
        try:
            host = worker.request({"op": "host"}, max(plan.timeout_s, PROBE_TIMEOUT_S))
            doc["host"], doc["software"], doc["settings"] = host["host"], host["software"], host["settings"]
            doc["warnings"] = list(host.get("warnings", []))
        except WorkerDied as died:
            doc["warnings"].append(f"host description failed: {died.reason}")
        backends = describe_all(
            worker, plan.backends, max(plan.timeout_s, PROBE_TIMEOUT_S), min(plan.timeout_s, PLUGIN_PROBE_S)
        )
        keys = ("name", "kind", "available", "reason", "devices", "environment")
        doc["backends"] = [cast(BackendEntry, {k: b.get(k) for k in keys if k in b}) for b in backends]
        check_impl_names(plan, backends)
        cases, skipped = plan_cases(plan, backends, kernel_dtypes, shapes)
        spanning = [c for c in cases if get_kernel(c.kernel).spans_ranks]  # several processes: their own path
        cases = [c for c in cases if not get_kernel(c.kernel).spans_ranks]
        if plan.tune_s is not None:  # the cases' configurations tuned first: their records use them
            tuned, interrupted = tune_cases(portable_cases(cases, backends), plan.tune_s)
            doc["tuning"] = [t.summary() for t in tuned]
        if plan.search is not None and not interrupted:
            records, interrupted, doc["search"] = run_search(
                cases, backends, plan.search, _numbered(worker, plan.timeout_s, tally.part("search"), backends)
            )
        elif not interrupted:
            records, interrupted = run_cases(cases, worker, plan.timeout_s, tally.part("cases"), backends)
        if spanning and not interrupted:
            if collective is None:
                records += [
                    failed(
                        fill_coordinates(base_record(c, None, None), backends),
                        "skipped",
                        "no runner for kernels that span ranks was given",
                    )
                    for c in spanning
                ]
            else:
                more, interrupted, doc["collective"] = collective(
                    spanning, backends, plan.timeout_s, tally.part("collective"), plan.dtypes
                )
                records += more
        if not interrupted:  # while the worker (and the host it measured) is still there
            recheck_peaks(doc, records, worker, max(plan.timeout_s, PROBE_TIMEOUT_S))
    except KeyboardInterrupt:
        worker.kill()
        interrupted = True
    finally:
        if own_worker:
            worker.kill()
    if stops is not None:
        stops.hold()
    doc["records"] = records + skipped
    if finish is not None:
        finish(doc)
    doc["run"]["finished"] = now()
    doc["run"]["incomplete"] = interrupted
    if interrupted:
        doc["warnings"].append(tally.interrupted(len(cases), len(spanning), plan.search is not None))
    return doc
