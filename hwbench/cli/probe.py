"""Platform probes that feed `hwbench score`, each writing an ordinary results file.

hwbench probe storage --dir /shared/scratch [--size 256MiB] [--runtime 10]
    fio 4 KiB random reads, direct I/O, libaio, queue depth 32, on one file of --size in
    --dir for --runtime seconds (the file is removed afterwards); a record of kernel
    'storage' with metrics.iops and completion latency; skipped (with why) without fio.
hwbench probe startup [--backend auto|NAME] [--impl NAME] [--dtype D] [--shape M=..,N=..,K=..]
    fresh processes that start, initialise the backend, compile the GEMM and finish one
    step, timed from launch to the end of that step, --repeat times with cold compile
    caches and --repeat times with warm ones: two records of kernel 'startup'
    (shape.warm_cache 0 and 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, cast

from hwbench.cli.options import add_out, emit, fresh_out, positive_seconds, to_stdout
from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.core.host import describe_host
from hwbench.core.kernel import parse_shape_arg
from hwbench.core.records import build_document, failed, new_record, now
from hwbench.core.registry import backend_targets, get_kernel, parse_names
from hwbench.core.results_types import BackendEntry, Document, Record
from hwbench.probes.startup import startup_record
from hwbench.probes.storage import IODEPTH, parse_size, run_storage
from hwbench.results import files as results
from hwbench.results.metrics import median_s
from hwbench.results.tables import summary
from hwbench.run.runner import describe_all
from hwbench.run.worker import Worker

HELP = "probe storage (fio) or time to first step, writing a results file for `hwbench score`"
EXIT_FAILED = 1
ACCELERATORS = ("gpu", "accelerator")
PREFERRED_DTYPES = ("bf16", "fp16", "fp32")
#: Seconds allowed for describing a backend (as `hwbench list` allows).
DESCRIBE_TIMEOUT_S = 120.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``storage`` and ``startup`` probes and their options."""
    sub = parser.add_subparsers(dest="probe", metavar="PROBE", required=True)
    p = sub.add_parser("storage", help="4 KiB random-read IOPS with fio in a folder you name")
    p.add_argument("--dir", type=Path, required=True, help="folder on the file system to probe (e.g. the shared one)")
    p.add_argument("--size", default="256MiB", help="size of the test file (default 256MiB)")
    p.add_argument("--runtime", type=int, default=10, help="seconds of random reads (default 10)")
    add_out(p, "probe-NAME-HOST-TIME.json")
    p = sub.add_parser("startup", help="time from process launch to the first GEMM step, cold and warm caches")
    p.add_argument(
        "--backend", default="auto", help="backend to start (default: the first with an accelerator, else cpu)"
    )
    p.add_argument("--impl", default=None, help="GEMM implementation (default: the backend's first portable one)")
    p.add_argument("--dtype", default=None, help="dtype (default: fp32 on a CPU, else the first of bf16, fp16, fp32)")
    p.add_argument("--shape", default="M=1024,N=1024,K=1024", help="GEMM shape (default M=1024,N=1024,K=1024)")
    p.add_argument("--device", type=int, default=0, help="device index within the backend (default 0)")
    p.add_argument("--repeat", type=int, default=3, help="fresh processes per cache state (default 3)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds allowed per process (default 600)")
    add_out(p, "probe-NAME-HOST-TIME.json")


def _describe(names: list[str], timeout: float) -> list[dict[str, Any]]:
    with Worker() as worker:
        return describe_all(worker, names, timeout)


def _choose_backend(text: str, timeout: float) -> dict[str, Any]:
    if text != "auto":
        return _describe(parse_names(text, list(backend_targets()), "backend")[:1], timeout)[0]
    described = _describe(list(backend_targets()), timeout)
    with_accel = [b for b in described if b["available"] and any(d["kind"] in ACCELERATORS for d in b["devices"])]
    hosts = [b for b in described if b.get("kind") == "cpu"]  # a backend of the host's cores
    return with_accel[0] if with_accel else (hosts or described)[0]


