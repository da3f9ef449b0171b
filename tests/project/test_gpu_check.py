"""ci/gpu-check.sh without a GPU: its dry run (sections, budgets, steps), the cases each of its run
steps plans on a node of eight H200s as hwbench's own planner lays them out, the seconds those
cases take by a stated cost model, the script's real path driven by a stand-in interpreter (a step
that outlives its section's budget is stopped), and the closing report of the figures."""

from __future__ import annotations

import gc
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import needs
import pytest
from synthetic_results import document, record, write

from hwbench.cli import run as run_command
from hwbench.cli.main import main
from hwbench.compile.jobs import compiled_kernels, plan_jobs
from hwbench.core.dtypes import DTYPE_BYTES, TABLE, output_dtype
from hwbench.core.kernel import get_kernel, kernel_targets
from hwbench.run import runner
from hwbench.run.case import CaseRequest
from hwbench.run.describe import describe_backend

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "gpu-check.sh"
REPORT = ROOT / "ci" / "gpu_check_report.py"
BASH = shutil.which("bash") or "bash"
#: The check's whole budget on one GPU, its install and cold caches included: five minutes
#: (tests/project/test_gpu_check_budget.py adds the script's budgets and reads its header).
CHECK_BUDGET_S = 300
GRACE = 5  # the script's SIGINT-to-SIGKILL grace: a step has its section's budget less this
ORDER = ["install", "compile", "figures", "simt", "bandwidth", "lowprec", "report"]

#: The script's real path bounds each step with coreutils' timeout (the dry run needs none).
needs_timeout = pytest.mark.skipif(shutil.which("timeout") is None, reason="coreutils' timeout is not installed")


@dataclass
class Section:
    """One section of the dry run: its budget and its steps (argument lists) or skip lines."""

    name: str
    budget: int
    steps: list[list[str]] = field(default_factory=list)
    skips: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWBENCH_GPU_CHECK")}
    return {**env, "PYTHON": sys.executable, **extra}


