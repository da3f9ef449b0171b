"""ci/slurm/hwbench.sbatch on a real one-node Slurm cluster that the tests start: munged with a key
made here, slurmctld and one slurmd on localhost, each in the foreground as a child of the test,
with sockets, ports, state, spool and logs in a temporary folder that goes away with them. The recipe
is submitted with ``sbatch --wait``: with one task and floors (run, burn, check); with two tasks on
the one node, each task's hwbench in a UTS namespace with a host name of its own, so that the fleet
(which knows a node by its host name) sees two nodes; and with a task made to fail. The per-task
results files, the verdict and the fleet file are read back.

The configuration is valid for Slurm 22.05 (Debian 12) and 24.11 (Debian 13): process tracking by
/proc (proctrack/linuxproc), no task plugin, no accounting, no cgroups (cgroup.conf says so on
Slurm >= 23.02, which has ``CgroupPlugin=disabled``). Where Slurm or munge is not installed, or a
daemon will not start, the tests that need the cluster are skipped with the daemon's own words.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from slurm_cluster import Cluster, one_node_cluster

from hwbench.results.files import load

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "ci" / "slurm" / "hwbench.sbatch"
#: A run of a few seconds: one tiny GEMM on the CPU backend, and a one-second burn on the CPU.
RUN_ARGS = "--backend cpu --kernel gemm --impl numpy --dtype fp32 --shape gemm:M=64,N=64,K=64 --budget 0.05 -q"
BURN_ARGS = "--backend cpu --shape gemm:M=128,N=128,K=128 --interval 0.2 --check-every 0.5 -q"
BURN_SECONDS = "1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The module's one-node cluster."""
    yield from one_node_cluster()


def _hwbench_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The recipe's settings: this interpreter's hwbench, results in tmp_path, tiny run and burn."""
    venv = Path(sys.prefix)
    found = {"HWBENCH_VENV": str(venv)} if (venv / "bin" / "hwbench").exists() else {}
    command = {"HWBENCH": f"{sys.executable} -m hwbench"} if not found else {}
    return {
        **found,
        **command,
        "HWBENCH_RESULTS": str(tmp_path / "shared"),
        "HWBENCH_RUN_ARGS": RUN_ARGS,
        "HWBENCH_BURN_ARGS": BURN_ARGS,
        "HWBENCH_BURN_DURATION": BURN_SECONDS,
        **extra,
    }


@dataclass
class Job:
    """A finished batch job: its id, the exit status ``sbatch --wait`` returned, its output and folder."""

    id: str
    status: int
    output: str
    folder: Path

    def files(self, kind: str) -> list[str]:
        return sorted(path.name for path in (self.folder / "nodes").glob(f"{kind}-*.json"))


def _submit(cluster: Cluster, tmp_path: Path, *args: str, **settings: str) -> Job:
    env = {**cluster.env, **_hwbench_env(tmp_path, **settings)}
    done = subprocess.run(
        [cluster.tools["sbatch"], "--wait", "--parsable", f"--chdir={tmp_path}", f"--output={tmp_path}/job-%j.out"]
        + [*args, str(RECIPE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    cluster.check_alive("during the job")
    job_id = done.stdout.strip().split(";")[0].split("\n")[0]
    assert job_id.isdigit(), f"sbatch gave no job id: {done.stdout!r} {done.stderr!r}"
    out = tmp_path / f"job-{job_id}.out"
    output = out.read_text(errors="replace") if out.exists() else "(no job output)"
    return Job(job_id, done.returncode, output + done.stderr, tmp_path / "shared" / f"job-{job_id}")


def _task_files(job: Job, host: str, tasks: range) -> tuple[list[str], list[str]]:
    runs = [f"run-{host}-j{job.id}-t{task}.json" for task in tasks]
    burns = [f"burn-{host}-j{job.id}-t{task}.json" for task in tasks]
    return runs, burns


def _check_run(path: Path) -> None:
    doc = load(path)  # a valid results file
    statuses = [record["status"] for record in doc["records"]]
    assert statuses == ["ok"], f"{path.name}: {statuses}"


def _fleet(job: Job, nodes: list[str], files: list[str]) -> dict[str, Any]:
    """The job's fleet document: of these nodes (host names), from these files, the GEMM case of all."""
    path = job.folder / "fleet.json"
    assert path.is_file(), f"no fleet file; job output:\n{job.output}"
    doc: dict[str, Any] = json.loads(path.read_text())
    assert doc["kind"] == "hwbench-fleet"
    assert sorted(doc["nodes"]) == sorted(nodes) and doc["summary"]["nodes"] == len(nodes), doc["nodes"]
    assert sorted(Path(name).name for name in doc["files"]) == sorted(files)
    (gemm,) = [case for case in doc["cases"] if case["kernel"] == "gemm" and case["impl"] == "numpy"]
    assert sorted(member["node"] for member in gemm["members"]) == sorted(nodes)
    assert all(member["value"] > 0 for member in gemm["members"])
    return doc


