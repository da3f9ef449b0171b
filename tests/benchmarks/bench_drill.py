"""The recovery drill (``hwbench drill``), against its goals on a CPU with 2 ranks: the training
resumed (its first step after the restart completed) within 30 s of the SIGKILL, no step lost
beyond the checkpoint interval, and every loss of the resumed run equal to the uninterrupted
run's.

    .venv/bin/python tests/benchmarks/bench_drill.py [--preset tiny] [--steps 50] [--ranks 2]
        [--checkpoint-every 5] [--seed 0] [--launcher torchrun] [-o drill.json]

The checkpoints, token shards and compile caches live in a temporary folder this script removes.
Prints the drill's figures, its timeline, whether each goal was met, and /proc/loadavg before and
after. Exits 1 when the command fails or the record is not ok, 0 otherwise (a goal missed is
printed, not an error).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from scratch import loadavg, scratch_env

#: Seconds from the kill to the first step completed after resuming, on a CPU with 2 ranks.
RESUME_GOAL_S = 30.0


def _goals(drill: dict[str, Any]) -> list[str]:
    resume, lost, every = drill.get("time_to_resume_s"), drill.get("steps_lost"), drill["checkpoint_every"]
    identical = drill["losses"] == drill["reference_losses"]
    return [
        f"goal resumed <= {RESUME_GOAL_S:g} s after the kill: "
        + ("-" if resume is None else f"{resume:.1f} s ")
        + ("met" if resume is not None and resume <= RESUME_GOAL_S else "MISSED"),
        f"goal steps lost <= the checkpoint interval ({every}): {lost} "
        + ("met" if lost is not None and 0 <= lost <= every else "MISSED"),
        f"goal losses identical to the uninterrupted run ({len(drill['losses'])} steps): "
        + ("met" if identical else "MISSED"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="model preset (default tiny, the CPU's default)")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30, the drill's)")
    parser.add_argument("--ranks", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("--checkpoint-every", type=int, default=5, help="steps between checkpoints (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the kill point, weights and tokens (default 0)")
    parser.add_argument("--launcher", default="torchrun", help="torchrun (default) or slurm")
    parser.add_argument("-o", "--out", type=Path, default=None, help="keep the results file here (never overwritten)")
    args = parser.parse_args()
    if args.out is not None and args.out.exists():
        print(f"bench_drill: {args.out} exists; name a new file", file=sys.stderr)
        return 2
    print(f"loadavg before: {loadavg()}")
    folder = Path(tempfile.mkdtemp(prefix="hwbench-bench-drill-"))
    failed = True
    try:
        env = scratch_env(folder)
        out = folder / "drill.json"
        command = [sys.executable, "-m", "hwbench", "drill", "--backend", "cpu", "--preset", args.preset]
        command += ["--steps", str(args.steps), "--ranks", str(args.ranks), "--seed", str(args.seed)]
        command += ["--checkpoint-every", str(args.checkpoint_every), "--launcher", args.launcher, "-q"]
        command += ["--data-dir", str(folder / "data"), "--checkpoint-dir", str(folder / "checkpoints")]
        command += ["-o", str(out)]
        print("command: hwbench " + " ".join(command[3:]))
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        if not out.exists():
            print(f"hwbench drill exited {proc.returncode} without a results file: {proc.stderr.strip()[-2000:]}")
            return 1
        if args.out is not None:
            shutil.copyfile(out, args.out)
        (record,) = json.loads(out.read_text())["records"]
        drill = record["drill"]
        print(f"status {record['status']} {record['reason']}".rstrip())
        for key in ("kill_step", "killed_rank", "last_step_before_kill", "resumed_from_step", "steps_lost"):
            print(f"{key}: {drill.get(key)}")
        for key in ("time_to_resume_s", "detect_s", "checkpoint_s"):
            value = drill.get(key)
            print(f"{key}: {'-' if value is None else f'{value:.2f}'}")
        print("timeline:")
        for event in drill["timeline"]:
            where = "".join(f" {k} {event[k]}" for k in ("step", "rank") if event.get(k) is not None)
            print(f"  {event['t_s']:8.2f} s  {event['event']}{where}")
        print(*_goals(drill), sep="\n")
        failed = proc.returncode != 0 or record["status"] != "ok"
        if failed:
            print(f"hwbench drill exited {proc.returncode}: {proc.stderr.strip()[-1000:]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"loadavg after: {loadavg()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