def _dry_run(*args: str, **env: str) -> tuple[list[Section], int, str]:
    done = subprocess.run(
        [BASH, str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, env=_env(**env), timeout=60
    )
    assert done.returncode == 0, done.stderr
    sections: list[Section] = []
    total = -1
    for line in done.stdout.splitlines():
        if match := re.fullmatch(r"section (\w+) (\d+) s", line):
            sections.append(Section(match.group(1), int(match.group(2))))
        elif line.startswith("  step: "):
            sections[-1].steps.append(shlex.split(line[len("  step: ") :]))
        elif line.startswith("  skip: "):
            sections[-1].skips.append(line[len("  skip: ") :])
        elif line.startswith("  note: "):
            sections[-1].notes.append(line[len("  note: ") :])
        elif match := re.fullmatch(r"total (\d+) s", line):
            total = int(match.group(1))
    return sections, total, done.stdout


def _hwbench_args(step: list[str]) -> list[str] | None:
    """The hwbench arguments of a step that runs ``python -m hwbench ...`` (None for other steps)."""
    for i in range(len(step) - 1):
        if step[i : i + 2] == ["-m", "hwbench"]:
            return step[i + 2 :]
    return None


def _option(args: list[str], name: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == name]


def test_sections_and_budgets_fit_five_minutes() -> None:
    sections, total, _ = _dry_run()
    assert [s.name for s in sections] == ORDER
    assert total == sum(s.budget for s in sections) <= CHECK_BUDGET_S
    assert all(s.budget > GRACE + 4 for s in sections)  # every section leaves a step at least 5 s
    # the dry run says the script's own table
    table = re.search(r"^declare -A BUDGET=\((.*)\)$", SCRIPT.read_text(), re.MULTILINE)
    assert table is not None
    assert {k: int(v) for k, v in re.findall(r"\[(\w+)\]=(\d+)", table.group(1))} == {
        s.name: s.budget for s in sections
    }
    assert all(s.steps or s.skips for s in sections if s.name != "install")  # install: a note where nothing is to do


def test_budgets_can_be_set_and_bad_ones_are_one_line() -> None:
    sections, total, _ = _dry_run(HWBENCH_GPU_CHECK_BUDGETS="figures=150 simt=80")
    budgets = {s.name: s.budget for s in sections}
    assert budgets["figures"] == 150 and budgets["simt"] == 80 and total == sum(budgets.values())
    for bad in ("figures", "nosuch=3", "=3", "figures=ten"):
        done = subprocess.run(
            [BASH, str(SCRIPT), "--dry-run"],
            capture_output=True,
            text=True,
            env=_env(HWBENCH_GPU_CHECK_BUDGETS=bad),
            timeout=60,
        )
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (bad, done.stderr)
        assert "is not SECTION=SECONDS" in done.stderr


def _run_steps(sections: list[Section]) -> list[tuple[Section, list[str]]]:
    return [(s, args) for s in sections for step in s.steps if (args := _hwbench_args(step)) and args[0] == "run"]


def test_cases_run_only_on_cuda0_unless_asked() -> None:
    sections, _, _ = _dry_run()
    runs = _run_steps(sections)
    assert {"figures", "simt"} <= {s.name for s, _ in runs}
    for _, args in runs:
        assert _option(args, "--backend") == ["cuda"] and _option(args, "--device") == ["cuda:0"], args
    two, total, _ = _dry_run("--device", "cuda:1", "--device=cuda:3")
    for _, args in _run_steps(two):
        assert _option(args, "--device") == ["cuda:1", "cuda:3"]
    by_name = {s.name: s.budget for s in sections}
    assert {s.name: s.budget for s in two} == {
        n: b * (2 if n in ("figures", "simt", "bandwidth", "lowprec") else 1) for n, b in by_name.items()
    }
    env_chosen, _, _ = _dry_run(HWBENCH_GPU_CHECK_DEVICES="cuda:2")
    assert all(_option(args, "--device") == ["cuda:2"] for _, args in _run_steps(env_chosen))
    for bad in (["--device", "cpu:0"], ["--device", "cuda:x"], ["--device", "all", "--device", "cuda:0"], ["-x"]):
        done = subprocess.run([BASH, str(SCRIPT), *bad], capture_output=True, text=True, env=_env(), timeout=60)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("gpu-check: "), bad


def test_sections_not_built_yet_are_skipped_with_a_line() -> None:
    sections, _, _ = _dry_run()
    by_name = {s.name: s for s in sections}
    have = set(kernel_targets())
    runs = {k for _, args in _run_steps(sections) for k in args[args.index("--kernel") + 1].split(",")}
    for kernel in ("stream", "transfer"):
        if kernel in have:
            assert kernel in runs
        else:
            assert any(f"no {kernel} kernel" in line for line in by_name["bandwidth"].skips)
    if "fp8" in get_kernel("gemm").dtypes:
        assert by_name["lowprec"].steps
    else:
        assert by_name["lowprec"].skips == ["the GEMM has no fp8 dtype in this hwbench yet (hwbench list)"]


# --- the cases each run step plans, and the time they take --------------------------------------

#: The cost model of a run step on the H200 machine (16 host cores), in seconds. PROCESS_S: one
#: hwbench process (Python, torch and CUDA started, host and backend described). CASE_S: a case's
#: preparation and first output besides what is counted apart. INPUT_S: per input or output element
#: drawn and rounded on the host. REFERENCE_FLOPS: the float64 reference's BLAS rate; ATTENTION_PAIR_S:
#: per query-key pair of the attention reference's elementwise passes (scores, mask, max, exp, sum).
#: PARITY_S: per output element and check (parity runs after the first output and after timing).
#: TRITON_COMPILE_S: one Triton configuration compiled cold (a run compiles a case's derived or tuned
#: configuration alone; timing the others is ``hwbench tune``'s, which the check does not run); LLVM_COMPILE_S:
#: an llvmlite kernel lowered to PTX and loaded (every run: llvmlite keeps no cache). Triton's cost
#: follows the issue's count of about 97 cold compiles taking most of 150-230 s; the host costs were
#: measured here (2 cores) and divided by 4. Cold caches: the compile section builds no launcher, so
#: the first run step that launches a Triton kernel builds Triton's C helper (TRITON_HELPER_S, once
#: for the check: it is kept in the check's cache) and each Triton case its launcher
#: (TRITON_LAUNCHER_S, where a Triton release builds one per kernel signature); a case compiles its
#: own configuration cold (TRITON_COMPILE_S) even where the compile section built it already.
PROCESS_S = 12.0
CASE_S = 2.0
INPUT_S = 25e-9
REFERENCE_FLOPS = 2e11
ATTENTION_PAIR_S = 10e-9
PARITY_S = 15e-9
TRITON_COMPILE_S = 2.3
TRITON_HELPER_S = 15.0
TRITON_LAUNCHER_S = 1.5
LLVM_COMPILE_S = 3.0


def _fake_cuda(gpus: int) -> dict[str, Any]:
    """The cuda backend as a node of ``gpus`` H200s would describe it (its real implementation list)."""
    described = describe_backend("cuda")
    devices = [
        {"backend": "cuda", "index": i, "name": "NVIDIA H200", "vendor": "NVIDIA", "kind": "gpu", "arch": "sm_90"}
        for i in range(gpus)
    ]
    return {**described, "available": True, "reason": "", "devices": devices, "environment": {}}


class _FakeWorker:
    """Answers the runner's host and describe requests as the H200 node would."""

    def __init__(self, cuda: dict[str, Any]) -> None:
        self.cuda = cuda

    def request(self, message: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        if message["op"] == "host":
            host = {"hostname": "h200", "os": "Linux", "cpu": {"model": "test", "cores": 16}}
            return {"host": host, "software": {}, "settings": {}, "warnings": []}
        assert message == {"op": "describe", "backend": "cuda"}, message
        return self.cuda

    def kill(self) -> None:
        pass

    def __enter__(self) -> _FakeWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _planned(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda: dict[str, Any]
) -> list[CaseRequest]:
    """The cases ``hwbench run ARGS`` plans (its own option parsing and planner; nothing runs)."""
    cases: list[CaseRequest] = []

    def run_cases(planned: list[CaseRequest], *rest: Any) -> tuple[list[dict[str, Any]], bool]:
        cases.extend(planned)
        return [], False

    monkeypatch.setattr(runner, "Worker", lambda: _FakeWorker(cuda))
    monkeypatch.setattr(run_command, "Worker", lambda: _FakeWorker(cuda))  # `hwbench run` opens its own
    monkeypatch.setattr(runner, "run_cases", run_cases)
    out = args.index("--out") + 1
    args = [*args[:out], str(tmp_path / f"plan-{len(list(tmp_path.iterdir()))}.json"), *args[out + 1 :]]
    assert main(args) in (0, 1)  # 1: no case ran (none was meant to); 2 would be an option hwbench refuses
    return cases


def _reference_s(kernel: str, shape: dict[str, int], dtype: str) -> float:
    spec = get_kernel(kernel)
    elements = spec.bytes_moved(shape, dtype) / DTYPE_BYTES[dtype]
    if TABLE[dtype].output:  # int8, fp8: C's elements are wider than the inputs' (int32, fp32)
        out = math.prod(spec.output_shape(shape))
        elements -= out * (output_dtype(dtype).itemsize / DTYPE_BYTES[dtype] - 1)
    seconds = elements * INPUT_S + spec.flops(shape) / REFERENCE_FLOPS
    if kernel == "attention":
        seconds += shape["batch"] * shape["heads"] * shape["seq_q"] * shape["seq_k"] * ATTENTION_PAIR_S
    return seconds


def estimate(cases: list[CaseRequest], timing_budget: float, energy_budget: float, helper: bool = False) -> float:
    """Seconds a run step takes by the cost model above, each case's energy windows at their budget
    (an H200's energy counter is readable); ``helper``: this step builds Triton's C helper."""
    seconds = PROCESS_S + len(cases) * energy_budget + (TRITON_HELPER_S if helper else 0.0)
    inputs = {(c.kernel, tuple(sorted(c.shape.items())), c.dtype) for c in cases}
    seconds += sum(_reference_s(k, dict(s), d) for k, s, d in inputs)
    for case in cases:
        out = math.prod(get_kernel(case.kernel).output_shape(case.shape))
        seconds += CASE_S + 1.2 * timing_budget + 2 * out * PARITY_S  # warm-up is a fifth of the budget
        if case.impl == "triton":
            seconds += TRITON_COMPILE_S + TRITON_LAUNCHER_S
        elif case.impl == "llvm":
            seconds += LLVM_COMPILE_S
    return seconds


#: How many cases each section's run step plans on the node: a change to the script's steps that
#: adds cases must say so here, and fit the budget below.
EXPECTED_CASES = {"figures": 6, "simt": 4, "bandwidth": 6, "lowprec": 2}


def test_each_run_step_plans_its_cases_on_cuda0_within_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cuda = _fake_cuda(8)
    sections, _, _ = _dry_run()
    seen = {}
    spent: dict[str, float] = {}
    helper_built = False  # Triton's C helper, built cold by the first step that launches a Triton kernel
    for section, args in _run_steps(sections):
        cases = _planned(args, tmp_path, monkeypatch, cuda)
        assert cases and {c.device_index for c in cases} == {0}, section.name  # one GPU of the eight
        assert {c.backend for c in cases} == {"cuda"}
        energy = 0.0 if "--no-energy" in args else float(_option(args, "--energy-budget")[0])
        helper = not helper_built and any(c.impl == "triton" for c in cases)
        helper_built = helper_built or helper
        seconds = estimate(cases, float(_option(args, "--budget")[0]), energy, helper)
        spent[section.name] = spent.get(section.name, 0.0) + seconds  # a section's steps share its budget
        assert spent[section.name] <= section.budget - GRACE, (
            f"{section.name}: about {spent[section.name]:.0f} s of {section.budget} s"
        )
        assert float(_option(args, "--timeout")[0]) < section.budget  # a case's own limit within the section's
        seen[section.name] = len(cases)
    assert {k: seen.get(k) for k in EXPECTED_CASES} == EXPECTED_CASES
    figures = {(c.kernel, c.impl, c.dtype) for c in _planned(_run_steps(sections)[0][1], tmp_path, monkeypatch, cuda)}
    assert figures == {
        ("gemm", "torch_matmul", "bf16"),
        ("gemm", "triton", "bf16"),
        ("gemm", "llvm", "bf16"),  # the llvmlite GEMM on mma.sync
        ("attention", "torch_sdpa", "bf16"),
        ("attention", "triton", "bf16"),
        ("attention", "llvm", "bf16"),
    }


def test_the_compile_step_fits_its_budget() -> None:
    sections, _, _ = _dry_run()
    (section,) = [s for s in sections if s.name == "compile"]
    (args,) = [a for step in section.steps if (a := _hwbench_args(step))]
    assert args[:3] == ["compile", "--target", "local"]
    jobs = plan_jobs(["sm_90"], compiled_kernels(), ["triton", "llvm"])
    serial = []  # a Triton job compiles its kernel's variants one after another, in one child
    for job in jobs:
        if job["impl"] == "triton":
            try:
                variants = len(get_kernel(job["kernel"]).source_module("triton").compile_variants("sm_90"))
            except ImportError:
                variants = 12
            serial.append(variants * TRITON_COMPILE_S)
        else:
            serial.append(LLVM_COMPILE_S)
    seconds = PROCESS_S + max(max(serial), sum(serial) / 16)  # 16 compiler processes, one per core
    assert seconds <= section.budget - GRACE, f"compile: about {seconds:.0f} s of {section.budget} s"


# --- the real path, with a stand-in interpreter -------------------------------------------------

FAKE_PYTHON = r"""#!/usr/bin/env bash
# A stand-in for the GPU machine's python3: logs each call, answers the script's checks, writes
# an empty results file where hwbench would, and hangs where FAKE_HANG names the output.
printf '%s\n' "$*" >>"$FAKE_LOG"
GEMM_DTYPES=${FAKE_GEMM_DTYPES:-fp32 fp64 tf32 fp16 bf16}
if [ "$1" = - ]; then
  code=$(cat)
  case $code in
    *torch.version.cuda*) echo "fake: torch 2.11.0+cu130, triton 3.6.0; cuda:0 NVIDIA H200 (sm_90)" ;;
    *kernel_targets*)
      sleep "${FAKE_SLOW_LIST:-0}"
      printf '%s\n%s\n' "gemm attention allreduce stream transfer" "$GEMM_DTYPES" ;;
  esac
  exit 0
fi
if [ "$1" = -c ]; then
  case $2 in
    *hwbench.__file__*) exit "${FAKE_INSTALLED:-0}" ;;
    *device_count*) echo 2 ;;
  esac
  exit 0
fi
out=""
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
if [ -n "$out" ]; then
  if [ -n "${FAKE_HANG:-}" ] && [[ $out = *"$FAKE_HANG"* ]]; then exec sleep 60; fi
  echo '{}' >"$out"
fi
exit 0
"""


def _real(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    fake = tmp_path / "python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    done = subprocess.run(
        [BASH, str(SCRIPT), *args, str(tmp_path / "out" / "check")],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(
            PYTHON=str(fake),
            FAKE_LOG=str(log),
            HWBENCH_GPU_CHECK_CACHE=str(tmp_path / "cache"),
            TRITON_CACHE_DIR=str(tmp_path / "cache" / "triton"),
            **env,
        ),
    )
    return done, log.read_text().splitlines()


@needs_timeout
def test_the_real_path_runs_the_dry_runs_steps_in_order(tmp_path: Path) -> None:
    done, calls = _real(tmp_path, FAKE_GEMM_DTYPES=" ".join(get_kernel("gemm").dtypes))  # as this hwbench says
    assert done.returncode == 0, done.stderr
    sections, _, _ = _dry_run(str(tmp_path / "out" / "check"))
    planned = [args for s in sections for step in s.steps if (args := _hwbench_args(step)) and args[0] != "validate"]
    ran = [shlex.split(c)[2:] for c in calls if c.startswith("-m hwbench ") and " validate " not in c]
    assert ran == planned
    outputs = sorted(p.name for p in (tmp_path / "out").iterdir())
    lowprec = ["check-lowprec.json"] if "fp8" in get_kernel("gemm").dtypes else []
    assert outputs == sorted(
        ["check-compile.json", "check-figures.json", "check-simt.json", "check-bandwidth.json"] + lowprec
    )
    report = [c for c in calls if c.startswith(str(REPORT.relative_to(ROOT)))]
    assert report and sorted(Path(p).name for p in shlex.split(report[0])[1:]) == outputs
    assert "gpu-check: fake: torch 2.11.0+cu130" in done.stderr and "done in" in done.stderr


@needs_timeout
def test_the_fp8_gemm_runs_where_the_gemm_has_fp8(tmp_path: Path) -> None:
    done, calls = _real(tmp_path, FAKE_GEMM_DTYPES="fp32 fp64 tf32 fp16 bf16 int8 fp8")
    assert done.returncode == 0, done.stderr
    (lowprec,) = [shlex.split(c) for c in calls if c.startswith("-m hwbench run") and "lowprec" in c]
    assert _option(lowprec, "--dtype") == ["fp8"] and _option(lowprec, "--impl") == ["torch_scaled_mm,triton"]
    assert (tmp_path / "out" / "check-lowprec.json").is_file() and "no fp8 dtype" not in done.stderr
    (tmp_path / "older").mkdir()
    older, calls = _real(tmp_path / "older")  # an hwbench whose GEMM has no fp8: a line, no step
    assert older.returncode == 0 and "skipped: the GEMM has no fp8 dtype in this hwbench yet" in older.stderr
    assert not [c for c in calls if "lowprec" in c]


@needs_timeout
def test_the_checkout_is_installed_offline_into_the_checks_folder(tmp_path: Path) -> None:
    done, calls = _real(tmp_path, FAKE_INSTALLED="1")
    assert done.returncode == 0, done.stderr
    (pip,) = [shlex.split(c) for c in calls if c.startswith("-m pip install")]
    assert {"--no-index", "--no-deps", "--no-build-isolation"} <= set(pip)
    assert pip[pip.index("--target") + 1] == str(tmp_path / "cache" / "site") and pip[-1] == str(
        tmp_path / "cache" / "src"
    )
    src = tmp_path / "cache" / "src"
    assert (src / "kernels" / "attention" / "spec.py").is_file() and (src / "setup.py").is_file()


@needs_timeout
def test_every_gpu_when_asked(tmp_path: Path) -> None:
    done, calls = _real(tmp_path, "--all-devices")
    assert done.returncode == 0, done.stderr
    runs = [shlex.split(c) for c in calls if c.startswith("-m hwbench run")]
    assert runs and all(_option(r, "--device") == ["cuda:0", "cuda:1"] for r in runs)


@needs_timeout
def test_a_step_past_its_budget_is_stopped_and_the_check_goes_on(tmp_path: Path) -> None:
    started = time.monotonic()
    # 11 s: a step needs 5 s past the 5 s of grace, and the clock may tick a whole second between
    # the section's start and its step (then 10 s would leave 4 s: "no time left").
    done, calls = _real(tmp_path, FAKE_HANG="figures", HWBENCH_GPU_CHECK_BUDGETS="figures=11")
    assert time.monotonic() - started < 30  # the hung step had 5-6 s, then 5 s of grace
    assert done.returncode == 1
    assert "figures: stopped at the end of its budget" in done.stderr
    assert any(c.startswith("-m hwbench run") and "simt" in c for c in calls)  # later sections still ran


@needs_timeout
def test_no_cuda_python_is_one_line_and_exit_2(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/usr/bin/env bash\nexit 1\n")
    fake.chmod(0o755)
    done = subprocess.run(
        [BASH, str(SCRIPT), str(tmp_path / "check")],
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(PYTHON=str(fake), PATH=str(tmp_path) + os.pathsep + os.environ.get("PATH", "")),
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stderr == (
        "gpu-check: no Python with a CUDA build of torch that sees a GPU (set PYTHON=...)\n"
    )


def test_the_script_is_valid_bash_and_shellcheck_clean() -> None:
    assert subprocess.run([BASH, "-n", str(SCRIPT)], capture_output=True).returncode == 0
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


# --- the closing report -------------------------------------------------------------------------

SQUARE = {"M": 8192, "N": 8192, "K": 8192}
SIMT_SQUARE = {"M": 4096, "N": 4096, "K": 4096}
FIGURE_ATTENTION = {"batch": 1, "heads": 32, "seq_q": 4096, "seq_k": 4096, "head_dim": 128, "causal": 1}


def test_the_report_prints_each_figure_against_its_native(tmp_path: Path) -> None:
    cuda = {"backend": "cuda", "device": "NVIDIA H200"}
    figures = document(
        [
            record("gemm", "torch_matmul", "bf16", SQUARE, 1.4e-3, impl_kind="native", **cuda),
            record("gemm", "triton", "bf16", SQUARE, 1.5e-3, **cuda, speed_vs_native=0.93, native_impl="torch_matmul"),
            record("attention", "triton", "bf16", FIGURE_ATTENTION, None, status="parity_failed", **cuda),
        ]
    )
    simt = document(
        [
            record(
                "gemm",
                "llvm",
                "fp16",
                {"M": 64, "N": 64, "K": 64},
                2e-3,
                **cuda,
                speed_vs_native=0.25,
                native_impl="torch_matmul",
            )
        ]
    )
    compiled = {
        **document([]),
        "compile": [
            {
                "kernel": "gemm",
                "impl": "triton",
                "target": "sm_90",
                "variant": "gemm_bf16",
                "status": "ok",
                "reason": "",
                "spilled": False,
            },
            {
                "kernel": "attention",
                "impl": "llvm",
                "target": "sm_90",
                "variant": "fp32",
                "status": "ok",
                "reason": "",
                "spilled": True,
            },
        ],
    }
    paths = [write(tmp_path / "f.json", figures), write(tmp_path / "s.json", simt)]
    (tmp_path / "c.json").write_text(json.dumps(compiled))
    done = subprocess.run(
        [sys.executable, str(REPORT), *map(str, paths), str(tmp_path / "c.json")], capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr  # figures not measured, one failed
    lines = done.stdout.splitlines()

    def line(start: str) -> str:
        (hit,) = [x for x in lines if x.startswith(start)]
        return hit

    assert "0.93x vs torch_matmul" in line("Triton bf16 GEMM 8192^3") and "(goal >= 0.9x)" in line("Triton bf16 GEMM")
    assert "parity_failed: parity_failed on purpose" in line("Triton causal bf16 attention")
    assert "not measured" in line("llvmlite SIMT fp32 GEMM 4096^3") and "not measured" in line("Triton fp8 GEMM")
    assert "cuda:0 gemm llvm fp16 M=64,N=64,K=64: 0.25x vs torch_matmul" in lines
    assert line("compile: sm_90 attention llvm fp32: ok (spills)")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    done = subprocess.run([sys.executable, str(REPORT), str(bad)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "cannot read" in done.stderr


#: Every figure the report names, as (kernel, impl, dtype, shape) with a ratio at or above its goal.
EVERY_FIGURE = [
    ("gemm", "triton", "bf16", SQUARE, 0.95),
    ("attention", "triton", "bf16", FIGURE_ATTENTION, 0.85),
    ("gemm", "llvm", "fp32", SIMT_SQUARE, 0.6),
    ("gemm", "llvm", "bf16", SQUARE, 0.55),
    ("attention", "llvm", "fp32", {**FIGURE_ATTENTION, "heads": 8, "head_dim": 64, "causal": 0}, 0.3),
    ("gemm", "triton", "fp8", SQUARE, 0.9),
]


def _figures(index: int = 0, **speeds: Any) -> list[dict[str, Any]]:
    """A record per figure on cuda:INDEX; ``speeds`` (``gemm_triton_bf16=0.5``, or a status name
    as ``gemm_triton_bf16="skipped"``, or None: no native timed) override a figure's ratio."""
    records = []
    for kernel, impl, dtype, shape, ratio in EVERY_FIGURE:
        value = speeds.get(f"{kernel}_{impl}_{dtype}", ratio)
        status = value if isinstance(value, str) else "ok"
        metrics = {"speed_vs_native": value, "native_impl": "native"} if status == "ok" else {}
        median = 1e-3 if status == "ok" else None
        records.append(
            record(kernel, impl, dtype, shape, median, backend="cuda", index=index, status=status, **metrics)
        )
    return records


def _report(tmp_path: Path, *records: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    paths = [write(tmp_path / f"r{i}.json", document(r)) for i, r in enumerate(records)]
    return subprocess.run([sys.executable, str(REPORT), *map(str, paths)], capture_output=True, text=True)


def test_the_report_passes_only_with_every_figure_measured(tmp_path: Path) -> None:
    done = _report(tmp_path, _figures())
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "below goal: none (every figure measured reached its goal)" in done.stdout.splitlines()
    cases = {
        "missing": ([r for r in _figures() if r["dtype"] != "fp8"], "Triton fp8 GEMM 8192^3 on cuda:0 (not measured)"),
        "skipped": (_figures(gemm_triton_bf16="skipped"), "Triton bf16 GEMM 8192^3 on cuda:0 (skipped)"),
        "failed": (_figures(attention_triton_bf16="parity_failed"), "(parity_failed)"),
        "no native": (_figures(gemm_llvm_bf16=None), "mma.sync) on cuda:0 (no native timed beside it)"),
        "no goal, failed": (_figures(attention_llvm_fp32="timeout"), "D=64 on cuda:0 (timeout)"),
    }
    for name, (records, said) in cases.items():
        done = _report(tmp_path, records)
        assert done.returncode == 1, name
        assert done.stderr.count("\n") == 1 and "1 of 6 figure rows have no ratio" in done.stderr, (name, done.stderr)
        assert said in done.stderr, (name, done.stderr)


def test_rows_below_goal_are_said_apart_and_do_not_fail(tmp_path: Path) -> None:
    done = _report(tmp_path, _figures(gemm_llvm_bf16=0.12, gemm_triton_fp8=0.84))
    assert done.returncode == 0, done.stderr
    below = [line for line in done.stdout.splitlines() if line.startswith("below goal")]
    assert below == [
        "below goal: llvmlite SIMT bf16 GEMM 8192^3 (mma.sync) on cuda:0: 0.12x, goal 0.5x",
        "below goal: Triton fp8 GEMM 8192^3 on cuda:0: 0.84x, goal 0.85x",
    ]


def test_a_figure_missing_on_one_device_of_two_fails(tmp_path: Path) -> None:
    second = [r for r in _figures(index=1) if r["impl"] != "triton" or r["dtype"] != "bf16" or r["kernel"] != "gemm"]
    done = _report(tmp_path, _figures(), second)
    assert done.returncode == 1
    assert "Triton bf16 GEMM 8192^3 on cuda:1 (not measured)" in done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("Triton bf16 GEMM")]
    assert len(lines) == 2 and "cuda:0" in lines[0] and "cuda:1" in lines[1] and "not measured" in lines[1]


def test_the_report_escapes_what_the_files_say_and_refuses_a_non_object(tmp_path: Path) -> None:
    records = _figures(gemm_triton_bf16="runtime_error")
    records[0]["reason"] = "boom \x1b[2J here"
    done = _report(tmp_path, records)
    assert done.returncode == 1 and "\x1b" not in done.stdout + done.stderr and "\\x1b[2J" in done.stdout
    listed = tmp_path / "list.json"
    listed.write_text("[]")
    done = subprocess.run([sys.executable, str(REPORT), str(listed)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a results file" in done.stderr


# --- the whole check within its total ------------------------------------------------------------


@needs_timeout
def test_time_between_steps_comes_out_of_later_sections(tmp_path: Path) -> None:
    # Listing the kernels (after the install, in no step) takes 8 s, past the install's 1 s: the
    # compile section, 11 s, then ends 12 s after the start, too soon for its step (it would have
    # had 11 s from its own start), so the check still ends within its total.
    done, calls = _real(tmp_path, FAKE_SLOW_LIST="8", HWBENCH_GPU_CHECK_BUDGETS="install=1 compile=11")
    assert done.returncode == 1
    assert "compile: no time left in its budget" in done.stderr, done.stderr
    assert not [c for c in calls if c.startswith("-m hwbench compile")]
    assert [c for c in calls if c.startswith("-m hwbench run")]  # the later sections had their own time


# --- the SDPA native the check times beside ------------------------------------------------------


def test_sdpa_chooses_its_backend_inside_each_call_only(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = needs.module("torch")
    import torch.nn.attention as attention
    from torch.nn.attention import SDPBackend

    from hwbench.kernels.attention.natives import torch_sdpa_device

    default = attention._cur_sdpa_kernel_backends()
    assert len(default) > 1  # every backend allowed, as a fresh process has it
    real = torch.nn.functional.scaled_dot_product_attention
    seen: list[list[Any]] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(attention._cur_sdpa_kernel_backends())
        return real(*args, **kwargs)

    picks: list[Any] = [SDPBackend.MATH, RuntimeError("private API gone"), SDPBackend.FLASH_ATTENTION]

    def choice(*args: Any, **kwargs: Any) -> int:
        pick = picks.pop(0)
        if isinstance(pick, Exception):
            raise pick
        return int(pick.value)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(torch, "_fused_sdp_choice", choice)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 16, 32, generator=g) for _ in range(3))
    tensors, shape = {"q": q, "k": k, "v": v}, {"causal": 1}
    expected = real(q, k, v, is_causal=True)

    first, config = torch_sdpa_device(tensors, None, shape, "fp32")
    assert config["sdpa_backend"] == "math"
    assert attention._cur_sdpa_kernel_backends() == default  # prepared, not pinned outside its call
    assert torch.allclose(first(), expected, atol=1e-5) and seen.pop() == [SDPBackend.MATH]
    assert attention._cur_sdpa_kernel_backends() == default

    later, config = torch_sdpa_device(tensors, None, shape, "fp32")  # a later case, its choice unknown
    assert config["sdpa_backend"] == "unknown"
    assert torch.allclose(later(), expected, atol=1e-5) and seen.pop() == default  # not under the first case's math

    third, config = torch_sdpa_device(tensors, None, shape, "fp32")
    del first
    gc.collect()  # the first case released while the third lives
    assert torch.allclose(third(), expected, atol=1e-5) and seen.pop() == [SDPBackend.FLASH_ATTENTION]
    assert attention._cur_sdpa_kernel_backends() == default
