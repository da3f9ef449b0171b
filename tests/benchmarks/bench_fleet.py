"""``hwbench fleet`` on many synthetic node files: its seconds, and that it flags exactly the injected faults.

    .venv/bin/python tests/benchmarks/bench_fleet.py [--nodes 256] [--gpus 8] [--repeat 3] [--keep DIR]

Writes one results file per node into a temporary folder: 8 H100s per node (cuBLAS and Triton
GEMMs of three dtypes and three shapes, stream copy and triad), an 8-rank NCCL AllReduce
sweep with each rank's median, and the host CPU's GEMM and triad; every figure has up to
+-2 % of noise. Injected, and what must be flagged: one GPU 20 % slow on every GEMM, one
node's memory 12 % slow on every GPU, one node's AllReduce slowed by a straggler rank, a
node on another torch, one failed GEMM case; and one GPU 3 % slow that must not be flagged.
Prints the wall and CPU seconds of the whole command with --json (interpreter start and the
document's printing included; best of --repeat), and of loading and analysing in this process.
Target: at most 5 s wall for the command on 256 nodes. Exit status 1 when the target is missed
or the findings are not exactly the injected ones.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: the synthetic documents

from synthetic_results import device, document, record, write  # noqa: E402

from hwbench.cli.fleet import load_all  # noqa: E402
from hwbench.decide.fleet import analyze  # noqa: E402

TARGET_S = 5.0
GPU = "NVIDIA H100 80GB HBM3"
CPU = "AMD EPYC 9654 (96 cores)"
TORCH = "2.13.0+cu130"
#: dtype -> (impl -> TFLOPS at the largest shape) of a healthy H100.
GEMM_TFLOPS = {
    "bf16": {"cublas": 700.0, "triton": 560.0},
    "fp16": {"cublas": 690.0, "triton": 550.0},
    "fp32": {"cublas": 52.0, "triton": 40.0},
}
GEMM_SIZES = (2048, 4096, 8192)
STREAM_GBPS = {0: 2900.0, 3: 3050.0}  # copy, triad
STREAM_N = 2**28
AR_COUNTS = tuple(4**k for k in range(3, 11))  # 64 .. 4M fp32 elements
AR_PEAK_GBPS = 360.0


class Faults:
    """What is wrong with one node: a factor per (kernel, device index), a straggler rank, torch, failed cases."""

    def __init__(
        self,
        slow: dict[tuple[str, int], float] | None = None,
        straggler: tuple[int, float] | None = None,
        torch: str = TORCH,
        failed: set[tuple[int, str, int]] | None = None,
    ) -> None:
        self.slow = slow or {}
        self.straggler = straggler
        self.torch = torch
        self.failed = failed or set()


def _gemm(index: int, rng: random.Random, faults: Faults, noise: float, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    out = []
    for dtype, impls in GEMM_TFLOPS.items():
        for impl, best in impls.items():
            for size in sizes:
                shape = {"M": size, "N": size, "K": size}
                if (index, dtype, size) in faults.failed and impl == "cublas":
                    out.append(
                        record(
                            "gemm",
                            impl,
                            dtype,
                            shape,
                            None,
                            backend="cuda",
                            device=GPU,
                            index=index,
                            status="runtime_error",
                            impl_kind="native",
                        )
                    )
                    continue
                tflops = best * (0.6 + 0.4 * size / sizes[-1]) * faults.slow.get(("gemm", index), 1.0)
                tflops *= 1 + rng.uniform(-noise, noise)
                median = 2 * size**3 / tflops / 1e12
                out.append(
                    record(
                        "gemm",
                        impl,
                        dtype,
                        shape,
                        median,
                        backend="cuda",
                        device=GPU,
                        index=index,
                        impl_kind="native" if impl == "cublas" else "portable",
                        tflops=tflops,
                        pct_peak=100 * tflops / (67 if dtype == "fp32" else 989.5),
                    )
                )
    return out


def _stream(backend: str, name: str, index: int, gbps: float, rng: random.Random, noise: float) -> list[dict[str, Any]]:
    out = []
    for op, share in ((0, 0.95), (3, 1.0)):
        value = gbps * share * (1 + rng.uniform(-noise, noise))
        moved = (2 if op == 0 else 3) * 4 * STREAM_N
        out.append(
            record(
                "stream",
                "native",
                "fp32",
                {"n": STREAM_N, "op": op},
                moved / value / 1e9,
                backend=backend,
                device=name,
                index=index,
                impl_kind="native",
                gbps=value,
            )
        )
    return out


def _allreduce(rng: random.Random, faults: Faults, noise: float, gpus: int) -> list[dict[str, Any]]:
    out = []
    for count in AR_COUNTS:
        nbytes = 4 * count
        for in_place in (0, 1):
            base = 12e-6 + nbytes / (AR_PEAK_GBPS * 1e9 * gpus / (2 * (gpus - 1)))
            p50s = [base * (1 + rng.uniform(-noise / 2, noise / 2)) for _ in range(gpus)]
            if faults.straggler:
                rank, factor = faults.straggler
                p50s[rank] *= factor
            median = max(p50s) * (1 + rng.uniform(0, noise / 2))
            busbw = nbytes / median / 1e9 * 2 * (gpus - 1) / gpus
            shape = {"count": count, "ranks": gpus, "in_place": in_place}
            r = record(
                "allreduce",
                "nccl",
                "fp32",
                shape,
                median,
                backend="cuda",
                device=GPU,
                index=0,
                impl_kind="native",
                busbw_gbps=busbw,
                algbw_gbps=nbytes / median / 1e9,
            )
            r["timing"]["rank_p50_s"] = p50s
            out.append(r)
    return out


def node_document(
    host: str,
    seed: int,
    faults: Faults | None = None,
    *,
    gpus: int = 8,
    noise: float = 0.02,
    sizes: tuple[int, ...] = GEMM_SIZES,
    allreduce: bool = True,
) -> dict[str, Any]:
    """One node's results document: ``gpus`` H100s and the host CPU, with ``faults``."""
    faults = faults or Faults()
    rng = random.Random(seed)
    records = []
    devices = [device("cpu", CPU, "cpu", peak={"fp32": 11.0, "fp64": 5.5})]
    for index in range(gpus):
        devices.append(
            {
                **device("cuda", GPU, "gpu", index=index),
                "driver": "580.65",
                "runtime": "13.0",
                "libraries": {"cublas": "13.1"},
            }
        )
        records += _gemm(index, rng, faults, noise, sizes)
        records += _stream("cuda", GPU, index, STREAM_GBPS[3] * faults.slow.get(("stream", index), 1.0), rng, noise)
    if allreduce and gpus >= 2:
        records += _allreduce(rng, faults, noise, gpus)
    for size in (1024, 4096):
        tflops = 6.0 * (1 + rng.uniform(-noise, noise))
        records.append(
            record(
                "gemm",
                "numpy",
                "fp32",
                {"M": size, "N": size, "K": size},
                2 * size**3 / tflops / 1e12,
                device=CPU,
                impl_kind="native",
                tflops=tflops,
                pct_peak=100 * tflops / 11.0,
            )
        )
    records += _stream("cpu", CPU, 0, 320.0, rng, noise)
    doc = document(records, devices)
    doc["host"] = {**doc["host"], "hostname": host}
    doc["software"] = {**doc["software"], "torch": faults.torch, "triton": "3.6.0"}
    if allreduce and gpus >= 2:
        doc["collective"] = {
            "participants": [{"rank": r, "hostname": host, "device": f"cuda:{r}"} for r in range(gpus)]
        }
    return doc


