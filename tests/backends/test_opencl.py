"""OpenCL backend: devices, parity of the OpenCL C kernels on odd shapes, skip reasons, build errors,
device selection, crashes as records, host-CPU overhead, and the llvmlite SPIR-V lowering.

The device tests run on whatever OpenCL device is present (PoCL on CI: ci/apt-packages.txt) and
skip, saying why, where pyopencl or a device is missing; the SPIR-V tests need only llvmlite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import needs
import numpy as np
import pytest
from conftest import TESTS, hwbench_cmd

from hwbench.core.backend import DeviceInfo, Implementation
from hwbench.core.registry import get_backend, get_kernel
from hwbench.run.case import CaseRequest, CaseRunner

FAST = {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3, "max_samples": 5}


def _opencl_ready() -> str:
    """Why the OpenCL tests cannot run here ('' when they can)."""
    from hwbench.backends.opencl import OpenCLBackend

    available = OpenCLBackend().probe()
    return "" if available.ok else available.reason


needs_opencl = pytest.mark.skipif(bool(_opencl_ready()), reason=f"OpenCL unavailable: {_opencl_ready()}")


@pytest.fixture(scope="module")
def backend():
    return get_backend("opencl")


@pytest.fixture(scope="module")
def device(backend) -> DeviceInfo:
    return backend.devices()[0]


def _run(kernel: str, impl: str, dtype: str, shape: dict[str, int]) -> dict:
    full = get_kernel(kernel).complete(dict(shape))
    return CaseRunner().run(CaseRequest(kernel, impl, "opencl", 0, dtype, full, 0, FAST))


@needs_opencl
def test_devices_are_described(device: DeviceInfo) -> None:
    extra = device.extra
    assert device.name and device.vendor and device.driver and device.compute_units >= 1
    assert device.memory_bytes > 0 and extra["local_mem_bytes"] > 0 and extra["max_clock_mhz"] > 0
    assert extra["platform"] and extra["opencl_version"].startswith("OpenCL")
    assert isinstance(extra["extensions"], list) and isinstance(extra["il_versions"], list)
    assert extra["host_cpu"] == (device.kind == "cpu")


@needs_opencl
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (37, 53, 29), (13, 100, 7), (130, 33, 301)])
def test_gemm_parity_on_odd_shapes(shape: tuple[int, int, int], dtype: str) -> None:
    record = _run("gemm", "opencl", dtype, dict(zip("MNK", shape, strict=False)))
    assert record["status"] == "ok", record["reason"]
    assert record["parity"]["passed"] and record["timing"]["timer"] == "opencl-profiling-events"
    assert record["config"]["TM"] >= 1 and record["config"]["VW"] >= 1  # the tile chosen is recorded


@needs_opencl
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize(
    "shape",
    [
        dict(batch=1, heads=1, seq_q=1, seq_k=1, head_dim=40, causal=0),
        dict(batch=1, heads=2, seq_q=1, seq_k=1, head_dim=24, causal=1),
        dict(batch=2, heads=3, seq_q=19, seq_k=70, head_dim=40, causal=1),
        dict(batch=1, heads=2, seq_q=45, seq_k=17, head_dim=72, causal=0),
    ],
)
def test_attention_parity_on_odd_shapes(shape: dict[str, int], dtype: str) -> None:
    record = _run("attention", "opencl", dtype, shape)
    assert record["status"] == "ok", record["reason"]
    assert record["parity"]["passed"] and record["config"]["HD"] == shape["head_dim"]


@needs_opencl
@pytest.mark.parametrize(
    "kernel,shape",
    [
        ("gemm", {"M": 37, "N": 53, "K": 29}),
        ("attention", dict(batch=1, heads=2, seq_q=19, seq_k=33, head_dim=24, causal=1)),
    ],
)
def test_fp16_kernels_compute_right_where_they_build(backend, device: DeviceInfo, kernel: str, shape) -> None:
    """The fp16 variants (half storage, fp32 math) are checked even on a device that lacks cl_khr_fp16."""
    spec = get_kernel(kernel)
    full = spec.complete(dict(shape))
    inputs = spec.make_inputs(full, "fp16", 0)
    try:
        prepared = backend.prepare(_impl(backend, kernel, "opencl"), spec, inputs, full, "fp16", device)
    except Exception as exc:
        pytest.skip(f"this OpenCL compiler rejects half storage: {exc}")
    prepared.run()
    out = prepared.result().astype(np.float64)
    tol = spec.tolerance("fp16", full)
    assert np.allclose(out, spec.reference(inputs, full), atol=tol.atol, rtol=tol.rtol)


def _fake_device(extensions: list[str], il_versions: list[str]) -> DeviceInfo:
    return DeviceInfo(
        "opencl",
        0,
        "fake",
        "none",
        "cpu",
        extra={"extensions": extensions, "il_versions": il_versions, "native_vector_width": {"fp32": 8, "fp64": 4}},
    )


def _impl(backend, kernel: str, name: str) -> Implementation:
    return next(i for i in backend.implementations(kernel) if i.name == name)


def test_skip_reasons_name_the_missing_extension_or_il() -> None:
    from hwbench.backends.opencl import OpenCLBackend

    backend = OpenCLBackend()
    bare = _fake_device([], [])
    assert "lacks cl_khr_fp64" in backend.supports(_impl(backend, "gemm", "opencl"), "fp64", bare).reason
    assert "lacks cl_khr_fp16" in backend.supports(_impl(backend, "attention", "opencl"), "fp16", bare).reason
    assert backend.supports(_impl(backend, "gemm", "opencl"), "fp32", bare).ok
    assert "no bf16 variant" in backend.supports(_impl(backend, "gemm", "opencl"), "bf16", bare).reason
    needs.module("llvmlite")
    reason = backend.supports(_impl(backend, "gemm", "llvm"), "fp32", bare).reason
    assert reason.startswith("device takes no IL (CL_DEVICE_IL_VERSION empty)") and "module builds" in reason
    old = backend.supports(_impl(backend, "gemm", "llvm"), "fp32", _fake_device([], ["SPIR-V_1.2"]))
    assert not old.ok and "not SPIR-V 1.4" in old.reason
    assert backend.supports(_impl(backend, "attention", "llvm"), "fp32", _fake_device([], ["SPIR-V_1.5"])).ok


def test_clblast_skip_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from hwbench.backends import opencl
    from hwbench.core import backend as backend_module

    monkeypatch.setattr(backend_module, "present", lambda module: False)
    backend = opencl.OpenCLBackend()
    reason = backend.supports(_impl(backend, "gemm", "clblast"), "fp32", _fake_device([], [])).reason
    assert "pyclblast is not installed" in reason and "libclblast-dev" in reason


@needs_opencl
def test_pocl_takes_no_il_so_llvm_cases_are_skipped(device: DeviceInfo) -> None:
    if device.extra["il_versions"]:
        pytest.skip(f"{device.name} takes IL ({' '.join(device.extra['il_versions'])})")
    needs.module("llvmlite")
    record = _run("gemm", "llvm", "fp32", {"M": 8, "N": 8, "K": 8})
    assert record["status"] == "skipped"
    assert record["reason"].startswith("device takes no IL (CL_DEVICE_IL_VERSION empty)")


@needs_opencl
def test_a_build_failure_is_a_compile_error_with_the_logs_error_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    import pyopencl.characterize

    from hwbench.kernels.gemm.gpu import opencl as gemm_opencl

    saved = set(Path(tempfile.gettempdir()).glob("tmp*.cl"))
    # pyopencl's own build cache (used where the driver keeps none) saves a failed program's source
    monkeypatch.setattr(pyopencl.characterize, "has_src_build_cache", lambda device: False)
    monkeypatch.setattr(gemm_opencl, "tiles", lambda kind, lanes: {"VW": 5, "TM": 2, "TNV": 1, "WG0": 1})
    record = _run("gemm", "opencl", "fp32", {"M": 8, "N": 8, "K": 8})
    assert record["status"] == "compile_error"
    assert "OpenCLBuildError" in record["reason"] and "error" in record["reason"].split("-DWG0=1:", 1)[1]
    assert "source saved as" not in record["reason"]
    assert set(Path(tempfile.gettempdir()).glob("tmp*.cl")) <= saved  # pyopencl's copy of the source is gone


@needs_opencl
def test_device_selection_host_overhead_and_schema(tmp_path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        hwbench_cmd(
            "run",
            "--backend",
            "cpu,opencl",
            "--kernel",
            "gemm",
            "--impl",
            "numpy,opencl",
            "--shape",
            "gemm:M=70,N=45,K=33",
            "--dtype",
            "fp32",
            "--device",
            "opencl:0",
            "--budget",
            "0.02",
            "--out",
            str(out),
        ),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    ocl = [r for r in doc["records"] if r["backend"] == "opencl"]
    assert [(r["impl"], r["device_index"], r["status"]) for r in ocl] == [("opencl", 0, "ok")]
    if doc["backends"][1]["devices"][0]["extra"]["host_cpu"]:
        assert ocl[0]["metrics"]["host_native_impl"] == "numpy"
        assert isinstance(ocl[0]["metrics"]["host_native_overhead"], float)
    check = subprocess.run(hwbench_cmd("validate", str(out)), capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@needs_opencl
def test_a_driver_crash_is_a_record_and_the_run_goes_on(tmp_path) -> None:
    env = dict(
        os.environ,
        HWBENCH_BACKENDS="opencl_faulty=fakes.backend:FaultyOpenCL",
        PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    )
    out = tmp_path / "r.json"
    proc = subprocess.run(
        hwbench_cmd(
            "run",
            "--backend",
            "opencl_faulty,opencl",
            "--device",  # one device each: Intel's OpenCL CPU runtime, where installed, is a second one
            "opencl_faulty:0",
            "--device",
            "opencl:0",
            "--kernel",
            "gemm",
            "--impl",
            "opencl",
            "--shape",
            "gemm:M=17,N=33,K=9",
            "--dtype",
            "fp32",
            "--budget",
            "0.02",
            "--timeout",
            "60",
            "--out",
            str(out),
        ),
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    records = json.loads(out.read_text())["records"]
    assert [(r["backend"], r["status"]) for r in records] == [("opencl_faulty", "crashed"), ("opencl", "ok")]
    assert "SIG" in records[0]["reason"] or "exited" in records[0]["reason"]


def test_first_error_line_picks_the_error() -> None:
    from hwbench.backends.opencl_device import first_error_line

    log = (
        "Build on <pyopencl.Device 'x'>:\n/tmp/pocl/tempfile_Ab.cl:3:1: warning: w\n"
        "/tmp/x/tempfile_Ab.cl:9:5: error: bad\n"
    )
    assert first_error_line(log) == "program.cl:9:5: error: bad"


# SPIR-V lowering of the llvmlite kernels (needs llvmlite only).


@pytest.fixture(scope="module")
def spirv_modules():
    needs.module("llvmlite")
    from hwbench.kernels.llvmir.simt import DeviceLimits
    from hwbench.kernels.llvmir.spirv import SPIRVTarget, build_spirv

    limits = DeviceLimits(kind="cpu", lanes=16)
    configs = {
        (k, d): get_kernel(k).source_module("llvmlite").simt_config(SPIRVTarget(limits), d)
        for k in ("gemm", "attention")
        for d in ("fp32", "fp64")
    }
    try:
        return {key: build_spirv(*key, limits, config) for key, config in configs.items()}
    except RuntimeError as exc:
        pytest.skip(f"no SPIR-V from this llvmlite: {exc}")


def test_spirv_modules_start_with_the_magic_number(spirv_modules) -> None:
    from hwbench.kernels.llvmir.spirv import SPIRV_MAGIC

    for (kernel, dtype), module in spirv_modules.items():
        assert int.from_bytes(module.binary[:4], "little") == SPIRV_MAGIC, (kernel, dtype)
        assert module.binary[6:8] == b"\x01\x00" and module.binary[5] >= 4  # version word: SPIR-V 1.4+
        assert module.entry == kernel and len(module.binary) % 4 == 0


def test_spirv_modules_validate(spirv_modules, tmp_path) -> None:
    validator = shutil.which("spirv-val")
    if validator is None:
        pytest.skip("spirv-val is not installed (Debian/Ubuntu: apt-get install spirv-tools)")
    for (kernel, dtype), module in spirv_modules.items():
        path = tmp_path / f"{kernel}-{dtype}.spv"
        path.write_bytes(module.binary)
        proc = subprocess.run([validator, str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{kernel} {dtype}: {proc.stdout}{proc.stderr}"


def test_spirv_kernels_are_work_groups_with_local_memory_and_barriers() -> None:
    needs.module("llvmlite")
    from hwbench.kernels.gemm import llvm as gemm_llvm
    from hwbench.kernels.llvmir.simt import DeviceLimits
    from hwbench.kernels.llvmir.spirv import SPIRVTarget

    target = SPIRVTarget(DeviceLimits(kind="gpu", local_mem_bytes=64 * 1024, max_work_group=256))
    text = str(gemm_llvm.build(target, "fp32"))
    assert "spir_kernel" in text and "ptr addrspace(1)" in text and "addrspace(3) global" in text
    assert "_Z7barrierj" in text and "_Z12get_local_idj" in text and "!reqd_work_group_size" in text
    cpu = SPIRVTarget(DeviceLimits(kind="cpu", lanes=8))
    assert "<8 x float>" in str(gemm_llvm.build(cpu, "fp32"))  # a CPU device's work-item is a SIMD program


def test_an_invalid_spirv_module_is_rebuilt_in_a_fresh_process(monkeypatch) -> None:
    needs.module("llvmlite")
    monkeypatch.setenv("HWBENCH_BINARY_CACHE", "0")  # each build here must lower, not load a kept module
    from hwbench.kernels.llvmir import spirv

    rebuilt = []
    real_child = spirv._build_in_child

    def child(*args):
        rebuilt.append(args)
        return real_child(*args)

    monkeypatch.setattr(spirv, "_build_in_child", child)
    monkeypatch.setattr(spirv, "spirv_problem", lambda binary: None if rebuilt else "Id 23 is defined more than once")
    from hwbench.kernels.llvmir.simt import DeviceLimits

    limits = DeviceLimits(kind="cpu", lanes=8)
    cfg = {"WGN": 1, "WGM": 1, "TM": 6, "TNV": 2, "VW": 8, "TK": 0}
    module = spirv.build_spirv("gemm", "fp32", limits, cfg)
    assert rebuilt == [("gemm", "fp32", limits.as_dict(), cfg)]
    assert int.from_bytes(module.binary[:4], "little") == spirv.SPIRV_MAGIC and module.entry == "gemm"
    monkeypatch.setattr(spirv, "_build_in_child", lambda *args: module)
    monkeypatch.setattr(spirv, "spirv_problem", lambda binary: "Id 23 is defined more than once")
    with pytest.raises(RuntimeError, match="invalid module for gemm fp32: Id 23"):
        spirv.build_spirv("gemm", "fp32", limits, cfg)


def _read_only_home(tmp_path, how: str) -> dict[str, str]:
    """A child's environment whose HOME cannot be written (even by root) and no cache variable set."""
    if how == "proc":
        home = "/proc/self"
    else:
        (tmp_path / "a-file").write_text("")
        home = str(tmp_path / "a-file" / "home")
    drop = ("XDG_CACHE_HOME", "POCL_CACHE_DIR", "PYOPENCL_CACHE_DIR", "OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "HOME": home, "HWBENCH_CACHE_DIR": str(tmp_path / "cache")}


@needs_opencl
@pytest.mark.parametrize("how", ["proc", "beneath-a-file"])
def test_a_read_only_home_keeps_the_pocl_device(tmp_path, how: str) -> None:
    env = _read_only_home(tmp_path, how)
    done = subprocess.run(
        hwbench_cmd("list", "--backend", "opencl", "--json"), env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    (listed,) = json.loads(done.stdout)["backends"]
    assert listed["available"], listed["reason"]
    platforms = {d["extra"]["platform"] for d in listed["devices"]}
    if os.path.isfile("/etc/OpenCL/vendors/pocl.icd"):
        assert "Portable Computing Language" in platforms, platforms
    chosen = tmp_path / "cache" / "xdg"
    assert listed["environment"]["caches"]["xdg"]["folder"] == str(chosen)
    assert f"XDG_CACHE_HOME={chosen}" in listed["reason"] and "is not writable" in listed["reason"]
    text = subprocess.run(hwbench_cmd("list", "--backend", "opencl"), env=env, capture_output=True, text=True)
    assert f"note: the cache folder of PoCL and pyopencl: {env['HOME']}/.cache" in text.stdout, text.stdout


@needs_opencl
def test_a_read_only_home_runs_opencl_c_on_every_device(tmp_path) -> None:
    """Every device builds and runs (Intel's builds go through pyopencl's caches, PoCL's through its own)."""
    out = tmp_path / "r.json"
    done = subprocess.run(
        hwbench_cmd(
            "run",
            "--backend",
            "opencl",
            "--kernel",
            "gemm",
            "--impl",
            "opencl",
            "--shape",
            "gemm:M=8,N=8,K=8",
            "--dtype",
            "fp32",
            "--budget",
            "0.01",
            "--out",
            str(out),
            "--quiet",
        ),
        env=_read_only_home(tmp_path, "proc"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(out.read_text())
    assert doc["records"] and all(r["status"] == "ok" for r in doc["records"]), [r["reason"] for r in doc["records"]]
    (backend,) = doc["backends"]
    assert len(doc["records"]) == len(backend["devices"])
    assert backend["environment"]["caches"]["xdg"]["folder"] == str(tmp_path / "cache" / "xdg")


@needs_opencl
def test_a_native_librarys_own_inaccuracy_fails_and_says_it_is_the_library(backend) -> None:
    """CLBlast's fp16 GEMM sums in fp16: at K = 4096 it leaves the tolerance; the reason names the library's doing."""
    runner = CaseRunner()
    fp16 = [d for d in runner.devices(backend) if backend.supports(_clblast(backend), "fp16", d).ok]
    if not fp16:
        pytest.skip("no OpenCL device here runs CLBlast's fp16 GEMM")
    shape = {"M": 64, "N": 64, "K": 4096}
    record = runner.run(CaseRequest("gemm", "clblast", "opencl", fp16[0].index, "fp16", shape, 0, FAST))
    assert record["status"] == "parity_failed", record["reason"]
    assert record["reason"].endswith(
        "CLBlast's HGEMM accumulates in fp16 (its kernels sum in the storage type), "
        "so its error grows like K * u(fp16): the library's answer, not the device's"
    )


def _clblast(backend) -> Implementation:
    return next(i for i in backend.implementations("gemm") if i.name == "clblast")


@needs_opencl
def test_device_names_say_their_platform(backend) -> None:
    """The same CPU under PoCL and under Intel's runtime are two devices, and their names say which."""
    from hwbench.backends.opencl import platform_label

    for found in backend.devices():
        assert found.name.endswith(f" ({platform_label(found.extra['platform'])})")
    assert platform_label("Portable Computing Language") == "PoCL"
    assert platform_label("Intel(R) OpenCL") == "Intel OpenCL"


def test_a_native_known_to_miss_the_tolerance_runs_that_dtype_only_when_asked() -> None:
    """CLBlast's HGEMM sums in fp16 (its accuracy note): a default run plans it as a skipped record
    that says why and how to run it; --dtype fp16 runs it."""
    from dataclasses import asdict

    from hwbench.core.backend import declared_natives
    from hwbench.core.registry import get_kernel
    from hwbench.run.runner import Plan, plan_cases

    clblast = next(i for i in declared_natives(get_kernel("gemm"), "opencl") if i.name == "clblast")
    assert clblast.on_request == ("fp16",)
    impls = [
        asdict(clblast),
        {"name": "opencl", "kind": "portable", "language": "opencl-c", "dtypes": ["fp32", "fp16"]},
    ]
    backends = [
        {
            "name": "opencl",
            "available": True,
            "devices": [{"index": 0, "name": "cl0"}],
            "implementations": {"gemm": impls},
        }
    ]
    shapes = {"gemm": [{"M": 8, "N": 8, "K": 8}]}
    cases, skipped = plan_cases(
        Plan(backends=["opencl"], kernels=["gemm"]), backends, {"gemm": ("fp32", "fp16")}, shapes
    )
    assert sorted((c.impl, c.dtype) for c in cases) == [("clblast", "fp32"), ("opencl", "fp16"), ("opencl", "fp32")]
    (left_out,) = skipped
    assert (left_out["impl"], left_out["dtype"], left_out["status"]) == ("clblast", "fp16", "skipped")
    assert "accumulates in fp16" in left_out["reason"] and "only when --dtype names it" in left_out["reason"]
    assert left_out["device"] == "cl0" and left_out["impl_kind"] == "native"
    asked = Plan(backends=["opencl"], kernels=["gemm"], dtypes=["fp16"])
    cases, skipped = plan_cases(asked, backends, {"gemm": ("fp32", "fp16")}, shapes)
    assert sorted(c.impl for c in cases) == ["clblast", "opencl"] and not skipped
    # Asked for alone, with no dtype: its fp16 is still a skipped record that says how to run it.
    alone = [{**backends[0], "implementations": {"gemm": impls[:1]}}]
    plan = Plan(backends=["opencl"], kernels=["gemm"], impls=["clblast"])
    cases, skipped = plan_cases(plan, alone, {"gemm": ("fp32", "fp16")}, shapes)
    assert [(c.impl, c.dtype) for c in cases] == [("clblast", "fp32")]
    assert [(r["impl"], r["dtype"], r["status"]) for r in skipped] == [("clblast", "fp16", "skipped")]


def test_the_native_baseline_is_not_one_known_to_miss_the_dtypes_tolerance() -> None:
    """CLBlast is the opencl GEMM baseline, but not for fp16, where it sums in fp16."""
    needs.module("pyopencl")
    from hwbench.run.case import CaseRequest, Pipeline

    pipeline = Pipeline()
    backend = get_backend("opencl")
    if not backend.probe().ok:
        pytest.skip(f"no OpenCL: {backend.probe().reason}")
    found = [d for d in backend.devices() if "cl_khr_fp16" in d.extra.get("extensions", [])]
    if not found:
        pytest.skip("no OpenCL device here has cl_khr_fp16")
    shape = {"M": 8, "N": 8, "K": 8}
    fp16 = pipeline.resolve(CaseRequest("gemm", "opencl", "opencl", found[0].index, "fp16", shape))
    fp32 = pipeline.resolve(CaseRequest("gemm", "opencl", "opencl", found[0].index, "fp32", shape))
    assert pipeline.native_twin(fp16) is None
    twin = pipeline.native_twin(fp32)
    assert twin is not None and twin.impl.name == "clblast"
