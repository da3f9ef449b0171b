"""The recovery drill: kill one rank of a checkpointed training run and time its launcher's resume.

  hwbench drill                                   # 2 ranks on the CPU under torchrun
  hwbench drill --backend cpu --ranks 2 --steps 30 --checkpoint-every 5 --seed 7
  hwbench drill --launcher slurm --ranks 2 -o results/drill.json

An uninterrupted run of the same seed comes first. Then the same training, checkpointed every
--checkpoint-every steps through torch.distributed.checkpoint to --checkpoint-dir, runs under a
launcher that restarts it: torchrun with --max-restarts, or (--launcher slurm) a batch job
submitted with --requeue that requeues itself when a rank fails. When the rank the seed chooses
has finished the step the seed chooses, it is SIGKILLed. One record of kernel 'drill': the time
from the kill to the end of the first step completed after resuming (the score's recovery
figure), the steps lost (at most the checkpoint interval), the timeline, and whether every loss
equals the uninterrupted run's (bit for bit on CPUs, within 1e-2 relative on GPUs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hwbench.cli.options import add_out, add_quiet, emit, positive_seconds
from hwbench.cli.train import add_model_options, checked_out, resolve_target
from hwbench.core.errors import UserError
from hwbench.core.host import describe_host
from hwbench.core.records import build_document, now
from hwbench.train.drill import DrillSetting, KillPoint, kill_point, run_drill
from hwbench.train.launch import Launch, launch
from hwbench.train.presets import get_preset
from hwbench.train.session import Plan, Target, check_fits, data_folder, drill_job, own_folder, write_data
from hwbench.train.slurm import check_tools, slurm_launcher

HELP = "kill a rank of a checkpointed training run; time to resume, steps lost, identical losses"
EXIT_FAILED = 1
LAUNCHERS = ("torchrun", "slurm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench drill``."""
    parser.add_argument("--backend", default="cpu", help="cpu, cuda or rocm (default cpu)")
    add_model_options(parser, steps=30)
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the training (default 2)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints (default 5)")
    parser.add_argument(
        "--checkpoint-dir", type=Path, default=None, help="folder for the checkpoints (default: a temporary one)"
    )
    parser.add_argument("--max-restarts", type=int, default=3, help="restarts the launcher allows (default 3)")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="torchrun", help="torchrun (default) or slurm")
    parser.add_argument("--partition", default=None, help="Slurm partition (--launcher slurm; default: Slurm's)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds allowed per launch (default 900)")
    add_out(parser, "drill-HOST-TIME.json")
    add_quiet(parser)


def launcher_of(
    args: argparse.Namespace, target: Target, plan: Plan, data: Path, checkpoints: Path, work: Path
) -> Callable[[KillPoint | None], Launch]:
    """How the drill launches its job (checkpointed or not) with the chosen launcher."""

    def torchrun(point: KillPoint | None) -> Launch:
        job = drill_job(plan, target, data, args.ranks, checkpoints, args.checkpoint_every, point)
        folder = Path(tempfile.mkdtemp(prefix="events-", dir=work))
        restarts = args.max_restarts if point is not None else 0
        return launch(job, folder, args.ranks, restarts, args.timeout, dict(os.environ))

    if args.launcher == "torchrun":
        return torchrun

    return slurm_launcher(args, target, plan, data, checkpoints, work)


def main(args: argparse.Namespace) -> int:
    """Run the drill, write its results file, print its figures; 1 when it failed."""
    positive_seconds(args.timeout, "--timeout")
    if args.ranks < 1:
        raise UserError(f"--ranks must be at least 1, got {args.ranks}")
    if args.max_restarts < 1:
        raise UserError(f"--max-restarts must be at least 1 (the drill needs a restart), got {args.max_restarts}")
    out = checked_out(args, "drill")
    kill_point(args.seed, args.steps, args.checkpoint_every, args.ranks)  # its errors before anything starts
    if args.launcher == "slurm":
        check_tools()
    target, entry = resolve_target(args)
    plan = Plan(
        get_preset(args.preset),
        args.dtype,
        args.steps,
        [args.ranks],
        [False],
        args.seed,
        args.timeout,
        args.loader_workers,
    )
    setting = DrillSetting(
        plan.preset,
        args.launcher,
        target.backend,
        target.device,
        args.dtype,
        args.ranks,
        args.steps,
        args.checkpoint_every,
        args.max_restarts,
        args.seed,
        deterministic=target.kind == "cpu",
    )
    check_fits(plan.preset, target, args.ranks)
    doc = build_document(["hwbench", *sys.argv[1:]], host=describe_host(), seed=args.seed)
    doc["backends"] = [entry]
    say = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    with tempfile.TemporaryDirectory(prefix="hwbench-drill-") as work:
        checkpoints = Path(work) / "checkpoints"
        if args.checkpoint_dir:
            checkpoints = own_folder(args.checkpoint_dir, "--checkpoint-dir", "hwbench-drill-")
        checkpoints.mkdir(exist_ok=True)
        data = data_folder(args.data_dir or Path(work))
        try:
            write_data(data, plan)
            record = run_drill(setting, launcher_of(args, target, plan, data, checkpoints, Path(work)), say)
        finally:
            shutil.rmtree(data, ignore_errors=True)
            shutil.rmtree(checkpoints, ignore_errors=True)
    doc["records"] = [record]
    doc["run"]["finished"] = now()
    saved, stream = emit(doc, out)
    print(drill_line(record), file=stream)
    if saved is not None:
        print(f"\nresults: {saved}", file=stream)
    if record["status"] != "ok":
        print("hwbench: the drill failed (see its reason above)", file=sys.stderr)
        return EXIT_FAILED
    return 0


def drill_line(record: Any) -> str:
    """The drill's headline: resumed how fast, what was lost, whether the losses agree."""
    d = record["drill"]
    head = f"drill {d['preset']} {record['dtype']} {record['shape']['ranks']} rank(s) under {d['launcher']}"
    if record["status"] != "ok":
        return f"{head}: {record['status']}: {record['reason']}"
    parity = record["parity"]
    agree = "bit for bit" if parity.get("exact") else f"within {parity['rtol']:g}"
    return (
        f"{head}: rank {d['killed_rank']} killed after step {d['kill_step']}, "
        f"resumed from step {d['resumed_from_step']}, "
        f"first step {d['time_to_resume_s']:.2f} s after the kill (restart after {d.get('detect_s') or 0:.2f} s), "
        f"{d['steps_lost']} step(s) lost (checkpoint every {d['checkpoint_every']}), "
        f"{parity['elements']} losses equal to the uninterrupted run's {agree}"
    )