def _wrapper(tmp_path: Path, name: str, body: str) -> str:
    """An hwbench command for the recipe (HWBENCH): ``body``, then this interpreter's hwbench."""
    hwbench = shutil.which("hwbench", path=str(Path(sys.executable).parent)) or f"{sys.executable} -m hwbench"
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\n{body}exec {hwbench} "$@"\n')
    path.chmod(0o755)
    return str(path)


def test_the_recipe_is_valid_bash_and_shellcheck_clean() -> None:
    assert subprocess.run(["bash", "-n", str(RECIPE)], capture_output=True).returncode == 0
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run([shellcheck, str(RECIPE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_outside_a_job_the_recipe_says_how_to_submit_it() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    done = subprocess.run(["bash", str(RECIPE)], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "sbatch" in done.stderr


def test_one_task_writes_its_run_burn_and_check_files_then_the_fleet(cluster: Cluster, tmp_path: Path) -> None:
    """With floors (a tiny GEMM's share of the peak, no decay floor for a one-second burn, health
    readings this machine may lack passed over) the task checks its two files as well."""
    floors = tmp_path / "floors.toml"
    floors.write_text("[default]\nburn_decay_pct = false\n\n[cpu]\ngemm_pct_peak = 0.01\n")
    job = _submit(cluster, tmp_path, HWBENCH_FLOORS=str(floors), HWBENCH_CHECK_ARGS="--allow-missing")
    assert job.status == 0, job.output
    runs, burns = _task_files(job, cluster.node, range(1))
    assert job.files("run") == runs and job.files("burn") == burns, job.output
    _check_run(job.folder / "nodes" / runs[0])
    burn = load(job.folder / "nodes" / burns[0])
    assert burn["burn"] and all(entry["status"] == "ok" and entry["checks"] > 0 for entry in burn["burn"])
    verdict = json.loads((job.folder / "checks" / f"check-{cluster.node}-j{job.id}-t0.json").read_text())
    assert verdict["kind"] == "hwbench-check" and verdict["passed"] is True, verdict["summary"]
    assert sorted(Path(name).name for name in verdict["files"]) == sorted(runs + burns)
    assert {check["check"] for check in verdict["checks"]} >= {"gemm_pct_peak", "mismatches"}
    _fleet(job, [socket.gethostname()], runs + burns)


def test_two_tasks_as_two_hosts_are_two_nodes_of_the_fleet(cluster: Cluster, tmp_path: Path) -> None:
    """Two tasks on the one node, each task's hwbench in a UTS namespace of its own with a host name
    of its own (``<host>-t<task>``): to the fleet, which knows a node by its host name, two nodes.
    HWBENCH_BURN_DURATION=0 leaves the burn out."""
    unshare = shutil.which("unshare")
    probe = subprocess.run([unshare or "unshare", "--uts", "true"], capture_output=True, text=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip(f"no UTS namespace for a task's own host name: {probe.stderr.strip() if probe else 'no unshare'}")
    body = (
        'if [ "${SLURM_STEP_ID:-}" = 0 ] && [ -z "${IN_TASK_HOST:-}" ]; then\n'  # the per-node step's tasks
        "  export IN_TASK_HOST=1\n"
        f'  exec {unshare} --uts sh -c \'hostname "$0-t$SLURM_PROCID" && exec "$@"\' "$(hostname)" "$0" "$@"\n'
        "fi\n"
    )
    wrapper = _wrapper(tmp_path, "hwbench-task-host", body)
    job = _submit(cluster, tmp_path, "--ntasks-per-node=2", HWBENCH=wrapper, HWBENCH_BURN_DURATION="0")
    assert job.status == 0, job.output
    runs, _ = _task_files(job, cluster.node, range(2))
    assert job.files("run") == runs and job.files("burn") == [], job.output
    for task, name in enumerate(runs):
        _check_run(job.folder / "nodes" / name)
        assert load(job.folder / "nodes" / name)["host"]["hostname"] == f"{socket.gethostname()}-t{task}"
    _fleet(job, [f"{socket.gethostname()}-t{task}" for task in range(2)], runs)


def test_a_failing_task_keeps_the_other_tasks_files_and_fails_the_job(cluster: Cluster, tmp_path: Path) -> None:
    """Task 1's hwbench exits 3 at once; task 0's files stay, the fleet covers it, the job fails with 3."""
    body = 'if [ "${SLURM_PROCID:-0}" = 1 ]; then echo "task 1: made to fail" >&2; exit 3; fi\n'
    wrapper = _wrapper(tmp_path, "hwbench-failing-task", body)
    job = _submit(cluster, tmp_path, "--ntasks-per-node=2", HWBENCH=wrapper, HWBENCH_BURN_DURATION="0")
    assert job.status == 3, job.output
    runs, _ = _task_files(job, cluster.node, range(1))
    assert job.files("run") == runs, job.output
    _check_run(job.folder / "nodes" / runs[0])
    assert "task 1: made to fail" in job.output
    assert "the per-node step (run, burn, check) exited with status 3" in job.output
    _fleet(job, [socket.gethostname()], runs)