def injected(nodes: int) -> dict[str, Faults]:
    """The faults of a fleet of ``nodes`` (at least 8), by host."""
    name = lambda share: f"node{int(nodes * share):03d}"  # noqa: E731
    return {
        name(0.07): Faults(slow={("gemm", 3): 0.80}),
        name(0.40): Faults(slow={("stream", i): 0.88 for i in range(8)}),
        name(0.78): Faults(straggler=(5, 1.4)),
        name(0.59): Faults(torch="2.12.0+cu130"),
        name(0.90): Faults(failed={(6, "fp16", GEMM_SIZES[-1])}),
        name(0.20): Faults(slow={("gemm", 2): 0.97}),  # within noise: must not be flagged
    }


def write_fleet(folder: Path, nodes: int, gpus: int) -> dict[str, Faults]:
    """``nodes`` node files in ``folder``; the injected faults by host."""
    faults = injected(nodes)
    for i in range(nodes):
        host = f"node{i:03d}"
        write(folder / f"{host}.json", node_document(host, i, faults.get(host), gpus=gpus))
    return faults


def _key(host: str, kernel: str, impl: str, dtype: str, shape: dict[str, int], index: int) -> tuple[Any, ...]:
    return (host, kernel, impl, dtype, tuple(sorted(shape.items())), index)


