"""A real training job on a backend: submit to first step, tokens/s, MFU, memory, the loss falling.

  hwbench train                                   # the first GPU backend, else the CPU
  hwbench train --backend cpu --preset tiny --steps 50 --compile off
  hwbench train --backend cuda --preset 1b --dtype bf16 --ranks 1,8 -o results/train.json

A decoder-only transformer of the named preset (tiny, small, 1b; micro for a smoke test) trains on
seeded synthetic tokens written as shards to --data-dir and read back through a DataLoader, with
AdamW (autocast bf16 with --dtype bf16). Each torch.compile setting and rank count is launched
twice, with empty compile caches (cold) and then the caches that filled (warm): one record of
kernel 'train' each, with the time from submit (the scheduler's stamp under Slurm or Kubernetes,
else the process launch) to the end of the first optimizer step, the steady tokens/s, the MFU
(model FLOPs per token x tokens/s against the device's peak for the dtype, and against a GEMM of
the model's largest layer timed alongside), peak memory and the loss curve. Several ranks run under
torchrun (gloo on CPUs, NCCL/RCCL on GPUs) with their scaling efficiency against one rank. A run
whose loss does not fall below 0.9 x its first loss is parity_failed: it trained nothing.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

from hwbench.cli.options import add_out, add_quiet, emit, fresh_out, positive_seconds, seed, to_stdout
from hwbench.core.errors import UserError
from hwbench.core.host import describe_host
from hwbench.core.records import build_document, now
from hwbench.core.results_types import BackendEntry, Record
from hwbench.results import files as results
from hwbench.train.presets import DEFAULT_PRESET, PRESETS, get_preset
from hwbench.train.session import Plan, Target, run_plan
from hwbench.train.target import choose

HELP = "train a small transformer: time to first step, tokens/s, MFU, memory, loss"
EXIT_FAILED = 1
COMPILE_CHOICES = {"off": [False], "on": [True], "both": [False, True]}
DTYPES = ("fp32", "bf16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench train``."""
    parser.add_argument("--backend", default="auto", help="cpu, cuda or rocm (default auto: a GPU backend, else cpu)")
    add_model_options(parser)
    parser.add_argument(
        "--ranks", default="1", help="comma list of rank counts, each a torchrun launch (default 1; e.g. 1,2)"
    )
    parser.add_argument(
        "--compile",
        choices=sorted(COMPILE_CHOICES),
        default="both",
        help="torch.compile off, on, or both (default both: the eager run, then the compiled one)",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per launch (default 1800)")
    add_out(parser, "train-HOST-TIME.json")
    add_quiet(parser)


def add_model_options(parser: argparse.ArgumentParser, steps: int = 50) -> None:
    """The options ``train`` and ``drill`` share: the model, the data and the seed (``steps``: the default)."""
    known = ", ".join(f"{p.name} ({p.about})" for p in PRESETS.values())
    parser.add_argument("--preset", default=None, help=f"model size (default: tiny on a CPU, small on a GPU): {known}")
    parser.add_argument(
        "--dtype", choices=DTYPES, default=None, help="fp32 or bf16 autocast (default: bf16 on GPUs, fp32 on CPUs)"
    )
    parser.add_argument("--steps", type=int, default=steps, help=f"optimizer steps per launch (default {steps})")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="folder on the storage to test for the token shards (default: a temporary one)",
    )
    parser.add_argument("--loader-workers", type=int, default=0, help="DataLoader worker processes (default 0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and tokens (default 0)")


def parse_ranks(text: str) -> list[int]:
    """``--ranks``: positive whole numbers, comma-separated; UserError otherwise."""
    try:
        ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--ranks takes whole numbers separated by commas (e.g. 1,2), got '{text}'") from None
    if not ranks or min(ranks) < 1:
        raise UserError(f"--ranks takes positive numbers of ranks, got '{text}'")
    return sorted(set(ranks))


