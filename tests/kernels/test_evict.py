"""The per-case cache flush: every line of a case's own memory evicted (clflushopt), on the cpu
backend and on OpenCL CPU devices, with the whole-cache flush kept where that cannot be done."""

from __future__ import annotations

import ctypes
import functools
import mmap
import platform
import time

import needs
import numpy as np
import pytest

from hwbench.core.backend import Flush, Prepared
from hwbench.core.registry import get_backend
from hwbench.kernels.llvmir import evict
from hwbench.run.case import CaseRequest, CaseRunner, Pipeline

try:
    import llvmlite  # noqa: F401

    HAVE_LLVMLITE = True
except ImportError:
    HAVE_LLVMLITE = False
x86 = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64") or not HAVE_LLVMLITE,
    reason="the evictor is an llvmlite program of x86-64's clflush",
)
QUICK = {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3}


@x86
def test_the_evictor_flushes_with_the_cpus_own_instruction() -> None:
    evictor = evict.line_evictor()
    assert evictor is not None and evictor.instruction in ("clflushopt", "clflush")
    asm = evictor._compiled.assembly()
    assert evictor.instruction in asm and "mfence" in asm


@x86
def test_any_region_is_flushed_without_a_fault_and_its_data_kept() -> None:
    evictor = evict.line_evictor()
    assert evictor is not None
    data = np.arange(10_000, dtype=np.float64)
    raw = data.view(np.uint8)
    # Unaligned starts, sizes that are no multiple of a line, one byte.
    regions = [(raw[3:].ctypes.data, 1), (raw[7:].ctypes.data, 4093), (raw.ctypes.data, raw.nbytes)]
    evictor(regions)
    evictor([])
    assert np.array_equal(data, np.arange(10_000, dtype=np.float64))  # flushing writes back, never loses


