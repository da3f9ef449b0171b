"""The CUDA and ROCm backends: what they offer, why they are unavailable here, and (on a GPU)
parity of every implementation on small odd shapes.

Without a GPU the device tests are skipped with the backend's own reason; the description,
implementation lists, skip reasons and the llvmlite GPU lowering are checked everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import needs
import pytest
from conftest import hwbench_cmd

from hwbench.core.backend import DeviceInfo
from hwbench.core.registry import get_backend, get_kernel, implementations

BACKENDS = ("cuda", "rocm")


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("HWBENCH_BACKENDS", raising=False)
    get_backend.cache_clear()
    yield
    get_backend.cache_clear()


@pytest.mark.parametrize("name", BACKENDS)
def test_implementations_natives_first(name: str) -> None:
    backend = get_backend(name)
    gemm = backend.implementations("gemm")
    assert gemm[0].name == "torch_matmul" and gemm[0].kind == "native"
    assert {i.name for i in gemm} >= {"torch_matmul", "triton", "llvm"}
    assert [i.dtypes for i in gemm if i.name == "triton"] == [("fp16", "bf16", "fp32", "tf32", "fp8", "int8")]
    assert {i.name: i.dtypes for i in gemm if i.name.startswith("torch_")} == {
        "torch_matmul": ("fp16", "bf16", "fp32", "tf32", "fp64"),
        "torch_scaled_mm": ("fp8",),
        "torch_int_mm": ("int8",),
    }
    attention = backend.implementations("attention")
    assert [i.name for i in attention] == ["torch_sdpa", "triton", "llvm"]
    allreduce = implementations(backend, "allreduce")  # run by hwbench.collective, not prepared
    assert [(i.name, i.kind) for i in allreduce] == [("nccl", "native"), ("triton_symm", "portable")]
    if name == "cuda":
        assert "cupy_matmul" in {i.name for i in gemm}


@pytest.mark.parametrize("name", BACKENDS)
def test_unavailable_backend_says_why(name: str) -> None:
    availability = get_backend(name).probe()
    if availability.ok:
        pytest.skip(f"{name} is available here: the reason of an unavailable backend cannot be checked")
    from hwbench.core.backend import missing_modules

    if missing_modules("torch"):  # without the torch extra the reason says what to install
        assert "torch is not installed" in availability.reason, availability.reason
        return
    import torch

    assert f"torch {torch.__version__}" in availability.reason
    assert ("build" in availability.reason) or ("sees no GPU" in availability.reason)


@pytest.mark.parametrize("name", BACKENDS)
def test_supports_gives_reasons(name: str) -> None:
    from hwbench.core.backend import missing_modules

    backend = get_backend(name)
    device = DeviceInfo(backend=name, index=0, name="test GPU", vendor="test", kind="gpu", arch="sm_90")
    impls = {i.name: i for i in backend.implementations("gemm")}
    wrong = backend.supports(impls["triton"], "fp64", device)
    if missing_modules("triton"):  # the missing module is said first, with the extra that brings it
        assert not wrong.ok and wrong.reason.startswith("triton is not installed"), wrong.reason
    else:
        assert not wrong.ok and wrong.reason == f"triton has no fp64 variant on {name}"
    triton = backend.supports(impls["triton"], "bf16", device)
    assert triton.ok == (not missing_modules("triton"))
    if name == "cuda" and missing_modules("cupy"):
        assert backend.supports(impls["cupy_matmul"], "fp32", device).reason.startswith("CuPy is not installed")
        assert "needs CuPy" in backend.supports(impls["llvm"], "fp32", device).reason


def test_run_records_skips_with_reason(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    proc = subprocess.run(
        hwbench_cmd("run", "--backend", "cuda,rocm", "--kernel", "gemm,attention", "--out", str(out), "--quiet"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    doc = json.loads(out.read_text())
    if any(b["available"] for b in doc["backends"]):
        pytest.skip("a GPU backend is available here; see test_gpu_parity")
    assert proc.returncode == 1 and "no case ran: every case was skipped" in proc.stderr  # nothing ran
    assert len(doc["records"]) == 4
    for record in doc["records"]:
        assert record["status"] == "skipped"
        assert record["reason"].startswith(f"backend {record['backend']} unavailable: ")


def test_importing_gpu_backends_loads_no_sdk() -> None:
    code = (
        "import sys, hwbench.backends.cuda, hwbench.backends.rocm, hwbench.backends.torch_gpu, "
        "hwbench.kernels.llvmir.gpu, hwbench.cli.compile; "
        "print([m for m in ('torch', 'triton', 'cupy') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stderr


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_gpu_targets_get_the_work_group_kernels(arch: str) -> None:
    needs.module("llvmlite")
    from hwbench.kernels.attention import llvm as attn
    from hwbench.kernels.gemm import llvm as gemm
    from hwbench.kernels.llvmir.gpu import target_for

    target = target_for(arch)
    for module in (gemm, attn):
        for dtype in ("fp32", "fp64"):
            cfg = module.simt_config(target, dtype)
            text = str(module.build(target, dtype, cfg))
            assert f'target triple = "{target.triple}"' in text and "addrspace(3)" in text  # shared memory
            plan = module.launch(
                {"M": 300, "N": 70, "K": 9}
                if module is gemm
                else {"batch": 1, "heads": 2, "seq_q": 77, "seq_k": 77, "head_dim": cfg["HD"], "causal": 1},
                dtype,
                target,
                config=cfg,
            )
            assert plan.config["model"] == "simt" and plan.programs > 0 and max(plan.local) > 1
    assert "amdgpu_kernel" in str(gemm.build(target_for("gfx942"), "fp32"))


SMALL = {
    "gemm": [{"M": 67, "N": 45, "K": 130}],
    "attention": [
        {"batch": 1, "heads": 2, "seq_q": 77, "seq_k": 77, "head_dim": 64, "causal": 1},
        {"batch": 1, "heads": 2, "seq_q": 45, "seq_k": 93, "head_dim": 128, "causal": 0},
    ],
}


@pytest.mark.parametrize("name", BACKENDS)
def test_gpu_parity(name: str) -> None:
    """On a GPU: every implementation and dtype runs and passes parity on small odd shapes."""
    from hwbench.run.case import CaseRequest, CaseRunner

    backend = get_backend(name)
    availability = backend.probe()
    if not availability.ok:
        pytest.skip(f"needs a {name} GPU: {availability.reason}")
    runner = CaseRunner()
    failures = []
    for kernel, shapes in SMALL.items():
        spec = get_kernel(kernel)
        for impl in backend.implementations(kernel):
            for dtype in impl.dtypes:
                for shape in shapes:
                    case = CaseRequest(
                        kernel,
                        impl.name,
                        name,
                        0,
                        dtype,
                        spec.complete(shape),
                        0,
                        {"warmup_s": 0.0, "budget_s": 0.01, "min_samples": 3},
                    )
                    record = runner.run(case)
                    if record["status"] not in ("ok", "skipped"):
                        failures.append((impl.name, dtype, shape, record["status"], record["reason"]))
                    elif record["status"] == "skipped":
                        assert record["reason"], record
    assert not failures, failures


PROBE_IN_READ_ONLY_HOME = """
import json, os
from hwbench.core.registry import get_backend
backend = get_backend("{name}")
found = backend.probe()
print(json.dumps({{"reason": found.reason, "triton": os.environ.get("TRITON_CACHE_DIR"),
                  "cuda": os.environ.get("CUDA_CACHE_PATH"), "env": backend.environment().get("caches")}}))
