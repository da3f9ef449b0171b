"""The llvmlite work-group (SIMT) kernels: run on an IL-capable OpenCL device, compiled for GPUs.

On the Intel OpenCL CPU runtime (``hwbench[intel-opencl]``) the SPIR-V GEMM and attention
run on odd shapes (no size a multiple of any tile) in the device's own configuration and in
configurations with work-groups of many work-items that stage tiles in local memory behind
barriers, against float64. Without such a device those cases skip, saying how to get one.
The GPU lowering is checked without a GPU: PTX through ``ptxas`` (registers, spills, shared
memory, launch bounds) and AMDGCN code objects (VGPRs, LDS, spills).
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import needs
import numpy as np
import pytest

needs.module("llvmlite")

from hwbench.core.launch import OUTPUT  # noqa: E402
from hwbench.kernels.attention import llvm as attention_llvm  # noqa: E402
from hwbench.kernels.attention import simt as attention_simt  # noqa: E402
from hwbench.kernels.gemm import llvm as gemm_llvm  # noqa: E402
from hwbench.kernels.gemm.gpu import simt as gemm_simt  # noqa: E402
from hwbench.kernels.llvmir.simt import DeviceLimits  # noqa: E402

NP = {"fp32": np.float32, "fp64": np.float64}
U = {"fp32": 2.0**-24, "fp64": 2.0**-53}


@pytest.fixture(scope="module")
def il_device() -> Any:
    """(context, queue, limits) of the first OpenCL device that takes SPIR-V 1.4."""
    needs.module("pyopencl")
    import pyopencl as cl

    from hwbench.backends import opencl

    found = [
        (platform, device)
        for platform, device in opencl._cl_devices()
        if opencl.takes_spirv(opencl._il_versions(device))
    ]
    if not found:
        pytest.skip("no OpenCL device takes SPIR-V 1.4 here: pip install 'hwbench[intel-opencl]'")
    device = found[0][1]
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    lanes = max(1, min(16, 1 << (int(device.native_vector_width_float).bit_length() - 1)))
    is_cpu = bool(device.type & cl.device_type.CPU)
    limits = DeviceLimits(
        kind="cpu" if is_cpu else "gpu",
        local_mem_bytes=int(device.local_mem_size),
        max_work_group=int(device.max_work_group_size),
        subgroup=1 if is_cpu else 32,
        lanes=lanes if is_cpu else 1,
    )
    return context, queue, limits


def _run(il_device: Any, source: Any, shape: dict[str, int], dtype: str, cfg: dict[str, int], inputs: dict) -> Any:
    import pyopencl as cl

    from hwbench.kernels.llvmir.spirv import SPIRVTarget, build_spirv, spirv_problem

    context, queue, limits = il_device
    target = SPIRVTarget(limits)
    binary = build_spirv(source.KERNEL, dtype, limits, cfg)  # as the backend builds it: validated, rebuilt if not
    assert spirv_problem(binary.binary) is None
    program = cl.Program(context, binary.binary).build()
    plan = source.launch(shape, dtype, target, config=cfg)
    flags = cl.mem_flags
    buffers = {name: cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=a) for name, a in inputs.items()}
    out = np.zeros(plan.output, NP[dtype])
    out_buf = cl.Buffer(context, flags.READ_WRITE, max(out.nbytes, 1))  # GEMM's chunks of K read it back
    args = []
    for arg in plan.args:
        if arg.buffer == OUTPUT:
            args.append(out_buf)
        elif arg.buffer:
            args.append(buffers[arg.buffer])
        else:
            args.append({"i64": np.int64, "i32": np.int32, "f32": np.float32, "f64": np.float64}[arg.ctype](arg.value))
    entry = cl.Kernel(program, plan.entry)
    entry.set_args(*args)
    local = tuple(plan.local) + (1,) * (len(plan.grid) - len(plan.local))
    if plan.programs:
        cl.enqueue_nd_range_kernel(queue, entry, plan.global_size, local).wait()
        cl.enqueue_copy(queue, out, out_buf).wait()
    return out


GEMM_SHAPES = [(1, 4097, 3), (257, 129, 65)]
#: Work-groups of many work-items, local-memory tiles, barriers; register tiles of several shapes;
#: the streamed kernel blocked into several register tiles and chunks of K (even chunks that are
#: no multiple of the vector width), reading A and B in place or from packed local panels.
GEMM_CONFIGS = {
    "device": None,  # the device's own configuration, fitted to the shape as the backend does
    "wg4x4-local": {"WGN": 4, "WGM": 4, "TM": 3, "TNV": 2, "VW": 2, "TK": 6},
    "wg16x16-local": {"WGN": 16, "WGM": 16, "TM": 4, "TNV": 4, "VW": 1, "TK": 16},
    "wg1x4-local-simd": {"WGN": 1, "WGM": 4, "TM": 4, "TNV": 2, "VW": 8, "TK": 16},
    "tiles-down": {"WGN": 1, "WGM": 1, "TM": 4, "TNV": 2, "VW": 8, "TK": 0, "MT": 3},
    "chunks-in-place": {"WGN": 1, "WGM": 1, "TM": 5, "TNV": 1, "VW": 4, "TK": 0, "MT": 2, "NT": 2, "KC": 7},
    "chunks-packed": {
        "WGN": 1,
        "WGM": 1,
        "TM": 3,
        "TNV": 2,
        "VW": 8,
        "TK": 0,
        "MT": 3,
        "NT": 2,
        "KC": 16,
        "PA": 1,
        "PB": 1,
    },
    "wg2x2-chunks-packed": {
        **{"WGN": 2, "WGM": 2, "TM": 3, "TNV": 1, "VW": 4, "TK": 0},
        **{"MT": 2, "NT": 3, "KC": 20, "PA": 1, "PB": 1},
    },
}


@pytest.mark.parametrize("cfg", GEMM_CONFIGS.values(), ids=GEMM_CONFIGS.keys())
@pytest.mark.parametrize("mnk", GEMM_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_simt_gemm_matches_float64(il_device: Any, mnk: tuple[int, int, int], dtype: str, cfg: dict | None) -> None:
    from hwbench.kernels.llvmir.spirv import SPIRVTarget

    m, n, k = mnk
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-1, 1, (m, k)).astype(NP[dtype])
    b = rng.uniform(-1, 1, (k, n)).astype(NP[dtype])
    shape = {"M": m, "N": n, "K": k}
    cfg = cfg or gemm_llvm.simt_config(SPIRVTarget(il_device[2]), dtype, shape)
    out = _run(il_device, gemm_llvm, shape, dtype, cfg, {"A": a, "B": b})
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2 * k * U[dtype] * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30
    assert np.all(np.abs(out - ref) <= bound), f"max error {np.abs(out - ref).max():.3g} with {cfg}"


ATTENTION_CONFIGS = [
    None,
    {"VW": 4, "QV": 1, "WG": 8, "BK": 8, "LOCAL": 1, "REG": 0},
    {"VW": 1, "QV": 1, "WG": 16, "BK": 16, "LOCAL": 1, "REG": 1},
    {"VW": 2, "QV": 2, "WG": 4, "BK": 5, "LOCAL": 0, "REG": 0},
]


def _attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: int) -> np.ndarray:
    s = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(s.shape[-2])[:, None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("cfg", ATTENTION_CONFIGS, ids=["device", "wg8-local", "wg16-local-reg", "wg4-qv2-global"])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_simt_attention_matches_float64(il_device: Any, dtype: str, causal: int, cfg: dict | None) -> None:
    from hwbench.kernels.llvmir.spirv import SPIRVTarget

    shape = {"batch": 1, "heads": 2, "seq_q": 77, "seq_k": 77, "head_dim": 40, "causal": causal}
    if dtype == "fp64":
        shape.update(seq_q=45, seq_k=93, head_dim=24)
    rng = np.random.default_rng(7 + causal)
    dims = (shape["batch"], shape["heads"])
    q = rng.uniform(-1, 1, (*dims, shape["seq_q"], shape["head_dim"])).astype(NP[dtype])
    k = rng.uniform(-1, 1, (*dims, shape["seq_k"], shape["head_dim"])).astype(NP[dtype])
    v = rng.uniform(-1, 1, (*dims, shape["seq_k"], shape["head_dim"])).astype(NP[dtype])
    target = SPIRVTarget(il_device[2])
    cfg = dict(cfg, HD=shape["head_dim"]) if cfg else attention_llvm.simt_config(target, dtype, shape)
    out = _run(il_device, attention_llvm, shape, dtype, cfg, {"q": q, "k": k, "v": v})
    err = np.abs(out - _attention_reference(q, k, v, causal)).max()
    assert err <= 64 * U[dtype] * math.sqrt(shape["head_dim"]), f"max error {err:.3g} with {cfg}"


def test_device_configurations_follow_the_limits() -> None:
    from hwbench.kernels.llvmir.spirv import SPIRVTarget

    cpu = DeviceLimits(kind="cpu", lanes=16, local_mem_bytes=256 * 1024, max_work_group=8192)
    tile = {"WGN": 1, "WGM": 1, "TM": 12, "TNV": 2, "VW": 16, "TK": 0}
    blocked = {"MT": 6, "NT": 4, "KC": 256, "PA": 1, "PB": 1}
    assert gemm_simt.choose_config(cpu, "fp32", 16) == {**tile, **blocked}
    # fp64's packed chunks are as many bytes as fp32's, so half the steps of K fit
    assert gemm_simt.choose_config(cpu, "fp64", 8) == {**tile, "VW": 8, **blocked, "KC": 128}
    # C in fp16 cannot carry partial sums between chunks: one register tile, all of K
    assert gemm_simt.choose_config(cpu, "fp16", 16) == {**tile, "MT": 1, "NT": 1, "KC": 0, "PA": 0, "PB": 0}
    for local in (64 * 1024, 16 * 1024):  # less local memory: shorter chunks, then none packed
        cfg = gemm_simt.choose_config(DeviceLimits(kind="cpu", lanes=16, local_mem_bytes=local), "fp32", 16)
        assert gemm_simt.shared_bytes(cfg, 4) <= local and cfg["KC"] >= 32
    assert cfg["PA"] == cfg["PB"] == 0
    fitted = gemm_simt.fit_config(gemm_simt.choose_config(cpu, "fp32", 16), {"M": 1, "N": 40, "K": 3})
    assert (fitted["MT"], fitted["NT"], gemm_simt.block_shape(fitted)) == (1, 2, (12, 64))
    with pytest.raises(ValueError, match=r"needs 209408 bytes of shared \(local\) memory; the device has 65536"):
        gemm_simt.build(
            SPIRVTarget(DeviceLimits(kind="cpu", lanes=16, local_mem_bytes=64 * 1024)), "fp32", {**tile, **blocked}
        )
    with pytest.raises(ValueError, match="KC = 0"):
        gemm_simt.build(SPIRVTarget(cpu), "fp16", {**tile, **blocked})
    with pytest.raises(ValueError, match="unknown keys"):
        gemm_simt.full_config({**tile, "MX": 2})
    with pytest.raises(ValueError, match="streamed kernel"):
        gemm_simt.full_config({**tile, "TK": 16, "MT": 2})
    gpu = DeviceLimits(kind="gpu", local_mem_bytes=48 * 1024, max_work_group=1024)
    cfg = gemm_simt.choose_config(gpu, "fp32", 1)
    assert (cfg["WGN"] * cfg["WGM"], gemm_simt.block_shape(cfg)) == (256, (128, 128))
    small = gemm_simt.choose_config(DeviceLimits(kind="gpu", local_mem_bytes=8 * 1024, max_work_group=128), "fp64", 1)
    assert small["WGN"] * small["WGM"] <= 128 and gemm_simt.shared_bytes(small, 8) <= 8 * 1024
    att = attention_simt.choose_config(gpu, "fp32", 1, 256)
    assert att["REG"] == 0 and attention_simt.shared_bytes(att, "fp32") <= gpu.local_mem_bytes


def _ptxas_stats(ptx: str, tmp_path: Path) -> str:
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas is not installed (CUDA toolkit)")
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    proc = subprocess.run([ptxas, "-arch=sm_90", "-v", str(path), "-o", str(tmp_path / "k.cubin")], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stderr.decode()


@pytest.mark.parametrize("source", [gemm_llvm, attention_llvm], ids=["gemm", "attention"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64", "fp16", "bf16"])
def test_nvptx_kernels_assemble_without_spills(source: Any, dtype: str, tmp_path: Path) -> None:
    from hwbench.kernels.llvmir.gpu import target_for

    target = target_for("sm_90")
    cfg = source.simt_config(target, dtype)
    binary = target.lower(source.build(target, dtype, cfg), source.KERNEL)
    assert ".maxntid" in binary.assembly and "bar.sync" in binary.assembly and ".shared" in binary.assembly
    stats = _ptxas_stats(binary.assembly, tmp_path)
    assert "0 bytes spill stores" in stats, stats
    if cfg.get("REG", 1):  # tiles in registers: no local memory at all (REG=0 keeps them in private arrays)
        assert "0 bytes stack frame" in stats, stats


@pytest.mark.parametrize("source", [gemm_llvm, attention_llvm], ids=["gemm", "attention"])
def test_amdgcn_kernels_have_no_spills(source: Any) -> None:
    from hwbench.compile.stats import amdgcn_stats
    from hwbench.kernels.llvmir.gpu import target_for

    target = target_for("gfx942")
    cfg = source.simt_config(target, "fp32")
    try:
        binary = target.lower(source.build(target, "fp32", cfg), source.KERNEL)
    except (FileNotFoundError, ImportError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no linker for AMDGCN code objects here: {exc}")
    stats = amdgcn_stats(binary.assembly)
    assert stats["spilled"] is False and stats["shared_bytes"] and stats["shared_bytes"] > 0, stats
    assert "s_barrier" in binary.assembly


@pytest.mark.parametrize("source", [gemm_llvm, attention_llvm], ids=["gemm", "attention"])
def test_a_target_of_ones_own_gets_both_kernels(source: Any, tmp_path: Path) -> None:
    """A target defined in the test folder (tests/simt_target_example.py) compiles both kernels."""
    from simt_target_example import SPIRV32Target

    from hwbench.kernels.llvmir.spirv import SPIRV_MAGIC, spirv_problem

    target = SPIRV32Target()
    cfg = source.simt_config(target, "fp32")
    module = source.build(target, "fp32", cfg)
    assert 'target triple = "spirv32-unknown-unknown"' in str(module) and "addrspace(3)" in str(module)
    binary = target.lower(module, source.KERNEL)
    assert int.from_bytes(binary.binary[:4], "little") == SPIRV_MAGIC
    if shutil.which("spirv-val"):
        assert spirv_problem(binary.binary) is None


def _il_index() -> int:
    needs.module("pyopencl")
    from hwbench.backends import opencl
    from hwbench.core.registry import get_backend

    for device in get_backend("opencl").devices():
        if opencl.takes_spirv(device.extra.get("il_versions", [])):
            return device.index
    pytest.skip("no OpenCL device takes SPIR-V 1.4 here: pip install 'hwbench[intel-opencl]'")


CASES = {
    "gemm": {"M": 67, "N": 45, "K": 130},
    "attention": {"batch": 1, "heads": 2, "seq_q": 77, "seq_k": 77, "head_dim": 40, "causal": 1},
}


@pytest.mark.parametrize("kernel", sorted(CASES))
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_the_opencl_backend_runs_the_simt_kernels(kernel: str, dtype: str) -> None:
    """Through the backend, as ``hwbench run`` does: the device's configuration is in the record."""
    from hwbench.core.registry import get_backend, get_kernel
    from hwbench.run.case import CaseRequest, CaseRunner

    index = _il_index()
    device = get_backend("opencl").devices()[index]
    if dtype == "fp16" and "cl_khr_fp16" not in device.extra["extensions"]:
        pytest.skip(f"{device.name} lacks cl_khr_fp16")
    shape = get_kernel(kernel).complete(dict(CASES[kernel]))
    budget = {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3, "max_samples": 5}
    record = CaseRunner().run(CaseRequest(kernel, "llvm", "opencl", index, dtype, shape, 0, budget))
    assert record["status"] == "ok" and record["parity"]["passed"], record.get("reason") or record["parity"]
    assert record["config"]["model"] == "simt" and record["config"]["target"].startswith("spirv64")


def test_the_cpu_backend_says_which_dtypes_its_llvm_kernels_compute() -> None:
    from hwbench.core.registry import get_backend

    backend = get_backend("cpu")
    impl = next(i for i in backend.implementations("gemm") if i.name == "llvm")
    reason = backend.supports(impl, "fp16", backend.devices()[0]).reason
    assert "compute fp32, fp64, int8, bf16, not fp16" in reason  # GEMM's dot-product kernels add int8, bf16
    attention = next(i for i in backend.implementations("attention") if i.name == "llvm")
    assert "compute fp32, fp64, not bf16" in backend.supports(attention, "bf16", backend.devices()[0]).reason
