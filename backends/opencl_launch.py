"""Bind one case to an OpenCL device: build or fetch the program, move inputs, size the grid.

Used by :mod:`hwbench.backends.opencl`; each function returns a prepared case whose
``run`` enqueues the work and waits, leaving its events for the profiling-event timer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from hwbench.backends.opencl import (
    OpenCLBuildError,
    _DeviceState,
    _Launch,
    _source,
    attention_tiles,
    first_error_line,
    gemm_tiles,
    scale_log2e,
)
from hwbench.core.backend import DeviceInfo, Prepared
from hwbench.core.kernel import Shape

_NP = {"fp32": np.float32, "fp64": np.float64, "fp16": np.float16}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def build_opencl_c(state: _DeviceState, kernel: str, dtype: str, options: Mapping[str, int]) -> tuple[Any, float, bool]:
    """The OpenCL C program of ``kernel`` for ``dtype`` and tile ``options`` (OpenCLBuildError on rejection)."""
    import pyopencl as cl

    flags = [f"-DDTYPE_{dtype.upper()}"] + [f"-D{k}={v}" for k, v in sorted(options.items())]

    def build() -> Any:
        try:
            return cl.Program(state.context, _source(kernel)).build(options=flags)
        except cl.Error as exc:
            log = str(exc)
            raise OpenCLBuildError(f"{kernel} {dtype} {' '.join(flags)}: {first_error_line(log)}") from None

    return state.program(("opencl-c", kernel, dtype, tuple(flags)), build)


def opencl_c(
    state: _DeviceState, kernel: str, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str, device: DeviceInfo
) -> Prepared:
    """The OpenCL C GEMM or attention, tiles chosen for ``device``."""
    if kernel == "gemm":
        return _gemm_c(state, inputs, shape, dtype, device)
    return _attention_c(state, inputs, shape, dtype, device)


def _gemm_c(
    state: _DeviceState, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str, device: DeviceInfo
) -> Prepared:
    import pyopencl as cl

    tiles = gemm_tiles(device, dtype)
    program, compile_s, _ = build_opencl_c(state, "gemm", dtype, tiles)
    m, n, k = shape["M"], shape["N"], shape["K"]
    a, b = state.buffer(inputs["A"]), state.buffer(inputs["B"])
    out = state.output(m * n * np.dtype(_NP[dtype]).itemsize)
    gemm = cl.Kernel(program, "gemm")
    gemm.set_args(a, b, out, np.int32(m), np.int32(n), np.int32(k))
    wg = tiles["WG0"]
    grid = (_ceil(_ceil(m, tiles["TM"]), wg) * wg, _ceil(n, tiles["TNV"] * tiles["VW"]))

    def enqueue() -> tuple[Any, Any]:
        import pyopencl as cl

        if k == 0:  # nothing to accumulate: C is zeros
            ev = cl.enqueue_fill_buffer(state.queue, out, _NP[dtype](0), 0, out.size)
        else:
            ev = cl.enqueue_nd_range_kernel(state.queue, gemm, grid, (wg, 1))
        return ev, ev

    config = {
        **tiles,
        "tile": f"{tiles['TM']}x{tiles['TNV'] * tiles['VW']}",
        "global_size": list(grid),
        "tuned_for": "cpu (measured)" if device.kind == "cpu" else "gpu (heuristic)",
    }
    return _Launch(state, enqueue, out, (m, n), _NP[dtype], config, compile_s, keepalive=(a, b, gemm))


def _attention_c(
    state: _DeviceState, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str, device: DeviceInfo
) -> Prepared:
    bsz, heads, sq, sk, d = (shape[k] for k in ("batch", "heads", "seq_q", "seq_k", "head_dim"))
    import pyopencl as cl

    tiles = attention_tiles(device, dtype, d)
    program, compile_s, _ = build_opencl_c(state, "attention", dtype, tiles)
    q, k, v = (state.buffer(inputs[name]) for name in ("q", "k", "v"))
    out = state.output(bsz * heads * sq * d * np.dtype(_NP[dtype]).itemsize)
    attention = cl.Kernel(program, "attention")
    acc = np.float64 if dtype == "fp64" else np.float32
    attention.set_args(q, k, v, out, np.int32(sq), np.int32(sk), np.int32(shape["causal"]), acc(scale_log2e(d)))
    wg, bq = tiles["WG0"], tiles["QV"] * tiles["VW"]
    grid = (_ceil(_ceil(sq, bq), wg) * wg, bsz * heads)

    def enqueue() -> tuple[Any, Any]:
        import pyopencl as cl

        ev = cl.enqueue_nd_range_kernel(state.queue, attention, grid, (wg, 1))
        return ev, ev

    config = {
        **tiles,
        "BQ": bq,
        "global_size": list(grid),
        "tuned_for": "cpu (measured)" if device.kind == "cpu" else "gpu (heuristic)",
    }
    return _Launch(
        state, enqueue, out, (bsz, heads, sq, d), _NP[dtype], config, compile_s, keepalive=(q, k, v, attention)
    )


def clblast(state: _DeviceState, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str) -> Prepared:
    """CLBlast's xGEMM; timed from a marker before it to its last kernel (it may run several)."""
    import pyclblast
    import pyopencl as cl
    import pyopencl.array  # noqa: F401  (cl.array)

    m, n, k = shape["M"], shape["N"], shape["K"]
    a, b = state.buffer(inputs["A"]), state.buffer(inputs["B"])
    out = state.output(m * n * np.dtype(_NP[dtype]).itemsize)
    views = [
        cl.array.Array(state.queue, s, _NP[dtype], data=buf) for s, buf in (((m, k), a), ((k, n), b), ((m, n), out))
    ]

    def enqueue() -> tuple[Any, Any]:
        first = cl.enqueue_marker(state.queue)
        last = pyclblast.gemm(state.queue, m, n, k, *views, a_ld=k, b_ld=n, c_ld=n)
        return first, last

    from hwbench.core.host import package_version

    return _Launch(
        state,
        enqueue,
        out,
        (m, n),
        _NP[dtype],
        {"library": f"CLBlast (pyclblast {package_version('pyclblast')})", "timed": "marker to last event"},
        0.0,
        keepalive=(a, b, views),
    )