"""


@pytest.mark.parametrize("name", ["cuda", "rocm"])
def test_a_read_only_home_moves_the_gpu_caches_before_they_start(name: str, tmp_path: Path) -> None:
    """Triton's (and CUDA's JIT) cache under an unwritable HOME move under hwbench's, saying so."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME")}
    env.update(HOME="/proc/self", HWBENCH_CACHE_DIR=str(tmp_path / "hw"))
    done = subprocess.run(
        [sys.executable, "-c", PROBE_IN_READ_ONLY_HOME.format(name=name)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["triton"] == str(tmp_path / "hw" / "triton")
    assert "Triton's cache: /proc/self/.triton/cache" in found["reason"] and "is not writable" in found["reason"]
    assert "triton" in found["env"]
    assert (found["cuda"] == str(tmp_path / "hw" / "cuda")) == (name == "cuda")


class _TorchStream:
    def __init__(self, ptr: int, protocol: bool = True) -> None:
        self.cuda_stream, self.device = ptr, type("Device", (), {"index": 1})()
        if protocol:
            self.__cuda_stream__ = lambda: (0, ptr)


def _fake_cupy(new_api: bool, made: list[tuple[str, object]]) -> object:
    from types import SimpleNamespace

    class Stream:
        pass

    if new_api:
        Stream.from_external = staticmethod(lambda obj: made.append(("from_external", obj.cuda_stream)) or obj)  # type: ignore[attr-defined]

    def external(ptr: int, device_id: int = -1) -> object:
        made.append(("ExternalStream", (ptr, device_id)))
        return object()

    return SimpleNamespace(cuda=SimpleNamespace(Stream=Stream, ExternalStream=external))


def test_cupy_streams_are_made_once_per_stream_with_the_api_of_the_installed_cupy() -> None:
    from hwbench.kernels.cupy_compat import Streams, cupy_stream

    made: list[tuple[str, object]] = []
    streams = Streams(_fake_cupy(True, made))
    for _ in range(5):  # five launches on one stream: one CuPy stream
        streams.get(_TorchStream(7))
    streams.get(_TorchStream(9))
    assert made == [("from_external", 7), ("from_external", 9)]  # CuPy 14: no deprecated ExternalStream
    made.clear()
    cupy_stream(_fake_cupy(False, made), _TorchStream(7))  # CuPy 12/13
    cupy_stream(_fake_cupy(True, made), _TorchStream(8, protocol=False))  # a torch without __cuda_stream__
    assert made == [("ExternalStream", (7, 1)), ("ExternalStream", (8, 1))]
