"""The llvmlite SIMT GEMM's tuning space (``kernels/gemm/gpu/simt.py``: ``tuning_space``) and its tuning on
an OpenCL device that takes SPIR-V.

Every candidate, for CPU devices (the streamed form) and for NVPTX and AMDGCN targets (the FMA and
mma forms), is a configuration the kernel builds: it passes ``full_config`` (the mma form:
``check_config``), fits the device's local memory and work-group, and is built (the NVPTX ones
lowered to PTX) without running. On the Intel OpenCL CPU device, where present, a tuned entry is
what the next run uses; without such a device that test skips, saying how to get one.
"""

from __future__ import annotations

import os
from pathlib import Path

import needs
import pytest

needs.module("llvmlite")

from hwbench.core.dtypes import DTYPE_BYTES  # noqa: E402
from hwbench.core.registry import get_backend  # noqa: E402
from hwbench.kernels.gemm.gpu import simt, simt_mma  # noqa: E402
from hwbench.kernels.llvmir.gpu import target_for  # noqa: E402
from hwbench.kernels.llvmir.simt import DeviceLimits, SIMTTarget, compute_dtype  # noqa: E402
from hwbench.kernels.llvmir.spirv import SPIRVTarget  # noqa: E402
from hwbench.run.case import CaseRequest, CaseRunner  # noqa: E402
from hwbench.run.tune import tune_cases  # noqa: E402

SHAPES = ({"M": 1024, "N": 1024, "K": 1024}, {"M": 333, "N": 517, "K": 259}, {"M": 40, "N": 36, "K": 24})
#: CPU devices as the Intel runtime (16 lanes, 256 KiB) and PoCL on AVX2 / SSE (8 or 4 lanes) report them.
CPU_LIMITS = (
    DeviceLimits(kind="cpu", local_mem_bytes=256 * 1024, max_work_group=8192, subgroup=1, lanes=16),
    DeviceLimits(kind="cpu", local_mem_bytes=32 * 1024, max_work_group=4096, subgroup=1, lanes=8),
    DeviceLimits(kind="cpu", local_mem_bytes=2 * 1024 * 1024, max_work_group=4096, subgroup=1, lanes=4),
)
GPU_ARCHS = ("sm_75", "sm_80", "sm_90", "gfx90a", "gfx942", "gfx1100")


def _check(target: SIMTTarget, dtype: str, shape: dict[str, int]) -> list[dict[str, int]]:
    """The space, each candidate checked as the kernel checks it; the derived one first."""
    space = simt.tuning_space(target, dtype, shape)
    assert space[0] == simt.fit_config(simt.config_for(target, dtype), shape)
    assert 1 < len(space) <= 12 and len({tuple(sorted(c.items())) for c in space}) == len(space)
    for cfg in space:
        if cfg.get("MMA"):
            inst = target.mma(dtype)
            checked = simt_mma.check_config(cfg, inst)
            shared, local = simt_mma.shared_bytes(checked, inst), simt_mma.local_size(checked, inst)
        else:
            full = simt.full_config(cfg)
            shared, local = simt.shared_bytes(full, DTYPE_BYTES[compute_dtype(dtype)]), (full["WGN"], full["WGM"])
        assert shared <= target.limits.local_mem_bytes, cfg
        assert local[0] * local[1] <= target.limits.max_work_group, cfg
        assert simt.fits(target, dtype, cfg)
    return space


@pytest.mark.parametrize("limits", CPU_LIMITS, ids=lambda lim: f"{lim.lanes}lanes-{lim.local_mem_bytes >> 10}KiB")
def test_every_cpu_device_candidate_builds_and_fits_local_memory(limits: DeviceLimits) -> None:
    target = SPIRVTarget(limits)
    for dtype in ("fp32", "fp64", "fp16"):
        for shape in SHAPES:
            for cfg in _check(target, dtype, shape):
                simt.build(target, dtype, cfg)  # raises where the kernel would refuse it
    # A configuration whose packed chunks outgrow the local memory is left out, not tried.
    big = {**simt.config_for(target, "fp32"), "KC": 1 << 16}
    assert not simt.fits(target, "fp32", big) and big not in simt.tuning_space(target, "fp32", SHAPES[0])


@pytest.mark.parametrize("arch", GPU_ARCHS)
def test_every_gpu_candidate_builds_and_fits_shared_memory(arch: str) -> None:
    target = target_for(arch)
    small = target_for(arch, DeviceLimits(kind="gpu", local_mem_bytes=16 * 1024, max_work_group=256))
    for dtype in ("fp32", "fp64", "fp16", "bf16"):
        for tgt in (target, small):
            for cfg in _check(tgt, dtype, SHAPES[0]):
                simt.build(tgt, dtype, cfg)
    forms = {bool(c.get("MMA")) for c in simt.tuning_space(target, "bf16", SHAPES[0])}
    assert forms == ({True} if target.mma("bf16") is not None else {False})


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_nvptx_candidate_lowers_to_ptx(dtype: str) -> None:
    target = target_for("sm_80")
    for cfg in simt.tuning_space(target, dtype, SHAPES[0]):
        assert ".entry gemm" in target.lower(simt.build(target, dtype, cfg), "gemm").assembly, cfg


@pytest.fixture
def il_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> int:
    """The index of the first OpenCL device taking SPIR-V 1.4, hwbench's cache in ``tmp_path``."""
    needs.module("pyopencl")
    from hwbench.backends.opencl import takes_spirv

    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PYOPENCL_NO_CACHE", "1")
    get_backend.cache_clear()
    backend = get_backend("opencl")
    if not backend.probe().ok:
        pytest.skip(f"OpenCL unavailable: {backend.probe().reason}")
    found = [d.index for d in backend.devices() if takes_spirv(d.extra.get("il_versions", []))]
    if not found:
        pytest.skip("no OpenCL device takes SPIR-V 1.4 here: pip install 'hwbench[intel-opencl]'")
    yield found[0]
    get_backend.cache_clear()


def test_a_tuned_simt_gemm_entry_is_used_by_the_next_run(il_device: int) -> None:
    # fp16: register tiles without packed chunks, the modules the device's compiler builds fastest
    request = CaseRequest("gemm", "llvm", "opencl", il_device, "fp16", {"M": 96, "N": 80, "K": 72})
    (result,), _ = tune_cases([request], budget_s=5.0)
    assert result.status == "tuned", result.reason
    assert len(result.timed) >= 2 and not result.dropped, (result.tried, result.reason)
    assert result.entry is not None
    record = CaseRunner().run(request)
    assert record["status"] == "ok", record["reason"]
    assert record["config"]["tuning"]["source"] == "tuned"
    assert {k: record["config"][k] for k in result.entry.config} == result.entry.config
    os.environ["HWBENCH_TUNING"] = "0"
    try:
        derived = CaseRunner().run(request)
    finally:
        del os.environ["HWBENCH_TUNING"]
    assert derived["config"]["tuning"] == {"source": "derived"}