def expected(faults: dict[str, Faults], gpus: int) -> dict[str, set[tuple[Any, ...]]]:
    """What the fleet document must flag, case by case, as :func:`findings` reports it."""
    out: dict[str, set[tuple[Any, ...]]] = {"outliers": set(), "failed": set(), "stragglers": set(), "software": set()}
    gemms = [(dtype, impl, size) for dtype, impls in GEMM_TFLOPS.items() for impl in impls for size in GEMM_SIZES]
    for host, f in faults.items():
        for (kernel, index), factor in f.slow.items():
            if factor >= 0.95 or index >= gpus:
                continue
            if kernel == "gemm":
                out["outliers"] |= {_key(host, "gemm", i, d, {"M": n, "N": n, "K": n}, index) for d, i, n in gemms}
            else:
                out["outliers"] |= {
                    _key(host, kernel, "native", "fp32", {"n": STREAM_N, "op": op}, index) for op in STREAM_GBPS
                }
        if f.straggler and gpus >= 2:
            out["stragglers"].add((host, f.straggler[0]))
            shapes = [{"count": c, "ranks": gpus, "in_place": p} for c in AR_COUNTS for p in (0, 1)]
            out["outliers"] |= {_key(host, "allreduce", "nccl", "fp32", shape, 0) for shape in shapes}
        if f.torch != TORCH:
            out["software"].add((host, "software.torch"))
        for index, dtype, size in f.failed:
            if index < gpus:
                out["failed"].add(_key(host, "gemm", "cublas", dtype, {"M": size, "N": size, "K": size}, index))
    return out


def findings(doc: dict[str, Any]) -> dict[str, set[tuple[Any, ...]]]:
    """What a fleet document flagged: outliers and failures by case, stragglers (host, rank), software (host, field)."""
    return {
        "outliers": {
            _key(o["node"], c["kernel"], c["impl"], c["dtype"], c["shape"], o["device_index"])
            for c in doc["cases"]
            for o in c["outliers"]
        },
        "failed": {
            _key(f["node"], c["kernel"], c["impl"], c["dtype"], c["shape"], f["device_index"])
            for c in doc["cases"]
            for f in c["failed"]
        },
        "stragglers": {(s["rank_host"], s["rank"]) for s in doc["stragglers"]},
        "software": {(o["node"], f["field"]) for f in doc["software"] for o in f["outliers"]},
    }


def command_seconds(folder: Path) -> tuple[float, float, dict[str, Any]]:
    """Wall and CPU seconds of ``hwbench fleet FOLDER --json`` in a child (the CPU's, since other
    processes may share the cores), and the document it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "hwbench", "fleet", str(folder), "--json"], capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"hwbench fleet failed ({done.returncode}): {done.stderr.strip()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu, json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="command timings taken (the best is shown)")
    parser.add_argument("--keep", type=Path, default=None, help="write the node files into this folder and keep them")
    args = parser.parse_args()
    if args.nodes < 8 or not 1 <= args.gpus <= 8:
        parser.error("--nodes must be at least 8 and --gpus from 1 to 8")
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        faults = write_fleet(folder, args.nodes, args.gpus)
        size = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
        took = time.perf_counter() - t0
        print(f"{args.nodes} node files, {args.gpus} GPUs each, {size:.0f} MB (written in {took:.1f} s)")
        timings = [command_seconds(folder) for _ in range(args.repeat)]
        t1 = time.perf_counter()
        runs = load_all([folder])
        t2 = time.perf_counter()
        analyze(runs)
        t3 = time.perf_counter()
    best, cpu, doc = min(timings, key=lambda t: t[0])
    members = sum(len(c["members"]) for c in doc["cases"])
    print(
        f"hwbench fleet --json: {best:.2f} s wall, {cpu:.2f} s CPU (best of {args.repeat}: "
        f"{', '.join(f'{t:.2f}' for t, _, _ in timings)} s); in this process: load {t2 - t1:.2f} s, "
        f"analysis {t3 - t2:.2f} s; {doc['summary']['cases']} cases, {members} members"
    )
    want, got = expected(faults, args.gpus), findings(doc)
    wrong = False
    for kind in want:
        missed, extra = want[kind] - got[kind], got[kind] - want[kind]
        print(
            f"{kind}: {len(got[kind])} flagged, {len(want[kind])} injected"
            + (f"; missed {sorted(missed)}" if missed else "")
            + (f"; not injected {sorted(extra)}" if extra else "")
        )
        wrong |= bool(missed or extra)
    late = best > TARGET_S and args.nodes >= 256
    if late:
        print(f"target missed: {best:.2f} s > {TARGET_S:g} s")
    return 1 if wrong or late else 0


if __name__ == "__main__":
    sys.exit(main())
