"""Tune each portable kernel's configuration on each device within a budget, and keep the best in
hwbench's tuning cache; later runs use it (their records' ``config.tuning`` says so).

  hwbench tune --budget 60 --backend cpu          # 60 s per device, shared by its cases
  hwbench tune --kernel gemm --shape gemm:M=2048,N=2048,K=2048 --dtype fp32
  hwbench tune --show [--json]                    # the cache
  hwbench tune --export fleet-tuning.json         # to carry to other nodes (never overwrites)
  hwbench tune --import fleet-tuning.json         # merged: a newer entry of the same key is kept
  hwbench tune --delete [--backend cpu]           # removes what the selection names (all by default)

Every candidate is checked against float64 before and after its timed calls; a wrong one is
dropped and said. An entry is filed per device, driver, software versions, kernel,
implementation, dtype and shape class (per dimension the power of two at or above it). Nothing
but the cache is written. Exit status: 0 when every tunable case was tuned, 1 when one failed or
nothing could be tuned, 2 for bad input, 130 on Ctrl-C (what was tuned is kept).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hwbench.cli.main import EXIT_FAILED_CASES, EXIT_INTERRUPTED
from hwbench.cli.options import Options, add_quiet, positive_seconds, seed
from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.core.kernel import PROFILES, parse_shape_arg
from hwbench.core.registry import backend_targets, get_kernel, kernel_targets, parse_names
from hwbench.core.text import printable
from hwbench.core.tuning import Entry, TuningStore, export, merge, read_export
from hwbench.results.tables import seconds, speed, table
from hwbench.run.runner import PROBE_TIMEOUT_S, Plan, describe_all, plan_cases
from hwbench.run.tune import TUNE_BUDGET_S, CaseTuning, portable_cases, tune_cases
from hwbench.run.worker import Worker

HELP = "tune portable kernels' configurations per device and keep them in the tuning cache"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench tune``: what to tune (as ``hwbench run`` selects), or what to do with the cache."""
    what = parser.add_argument_group("what to tune (as hwbench run selects)")
    what.add_argument("--backend", default="all", help="comma list: cpu,opencl,cuda,rocm,... (default: all)")
    what.add_argument("--kernel", default=None, help="comma list of kernels (default: all, or those named by --shape)")
    what.add_argument("--impl", default=None, help="comma list of implementations (default: every portable one)")
    what.add_argument("--profile", choices=PROFILES, default="quick", help="shape set (default: quick)")
    what.add_argument(
        "--shape", action="append", default=[], metavar="KERNEL:NAME=INT,...", help="a shape (as run); repeatable"
    )
    what.add_argument("--dtype", default=None, help="comma list of dtypes (default: what each backend runs)")
    what.add_argument(
        "--device", action="append", default=[], metavar="BACKEND:INDEX", help="tune only this device (repeatable)"
    )
    what.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"seconds per device, shared by its cases (default {TUNE_BUDGET_S:g})",
    )
    what.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    cache = parser.add_argument_group("the cache").add_mutually_exclusive_group()
    cache.add_argument("--show", action="store_true", help="print the cache's entries (with --json: as JSON)")
    cache.add_argument("--export", type=Path, default=None, metavar="FILE", help="write the entries to a new FILE")
    cache.add_argument("--import", dest="import_", type=Path, default=None, metavar="FILE", help="merge FILE's entries")
    cache.add_argument("--delete", action="store_true", help="remove the entries the selection names (asks nothing)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_quiet(parser)


def add_run_tune(group: Options) -> None:
    """``hwbench run``'s ``--tune`` and ``--tune-budget``."""
    group.add_argument(
        "--tune",
        action="store_true",
        help="tune the portable cases' configurations on each device first (as hwbench tune; kept in the "
        "tuning cache), then run them",
    )
    group.add_argument(
        "--tune-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"seconds of --tune per device, shared by its cases (default {TUNE_BUDGET_S:g}; apart from --budget)",
    )


def run_tune_budget(args: argparse.Namespace) -> float | None:
    """Seconds of tuning per device ``run --tune`` asks for, or None; UserError for bad input."""
    if not args.tune:
        if args.tune_budget is not None:
            raise UserError("--tune-budget applies to --tune only")
        return None
    if args.search:
        raise UserError("--tune tunes the planned shapes; --search chooses its own: give one of them")
    return TUNE_BUDGET_S if args.tune_budget is None else positive_seconds(args.tune_budget, "--tune-budget")


def _shapes(texts: list[str]) -> dict[str, list[dict[str, int]]]:
    known = list(kernel_targets())
    shapes: dict[str, list[dict[str, int]]] = {}
    for text in texts:
        name, dims = parse_shape_arg(text)
        if name not in known:
            raise UserError(f"unknown kernel '{name}' in --shape '{text}'; known kernels: {', '.join(known)}")
        shape = get_kernel(name).complete(dims)
        if shape not in shapes.setdefault(name, []):
            shapes[name].append(shape)
    return shapes


def _device_choice(values: list[str], backends: list[str]) -> dict[str, list[int]] | None:
    chosen: dict[str, list[int]] = {}
    for value in values:
        name, _, index = value.partition(":")
        if name not in backends or not index.isdigit():
            raise UserError(f"--device '{value}' is not BACKEND:INDEX with a selected backend ({', '.join(backends)})")
        chosen.setdefault(name, []).append(int(index))
    return chosen or None


def _plan(args: argparse.Namespace) -> tuple[Plan, dict[str, list[dict[str, int]]]]:
    """The selection as a run's plan and every kernel's shapes; UserError for bad input."""
    backends = parse_names(args.backend, list(backend_targets()), "backend")
    if args.device and args.backend == "all":
        named = {value.partition(":")[0] for value in args.device}
        backends = [b for b in backends if b in named] or backends
    shapes = _shapes(args.shape)
    kernels = parse_names(args.kernel or ",".join(shapes) or None, list(kernel_targets()), "kernel")
    stray = [k for k in shapes if k not in kernels]
    if stray:
        raise UserError(f"--shape names kernel '{stray[0]}', which --kernel does not select")
    dtypes = parse_names(args.dtype, list(DTYPE_BYTES), "dtype") if args.dtype else None
    impls = [i.strip() for i in args.impl.split(",") if i.strip()] if args.impl else None
    plan = Plan(
        backends=backends,
        kernels=kernels,
        profile=args.profile,
        dtypes=dtypes,
        impls=impls,
        devices=_device_choice(args.device, backends),
        seed=seed(args.seed),
        kernels_by_default=not (args.kernel or shapes),
    )
    return plan, {k: shapes.get(k) or get_kernel(k).shapes(args.profile) for k in kernels}


def _selected(args: argparse.Namespace, entry: Entry) -> bool:
    """Whether the cache's ``entry`` is one the selection options name (all of them by default)."""
    key = entry.key

    def named(option: str | None, value: str) -> bool:
        return option is None or option == "all" or value in {v.strip() for v in option.split(",")}

    return (
        named(args.backend, key.backend)
        and named(args.kernel, key.kernel)
        and named(args.impl, key.impl)
        and named(args.dtype, key.dtype)
    )


def _config_text(config: dict[str, Any] | None) -> str:
    return "" if not config else " ".join(f"{k}={v}" for k, v in config.items() if not isinstance(v, (dict, list)))


def _show(entries: list[Entry], as_json: bool) -> int:
    if as_json:
        print(json.dumps([e.as_json() for e in entries], indent=1))
        return 0
    if not entries:
        print(f"the tuning cache ({TuningStore().folder}) holds no entries")
        return 0
    headers = ("entry", "config", "median", "derived", "speed-up", "tried", "at", "budget")
    rows = [
        (
            e.key.label(),
            _config_text(e.config),
            seconds(e.median_s),
            seconds(e.derived_median_s),
            speed(e.speedup()),
            f"{e.candidates}/{e.of}",
            e.at[:19],
            f"{e.budget_s:g} s",
        )
        for e in entries
    ]
    print(table(rows, headers))
    print(f"\n{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} in {TuningStore().folder}")
    return 0


def _cache_action(args: argparse.Namespace) -> int | None:
    """``--show``, ``--export``, ``--import`` or ``--delete``; None when none is asked for."""
    store = TuningStore()
    acting = args.show or args.export is not None or args.import_ is not None or args.delete
    unused = [name for name, value in (("--shape", args.shape), ("--device", args.device)) if value]
    if acting and unused:
        raise UserError(
            f"{' and '.join(unused)} do not select cache entries; the cache actions take --backend, --kernel, "
            "--impl and --dtype"
        )
    if args.show:
        return _show([e for e in store.entries() if _selected(args, e)], args.json)
    if args.export is not None:
        entries = [e for e in store.entries() if _selected(args, e)]
        export(entries, args.export)
        print(f"exported {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} to {args.export}")
        return 0
    if args.import_ is not None:
        filed, kept = merge(store, read_export(args.import_))
        print(f"imported {filed} entr{'y' if filed == 1 else 'ies'} from {args.import_}", end="")
        print(f"; kept {kept} newer one(s) already here" if kept else "")
        return 0
    if args.delete:
        removed = store.delete(lambda e: _selected(args, e))
        for entry in removed:
            print(printable(f"removed {entry.key.label()} (tuned {entry.at[:19]})"))
        print(f"removed {len(removed)} entr{'y' if len(removed) == 1 else 'ies'} from {store.folder}")
        return 0
    return None


def _row(result: CaseTuning) -> tuple[str, ...]:
    r, entry = result.request, result.entry
    shape = "x".join(str(v) for v in r.shape.values())
    return (
        f"{r.backend}:{r.device_index} {r.kernel} {r.impl} {r.dtype} {shape}",
        result.status,
        f"{len(result.tried)}/{result.of}",
        _config_text(entry.config if entry else None),
        seconds(entry.median_s if entry else None),
        seconds(entry.derived_median_s if entry else None),
        speed(entry.speedup() if entry else None),
        f"{result.spent_s:.1f} s",
    )


def _report(results: list[CaseTuning], as_json: bool) -> None:
    if as_json:
        print(json.dumps([r.summary() for r in results], indent=1))
        return
    headers = ("case", "status", "tried", "best config", "best", "derived", "speed-up", "spent")
    shown = [r for r in results if r.status != "untunable"]
    if shown:
        print(table([_row(r) for r in shown], headers))
    for result in results:
        r = result.request
        where = f"{r.backend}:{r.device_index} {r.kernel} {r.impl} {r.dtype}"
        if result.reason:
            print(printable(f"  {where}: {result.status}: {result.reason}"), file=sys.stderr)
        for dropped in result.dropped:
            print(printable(f"  {where}: dropped {_config_text(dropped.config)}: {dropped.reason}"), file=sys.stderr)


def main(args: argparse.Namespace) -> int:
    """Tune what the options select, or act on the cache; the exit status (module docstring)."""
    done = _cache_action(args)
    if done is not None:
        return done
    budget = TUNE_BUDGET_S if args.budget is None else positive_seconds(args.budget, "--budget")
    plan, shapes = _plan(args)

    def progress(result: CaseTuning) -> None:
        if not args.quiet and not args.json:
            r = result.request
            print(
                f"  tuned {r.backend}:{r.device_index} {r.kernel} {r.impl} {r.dtype}: {result.status}", file=sys.stderr
            )

    # Backends are described in the worker, as run does: a driver's probe that crashes takes the
    # worker down, not this command; the same worker then times the candidates.
    with Worker() as worker:
        described = describe_all(worker, plan.backends, PROBE_TIMEOUT_S)
        cases, _ = plan_cases(plan, described, {k: get_kernel(k).dtypes for k in plan.kernels}, shapes)
        cases = [c for c in portable_cases(cases, described) if not get_kernel(c.kernel).spans_ranks]
        if not cases:
            print("hwbench: nothing to tune: no portable implementation of the selection runs here", file=sys.stderr)
            return EXIT_FAILED_CASES
        results, interrupted = tune_cases(cases, budget, worker=worker, progress=progress)
    _report(results, args.json)
    if interrupted:
        print("interrupted: the cases tuned so far are kept in the cache", file=sys.stderr)
        return EXIT_INTERRUPTED
    tuned = [r for r in results if r.status == "tuned"]
    if any(r.status == "failed" for r in results) or not tuned:
        what = "a case failed" if tuned else "nothing was tuned"
        print(f"hwbench: {what} (see the reasons above)", file=sys.stderr)
        return EXIT_FAILED_CASES
    return 0
