"""Sustained load on every selected device at once, its results spot-checked for silent corruption.

  hwbench burn                                  # every GPU for 10 min, else the CPU for 2 min
  hwbench burn --backend cpu --duration 120 --interval 5 -o results/burn.json
  hwbench burn --device cuda:0 --device cuda:1 --stream --check-iterations 1000

Each device runs GEMM at its best dtype (the highest peak it has; fp32 on a CPU) back to back,
in a process of its own (``--stream`` adds a STREAM triad process per device). Every interval
the file's ``burn`` section gains a point (TFLOPS, clock, temperature, power where readable):
the file is rewritten as the burn goes (at most every second), so a burn killed outright leaves
what it measured, marked incomplete. The output is compared with its float64 reference at least
every ``--check-every`` seconds (and every ``--check-iterations``), from inputs whose exact
answer is known, so any wrong element counts. Exit status 1 on any mismatch; Ctrl-C keeps what
was measured; where the file cannot be written at the end, the results go to
``hwbench-rescued-*.json`` (as ``run``'s) and the status is still the burn's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path
from typing import Any, TextIO

from hwbench.cli.main import EXIT_FAILED_CASES, EXIT_INTERRUPTED
from hwbench.cli.options import add_out, add_quiet, fresh_out, positive_seconds, save_or_rescue, seed, to_stdout
from hwbench.core.errors import UserError
from hwbench.core.kernel import parse_shape_arg
from hwbench.core.registry import backend_targets, get_kernel, parse_names
from hwbench.core.text import printable
from hwbench.results import files as results
from hwbench.run.burn import DEFAULT_INTERVAL_S, DEFAULT_POINTS, MIN_INTERVAL_S, BurnPlan, execute_burn
from hwbench.run.signals import StopSignals, exit_status

HELP = "sustained load on every selected device, checked for silent data corruption"
#: Default: a check at least every 5 s (so at most 10 s apart even with an iteration of 5 s); a
#: series point every DEFAULT_INTERVAL_S (hwbench.run.burn), or DEFAULT_POINTS in a shorter burn.
DEFAULT_CHECK_EVERY_S = 5.0
BURN_KERNELS = ("gemm", "stream")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench burn``."""
    what = parser.add_argument_group("what to burn")
    what.add_argument(
        "--backend",
        default=None,
        help="comma list of backends (default: the GPU backends where one finds a GPU, else the CPU)",
    )
    what.add_argument(
        "--device", action="append", default=[], metavar="BACKEND:INDEX", help="burn only this device (repeatable)"
    )
    what.add_argument("--stream", action="store_true", help="also a STREAM triad process per device, at the same time")
    what.add_argument("--dtype", default=None, help="GEMM dtype (default: the device's best: highest peak; CPU fp32)")
    what.add_argument("--impl", default=None, help="GEMM implementation (default: the first that runs the dtype)")
    what.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="KERNEL:NAME=INT,...",
        help="the shape burned (gemm: or stream:); default: 2048^3 on a CPU, 8192 x 8192 on a GPU",
    )
    what.add_argument("--seed", type=int, default=0, help="seed of the inputs (default 0)")
    how = parser.add_argument_group("how long and how often")
    how.add_argument(
        "--duration", type=float, default=None, metavar="S", help="seconds (default: 600 with a GPU, 120 on CPUs)"
    )
    how.add_argument(
        "--interval",
        type=float,
        default=None,
        metavar="S",
        help=f"seconds per point of the series (default {DEFAULT_INTERVAL_S:g}, or {DEFAULT_POINTS} points in a "
        f"shorter burn; at least {MIN_INTERVAL_S:g})",
    )
    how.add_argument(
        "--check-every",
        type=float,
        default=DEFAULT_CHECK_EVERY_S,
        metavar="S",
        help=f"check the output at least every S seconds (default {DEFAULT_CHECK_EVERY_S:g})",
    )
    how.add_argument(
        "--check-iterations", type=int, default=None, metavar="N", help="also check every N iterations (default: off)"
    )
    output = parser.add_argument_group("output")
    add_out(output, "hwbench-burn-HOST-TIME.json")
    output.add_argument("--json", action="store_true", help="also print the results document on stdout")
    add_quiet(output)


def _devices(values: list[str]) -> dict[str, list[int]] | None:
    if not values:
        return None
    known = list(backend_targets())
    chosen: dict[str, list[int]] = {}
    for value in values:
        name, _, index = value.partition(":")
        if name not in known or not index.isdigit():
            raise UserError(f"--device '{value}' is not BACKEND:INDEX with a known backend ({', '.join(known)})")
        chosen.setdefault(name, []).append(int(index))
    return chosen


