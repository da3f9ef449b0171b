"""pytest-benchmark cases for the opencl backend's OpenCL C kernels (through the ``hwbench_case`` fixture).

    pytest tests/benchmarks/test_bench_opencl.py --benchmark-only

Skipped, saying why, where pyopencl or an OpenCL device is missing. The native twin of the
GEMM is CLBlast where pyclblast is installed.
"""

from __future__ import annotations

import pytest

CASES = [
    ("gemm", {"M": 512, "N": 512, "K": 512}),
    ("attention", {"batch": 1, "heads": 8, "seq_q": 256, "seq_k": 256, "head_dim": 64, "causal": 1}),
]


@pytest.mark.parametrize("kernel_name,shape", CASES, ids=[k for k, _ in CASES])
def test_opencl_kernel(hwbench_case, kernel_name: str, shape: dict[str, int]) -> None:
    result = hwbench_case(
        kernel_name,
        shape,
        dtype="fp32",
        impl="opencl",
        backend="opencl",
        rounds=10,
        warmup_rounds=2,
        native_budget_s=0.5,
    )
    assert result.parity["passed"]
    assert result.device_timer == "opencl-profiling-events"
