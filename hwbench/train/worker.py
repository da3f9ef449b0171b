"""One rank of a training run: ``python -m hwbench.train.worker JOB_JSON``, alone or under torchrun.

It stamps the wall clock at start, before its heavy imports, then builds the model from the seed,
reads its batches through a DataLoader over the shards, and trains with AdamW (autocast bf16 where
the job asks for it). Every event (start, phases, each step's loss and seconds, checkpoints, the
end) is one JSON line appended to ``events-rank<R>.jsonl`` in the job's folder and flushed at once,
so a rank killed at any moment leaves every step it finished on record. With a checkpoint folder it
saves model and optimizer through ``torch.distributed.checkpoint`` every N steps and, when started
again (torchrun's restarts, a requeued Slurm job), resumes from the newest complete checkpoint.
"""

from __future__ import annotations

import time

T_START = time.time()

import json  # noqa: E402  (imports come after the first timestamp on purpose)
import os  # noqa: E402
import resource  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, TextIO  # noqa: E402

#: Exit status of a rank that refused the job before allocating (the model does not fit).
EXIT_REFUSED = 3
#: Steps of linear learning-rate warm-up (at most; a fifth of a shorter run).
WARMUP_STEPS = 10
CHECKPOINT_PREFIX = "step-"


class Events:
    """This rank's events file: one JSON object per line, flushed as it is written."""

    def __init__(self, folder: Path, rank: int, attempt: int) -> None:
        self.rank, self.attempt = rank, attempt
        self.handle: TextIO = open(folder / f"events-rank{rank}.jsonl", "a", encoding="utf-8")

    def write(self, event: str, **fields: Any) -> None:
        """Append ``event`` with the wall-clock time, this rank and this attempt."""
        line = {"event": event, "t": time.time(), "rank": self.rank, "attempt": self.attempt, **fields}
        self.handle.write(json.dumps(line) + "\n")
        self.handle.flush()


def checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints in ``folder`` (step, path), oldest first."""
    found = []
    for path in folder.glob(f"{CHECKPOINT_PREFIX}*"):
        step = path.name.removeprefix(CHECKPOINT_PREFIX)
        if step.isdigit() and (path / ".metadata").exists():
            found.append((int(step), path))
    return sorted(found)


def _peak_memory(device: Any) -> tuple[int, str]:
    import torch

    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device)), "torch.cuda.max_memory_allocated"
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024, "peak RSS of the rank (getrusage)"


def _gemm_roof(preset: Any, device: Any, dtype: Any) -> float:
    """TFLOPS of the model's largest linear layer as one dense GEMM (tokens x d_model x d_ff)."""
    import torch

    m, k, n = preset.batch * preset.seq, preset.d_model, preset.d_ff
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    for _ in range(2):
        torch.matmul(a, b)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        torch.matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 2.0 * m * n * k / sorted(times)[len(times) // 2] / 1e12


def _attempt_store(events: Events) -> Any:
    """The rendezvous store of this attempt alone: torchrun's store under a prefix of the attempt.

    torchrun's agent keeps one store across its restarts; without a prefix of their own, the ranks
    of a restart would find the addresses the killed attempt's ranks published there and fail to
    connect to them."""
    import torch.distributed as dist

    host, port, world = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), int(os.environ["WORLD_SIZE"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    base = dist.TCPStore(host, port, world, is_master=events.rank == 0 and not agent_store, wait_for_workers=False)
    return dist.PrefixStore(f"hwbench/attempt-{events.attempt}", base)


def train(job: dict[str, Any], events: Events) -> int:
    """Run the job's steps on this rank; the exit status."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.nn.parallel import DistributedDataParallel

    # torch and what needs it come after the start and "imported" stamps: their import is a phase
    from hwbench.train.data import loader
    from hwbench.train.model import build, loss_of  # (timed with the imports above)
    from hwbench.train.presets import get_preset  # (timed with the imports above)

    events.write("imported")
    preset = get_preset(job["preset"])
    rank, ranks = events.rank, int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device(job["device"]) if job["device"] == "cpu" else torch.device(job["device"], local)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        free, _ = torch.cuda.mem_get_info(device)
        if preset.memory_estimate() > free:
            events.write(
                "refused", reason=f"needs about {preset.memory_estimate() / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"
            )
            return EXIT_REFUSED
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    if job.get("deterministic"):
        torch.use_deterministic_algorithms(True)
    if ranks > 1:
        dist.init_process_group(
            "nccl" if device.type == "cuda" else "gloo", store=_attempt_store(events), rank=rank, world_size=ranks
        )
    events.write("init", threads=torch.get_num_threads(), ranks=ranks)

    model: Any = build(preset, job["seed"], device)
    if ranks > 1:
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        _KEPT.append(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=preset.lr, betas=(0.9, 0.95), weight_decay=0.1)
    first_step = 1
    folder = Path(job["checkpoint_dir"]) if job.get("checkpoint_dir") else None
    if folder is not None and checkpoints(folder):
        step, path = checkpoints(folder)[-1]
        model_state, optim_state = get_state_dict(model, optimizer)
        state: dict[str, Any] = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        first_step = step + 1
        events.write("resume", step=step)
    step_fn: Any = torch.compile(model) if job.get("compile") else model
    events.write("model", first_step=first_step)

    batches = loader(
        Path(job["data_dir"]),
        preset.seq,
        preset.batch,
        rank,
        ranks,
        first_step - 1,
        job["steps"],
        job["loader_workers"],
    )
    events.write("data")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=job["dtype"] == "bf16")
    warmup = max(1, min(WARMUP_STEPS, job["steps"] // 5))
    step = first_step - 1
    started = time.perf_counter()
    for tokens in batches:
        step += 1
        for group in optimizer.param_groups:
            group["lr"] = preset.lr * min(1.0, step / warmup)
        with autocast:
            loss = loss_of(step_fn, tokens.to(device, non_blocking=True))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = float(loss.detach())  # brings the loss to the host: the step is finished
        now = time.perf_counter()
        events.write("step", step=step, loss=value, step_s=now - started)
        if job.get("kill") == [rank, step] and events.attempt == 0:  # the drill's seeded kill
            events.write("kill", step=step)
            os.kill(os.getpid(), signal.SIGKILL)
        if folder is not None and step % job["checkpoint_every"] == 0:
            saved = time.perf_counter()
            model_state, optim_state = get_state_dict(model, optimizer)
            target = folder / f"{CHECKPOINT_PREFIX}{step}"
            dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(target))
            events.write("checkpoint", step=step, save_s=time.perf_counter() - saved)
            now = time.perf_counter()
        started = now
    memory, source = _peak_memory(device)
    roof = (
        _gemm_roof(preset, device, torch.bfloat16 if job["dtype"] == "bf16" else torch.float32) if rank == 0 else None
    )
    events.write("done", peak_memory_bytes=memory, memory_source=source, gemm_roof_tflops=roof)
    if ranks > 1:
        dist.destroy_process_group()
    return 0


#: Objects never freed: torch frees a DDP model's reducer holding the GIL while the gloo process
#: group it owns joins a thread that may be waiting for the GIL to free a finished allreduce (a
#: deadlock seen at the end of two-rank runs). Kept here, the model outlives ``train``; the process
#: then leaves with ``os._exit``, which runs no destructor.
_KEPT: list[Any] = []


def _exit_with_launcher() -> None:
    """Leave at once when the process that started this rank (torchrun's agent, hwbench) is gone:
    a rank never outlives its launcher as an orphan."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="hwbench-launcher-watch", daemon=True).start()


def main(argv: list[str]) -> int:
    """Train the job in the JSON file ``argv[0]``; write this rank's events beside it."""
    _exit_with_launcher()
    job = json.loads(Path(argv[0]).read_text())
    rank = int(os.environ.get("RANK", "0"))
    attempt = int(os.environ.get("SLURM_RESTART_COUNT") or 0) + int(os.environ.get("TORCHELASTIC_RESTART_COUNT") or 0)
    events = Events(Path(job["events_dir"]), rank, attempt)
    events.write("start", t_start=T_START, pid=os.getpid())
    try:
        return train(job, events)
    except Exception as exc:  # the reason goes on record; the launcher sees the exit status
        events.write("error", reason=f"{type(exc).__name__}: {exc}"[:800])
        return 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Every event is flushed as written and every checkpoint saved before main returns: leave at
    # once, so that no interpreter teardown (gloo's, a loader's, a thread's) can hold the launcher.
    os._exit(code)
