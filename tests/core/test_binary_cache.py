"""Compiled code kept between runs: the store itself, the host JIT's machine code, validated
SPIR-V and OpenCL program binaries, each taken back only when it is exactly what was kept."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import needs
import numpy as np
import pytest

from hwbench.core import binary_cache
from hwbench.core.binary_cache import binary_key


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HWBENCH_BINARY_CACHE", raising=False)
    return tmp_path / "cache"


def test_a_kept_binary_comes_back_as_it_was(cache_dir: Path) -> None:
    key = binary_key("x", b"\x00\x01", 3)
    assert binary_cache.load("cpu", key) is None
    assert binary_cache.store("cpu", key, b"machine code")
    assert binary_cache.load("cpu", key) == b"machine code"
    assert [p.name for p in (cache_dir / "binaries" / "cpu").iterdir()] == [key]  # no temporary left


def test_keys_tell_their_parts_apart() -> None:
    assert binary_key("ab", "c") != binary_key("a", "bc")
    assert binary_key(b"1") == binary_key("1") and binary_key(1) == binary_key("1")


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "empty"])
def test_a_damaged_or_foreign_file_is_a_miss(cache_dir: Path, damage: str) -> None:
    key = binary_key("y")
    binary_cache.store("spirv", key, b"0123456789" * 10)
    path = cache_dir / "binaries" / "spirv" / key
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0xFF
    elif damage == "truncate":
        data = data[:-1]
    elif damage == "foreign":
        data = bytearray(b"not a hwbench binary at all, but long enough to pass a length check")
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert binary_cache.load("spirv", key) is None


def test_the_cache_can_be_turned_off(cache_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv("HWBENCH_BINARY_CACHE", "0")
    assert not binary_cache.store("cpu", "k", b"x")
    assert binary_cache.load("cpu", "k") is None
    assert not (cache_dir / "binaries").exists()


def test_a_cache_folder_that_cannot_be_made_stores_nothing(cache_dir: Path) -> None:
    (cache_dir / "binaries").mkdir(parents=True)
    (cache_dir / "binaries" / "cpu").write_text("a file where the folder should be")
    assert not binary_cache.store("cpu", "k", b"x")
    assert binary_cache.load("cpu", "k") is None
    assert sorted(p.name for p in (cache_dir / "binaries").iterdir()) == ["cpu"]


def test_a_folder_others_may_write_is_not_used(cache_dir: Path) -> None:
    """The cache holds code that is run: a folder another user could plant files in is left alone."""
    assert binary_cache.store("cpu", "k", b"x")
    folder = cache_dir / "binaries" / "cpu"
    assert folder.stat().st_mode & 0o777 == 0o700  # made for this user alone
    folder.chmod(0o777)
    try:
        assert binary_cache.load("cpu", "k") is None
        assert not binary_cache.store("cpu", "k2", b"y")
    finally:
        folder.chmod(0o700)
    assert binary_cache.load("cpu", "k") == b"x"


JIT_CHILD = """
import ctypes, sys
from llvmlite import ir
from hwbench.kernels.llvmir.jit import compile_module
m = ir.Module(name="twice")
m.triple = ""
f = ir.Function(m, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]), name="twice")
b = ir.IRBuilder(f.append_basic_block())
b.ret(b.fmul(f.args[0], ir.Constant(ir.DoubleType(), 2.0)))
c = compile_module(m)
fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(c.function_address("twice"))
print(c.cached, fn(21.0), "mulsd" in c.assembly() or "addsd" in c.assembly())
"""


def test_the_host_jit_takes_its_machine_code_from_the_cache_in_the_next_process(cache_dir: Path) -> None:
    needs.module("llvmlite")
    env = dict(os.environ)
    first = subprocess.run([sys.executable, "-c", JIT_CHILD], env=env, capture_output=True, text=True, timeout=120)
    second = subprocess.run([sys.executable, "-c", JIT_CHILD], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.split() == ["False", "42.0", "True"]
    assert second.stdout.split() == ["True", "42.0", "True"]  # loaded, runs, and still shows its code
    assert len(list((cache_dir / "binaries" / "cpu").iterdir())) == 1


def test_a_changed_module_is_compiled_anew(cache_dir: Path) -> None:
    needs.module("llvmlite")
    from llvmlite import ir

    from hwbench.kernels.llvmir.jit import compile_module

    def module(factor: float) -> ir.Module:
        m = ir.Module(name="scale")
        m.triple = ""
        f = ir.Function(m, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()]), name="scale")
        b = ir.IRBuilder(f.append_basic_block())
        b.ret(b.fmul(f.args[0], ir.Constant(ir.DoubleType(), factor)))
        return m

    for factor, cached in ((3.0, False), (3.0, True), (5.0, False)):
        c = compile_module(module(factor))
        fn = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double)(c.function_address("scale"))
        assert (c.cached, fn(2.0)) == (cached, 2.0 * factor)


def test_an_opencl_program_is_built_from_its_kept_binary_and_computes_the_same(cache_dir: Path, monkeypatch) -> None:
    needs.module("pyopencl")
    needs.module("llvmlite")
    import pyopencl as cl

    from hwbench.backends import opencl
    from hwbench.backends.opencl_device import DeviceState, build_spirv
    from hwbench.kernels.gemm.gpu import simt
    from hwbench.kernels.llvmir.simt import DeviceLimits
    from hwbench.kernels.llvmir.spirv import SPIRVTarget
    from hwbench.kernels.llvmir.spirv import build_spirv as lower

    found = [d for _, d in opencl._cl_devices() if opencl.takes_spirv(opencl._il_versions(d))]
    if not found:
        pytest.skip("no OpenCL device takes SPIR-V 1.4 here: pip install 'hwbench[intel-opencl]'")
    limits = DeviceLimits(kind="cpu", lanes=8)
    cfg = {"WGN": 2, "WGM": 2, "TM": 3, "TNV": 1, "VW": 8, "TK": 8}
    module = lower("gemm", "fp32", limits, cfg)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((37, 29), np.float32), rng.standard_normal((29, 45), np.float32)
    loaded, stored = [], []
    real_load, real_store = binary_cache.load, binary_cache.store
    monkeypatch.setattr(binary_cache, "load", lambda *a: loaded.append(real_load(*a)) or loaded[-1])
    monkeypatch.setattr(binary_cache, "store", lambda *a: stored.append(a[0]) or real_store(*a))
    results = []
    for _ in range(2):  # two device states: the second finds no program of the first
        state = DeviceState(found[0])
        program, _ = build_spirv(state, module, "gemm", "fp32")
        plan = simt.launch({"M": 37, "N": 45, "K": 29}, "fp32", SPIRVTarget(limits), cfg)
        flags = cl.mem_flags
        bufs = [cl.Buffer(state.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x) for x in (a, b)]
        out = cl.Buffer(state.context, flags.WRITE_ONLY, 37 * 45 * 4)
        kernel = cl.Kernel(program, "gemm")
        kernel.set_args(*bufs, out, np.int64(37), np.int64(45), np.int64(29))
        local = tuple(plan.local) + (1,) * (len(plan.grid) - len(plan.local))
        cl.enqueue_nd_range_kernel(state.queue, kernel, plan.global_size, local).wait()
        host = np.empty((37, 45), np.float32)
        cl.enqueue_copy(state.queue, host, out).wait()
        results.append(host)
        assert len(list((cache_dir / "binaries" / "opencl").iterdir())) == 1
    np.testing.assert_allclose(results[0], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    assert np.array_equal(results[0], results[1])
    # The first state built from the IL and kept the binary; the second built from that binary
    # (a rejected one would have been built from the IL and kept again).
    assert loaded[0] is None and isinstance(loaded[1], bytes) and stored == ["opencl"]
