"""The drill under Slurm: the training as a batch job submitted with ``--requeue`` that requeues itself.

The batch script runs the ranks under torchrun without restarts; when they fail (the drill's
SIGKILL) and the job has been requeued fewer than ``--max-restarts`` times, the script asks
Slurm to requeue it (``scontrol requeue $SLURM_JOB_ID``), the pattern of a job that outlives a
failed node. Slurm starts the script again (``SLURM_RESTART_COUNT`` counts the attempts) and the
ranks resume from the newest checkpoint. The drill waits for the job to leave the queue.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hwbench.core.errors import UserError
from hwbench.train.drill import KillPoint
from hwbench.train.launch import MONITOR_INTERVAL_S, Launch, read_events
from hwbench.train.session import Plan, Target, drill_job

#: Seconds between two looks at the job's state.
POLL_S = 0.25
DONE_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")
TOOLS = ("sbatch", "scontrol", "scancel")


def batch_script(job_path: Path, ranks: int, max_requeues: int, cpus: int) -> str:
    """The batch script of one drill launch: torchrun around the worker, requeued on failure."""
    torchrun = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
        f"--nproc-per-node={ranks}", "--max-restarts=0", f"--monitor-interval={MONITOR_INTERVAL_S}",
        "-m", "hwbench.train.worker", str(job_path),
    ]  # fmt: skip
    return f"""#!/bin/bash
#SBATCH --job-name=hwbench-drill
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={cpus}
#SBATCH --requeue
#SBATCH --open-mode=append
{shlex.join(torchrun)}
status=$?
if [ "$status" -ne 0 ] && [ "${{SLURM_RESTART_COUNT:-0}}" -lt {max_requeues} ]; then
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
"""


def _tool(name: str) -> str:
    found = shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"]))
    if found is None:
        raise UserError(
            f"--launcher slurm needs Slurm's {name}, not found on PATH: run the drill where Slurm's clients are"
        )
    return found


def check_tools() -> None:
    """UserError naming the first Slurm client missing."""
    for name in TOOLS:
        _tool(name)


def job_state(scontrol: str, job_id: str) -> tuple[str, int | None]:
    """The job's state and exit status (``scontrol show job``); ('GONE', None) once it has left."""
    out = subprocess.run([scontrol, "show", "job", "-o", job_id], capture_output=True, text=True, timeout=30).stdout
    state = re.search(r"\bJobState=(\S+)", out)
    code = re.search(r"\bExitCode=(\d+):", out)
    return (state[1] if state else "GONE"), (int(code[1]) if code else None)


def submit_and_wait(script: str, folder: Path, partition: str | None, timeout: float) -> Launch:
    """Submit ``script``, wait until it has finished for good (requeues included); its events."""
    sbatch, scontrol, scancel = (_tool(name) for name in TOOLS)
    path = folder / "drill.sbatch"
    path.write_text(script)
    args = [sbatch, "--parsable", f"--chdir={folder}", f"--output={folder}/slurm-%j.out"]
    args += [f"--partition={partition}"] if partition else []
    result = Launch(launched_t=time.time())
    done = subprocess.run([*args, str(path)], capture_output=True, text=True, timeout=60)
    job_id = done.stdout.strip().split(";")[0]
    if done.returncode != 0 or not job_id.isdigit():
        raise UserError(f"sbatch refused the drill's job: {(done.stderr or done.stdout).strip()[:300]}")
    deadline = time.monotonic() + timeout
    state, code = "PENDING", None
    try:
        while True:
            state, code = job_state(scontrol, job_id)
            if state in DONE_STATES or state == "GONE":
                break
            if time.monotonic() > deadline:
                result.timed_out = True
                break
            time.sleep(POLL_S)
    finally:
        if state not in DONE_STATES:
            subprocess.run([scancel, job_id], capture_output=True, timeout=30)
    result.returncode = 0 if state == "COMPLETED" else (code or 1)
    result.ended_t = time.time()
    result.events = read_events(folder)
    output = folder / f"slurm-{job_id}.out"
    lines = [ln for ln in output.read_text(errors="replace").splitlines() if ln.strip()] if output.exists() else []
    result.log_tail = f"job {job_id} {state}" + (": " + " | ".join(lines[-3:])[-500:] if lines else "")
    return result


def slurm_launcher(
    args: argparse.Namespace, target: Target, plan: Plan, data: Path, checkpoints: Path, work: Path
) -> Callable[[KillPoint | None], Launch]:
    """The drill's launches as Slurm batch jobs (the uninterrupted one never requeued)."""
    cpus = len(os.sched_getaffinity(0))

    def run(point: KillPoint | None) -> Launch:
        job = drill_job(plan, target, data, args.ranks, checkpoints, args.checkpoint_every, point)
        folder = Path(tempfile.mkdtemp(prefix="events-", dir=work))
        folder.chmod(0o755)
        job["events_dir"] = str(folder)
        job_path = folder / "job.json"
        job_path.write_text(json.dumps(job))
        script = batch_script(job_path, args.ranks, args.max_restarts if point is not None else 0, cpus)
        return submit_and_wait(script, folder, args.partition, args.timeout)

    return run
