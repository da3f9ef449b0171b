"""Run the benchmark matrix (backends x kernels x implementations x shapes x dtypes) and write
one results file; every case becomes a record, whatever happens to it.

  hwbench run --profile quick
  hwbench run --backend cpu --kernel gemm --shape gemm:M=1000,N=1000,K=1000 --out results/mine.json
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO, cast

from hwbench.cli.main import EXIT_FAILED_CASES, EXIT_INTERRUPTED
from hwbench.cli.options import add_out, add_quiet, fresh_out, positive_seconds, save_or_rescue, seed, to_stdout
from hwbench.cli.tune import add_run_tune, run_tune_budget
from hwbench.collective.run import run_collective
from hwbench.collective.sizes import parse_sizes, sizes_to_counts
from hwbench.collective.torchrun import follow_if_joined, set_ranks
from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.core.host import memory_available
from hwbench.core.kernel import PROFILES, parse_shape_arg
from hwbench.core.registry import backend_targets, get_kernel, kernel_targets, parse_names
from hwbench.core.results_types import Document
from hwbench.core.text import printable
from hwbench.decide.catalog import Catalog, user_price
from hwbench.results import files as results
from hwbench.results.derive import add_metrics
from hwbench.results.roofs import add_achievable
from hwbench.results.tables import ProgressLine, comment, nccl_form, summary
from hwbench.run.runner import Plan, execute
from hwbench.run.search import BUDGET_S, SEARCH_TIMING, SearchPlan
from hwbench.run.signals import StopSignals, exit_status
from hwbench.run.timing import TimingConfig
from hwbench.run.worker import Worker, describe_sensors
from hwbench.sensors.health import POLL_S, HealthWatch, run_devices

HELP = "run the benchmark matrix and write a results file"
#: The shortest ``--timeout`` accepted: a case compiles, checks and times its kernel within it.
MIN_TIMEOUT_S = 1.0
SHAPE_HELP = """\
--shape KERNEL:NAME=INT,NAME=INT,...  (repeatable; replaces the profile's shapes for that kernel)
  gemm:M=1000,N=1000,K=1000                     C(M,N) = A(M,K) @ B(K,N)
  attention:B=1,H=8,S=1024,D=64,causal=1        batch, heads, seq_q (S sets seq_q; seq_k
                                                defaults to it), seq_k, head_dim, causal 0|1
  allreduce:count=1048576,ranks=2               elements per rank, ranks
  transfer:dir=0,bytes=67108864,pinned=1        GPUs: host->device (dir 1 device->host, 2 within a
                                                device, 3 to a peer, 4 both ways with a peer)
Long names work too (batch=, heads=, seq_q=, seq_k=, head_dim=). Sizes need not be
multiples of any tile size."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench run`` in sections, and the ``--shape`` syntax as the epilog of its help."""
    parser.epilog = SHAPE_HELP
    what = parser.add_argument_group("what to run")
    what.add_argument("--backend", default="all", help="comma list: cpu,opencl,cuda,rocm,... (default: all)")
    what.add_argument(
        "--kernel", default=None, help="comma list: gemm,attention,allreduce (default: all, or those named by --shape)"
    )
    what.add_argument("--impl", default=None, help="comma list of implementations to run (default: all)")
    what.add_argument("--profile", choices=PROFILES, default="quick", help="shape set (default: quick)")
    what.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="KERNEL:NAME=INT,...",
        help="a shape of your own (see below); repeatable",
    )
    what.add_argument(
        "--dtype", default=None, help="comma list: fp32,fp64,tf32,fp16,bf16,int8 (default: what each backend runs)"
    )
    what.add_argument(
        "--device",
        action="append",
        default=[],
        metavar="BACKEND:INDEX",
        help="run only on this device (repeatable), e.g. opencl:1",
    )
    what.add_argument(
        "--sizes",
        default=None,
        metavar="MIN:MAX:xF",
        help="AllReduce: message sizes in bytes, as nccl-tests' -b/-e/-f (8:128M:x2; also MIN:MAX:+STEP, "
        "lists; K/M/G are powers of 1024); counts are bytes / element size, rounded down",
    )
    what.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="AllReduce: spawn this many local ranks (default: each "
        "shape's ranks; under torchrun every rank joins and rank 0 writes the file)",
    )
    what.add_argument(
        "--search",
        action="store_true",
        help="GEMM: try shapes near each device's sweet spot within --search-budget and record the maximum "
        "achievable TFLOPS per implementation and dtype (the measured compute roof)",
    )
    what.add_argument(
        "--search-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"seconds of --search per device, shared by its implementations and dtypes (default: "
        f"{BUDGET_S['cpu']:g} on a CPU, {BUDGET_S['gpu']:g} on a GPU)",
    )
    add_run_tune(what)
    how = parser.add_argument_group("how to measure")
    how.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per case (default 300)")
    how.add_argument("--budget", type=float, default=None, help="seconds of timed calls per case (default: by profile)")
    how.add_argument("--no-flush", action="store_true", help="do not flush caches before timed calls")
    how.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    how.add_argument(
        "--energy-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds, at most, of each case's energy windows after its timing, where the device's energy is "
        "readable (NVML, amdsmi, RAPL; default: 2 quick, 3 standard, 5 full; --search: none unless given)",
    )
    how.add_argument("--no-energy", action="store_true", help="measure no energy (no windows after the timing)")
    cost = parser.add_argument_group("cost")
    cost.add_argument(
        "--price-per-hour",
        type=float,
        default=None,
        metavar="USD",
        help="rental price of one device in USD/hour (default: the catalog's, where it has one)",
    )
    cost.add_argument("--instance", default=None, help="price the run as this catalog instance type, e.g. c7a.xlarge")
    cost.add_argument(
        "--catalog",
        type=Path,
        default=None,
        help="TOML catalog of your own ([devices.KEY] peaks, "
        "[[prices]]) over the shipped one; every entry needs source and as_of",
    )
    output = parser.add_argument_group("output")
    add_out(output, "hwbench-HOST-TIME.json")
    output.add_argument(
        "--json", action="store_true", help="also print the results document on stdout (the table goes to stderr)"
    )
    add_quiet(output)


def _user_shapes(args: argparse.Namespace) -> dict[str, list[dict[str, int]]]:
    """The ``--shape`` options by kernel, completed; a repeated identical one runs once (with a note)."""
    known = list(kernel_targets())
    shapes: dict[str, list[dict[str, int]]] = {}
    for text in args.shape:
        name, dims = parse_shape_arg(text)
        if name not in known:
            raise UserError(f"unknown kernel '{name}' in --shape '{text}'; known kernels: {', '.join(known)}")
        kernel = get_kernel(name)
        shape = kernel.complete(dims)
        if shape in shapes.get(name, []):
            print(f"hwbench: note: --shape '{text}' repeats a shape given before; it runs once", file=sys.stderr)
            continue
        shapes.setdefault(name, []).append(shape)
    return shapes


def _sized(text: str, dtypes: list[str] | None) -> list[dict[str, int]]:
    """AllReduce shapes of ``--sizes`` (bytes) for the one dtype they are counted in (fp32 unless --dtype)."""
    if dtypes is not None and len(dtypes) > 1:
        raise UserError(
            f"--sizes gives bytes, a different element count per dtype: give one --dtype (got {', '.join(dtypes)})"
        )
    kernel = get_kernel("allreduce")
    counts = sizes_to_counts(parse_sizes(text), dtypes[0] if dtypes else "fp32")
    return [kernel.complete({"count": count}) for count in counts]


def _check_memory(shapes: dict[str, list[dict[str, int]]], dtypes: list[str] | None) -> None:
    free = memory_available()
    if free is None:
        return
    for name, items in shapes.items():
        kernel = get_kernel(name)
        for shape in items:
            for dtype in dtypes or ["fp64"]:  # unspecified: check the widest the CPU runs
                need = kernel.memory_bytes(shape, dtype)
                if need > free:
                    raise UserError(
                        f"shape {name}:{kernel.describe_shape(shape)} ({dtype}) needs about "
                        f"{need / 2**30:.1f} GiB of host memory, {free / 2**30:.1f} GiB is available: "
                        "choose a smaller shape"
                    )


def _devices(values: list[str], backends: list[str]) -> dict[str, list[int]] | None:
    if not values:
        return None
    chosen: dict[str, list[int]] = {}
    for value in values:
        name, _, index = value.partition(":")
        if name not in backends or not index.isdigit():
            raise UserError(f"--device '{value}' is not BACKEND:INDEX with a selected backend ({', '.join(backends)})")
        chosen.setdefault(name, []).append(int(index))
    return chosen


def _price(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.price_per_hour is not None and args.instance:
        raise UserError("give either --price-per-hour or --instance, not both")
    catalog = Catalog.load(args.catalog)  # a bad --catalog file fails before the run, not after
    quote = (
        user_price(args.price_per_hour)
        if args.price_per_hour is not None
        else (catalog.price(None, args.instance) if args.instance else None)
    )
    return (
        None
        if quote is None
        else {"usd_per_hour": quote.usd_per_hour, "source": quote.source, "as_of": quote.as_of, "basis": quote.basis}
    )


def _search(args: argparse.Namespace, kernels: list[str]) -> SearchPlan | None:
    """The search ``--search`` asks for (of GEMM alone, with shapes of its own), or None."""
    if not args.search:
        if args.search_budget is not None:
            raise UserError("--search-budget applies to --search only")
        return None
    if kernels != ["gemm"]:
        raise UserError(
            f"--search finds the maximum achievable GEMM: use it with --kernel gemm alone, not {','.join(kernels)}"
        )
    if args.shape:
        raise UserError("--search chooses the GEMM shapes itself: drop --shape")
    budget = None if args.search_budget is None else positive_seconds(args.search_budget, "--search-budget")
    return SearchPlan(budget_s=budget)


def _timing(args: argparse.Namespace) -> TimingConfig:
    timing = TimingConfig.for_profile(args.profile, flush=not args.no_flush)
    if args.no_energy and args.energy_budget is not None:
        raise UserError("give either --no-energy or --energy-budget, not both")
    energy = timing.energy_s if args.energy_budget is None else positive_seconds(args.energy_budget, "--energy-budget")
    if args.no_energy or (args.search and args.energy_budget is None):  # --search: many shapes, each briefly
        energy = 0.0
    if args.search and args.budget is None:  # many short cases: each shape is timed briefly
        return TimingConfig(warmup_s=SEARCH_TIMING[0], budget_s=SEARCH_TIMING[1], flush=timing.flush, energy_s=energy)
    if args.budget is None:
        return replace(timing, energy_s=energy)
    return TimingConfig(
        warmup_s=args.budget / 5,
        budget_s=positive_seconds(args.budget, "--budget"),
        flush=timing.flush,
        energy_s=energy,
    )


def _timeout(value: float) -> float:
    seconds = positive_seconds(value, "--timeout")
    if seconds < MIN_TIMEOUT_S:
        raise UserError(
            f"--timeout must be at least {MIN_TIMEOUT_S:g} s (each case compiles, checks and times its kernel "
            f"within it), got {value:g}"
        )
    return seconds


def main(args: argparse.Namespace) -> int:
    """Run the plan the options describe, write the file, print the table.

    Exit status: 0 when every case is ok or skipped and one ran; 1 when a case failed or none
    ran; 128 + the signal's number when stopped (Ctrl-C 130, SIGHUP 129, SIGTERM 143), the
    finished cases written. Every option and the output path are checked before anything runs.
    """
    backends = parse_names(args.backend, list(backend_targets()), "backend")
    if args.device and args.backend == "all":  # --device alone: only the backends of the devices named
        named = {value.partition(":")[0] for value in args.device}
        backends = [b for b in backends if b in named] or backends
    shapes = _user_shapes(args)
    dtypes = parse_names(args.dtype, list(DTYPE_BYTES), "dtype") if args.dtype else None
    if args.sizes is not None:
        shapes.setdefault("allreduce", []).extend(_sized(args.sizes, dtypes))
    default = "gemm" if args.search else None
    kernels = parse_names(args.kernel or ",".join(shapes) or default, list(kernel_targets()), "kernel")
    stray = [k for k in shapes if k not in kernels]
    if stray:
        raise UserError(f"--shape names kernel '{stray[0]}', which --kernel does not select")
    if dtypes and not any(d in get_kernel(k).dtypes for k in kernels for d in dtypes):
        raise UserError(f"none of the selected kernels has dtype {', '.join(dtypes)}")
    plan = Plan(
        backends=backends,
        kernels=kernels,
        profile=args.profile,
        dtypes=dtypes,
        impls=list(dict.fromkeys(i.strip() for i in args.impl.split(",") if i.strip())) if args.impl else None,
        devices=_devices(args.device, backends),
        seed=seed(args.seed),
        timeout_s=_timeout(args.timeout),
        timing=_timing(args),
        price=_price(args),
        command=["hwbench", *sys.argv[1:]],
        search=_search(args, kernels),
        kernels_by_default=not (args.kernel or shapes or args.search),
        tune_s=run_tune_budget(args),
    )
    all_shapes = set_ranks({k: shapes.get(k) or get_kernel(k).shapes(args.profile) for k in kernels}, args.ranks)
    _check_memory({k: all_shapes[k] for k in shapes}, dtypes)  # the user's shapes, at their ranks
    catalog = Catalog.load(args.catalog)
    out = None if to_stdout(args.out) else fresh_out(args.out)
    if out is not None:
        results.check_writable(out)
    joined = follow_if_joined(args)  # after every check, so that no rank waits for one that gave up
    if joined is not None:
        return joined
    with StopSignals() as stops, HealthWatch(backends, poll_s=POLL_S) as health, Worker() as worker:
        doc = execute(
            plan,
            {k: get_kernel(k).dtypes for k in kernels},
            all_shapes,
            progress=None if args.quiet else ProgressLine(),
            worker=worker,
            collective=run_collective,
            finish=lambda doc: _derive(doc, catalog),
            stops=stops,
        )
        _sensors(doc, worker, plan)
        doc["health"] = health.finish(run_devices(doc))  # the readings since the watch started
        if args.catalog:  # peaks and prices came from the user's catalog over the shipped one
            doc["run"]["catalog"] = str(args.catalog)
        saved = save_or_rescue(doc, out) if out is not None else None
        if out is None or args.json:  # the document on stdout; the table and the rest on stderr
            print(results.dumps(doc), end="", flush=True)
        return _report(doc, out, saved, stops, sys.stderr if out is None or args.json else sys.stdout)


def _sensors(doc: Document, worker: Worker, plan: Plan) -> None:
    """The document's ``sensors`` section (what each timed device's sensors read, or why not, said
    once), from the worker whose readers the cases used; none when energy was off or the run stopped."""
    if plan.timing.energy_s <= 0 or doc["run"]["incomplete"]:
        return
    found = describe_sensors(
        worker, cast(dict[str, Any], doc), max(plan.timeout_s, 60.0)
    )  # the worker reads it as JSON
    if isinstance(found, str):
        doc["warnings"].append(found)
    elif found:
        doc["sensors"] = found


def _derive(doc: Document, catalog: Catalog) -> None:
    """The derived metrics, then the roofs the run measured and each record's share of them."""
    add_metrics(doc, catalog)
    add_achievable(doc)


def _report(doc: Document, out: Path | None, saved: Path | None, stops: StopSignals, stream: TextIO) -> int:
    """Print the table (on ``stream``), the warnings (on stderr) and the file's name; the exit status."""
    for warning in doc.get("warnings", []):
        print(printable(f"hwbench: warning: {warning}"), file=sys.stderr)
    print(summary(doc, warnings=False), file=stream)
    if out is not None and saved is not None:
        late = saved != out and saved.parent == out.parent  # the name was taken while the cases ran
        line = f"\nresults: {saved}" + (f" ({out} appeared during the run)" if late else "")
        print(comment(line) if nccl_form(doc) else line, file=stream)
    if doc["run"]["incomplete"] or stops.first is not None:
        print("interrupted: the file holds the cases finished so far", file=sys.stderr)
        return exit_status(stops.first) if stops.first else EXIT_INTERRUPTED
    bad = [r for r in doc["records"] if r["status"] not in ("ok", "skipped")]
    if bad:
        print(f"hwbench: {len(bad)} case(s) failed (see the reasons above)", file=sys.stderr)
        return EXIT_FAILED_CASES
    if not any(r["status"] == "ok" for r in doc["records"]):
        print("hwbench: no case ran: every case was skipped (the reasons are above)", file=sys.stderr)
        return EXIT_FAILED_CASES
    return 0
