"""Does the harness measure what a tight loop measures? One run, medians, ratio per case.

    python tests/benchmarks/bench_harness_overhead.py [--rounds 5]

For each case the CPU backend prepares the kernel as ``hwbench run`` does; then, in
alternating rounds, ``hwbench.timing.measure`` (per-call timer, flush off so both see
warm caches) and a tight loop (``perf_counter`` around N back-to-back calls, divided by
N) time the same ``run``. Prints the median of each and harness/loop; the flushed
harness median is shown beside it for information.
"""

from __future__ import annotations

import argparse
import statistics
import time

from hwbench.core.backend import WallTimer
from hwbench.core.registry import get_backend, get_kernel
from hwbench.run.stats import summarize
from hwbench.run.timing import TimingConfig, measure

CASES = [
    ("gemm", "llvm", "fp32", {"M": 1024, "N": 1024, "K": 1024}),
    ("gemm", "numpy", "fp32", {"M": 1024, "N": 1024, "K": 1024}),
    ("gemm", "llvm", "fp32", {"M": 256, "N": 256, "K": 256}),
    ("attention", "llvm", "fp32", {"batch": 1, "heads": 8, "seq_q": 1024, "seq_k": 1024, "head_dim": 64, "causal": 0}),
    (
        "attention",
        "torch_sdpa",
        "fp32",
        {"batch": 1, "heads": 8, "seq_q": 1024, "seq_k": 1024, "head_dim": 64, "causal": 1},
    ),
]


def tight_loop(run, seconds: float) -> float:
    """Mean seconds per call of back-to-back calls filling about ``seconds``."""
    run()
    start = time.perf_counter()
    run()
    n = max(3, int(seconds / max(time.perf_counter() - start, 1e-9)))
    start = time.perf_counter()
    for _ in range(n):
        run()
    return (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.5, help="seconds per measurement")
    args = parser.parse_args()
    backend = get_backend("cpu")
    device = backend.devices()[0]
    timer = WallTimer()
    print(f"{'case':<44} {'harness':>10} {'loop':>10} {'ratio':>7} {'flushed':>10}")
    for kernel_name, impl_name, dtype, shape in CASES:
        kernel = get_kernel(kernel_name)
        impl = next(i for i in backend.implementations(kernel_name) if i.name == impl_name)
        inputs = kernel.make_inputs(shape, dtype, 0)
        prepared = backend.prepare(impl, kernel, inputs, shape, dtype, device)
        warm = TimingConfig(warmup_s=0.1, budget_s=args.budget, target_cv=0.0, flush=False)
        cold = TimingConfig(warmup_s=0.1, budget_s=args.budget, target_cv=0.0, flush=True)
        harness, loop = [], []
        for _ in range(args.rounds):
            harness.append(summarize(measure(prepared.run, timer, None, warm).samples).median)
            loop.append(tight_loop(prepared.run, args.budget))
        flushed = summarize(measure(prepared.run, timer, backend.flush(device), cold).samples).median
        h, l_ = statistics.median(harness), statistics.median(loop)
        label = f"{kernel_name} {impl_name} {dtype} {kernel.describe_shape(shape)}"[:44]
        print(f"{label:<44} {h * 1e3:>8.3f}ms {l_ * 1e3:>8.3f}ms {h / l_:>7.3f} {flushed * 1e3:>8.3f}ms")


if __name__ == "__main__":
    main()
