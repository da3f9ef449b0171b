"""Triton kernels in ``hwbench tune`` on the cuda and rocm backends, without a GPU.

The devices are described from fake properties as torch reports them on a CUDA build (an H200,
sm_90) and a HIP build (an MI300X, gfx942); the tuning spaces are the kernels' own. A spy in
place of a kernel's ``launch_case`` shows which configuration ``prepare`` launches: the candidate
it is given, else the tuned entry of the case's key, else the derived one. Under Triton's
interpreter (``TRITON_INTERPRET=1``, CPU tensors, tiny shapes) candidates of each kernel's space
run through the same ``prepare`` and are checked against the float64 reference. What only a GPU
shows (the configurations' speed, compiling them for the device) is the GPU check's.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import needs
import pytest

from hwbench.core.backend import DeviceInfo, Implementation
from hwbench.core.kernel import get_kernel
from hwbench.core.registry import get_backend
from hwbench.core.tuning import Entry, TuningStore

needs.module("triton")
torch = needs.module("torch")

from test_gpu_arch import H200_ON_CUDA, MI300X_ON_HIP  # noqa: E402  (the fake devices as torch reports them)

GPUS = {"cuda": (H200_ON_CUDA, "13.0", None), "rocm": (MI300X_ON_HIP, None, "7.0.0")}
GEMM = {"M": 48, "N": 40, "K": 64}
ATTENTION = {"batch": 1, "heads": 2, "seq_q": 33, "seq_k": 33, "head_dim": 64, "causal": 1}
STREAM = {"op": 3, "n": 5000}
#: Every Triton case with a space: kernel, dtype, shape.
CASES = [("gemm", d, GEMM) for d in ("fp16", "bf16", "fp32", "tf32", "fp8", "int8")]
CASES += [("attention", d, ATTENTION) for d in ("fp16", "bf16", "fp32")] + [("stream", "fp32", STREAM)]


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """``gpu("cuda"|"rocm")``: that backend and its one device as fake properties describe it; the
    tuning cache in a temporary folder; device tensors on the CPU; ``torch.cuda.set_device`` a no-op."""
    from hwbench.backends import torch_gpu_lowp

    monkeypatch.setenv("HWBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HWBENCH_TUNING", raising=False)
    real = torch_gpu_lowp.device_tensors
    monkeypatch.setattr(torch_gpu_lowp, "device_tensors", lambda *a, **k: real(*a[:5], "cpu"))
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)

    def make(name: str) -> tuple[Any, DeviceInfo]:
        props, cuda, hip = GPUS[name]
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.version, "hip", hip)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
        get_backend.cache_clear()
        backend = get_backend(name)
        monkeypatch.setattr(type(backend), "libraries", lambda self: {"torch": "2.11.0", "triton": "3.6.0"})
        monkeypatch.setattr(type(backend), "driver_version", lambda self: "test")
        (device,) = backend.devices()
        return backend, device

    yield make
    get_backend.cache_clear()


def _triton(backend: Any, kernel: str) -> Implementation:
    return next(i for i in backend.implementations(kernel) if i.name == "triton")


def _spy(monkeypatch: pytest.MonkeyPatch, impl: Implementation, fail: tuple[Any, ...] = ()) -> list[Any]:
    """The configurations the kernel's ``launch_case`` is called with (each in ``fail`` raises)."""
    launched: list[Any] = []
    source = importlib.import_module(impl.entry)

    def launch_case(inputs: Any, out: Any, shape: Any, dtype: str, config: Any) -> None:
        launched.append(config)
        if config in fail:
            raise ValueError(f"cannot run {config}")

    monkeypatch.setattr(source, "launch_case", launch_case)
    return launched


def _prepare(backend: Any, impl: Implementation, shape: dict[str, int], dtype: str, device: DeviceInfo, **kw: Any):
    kernel = get_kernel(impl.kernel)
    return backend.prepare(impl, kernel, kernel.make_inputs(shape, dtype, 1), shape, dtype, device, **kw)


@pytest.mark.parametrize("name", ["cuda", "rocm"])
def test_each_triton_case_has_a_space_that_round_trips_through_json(name: str, gpu) -> None:
    from hwbench.backends.torch_gpu_triton import config_of

    backend, device = gpu(name)
    assert device.arch == {"cuda": "sm_90", "rocm": "gfx942"}[name]
    for kernel, dtype, shape in CASES:
        impl = _triton(backend, kernel)
        space = backend.tuning_space(impl, get_kernel(kernel), shape, dtype, device)
        assert space is not None and space.candidates, (kernel, dtype, space and space.note)
        assert space.key.arch == device.arch and space.key.backend == name and space.key.dtype == dtype
        points = importlib.import_module(impl.entry).tuning_space(device.arch, dtype, shape)
        assert [p.as_dict() for p in points] == space.candidates  # the derived configuration first
        for point, candidate in zip(points, space.candidates, strict=True):
            back = json.loads(json.dumps(candidate))
            assert back == candidate and config_of(points, back) is point, (kernel, dtype, candidate)
    if name == "cuda":  # sm_90: the persistent TMA GEMM is tried beside the classic one
        space = backend.tuning_space(_triton(backend, "gemm"), get_kernel("gemm"), GEMM, "bf16", device)
        assert {c["kernel"] for c in space.candidates} == {"tma_persistent", "classic"}


