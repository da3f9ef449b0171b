"""Measured roofs (best GEMM per dtype, best stream bandwidth per device) and pct_achievable."""

from __future__ import annotations

from typing import Any

from hwbench.results import roofs


def _record(kernel: str, impl: str, dtype: str, tflops: float | None, gbps: float | None, **kw: Any) -> dict[str, Any]:
    return {
        "kernel": kernel,
        "impl": impl,
        "dtype": dtype,
        "backend": kw.get("backend", "cpu"),
        "device_index": kw.get("index", 0),
        "device": "CPU X",
        "status": kw.get("status", "ok"),
        "shape": kw.get("shape", {"M": 8}),
        "metrics": {"tflops": tflops, "gbps": gbps},
    }


def test_the_best_gemm_per_dtype_and_the_best_stream_are_the_roofs() -> None:
    records = [
        _record("gemm", "numpy", "fp32", 0.20, 1.0, shape={"M": 2048}),
        _record("gemm", "llvm", "fp32", 0.25, 1.0, shape={"M": 3072}),
        _record("gemm", "llvm", "fp64", 0.10, 1.0),
        _record("gemm", "llvm", "fp32", 9.99, 1.0, status="implausible"),  # refused figures are no roof
        _record("attention", "sdpa", "fp32", 0.30, 1.0),  # not a roof kernel
        _record("stream", "llvm", "fp64", None, 40.0, shape={"op": 3}),
        _record("stream", "numpy", "fp64", None, 30.0),
        _record("gemm", "torch", "bf16", 500.0, 1.0, backend="cuda"),
    ]
    found = roofs.measured_roofs(records)
    cpu = next(r for r in found if r["backend"] == "cpu")
    assert cpu["compute"]["fp32"]["tflops"] == 0.25 and cpu["compute"]["fp32"]["shape"] == {"M": 3072}
    assert cpu["compute"]["fp64"]["impl"] == "llvm" and cpu["bandwidth"]["gbps"] == 40.0
    cuda = next(r for r in found if r["backend"] == "cuda")
    assert cuda["bandwidth"] is None and set(cuda["compute"]) == {"bf16"}

    doc = {"records": records}
    roofs.add_achievable(doc)
    pct = [r["metrics"].get("pct_achievable") for r in records]
    assert pct[0] == 80.0 and pct[1] == 100.0 and pct[2] == 100.0
    assert "pct_achievable" not in records[3]["metrics"]  # not ok: untouched
    assert pct[4] == 120.0  # attention against the fp32 GEMM roof
    assert pct[5] == 100.0 and pct[6] == 75.0
    assert doc["roofs"] == found


def test_without_a_roof_the_share_is_null_and_the_hint_names_the_command() -> None:
    records = [_record("attention", "sdpa", "bf16", 0.3, 1.0)]
    doc = {"records": records}
    roofs.add_achievable(doc)
    assert records[0]["metrics"]["pct_achievable"] is None and doc["roofs"] == []
    hint = roofs.missing_roof_hint({"compute": {}, "bandwidth": None}, ["bf16"])
    assert "hwbench run --kernel gemm --search" in hint and "hwbench run --kernel stream" in hint
    assert roofs.missing_roof_hint({"compute": {"bf16": {}}, "bandwidth": {"gbps": 1}}, ["bf16"]) == ""
