"""A real one-node Slurm cluster that tests start: munged with a key made here, slurmctld and one
slurmd on localhost, each in the foreground as a child of the test, with sockets, ports, state,
spool and logs in a temporary folder that goes away with them (``one_node_cluster``, which a
module-scoped fixture yields from).

The configuration is valid for Slurm 22.05 (Debian 12) and 24.11 (Debian 13): process tracking by
/proc (proctrack/linuxproc), no task plugin, no accounting, no cgroups (cgroup.conf says so on
Slurm >= 23.02, which has ``CgroupPlugin=disabled``). Where Slurm or munge is not installed, or a
daemon will not start, the tests that need the cluster are skipped with the daemon's own words.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SBIN = ("/usr/sbin", "/sbin", "/usr/local/sbin")
TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scancel", "squeue")
INSTALL = "apt-get install slurm-wlm munge"


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


#: Seconds a job credential lives, and so how long a requeued job waits before it may start again
#: (Slurm's default 120 s, most of the drill test's wall time): short here, where steps launch at once.
CRED_EXPIRE_S = 15


def _slurm_conf(folder: Path, node: str, hardware: str, user: str) -> str:
    return f"""\
ClusterName=hwbenchtest
SlurmctldHost=localhost
SlurmUser={user}
SlurmdUser={user}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={folder}/munge.socket,cred_expire={CRED_EXPIRE_S}
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


def one_node_cluster() -> Iterator[Cluster]:
    """A one-node cluster for a module's tests, torn down in every case (its folder removed): a
    module's fixture ``yield from``s it."""
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
