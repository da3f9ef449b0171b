"""Backends and kernels by name; env registration; imports that load no device SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hwbench.core import registry
from hwbench.core.backend import Availability, Backend
from hwbench.core.errors import UserError
from hwbench.core.kernel import Kernel
from hwbench.core.registry import backend_targets, get_backend, get_kernel, kernel_targets, parse_names

SDKS = ("torch", "triton", "pyopencl", "cupy", "llvmlite")


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(registry.ENV_BACKENDS, raising=False)
    get_backend.cache_clear()
    yield monkeypatch
    get_backend.cache_clear()


def test_builtin_names(clean_registry) -> None:
    assert list(backend_targets())[:4] == ["cpu", "opencl", "cuda", "rocm"]
    assert list(kernel_targets())[:3] == ["gemm", "attention", "allreduce"]


@pytest.mark.parametrize("name", ["gemm", "attention", "allreduce"])
def test_builtin_kernels_load(name: str) -> None:
    kernel = get_kernel(name)
    assert isinstance(kernel, Kernel)
    assert kernel.name == name
    assert get_kernel(name) is kernel  # cached


def test_unknown_backend_lists_known_ones(clean_registry) -> None:
    with pytest.raises(UserError) as info:
        get_backend("nosuch")
    assert "unknown backend 'nosuch'" in str(info.value)
    assert "known backends: cpu, opencl, cuda, rocm" in str(info.value)


def test_unknown_kernel_lists_known_ones() -> None:
    with pytest.raises(UserError) as info:
        get_kernel("conv2d")
    assert "unknown kernel 'conv2d'" in str(info.value)
    assert "known kernels: gemm, attention, allreduce" in str(info.value)


def test_parse_names() -> None:
    known = ["cpu", "opencl", "cuda"]
    assert parse_names(None, known, "backend") == known
    assert parse_names("", known, "backend") == known
    assert parse_names(" all ", known, "backend") == known
    assert parse_names("cuda,cpu", known, "backend") == ["cuda", "cpu"]
    assert parse_names(" cuda , cpu,,cuda ", known, "backend") == ["cuda", "cpu"]  # stripped, deduplicated
    result = parse_names(None, known, "backend")
    result.append("x")
    assert known == ["cpu", "opencl", "cuda"]  # a copy, not the caller's list


def test_parse_names_unknown() -> None:
    with pytest.raises(UserError) as info:
        parse_names("cpu,vulkan,metal", ["cpu", "cuda"], "backend")
    assert str(info.value) == "unknown backend 'vulkan'; known backends: cpu, cuda"


TINY_BACKEND = """
from hwbench.backend import Availability, Backend

class TinyBackend(Backend):
    description = "tiny test backend"

    def probe(self):
        return Availability(True, "always here")

    def devices(self):
        return []

    def implementations(self, kernel):
        return []

    def prepare(self, impl, kernel, inputs, shape, dtype, device):
        raise NotImplementedError

INSTANCE = TinyBackend()
NOT_A_BACKEND = object()
"""


@pytest.fixture
def tiny_module(tmp_path: Path, clean_registry) -> str:
    name = "hwbench_test_tiny_backend"
    (tmp_path / f"{name}.py").write_text(TINY_BACKEND)
    clean_registry.syspath_prepend(str(tmp_path))
    clean_registry.delitem(sys.modules, name, raising=False)
    yield name
    sys.modules.pop(name, None)


def test_backend_registered_through_env(tiny_module: str, clean_registry) -> None:
    clean_registry.setenv(registry.ENV_BACKENDS, f" tiny = {tiny_module}:TinyBackend , ")
    get_backend.cache_clear()
    targets = backend_targets()
    assert list(targets)[:4] == ["cpu", "opencl", "cuda", "rocm"]
    assert targets["tiny"] == f"{tiny_module}:TinyBackend"
    backend = get_backend("tiny")
    assert isinstance(backend, Backend)
    assert type(backend).__name__ == "TinyBackend"
    assert backend.name == "tiny"
    assert backend.probe() == Availability(True, "always here")
    assert get_backend("tiny") is backend
    assert "tiny" in parse_names(None, list(backend_targets()), "backend")


def test_env_backend_may_be_an_instance_and_rename_a_builtin(tiny_module: str, clean_registry) -> None:
    clean_registry.setenv(registry.ENV_BACKENDS, f"a={tiny_module}:INSTANCE,cuda={tiny_module}:TinyBackend")
    get_backend.cache_clear()
    assert get_backend("a").probe().ok
    assert type(get_backend("cuda")).__name__ == "TinyBackend"  # the env entry wins over the built-in


def test_env_backend_that_is_not_a_backend(tiny_module: str, clean_registry) -> None:
    clean_registry.setenv(registry.ENV_BACKENDS, f"bogus={tiny_module}:NOT_A_BACKEND")
    get_backend.cache_clear()
    with pytest.raises(UserError, match="is not an hwbench Backend"):
        get_backend("bogus")


@pytest.mark.parametrize("entry", ["tiny", "tiny=module", "tiny:module", "cpu=hwbench.backends.cpu:CPUBackend,x"])
def test_malformed_env_entry(clean_registry, entry: str) -> None:
    clean_registry.setenv(registry.ENV_BACKENDS, entry)
    get_backend.cache_clear()
    with pytest.raises(UserError, match=r"is not NAME=module:attribute"):
        backend_targets()
    with pytest.raises(UserError, match=r"HWBENCH_BACKENDS entry"):
        get_backend("cpu")


def test_import_loads_no_device_sdk() -> None:
    code = textwrap.dedent(f"""
        import json, sys
        import hwbench
        import hwbench.core.registry, hwbench.cli
        hwbench.core.registry.backend_targets(); hwbench.core.registry.kernel_targets()
        print(json.dumps(sorted(m for m in {SDKS!r} if m in sys.modules)))
        print(json.dumps(sorted(m.split('.')[0] for m in sys.modules
                                if m.split('.')[0] in {SDKS!r})))
        print(json.dumps(["hwbench.cli.main" in sys.modules, "numpy" in sys.modules]))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[0]) == []
    assert json.loads(lines[1]) == []
    assert json.loads(lines[2]) == [True, True]  # the check sees what was imported


@pytest.mark.parametrize("name", ["cuda", "rocm", "opencl"])
def test_gpu_backend_probe_says_why_or_has_devices(clean_registry, name: str) -> None:
    backend = get_backend(name)
    assert backend.name == name
    availability = backend.probe()
    assert isinstance(availability, Availability)
    if availability.ok:
        devices = backend.devices()
        assert devices, f"{name} probe is ok but lists no device"
        assert all(d.backend == name for d in devices)
        assert [d.index for d in devices] == list(range(len(devices)))
    else:
        assert availability.reason.strip(), f"{name} is unavailable without a reason"
