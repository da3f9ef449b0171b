"""The test tiers, in one place: which test modules (and single tests) carry which marker.

``tests/conftest.py`` applies this table to every collected test, so a test file carries no
marker of its own. The markers (registered in ``pyproject.toml``):

- ``cluster``: starts several processes that act as ranks or nodes (AllReduce, MPI, torchrun,
  network namespaces, Slurm and Kubernetes scripts), each test seconds long and sensitive to a
  busy machine;
- ``gpu``: GPU code checked on the CPU (cross-compiled kernels, the GPU check script, fakes of
  the device properties); no GPU is needed, but the compilers are slow;
- ``opencl``: runs on OpenCL devices (PoCL, Intel's CPU runtime), whose compilers are slow;
- ``serial``: measures time or noise (a budget kept, a gate's verdict on repeated timings), so it
  runs alone, never beside other tests;
- ``slow``: anything else that takes seconds (whole runs, tuning, ISA levels, large arrays).

``bash ci/test.sh --fast`` runs ``-m "not slow and not cluster and not gpu and not opencl and not
serial"``: the edit-test loop. The full suite runs everything: the cluster and serial tests one at a
time, the rest two at a time (pytest-xdist).

What a test needs installed, in one place too: a test that needs an optional module calls
``needs.module(name)`` (never ``pytest.importorskip`` itself), which skips it, when the module is
missing, with what installs it from ``INSTALLS`` (the pyproject extra, or the package when no
extra has it). ``tests/project/test_needs.py`` keeps both: no other file calls importorskip, and
every module asked for has its line here.
"""

from __future__ import annotations

from types import ModuleType

import pytest

#: Test module (its file name without ``.py``) -> its markers.
MODULES: dict[str, tuple[str, ...]] = {
    "test_allreduce": ("cluster",),
    "test_allreduce_gpu": ("cluster", "gpu"),
    "test_allreduce_mpi": ("cluster",),
    "test_allreduce_netns": ("cluster",),
    "test_collective_cleanup": ("cluster",),
    "test_slurm": ("cluster",),
    "test_k8s_manifest": ("cluster",),
    "test_k8s_train_manifest": ("slow",),
    "test_drill": ("cluster",),
    "test_drill_slurm": ("cluster",),
    "test_compile": ("gpu", "slow"),
    "test_triton_codegen": ("gpu", "slow"),
    "test_triton_kernels": ("gpu",),
    "test_triton_defaults": ("gpu",),
    "test_tune_triton": ("gpu",),
    "test_simt_mma": ("gpu",),
    "test_simt_kernels": ("gpu",),
    "test_gpu_check": ("gpu",),
    "test_gpu_image": ("gpu",),
    "test_lowprec_gpu": ("gpu",),
    "test_gpu_timing": ("gpu",),
    "test_opencl": ("opencl",),
    "test_opencl_icd": ("opencl",),
    "test_tune_simt": ("opencl", "gpu"),
    "test_binary_cache": ("opencl",),
    "test_plausibility": ("slow",),
    "test_tune": ("slow",),
    "test_tune_levels": ("slow",),
    "test_tune_worker": ("slow",),
    "test_cpu_isa_levels": ("slow",),
    "test_cpu_peak_isa": ("slow",),
    "test_lowprec_isa": ("slow",),
    "test_probes": ("slow",),
    "test_run_exits": ("slow",),
    "test_search": ("slow",),
    "test_report_browser": ("slow",),
    "test_burn": ("slow",),
    "test_xpu_backend": ("slow",),
    "test_trust_burn_check": ("slow",),
    "test_pytest_plugin": ("slow", "serial"),
    "test_worker": ("slow",),
    "test_extending": ("slow", "opencl"),
    "test_train_cli": ("slow",),
}

#: Single tests (a node id's start, ``module::name``) slower than the rest of their module.
TESTS: dict[str, tuple[str, ...]] = {
    "test_stream::test_values_make_every_result_exact": ("slow",),
    "test_stream::test_hwbench_run_kernel_stream_end_to_end": ("slow",),
    "test_cpu_backend::test_flush_touches_a_buffer_larger_than_the_cache": ("slow",),
    "test_trust_outputs::test_a_run_with_allreduce_prints_clean_nccl_tests_stdout": ("cluster",),
    "test_trust_outputs::test_unchanged_code_passes_a_gate_on_the_mean": ("slow", "serial"),
    "test_trust_outputs::test_a_gate_within_the_noise_of_few_rounds_warns": ("slow", "serial"),
    "test_tune::test_the_budget_is_kept": ("serial",),
    "test_xpu_backend::test_fleet_finds_the_slow_xpu_device": ("serial",),
    "test_cpu_peak_isa::test_the_cpu_device_describes_an_emulated_level": ("serial",),
    "test_run_exits::test_sigterm_during_allreduce_writes_the_file_and_sweeps": ("serial",),
    "test_trust_results_files::test_the_loader_and_the_version_1_schema_agree": ("slow",),
    "test_results_validity::test_validator_agrees_with_jsonschema": ("slow",),
    "test_cli_safety::test_probe_and_compile_take_out_dash_for_stdout": ("slow",),
}

MARKERS = ("cluster", "gpu", "opencl", "serial", "slow")


def markers_of(module: str, name: str) -> tuple[str, ...]:
    """The markers of the test ``name`` (without its parameters) in the test module ``module``."""
    found = list(MODULES.get(module, ()))
    for key, marks in TESTS.items():
        if f"{module}::{name}".startswith(key):
            found += marks
    return tuple(dict.fromkeys(found))


#: Optional module (or package: its submodules share its line) -> what installs it. hwbench's own
#: dependencies (NumPy, ml_dtypes) are never missing and have no line.
INSTALLS: dict[str, str] = {
    "llvmlite": "pip install -e '.[cpu]'",
    "torch": "pip install -e '.[torch]' (or '.[cuda]', '.[rocm]')",
    "triton": "pip install -e '.[gpu-compile]' (or '.[cuda]', '.[rocm]')",
    "pyopencl": "pip install -e '.[opencl]'",
    "jsonschema": "pip install -e '.[test]'",
    "websocket": "pip install -e '.[test]' (websocket-client)",
    "yaml": "pip install -e '.[test]' (pyyaml)",
    "scipy": "pip install scipy (in no extra: only a test's cross-check uses it)",
    "pandas": "pip install pandas (in no extra: hwbench's rows feed it, hwbench does not import it)",
}


def install_hint(name: str) -> str:
    """What installs the module ``name``: the line of ``INSTALLS`` for it or the nearest package above it.

    Raises ``LookupError`` for a module the table lacks, so that a test asking for a new one adds its line.
    """
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        hint = INSTALLS.get(".".join(parts[:end]))
        if hint is not None:
            return hint
    raise LookupError(f"{name!r} has no line in tests/needs.py INSTALLS: add what installs it")


def module(name: str, why: str | None = None, *, minversion: str | None = None) -> ModuleType:
    """The module ``name`` imported, or the calling test (or test module) skipped with what installs it.

    ``why`` says what the test needs it for where that is not plain; ``minversion`` skips as
    ``pytest.importorskip`` does when the module's ``__version__`` is older.
    """
    __tracebackhide__ = True  # a skip is reported at the line of the test that asked
    hint = install_hint(name)
    because = f" ({why})" if why else ""
    imported: ModuleType = pytest.importorskip(
        name, minversion=minversion, reason=f"{name} is not installed{because}: {hint}"
    )
    return imported