def _request(args: argparse.Namespace, backend: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The child's request (backend, device, impl, dtype, shape) and the device name."""
    if args.repeat < 1:
        raise UserError(f"--repeat must be at least 1, got {args.repeat}")
    kernel = get_kernel("gemm")
    shape = kernel.complete(parse_shape_arg(f"gemm:{args.shape}")[1])
    device = next((d for d in backend["devices"] if d["index"] == args.device), None)
    impls = backend["implementations"].get("gemm", [])
    if args.impl:
        impls = [i for i in impls if i["name"] == args.impl]
        if not impls and backend["available"]:
            known = ", ".join(i["name"] for i in backend["implementations"].get("gemm", []))
            raise UserError(f"backend {backend['name']} has no GEMM implementation '{args.impl}'; it has {known}")
    impls = sorted(impls, key=lambda i: i["kind"] != "portable")  # compile the portable source where there is one
    if args.dtype and args.dtype not in DTYPE_BYTES:
        raise UserError(f"unknown dtype '{args.dtype}'; known dtypes: {', '.join(DTYPE_BYTES)}")
    wanted = (
        [args.dtype] if args.dtype else (["fp32"] if not device or device["kind"] == "cpu" else list(PREFERRED_DTYPES))
    )
    choice = next(((i, d) for d in wanted for i in impls if d in i["dtypes"]), None)
    impl, dtype = choice if choice else (impls[0] if impls else {"name": args.impl or "*"}, wanted[0])
    request = {
        "backend": backend["name"],
        "device_index": args.device,
        "impl": impl["name"],
        "dtype": dtype,
        "shape": shape,
        "language": impl.get("language"),
        "impl_kind": impl.get("kind"),
    }
    return request, device["name"] if device else None


def _startup(args: argparse.Namespace, doc: Document) -> list[Record]:
    backend = _choose_backend(args.backend, DESCRIBE_TIMEOUT_S)
    kept = ("name", "available", "reason", "devices", "environment")
    entry = {**{k: backend.get(k) for k in kept}, **({"kind": backend["kind"]} if "kind" in backend else {})}
    doc["backends"] = [cast(BackendEntry, entry)]  # the worker's description
    request, device = _request(args, backend)
    if not backend["available"] or device is None or request["impl"] == "*":
        why = (
            f"backend {backend['name']} unavailable: {backend['reason']}"
            if not backend["available"]
            else f"{backend['name']} has no device {args.device}"
            if device is None
            else f"{backend['name']} has no GEMM implementation"
        )
        return [
            failed(
                new_record(
                    "startup",
                    request["impl"],
                    backend["name"],
                    args.device,
                    request["dtype"],
                    {**request["shape"], "warm_cache": warm},
                    device=device,
                ),
                "skipped",
                why,
            )
            for warm in (0, 1)
        ]
    return [startup_record(request, device, warm, args.repeat, args.timeout) for warm in (False, True)]


def _figures(records: list[Record]) -> list[str]:
    """The probe's headline figures, which the generic table has no column for."""
    lines = []
    for r in (r for r in records if r["status"] == "ok"):
        if r["kernel"] == "storage":
            lines.append(
                f"storage: {r['metrics']['iops']:,.0f} IOPS (4 KiB random read, queue depth {IODEPTH}), "
                f"p50 latency {median_s(r) * 1e6:.0f} us, in {r['config']['dir']} on {r['device']}"
            )
        elif r["kernel"] == "startup":
            phases = ", ".join(f"{k} {v:.3g} s" for k, v in r["config"]["phases_s"].items())
            lines.append(
                f"startup ({r['config']['cache']} caches): {r['timing']['median_s']:.3g} s to the first step "
                f"(median of {r['timing']['n']}; {phases})"
            )
    return lines


def main(args: argparse.Namespace) -> int:
    """Run the probe, write its results file, print the table; 1 when the probe failed."""
    if getattr(args, "timeout", None) is not None:
        positive_seconds(args.timeout, "--timeout")
    out = None if to_stdout(args.out) else fresh_out(args.out, f"probe-{args.probe}")
    if out is not None:
        results.check_writable(out)
    doc = build_document(["hwbench", *sys.argv[1:]], host=describe_host())
    if args.probe == "storage":
        record = run_storage(args.dir, parse_size(args.size), args.runtime)
        skipped = record["status"] == "skipped"
        doc["backends"] = [
            {"name": "fio", "available": not skipped, "reason": record["reason"] if skipped else "", "devices": []}
        ]
        doc["records"] = [record]
    else:
        doc["records"] = _startup(args, doc)
    doc["run"]["finished"] = now()
    saved, stream = emit(doc, out)
    print(summary(doc), file=stream)
    for line in _figures(doc["records"]):
        print(line, file=stream)
    if saved is not None:
        print(f"\nresults: {saved}", file=stream)
    bad = [r for r in doc["records"] if r["status"] not in ("ok", "skipped")]
    if bad:
        print(f"hwbench: the {args.probe} probe failed (see the reason above)", file=sys.stderr)
        return EXIT_FAILED
    return 0
