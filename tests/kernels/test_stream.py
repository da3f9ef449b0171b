"""The stream kernel (BabelStream's copy, mul, add, triad, dot): exact results of every operation
and dtype on odd sizes from every implementation (llvmlite on the CPU and as SPIR-V, OpenCL C and
CLBlast on each OpenCL device, NumPy and torch, Triton under its interpreter), the GPU lowerings
compiled, a wrong result caught, GB/s and % of memory bandwidth in the records, and
``hwbench run --kernel stream`` end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import needs
import numpy as np
import pytest
from conftest import hwbench_cmd

from hwbench.core.errors import UserError
from hwbench.core.kernel import get_kernel
from hwbench.core.registry import get_backend
from hwbench.run import parity
from hwbench.run.case import CaseRequest, Pipeline

KERNEL = get_kernel("stream")
OPS = range(5)
DTYPES = ("fp32", "fp64")
SIZES = (1, 1_000_003)


def _exact(output: Any, shape: dict[str, int], dtype: str, inputs: dict[str, np.ndarray]) -> parity.Parity:
    return parity.check(np.asarray(output), KERNEL.reference(inputs, shape), KERNEL.tolerance(dtype, shape))


def test_bytes_flops_and_shapes_are_babelstreams() -> None:
    n = 1000
    moved = [KERNEL.bytes_moved({"op": op, "n": n}, "fp64") / (8 * n) for op in OPS]
    assert moved == [2, 2, 3, 3, 2]
    assert [KERNEL.flops({"op": op, "n": n}) / n for op in OPS] == [0, 1, 1, 2, 2]
    assert KERNEL.describe_shape({"op": 3, "n": 7}) == "triad,n=7"
    assert KERNEL.output_shape({"op": 4, "n": 7}) == ()
    assert KERNEL.shapes("quick") == [{"op": 3, "n": 2**22}]
    for profile in ("standard", "full"):  # 4x a 105 MiB L3 in fp32, and 1 GiB per fp64 array
        assert {s["op"] for s in KERNEL.shapes(profile)} == set(OPS)
        assert all(s["n"] * 4 >= 4 * 105 * 2**20 and s["n"] * 8 >= 2**30 for s in KERNEL.shapes(profile))
    with pytest.raises(UserError, match="use one of 0 copy"):
        KERNEL.complete({"op": 5, "n": 10})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 1_000_003, 2**28])
def test_values_make_every_result_exact(dtype: str, n: int) -> None:
    """The values hold few bits and dot's products sum below 2^23, so fp32 computes every result exactly."""
    from hwbench.kernels.stream.spec import DOT_SUM_BOUND, dot_values

    a, b = dot_values(min(n, 2**24), 0) if n < 2**28 else dot_values(n, 0)
    assert np.abs(a * b).sum() < DOT_SUM_BOUND
    if n <= 1_000_003:
        for op in OPS:
            shape = {"op": op, "n": n}
            inputs = KERNEL.make_inputs(shape, dtype, 3)
            ref = KERNEL.reference(inputs, shape)
            assert np.array_equal(ref.astype(inputs[next(iter(inputs))].dtype), ref), op  # exact in dtype


def _cases(backend: str) -> list[tuple[Any, Any, str]]:
    be = get_backend(backend)
    if not be.probe().ok:
        return []
    return [(be, dev, impl.name) for dev in be.devices() for impl in be.implementations("stream")]


def _run_all(be: Any, device: Any, impl_name: str, sizes: tuple[int, ...] = SIZES) -> None:
    impl = next(i for i in be.implementations("stream") if i.name == impl_name)
    for dtype in DTYPES:
        support = be.supports(impl, dtype, device)
        if not support.ok:
            pytest.skip(support.reason)
        for n in sizes:
            for op in OPS:
                shape = {"op": op, "n": n}
                inputs = KERNEL.make_inputs(shape, dtype, 0)
                prepared = be.prepare(impl, KERNEL, inputs, shape, dtype, device)
                prepared.run()
                prepared.run()  # a repeated call leaves the same result
                found = _exact(prepared.result(), shape, dtype, inputs)
                assert found.passed, (impl_name, device.name, dtype, n, op, found.reason)


@pytest.mark.parametrize("impl", ["llvm", "numpy", "torch"])
def test_cpu_implementations_are_exact(impl: str) -> None:
    be = get_backend("cpu")
    if impl == "torch":
        needs.module("torch")
    if impl == "llvm":
        needs.module("llvmlite")
    _run_all(be, be.devices()[0], impl)


@pytest.mark.parametrize("nontemporal", [True, False])
def test_llvm_both_store_kinds_are_exact(nontemporal: bool) -> None:
    needs.module("llvmlite")
    from hwbench.kernels.llvmir import cpu_launch
    from hwbench.kernels.llvmir.target import host_target
    from hwbench.kernels.stream import llvm

    for dtype in DTYPES:
        for n in (3, 1_000_003):
            for op in range(4):
                shape = {"op": op, "n": n}
                inputs = KERNEL.make_inputs(shape, dtype, 1)
                plan = llvm.launch(shape, dtype, host_target(), 2, nontemporal=nontemporal)
                assert plan.entry.endswith("_nt") == nontemporal
                kernel = cpu_launch.prepare(llvm.build, inputs, dtype, plan, 2, host_target())
                kernel.run()
                assert _exact(kernel.output, shape, dtype, inputs).passed