def test_natives_and_llvmlite_kernels_offer_no_space_and_take_no_config(gpu) -> None:
    backend, device = gpu("cuda")
    kernel = get_kernel("gemm")
    others = [i for i in backend.implementations("gemm") if i.name != "triton"]
    assert others and all(backend.tuning_space(i, kernel, GEMM, "fp16", device) is None for i in others)
    with pytest.raises(ValueError, match="only Triton kernels are tuned"):
        _prepare(backend, others[0], GEMM, "fp16", device, config={"BLOCK_M": 64})


@pytest.mark.parametrize(("name", "kernel", "dtype", "shape"), [
    ("cuda", "gemm", "bf16", GEMM), ("rocm", "gemm", "int8", GEMM), ("cuda", "attention", "fp16", ATTENTION),
    ("rocm", "stream", "fp32", STREAM),
])  # fmt: skip
def test_prepare_launches_exactly_the_candidate_it_is_given(
    name: str, kernel: str, dtype: str, shape: dict[str, int], gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, device = gpu(name)
    impl = _triton(backend, kernel)
    launched = _spy(monkeypatch, impl)
    space = backend.tuning_space(impl, get_kernel(kernel), shape, dtype, device)
    candidate = json.loads(json.dumps(space.candidates[-1]))  # as the tuner holds it
    prepared = _prepare(backend, impl, shape, dtype, device, config=candidate)
    assert len(launched) == 1 and launched[0].as_dict() == space.candidates[-1]  # compiled by one launch
    prepared.run()
    assert launched[1] is launched[0]
    assert prepared.config["tuning"] == {"source": "candidate"}
    assert {k: prepared.config[k] for k in candidate} == candidate and prepared.config["arch"] == device.arch


def test_a_candidate_outside_the_space_or_one_that_fails_is_an_error(gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    backend, device = gpu("cuda")
    impl = _triton(backend, "gemm")
    space = backend.tuning_space(impl, get_kernel("gemm"), GEMM, "fp16", device)
    with pytest.raises(ValueError, match="not a configuration of this case's space"):
        _prepare(backend, impl, GEMM, "fp16", device, config={**space.candidates[0], "BLOCK_M": 96})
    points = importlib.import_module(impl.entry).tuning_space(device.arch, "fp16", GEMM)
    launched = _spy(monkeypatch, impl, fail=(points[1],))
    with pytest.raises(ValueError, match="cannot run"):
        _prepare(backend, impl, GEMM, "fp16", device, config=space.candidates[1])
    assert launched == [points[1]]  # a candidate never gives way to another


def _file(space: Any, config: dict[str, Any]) -> None:
    TuningStore().put(Entry(space.key, config, 1e-3, 2e-3, "2026-01-02T03:04:05Z", 30.0, 4, 6, dict(GEMM)))


@pytest.mark.parametrize("name", ["cuda", "rocm"])
def test_the_tuned_entry_is_chosen_over_the_derived_configuration(
    name: str, gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, device = gpu(name)
    impl = _triton(backend, "gemm")
    launched = _spy(monkeypatch, impl)
    space = backend.tuning_space(impl, get_kernel("gemm"), GEMM, "fp16", device)
    derived = _prepare(backend, impl, GEMM, "fp16", device)
    assert launched[-1].as_dict() == space.candidates[0]
    tuning = derived.config["tuning"]
    assert tuning["source"] == "derived" and tuning["of"] == len(space.candidates)
    assert tuning["note"].startswith("untuned: the derived configuration") and "hwbench tune" in tuning["note"]
    _file(space, space.candidates[2])
    tuned = _prepare(backend, impl, GEMM, "fp16", device)
    assert launched[-1].as_dict() == space.candidates[2]
    assert tuned.config["tuning"]["source"] == "tuned" and tuned.config["tuning"]["budget_s"] == 30.0
    assert tuned.config["tuning"]["speedup_vs_derived"] == 2.0 and "note" not in tuned.config["tuning"]
    nearby = {**GEMM, "M": 33}  # the same shape class: the same entry
    _prepare(backend, impl, nearby, "fp16", device)
    assert launched[-1].as_dict() == space.candidates[2]
    monkeypatch.setenv("HWBENCH_TUNING", "0")
    off = _prepare(backend, impl, GEMM, "fp16", device)
    assert launched[-1].as_dict() == space.candidates[0] and off.config["tuning"]["source"] == "derived"


def test_a_tuned_tma_tile_is_not_used_where_the_rows_rule_tma_out(gpu, monkeypatch: pytest.MonkeyPatch) -> None:
    """K=64 and K=63 share a shape class, but 63 bf16 elements are no 16-byte row: the TMA tile
    tuned on the first is no point of the second's space, so the derived one runs and says why."""
    backend, device = gpu("cuda")
    impl = _triton(backend, "gemm")
    launched = _spy(monkeypatch, impl)
    space = backend.tuning_space(impl, get_kernel("gemm"), GEMM, "bf16", device)
    assert space.candidates[0]["kernel"] == "tma_persistent"
    _file(space, space.candidates[0])
    odd = {**GEMM, "K": 63}
    prepared = _prepare(backend, impl, odd, "bf16", device)
    assert not launched[-1].tma and launched[-1].note.startswith("classic kernel")
    tuning = prepared.config["tuning"]
    assert tuning["source"] == "derived" and "is not in this space" in tuning["note"]


def test_a_derived_configuration_that_cannot_run_here_gives_way_to_the_next(
    gpu, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, device = gpu("rocm")
    impl = _triton(backend, "gemm")
    points = importlib.import_module(impl.entry).tuning_space(device.arch, "fp16", GEMM)
    launched = _spy(monkeypatch, impl, fail=(points[0],))
    prepared = _prepare(backend, impl, GEMM, "fp16", device)
    assert launched == [points[0], points[1]]
    note = prepared.config["tuning"]["note"]
    assert "failed here: cannot run" in note and "ran kernel=classic" in note
    assert {k: prepared.config[k] for k in points[1].as_dict()} == points[1].as_dict()
    launched[:] = []
    monkeypatch.setattr(importlib.import_module(impl.entry), "tuning_space", lambda arch, dtype, shape: points[:1])
    with pytest.raises(ValueError, match="cannot run"):  # the last one's failure is the case's
        _prepare(backend, impl, GEMM, "fp16", device)


_CHILD = textwrap.dedent("""
    import importlib, json, sys
    from hwbench.backends import torch_gpu_lowp, torch_gpu_triton
    from hwbench.core.backend import DeviceInfo
    from hwbench.core.kernel import get_kernel
    from hwbench.core.registry import get_backend
    from hwbench.run import parity

    out = []
    for name, arch, kernel_name, dtype, shape, pick in json.loads(sys.argv[1]):
        kernel = get_kernel(kernel_name)
        impl = next(i for i in get_backend(name).implementations(kernel_name) if i.name == "triton")
        source = importlib.import_module(impl.entry)
        device = DeviceInfo(backend=name, index=0, name="fake", vendor="fake", kind="gpu", arch=arch)
        candidates = torch_gpu_triton.space(source, impl, shape, dtype, device).candidates
        config = None if pick is None else json.loads(json.dumps(candidates[pick]))
        inputs = kernel.make_inputs(shape, dtype, 5)
        tensors, c = torch_gpu_lowp.device_tensors(kernel, inputs, shape, dtype, device, "cpu")
        call, record, _ = torch_gpu_triton.prepare(source, impl, tensors, c, shape, dtype, device, config)
        c.fill_(float("nan")) if c.is_floating_point() else c.fill_(-7)
        got = call().double().numpy()
        res = parity.check(got, kernel.reference(inputs, shape), kernel.tolerance(dtype, shape))
        out.append([name, kernel_name, dtype, record["tuning"]["source"], res.passed, res.reason])
    print(json.dumps(out))
""")

#: backend, arch, kernel, dtype, shape, which candidate (None: the derived one, untuned); the TMA
#: kernel needs a device (its persistent grid asks torch for the SMs) and is left to the GPU check.
INTERPRETED = [
    ("cuda", "sm_90", "gemm", "fp32", {"M": 17, "N": 20, "K": 33}, 1),
    ("cuda", "sm_90", "gemm", "fp32", {"M": 17, "N": 20, "K": 33}, None),
    ("rocm", "gfx942", "gemm", "fp16", {"M": 17, "N": 20, "K": 33}, 1),
    ("cuda", "sm_90", "gemm", "int8", {"M": 9, "N": 24, "K": 40}, 2),
    ("cuda", "sm_90", "attention", "fp16", {**ATTENTION, "head_dim": 16}, 1),
    ("rocm", "gfx942", "stream", "fp32", {"op": 4, "n": 5000}, 1),
]


def test_candidates_run_correctly_under_the_interpreter(tmp_path: Path) -> None:
    cache = {"TRITON_CACHE_DIR": str(tmp_path / "triton"), "HWBENCH_CACHE_DIR": str(tmp_path / "hwbench")}
    env = dict(os.environ, TRITON_INTERPRET="1", **cache)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(INTERPRETED)], capture_output=True, text=True, env=env, timeout=300
    )
    if done.returncode != 0 and "interpret" in done.stderr.lower() and "not supported" in done.stderr.lower():
        pytest.skip(f"Triton's interpreter cannot run these kernels here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(results) == len(INTERPRETED)
    for (*_, pick), (name, kernel, dtype, source, passed, why) in zip(INTERPRETED, results, strict=True):
        assert passed, (name, kernel, dtype, why)
        assert source == ("derived" if pick is None else "candidate")
