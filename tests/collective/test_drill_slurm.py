"""``hwbench drill --launcher slurm`` on the one-node cluster the tests start: the training is a batch
job submitted with --requeue; the seeded rank is SIGKILLed, the job requeues itself, and the next
attempt resumes from the checkpoint with every loss equal to the uninterrupted run's."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import needs
import pytest
from slurm_cluster import Cluster, one_node_cluster

needs.module("torch", "the training workload")

from hwbench.results.files import load  # noqa: E402

ARGS = ["--backend", "cpu", "--preset", "micro", "--ranks", "2", "--steps", "12", "--checkpoint-every", "4"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The module's one-node cluster."""
    yield from one_node_cluster()


def test_a_requeued_job_resumes_with_identical_losses(cluster: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "drill.json"
    folder = tmp_path / "work"
    folder.mkdir()
    folder.chmod(0o755)
    path = os.pathsep.join([str(Path(cluster.tools["sbatch"]).parent), "/usr/sbin", os.environ.get("PATH", "")])
    env = {**cluster.env, "PATH": path, "TMPDIR": str(folder)}
    done = subprocess.run(
        [sys.executable, "-m", "hwbench", "drill", *ARGS, "--launcher", "slurm", "--seed", "1", "-o", str(out)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    cluster.check_alive("during the drill")
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = load(out)["records"]
    d = record["drill"]
    assert record["impl"] == "slurm" and record["status"] == "ok", record["reason"]
    assert d["restarts"] == 1 and 0 <= d["steps_lost"] <= 4 and d["time_to_resume_s"] > 0
    assert d["losses"] == d["reference_losses"] and record["parity"]["exact"]
    assert not cluster.client("squeue", "-h").stdout.strip(), "a drill job outlived the drill"


def test_without_slurm_the_slurm_drill_is_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, PATH=str(Path(sys.executable).parent))
    done = subprocess.run(
        [sys.executable, "-m", "hwbench", "drill", *ARGS, "--launcher", "slurm", "-o", str(tmp_path / "d.json")],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    if done.returncode != 2 and Path("/usr/sbin/sbatch").exists():
        pytest.skip("sbatch is found in /usr/sbin, which the drill also searches")
    assert done.returncode == 2 and "needs Slurm's sbatch" in done.stderr, done.stderr
