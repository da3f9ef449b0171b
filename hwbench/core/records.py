"""Records and results documents: the one builder of each, and the names every file carries.

A *record* is one case (kernel, implementation, backend, device, dtype, shape) with its
status, reason, parity, timing and metrics; a *results document* holds the run, the host,
software and settings, the backends and the records. Every command that writes a results
file (run, compile, the probes) builds it here, so each file has the same layout.
"""

from __future__ import annotations

import datetime as dt
import math
import socket
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, cast, overload

from hwbench.core.host import hwbench_info
from hwbench.core.results_types import Document, HwbenchInfo, Metrics, Parity, Record, Run, TimingSection

#: The results format's version: 2 added the status ``implausible``.
SCHEMA_VERSION = 2
KIND = "hwbench-results"
#: A record's status. ``implausible``: a figure above the device's peak, or an output wrong after timing.
STATUSES = ("ok", "skipped", "compile_error", "runtime_error", "parity_failed", "implausible", "timeout", "crashed")


class _InputsVersion(TypedDict, total=False):
    """A record's ``inputs_version``, where its kernel has one."""

    inputs_version: int


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None (JSON has no such numbers)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def now() -> str:
    """UTC now, ISO 8601 to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def empty_parity() -> Parity:
    """The parity section of a record not checked (yet)."""
    return {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None}


def empty_timing() -> TimingSection:
    """The timing section of a record not timed (yet)."""
    return {"median_s": None, "iqr_s": None, "cv": None, "n": 0, "timer": None}


def empty_metrics() -> Metrics:
    """The metrics section of a record without derived figures (yet)."""
    return {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None}


def new_record(
    kernel: str,
    impl: str,
    backend: str,
    device_index: int,
    dtype: str | None,
    shape: Mapping[str, int],
    *,
    impl_kind: str | None = None,
    language: str | None = None,
    device: str | None = None,
    inputs_version: int | None = None,
) -> Record:
    """A record with its coordinates set and every measurement empty (status ok until marked).

    ``inputs_version`` is the kernel's :attr:`~hwbench.core.kernel.Kernel.inputs_version`; a record
    without one (a probe's, or one an older hwbench wrote) was made from version 1.
    """
    version: _InputsVersion = {} if inputs_version is None else {"inputs_version": inputs_version}
    return {
        "kernel": kernel,
        "impl": impl,
        "impl_kind": impl_kind,
        "language": language,
        "backend": backend,
        "device": device,
        "device_index": device_index,
        "dtype": dtype,
        "shape": dict(shape),
        **version,
        "status": "ok",
        "reason": "",
        "parity": empty_parity(),
        "timing": empty_timing(),
        "metrics": empty_metrics(),
        "compile_s": None,
        "config": {},
        "warnings": [],
    }


@overload
def failed(record: Record, status: str, reason: str) -> Record: ...
@overload
def failed(record: dict[str, Any], status: str, reason: str) -> dict[str, Any]: ...
def failed(record: Record | dict[str, Any], status: str, reason: str) -> Record | dict[str, Any]:
    """Mark ``record`` with a non-ok status and its human reason: a results record, or another
    command's record of the same status and reason (``hwbench compile``'s, in ``compile``)."""
    record["status"], record["reason"] = status, reason
    return record


def build_document(command: Sequence[str], *, host: Mapping[str, Any] | None = None, **run_fields: Any) -> Document:
    """A results document with no backends and no records yet.

    ``host`` is a host description (``host``, ``software``, ``settings``, ``warnings``, as
    :func:`hwbench.core.host.describe_host` answers); without one the document holds
    placeholders to fill in later. ``run_fields`` set fields of ``run``: they replace the
    defaults (``incomplete``, ``profile``, ``seed``, ``timeout_s``, ``price``, even
    ``started``) or come after them (``timing``).
    """
    run: Run = {
        "id": uuid.uuid4().hex,
        "started": now(),
        "finished": None,
        "incomplete": False,
        "command": list(command),
        "profile": None,
        "seed": 0,
        "timeout_s": None,
        "price": None,
        "hwbench": cast(HwbenchInfo, hwbench_info()),
    }
    run.update(cast(Run, run_fields))  # of Run's keys; any of them, none required
    if host is None:
        host = {
            "host": {"hostname": "unknown", "os": "unknown", "cpu": {"model": "unknown", "cores": 0}},
            "software": {},
            "settings": {},
            "warnings": [],
        }
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "run": run,
        "host": host["host"],
        "software": host["software"],
        "settings": host["settings"],
        "warnings": list(host["warnings"]),
        "backends": [],
        "records": [],
    }


def new_document(command: Sequence[str], *, host: Mapping[str, Any] | None = None, **run_fields: Any) -> dict[str, Any]:
    """The document of :func:`build_document`, typed as a plain mapping: for the callers that do not
    read it as a :class:`~hwbench.core.results_types.Document` yet (``run/burn.py``, ``compile/jobs.py``)."""
    return cast(dict[str, Any], build_document(command, host=host, **run_fields))


def default_out(kind: str | None = None) -> Path:
    """Where a results file goes when the user names none.

    ``results/hwbench-HOST-TIME.json``, or ``results/hwbench-KIND-HOST-TIME.json`` with a
    ``kind`` such as ``compile`` or ``probe-storage``; HOST is the full host name, TIME the
    local time to the second.
    """
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    prefix = f"hwbench-{kind}" if kind else "hwbench"
    return Path("results") / f"{prefix}-{socket.gethostname()}-{stamp}.json"
