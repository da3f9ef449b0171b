"""Submit-to-first-step, tokens/s, MFU and loss parity of ``hwbench train``, every variant it runs
(eager and compiled, cold then warm compile caches, each rank count), against the goals of a
training run on a CPU: the eager run with warm caches reaches its first optimizer step within
20 s of the launch, its MFU is at least 20 % of the fp32 peak, and the loss after the run's steps
is at most 0.9x the first.

    .venv/bin/python tests/benchmarks/bench_train.py [--preset tiny] [--steps 50] [--compile both]
        [--ranks 1] [--backend cpu] [-o train.json]

The compile caches (torch inductor's, Triton's, hwbench's) and the token shards live in a
temporary folder this script removes, so the first variant starts cold. Prints one row per
record, whether each goal was met, and /proc/loadavg before and after (other work on the
machine lengthens every step). Exits 1 when the command fails or a record is not ok, 0
otherwise (a goal missed is printed, not an error: the figures are the point).
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

#: The goals of the eager run with warm caches on a CPU.
FIRST_STEP_GOAL_S = 20.0
MFU_GOAL_PCT = 20.0
LOSS_RATIO_GOAL = 0.9


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(record: dict[str, Any]) -> str:
    train, shape = record["train"], record["shape"]
    mib = None if train.get("peak_memory_bytes") is None else train["peak_memory_bytes"] / 2**20
    return (
        f"{shape['ranks']:>5} {'compiled' if train['compiled'] else 'eager':>8} "
        f"{'warm' if shape['warm_cache'] else 'cold':>5} {_fmt(train['submit_to_first_step_s'], '.1f'):>11} "
        f"{_fmt(train['tokens_per_s'], ',.0f'):>9} {_fmt(record['metrics'].get('pct_peak'), '.1f'):>6} "
        f"{_fmt(train.get('pct_gemm_roof'), '.1f'):>7} {_fmt(train['loss_first'], '.3f'):>7} "
        f"{_fmt(train['loss_last'], '.3f'):>7} {_fmt(train['loss_ratio'], '.3f'):>6} {_fmt(mib, ',.0f'):>8} "
        f"{record['status']}"
    )


def _goals(records: list[dict[str, Any]]) -> list[str]:
    """One line per goal, judged on the one-rank eager run with warm caches."""
    eager = [
        r
        for r in records
        if not r["train"]["compiled"] and r["shape"]["warm_cache"] and r["shape"]["ranks"] == 1 and r["status"] == "ok"
    ]
    if not eager:
        return ["goals: no ok one-rank eager run with warm caches to judge (add --compile off or both, --ranks 1)"]
    train, pct = eager[0]["train"], eager[0]["metrics"].get("pct_peak")
    checks = [
        ("submit-to-first-step", train["submit_to_first_step_s"], f"<= {FIRST_STEP_GOAL_S:g} s", FIRST_STEP_GOAL_S),
        ("MFU (% of the fp32 peak)", pct, f">= {MFU_GOAL_PCT:g} %", MFU_GOAL_PCT),
        ("loss last / first", train["loss_ratio"], f"<= {LOSS_RATIO_GOAL:g}", LOSS_RATIO_GOAL),
    ]
    lines = []
    for name, value, goal, bound in checks:
        above = name.startswith("MFU")
        met = value is not None and (value >= bound if above else value <= bound)
        lines.append(f"goal {name} {goal}: {_fmt(value, '.3g')} {'met' if met else 'MISSED'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu", help="backend to train on (default cpu)")
    parser.add_argument("--preset", default="tiny", help="model preset (default tiny, the CPU's default)")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps per launch (default 50)")
    parser.add_argument("--compile", default="both", help="off, on or both (default both)")
    parser.add_argument("--ranks", default="1", help="comma list of rank counts (default 1)")
    parser.add_argument("-o", "--out", type=Path, default=None, help="keep the results file here (never overwritten)")
    args = parser.parse_args()
    if args.out is not None and args.out.exists():
        print(f"bench_train: {args.out} exists; name a new file", file=sys.stderr)
        return 2
    print(f"loadavg before: {loadavg()}")
    folder = Path(tempfile.mkdtemp(prefix="hwbench-bench-train-"))
    failed = True
    try:
        env = scratch_env(folder)
        out = folder / "train.json"
        command = [sys.executable, "-m", "hwbench", "train", "--backend", args.backend, "--preset", args.preset]
        command += ["--steps", str(args.steps), "--compile", args.compile, "--ranks", args.ranks, "-q"]
        command += ["--data-dir", str(folder / "data"), "-o", str(out)]
        print("command: hwbench " + " ".join(command[3:]))
        proc = subprocess.run(command, env=env, capture_output=True, text=True)
        if not out.exists():
            print(f"hwbench train exited {proc.returncode} without a results file: {proc.stderr.strip()[-2000:]}")
            return 1
        if args.out is not None:
            shutil.copyfile(out, args.out)
        records = json.loads(out.read_text())["records"]
        print(
            f"{'ranks':>5} {'run':>8} {'cache':>5} {'1st step s':>11} {'tokens/s':>9} {'MFU %':>6} "
            f"{'% roof':>7} {'loss 1':>7} {'loss N':>7} {'ratio':>6} {'peak MiB':>8} status"
        )
        for record in records:
            print(_row(record))
        print(*_goals(records), sep="\n")
        for record in records[:1]:
            peak = record["metrics"].get("peak_tflops")
            print(f"device: {record['device']}, {record['dtype']} peak {_fmt(peak, '.4g')} TFLOPS")
        failed = proc.returncode != 0 or any(r["status"] != "ok" for r in records)
        if failed:
            print(f"hwbench train exited {proc.returncode}: {proc.stderr.strip()[-1000:]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"loadavg after: {loadavg()}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
