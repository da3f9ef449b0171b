"""Starting a training job's ranks as a user would, and reading back what they did.

One rank with no restarts is one ``python -m hwbench.train.worker`` process; anything else goes
through torchrun (``python -m torch.distributed.run --standalone``, ``--max-restarts``), whose agent
restarts every rank when one fails. The job runs in a process group of its own, killed as one when
it ends, times out or is interrupted, so no rank outlives the launch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How often torchrun's agent looks at its workers (its default is 0.1 s in recent versions).
MONITOR_INTERVAL_S = 0.1
#: Cache variables a cold run points at an empty folder and a warm one at a primed one.
CACHE_VARS = (
    "TORCHINDUCTOR_CACHE_DIR",
    "TRITON_CACHE_DIR",
    "CUDA_CACHE_PATH",
    "XDG_CACHE_HOME",
    "MIOPEN_USER_DB_PATH",
    "MIOPEN_CUSTOM_CACHE_DIR",
)


@dataclass
class Launch:
    """What one launch of a job did: its events by rank, exit status, times and log tail."""

    events: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    launched_t: float = 0.0
    ended_t: float = 0.0
    timed_out: bool = False
    log_tail: str = ""

    def of(self, event: str, rank: int | None = None, attempt: int | None = None) -> list[dict[str, Any]]:
        """The events named ``event`` (of one rank, one attempt), in the order written."""
        return [
            e
            for e in self.events
            if e["event"] == event
            and (rank is None or e["rank"] == rank)
            and (attempt is None or e["attempt"] == attempt)
        ]

    def error(self) -> str:
        """The first error a rank put on record, else the launcher's log tail."""
        errors = self.of("error") + self.of("refused")
        return errors[0]["reason"] if errors else self.log_tail


def argv(job_path: Path, ranks: int, max_restarts: int) -> list[str]:
    """The command that starts the job's ranks: the worker itself, or torchrun around it."""
    worker = ["-m", "hwbench.train.worker", str(job_path)]
    if ranks == 1 and max_restarts == 0:
        return [sys.executable, *worker]
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={ranks}",
        f"--max-restarts={max_restarts}",
        f"--monitor-interval={MONITOR_INTERVAL_S}",
        *worker,
    ]


def read_events(folder: Path) -> list[dict[str, Any]]:
    """Every complete line of every rank's events file in ``folder``, by time."""
    found = []
    for path in sorted(folder.glob("events-rank*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            if line.endswith("\n"):  # a line still being written is read next time
                found.append(json.loads(line))
    return sorted(found, key=lambda e: e["t"])


def launch(
    job: dict[str, Any],
    folder: Path,
    ranks: int,
    max_restarts: int,
    timeout: float,
    env: dict[str, str],
) -> Launch:
    """Run ``job`` (its events go to ``folder``) on ``ranks`` ranks and wait for it, at most
    ``timeout`` seconds."""
    job = {**job, "events_dir": str(folder)}
    job_path = folder / "job.json"
    job_path.write_text(json.dumps(job))
    log_path = folder / "launcher.log"
    result = Launch(launched_t=time.time())
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv(job_path, ranks, max_restarts),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            process_group=0,
            preexec_fn=_die_with_parent,
        )
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        result.timed_out = True
    finally:
        _kill_group(proc)
    result.returncode = proc.returncode
    result.ended_t = time.time()
    result.events = read_events(folder)
    lines = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()]
    result.log_tail = " | ".join(lines[-3:])[-600:]
    return result


def _die_with_parent() -> None:
    """In the launched process before exec: SIGKILL it when hwbench dies (PR_SET_PDEATHSIG), so a
    killed hwbench leaves no launcher behind; its ranks watch the launcher in turn."""
    import ctypes  # only this child needs it

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the job's process group (the launcher and every rank it started) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def cache_env(cache: Path) -> dict[str, str]:
    """The environment of a run whose compile caches are in ``cache``."""
    return {var: str(cache / var.lower()) for var in CACHE_VARS}