def _shapes(values: list[str], stream: bool) -> dict[str, dict[str, int]]:
    shapes: dict[str, dict[str, int]] = {}
    for text in values:
        name, dims = parse_shape_arg(text)
        if name not in BURN_KERNELS or (name == "stream" and not stream):
            raise UserError(f"--shape '{text}': a burn runs gemm (and stream with --stream), not {name}")
        if name in shapes:
            raise UserError(f"--shape gives {name} twice: a burn runs one shape per kernel")
        shapes[name] = get_kernel(name).complete(dims)
    return shapes


def _plan(args: argparse.Namespace) -> BurnPlan:
    duration = None if args.duration is None else positive_seconds(args.duration, "--duration")
    interval = None if args.interval is None else positive_seconds(args.interval, "--interval")
    if interval is not None and interval < MIN_INTERVAL_S:
        raise UserError(f"--interval must be at least {MIN_INTERVAL_S:g} s, got {args.interval:g}")
    if duration is not None and interval is not None and interval > duration:
        raise UserError(
            f"--interval {interval:g} s is longer than --duration {duration:g} s: give a shorter --interval"
        )
    if args.check_iterations is not None and args.check_iterations < 1:
        raise UserError(f"--check-iterations must be a positive number of iterations, got {args.check_iterations}")
    if args.dtype is not None and args.dtype not in get_kernel("gemm").dtypes:
        raise UserError(f"unknown GEMM dtype '{args.dtype}'; known: {', '.join(get_kernel('gemm').dtypes)}")
    backends = parse_names(args.backend, list(backend_targets()), "backend") if args.backend else None
    devices = _devices(args.device)
    if devices and backends is None:  # --device alone: the backends of the devices named
        backends = list(devices)
    stray = [name for name in devices or {} if backends is not None and name not in backends]
    if stray:
        raise UserError(f"--device names backend {stray[0]}, which --backend does not select")
    return BurnPlan(
        backends=backends,
        devices=devices,
        duration_s=duration,
        interval_s=interval,
        check_every_s=positive_seconds(args.check_every, "--check-every"),
        check_iterations=args.check_iterations,
        stream=args.stream,
        dtype=args.dtype,
        impl=args.impl,
        shapes=_shapes(args.shape, args.stream),
        seed=seed(args.seed),
        command=["hwbench", *sys.argv[1:]],
    )


def main(args: argparse.Namespace) -> int:
    """Burn, write the file, print the table. Exit status: 0 when every device burned clean;
    1 on any mismatch, a device that could not burn, or none burned; 128 + the signal's number
    when stopped (Ctrl-C 130, SIGTERM 143), what was measured written."""
    plan = _plan(args)
    out = None if to_stdout(args.out) else fresh_out(args.out, "burn")
    if out is not None:
        results.check_writable(out)
    stream = sys.stderr if out is None or args.json else sys.stdout
    with StopSignals() as stops:
        say = None if args.quiet else lambda line: print(line, file=sys.stderr, flush=True)
        kept = ProgressFile(out) if out is not None else None
        doc = execute_burn(plan, say, stops, kept.write if kept is not None else None)
        saved = kept.finish(doc) if kept is not None else None
        if out is None or args.json:
            print(results.dumps(doc), end="", flush=True)
        return _report(doc, saved, stops, stream)


