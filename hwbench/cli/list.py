"""List the backends (available or not, and why), their devices, the kernels and each
backend's implementations of them.

  hwbench list
  hwbench list --backend cpu,opencl --json
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from hwbench.cli.options import positive_seconds
from hwbench.core.dtypes import is_integer
from hwbench.core.kernel import describe_kernel
from hwbench.core.registry import backend_targets, get_kernel, kernel_targets, parse_names
from hwbench.core.text import printable
from hwbench.run.runner import describe_all
from hwbench.run.worker import Worker

HELP = "backends (available or not, and why), devices, kernels, implementations"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench list``."""
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.add_argument("--backend", default="all", help="comma list of backends to probe (default: all)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per backend probe")


def main(args: argparse.Namespace) -> int:
    """Describe every selected backend in a worker process and print what it found."""
    names = parse_names(args.backend, list(backend_targets()), "backend")
    with Worker() as worker:
        backends = describe_all(worker, names, positive_seconds(args.timeout, "--timeout"))
    kernels = [describe_kernel(get_kernel(k)) for k in kernel_targets()]
    if args.json:
        print(json.dumps({"backends": backends, "kernels": kernels}, indent=1))
        return 0
    for line in _text(backends, kernels):
        print(printable(line))
    return 0


def _text(backends: list[dict[str, Any]], kernels: list[dict[str, Any]]) -> list[str]:
    """The lines ``hwbench list`` prints (names from drivers escaped by the caller)."""
    lines = ["Backends"]
    for b in backends:
        state = "available" if b["available"] else f"unavailable: {b['reason']}"
        lines.append(f"  {b['name']:<8} {state}")
        if b["available"] and b["reason"]:  # an available backend's reason is a note (how to add more)
            lines.append(f"    note: {b['reason']}")
        for d in b.get("devices", []):
            peak = (d.get("peak") or {}).get("tflops", {})
            peaks = ", ".join(f"{k} {v * 1000:.0f} {'GOPS' if is_integer(k) else 'GFLOPS'}" for k, v in peak.items())
            lines.append(
                f"    {d['backend']}:{d['index']}  {d['name']} ({d['vendor']}, {d['arch']})"
                + (f"  peak {peaks}" if peaks else "")
            )
    lines.append("Kernels")
    for k in kernels:
        lines.append(f"  {k['name']:<10} {k['description']}; dtypes {', '.join(k['dtypes'])}")
        for b in backends:
            for impl in b.get("implementations", {}).get(k["name"], []):
                lines.append(
                    f"    {b['name'] + '/' + impl['name']:<20} {impl['kind']:<8} {impl['language']:<17} "
                    f"{', '.join(impl['dtypes'])}  {impl['description']}"
                )
    return lines
