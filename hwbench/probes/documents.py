"""What the platform probes share: a results document and a record in the usual format.

Probe records are ordinary records (schema v1) with their own kernel names: ``storage``
(fio random reads; ``metrics.iops``) and ``startup`` (process start to first GEMM step;
``shape.warm_cache`` 0 or 1), so ``show``, ``validate``, ``compare`` and ``score`` read
them like any other.
"""

from __future__ import annotations

import datetime as dt
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

from hwbench.core.host import hwbench_info
from hwbench.results.files import KIND, SCHEMA_VERSION
from hwbench.run.case import CaseRequest, base_record
from hwbench.run.describe import describe_host


def now() -> str:
    """UTC now, ISO 8601 to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def new_document(command: list[str] | None = None) -> dict[str, Any]:
    """A results document with host, software and settings filled, and no records yet."""
    host = describe_host()
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "run": {
            "id": uuid.uuid4().hex,
            "started": now(),
            "finished": None,
            "incomplete": False,
            "command": command or ["hwbench", *sys.argv[1:]],
            "profile": None,
            "seed": 0,
            "timeout_s": None,
            "price": None,
            "hwbench": hwbench_info(),
        },
        "host": host["host"],
        "software": host["software"],
        "settings": host["settings"],
        "warnings": list(host["warnings"]),
        "backends": [],
        "records": [],
    }


def new_record(
    kernel: str,
    impl: str,
    backend: str,
    device: str | None,
    dtype: str | None,
    shape: dict[str, int],
    device_index: int = 0,
) -> dict[str, Any]:
    """A record with its coordinates set and every measurement empty (status ok until marked)."""
    record = base_record(CaseRequest(kernel, impl, backend, device_index, dtype or "", dict(shape)), None, None)
    record["device"], record["dtype"] = device, dtype
    return record


def default_out(kind: str) -> Path:
    """``results/hwbench-probe-KIND-HOST-TIME.json``."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"hwbench-probe-{kind}-{socket.gethostname()}-{stamp}.json"
