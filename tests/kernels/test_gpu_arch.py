"""GPU architecture names and AMD code objects, without a GPU.

Device properties are faked exactly as torch reports them: on a CUDA build torch fills
``gcnArchName`` with the device's name (torch/csrc/cuda/Module.cpp: "HIP-only property; reuse
name attribute for CUDA builds"), on a HIP build it is the ROCm target with its features
(``gfx942:sramecc+:xnack-``). The AMDGCN code object's ELF header and metadata note say which
code object version it is; the linker search runs over fake folders.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import needs
import pytest

from hwbench.core.host import arch_of
from hwbench.core.registry import get_backend

GiB = 2**30

#: torch 2.11-2.13 on CUDA 13, an H200 (gcnArchName is the name on CUDA builds).
H200_ON_CUDA = SimpleNamespace(
    name="NVIDIA H200",
    gcnArchName="NVIDIA H200",
    major=9,
    minor=0,
    multi_processor_count=132,
    total_memory=140 * GiB,
    L2_cache_size=60 * 2**20,
    warp_size=32,
    shared_memory_per_block=48 * 1024,
)
#: torch on ROCm, an MI300X (major.minor 9.4 is no CUDA capability; L2 is one XCD's 4 MB).
MI300X_ON_HIP = SimpleNamespace(
    name="AMD Instinct MI300X",
    gcnArchName="gfx942:sramecc+:xnack-",
    major=9,
    minor=4,
    multi_processor_count=304,
    total_memory=192 * GiB,
    L2_cache_size=4 * 2**20,
    warp_size=64,
    shared_memory_per_block=64 * 1024,
)


def test_cuda_arch_comes_from_the_compute_capability_not_gcn_arch_name() -> None:
    assert arch_of(H200_ON_CUDA, hip=False) == "sm_90"


def test_hip_arch_is_gcn_arch_name_without_its_features() -> None:
    assert arch_of(MI300X_ON_HIP, hip=True) == "gfx942"


@pytest.mark.parametrize(("props", "hip", "kind"), [(H200_ON_CUDA, False, "ptx"), (MI300X_ON_HIP, True, "amdgcn")])
def test_the_arch_names_an_llvm_target(props: SimpleNamespace, hip: bool, kind: str) -> None:
    needs.module("llvmlite")
    from hwbench.kernels.llvmir.gpu import target_for

    target = target_for(arch_of(props, hip))
    assert target.kind == kind and target.arch == arch_of(props, hip)


@pytest.fixture
def fake_torch_gpu(monkeypatch: pytest.MonkeyPatch):
    """torch (the CPU build installed here) made to report one GPU of the given build."""
    torch = needs.module("torch")

    def install(props: SimpleNamespace, cuda: str | None, hip: str | None) -> None:
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)

    get_backend.cache_clear()
    yield install
    get_backend.cache_clear()


def test_cuda_backend_describes_an_h200_as_sm_90(fake_torch_gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch_gpu(H200_ON_CUDA, cuda="13.0", hip=None)
    backend = get_backend("cuda")
    monkeypatch.setattr(type(backend), "libraries", lambda self: {})  # cuBLAS's version needs a GPU
    assert backend.arch(0) == "sm_90"
    (device,) = backend.devices()
    assert (device.name, device.arch, device.runtime) == ("NVIDIA H200", "sm_90", "cuda 13.0")
    assert device.extra["compute_capability"] == "9.0"


def test_rocm_backend_describes_an_mi300x_as_gfx942_and_records_its_features(
    fake_torch_gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_torch_gpu(MI300X_ON_HIP, cuda=None, hip="7.0.0")
    backend = get_backend("rocm")
    monkeypatch.setattr(type(backend), "libraries", lambda self: {})
    (device,) = backend.devices()
    assert device.arch == "gfx942"
    assert device.extra["gcn_arch"] == "gfx942:sramecc+:xnack-"


def test_amdgcn_code_objects_are_version_5() -> None:
    """ELF e_ident[EI_ABIVERSION] is 3 for code object v5 (4 would be v6, LLVM 22's default), and
    the metadata note's amdhsa.version is [1, 2] (msgpack: 0x92 0x01 0x02)."""
    needs.module("llvmlite")
    from hwbench.kernels.gemm import llvm as gemm
    from hwbench.kernels.llvmir.gpu import find_linker, target_for

    if not find_linker():
        pytest.skip("no AMDGPU linker here (ROCm's ld.lld, Triton's, or one on PATH)")
    target = target_for("gfx942")
    binary = target.lower(gemm.build(target, "fp32", gemm.simt_config(target, "fp32")), gemm.KERNEL).binary
    assert binary[:4] == b"\x7fELF" and binary[7] == 64  # ELFOSABI_AMDGPU_HSA
    assert binary[8] == 3
    assert b"amdhsa.version\x92\x01\x02" in binary


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_linker_is_rocms_then_tritons_then_any_on_path(tmp_path: Path) -> None:
    from hwbench.kernels.llvmir.gpu import TRITON_IN_PROCESS, find_linker

    rocm_path = _executable(tmp_path / "rocm-6.4" / "llvm" / "bin" / "ld.lld")
    opt_rocm = _executable(tmp_path / "opt-rocm" / "llvm" / "bin" / "ld.lld")
    bundled = _executable(tmp_path / "triton" / "backends" / "amd" / "llvm" / "bin" / "ld.lld")
    on_path = _executable(tmp_path / "bin" / "ld.lld")
    environ = {"ROCM_PATH": str(tmp_path / "rocm-6.4"), "PATH": str(on_path.parent)}

    def found(in_process: bool = False) -> str:
        return find_linker(environ, tmp_path / "triton", tmp_path / "opt-rocm", lambda: in_process)

    assert found(in_process=True) == str(rocm_path)
    rocm_path.unlink()
    assert found(in_process=True) == str(opt_rocm)
    opt_rocm.unlink()
    assert found(in_process=True) == str(bundled)
    bundled.chmod(0o644)  # a file that cannot run is no linker
    assert found(in_process=True) == TRITON_IN_PROCESS
    assert found(in_process=False) == str(on_path)
    os.unlink(on_path)
    assert found() == ""


@pytest.mark.parametrize(
    ("props", "cuda", "hip", "want"), [(H200_ON_CUDA, "13.0", None, "sm_90"), (MI300X_ON_HIP, None, "6.4", "gfx942")]
)
def test_compile_target_local_names_the_arch_not_the_device(
    fake_torch_gpu,
    monkeypatch: pytest.MonkeyPatch,
    props: SimpleNamespace,
    cuda: str | None,
    hip: str | None,
    want: str,
) -> None:
    """``hwbench compile --target local`` on an H200 compiled for "NVIDIA H200" (and failed) before."""
    import torch

    from hwbench.compile.jobs import local_arch

    fake_torch_gpu(props, cuda=cuda, hip=hip)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert local_arch() == want
