"""pytest-benchmark suite for the CPU backend's kernels, portable and native.

    pytest tests/benchmarks --benchmark-only                  # measure
    pytest tests/benchmarks --benchmark-autosave              # keep a baseline under .benchmarks/
    pytest tests/benchmarks --benchmark-compare --benchmark-compare-fail=median:10%

Each case is prepared by the CPU backend exactly as ``hwbench run`` prepares it (inputs,
JIT, output allocated), checked against the float64 reference once, then timed by
pytest-benchmark; ``extra_info`` carries GFLOP/s, parity and the device. Shapes are
moderate so the suite also serves as a smoke test under ``--benchmark-disable``.
"""

from __future__ import annotations

import pytest

from hwbench import parity
from hwbench.registry import get_backend, get_kernel

CASES = [
    ("gemm", {"M": 512, "N": 512, "K": 512}),
    ("gemm", {"M": 333, "N": 517, "K": 259}),
    ("attention", {"batch": 1, "heads": 8, "seq_q": 256, "seq_k": 256, "head_dim": 64, "causal": 0}),
    ("attention", {"batch": 1, "heads": 8, "seq_q": 256, "seq_k": 256, "head_dim": 64, "causal": 1}),
]


def _ids() -> list[str]:
    return [f"{kernel}-{get_kernel(kernel).describe_shape(shape)}" for kernel, shape in CASES]


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("kernel_name,shape", CASES, ids=_ids())
@pytest.mark.parametrize("impl_kind", ["portable", "native"])
def test_cpu_kernel(benchmark, kernel_name: str, shape: dict[str, int], dtype: str, impl_kind: str) -> None:
    backend = get_backend("cpu")
    kernel = get_kernel(kernel_name)
    device = backend.devices()[0]
    impl = next(i for i in backend.implementations(kernel_name) if i.kind == impl_kind)
    inputs = kernel.make_inputs(shape, dtype, seed=0)
    prepared = backend.prepare(impl, kernel, inputs, shape, dtype, device)
    prepared.run()
    check = parity.check(prepared.result(), kernel.reference(inputs, shape), kernel.tolerance(dtype, shape))
    assert check.passed, check.reason
    benchmark.group = f"{kernel_name} {kernel.describe_shape(shape)} {dtype}"
    benchmark.pedantic(prepared.run, rounds=20, warmup_rounds=2, iterations=1)
    median = benchmark.stats.stats.median if benchmark.stats else None
    benchmark.extra_info.update({
        "impl": impl.name, "backend": "cpu", "device": device.name, "dtype": dtype,
        "max_abs_err": check.max_abs_err, "atol": check.atol,
        "gflops": kernel.flops(shape) / median / 1e9 if median else None,
    })
