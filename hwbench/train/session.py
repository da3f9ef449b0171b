"""What ``hwbench train`` does: choose the device, write the shards, launch each variant, keep records.

For each ``torch.compile`` setting and rank count it launches the training twice: with empty
compile caches (cold), then with the caches that run filled (warm). The shards are written once, to
a folder of its own inside the storage under test, and removed at the end.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.results_types import Record
from hwbench.core.train_types import TrainData
from hwbench.train.launch import cache_env, launch
from hwbench.train.presets import Preset
from hwbench.train.records import train_record
from hwbench.train.shards import PHRASE_LEN, write_shards
from hwbench.train.submit import scheduler_submit

#: Shards the tokens are split into.
SHARDS = 4
#: The torch device type of each backend that trains.
TORCH_DEVICE = {"cpu": "cpu", "cuda": "cuda", "rocm": "cuda"}


@dataclass
class Target:
    """Where the training runs: a backend's device, its peak per dtype and how many there are."""

    backend: str
    device: str | None
    kind: str
    peak_tflops: dict[str, float | None]
    peak_source: str
    devices: int
    memory_bytes: int | None


@dataclass
class Plan:
    """The variants of one ``hwbench train``: the preset, dtype, steps and what varies."""

    preset: Preset
    dtype: str
    steps: int
    ranks: list[int]
    compiles: list[bool]
    seed: int
    timeout: float
    loader_workers: int