class ProgressFile:
    """The burn's results file kept as the burn goes: the first document :meth:`write` is given
    takes ``out`` (or the next free name, as every results file), each later one replaces it
    atomically, only while it is still the file this burn wrote (a file put there meanwhile is
    never replaced: the burn's then goes beside it at the end). A write that fails is said once
    on stderr and the burn goes on; :meth:`finish` writes the final document."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.path: Path | None = None  # the file written so far
        self._written: tuple[int, int] | None = None  # its device and inode
        self.failed = ""

    def _ours(self) -> bool:
        try:
            found = os.stat(self.path) if self.path is not None else None
        except OSError:
            return False
        return found is not None and (found.st_dev, found.st_ino) == self._written

    def _replace(self, doc: dict[str, Any]) -> Path:
        """Write ``doc`` at ``out`` the first time, then over the file written (UserError or OSError)."""
        if self.path is None:
            self.path = results.save(doc, self.out, next_free=True)
        elif not self._ours():
            raise UserError(f"{self.path} was replaced or removed during the burn; it is left as it is")
        else:
            partial = results.write_new(
                self.path.with_name(f".{self.path.name}.{os.getpid()}.partial"), results.dumps(doc), next_free=True
            )
            try:
                os.replace(partial, self.path)
            finally:
                if partial.exists():
                    partial.unlink()
        found = os.stat(self.path)
        self._written = (found.st_dev, found.st_ino)
        return self.path

    def write(self, doc: dict[str, Any]) -> None:
        """Keep ``doc`` (the burn so far) on disk; never raises (the first failure is said, the rest skipped)."""
        if self.failed:
            return
        try:
            self._replace(doc)
        except (UserError, OSError) as exc:
            self.failed = str(exc) if isinstance(exc, UserError) else f"cannot write {self.path}: {exc.strerror or exc}"
            print(
                printable(f"hwbench: warning: {self.failed}; the burn goes on, its file written at the end"),
                file=sys.stderr,
            )

    def finish(self, doc: dict[str, Any]) -> Path:
        """Write the final ``doc`` over the file kept so far; where that cannot be, as ``run`` saves a
        finished run: the next free name beside ``out``, else a rescue file elsewhere (said on stderr)."""
        if self.path is None or self._ours():
            try:
                return self._replace(doc)
            except (UserError, OSError):
                pass  # said by the save below, which fails the same way or finds another place
        saved = save_or_rescue(doc, self.out)
        if self.path is not None and self._ours():
            print(
                f"hwbench: {self.path} holds the burn up to its last point written; all of it is in {saved}",
                file=sys.stderr,
            )
        return saved


def _fmt(value: Any, spec: str = ".4g", unit: str = "") -> str:
    return "–" if value is None else f"{value:{spec}}{unit}"


def _yes_no(flag: Any) -> str:
    return "yes" if flag is True else "no" if flag is False else "–"


def table(doc: dict[str, Any]) -> str:
    """One line per device and kernel burned: what, status, counts, throughput, decay, clock."""
    burned = doc.get("burn", [])
    width = max([len("device"), *(len(f"{e['backend']}:{e['device_index']}") for e in burned)])
    lines = [
        f"{'device':<{width}} {'kernel':<22} {'status':<11} {'iters':>8} {'checks':>6} {'wrong':>5} "
        f"{'median':>14} {'decay':>7} {'clock first→last':>18} throttled"
    ]
    for e in burned:
        values = [p["gbps"] if p.get("gbps") is not None else p["tflops"] for p in e["series"]]
        unit = " GB/s" if any(p.get("gbps") is not None for p in e["series"]) else " TFLOPS"
        median = _fmt(statistics.median(values), ".4g", unit) if values else "–"
        clocks = f"{_fmt(e.get('clock_first_mhz'), '.0f')}→{_fmt(e.get('clock_last_mhz'), '.0f')} MHz"
        what = f"{e['kernel']} {e.get('impl') or '?'} {e.get('dtype') or '?'}"
        lines.append(
            f"{e['backend'] + ':' + str(e['device_index']):<{width}} {what:<22} {e['status']:<11} "
            f"{e['iterations']:>8} {e['checks']:>6} {e['mismatched_checks']:>5} {median:>14} "
            f"{_fmt(e.get('decay_pct'), '.1f', ' %'):>7} {clocks:>18} {_yes_no(e.get('throttled'))}"
        )
    return "\n".join(lines)


def _report(doc: dict[str, Any], saved: Path | None, stops: StopSignals, stream: TextIO) -> int:
    for warning in doc.get("warnings", []):
        print(printable(f"hwbench: warning: {warning}"), file=sys.stderr)
    print(table(doc), file=stream)
    for e in doc.get("burn", []):
        if e["reason"]:
            print(printable(f"{e['backend']}:{e['device_index']} {e['kernel']}: {e['reason']}"), file=stream)
    if saved is not None:
        print(f"\nresults: {saved}", file=stream)
    if doc["run"]["incomplete"] or stops.first is not None:
        print("interrupted: the file holds what was measured so far", file=sys.stderr)
        return exit_status(stops.first) if stops.first else EXIT_INTERRUPTED
    entries = doc.get("burn", [])
    if any(e["status"] == "mismatch" for e in entries):
        print("hwbench: wrong results found (see the mismatches above)", file=sys.stderr)
        return EXIT_FAILED_CASES
    if not entries or any(e["status"] != "ok" for e in entries):
        print("hwbench: a device could not burn, or none did (the reasons are above)", file=sys.stderr)
        return EXIT_FAILED_CASES
    return 0