@x86
def test_the_evictor_stops_at_a_regions_last_line() -> None:
    """Regions that end right before a page nothing may touch: one line too many would fault."""
    page = mmap.PAGESIZE
    area = mmap.mmap(-1, 2 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    libc = ctypes.CDLL(None, use_errno=True)
    guard = ctypes.c_void_p(base + page)
    assert libc.mprotect(guard, ctypes.c_size_t(page), 0) == 0  # PROT_NONE
    try:
        evictor = evict.line_evictor()
        assert evictor is not None
        end = base + page
        evictor([(end - 1, 1), (end - 4093, 4093), (end - 64, 64), (base, page)])
    finally:
        libc.mprotect(guard, ctypes.c_size_t(page), 3)  # PROT_READ | PROT_WRITE, so the map can go


def test_held_regions_finds_the_arrays_a_call_holds() -> None:
    a, b, out = np.ones(100), np.ones((10, 10), np.float32), np.empty(7)
    strided = np.ones((20, 20))[::2, ::3]

    def call() -> np.ndarray:
        return np.add(a, 1.0, out=out)

    found = evict.held_regions([{"x": a}, call, functools.partial(np.copyto, b, strided), np.empty(0)])
    assert (a.ctypes.data, a.nbytes) in found and (out.ctypes.data, out.nbytes) in found
    assert (b.ctypes.data, b.nbytes) in found
    low, size = evict.region_of(strided)
    assert low == strided.ctypes.data and size == 18 * 20 * 8 + 18 * 8 + 8  # first to last element
    assert len(found) == 4  # a found twice is one region; the empty array has none


def test_held_regions_takes_a_cpu_tensors_storage() -> None:
    torch = needs.module("torch")
    t = torch.ones(64, 8)
    view = t[:, 2]
    assert evict.region_of(view) == (t.untyped_storage().data_ptr(), 64 * 8 * 4)


@x86
def test_cpu_cases_flush_their_inputs_and_output_only() -> None:
    """A, B and C, for the library and for hwbench's kernel alike: neither one's own scratch (the
    llvm kernel's packing workspaces, OpenBLAS's buffers) is flushed."""
    pipeline = Pipeline()
    for impl in ("numpy", "llvm"):
        case = pipeline.resolve(CaseRequest("gemm", impl, "cpu", 0, "fp32", {"M": 64, "N": 48, "K": 40}))
        prepared = pipeline.prepare(case)
        prepared.run()
        flush = case.backend.case_flush(case.device, prepared)
        assert isinstance(flush, Flush) and flush.method.startswith(evict.line_evictor().instruction)
        assert "inputs and output (3 regions" in flush.method
        assert sum(size for _, size in prepared.memory()) == (64 * 40 + 40 * 48 + 64 * 48) * 4
        flush()


def test_a_case_that_says_nothing_of_its_memory_gets_the_whole_cache_flush() -> None:
    class Foreign(Prepared):
        def run(self) -> None:
            pass

        def result(self) -> np.ndarray:
            return np.zeros(1)

    cpu = get_backend("cpu")
    flush = cpu.case_flush(cpu.devices()[0], Foreign())
    assert flush is not None and flush.method.startswith("reads and writes")
    assert "twice the last-level cache" in flush.method


def test_a_record_says_how_its_caches_were_flushed() -> None:
    record = CaseRunner().run(CaseRequest("gemm", "numpy", "cpu", 0, "fp32", {"M": 33, "N": 17, "K": 9}, timing=QUICK))
    assert record["status"] == "ok" and record["timing"]["flushed"] is True
    evictor = evict.line_evictor() if HAVE_LLVMLITE else None
    expected = evictor.instruction if evictor is not None else "reads and writes"
    assert record["timing"]["flush"].startswith(expected) and "MiB" in record["timing"]["flush"]
    unflushed = dict(QUICK, flush=False)
    record = CaseRunner().run(
        CaseRequest("gemm", "numpy", "cpu", 0, "fp32", {"M": 33, "N": 17, "K": 9}, timing=unflushed)
    )
    assert record["timing"]["flushed"] is False and record["timing"]["flush"] is None


@x86
def test_the_case_flush_costs_what_the_case_is_large_not_what_the_cache_is() -> None:
    pipeline = Pipeline()
    case = pipeline.resolve(CaseRequest("gemm", "numpy", "cpu", 0, "fp32", {"M": 64, "N": 64, "K": 64}))
    prepared = pipeline.prepare(case)
    prepared.run()
    own = case.backend.case_flush(case.device, prepared)
    whole = case.backend.flush(case.device)
    assert own is not None

    def cost(fn) -> float:
        fn()
        start = time.perf_counter()
        for _ in range(5):
            fn()
        return time.perf_counter() - start

    if case.device.extra.get("cache_bytes", 0) < 8 * 2**20:
        pytest.skip("the last-level cache is too small for the whole-cache flush to cost much")
    assert cost(own) < cost(whole) / 4


@x86
def test_opencl_cpu_device_cases_flush_their_mapped_buffers() -> None:
    needs.module("pyopencl")
    from hwbench.backends.opencl_device import Enqueued, maps_own_memory

    opencl = get_backend("opencl")
    if not opencl.probe().ok:
        pytest.skip(f"no OpenCL: {opencl.probe().reason}")
    devices = [d for d in opencl.devices() if d.kind == "cpu"]
    if not devices:
        pytest.skip("no OpenCL CPU device here")
    pipeline = Pipeline()
    for impl in ("opencl", "clblast"):
        case = pipeline.resolve(CaseRequest("stream", impl, "opencl", devices[0].index, "fp32", {"op": 3, "n": 5000}))
        prepared = pipeline.prepare(case)
        assert isinstance(prepared, Enqueued)
        prepared.run()
        before = prepared.result()
        assert sorted(b.size for b in prepared.buffers()) == [20000, 20000, 20000]  # a, b and c
        assert maps_own_memory(opencl._state(case.device), prepared.buffers())  # a CPU device's map is its memory
        flush = opencl.case_flush(case.device, prepared)
        assert flush is not None and "each buffer mapped" in flush.method
        flush()
        prepared.run()
        assert np.array_equal(prepared.result(), before)