def spirv(
    state: _DeviceState, kernel: str, inputs: Mapping[str, np.ndarray], shape: Shape, dtype: str, module: Any
) -> Prepared:
    """The llvmlite kernel as SPIR-V: one single-work-item work-group per program, global scratch per program."""
    import pyopencl as cl

    def build() -> Any:
        try:
            return cl.Program(state.context, module.binary).build()
        except cl.Error as exc:
            raise OpenCLBuildError(f"SPIR-V {kernel} {dtype}: {first_error_line(str(exc))}") from None

    program, compile_s, _ = state.program(("spirv", kernel, dtype, module.target), build)
    entry = cl.Kernel(program, module.entry)
    i64 = np.int64
    if kernel == "gemm":
        from hwbench.kernels.gemm.llvm import tile_sizes

        m, n, k = shape["M"], shape["N"], shape["K"]
        sizes = tile_sizes(dtype, module_lanes(module, dtype))
        mr, nr = sizes["MR"], sizes["NR"]
        blk = {
            "mc": min(_ceil(m, mr) * mr, 8 * mr),
            "nc": min(_ceil(n, nr) * nr, 256 // nr * nr),
            "kc": min(max(k, 1), 256),
        }
        grid = (_ceil(n, blk["nc"]), _ceil(m, blk["mc"]))
        bufs = [state.buffer(inputs["A"]), state.buffer(inputs["B"])]
        out_shape: tuple[int, ...] = (m, n)
        scalars = [i64(x) for x in (m, n, k, k, n, n, blk["mc"], blk["nc"], blk["kc"])]
        config: dict[str, Any] = dict(blk)
    else:
        bsz, heads, sq, sk, d = (shape[x] for x in ("batch", "heads", "seq_q", "seq_k", "head_dim"))
        from hwbench.kernels.attention.llvm import D_MAX, QV

        if d > D_MAX:
            raise ValueError(f"the llvmlite attention takes head_dim <= {D_MAX}, not {d}")
        grid = (_ceil(sq, QV * module_lanes(module, dtype)), bsz * heads)
        bufs = [state.buffer(inputs[x]) for x in ("q", "k", "v")]
        out_shape = (bsz, heads, sq, d)
        scale = (np.float64 if dtype == "fp64" else np.float32)(1.0 / math.sqrt(d))
        scalars = [i64(sq), i64(sk), i64(d), i64(shape["causal"]), scale]
        config = {}
    out = state.output(int(np.prod(out_shape)) * np.dtype(_NP[dtype]).itemsize)
    stride = module.workspace_bytes
    workspace = state.output(stride * grid[0] * grid[1])
    entry.set_args(workspace, i64(stride), *bufs, out, *scalars)

    def enqueue() -> tuple[Any, Any]:
        ev = cl.enqueue_nd_range_kernel(state.queue, entry, grid, (1, 1))
        return ev, ev

    config.update(target=module.target, spirv_bytes=len(module.binary), workspace_bytes=stride, grid=list(grid))
    return _Launch(
        state,
        enqueue,
        out,
        out_shape,
        _NP[dtype],
        config,
        compile_s + module.compile_s,
        keepalive=(bufs, workspace, entry),
    )


def module_lanes(module: Any, dtype: str) -> int:
    """Vector lanes the SPIR-V module uses for ``dtype`` (its target is ``spirv64-v<fp32 lanes>``)."""
    lanes = int(module.target.rsplit("-v", 1)[1])
    return max(1, lanes * 4 // np.dtype(_NP[dtype]).itemsize)
