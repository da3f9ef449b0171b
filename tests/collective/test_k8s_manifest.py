"""ci/k8s: the Indexed Job that runs hwbench on N nodes and the fleet Job after it, read as kubectl
reads them once their placeholders are substituted the way the file's header says (envsubst with
the list of parameters); then the pods' own scripts run here, with the real hwbench, as two node
pods and the fleet pod would run them on the shared claim (a temporary folder here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import k8s_manifests as k8s
import pytest

from hwbench.results.files import load

JOB = k8s.K8S / "hwbench-job.yaml"
HOSTNAME_KEY = "kubernetes.io/hostname"
VALUES = {
    "HWBENCH_IMAGE": "registry.example.com/hwbench:1.2.3",
    "HWBENCH_NODES": "4",
    "HWBENCH_RUN_ID": "20260101-120000",
    "HWBENCH_RUN_ARGS": "--kernel gemm --profile quick",
    "HWBENCH_BURN_ARGS": "--interval 5",
    "HWBENCH_BURN_DURATION": "60",
    "HWBENCH_FLEET_ARGS": "--fail-on-outlier",
}


def _documents(values: dict[str, str] = VALUES) -> dict[str, dict[str, Any]]:
    docs = k8s.substituted(JOB, values)
    assert all(doc["apiVersion"] == "batch/v1" and doc["kind"] == "Job" for doc in docs)
    by_role = {doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc for doc in docs}
    assert set(by_role) == {"node", "fleet"} and len(docs) == 2
    return by_role


def test_every_parameter_is_documented_and_substituted() -> None:
    text = JOB.read_text()
    used = set(re.findall(r"\$\{(HWBENCH_\w+)\}", text))
    assert used == set(k8s.documented(JOB)) == set(VALUES)
    header = text.split("apiVersion:", 1)[0]
    assert all(re.search(rf"^#\s+{name}\s", header, re.M) for name in used), "a parameter is not described"
    docs = json.dumps(list(_documents().values()))
    assert "HWBENCH_" not in docs
    assert "$JOB_COMPLETION_INDEX" in docs and "$RESULTS" in docs  # the pods' own variables are left alone
    envsubst = shutil.which("envsubst")
    if envsubst is not None:  # GNU gettext's, where installed, does the same
        listed = " ".join(f"${{{name}}}" for name in k8s.documented(JOB))
        done = subprocess.run(
            [envsubst, listed], input=text, env={**os.environ, **VALUES}, capture_output=True, text=True
        )
        assert done.returncode == 0 and done.stdout == k8s.envsubst(text, VALUES)


def test_the_node_job_is_indexed_with_one_pod_per_node() -> None:
    job = _documents()["node"]
    spec, pod = job["spec"], k8s.pod(job)
    assert spec["completionMode"] == "Indexed"
    assert spec["parallelism"] == spec["completions"] == int(VALUES["HWBENCH_NODES"])
    # a failing node is not retried and does not stop the others
    assert spec["backoffLimitPerIndex"] == 0 and spec["maxFailedIndexes"] == spec["completions"]
    assert pod["restartPolicy"] == "Never"
    labels = job["spec"]["template"]["metadata"]["labels"]
    terms = pod.get("affinity", {}).get("podAntiAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
    spread = [c for c in pod.get("topologySpreadConstraints", []) if c.get("whenUnsatisfiable") == "DoNotSchedule"]
    selectors = [t["labelSelector"] for t in terms if t["topologyKey"] == HOSTNAME_KEY]
    selectors += [c["labelSelector"] for c in spread if c["topologyKey"] == HOSTNAME_KEY and c["maxSkew"] == 1]
    assert selectors, "nothing keeps two of the pods off one node"
    for selector in selectors:  # it selects this run's node pods: itself, not the fleet pod
        assert selector["matchLabels"].items() <= labels.items(), selector
        assert selector["matchLabels"].get("app.kubernetes.io/component") == "node"


def test_results_go_to_a_shared_read_write_many_claim() -> None:
    claim = k8s.claim()
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    for job in _documents().values():
        for container in k8s.containers(job):
            mount = k8s.mount(job, container)
            results = k8s.container_env(container, "n")["RESULTS"]
            assert results == f"{mount}/{VALUES['HWBENCH_RUN_ID']}", (container["name"], results)


def test_the_image_is_the_parameter() -> None:
    text = JOB.read_text()
    containers = [c for job in _documents().values() for c in k8s.containers(job)]
    assert len(containers) == 3 and {c["image"] for c in containers} == {VALUES["HWBENCH_IMAGE"]}
    assert text.count("image: ${HWBENCH_IMAGE}") == len(containers)


def test_the_pods_scripts_run_and_burn_into_the_claim_then_the_fleet(tmp_path: Path) -> None:
    """Two node pods of three: index 0 runs and burns, index 1 fails at once (an unknown backend,
    no burn); then the fleet pod, which waits for none (WAIT_S=0), runs the fleet over index 0's
    files and fails, naming index 1's status and index 2's absence."""
    values = {
        **VALUES,
        "HWBENCH_NODES": "3",
        "HWBENCH_RUN_ARGS": "--backend cpu --kernel gemm --impl numpy --dtype fp32 "
        "--shape gemm:M=64,N=64,K=64 --budget 0.05 -q",
        "HWBENCH_BURN_ARGS": "--backend cpu --shape gemm:M=128,N=128,K=128 --interval 0.2 --check-every 0.5 -q",
        "HWBENCH_BURN_DURATION": "1",
    }
    docs, claim = _documents(values), tmp_path / "claim"
    path = os.pathsep.join([k8s.hwbench_bin(tmp_path), os.environ.get("PATH", "")])
    node = docs["node"]["spec"]["template"]["spec"]["containers"][0]
    mount = k8s.mount(docs["node"], node)
    failing = {"RUN_ARGS": "--backend no-such-backend", "BURN_DURATION": "0"}
    pods = [
        subprocess.Popen(
            k8s.script(node),
            env=k8s.local_env(node, mount, claim, f"node-{index}", JOB_COMPLETION_INDEX=str(index), PATH=path, **extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index, extra in ((0, {}), (1, failing))
    ]
    outputs = [pod.communicate(timeout=120)[0] for pod in pods]
    assert [pod.returncode for pod in pods] == [0, 2], outputs
    run = claim / values["HWBENCH_RUN_ID"]
    tag = f"node-0-{values['HWBENCH_RUN_ID']}-i0"
    names = sorted(p.name for p in (run / "nodes").iterdir())
    assert names == [f"burn-{tag}.json", f"run-{tag}.json"]
    assert load(run / "nodes" / f"run-{tag}.json")["records"][0]["status"] == "ok"
    assert load(run / "nodes" / f"burn-{tag}.json")["burn"][0]["status"] == "ok"
    assert [(run / "status" / str(i)).read_text() for i in (0, 1)] == ["0\n", "2\n"]

    wait, fleet = k8s.containers(docs["fleet"])
    env = {"PATH": path, "WAIT_S": "0"}
    done = subprocess.run(
        k8s.script(wait), env=k8s.local_env(wait, mount, claim, "n", **env), capture_output=True, text=True
    )
    assert done.returncode == 0 and "not every node finished" in done.stderr, done.stderr
    done = subprocess.run(
        k8s.script(fleet), env=k8s.local_env(fleet, mount, claim, "n", **env), capture_output=True, text=True
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "node index 1: status 2" in done.stderr and "node index 2: status missing" in done.stderr
    assert "node index 0" not in done.stderr
    document = json.loads((run / "fleet.json").read_text())
    assert document["kind"] == "hwbench-fleet" and sorted(Path(name).name for name in document["files"]) == names


@pytest.mark.parametrize("name", ["hwbench-job.yaml", "hwbench-pvc.yaml"])
def test_manifests_are_plain_yaml(name: str) -> None:
    """No tabs, no aliases (every tool reads them alike), every document a mapping."""
    k8s.assert_plain_yaml(k8s.K8S / name)