def _opencl_params() -> list[Any]:
    try:
        cases = _cases("opencl")
    except Exception:  # no OpenCL here: the test skips, saying so
        cases = []
    if not cases:
        return [
            pytest.param(
                None, None, "", marks=pytest.mark.skip(reason="no OpenCL device (apt-get install pocl-opencl-icd)")
            )
        ]
    return [pytest.param(be, dev, name, id=f"{dev.index}-{name}") for be, dev, name in cases]


@pytest.mark.parametrize("be,device,impl", _opencl_params())
def test_opencl_implementations_are_exact(be: Any, device: Any, impl: str) -> None:
    """OpenCL C and CLBlast on every device; the SPIR-V work-group kernel where a device takes
    SPIR-V (Intel's OpenCL CPU runtime: pip install 'hwbench[intel-opencl]')."""
    _run_all(be, device, impl)


_INTERPRETED = """
import numpy as np, torch
from hwbench.core.kernel import get_kernel
from hwbench.kernels.stream import triton as stream_triton
kernel = get_kernel("stream")
for dtype in ("fp32", "fp64"):
    for n in (1, 10_003):
        for op in range(5):
            shape = {"op": op, "n": n}
            inputs = kernel.make_inputs(shape, dtype, 0)
            tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
            out = torch.zeros(kernel.output_shape(shape), dtype=next(iter(tensors.values())).dtype)
            stream_triton.launch_case(tensors, out, shape, dtype, stream_triton.Config(1024, 4))
            assert np.array_equal(out.numpy(), kernel.reference(inputs, shape)), (dtype, n, op)
print("exact")
"""


