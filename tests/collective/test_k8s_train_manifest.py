"""ci/k8s/hwbench-train.yaml: the Indexed Job that runs ``hwbench train`` on one node, stamped with
its submit time, read as kubectl reads it once its placeholders are substituted the way its header
says; then its pod's script runs here, with the real hwbench and torch, on a shared claim (a
temporary folder), and the record's submit-to-first-step counts from the manifest's stamp.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import k8s_manifests as k8s
import needs

from hwbench.results.files import load

TRAIN = k8s.K8S / "hwbench-train.yaml"
VALUES = {
    "HWBENCH_IMAGE": "registry.example.com/hwbench:1.2.3",
    "HWBENCH_RUN_ID": "20260101-120000",
    "HWBENCH_SUBMIT_TIME": "1767268800.25",
    "HWBENCH_TRAIN_ARGS": "--preset small --compile off",
}


def _job(values: dict[str, str] = VALUES) -> dict[str, Any]:
    (doc,) = k8s.substituted(TRAIN, values)
    assert doc["apiVersion"] == "batch/v1" and doc["kind"] == "Job"
    return doc


def test_every_parameter_is_documented_and_substituted() -> None:
    text = TRAIN.read_text()
    used = set(re.findall(r"\$\{(HWBENCH_\w+)\}", text))
    assert used == set(k8s.documented(TRAIN)) == set(VALUES)
    header = text.split("apiVersion:", 1)[0]
    assert all(re.search(rf"^#\s+{name}\s", header, re.M) for name in used), "a parameter is not described"
    job = json.dumps(_job())
    assert "${HWBENCH_" not in job and VALUES["HWBENCH_IMAGE"] in job
    assert "$RESULTS" in job and "$TRAIN_ARGS" in job  # the pod's own variables are left alone
    k8s.assert_plain_yaml(TRAIN)


def test_the_submit_time_is_stamped_and_a_failed_index_is_run_again() -> None:
    job = _job()
    assert job["metadata"]["annotations"]["hwbench/submit-time"] == VALUES["HWBENCH_SUBMIT_TIME"]
    (container,) = k8s.containers(job)
    env = k8s.container_env(container, "node-a")
    assert env["HWBENCH_SUBMIT_TIME"] == VALUES["HWBENCH_SUBMIT_TIME"]
    assert env["HWBENCH_SUBMIT_SOURCE"] == "kubernetes manifest stamp"
    assert env["TRAIN_ARGS"] == VALUES["HWBENCH_TRAIN_ARGS"] and container["image"] == VALUES["HWBENCH_IMAGE"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 1
    assert spec["backoffLimitPerIndex"] >= 1 and k8s.pod(job)["restartPolicy"] == "Never"
    assert env["RESULTS"] == f"{k8s.mount(job, container)}/{VALUES['HWBENCH_RUN_ID']}"
    shm = [v for v in k8s.pod(job)["volumes"] if v["name"] in {m["name"] for m in container["volumeMounts"]}]
    assert {"name": "shm", "emptyDir": {"medium": "Memory"}} in shm


def test_the_pods_script_trains_into_the_claim_from_the_stamp(tmp_path: Path) -> None:
    needs.module("torch", "the training workload")
    stamp = time.time() - 30.0  # submitted half a minute ago: the queueing the figure must include
    values = {
        **VALUES,
        "HWBENCH_SUBMIT_TIME": f"{stamp:.3f}",
        "HWBENCH_TRAIN_ARGS": "--backend cpu --preset micro --steps 20 --compile off -q",
    }
    job, claim = _job(values), tmp_path / "claim"
    (container,) = k8s.containers(job)
    path = os.pathsep.join([k8s.hwbench_bin(tmp_path), os.environ.get("PATH", "")])
    env = k8s.local_env(container, k8s.mount(job, container), claim, "node-a", PATH=path, TMPDIR=str(tmp_path))
    done = subprocess.run(k8s.script(container), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    (out,) = (claim / values["HWBENCH_RUN_ID"]).iterdir()
    assert re.fullmatch(r"train-node-a-.+\.json", out.name), out.name
    records = load(out)["records"]
    assert records and all(r["status"] == "ok" for r in records), [r["reason"] for r in records]
    first, *later = (record["train"] for record in records)  # cold caches first, then warm
    assert first["submit_source"] == "kubernetes manifest stamp" and first["submit_to_first_step_s"] >= 30.0
    assert first["phases_s"]["launch"] is not None and first["phases_s"]["launch"] >= 29.0
    assert later and all(t["submit_source"] == "process launch" for t in later)  # the stamp is the first launch's
    assert all(t["submit_to_first_step_s"] < first["submit_to_first_step_s"] for t in later)
