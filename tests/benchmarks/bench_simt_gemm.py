"""The llvmlite work-group (SIMT) SGEMM on the first OpenCL device that takes SPIR-V (Intel's CPU
runtime here), in the device's own configuration and any others given, beside the OpenCL C GEMM
on the same device and NumPy's BLAS on the host, over a sweep of K.

    .venv/bin/python tests/benchmarks/bench_simt_gemm.py [--m 2048 --n 2048] [--k 256,2048]
        [--rounds 5] [--config '{"WGN": 1, "WGM": 1, "TM": 12, "TNV": 2, "VW": 16, "TK": 0,
        "MT": 16, "NT": 4, "KC": 256}' ...]

Each configuration is lowered and built as the opencl backend builds it (the build's seconds are
printed: local-memory configurations take Intel's compiler far longer) and checked against
float64. Then, for each K, ``--rounds`` rounds time every entry in turn (3 calls after one, by
profiling events; NumPy by the host clock), so that the VM's slow phases fall on all of them
alike. Printed: each entry's median GFLOPS over all rounds, its share of the fp32 peak the cpu
backend measures, and its ratio to the OpenCL C GEMM.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=2048)
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--k", default="256,2048", help="comma list of K")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per K")
    parser.add_argument("--config", action="append", default=[], help="a configuration as JSON (repeatable)")
    args = parser.parse_args()
    # pyopencl and llvmlite are optional: imported once the arguments are read (--help works without).
    import pyopencl as cl

    from hwbench.backends import opencl, opencl_device
    from hwbench.core.registry import get_backend
    from hwbench.kernels.gemm.gpu import opencl as gemm_opencl
    from hwbench.kernels.gemm.gpu import simt
    from hwbench.kernels.llvmir.spirv import SPIRVTarget, build_spirv

    backend = get_backend("opencl")
    devices = [d for d in backend.devices() if opencl.takes_spirv(d.extra["il_versions"])]
    if not devices:
        print("no OpenCL device takes SPIR-V here: pip install 'hwbench[intel-opencl]'", file=sys.stderr)
        return 2
    device = devices[0]
    limits = opencl.simt_limits(device)
    target = SPIRVTarget(limits)
    peak = device.peak.tflops.get("fp32") if device.peak else None
    state = backend._state(device)
    configs = [simt.choose_config(limits, "fp32", target.vector_width("fp32"))] + [json.loads(c) for c in args.config]
    print(f"{device.name}; fp32 peak {peak or 0:.3f} TFLOPS; M={args.m} N={args.n}; {args.rounds} rounds")
    programs: list[tuple[str, Any, Callable[[dict[str, int]], Any]]] = []
    for cfg in configs:
        start = time.perf_counter()
        try:
            module = build_spirv("gemm", "fp32", limits, cfg)
        except ValueError as exc:  # a configuration the device cannot take: said, and left out
            print(f"llvm {json.dumps(cfg)}: {exc}", file=sys.stderr)
            continue
        program = cl.Program(state.context, module.binary).build()
        print(f"llvm {json.dumps(cfg)}: built in {time.perf_counter() - start:.1f} s")
        programs.append(
            (f"llvm {json.dumps(cfg)}", program, lambda shape, cfg=cfg: simt.launch(shape, "fp32", target, cfg))
        )
    lanes, kind = opencl.lanes(device, "fp32"), device.kind
    tiles = gemm_opencl.tiles(kind, lanes)
    program, _ = opencl_device.build_opencl_c(state, gemm_opencl.__package__, gemm_opencl.SOURCE, "fp32", tiles)
    programs.append(("opencl-c", program, lambda shape: gemm_opencl.launch(shape, "fp32", kind, lanes)))
    rng = np.random.default_rng(0)
    for k in (int(x) for x in args.k.split(",")):
        a = rng.standard_normal((args.m, k), dtype=np.float32)
        b = rng.standard_normal((k, args.n), dtype=np.float32)
        reference = a.astype(np.float64) @ b
        flags = cl.mem_flags
        bufs = [cl.Buffer(state.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x) for x in (a, b)]
        out = cl.Buffer(state.context, flags.READ_WRITE, args.m * args.n * 4)
        shape = {"M": args.m, "N": args.n, "K": k}
        runs: dict[str, Callable[[], float]] = {}
        for name, prog, plan_of in programs:
            plan = plan_of(shape)
            kernel = cl.Kernel(prog, plan.entry)
            kernel.set_args(*bufs, out, *(opencl_device.scalar(x) for x in plan.args if x.buffer is None))
            local = tuple(plan.local) + (1,) * (len(plan.grid) - len(plan.local))

            def run(kernel: Any = kernel, plan: Any = plan, local: tuple[int, ...] = local) -> float:
                event = cl.enqueue_nd_range_kernel(state.queue, kernel, plan.global_size, local)
                event.wait()
                return (event.profile.end - event.profile.start) * 1e-9

            run()
            host = np.empty((args.m, args.n), np.float32)
            cl.enqueue_copy(state.queue, host, out).wait()
            err = float(np.abs(host - reference).max())
            if not err <= 1e-5 * k:
                print(f"{name}: max error {err:.1e} at K={k}: wrong result", file=sys.stderr)
                return 1
            runs[name] = run

        def numpy_call(a: np.ndarray = a, b: np.ndarray = b) -> float:
            start = time.perf_counter()
            np.matmul(a, b)
            return time.perf_counter() - start

        runs["numpy (host BLAS)"] = numpy_call
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                run()
                times[name].extend(run() for _ in range(3))
        flops = 2 * args.m * args.n * k
        gflops = {name: flops / statistics.median(t) / 1e9 for name, t in times.items()}
        print(f"K={k}:")
        for name, g in gflops.items():
            share = f"{100 * g / 1e3 / peak:5.1f} % of peak" if peak else "no peak"
            print(f"  {g:7.1f} GFLOPS  {share}  {g / gflops['opencl-c']:5.2f}x OpenCL C  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
