"""What the corruption checks cost a burn: throughput with checks at the default cadence and without.

    python tests/benchmarks/bench_burn.py [--seconds 20] [--rounds 2]

One process prepares the cpu backend's default burn case twice (GEMM, NumPy, fp32, 2048^3, exact
integer inputs), then burns them in alternating rounds: one with a check every
``--check-every`` seconds (the default of ``hwbench burn``), one with no check but the last.
Prints each round's TFLOPS (iterations x flops / wall time, the checks' time included), the
longest time between two checks and the share of the time spent checking; then checked /
unchecked over all rounds (which other load on the machine blurs) and the checks' share of the
checked rounds' time (which it does not: what the checks cost, measured directly).
"""

from __future__ import annotations

import argparse
import threading

from hwbench.cli.burn import DEFAULT_CHECK_EVERY_S
from hwbench.run.burn_device import CPU_GEMM, BurnJob, DeviceBurn


def round_tflops(loop: DeviceBurn, seconds: float, check_every: float | None) -> tuple[float, float, int, float]:
    """One round of ``seconds``: TFLOPS, the longest gap between checks, the checks done, the
    share of the round's time they took."""
    loop.job = BurnJob(
        "cpu",
        0,
        impl="numpy",
        dtype="fp32",
        shape=dict(CPU_GEMM),
        duration_s=seconds,
        interval_s=seconds,
        check_every_s=check_every,
    )
    loop.max_check_gap_s, loop.check_s, before, checks = 0.0, 0.0, loop.iterations, loop.checks
    done = loop.run(threading.Event(), lambda event: None)
    flops = loop.case.kernel.flops(loop.case.shape) * (done["iterations"] - before)
    share = done["check_s"] / done["elapsed_s"]
    return flops / done["elapsed_s"] / 1e12, done["max_check_gap_s"], done["checks"] - checks, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds per round (default 20)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each (default 2)")
    parser.add_argument("--check-every", type=float, default=DEFAULT_CHECK_EVERY_S)
    args = parser.parse_args()
    loops: dict[str, DeviceBurn] = {}
    for name in ("checked", "unchecked"):
        job = BurnJob("cpu", 0, impl="numpy", dtype="fp32", shape=dict(CPU_GEMM))
        loops[name] = DeviceBurn(job)
        loops[name].prepare()
    totals: dict[str, list[float]] = {"checked": [], "unchecked": []}
    shares: list[float] = []
    print(f"{'round':<12} {'TFLOPS':>9} {'checks':>6} {'max gap':>8} {'checking':>9}")
    for number in range(args.rounds):
        for name, every in (("checked", args.check_every), ("unchecked", None)):
            tflops, gap, checks, share = round_tflops(loops[name], args.seconds, every)
            totals[name].append(tflops)
            shares += [share] if every is not None else []
            print(f"{name:<9} {number + 1:<2} {tflops:>9.4f} {checks:>6} {gap:>7.2f}s {100 * share:>8.3f}%")
    checked = sum(totals["checked"]) / len(totals["checked"])
    unchecked = sum(totals["unchecked"]) / len(totals["unchecked"])
    print(f"checked / unchecked TFLOPS: {checked / unchecked:.4f} (cost {100 * (1 - checked / unchecked):+.2f} %)")
    print(f"time in the checks, checked rounds: {100 * sum(shares) / len(shares):.3f} % of the wall time")


if __name__ == "__main__":
    main()
