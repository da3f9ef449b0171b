"""What the tests of ``ci/k8s`` share: the manifests read as kubectl reads them once their
placeholders are substituted the way each file's header says (envsubst with its list of
parameters), and the pods' own scripts run here, with the real hwbench, on a shared claim
(a temporary folder)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "ci" / "k8s"
PVC = K8S / "hwbench-pvc.yaml"


def documented(manifest: Path) -> list[str]:
    """The parameters the header's envsubst command line substitutes."""
    found = re.search(r"envsubst '([^']*)'", manifest.read_text())
    assert found, f"{manifest.name}: the header gives no envsubst command line"
    return re.findall(r"\$\{(\w+)\}", found[1])


def envsubst(text: str, values: dict[str, str]) -> str:
    """What ``envsubst '${A} ${B}'`` does: $A and ${A} of the listed names replaced, nothing else."""
    names = "|".join(map(re.escape, values))
    return re.sub(rf"\$(?:\{{({names})\}}|({names})\b)", lambda m: values[m[1] or m[2]], text)


def substituted(manifest: Path, values: dict[str, str]) -> list[dict[str, Any]]:
    """The manifest's documents with the documented parameters substituted from ``values``."""
    text = envsubst(manifest.read_text(), {name: values[name] for name in documented(manifest)})
    return list(yaml.safe_load_all(text))


def pod(job: dict[str, Any]) -> dict[str, Any]:
    """A Job's pod spec."""
    spec: dict[str, Any] = job["spec"]["template"]["spec"]
    return spec


def containers(job: dict[str, Any]) -> list[dict[str, Any]]:
    """A Job's init containers, then its containers."""
    return [*pod(job).get("initContainers", []), *pod(job)["containers"]]


def claim() -> dict[str, Any]:
    """The shared claim of ``ci/k8s/hwbench-pvc.yaml``."""
    doc: dict[str, Any] = yaml.safe_load(PVC.read_text())
    assert doc["kind"] == "PersistentVolumeClaim"
    return doc


def mount(job: dict[str, Any], container: dict[str, Any]) -> str:
    """Where the container mounts the shared claim."""
    name = claim()["metadata"]["name"]
    volumes = [v["name"] for v in pod(job)["volumes"] if v.get("persistentVolumeClaim", {}).get("claimName") == name]
    assert len(volumes) == 1, f"{job['metadata']['name']}: no volume of claim {name}"
    mounts = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == volumes[0]]
    assert len(mounts) == 1, f"{container['name']} does not mount the claim"
    return str(mounts[0])


def container_env(container: dict[str, Any], node: str) -> dict[str, str]:
    """The container's environment as the kubelet gives it (the downward API's node name: node)."""
    env = {}
    for item in container["env"]:
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            env[item["name"]] = node
        else:
            env[item["name"]] = str(item["value"])
    return env


def script(container: dict[str, Any]) -> list[str]:
    """The container's ``/bin/sh -c`` script as a command line here."""
    command = [*container["command"], *container["args"]]
    assert command[:2] == ["/bin/sh", "-c"] and len(command) == 3
    return [shutil.which("sh") or "/bin/sh", "-c", command[2]]


def hwbench_bin(tmp_path: Path) -> str:
    """A folder with ``hwbench`` in it: this interpreter's own."""
    here = Path(sys.executable).parent
    if (here / "hwbench").exists():
        return str(here)
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "hwbench").write_text(f'#!/bin/sh\nexec {sys.executable} -m hwbench "$@"\n')
    (folder / "hwbench").chmod(0o755)
    return str(folder)


def local_env(container: dict[str, Any], at: str, claim_dir: Path, node: str, **extra: str) -> dict[str, str]:
    """The container's environment here: its ``RESULTS`` under ``claim_dir`` in place of the mount ``at``."""
    env = container_env(container, node)
    env["RESULTS"] = str(claim_dir / env["RESULTS"][len(at) + 1 :])
    return {**os.environ, **env, **extra}


def assert_plain_yaml(manifest: Path) -> None:
    """No tabs, no aliases (every tool reads them alike), every document a mapping."""
    text = manifest.read_text()
    assert "\t" not in text
    events = list(yaml.parse(text))
    assert not any(isinstance(event, yaml.AliasEvent) for event in events)
    assert all(isinstance(doc, dict) for doc in yaml.safe_load_all(text))
