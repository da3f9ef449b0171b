"""AllReduce figures from one ``hwbench run``: small-message p50 latency and busbw per implementation.

    .venv/bin/python tests/benchmarks/bench_allreduce.py [--ranks 8] [--budget 0.25] [--out FILE]

Runs the quick profile's sizes (4 B to 64 MiB of fp32 per rank) on ``--ranks`` local ranks
for the natives gloo and mpi (when mpi4py and mpirun are installed; mpirun then starts the
ranks) and the portable llvm_shm, then prints, per implementation and in-place mode, the
p50 of messages up to 1 KiB and the busbw of the largest message, and the portable one's
ratios to each native. All come from the same run, so the ratios hold on a busy machine too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--budget", type=float, default=0.25, help="seconds of timed iterations per case")
    parser.add_argument("--out", type=Path, default=None, help="keep the results file here")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-allreduce-")) / "allreduce.json"
    from hwbench.collective.mpi import missing

    why = missing()
    impls = ["gloo", "llvm_shm"] if why else ["gloo", "mpi", "llvm_shm"]
    if why:
        print(f"mpi left out: {why}", flush=True)
    command = [
        sys.executable,
        "-m",
        "hwbench",
        "run",
        "--backend",
        "cpu",
        "--kernel",
        "allreduce",
        "--ranks",
        str(args.ranks),
        "--impl",
        ",".join(impls),
        "--profile",
        "quick",
        "--budget",
        str(args.budget),
        "--out",
        str(out),
        "--quiet",
    ]
    print("$", " ".join(command[1:]), flush=True)
    done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if not out.exists():
        print(done.stderr, file=sys.stderr)
        return 1
    doc = json.loads(out.read_text())
    records = [r for r in doc["records"] if r["impl"] != "*"]
    failed = [r for r in records if r["status"] != "ok"]
    for r in failed:
        print(f"FAILED {r['impl']} {r['shape']}: {r['status']}: {r['reason']}", file=sys.stderr)
    largest = max(r["shape"]["count"] for r in records)
    figures: dict[tuple[str, int], dict[str, float]] = {}
    print(
        f"\n{'impl':<9} {'in_place':>8} {'p50 <=1KiB':>12} {'p99 <=1KiB':>12} "
        f"{'busbw @' + str(largest * 4 >> 20) + 'MiB':>15}"
    )
    for impl in impls:
        for in_place in (0, 1):
            mine = [
                r for r in records if r["impl"] == impl and r["shape"]["in_place"] == in_place and r["status"] == "ok"
            ]
            small = [r for r in mine if r["shape"]["count"] * 4 <= 1024]
            big = [r for r in mine if r["shape"]["count"] == largest]
            if not small or not big:
                continue
            p50 = max(r["timing"]["median_s"] for r in small)
            p99 = max(r["timing"]["p99_s"] for r in small)
            busbw = big[0]["metrics"]["busbw_gbps"]
            figures[(impl, in_place)] = {"p50": p50, "busbw": busbw}
            print(f"{impl:<9} {in_place:>8} {p50 * 1e6:>9.1f} us {p99 * 1e6:>9.1f} us {busbw:>10.3f} GB/s")
    for native in (n for n in impls if n != "llvm_shm"):
        for in_place in (0, 1):
            if (native, in_place) in figures and ("llvm_shm", in_place) in figures:
                g, p = figures[(native, in_place)], figures[("llvm_shm", in_place)]
                print(
                    f"in_place={in_place}: llvm_shm latency {g['p50'] / p['p50']:.1f}x lower than {native}'s, "
                    f"busbw {p['busbw'] / g['busbw']:.2f}x {native}'s"
                )
    summary = doc.get("collective", {})
    print(
        f"\ncollective summary: small-message latency {summary.get('small_message_latency_s')} s "
        f"({summary.get('small_message_latency_impl')}), peak busbw {summary.get('peak_busbw_gbps')} GB/s "
        f"({summary.get('peak_busbw_impl')}); wall {sum(x['wall_s'] for x in summary.get('launches', [])):.1f} s"
    )
    print(f"results: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
