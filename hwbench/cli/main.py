"""The ``hwbench`` command: list, run, show, validate.

Bad input is one line on stderr and a non-zero exit; a traceback means a bug in hwbench.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwbench import __version__
from hwbench.collective.run import run_collective
from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.core.host import memory_available
from hwbench.core.kernel import PROFILES, parse_shape_arg
from hwbench.core.registry import backend_targets, get_kernel, kernel_targets, parse_names
from hwbench.decide.catalog import Catalog
from hwbench.results.derive import add_metrics

#: Exit status when cases failed (compile_error, runtime_error, parity_failed, timeout, crashed).
EXIT_FAILED_CASES = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

SHAPE_HELP = """\
--shape KERNEL:NAME=INT,NAME=INT,...  (repeatable; replaces the profile's shapes for that kernel)
  gemm:M=1000,N=1000,K=1000                     C(M,N) = A(M,K) @ B(K,N)
  attention:B=1,H=8,S=1024,D=64,causal=1        batch, heads, seq_q (S sets seq_q; seq_k
                                                defaults to it), seq_k, head_dim, causal 0|1
  allreduce:count=1048576,ranks=2               elements per rank, ranks
Long names work too (batch=, heads=, seq_q=, seq_k=, head_dim=). Sizes need not be
multiples of any tile size."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hwbench",
        description=(
            "Run portable GEMM, attention and AllReduce kernels beside each backend's native library, "
            "check them against float64 and write one versioned JSON results file."
        ),
    )
    parser.add_argument("--version", action="version", version=f"hwbench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("list", help="backends (available or not, and why), devices, kernels, implementations")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--backend", default="all", help="comma list of backends to probe (default: all)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per backend probe")

    p = sub.add_parser(
        "run",
        help="run the benchmark matrix and write a results file",
        epilog=SHAPE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--backend", default="all", help="comma list: cpu,opencl,cuda,rocm,... (default: all)")
    p.add_argument(
        "--kernel", default=None, help="comma list: gemm,attention,allreduce (default: all, or those named by --shape)"
    )
    p.add_argument("--impl", default=None, help="comma list of implementations to run (default: all)")
    p.add_argument("--profile", choices=PROFILES, default="quick", help="shape set (default: quick)")
    p.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="KERNEL:NAME=INT,...",
        help="a shape of your own (see below); repeatable",
    )
    p.add_argument(
        "--dtype", default=None, help="comma list: fp32,fp64,tf32,fp16,bf16 (default: what each backend runs)"
    )
    p.add_argument(
        "--device",
        action="append",
        default=[],
        metavar="BACKEND:INDEX",
        help="run only on this device (repeatable), e.g. opencl:1",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results file to write (never overwritten; default: results/hwbench-HOST-TIME.json)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per case (default 300)")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated inputs (default 0)")
    p.add_argument("--no-flush", action="store_true", help="do not flush caches before timed calls")
    p.add_argument("--budget", type=float, default=None, help="seconds of timed calls per case (default: by profile)")
    p.add_argument(
        "--price-per-hour",
        type=float,
        default=None,
        metavar="USD",
        help="rental price of one device in USD/hour (default: the catalog's, where it has one)",
    )
    p.add_argument("--instance", default=None, help="price the run as this catalog instance type, e.g. c7a.xlarge")
    p.add_argument(
        "--catalog",
        type=Path,
        default=None,
        help="TOML catalog of your own ([devices.KEY] peaks, "
        "[[prices]]) over the shipped one; every entry needs source and as_of",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="AllReduce: spawn this many local ranks (default: each "
        "shape's ranks; under torchrun every rank joins and rank 0 writes the file)",
    )

    p = sub.add_parser("show", help="print a results file as a table")
    p.add_argument("file", type=Path)
    p.add_argument("--json", action="store_true", help="print the (migrated) document as JSON")

    p = sub.add_parser("validate", help="check results files against the JSON Schema")
    p.add_argument("files", type=Path, nargs="+")

    for name, module in MODULE_COMMANDS.items():
        command = importlib.import_module(module)
        command.add_arguments(
            sub.add_parser(
                name,
                help=command.HELP,
                description=command.__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return parser


def _positive(value: float, flag: str) -> float:
    if not value > 0:
        raise UserError(f"{flag} must be a positive number of seconds, got {value}")
    return value


def _user_shapes(args: argparse.Namespace) -> dict[str, list[dict[str, int]]]:
    known = list(kernel_targets())
    shapes: dict[str, list[dict[str, int]]] = {}
    for text in args.shape:
        name, dims = parse_shape_arg(text)
        if name not in known:
            raise UserError(f"unknown kernel '{name}' in --shape '{text}'; known kernels: {', '.join(known)}")
        kernel = get_kernel(name)
        shape = kernel.complete(dims)
        shapes.setdefault(name, []).append(shape)
    return shapes


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
    from hwbench.decide.catalog import Catalog, user_price

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


def _default_out() -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"hwbench-{socket.gethostname()}-{stamp}.json"


def cmd_run(args: argparse.Namespace) -> int:
    from hwbench.collective.torchrun import follow_if_joined, set_ranks
    from hwbench.results import files as results
    from hwbench.results.tables import ProgressLine, summary
    from hwbench.run.runner import Plan, execute
    from hwbench.run.timing import TimingConfig

    joined = follow_if_joined(args)
    if joined is not None:
        return joined
    backends = parse_names(args.backend, list(backend_targets()), "backend")
    shapes = _user_shapes(args)
    kernels = parse_names(args.kernel or ",".join(shapes) or None, list(kernel_targets()), "kernel")
    stray = [k for k in shapes if k not in kernels]
    if stray:
        raise UserError(f"--shape names kernel '{stray[0]}', which --kernel does not select")
    dtypes = parse_names(args.dtype, list(DTYPE_BYTES), "dtype") if args.dtype else None
    if dtypes and not any(d in get_kernel(k).dtypes for k in kernels for d in dtypes):
        raise UserError(f"none of the selected kernels has dtype {', '.join(dtypes)}")
    _check_memory(shapes, dtypes)
    timing = TimingConfig.for_profile(args.profile, flush=not args.no_flush)
    if args.budget is not None:
        timing = TimingConfig(warmup_s=args.budget / 5, budget_s=_positive(args.budget, "--budget"), flush=timing.flush)
    out = args.out or _default_out()
    if out.exists():
        raise UserError(f"{out} already exists; hwbench never overwrites a results file: choose another --out")
    plan = Plan(
        backends=backends,
        kernels=kernels,
        profile=args.profile,
        dtypes=dtypes,
        impls=[i.strip() for i in args.impl.split(",")] if args.impl else None,
        devices=_devices(args.device, backends),
        seed=args.seed,
        timeout_s=_positive(args.timeout, "--timeout"),
        timing=timing,
        price=_price(args),
        command=["hwbench", *sys.argv[1:]],
    )
    all_shapes = set_ranks({k: shapes.get(k) or get_kernel(k).shapes(args.profile) for k in kernels}, args.ranks)
    kernel_dtypes = {k: get_kernel(k).dtypes for k in kernels}
    catalog = Catalog.load(args.catalog)
    doc = execute(
        plan,
        kernel_dtypes,
        all_shapes,
        progress=None if args.quiet else ProgressLine(),
        collective=run_collective,
        finish=lambda doc: add_metrics(doc, catalog),
    )
    if args.catalog:  # peaks and prices came from the user's catalog over the shipped one
        doc["run"]["catalog"] = str(args.catalog)
    saved = results.save(doc, results.free_path(out))
    print(summary(doc))
    print(f"\nresults: {saved}" + (f" ({out} appeared during the run)" if saved != out else ""))
    if doc["run"]["incomplete"]:
        print("interrupted: the file holds the cases finished so far", file=sys.stderr)
        return EXIT_INTERRUPTED
    bad = [r for r in doc["records"] if r["status"] not in ("ok", "skipped")]
    if bad:
        print(f"hwbench: {len(bad)} case(s) failed (see the reasons above)", file=sys.stderr)
        return EXIT_FAILED_CASES
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from hwbench.core.kernel import describe_kernel
    from hwbench.run.runner import describe_all
    from hwbench.run.worker import Worker

    names = parse_names(args.backend, list(backend_targets()), "backend")
    with Worker() as worker:
        backends = describe_all(worker, names, _positive(args.timeout, "--timeout"))
    kernels = [describe_kernel(get_kernel(k)) for k in kernel_targets()]
    if args.json:
        print(json.dumps({"backends": backends, "kernels": kernels}, indent=1))
        return 0
    print("Backends")
    for b in backends:
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        print(f"  {b['name']:<8} {state}")
        for d in b.get("devices", []):
            peak = (d.get("peak") or {}).get("tflops", {})
            peaks = ", ".join(f"{k} {v * 1000:.0f} GFLOPS" for k, v in peak.items())
            print(
                f"    {d['backend']}:{d['index']}  {d['name']} ({d['vendor']}, {d['arch']})"
                + (f"  peak {peaks}" if peaks else "")
            )
    print("Kernels")
    for k in kernels:
        print(f"  {k['name']:<10} {k['description']}; dtypes {', '.join(k['dtypes'])}")
        for b in backends:
            for impl in b.get("implementations", {}).get(k["name"], []):
                print(
                    f"    {b['name'] + '/' + impl['name']:<20} {impl['kind']:<8} {impl['language']:<17} "
                    f"{', '.join(impl['dtypes'])}  {impl['description']}"
                )
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from hwbench.results.files import load
    from hwbench.results.tables import summary

    doc = load(args.file)
    print(json.dumps(doc, indent=1) if args.json else summary(doc))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from hwbench.results.files import load, validate

    bad = 0
    for path in args.files:
        try:
            doc = load(path)
        except UserError as exc:
            bad += 1
            print(f"{exc}", file=sys.stderr)
            try:  # list every schema problem, not just the first
                for problem in validate(json.loads(Path(path).read_text()))[1:]:
                    print(f"  {problem}", file=sys.stderr)
            except Exception:  # unreadable or not JSON: the one line above says so
                pass
            continue
        print(f"{path}: valid (schema_version {doc['schema_version']}, {len(doc['records'])} records)")
    return 1 if bad else 0


COMMANDS = {"run": cmd_run, "list": cmd_list, "show": cmd_show, "validate": cmd_validate}

#: Subcommands in modules of their own; each module has HELP, add_arguments(parser) and main(args) -> int.
MODULE_COMMANDS: dict[str, str] = {
    "report": "hwbench.cli.report",
    "compile": "hwbench.cli.compile",
    "score": "hwbench.cli.score",
    "compare": "hwbench.cli.compare",
    "pp": "hwbench.cli.pp",
    "probe": "hwbench.cli.probe",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hwbench`` script."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        if args.command in MODULE_COMMANDS:
            return int(importlib.import_module(MODULE_COMMANDS[args.command]).main(args))
        return COMMANDS[args.command](args)
    except UserError as exc:
        print(f"hwbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hwbench: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
