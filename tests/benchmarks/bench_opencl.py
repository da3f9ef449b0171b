"""OpenCL C kernels on the first OpenCL device (PoCL on a CPU) against the host's natives.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python tests/benchmarks/bench_opencl.py [--repeat N]

SGEMM 1024 and 2048 against NumPy/OpenBLAS, attention fp32 (B=1, H=8, S=1024, D=64) against
torch SDPA on the CPU. The OpenCL side is prepared by the opencl backend exactly as
``hwbench run`` prepares it, checked against the float64 reference and timed with its
profiling-event timer; the natives are timed with perf_counter. Medians; one ratio per line
(OpenCL throughput / native throughput), measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

from hwbench.core.registry import get_backend, get_kernel
from hwbench.run import parity

CASES = [
    ("gemm", {"M": 1024, "N": 1024, "K": 1024}),
    ("gemm", {"M": 2048, "N": 2048, "K": 2048}),
    ("attention", {"batch": 1, "heads": 8, "seq_q": 1024, "seq_k": 1024, "head_dim": 64, "causal": 0}),
]


def _native(kernel: str, inputs: dict[str, np.ndarray], shape: dict[str, int]):
    if kernel == "gemm":
        a, b = inputs["A"], inputs["B"]
        out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
        return "numpy", lambda: np.matmul(a, b, out=out)
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    q, k, v = (torch.from_numpy(inputs[x]) for x in ("q", "k", "v"))

    def sdpa() -> None:
        with torch.inference_mode():
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(shape["causal"]))

    return "torch_sdpa", sdpa


def _wall(fn, repeat: int) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per implementation (default 7)")
    args = parser.parse_args()
    backend = get_backend("opencl")
    available = backend.probe()
    if not available.ok:
        print(f"opencl unavailable: {available.reason}", file=sys.stderr)
        return 2
    device = backend.devices()[0]
    print(
        f"device: {device.name} ({device.extra['platform']}, {device.driver}); "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}"
    )
    for kernel_name, shape in CASES:
        spec = get_kernel(kernel_name)
        full = spec.complete(dict(shape))
        inputs = spec.make_inputs(full, "fp32", 0)
        impl = next(i for i in backend.implementations(kernel_name) if i.name == "opencl")
        prepared = backend.prepare(impl, spec, inputs, full, "fp32", device)
        prepared.run()
        check = parity.check(prepared.result(), spec.reference(inputs, full), spec.tolerance("fp32", full))
        timer = backend.timer(device)
        timer.time(prepared.run)
        t_cl = statistics.median(timer.time(prepared.run) for _ in range(args.repeat))
        native_name, native = _native(kernel_name, inputs, full)
        t_native = _wall(native, args.repeat)
        flops = spec.flops(full)
        print(
            f"{kernel_name:9s} {spec.describe_shape(full):36s} opencl {flops / t_cl / 1e9:7.1f} GFLOP/s  "
            f"{native_name} {flops / t_native / 1e9:7.1f} GFLOP/s  ratio {t_native / t_cl:.2f}x  "
            f"parity {'ok' if check.passed else 'FAIL'}  "
            f"tile {prepared.config.get('tile') or prepared.config.get('BQ')}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
