"""The worked example of docs/extending.md: the kernel in ``tests/example_kernel/`` and the backend in
``tests/example_backend.py``, registered without packaging (``HWBENCH_KERNELS``, ``HWBENCH_BACKENDS``),
run through ``hwbench run`` on cpu (llvmlite and NumPy), opencl (where a device is) and the example
backend, listed by ``hwbench list``; and what a malformed ``HWBENCH_KERNELS`` says.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import TESTS, hwbench_cmd

from hwbench.core.errors import UserError
from hwbench.core.kernel import BUILTIN_KERNELS, get_kernel, kernel_targets, kernels_from_env

KERNELS = "axpy=example_kernel.spec:KERNEL"
BACKENDS = "example=example_backend:ExampleBackend"
#: Two CPU programs of the llvmlite source (65536 elements each), the second with a scalar tail.
N = 100_003


def _env(*paths: Path, **extra: str) -> dict[str, str]:
    """This environment with the example kernel and backend registered and ``tests/`` (after ``paths``)
    importable; the caches stay in the test session's folder (conftest)."""
    path = os.pathsep.join([*map(str, paths), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, HWBENCH_KERNELS=KERNELS, HWBENCH_BACKENDS=BACKENDS, PYTHONPATH=path, **extra)


def _run(tmp_path: Path, backend: str, *more: str, env: dict[str, str] | None = None) -> tuple[int, list[dict]]:
    """``hwbench run --kernel axpy`` on ``backend`` at n=N: its exit status and its records."""
    out = tmp_path / f"{backend}.json"
    args = ["run", "-q", "--kernel", "axpy", "--backend", backend, "--shape", f"axpy:n={N}", "--budget", "0.02"]
    proc = subprocess.run(
        hwbench_cmd(*args, *more, "--timeout", "120", "--out", str(out)),
        capture_output=True,
        text=True,
        env=env or _env(),
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(out.read_text())["records"]


def _exact(record: dict) -> bool:
    parity = record["parity"]
    return record["status"] == "ok" and parity["exact"] and parity["mismatches"] == 0 and parity["elements"] == N


def test_the_example_kernel_runs_on_the_cpu_backend_exactly(tmp_path: Path) -> None:
    code, records = _run(tmp_path, "cpu")
    assert code == 0
    assert sorted((r["impl"], r["dtype"]) for r in records) == [
        ("llvm", "fp32"),
        ("llvm", "fp64"),
        ("numpy", "fp32"),
        ("numpy", "fp64"),
    ]
    assert all(_exact(r) for r in records), [(r["impl"], r["dtype"], r["status"], r["reason"]) for r in records]
    llvm = next(r for r in records if r["impl"] == "llvm")
    assert llvm["config"]["chunk"] == 65536 and llvm["config"]["grid"][0] == 2  # the bindings' Launch, as run
    check = subprocess.run(hwbench_cmd("validate", str(tmp_path / "cpu.json")), capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def _opencl_unavailable() -> str:
    """Why this machine's OpenCL cannot run the example ('' where it can)."""
    from hwbench.backends.opencl import OpenCLBackend

    available = OpenCLBackend().probe()
    return "" if available.ok else available.reason


def test_the_example_kernel_runs_on_opencl_where_a_device_is_and_says_why_not_elsewhere(tmp_path: Path) -> None:
    code, records = _run(tmp_path, "opencl", "--device", "opencl:0")
    why_not = _opencl_unavailable()
    if why_not:
        assert code == 1 and records and all(r["status"] == "skipped" for r in records)
        assert all(why_not in r["reason"] for r in records)
        return
    assert code == 0
    # OpenCL C only: the llvmlite source declares itself a cpu one (no work-group kernel to lower)
    assert {r["impl"] for r in records} == {"opencl"}
    fp32 = [r for r in records if r["dtype"] == "fp32"]
    assert len(fp32) == 1 and _exact(fp32[0]), fp32
    # fp64 where the device has it (PoCL has), else skipped with the extension it lacks
    assert all(_exact(r) or (r["status"] == "skipped" and "fp64" in r["reason"]) for r in records), records


def test_without_opencl_the_example_kernels_opencl_records_are_skipped_with_the_reason(tmp_path: Path) -> None:
    stub = tmp_path / "stub" / "pyopencl"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('raise ImportError("no OpenCL runtime in this test")\n')
    code, records = _run(tmp_path, "opencl", env=_env(stub.parent))
    assert code == 1  # no case ran
    assert [r["status"] for r in records] == ["skipped"]
    assert "no OpenCL runtime in this test" in records[0]["reason"]


def test_the_example_backend_runs_the_example_kernel(tmp_path: Path) -> None:
    code, records = _run(tmp_path, "example")
    assert code == 0
    assert sorted((r["backend"], r["impl"], r["dtype"]) for r in records) == [
        ("example", "numpy", "fp32"),
        ("example", "numpy", "fp64"),
    ]
    assert all(_exact(r) for r in records), records
    assert all(r["device"] == "Example Device" for r in records)


def test_hwbench_list_shows_the_example_kernel_and_where_it_runs() -> None:
    proc = subprocess.run(hwbench_cmd("list"), capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, proc.stderr
    section = proc.stdout.partition("\n  axpy ")[2]
    assert section.startswith("      worked example: out = alpha*x + y"), proc.stdout
    listed = [line.split()[0] for line in section.splitlines()[1:] if line.startswith("    ")]
    assert listed[:3] == ["cpu/numpy", "cpu/llvm", "opencl/opencl"] and "example/numpy" in listed
    assert not any(name.endswith("/llvm") and name != "cpu/llvm" for name in listed)  # the source's backends=
    assert "example:0  Example Device" in proc.stdout


def test_a_malformed_hwbench_kernels_entry_is_one_line_and_exit_2() -> None:
    env = dict(_env(), HWBENCH_KERNELS="axpy=example_kernel.spec")
    proc = subprocess.run(hwbench_cmd("list"), capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "hwbench: error: HWBENCH_KERNELS entry 'axpy=example_kernel.spec' is not NAME=module:attribute "
        "(e.g. axpy=example_kernel.spec:KERNEL)"
    ]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("axpy", "entry 'axpy' is not NAME=module:attribute"),
        ("axpy=:KERNEL", "is not NAME=module:attribute"),
        ("axpy=example_kernel.spec:", "is not NAME=module:attribute"),
        ("=example_kernel.spec:KERNEL", "has no kernel name"),
        ("gemm:M=1=example_kernel.spec:KERNEL", "names the kernel 'gemm:M'"),
    ],
)
def test_each_malformed_entry_says_what_is_wrong(monkeypatch: pytest.MonkeyPatch, entry: str, says: str) -> None:
    monkeypatch.setenv("HWBENCH_KERNELS", f"{KERNELS},{entry}")
    with pytest.raises(UserError, match="HWBENCH_KERNELS") as caught:
        kernel_targets()
    assert says in str(caught.value)


def test_registered_kernels_come_after_the_built_ins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HWBENCH_KERNELS", f" {KERNELS} , ")
    assert kernels_from_env() == {"axpy": "example_kernel.spec:KERNEL"}
    assert list(kernel_targets()) == [*BUILTIN_KERNELS, "axpy"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("axpy=nowhere_at_all.spec:KERNEL", "kernel 'axpy' (nowhere_at_all.spec:KERNEL) cannot be loaded"),
        ("axpy=example_kernel.spec:ALPHA", "is not an hwbench Kernel"),
        ("saxpy=example_kernel.spec:KERNEL", "calls itself 'axpy': register it as axpy="),
    ],
)
def test_a_registration_that_names_no_kernel_of_that_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, entry: str, says: str
) -> None:
    monkeypatch.setenv("HWBENCH_KERNELS", entry)
    monkeypatch.syspath_prepend(str(TESTS))
    get_kernel.cache_clear()
    try:
        with pytest.raises(UserError, match="kernel '") as caught:
            get_kernel(entry.partition("=")[0])
        assert says in str(caught.value)
    finally:
        get_kernel.cache_clear()