def test_triton_under_the_interpreter_is_exact(tmp_path: Path) -> None:
    """Every operation and dtype through Triton's interpreter (a child: it must be set before import)."""
    needs.module("torch")
    needs.module("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _INTERPRETED], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0 and "exact" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("arch", ["sm_90", "gfx942"])
def test_triton_compiles_with_16_byte_loads(arch: str, tmp_path: Path) -> None:
    """Cross-compiled as ``hwbench compile`` does (no GPU): the elementwise kernels load 16 bytes at a time."""
    needs.module("triton")
    child = (
        "import json, sys\n"
        "from hwbench.compile.stats import compile_variant, triton_target\n"
        "from hwbench.kernels.stream import triton as t\n"
        "arch = sys.argv[1]; target = triton_target(arch); out = {}\n"
        "for v in t.compile_variants(arch):\n"
        "    c = compile_variant(v, target)\n"
        "    out[v['name']] = c.asm['ptx' if arch.startswith('sm_') else 'amdgcn']\n"
        "print(json.dumps(out))\n"
    )
    env = {"TRITON_CACHE_DIR": str(tmp_path), "TRITON_INTERPRET": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", child, arch], capture_output=True, text=True, env={**os.environ, **env}, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    asm = json.loads(proc.stdout.strip().splitlines()[-1])
    for dtype in DTYPES:
        code = asm[f"stream_triad_{dtype}"]
        if arch.startswith("sm_"):
            assert "ld.global.v4.b32" in code or "ld.global.v2.b64" in code, code[:2000]
        else:
            assert "global_load_dwordx4" in code or "buffer_load_dwordx4" in code, code[:2000]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nvptx_simt_form_assembles_without_spills(op: int, dtype: str, tmp_path: Path) -> None:
    needs.module("llvmlite")
    import shutil

    from hwbench.kernels.llvmir.gpu import target_for
    from hwbench.kernels.stream import llvm

    target = target_for("sm_90")
    shape = {"op": op, "n": 1 << 20}
    cfg = llvm.simt_config(target, dtype, shape)
    binary = target.lower(llvm.build(target, dtype, cfg), llvm.KERNEL)
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas is not installed (CUDA toolkit)")
    path = tmp_path / "k.ptx"
    path.write_text(binary.assembly)
    proc = subprocess.run([ptxas, "-arch=sm_90", "-v", str(path), "-o", str(tmp_path / "k.cubin")], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    assert "0 bytes spill stores" in proc.stderr.decode()


@pytest.mark.parametrize("op", [3, 4])
def test_amdgcn_simt_form_compiles_without_spills(op: int) -> None:
    needs.module("llvmlite")
    from hwbench.compile.stats import amdgcn_stats
    from hwbench.kernels.llvmir.gpu import find_linker, target_for
    from hwbench.kernels.stream import llvm

    if not find_linker():
        pytest.skip("no AMDGPU linker here (ROCm's ld.lld, Triton's, or one on PATH)")
    target = target_for("gfx942")
    shape = {"op": op, "n": 1 << 20}
    try:
        binary = target.lower(llvm.build(target, "fp32", llvm.simt_config(target, "fp32", shape)), llvm.KERNEL)
    except (FileNotFoundError, ImportError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no linker for AMDGCN code objects here: {exc}")
    assert amdgcn_stats(binary.assembly)["spilled"] is False


def test_a_wrong_result_is_caught() -> None:
    shape = {"op": 3, "n": 1_000_003}
    inputs = KERNEL.make_inputs(shape, "fp32", 0)
    out = KERNEL.reference(inputs, shape).astype(np.float32)
    assert _exact(out, shape, "fp32", inputs).passed
    out[123_457] = np.nextafter(out[123_457], np.float32(10))  # one ulp off in one element
    found = _exact(out, shape, "fp32", inputs)
    assert not found.passed and found.mismatches == 1 and "(123457,)" in found.reason
    dot = {"op": 4, "n": 1_000_003}
    dot_in = KERNEL.make_inputs(dot, "fp64", 0)
    assert not _exact(np.asarray(KERNEL.reference(dot_in, dot) + 1.0), dot, "fp64", dot_in).passed


class _Catalog:
    """The catalog's answers for a device with a known memory bandwidth and last-level cache."""

    def __init__(self, gbps: float) -> None:
        self.gbps = gbps

    def device_peak(self, name: str, own: Any, dtype: str, method: Any = None) -> tuple[None, None]:
        return None, None

    def device_price(self, name: str) -> None:
        return None

    def memory_bandwidth(self, name: str) -> Any:
        from hwbench.decide.catalog import Bandwidth

        return Bandwidth("testgpu", self.gbps, "memory", "test sheet", "2025")

    def last_level_cache(self, name: str) -> None:
        return None


def _record_doc(median_s: float, n: int, cache_bytes: int) -> dict[str, Any]:
    from hwbench.core.records import new_document, new_record

    doc = new_document(command=["test"])
    doc["backends"] = [
        {"name": "cpu", "devices": [{"index": 0, "name": "Test CPU", "extra": {"cache_bytes": cache_bytes}}]}
    ]
    record = new_record("stream", "llvm", "cpu", 0, "fp64", {"op": 0, "n": n}, impl_kind="portable")
    record["timing"] = {"median_s": median_s}
    native = new_record("stream", "numpy", "cpu", 0, "fp64", {"op": 0, "n": n}, impl_kind="native")
    native["timing"] = {"median_s": 2 * median_s}
    doc["records"] = [native, record]
    return doc


def test_records_carry_gbps_and_share_of_memory_bandwidth() -> None:
    from hwbench.results.derive import add_metrics
    from hwbench.results.tables import row

    n = 2**27  # copy: 2 GiB moved, past 4x a 100 MiB cache
    doc = _record_doc(0.1, n, 100 * 2**20)
    add_metrics(doc, _Catalog(50.0))
    native, record = doc["records"]
    m = record["metrics"]
    assert record["status"] == "ok" and m["gbps"] == pytest.approx(2 * n * 8 / 0.1 / 1e9)
    assert m["pct_bw_peak"] == pytest.approx(100 * m["gbps"] / 50.0) and m["bw_peak_gbps"] == 50.0
    assert "test sheet" in m["bw_peak_source"] and m["tflops"] == 0.0
    assert m["speed_vs_native"] == pytest.approx(2.0) and m["porting_overhead"] == pytest.approx(-1.0)
    cells = row(record)
    assert cells[4] == f"copy,n={n}" and cells[9] == f"{m['pct_bw_peak']:.1f}"
    above = _record_doc(0.1, n, 100 * 2**20)
    add_metrics(above, _Catalog(10.0))  # 21 GB/s from memory on a 10 GB/s device: refused
    assert above["records"][1]["status"] == "implausible"
    cached = _record_doc(1e-5, 1000, 100 * 2**20)
    add_metrics(cached, _Catalog(10.0))  # 16 kB may sit in cache: faster than memory is no error
    assert cached["records"][1]["status"] == "ok"
    assert cached["records"][1]["metrics"]["bw_peak_check"].startswith("not checked")


def test_pipeline_runs_a_case_with_the_exact_check() -> None:
    needs.module("llvmlite")
    steps = Pipeline()
    case = steps.resolve(CaseRequest("stream", "llvm", "cpu", 0, "fp32", {"op": 4, "n": 1_000_003}))
    prepared = steps.prepare(case)
    found, why = steps.parity(case, steps.first_output(prepared))
    assert why == "" and found["exact"] and found["passed"]


def test_hwbench_run_kernel_stream_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "stream.json"
    cmd = hwbench_cmd(
        "run", "--backend", "cpu", "--kernel", "stream", "--shape", "stream:op=2,n=100003", "--budget", "0.05",
        "--out", str(out),
    )  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "add,n=100003" in done.stdout and "exact" in done.stdout
    doc = json.loads(out.read_text())
    records = [r for r in doc["records"] if r["kernel"] == "stream" and r["impl"] != "*"]
    assert records and all(r["status"] == "ok" and r["metrics"]["gbps"] > 0 for r in records)
    assert all("pct_bw_peak" in r["metrics"] for r in records)