def cpu_threads(ranks: int) -> int:
    """Threads per rank when ``ranks`` share this process's cores."""
    return max(1, len(os.sched_getaffinity(0)) // ranks)


def check_fits(preset: Preset, target: Target, ranks: int) -> None:
    """UserError, before anything is allocated, when the preset needs more memory than the device has
    or the ranks more accelerators than there are (one rank per device; CPU ranks share the host)."""
    if target.kind != "cpu" and ranks > target.devices:
        raise UserError(
            f"--ranks {ranks} needs {ranks} devices (one per rank), {target.backend} has {target.devices} here: "
            f"give at most {target.devices}"
        )
    need = preset.memory_estimate() * (ranks if target.kind == "cpu" else 1)
    if target.memory_bytes is not None and need > target.memory_bytes:
        where = "available host memory" if target.kind == "cpu" else f"memory of {target.device}"
        raise UserError(
            f"preset {preset.name} needs about {need / 2**30:.1f} GiB with {ranks} rank(s), more than the "
            f"{target.memory_bytes / 2**30:.1f} GiB {where}: choose a smaller --preset or fewer --ranks"
        )


def own_folder(parent: Path, flag: str, prefix: str) -> Path:
    """A new folder of this run's own inside the user's folder ``parent`` (given as ``flag``);
    UserError when ``parent`` is not a folder or cannot be written."""
    if not parent.is_dir():
        raise UserError(f"{flag} {parent} is not a folder: give an existing, writable folder")
    try:
        return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise UserError(f"{flag} {parent} is not writable ({exc.strerror}): give a folder you can write") from None


def data_folder(parent: Path) -> Path:
    """A new folder of this run's own inside ``parent`` (the storage under test)."""
    return own_folder(parent, "--data-dir", "hwbench-train-")


def write_data(folder: Path, plan: Plan) -> TrainData:
    """The shards of the plan's longest run, written to ``folder``; what was written and how fast."""
    preset, ranks = plan.preset, max(plan.ranks)
    tokens = preset.batch * (preset.seq + 1) * ranks * plan.steps + PHRASE_LEN
    paths, seconds = write_shards(folder, preset.vocab, tokens, SHARDS, plan.seed)
    size = sum(p.stat().st_size for p in paths)
    return {
        "dir": str(folder.parent),
        "shards": len(paths),
        "bytes": size,
        "write_s": seconds,
        "write_gbps": size / seconds / 1e9 if seconds > 0 else None,
        "loader_workers": plan.loader_workers,
    }


def job_of(plan: Plan, target: Target, data: Path, ranks: int, compiled: bool) -> dict[str, Any]:
    """The worker's job: what every rank of one launch trains."""
    cpu = target.kind == "cpu"
    return {
        "preset": plan.preset.name,
        "device": TORCH_DEVICE[target.backend],
        "dtype": plan.dtype,
        "steps": plan.steps,
        "seed": plan.seed,
        "data_dir": str(data),
        "loader_workers": plan.loader_workers,
        "threads": cpu_threads(ranks) if cpu else None,
        "deterministic": cpu,
        "checkpoint_dir": None,
        "checkpoint_every": plan.steps,
        "compile": compiled,
    }


def drill_job(
    plan: Plan, target: Target, data: Path, ranks: int, checkpoints: Path, every: int, point: Any
) -> dict[str, Any]:
    """The drill's job: uninterrupted (``point`` None), or checkpointed every ``every`` steps to
    ``checkpoints`` with the rank and step of ``point`` (a :class:`hwbench.train.drill.KillPoint`)
    killed."""
    job = job_of(plan, target, data, ranks, compiled=False)
    if point is not None:
        job.update(checkpoint_dir=str(checkpoints), checkpoint_every=every, kill=[point.rank, point.step])
    return job


def run_plan(plan: Plan, target: Target, data_dir: Path, say: Callable[[str], None]) -> list[Record]:
    """Every variant of the plan, cold then warm caches; the records, scaling efficiency filled."""
    for ranks in plan.ranks:
        check_fits(plan.preset, target, ranks)
    records: list[Record] = []
    folder = data_folder(data_dir)
    scheduler = scheduler_submit()
    try:
        data = write_data(folder, plan)
        for compiled in plan.compiles:
            for ranks in plan.ranks:
                with tempfile.TemporaryDirectory(prefix="hwbench-train-cache-") as cache:
                    for warm in (False, True):
                        say(
                            f"train {plan.preset.name} {plan.dtype} on {target.backend}: {ranks} rank(s), "
                            f"{'compiled' if compiled else 'eager'}, {'warm' if warm else 'cold'} caches"
                        )
                        job = job_of(plan, target, folder, ranks, compiled)
                        env = {**os.environ, **cache_env(Path(cache))}
                        with tempfile.TemporaryDirectory(prefix="hwbench-train-events-") as events:
                            done = launch(job, Path(events), ranks, 0, plan.timeout, env)
                        submit = scheduler if scheduler is not None else (done.launched_t, "process launch", None)
                        scheduler = None  # the scheduler's submit time is the first launch's alone
                        devices = 1 if target.kind == "cpu" else ranks
                        peak = target.peak_tflops.get(plan.dtype)
                        record = train_record(
                            done,
                            plan.preset,
                            backend=target.backend,
                            device=target.device,
                            dtype=plan.dtype,
                            ranks=ranks,
                            steps=plan.steps,
                            compiled=compiled,
                            warm=warm,
                            peak_tflops=peak * devices if peak else None,
                            peak_source=target.peak_source,
                            submit=submit,
                            job=job,
                        )
                        record["train"]["data"] = data
                        records.append(record)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    fill_scaling(records)
    return records


def fill_scaling(records: list[Record]) -> None:
    """``train.scaling_efficiency`` of each multi-rank record against its one-rank twin."""

    def key(r: Record) -> tuple[Any, ...]:
        shape = {k: v for k, v in r["shape"].items() if k != "ranks"}
        return (r["impl"], r["backend"], r["dtype"], tuple(sorted(shape.items())))

    single = {key(r): r["train"].get("tokens_per_s") for r in records if r["shape"]["ranks"] == 1}
    for r in records:
        ranks, base = r["shape"]["ranks"], single.get(key(r))
        rate = r["train"].get("tokens_per_s")
        if ranks > 1 and base and rate and math.isfinite(rate):
            r["train"]["scaling_efficiency"] = rate / (ranks * base)
