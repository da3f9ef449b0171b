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
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hwbench.results.files import load

ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "ci" / "k8s" / "hwbench-job.yaml"
PVC = ROOT / "ci" / "k8s" / "hwbench-pvc.yaml"
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


def _documented() -> list[str]:
    """The parameters the header's envsubst command line substitutes."""
    found = re.search(r"envsubst '([^']*)'", JOB.read_text())
    assert found, "the header gives no envsubst command line"
    return re.findall(r"\$\{(\w+)\}", found[1])


def _envsubst(text: str, values: dict[str, str]) -> str:
    """What ``envsubst '${A} ${B}'`` does: $A and ${A} of the listed names replaced, nothing else."""
    names = "|".join(map(re.escape, values))
    return re.sub(rf"\$(?:\{{({names})\}}|({names})\b)", lambda m: values[m[1] or m[2]], text)


def _documents(values: dict[str, str] = VALUES) -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all(_envsubst(JOB.read_text(), {name: values[name] for name in _documented()})))
    assert all(doc["apiVersion"] == "batch/v1" and doc["kind"] == "Job" for doc in docs)
    by_role = {doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc for doc in docs}
    assert set(by_role) == {"node", "fleet"} and len(docs) == 2
    return by_role


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def _containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [*_pod(job).get("initContainers", []), *_pod(job)["containers"]]


def _claim() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(PVC.read_text())
    assert doc["kind"] == "PersistentVolumeClaim"
    return doc


def _mount(job: dict[str, Any], container: dict[str, Any]) -> str:
    """Where the container mounts the shared claim."""
    claim = _claim()["metadata"]["name"]
    volumes = [v["name"] for v in _pod(job)["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == claim]
    assert len(volumes) == 1, f"{job['metadata']['name']}: no volume of claim {claim}"
    mounts = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == volumes[0]]
    assert len(mounts) == 1, f"{container['name']} does not mount the claim"
    return str(mounts[0])


def _env(container: dict[str, Any], node: str) -> dict[str, str]:
    """The container's environment as the kubelet gives it (the downward API's node name: node)."""
    env = {}
    for item in container["env"]:
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            env[item["name"]] = node
        else:
            env[item["name"]] = str(item["value"])
    return env


def test_every_parameter_is_documented_and_substituted() -> None:
    text = JOB.read_text()
    used = set(re.findall(r"\$\{(HWBENCH_\w+)\}", text))
    assert used == set(_documented()) == set(VALUES)
    header = text.split("apiVersion:", 1)[0]
    assert all(re.search(rf"^#\s+{name}\s", header, re.M) for name in used), "a parameter is not described"
    docs = json.dumps(list(_documents().values()))
    assert "HWBENCH_" not in docs
    assert "$JOB_COMPLETION_INDEX" in docs and "$RESULTS" in docs  # the pods' own variables are left alone
    envsubst = shutil.which("envsubst")
    if envsubst is not None:  # GNU gettext's, where installed, does the same
        listed = " ".join(f"${{{name}}}" for name in _documented())
        done = subprocess.run(
            [envsubst, listed], input=text, env={**os.environ, **VALUES}, capture_output=True, text=True
        )
        assert done.returncode == 0 and done.stdout == _envsubst(text, VALUES)


def test_the_node_job_is_indexed_with_one_pod_per_node() -> None:
    job = _documents()["node"]
    spec, pod = job["spec"], _pod(job)
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
    claim = _claim()
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    for job in _documents().values():
        for container in _containers(job):
            mount = _mount(job, container)
            results = _env(container, "n")["RESULTS"]
            assert results == f"{mount}/{VALUES['HWBENCH_RUN_ID']}", (container["name"], results)


def test_the_image_is_the_parameter() -> None:
    text = JOB.read_text()
    containers = [c for job in _documents().values() for c in _containers(job)]
    assert len(containers) == 3 and {c["image"] for c in containers} == {VALUES["HWBENCH_IMAGE"]}
    assert text.count("image: ${HWBENCH_IMAGE}") == len(containers)


def _script(container: dict[str, Any]) -> list[str]:
    command = [*container["command"], *container["args"]]
    assert command[:2] == ["/bin/sh", "-c"] and len(command) == 3
    return [shutil.which("sh") or "/bin/sh", "-c", command[2]]


def _bin(tmp_path: Path) -> str:
    """A folder with ``hwbench`` in it: this interpreter's own."""
    here = Path(sys.executable).parent
    if (here / "hwbench").exists():
        return str(here)
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "hwbench").write_text(f'#!/bin/sh\nexec {sys.executable} -m hwbench "$@"\n')
    (folder / "hwbench").chmod(0o755)
    return str(folder)


def _local(container: dict[str, Any], mount: str, claim: Path, node: str, **extra: str) -> dict[str, str]:
    env = _env(container, node)
    env["RESULTS"] = str(claim / env["RESULTS"][len(mount) + 1 :])
    return {**os.environ, **env, **extra}


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
    path = os.pathsep.join([_bin(tmp_path), os.environ.get("PATH", "")])
    node = docs["node"]["spec"]["template"]["spec"]["containers"][0]
    mount = _mount(docs["node"], node)
    failing = {"RUN_ARGS": "--backend no-such-backend", "BURN_DURATION": "0"}
    pods = [
        subprocess.Popen(
            _script(node),
            env=_local(node, mount, claim, f"node-{index}", JOB_COMPLETION_INDEX=str(index), PATH=path, **extra),
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

    wait, fleet = _containers(docs["fleet"])
    env = {"PATH": path, "WAIT_S": "0"}
    done = subprocess.run(_script(wait), env=_local(wait, mount, claim, "n", **env), capture_output=True, text=True)
    assert done.returncode == 0 and "not every node finished" in done.stderr, done.stderr
    done = subprocess.run(_script(fleet), env=_local(fleet, mount, claim, "n", **env), capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "node index 1: status 2" in done.stderr and "node index 2: status missing" in done.stderr
    assert "node index 0" not in done.stderr
    document = json.loads((run / "fleet.json").read_text())
    assert document["kind"] == "hwbench-fleet" and sorted(Path(name).name for name in document["files"]) == names


@pytest.mark.parametrize("name", ["hwbench-job.yaml", "hwbench-pvc.yaml"])
def test_manifests_are_plain_yaml(name: str) -> None:
    """No tabs, no aliases (every tool reads them alike), every document a mapping."""
    text = (ROOT / "ci" / "k8s" / name).read_text()
    assert "\t" not in text
    events = list(yaml.parse(text))
    assert not any(isinstance(event, yaml.AliasEvent) for event in events)
    assert all(isinstance(doc, dict) for doc in yaml.safe_load_all(text))
