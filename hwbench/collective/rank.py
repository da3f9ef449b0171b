"""The code every rank runs: join the process group, set up each implementation, run the cases.

``python -m hwbench.collective.rank JOB.json`` is how hwbench's launcher starts a rank;
under torchrun, ``hwbench run`` calls :func:`follow` on ranks other than 0 and rank 0
runs :func:`serve` inside the normal run. Rank 0 reports progress through ``emit``:
``{"event": "start" | "record" | "setup", ...}``. A rank that fails writes
``rank<R>.error.json`` beside the job (phase, status, message) and exits with
:data:`EXIT_COLLECTIVE_ERROR`, so its launcher can name it.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwbench.collective.debris import sweep_stale
from hwbench.collective.dispatch import create, on_gpus
from hwbench.collective.impls import Collective
from hwbench.collective.mpi import MPI_ENV, finalize, rank_environment
from hwbench.collective.rendezvous import init_process_group, join_timeout
from hwbench.collective.shm import CollectiveError
from hwbench.collective.sweep import run_case, to_record
from hwbench.collective.topology import World, describe_rank

EXIT_COLLECTIVE_ERROR = 3
#: Test hook: ``RANK:CASE_INDEX:exit|kill|hang`` makes that rank fail at the start of that case.
FAULT_ENV = "HWBENCH_AR_FAULT"

Emit = Callable[[dict[str, Any]], None]


class Progress:
    """Where this rank is: a phase and a step count that every rank advances alike.

    Phases: ``init``, ``joining``, ``setup`` (describing itself), then per case ``case:I``,
    ``setup:IMPL`` (the first case of an implementation), ``case:I:check``, ``case:I:timing``,
    ``case:I:last check``; ``done`` at the end. With ``path``, each change is written there
    (replaced whole) for the launcher, which names the ranks that fell behind when time runs out.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path, self.phase, self.step = path, "init", 0
        self._write()

    def __call__(self, phase: str) -> None:
        self.phase, self.step = phase, self.step + 1
        self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        fresh = self.path.with_name(self.path.name + ".new")
        fresh.write_text(json.dumps({"step": self.step, "phase": self.phase}))
        os.replace(fresh, self.path)


def _inject_fault(world: World, index: int) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    parts = spec.split(":")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return
    if int(parts[0]) != world.rank or int(parts[1]) != index:
        return
    if parts[2] == "exit":
        os._exit(7)
    if parts[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if parts[2] == "hang":
        time.sleep(3600)


def serve(world: World, job: dict[str, Any], emit: Emit, progress: Progress | None = None) -> None:
    """Run every case of ``job`` in order; rank 0 emits its events and records.

    ``progress`` tracks where this rank is, for error reports and the launcher.
    """
    progress = progress if progress is not None else Progress()
    impls: dict[str, Collective] = {}
    max_bytes = job["max_bytes"]
    try:
        for case in job["cases"]:
            name, index = case["impl"], case["index"]
            progress(f"case:{index}")
            if world.rank == 0:
                emit({"event": "start", "index": index, "impl": name})
            _inject_fault(world, index)
            if name not in impls:
                progress(f"setup:{name}")
                impls[name] = create(name, world, max_bytes.get(name, 0), job["timeout_s"], case["backend"])
            result = run_case(impls[name], case, world, _marker(progress, f"case:{index}"))
            if world.rank == 0:
                base = dict(case["record"], config={**case["record"].get("config", {}), **impls[name].config})
                emit({"event": "record", "index": index, "record": to_record(base, result, job["resolution_s"])})
        progress("done")
    finally:
        for impl in impls.values():
            impl.close()


def _marker(progress: Progress, prefix: str) -> Callable[[str], None]:
    """A step inside a case, as ``progress`` records it: ``PREFIX:STEP``."""
    return lambda step: progress(f"{prefix}:{step}")


def follow(timeout_s: float) -> int:
    """A torchrun rank other than 0: receive the job from rank 0, take part, exit (1 with one line
    on stderr when the ranks cannot meet or a collective fails)."""
    import torch.distributed as dist  # torch, optional: only ranks import it

    world = World.from_env()
    sweep_stale()
    try:
        init_process_group(world, timeout_s, join_timeout(timeout_s))
    except CollectiveError as exc:
        print(f"hwbench: {exc}", file=sys.stderr)
        return 1
    try:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=world.group)
        job = box[0]
        participants: list[Any] = [None] * world.size
        dist.all_gather_object(participants, describe_rank(world, job is not None and _on_gpus(job)), group=world.group)
        if job is not None:
            serve(world, job, lambda event: None)
    except (CollectiveError, RuntimeError) as exc:  # gloo's timeouts and lost peers arrive as RuntimeError
        print(f"hwbench: rank {world.rank}: {' '.join(str(exc).split())[:400]}", file=sys.stderr)
        return 1
    finally:
        dist.destroy_process_group()
    return 0


def _on_gpus(job: dict[str, Any]) -> bool:
    return any(on_gpus(case["backend"]) for case in job["cases"])


def _parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _die_with_parent(launcher: int, through_mpirun: bool) -> None:
    """Ask the kernel to SIGKILL this rank when its parent (the launcher, or its mpirun) dies: no orphans."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = os.getppid()
    if parent != launcher and not (through_mpirun and _parent_of(parent) == launcher):
        os._exit(1)  # the launcher (or mpirun) died before prctl took effect


def main(argv: list[str]) -> int:
    """Entry point of a rank started by hwbench's launcher."""
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text())
    through_mpirun = os.environ.get(MPI_ENV) == "1"
    _die_with_parent(job["parent_pid"], through_mpirun)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if through_mpirun:
        os.environ.update(rank_environment(os.environ))
    world = World.from_env()
    if through_mpirun:  # mpirun merges every rank's output: give each its own log, as the launcher does
        (job_path.parent / f"rank{world.rank}.pid").write_text(str(os.getpid()))
        log = os.open(job_path.parent / f"rank{world.rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
    progress = Progress(job_path.parent / f"rank{world.rank}.progress")
    events = open(job_path.parent / "events.jsonl", "a", buffering=1) if world.rank == 0 else None

    def emit(event: dict[str, Any]) -> None:
        assert events is not None
        events.write(json.dumps(event) + "\n")

    def report(status: str, message: str) -> None:
        error = {"rank": world.rank, "phase": progress.phase, "status": status, "message": message}
        (job_path.parent / f"rank{world.rank}.error.json").write_text(json.dumps(error))

    try:
        import torch.distributed as dist

        progress("joining")
        init_process_group(world, job["timeout_s"])
        progress("setup")
        participants: list[Any] = [None] * world.size
        dist.all_gather_object(participants, describe_rank(world, _on_gpus(job)), group=world.group)
        if world.rank == 0:
            emit({"event": "ready", "participants": participants})
        serve(world, job, emit, progress)
        dist.destroy_process_group()
        finalize()
    except CollectiveError as exc:
        report(exc.status, str(exc))
        return EXIT_COLLECTIVE_ERROR
    except Exception as exc:  # gloo's timeouts and lost peers arrive as RuntimeError
        text = " ".join(str(exc).split())[:400]
        status = "timeout" if "timed out" in text.lower() or "timeout" in text.lower() else "runtime_error"
        report(status, f"{exc.__class__.__name__}: {text}")
        return EXIT_COLLECTIVE_ERROR
    finally:
        if events is not None:
            events.close()
    return 0


if __name__ == "__main__":
    atexit.register(sys.stdout.flush)
    sys.exit(main(sys.argv[1:]))
