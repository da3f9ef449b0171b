"""The ``hwbench_case`` pytest-benchmark fixture: a pytest run in a temporary folder writes
``--benchmark-json`` whose benchmarks carry TFLOPS, parity, porting overhead and device."""

from __future__ import annotations

import json

import needs
import pytest

pytest_plugins = ["pytester"]

SHAPE = '{"M": 96, "N": 80, "K": 72}'

TESTS = f"""
def test_portable(hwbench_case):
    result = hwbench_case("gemm", {SHAPE}, dtype="fp32", impl="llvm", rounds=5, warmup_rounds=1,
                          native_budget_s=0.05)
    assert result.parity["passed"] and result.native_impl == "numpy"

def test_native(hwbench_case):
    hwbench_case("gemm", {SHAPE}, dtype="fp64", impl="native", rounds=3, warmup_rounds=0)

def test_given_native_median(hwbench_case):
    result = hwbench_case("gemm", {SHAPE}, impl="portable", rounds=3, native_median_s=1.0)
    assert result.porting_overhead < 0  # nothing this small takes a second

def test_unavailable_backend(hwbench_case):
    hwbench_case("gemm", {SHAPE}, backend="rocm")
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    pytester.makepyfile(test_cases=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "--benchmark-json=bench.json", *args)
    return result, json.loads((pytester.path / "bench.json").read_text())


def test_benchmark_json_carries_hwbench_fields(pytester: pytest.Pytester) -> None:
    result, data = _run(pytester)
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*SKIPPED*backend rocm unavailable*"])
    bench = {b["name"]: b for b in data["benchmarks"]}
    assert set(bench) == {"test_portable", "test_native", "test_given_native_median"}
    info = bench["test_portable"]["extra_info"]
    assert info["kernel"] == "gemm" and info["impl"] == "llvm" and info["impl_kind"] == "portable"
    assert info["backend"] == "cpu" and info["device"] and info["shape"] == {"M": 96, "N": 80, "K": 72}
    assert info["parity"]["passed"] is True and 0 <= info["parity"]["max_abs_err"] <= info["parity"]["atol"]
    assert info["device_timer"] == "perf_counter" and info["native_impl"] == "numpy"
    flops = 2 * 96 * 80 * 72
    assert info["tflops"] == pytest.approx(flops / info["device_median_s"] / 1e12)
    assert info["porting_overhead"] == pytest.approx(1 - info["native_median_s"] / info["device_median_s"])
    assert info["pct_peak"] > 0
    # pytest-benchmark's rounds are the same calls the device timer measured (warm-up excluded).
    assert bench["test_portable"]["stats"]["rounds"] == 5
    assert bench["test_portable"]["group"] == "gemm M=96,N=80,K=72 fp32"
    native = bench["test_native"]["extra_info"]
    assert native["impl"] == "numpy" and native["dtype"] == "fp64" and native["porting_overhead"] is None
    given = bench["test_given_native_median"]["extra_info"]
    assert given["native_median_s"] == 1.0 and given["porting_overhead"] < 0
    # Where the native's median comes from, and how steady it was.
    assert info["native_source"] == "timed here" and info["native_n"] >= 3 and info["native_cv"] >= 0
    assert given["native_source"] == "given" and given["native_n"] is None


def test_parity_failure_fails_the_test(pytester: pytest.Pytester, faulty_env: dict[str, str]) -> None:
    pytester.makepyfile(
        test_wrong=f"""
def test_wrong(hwbench_case):
    hwbench_case("gemm", {SHAPE}, backend="faulty", impl="wrong", native=False, rounds=2)
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--benchmark-disable")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*parity failed*"])


def test_a_noisy_native_measurement_warns(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import TESTS

    monkeypatch.setenv("HWBENCH_BACKENDS", "cheat=fakes.backend:cheat")
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    monkeypatch.setenv("HWBENCH_CHEAT_TIMER", "noisy")
    pytester.makepyfile(
        test_noisy="""
def test_noisy(hwbench_case):
    result = hwbench_case("gemm", {"M": 8, "N": 8, "K": 8}, backend="cheat", impl="stale", rounds=3,
                          native_budget_s=0.01)
    assert result.native_source == "timed here" and result.native_cv > 0.3
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*the native honest's median comes from * calls over 0.01 s with a CV of *"])


def _scripts(node: object) -> list[str]:
    """Every shell script in a CI template: GitHub `run:` values and GitLab script lists."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "run" and isinstance(value, str):
                found.append(value)
            elif key in ("script", "after_script", "before_script") and isinstance(value, list):
                found += [v for v in value if isinstance(v, str)]
            else:
                found += _scripts(value)
    elif isinstance(node, list):
        for value in node:
            found += _scripts(value)
    return found


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_ci_templates_parse_and_gate_on_regressions(name: str) -> None:
    import shutil
    import subprocess
    from pathlib import Path

    yaml = needs.module("yaml")
    text = (Path(__file__).resolve().parents[2] / "ci" / name).read_text()
    doc = yaml.safe_load(text)
    scripts = _scripts(doc)
    joined = "\n".join(scripts)
    for needed in (
        "bash ci/setup.sh",
        "--benchmark-compare-fail=median:10%",
        "hwbench compare",
        "--fail-on median:5%",
        "bash ci/gpu-check.sh",
        "hwbench report",
    ):
        assert needed in joined, f"{name} lacks {needed}"
    if name.startswith("github"):
        assert set(doc["jobs"]) == {"benchmark", "gpu-smoke"} and all("steps" in j for j in doc["jobs"].values())
    else:
        assert {"tests", "benchmark", "gpu-smoke"} <= set(doc) and doc["benchmark"]["artifacts"]["paths"]
    for script in scripts:  # every script is valid bash
        done = subprocess.run([shutil.which("bash") or "bash", "-n"], input=script, capture_output=True, text=True)
        assert done.returncode == 0, f"{name}: {done.stderr}\n{script}"
