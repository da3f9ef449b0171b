"""Make the frozen results files the compare, score and pp tests read.

    python tests/data/make_frozen.py            # derive the edited copies from the committed base files
    python tests/data/make_frozen.py --rerun    # first re-measure the base files on this machine

Base files are real hwbench runs with small shapes (``cpu-base.json``, ``probe-storage.json``,
``probe-startup.json``). Every other file is a deterministic edit of ``cpu-base.json``,
recorded in its ``warnings`` so nobody takes it for a measurement:

- ``cpu-new-same.json``: every sample x 1.005 (within the 2 % noise allowance);
- ``cpu-new-regressed.json``: gemm llvm fp32 M=64 samples x 1.5 (slower), gemm numpy fp32
  M=96 samples x 0.7 (faster), attention llvm fp32 crashed, gemm numpy fp64 M=64 dropped
  (base only), a gemm llvm fp32 M=128 case added (new only), another host name and numpy.
"""

from __future__ import annotations

import copy
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BASE = HERE / "cpu-base.json"
SYNTHETIC = "synthetic test data: {what}; derived from cpu-base.json by tests/data/make_frozen.py, not a measurement"


def hwbench(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "hwbench", *args], cwd=ROOT, check=True)


def rerun() -> None:
    """Measure the base files again (replacing them)."""
    for name in ("cpu-base.json", "probe-storage.json", "probe-startup.json"):
        (HERE / name).unlink(missing_ok=True)
    hwbench("run", "--backend", "cpu", "--shape", "gemm:M=64,N=64,K=64", "--shape", "gemm:M=96,N=80,K=72",
            "--shape", "attention:B=1,H=2,S=64,D=32", "--budget", "0.02", "--quiet", "--out", str(BASE))
    with tempfile.TemporaryDirectory(dir=ROOT) as scratch:
        hwbench("probe", "storage", "--dir", scratch, "--size", "4MiB", "--runtime", "1",
                "--out", str(HERE / "probe-storage.json"))
    hwbench("probe", "startup", "--backend", "cpu", "--shape", "M=128,N=128,K=128", "--repeat", "3",
            "--out", str(HERE / "probe-startup.json"))


def find(doc: dict[str, Any], kernel: str, impl: str, dtype: str, **shape: int) -> dict[str, Any]:
    """The one record with these coordinates."""
    hits = [r for r in doc["records"] if (r["kernel"], r["impl"], r["dtype"]) == (kernel, impl, dtype)
            and all(r["shape"].get(k) == v for k, v in shape.items())]
    assert len(hits) == 1, (kernel, impl, dtype, shape, len(hits))
    return hits[0]


def retime(record: dict[str, Any], factor: float) -> None:
    """Scale every time of a record by ``factor`` (its metrics are derived again afterwards)."""
    timing = record["timing"]
    timing["samples_s"] = [s * factor for s in timing["samples_s"]]
    for key, value in list(timing.items()):
        if key.endswith("_s") and key not in ("samples_s", "resolution_s") and isinstance(value, float):
            timing[key] = value * factor


def derive(name: str, what: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Write ``name``: a copy of the base with ``edit`` applied and its metrics derived again."""
    from hwbench.decide.catalog import Catalog
    from hwbench.results.derive import add_metrics
    from hwbench.results.files import dumps, validate

    doc = copy.deepcopy(json.loads(BASE.read_text()))
    edit(doc)
    add_metrics(doc, Catalog.load())
    doc["run"]["id"] = doc["run"]["id"][:24] + hashlib.sha256(name.encode()).hexdigest()[:8]
    doc["warnings"] = [*doc.get("warnings", []), SYNTHETIC.format(what=what)]
    problems = validate(json.loads(dumps(doc)))
    assert not problems, problems
    (HERE / name).write_text(dumps(doc))


def same(doc: dict[str, Any]) -> None:
    for record in doc["records"]:
        if record["status"] == "ok":
            retime(record, 1.005)


def regressed(doc: dict[str, Any]) -> None:
    retime(find(doc, "gemm", "llvm", "fp32", M=64), 1.5)
    retime(find(doc, "gemm", "numpy", "fp32", M=96), 0.7)
    crashed = find(doc, "attention", "llvm", "fp32")
    crashed.update(status="crashed", reason="the worker process killed by SIGSEGV")
    crashed["timing"] = {"median_s": None, "iqr_s": None, "cv": None, "n": 0, "timer": None}
    crashed["metrics"] = {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None}
    doc["records"].remove(find(doc, "gemm", "numpy", "fp64", M=64))
    added = copy.deepcopy(find(doc, "gemm", "llvm", "fp32", M=64))
    added["shape"] = {"M": 128, "N": 64, "K": 64}
    retime(added, 2.0)
    doc["records"].append(added)
    doc["host"]["hostname"] = "ci-runner-b"
    doc["software"]["numpy"] = "9.9.9"


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    if "--rerun" in argv:
        if shutil.which("fio") is None:
            print("make_frozen: fio is not installed; probe-storage.json would only hold a skipped record",
                  file=sys.stderr)
            return 2
        rerun()
    derive("cpu-new-same.json", "every time x 1.005", same)
    derive("cpu-new-regressed.json", "gemm llvm M=64 x 1.5, gemm numpy fp32 M=96 x 0.7, attention llvm crashed, "
           "gemm numpy fp64 M=64 removed, gemm llvm M=128 added, host and numpy changed", regressed)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