def check_model_options(args: argparse.Namespace, kind: str) -> None:
    """The shared options' values; fills the defaults of the device's kind."""
    args.preset = get_preset(args.preset or DEFAULT_PRESET.get(kind, "tiny")).name
    args.dtype = args.dtype or ("fp32" if kind == "cpu" else "bf16")
    if args.steps < 2:
        raise UserError(f"--steps must be at least 2 (a first and a last loss), got {args.steps}")
    if args.loader_workers < 0:
        raise UserError(f"--loader-workers must be 0 or more, got {args.loader_workers}")
    seed(args.seed)


def checked_out(args: argparse.Namespace, kind: str) -> Path | None:
    """The results file ``--out`` names (None: stdout), checked writable before any work."""
    out = None if to_stdout(args.out) else fresh_out(args.out, kind)
    if out is not None:
        results.check_writable(out)
    return out


def resolve_target(args: argparse.Namespace) -> tuple[Target, BackendEntry]:
    """The backend's target and entry, the shared options checked (an unknown preset before the
    backend is described) and their device-kind defaults filled."""
    if importlib.util.find_spec("torch") is None:
        raise UserError(
            "training needs torch, which is not installed: pip install torch==2.13.0 (a CPU build), then retry"
        )
    if args.preset is not None:
        get_preset(args.preset)
    target, entry = choose(args.backend)
    check_model_options(args, target.kind)
    return target, entry


def summary_lines(records: list[Record]) -> list[str]:
    """One line per training record: its headline figures or why it failed."""
    lines = []
    for r in records:
        t, shape = r.get("train", {}), r["shape"]
        cache = "warm" if shape.get("warm_cache") else "cold"
        what = f"{t.get('preset')} {r['dtype']} {r['impl']} {shape['ranks']} rank(s) {cache}"
        if r["status"] != "ok":
            lines.append(f"{what}: {r['status']}: {r['reason']}")
            continue
        mfu = r["metrics"].get("pct_peak")
        scaling = t.get("scaling_efficiency")
        lines.append(
            f"{what}: first step {t.get('submit_to_first_step_s', 0):.2f} s after {t.get('submit_source')}, "
            f"{t.get('tokens_per_s', 0):,.0f} tokens/s, {r['metrics']['tflops']:.3g} TFLOPS"
            + (f" (MFU {mfu:.1f} %)" if mfu is not None else "")
            + (f", scaling {scaling:.2f}" if scaling is not None else "")
            + f", loss {t.get('loss_first', 0):.3f} -> {t.get('loss_last', 0):.3f}"
            + (
                f", peak memory {(t.get('peak_memory_bytes') or 0) / 2**20:,.0f} MiB"
                if t.get("peak_memory_bytes")
                else ""
            )
        )
    return lines


def main(args: argparse.Namespace) -> int:
    """Train every variant, write the results file, print the figures; 1 when a variant failed."""
    positive_seconds(args.timeout, "--timeout")
    ranks = parse_ranks(args.ranks)
    out = checked_out(args, "train")
    target, entry = resolve_target(args)
    plan = Plan(
        get_preset(args.preset),
        args.dtype,
        args.steps,
        ranks,
        COMPILE_CHOICES[args.compile],
        args.seed,
        args.timeout,
        args.loader_workers,
    )
    doc = build_document(["hwbench", *sys.argv[1:]], host=describe_host(), seed=args.seed)
    doc["backends"] = [entry]
    say = (lambda _: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    data_dir = args.data_dir
    if data_dir is None:
        with tempfile.TemporaryDirectory(prefix="hwbench-train-data-") as tmp:
            doc["records"] = run_plan(plan, target, Path(tmp), say)
    else:
        doc["records"] = run_plan(plan, target, data_dir, say)
    doc["run"]["finished"] = now()
    saved, stream = emit(doc, out)
    for line in summary_lines(doc["records"]):
        print(line, file=stream)
    if saved is not None:
        print(f"\nresults: {saved}", file=stream)
    if any(r["status"] != "ok" for r in doc["records"]):
        print("hwbench: a training run failed (see its reason above)", file=sys.stderr)
        return EXIT_FAILED
    return 0
