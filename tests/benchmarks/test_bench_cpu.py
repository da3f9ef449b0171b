"""pytest-benchmark suite for the CPU backend's kernels, portable and native.

    pytest tests/benchmarks --benchmark-only                  # measure
    pytest tests/benchmarks --benchmark-autosave              # keep a baseline under .benchmarks/
    pytest tests/benchmarks --benchmark-compare --benchmark-compare-fail=median:10%

Each case runs through the ``hwbench_case`` fixture (hwbench's pytest plugin): prepared by
the CPU backend exactly as ``hwbench run`` prepares it, checked against the float64
reference, timed by pytest-benchmark with the backend's timer and a cache flush before
each round; ``extra_info`` carries TFLOPS, % of peak, parity, porting overhead against
the native and the device. Shapes are moderate so the suite also serves as a smoke test
under ``--benchmark-disable``.
"""

from __future__ import annotations

import pytest

from hwbench.core.registry import get_kernel

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
def test_cpu_kernel(hwbench_case, kernel_name: str, shape: dict[str, int], dtype: str, impl_kind: str) -> None:
    result = hwbench_case(
        kernel_name, shape, dtype=dtype, impl=impl_kind, backend="cpu", warmup_rounds=2, native_budget_s=0.25
    )
    assert result.parity["passed"]
