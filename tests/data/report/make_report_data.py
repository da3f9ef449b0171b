"""Regenerate the frozen inputs of tests/report/test_report.py from the committed reference run.

    .venv/bin/python tests/data/report/make_report_data.py

Deterministic: every file derives from results/cpu-epyc-2core-standard.json (a real run)
by fixed edits, so reruns give the same bytes.

- full-cpu.json: the reference run (samples cut to 20 per record) plus an OpenCL device
  with portable records (the llvm timings scaled by fixed factors), a parity failure, a
  crash, and a ``compile`` section of compile-only records.
- gpu-h100.json: an H100 node derived from the CPU records: GEMM and attention natives
  and portables with timings set from fixed efficiencies of the datasheet peak, a
  compile error, and AllReduce (nccl native, llvm portable) over message sizes, half of
  the points with algbw/busbw stated, half left for the report to derive.
- minimal.json: no backend available: every record skipped, no compile section, no
  warnings: every section of the report says "no data".
- sparse.json: a device without a peak, records without throughput or p99, an AllReduce
  record with a median only.

Each synthetic file says so in its ``warnings``.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from hwbench.decide.catalog import Catalog  # noqa: E402
from hwbench.results.derive import add_metrics  # noqa: E402
from hwbench.results.files import dumps, validate  # noqa: E402
from hwbench.run.stats import summarize  # noqa: E402

HERE = Path(__file__).resolve().parent
SOURCE = ROOT / "results" / "cpu-epyc-2core-standard.json"
NOTE = "synthetic test input derived by tests/data/report/make_report_data.py; not a measurement"


def _trim(record: dict[str, Any]) -> dict[str, Any]:
    record = copy.deepcopy(record)
    if "samples_s" in record.get("timing", {}):
        record["timing"]["samples_s"] = record["timing"]["samples_s"][:20]
    return record


def _timed(record: dict[str, Any], median_s: float) -> dict[str, Any]:
    """``record`` with a fixed set of samples around ``median_s`` and metrics cleared."""
    samples = [median_s * f for f in (0.97, 0.99, 1.0, 1.0, 1.01, 1.02, 1.06)]
    s = summarize(samples)
    record["timing"] = {"median_s": s.median, "iqr_s": s.iqr, "q1_s": s.q1, "q3_s": s.q3, "mean_s": s.mean,
                        "std_s": s.std, "cv": s.cv, "min_s": s.min, "max_s": s.max, "p99_s": s.p99, "n": s.n,
                        "timer": record["timing"].get("timer") or "cuda_event", "resolution_s": 1e-6,
                        "flushed": True, "warmup": 10, "stopped_by": "noise", "samples_s": samples}
    record["metrics"] = {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None}
    record["warnings"] = []
    return record


def full_cpu(ref: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(ref)
    doc["records"] = [_trim(r) for r in doc["records"]]
    doc["warnings"] = [NOTE + " (OpenCL device, failures and compile section added)"]
    device = copy.deepcopy(doc["backends"][0]["devices"][0])
    device.update({"backend": "opencl", "name": "pthread-AMD EPYC (PoCL 6.0)", "driver": "6.0", "runtime": "OpenCL 3.0"})
    doc["backends"].append({"name": "opencl", "available": True, "reason": "", "devices": [device]})
    factors = (1.3, 1.15, 2.1, 0.95)
    extra = []
    for i, r in enumerate(x for x in doc["records"] if x["impl"] == "llvm" and x["kernel"] == "gemm"):
        o = _timed(copy.deepcopy(r), r["timing"]["median_s"] * factors[i % len(factors)])
        o.update({"backend": "opencl", "impl": "opencl", "language": "opencl-c", "device": device["name"],
                  "config": {"local_size": [16, 16]}})
        extra.append(o)
    first = extra[0]
    bad = copy.deepcopy(first)
    bad.update({"status": "parity_failed", "reason": "max abs err 3.1e-02 > atol 6.6e-05 at 14 elements",
                "shape": {"M": 333, "N": 517, "K": 259}, "timing": {"median_s": None, "iqr_s": None, "cv": None,
                                                                    "n": 0, "timer": None}})
    bad["parity"].update({"max_abs_err": 0.031, "passed": False, "mismatches": 14})
    crash = copy.deepcopy(bad)
    crash.update({"kernel": "attention", "status": "crashed", "reason": "worker died with SIGSEGV",
                  "shape": {"batch": 1, "heads": 8, "seq_q": 512, "seq_k": 512, "head_dim": 64, "causal": 1}})
    crash["parity"] = {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None}
    doc["records"] += extra + [bad, crash]
    doc["compile"] = [
        {"kernel": "gemm", "impl": "llvm", "language": "llvmlite", "target": "sm_90", "vendor": "nvidia",
         "variant": "gemm_fp32", "dtype": "fp32", "status": "ok", "reason": "", "config": {"BM": 128, "BN": 128},
         "registers": 168, "spill_stores_bytes": 0, "spill_loads_bytes": 0, "spilled": False,
         "shared_bytes": 32768, "private_bytes": 0, "tensor_core": {}, "compile_s": 0.41},
        {"kernel": "gemm", "impl": "triton", "language": "triton", "target": "sm_90", "vendor": "nvidia",
         "variant": "gemm_bf16", "dtype": "bf16", "status": "ok", "reason": "", "config": {"num_warps": 8},
         "registers": 232, "spill_stores_bytes": 96, "spill_loads_bytes": 96, "spilled": True,
         "shared_bytes": 131072, "private_bytes": 96, "tensor_core": {"wgmma": 16}, "compile_s": 1.9},
        {"kernel": "attention", "impl": "llvm", "language": "llvmlite", "target": "gfx942", "vendor": "amd",
         "variant": "attention_fp32_d64", "dtype": "fp32", "status": "ok", "reason": "", "registers": 96,
         "sgprs": 48, "vgpr_spills": 0, "sgpr_spills": 0, "spilled": False, "shared_bytes": 16384,
         "tensor_core": {"mfma": 0}, "compile_s": 0.77},
        {"kernel": "attention", "impl": "triton", "language": "triton", "target": "gfx90a", "vendor": "amd",
         "variant": "attention_fp16_d128_causal", "dtype": "fp16", "status": "compile_error",
         "reason": "triton is not installed", "compile_s": None},
    ]
    add_metrics(doc, Catalog.load())
    return doc


def gpu_h100(ref: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(ref)
    doc["warnings"] = [NOTE]
    doc["run"]["id"] = "5e1f0c2a9b7d4e63a8c1f2d3b4a59687"
    doc["host"].update({"hostname": "gpu-node", "cpu": {"model": "Intel Xeon Platinum 8480+", "cores": 112,
                                                         "logical_cpus": 224, "machine": "x86_64", "features": []}})
    doc["software"].update({"torch": "2.13.0+cu130", "triton": "3.6.0", "cuda_runtime": "13.0", "nccl": "2.28.3"})
    device = {"backend": "cuda", "index": 0, "name": "NVIDIA H100 80GB HBM3", "vendor": "NVIDIA", "kind": "gpu",
              "arch": "sm_90", "compute_units": 132, "memory_bytes": 85520809984, "driver": "580.65",
              "runtime": "13.0", "libraries": {"cublas": "13.1"}, "extra": {}, "peak": None}
    doc["backends"] = [{"name": "cuda", "available": True, "reason": "", "devices": [device]},
                       {"name": "rocm", "available": False, "reason": "no ROCm runtime (libamdhip64.so not found)",
                        "devices": []}]
    impls = {"gemm": [("cublas", "native", 0.80), ("triton", "portable", 0.72), ("llvm", "portable", 0.35)],
             "attention": [("torch_sdpa", "native", 0.55), ("triton", "portable", 0.41), ("llvm", "portable", 0.12)]}
    records = []
    for r in ref["records"]:
        if r["status"] != "ok" or r["impl_kind"] != "native" or r["dtype"] != "fp32":
            continue
        for name, kind, eff in impls[r["kernel"]]:
            o = copy.deepcopy(r)
            o.update({"impl": name, "impl_kind": kind, "language": name, "backend": "cuda", "device": device["name"],
                      "device_index": 0, "config": {}})
            flops = r["metrics"]["tflops"] * 1e12 * r["timing"]["median_s"]
            records.append(_timed(o, max(flops / (67e12 * eff), 2e-6)))  # H100 fp32 peak: 67 TFLOPS
    broken = copy.deepcopy(records[1])
    broken.update({"status": "compile_error", "reason": "triton: out of shared memory (needs 262144 B, has 232448 B)",
                   "shape": {"M": 4097, "N": 4097, "K": 4097}})
    records.append(broken)
    template = records[0]
    for i, exp in enumerate(range(8, 27, 2)):
        count = 2 ** exp // 4
        for name, kind, base in (("nccl", "native", 1.0), ("llvm", "portable", 1.35)):
            o = copy.deepcopy(template)
            o.update({"kernel": "allreduce", "impl": name, "impl_kind": kind, "shape": {"count": count, "ranks": 8},
                      "parity": {"max_abs_err": 0.0, "max_rel_err": 0.0, "atol": 0.0, "rtol": 0.0, "mismatches": 0,
                                 "passed": True, "exact": True}})
            latency = base * (12e-6 + 4 * count / 380e9)
            o = _timed(o, latency)
            o["config"] = {"stated_bandwidth": i % 2 == 0}
            records.append(o)
    doc["records"] = records
    doc["run"]["price"] = {"usd_per_hour": 2.99, "source": "--price-per-hour", "as_of": "user",
                           "basis": "given by the user"}
    add_metrics(doc, Catalog.load())
    for o in records:  # half the AllReduce points state their bandwidths, half leave them to the report
        if o["kernel"] == "allreduce":
            algbw = 4 * o["shape"]["count"] / o["timing"]["median_s"] / 1e9
            if o["config"].pop("stated_bandwidth"):
                o["metrics"].update({"algbw_gbps": algbw, "busbw_gbps": algbw * 2 * 7 / 8})
            else:
                o["metrics"].pop("algbw_gbps", None)
                o["metrics"].pop("busbw_gbps", None)
    return doc


def minimal(ref: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(ref)
    doc.pop("warnings")
    doc["software"] = {"python": "3.11.7", "numpy": "2.4.6"}
    doc["settings"] = {}
    doc["backends"] = [{"name": "cpu", "available": False, "reason": "llvmlite is not installed (pip install "
                        "'hwbench[cpu]')", "devices": []}]
    doc["records"] = [
        {"kernel": k, "impl": "*", "impl_kind": None, "language": None, "backend": "cpu", "device": None,
         "device_index": -1, "dtype": "", "shape": {}, "status": "skipped",
         "reason": "backend cpu unavailable: llvmlite is not installed (pip install 'hwbench[cpu]')",
         "parity": {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None},
         "timing": {"median_s": None, "iqr_s": None, "cv": None, "n": 0, "timer": None},
         "metrics": {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None}}
        for k in ("gemm", "attention", "allreduce")]
    return doc


def sparse(ref: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(ref)
    doc["warnings"] = [NOTE + " (fields removed)"]
    device = doc["backends"][0]["devices"][0]
    device.pop("peak")
    kept = [_trim(r) for r in ref["records"][:4]]
    for r in kept:
        r["metrics"] = {"tflops": r["metrics"]["tflops"], "pct_peak": None, "porting_overhead": None,
                        "tflops_per_usd_hour": None}
        r["timing"].pop("p99_s", None)
    ar = copy.deepcopy(kept[0])
    ar.update({"kernel": "allreduce", "impl": "shm", "impl_kind": "native", "shape": {"count": 262144, "ranks": 2},
               "parity": {"max_abs_err": 0.0, "max_rel_err": 0.0, "atol": 0.0, "rtol": 0.0, "passed": True}})
    ar["timing"] = {"median_s": 2.5e-4, "iqr_s": None, "cv": None, "n": 5, "timer": "perf_counter"}
    ar["metrics"] = {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None}
    doc["records"] = kept + [ar]
    return doc


def main() -> int:
    ref = json.loads(SOURCE.read_text())
    for name, make in (("full-cpu", full_cpu), ("gpu-h100", gpu_h100), ("minimal", minimal), ("sparse", sparse)):
        doc = make(ref)
        problems = validate(doc)
        if problems:
            print(f"{name}: {problems[0]}", file=sys.stderr)
            return 1
        (HERE / f"{name}.json").write_text(dumps(doc))
        print(f"wrote {HERE / name}.json ({len(doc['records'])} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
