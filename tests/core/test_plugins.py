"""A third-party backend installed as a distribution registers through the entry-point group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hwbench.backend import Availability, Backend, Implementation
from hwbench.core.registry import backend_targets, get_backend

PLUGIN = """
from hwbench.backend import Availability, Backend

class NewChipBackend(Backend):
    name = "newchip"
    def probe(self):
        return Availability(False, "newchip driver 0.1 not loaded")
    def devices(self):
        return []
    def implementations(self, kernel):
        return []
    def prepare(self, *args):
        raise NotImplementedError
"""


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "newchip_hwbench.py").write_text(PLUGIN)
    info = tmp_path / "newchip_hwbench-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: newchip-hwbench\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hwbench.backends]\nnewchip = newchip_hwbench:NewChipBackend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    get_backend.cache_clear()
    yield
    get_backend.cache_clear()
    sys.modules.pop("newchip_hwbench", None)


def test_entry_point_backend_is_listed_and_probed(installed_plugin: None) -> None:
    assert backend_targets()["newchip"] == "newchip_hwbench:NewChipBackend"
    backend = get_backend("newchip")
    availability = backend.probe()
    assert not availability.ok and availability.reason == "newchip driver 0.1 not loaded"


def test_unavailable_plugin_backend_appears_in_a_run_with_its_reason(installed_plugin: None) -> None:
    from hwbench.run.describe import describe_backend
    from hwbench.run.runner import Plan, plan_cases

    described = describe_backend("newchip")
    assert described["available"] is False
    cases, skipped = plan_cases(
        Plan(backends=["newchip"], kernels=["gemm"]),
        [described],
        {"gemm": ("fp32",)},
        {"gemm": [{"M": 1, "N": 1, "K": 1}]},
    )
    assert cases == []
    assert [r["status"] for r in skipped] == ["skipped"]
    assert "newchip driver 0.1 not loaded" in skipped[0]["reason"]


class _LlvmChip(Backend):
    """A third-party backend that compiles llvmlite and brings a GEMM native of its own."""

    name = "llvmchip"
    languages = ("llvmlite",)

    def probe(self) -> Availability:
        return Availability(True)

    def devices(self) -> list:
        return []

    def natives(self, kernel):
        own = Implementation(kernel.name, "chipblas", "native", "chipblas", "the vendor's GEMM", ("fp32",))
        return [own] + super().natives(kernel) if kernel.name == "gemm" else super().natives(kernel)

    def prepare(self, *args):
        raise NotImplementedError


def test_a_backend_offers_the_kernel_folders_sources_in_its_languages_and_natives_of_its_own() -> None:
    chip = _LlvmChip()
    gemm = [(i.name, i.kind, i.language) for i in chip.implementations("gemm")]
    assert gemm == [("chipblas", "native", "chipblas"), ("llvm", "portable", "llvmlite")]
    assert [i.name for i in chip.implementations("attention")] == ["llvm"]  # no natives declared for llvmchip
    assert chip.implementations("allreduce") == []  # spans ranks: run by hwbench.collective, not prepared


@pytest.mark.parametrize("name", ["cpu", "opencl", "cuda", "rocm"])
def test_builtin_backends_list_only_what_they_prepare(name: str) -> None:
    backend = get_backend(name)
    assert backend.implementations("allreduce") == []
    for kernel in ("gemm", "attention"):
        for impl in backend.implementations(kernel):
            assert impl.entry, f"{name} {kernel} {impl.name} names no code to prepare"
