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

import contextlib
import getpass
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hwbench.results.files import load

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "ci" / "slurm" / "hwbench.sbatch"
SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scancel", "squeue")
INSTALL = "apt-get install slurm-wlm munge"
#: A run of a few seconds: one tiny GEMM on the CPU backend, and a one-second burn on the CPU.
RUN_ARGS = "--backend cpu --kernel gemm --impl numpy --dtype fp32 --shape gemm:M=64,N=64,K=64 --budget 0.05 -q"
BURN_ARGS = "--backend cpu --shape gemm:M=128,N=128,K=128 --interval 0.2 --check-every 0.5 -q"
BURN_SECONDS = "1"


def _tool(name: str) -> str | None:
    path = os.pathsep.join([os.environ.get("PATH", ""), *SBIN])
    return shutil.which(name, path=path)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 4) -> str:
    """The last lines of a daemon's log, errors first: what a skip reason quotes."""
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    errors = [line.strip() for line in text if "error" in line.lower() or "fatal" in line.lower()]
    return " | ".join((errors or [line.strip() for line in text])[-lines:]) or "(nothing logged)"


def _version(slurmctld: str) -> tuple[int, int]:
    """Slurm's version as (major, minor), from ``slurmctld -V`` ("slurm-wlm 22.05.8", "slurm 24.11.5")."""
    out = subprocess.run([slurmctld, "-V"], capture_output=True, text=True, timeout=30).stdout
    found = re.search(r"(\d+)\.(\d+)", out)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _node_line(slurmd: str) -> tuple[str, str]:
    """This host's node name and hardware as slurmd detects it (``slurmd -C``), without memory."""
    out = subprocess.run([slurmd, "-C"], capture_output=True, text=True, timeout=30).stdout
    fields = dict(item.split("=", 1) for item in out.split("\n", 1)[0].split() if "=" in item)
    name = fields.get("NodeName") or socket.gethostname().split(".")[0]
    keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
    hardware = " ".join(f"{key}={fields[key]}" for key in keys if key in fields)
    return name, hardware or f"CPUs={os.cpu_count() or 1}"


def _slurm_conf(folder: Path, node: str, hardware: str, user: str) -> str:
    return f"""\
ClusterName=hwbenchtest
SlurmctldHost=localhost
SlurmUser={user}
SlurmdUser={user}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=5
KillWait=5
MailProg={shutil.which("true") or "/bin/true"}
SlurmctldDebug=info
SlurmdDebug=info
NodeName={node} NodeAddr=127.0.0.1 {hardware} State=UNKNOWN
PartitionName=hwbench Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class Cluster:
    """A running one-node cluster: its folder, the environment its clients use, the node's name."""

    folder: Path
    env: dict[str, str]
    node: str
    tools: dict[str, str]
    daemons: dict[str, subprocess.Popen[bytes]]

    def client(self, tool: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.tools[tool], *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def check_alive(self, what: str) -> None:
        """Skip, with the daemon's words, when one of them has exited."""
        for name, proc in self.daemons.items():
            if proc.poll() is not None:
                pytest.skip(f"{name} exited ({proc.returncode}) {what}: {_tail(self.folder / f'{name}.log')}")


def _start(cluster: Cluster, name: str, *args: str) -> None:
    with open(cluster.folder / f"{name}.log", "wb") as log:
        cluster.daemons[name] = subprocess.Popen(
            [cluster.tools[name], *args],
            env=cluster.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait(cluster: Cluster, what: str, ready: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        cluster.check_alive(f"before {what}")
        if time.monotonic() > deadline:
            logs = "; ".join(f"{name}: {_tail(cluster.folder / f'{name}.log')}" for name in cluster.daemons)
            pytest.skip(f"no {what} after {seconds:.0f} s: {logs}")
        time.sleep(0.2)


def _node_idle(cluster: Cluster) -> bool:
    state = cluster.client("sinfo", "-h", "-N", "-n", cluster.node, "-o", "%t").stdout.strip()
    return state == "idle"


def _boot(cluster: Cluster, user: str) -> None:
    """munged, then slurmctld and slurmd, then the node idle; skips with the daemon's words."""
    folder = cluster.folder
    key = os.open(folder / "munge.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(key, "wb") as out:
        out.write(os.urandom(1024))
    _start(
        cluster,
        "munged",
        "--foreground",
        f"--socket={folder}/munge.socket",
        f"--key-file={folder}/munge.key",
        f"--log-file={folder}/munged.file.log",
        f"--pid-file={folder}/munged.pid",
        f"--seed-file={folder}/munged.seed",
    )
    _wait(cluster, "munge socket", (folder / "munge.socket").exists, 15)
    node, hardware = _node_line(cluster.tools["slurmd"])
    cluster.node = node
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    (folder / "slurm.conf").write_text(_slurm_conf(folder, node, hardware, user))
    if _version(cluster.tools["slurmctld"]) >= (23, 2):  # 22.05 does not know "disabled"
        (folder / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    _start(cluster, "slurmctld", "-D")
    _start(cluster, "slurmd", "-D", "-N", node)
    _wait(cluster, f"idle node {node}", lambda: _node_idle(cluster))


def _stop(cluster: Cluster) -> None:
    """Cancel what is left of the jobs, then stop the daemons (SIGTERM, then SIGKILL) and wait for them."""
    if "slurmctld" in cluster.daemons and cluster.daemons["slurmctld"].poll() is None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            cluster.client("scancel", "--full", f"--user={getpass.getuser()}", timeout=10)
            deadline = time.monotonic() + 15
            while cluster.client("squeue", "-h", timeout=10).stdout.strip() and time.monotonic() < deadline:
                time.sleep(0.5)
    for name in ("slurmd", "slurmctld", "munged"):
        proc = cluster.daemons.get(name)
        if proc is None or proc.poll() is not None:
            continue
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A one-node cluster for this module's tests, torn down in every case (its folder removed)."""
    tools = {name: _tool(name) for name in TOOLS}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        pytest.skip(f"Slurm/munge not installed ({', '.join(missing)} missing): {INSTALL}")
    folder = Path(tempfile.mkdtemp(prefix="hwbench-slurm-"))
    folder.chmod(0o755)  # munged wants its socket's folder searchable by everyone
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
    env["SLURM_CONF"] = str(folder / "slurm.conf")
    made = Cluster(folder, env, "", {name: path for name, path in tools.items() if path}, {})
    try:
        _boot(made, getpass.getuser())
        yield made
    finally:
        _stop(made)
        shutil.rmtree(folder, ignore_errors=True)


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
