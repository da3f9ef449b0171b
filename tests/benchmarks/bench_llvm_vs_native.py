"""llvmlite kernels vs the native libraries on this CPU, in one run.

    python tests/benchmarks/bench_llvm_vs_native.py [--reps 15] [--rounds 3]

Compares SGEMM (M=N=K=1024, 2048) and DGEMM 1024 against NumPy's ``A @ B``
(OpenBLAS) and attention (B=1, H=8, S=1024, D=64, fp32, causal and not)
against ``torch.nn.functional.scaled_dot_product_attention``. Contenders run in
alternating rounds with a pause in between, because OpenBLAS and OpenMP
workers keep spinning for a while after a call and would steal the cores from
whoever runs next. Prints per-contender medians and the llvm/native ratio.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

import numpy as np


def _import_kernels():
    """The llvmlite kernel modules of the installed hwbench."""
    from hwbench.kernels.attention import llvm as attn
    from hwbench.kernels.gemm import llvm as gemm

    return gemm, attn


def time_calls(fn: Callable[[], object], reps: int, warm_s: float = 0.0) -> list[float]:
    fn()
    until = time.perf_counter() + warm_s
    while time.perf_counter() < until:  # a core woken from idle runs slow for its first calls
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def compare(
    contenders: dict[str, Callable[[], object]], reps: int, rounds: int, pause: float, warm_s: float = 0.0
) -> dict[str, float]:
    """Median seconds per contender over ``rounds`` alternating blocks of ``reps``, each block after
    ``warm_s`` seconds of untimed calls."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
        for name in order:
            time.sleep(pause)
            samples[name] += time_calls(contenders[name], reps, warm_s)
    return {name: float(np.median(ts)) for name, ts in samples.items()}


def _row(label: str, flops: float, t_llvm: float, t_native: float, native: str) -> str:
    gl, gn = flops / t_llvm / 1e9, flops / t_native / 1e9
    return (
        f"{label:<28} {t_llvm * 1e3:9.2f} {gl:9.1f}   {native:<6} {t_native * 1e3:9.2f} "
        f"{gn:9.1f}   {t_native / t_llvm:5.2f}x"
    )


def _blas_info() -> None:
    if "OPENBLAS_CORETYPE" in os.environ or "OPENBLAS_L2_SIZE" in os.environ:
        print(
            "WARNING: OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE is set; NumPy may run a slower kernel. "
            "Rerun with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`."
        )
    try:
        from threadpoolctl import threadpool_info

        for info in threadpool_info():
            print(
                f"  {info.get('internal_api')}: {info.get('architecture', '-')} "
                f"threads={info.get('num_threads')} version={info.get('version')}"
            )
    except ImportError:
        print("  (threadpoolctl not installed: BLAS kernel unknown)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10, help="timed runs per round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per contender")
    ap.add_argument("--pause", type=float, default=0.3, help="seconds of idle between blocks")
    args = ap.parse_args()
    gemm, attn = _import_kernels()
    rng = np.random.default_rng(0)
    print(f"cores: {os.cpu_count()}  BLAS:")
    _blas_info()
    print(f"{'case':<28} {'llvm ms':>9} {'GFLOP/s':>9}   {'native':<6} {'ms':>9} {'GFLOP/s':>9}   ratio")

    for n, dtype in ((1024, "fp32"), (2048, "fp32"), (1024, "fp64")):
        npd = np.float32 if dtype == "fp32" else np.float64
        a, b = (rng.uniform(-1, 1, (n, n)).astype(npd) for _ in range(2))
        pk = gemm.prepare_cpu({"A": a, "B": b}, {"M": n, "N": n, "K": n}, dtype)
        t = compare({"llvm": pk.run, "numpy": lambda a=a, b=b: a @ b}, args.reps, args.rounds, args.pause)
        print(_row(f"gemm {dtype} {n}^3", 2.0 * n**3, t["llvm"], t["numpy"], "numpy"))

    try:
        import torch
    except ImportError:
        print("torch not installed: attention comparison skipped")
        return
    torch.set_num_threads(os.cpu_count() or 1)
    b_, h, s, d = 1, 8, 1024, 64
    q, k, v = (rng.standard_normal((b_, h, s, d)).astype(np.float32) for _ in range(3))
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    for causal in (0, 1):
        shape = dict(batch=b_, heads=h, seq_q=s, seq_k=s, head_dim=d, causal=causal)
        pk = attn.prepare_cpu({"q": q, "k": k, "v": v}, shape, "fp32")

        def sdpa(c: bool = bool(causal)) -> object:
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=c)

        with torch.inference_mode():
            t = compare({"llvm": pk.run, "torch": sdpa}, args.reps, args.rounds, args.pause)
        flops = 4.0 * b_ * h * s * s * d / (2.0 if causal else 1.0)
        print(_row(f"attention fp32 causal={causal}", flops, t["llvm"], t["torch"], "torch"))
    print(
        f"(torch {torch.__version__}, {torch.get_num_threads()} threads; attention GFLOP/s count "
        "4*B*H*Sq*Sk*D, halved when causal)"
    )


if __name__ == "__main__":
    main()
