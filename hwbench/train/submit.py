"""When the job was submitted: the scheduler's stamp, where there is one.

``HWBENCH_SUBMIT_TIME`` (seconds since the epoch, or an RFC 3339 time) comes first: the
Kubernetes manifest hwbench writes stamps it at submission (with ``HWBENCH_SUBMIT_SOURCE``
saying so), since a pod cannot read its Job's creation time without API access. Under Slurm
(``SLURM_JOB_ID``) the job's own SubmitTime and StartTime come from ``scontrol show job``.
Without either the submit time is the process launch, and the record says which it was.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import datetime

from hwbench.core.errors import UserError

SUBMIT_VAR = "HWBENCH_SUBMIT_TIME"
SOURCE_VAR = "HWBENCH_SUBMIT_SOURCE"
SCONTROL_TIMEOUT_S = 10.0


def parse_time(text: str, what: str) -> float:
    """Seconds since the epoch of ``text``: a number, or an ISO 8601 / RFC 3339 time (naive: local)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise UserError(f"{what} is '{text}', not a time: give seconds since the epoch or an RFC 3339 time") from None


def slurm_times(job_id: str) -> tuple[float, float] | None:
    """(SubmitTime, StartTime) of Slurm job ``job_id`` in seconds since the epoch, or None."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        out = subprocess.run(
            [scontrol, "show", "job", "-o", job_id], capture_output=True, text=True, timeout=SCONTROL_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = dict(re.findall(r"\b(SubmitTime|StartTime)=(\S+)", out))
    if "SubmitTime" not in found or "StartTime" not in found:
        return None
    try:
        return (
            datetime.fromisoformat(found["SubmitTime"]).timestamp(),
            datetime.fromisoformat(found["StartTime"]).timestamp(),
        )
    except ValueError:
        return None


def scheduler_submit() -> tuple[float, str, float | None] | None:
    """(submit time, its source, seconds queued or None) from the environment, else None."""
    stamped = os.environ.get(SUBMIT_VAR)
    if stamped:
        return parse_time(stamped, SUBMIT_VAR), os.environ.get(SOURCE_VAR) or SUBMIT_VAR, None
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id:
        times = slurm_times(job_id)
        if times is not None:
            submitted, started = times
            return submitted, "slurm submit time", max(0.0, started - submitted)
    return None
