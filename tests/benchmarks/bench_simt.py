"""The llvmlite work-group (SIMT) kernels against the OpenCL C kernels on every OpenCL device
that takes SPIR-V (Intel's CPU runtime here): SGEMM 2048³ and attention fp32 (B=1, H=8,
S=1024, D=64, causal and not).

    .venv/bin/python tests/benchmarks/bench_simt.py [--rounds 7] [--gemm 2048]

Both sides are prepared by the opencl backend exactly as ``hwbench run`` prepares them (the
device's own configuration, flushed as a run flushes), checked against the float64 reference
and timed with the backend's profiling-event timer. Rounds interleave the two sides, one call
of each per round after a warm-up call, so that the VM's slow phases fall on both alike.
Printed per case: each side's median GFLOPS and share of the device's fp32 peak, and the
ratio llvm / OpenCL C.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from hwbench.core.registry import get_backend, get_kernel
from hwbench.run import parity

ATTENTION = {"batch": 1, "heads": 8, "seq_q": 1024, "seq_k": 1024, "head_dim": 64}


def _prepare(backend: Any, device: Any, kernel: str, impl_name: str, shape: dict[str, int]) -> tuple[Any, Any, Any]:
    spec = get_kernel(kernel)
    full = spec.complete(dict(shape))
    inputs = spec.make_inputs(full, "fp32", 0)
    impl = next(i for i in backend.implementations(kernel) if i.name == impl_name)
    prepared = backend.prepare(impl, spec, inputs, full, "fp32", device)
    prepared.run()
    check = parity.check(prepared.result(), spec.reference(inputs, full), spec.tolerance("fp32", full))
    if not check.passed:
        raise SystemExit(f"{impl_name} {kernel} {spec.describe_shape(full)}: parity failed ({check})")
    return spec, full, prepared


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per case (default 7)")
    parser.add_argument("--gemm", type=int, default=2048, help="M = N = K of the GEMM (default 2048)")
    args = parser.parse_args()
    # The opencl backend imports pyopencl, which is optional: imported once the arguments are read.
    from hwbench.backends import opencl

    backend = get_backend("opencl")
    devices = [d for d in backend.devices() if opencl.takes_spirv(d.extra["il_versions"])]
    if not devices:
        print("no OpenCL device takes SPIR-V here: pip install 'hwbench[intel-opencl]'", file=sys.stderr)
        return 2
    size = args.gemm
    cases = [("gemm", {"M": size, "N": size, "K": size})] + [
        ("attention", {**ATTENTION, "causal": causal}) for causal in (0, 1)
    ]
    for device in devices:
        peak = device.peak.tflops.get("fp32") if device.peak else None
        print(f"{device.name}; fp32 peak {peak or 0:.3f} TFLOPS; {args.rounds} rounds")
        timer = backend.timer(device)
        for kernel, shape in cases:
            sides = {name: _prepare(backend, device, kernel, name, shape) for name in ("llvm", "opencl")}
            spec, full, _ = sides["llvm"]
            flushes = {name: backend.case_flush(device, prepared) for name, (_, _, prepared) in sides.items()}
            times: dict[str, list[float]] = {name: [] for name in sides}
            for _ in range(args.rounds + 1):
                for name, (_, _, prepared) in sides.items():
                    flush = flushes[name]
                    if flush is not None:
                        flush.run()
                    times[name].append(timer.time(prepared.run))
            gflops = {name: spec.flops(full) / statistics.median(t[1:]) / 1e9 for name, t in times.items()}
            shares = {name: f"{100 * g / 1e3 / peak:4.1f} %" if peak else "-" for name, g in gflops.items()}
            llvm, opencl_c = gflops["llvm"], gflops["opencl"]
            print(
                f"  {kernel:9s} {spec.describe_shape(full):38s} llvm {llvm:6.1f} GFLOPS ({shares['llvm']})"
                f"  OpenCL C {opencl_c:6.1f} ({shares['opencl']})  ratio {llvm / opencl_c:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
