"""Regenerate the frozen inputs of tests/decide/test_check.py: one H100 node that passes, fails, or misses checks.

    .venv/bin/python tests/data/acceptance/make_acceptance.py

Deterministic (fixed figures, the run metadata of tests/data/cpu-base.json), so reruns give
the same bytes. Two H100s (cuda:0, cuda:1) of host ``h100-node``:

- pass.json: GEMM bf16 at 70 % and fp32 at 75 % of peak, stream triad 2,900 GB/s, a 2-rank NCCL
  AllReduce sweep (busbw up to 360 GB/s, 15 us under 1 KiB, each rank's median);
  pass-burn.json: what ``hwbench burn`` writes: no records, ``burn`` (decay 2 %, no
  mismatch) and ``health`` (clean) for both GPUs.
- fail.json: records, burn and health in one file: GEMM bf16 at 45 %, triad 2,300 GB/s,
  busbw up to 200 GB/s; cuda:0's burn found a mismatch, cuda:1 decayed 9 % and reports
  uncorrectable ECC errors.
- missing.json: GEMM only (no stream, AllReduce, burn or health).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # tests/: the synthetic documents
sys.path.insert(0, str(HERE.parents[2]))

from synthetic_results import device, document, record, write  # noqa: E402

GPU = "NVIDIA H100 80GB HBM3"
PEAK = {"bf16": 989.5, "fp32": 67.0}
HOST = "h100-node"


def _gemm(index: int, dtype: str, pct: float) -> dict[str, Any]:
    size = 8192
    tflops = PEAK[dtype] * pct / 100
    return record(
        "gemm",
        "cublas",
        dtype,
        {"M": size, "N": size, "K": size},
        2 * size**3 / tflops / 1e12,
        backend="cuda",
        device=GPU,
        index=index,
        impl_kind="native",
        tflops=tflops,
        pct_peak=pct,
        peak_tflops=PEAK[dtype],
        peak_source="datasheet nvidia-h100-sxm",
    )


def _triad(index: int, gbps: float) -> dict[str, Any]:
    n = 2**28
    return record(
        "stream",
        "torch",
        "fp32",
        {"n": n, "op": 3},
        3 * 4 * n / gbps / 1e9,
        backend="cuda",
        device=GPU,
        index=index,
        impl_kind="native",
        gbps=gbps,
    )


def _allreduce(peak_gbps: float) -> list[dict[str, Any]]:
    out = []
    for count in (64, 256, 2**20, 2**26):
        nbytes = 4 * count
        median = 15e-6 + nbytes / (peak_gbps * 1e9)  # busbw = algbw for 2 ranks
        r = record(
            "allreduce",
            "nccl",
            "fp32",
            {"count": count, "ranks": 2, "in_place": 0},
            median,
            backend="cuda",
            device=GPU,
            index=0,
            impl_kind="native",
            busbw_gbps=nbytes / median / 1e9,
            algbw_gbps=nbytes / median / 1e9,
        )
        r["timing"]["rank_p50_s"] = [median * 0.99, median]
        out.append(r)
    return out


def _burn(index: int, decay_pct: float, mismatches: list[dict[str, Any]]) -> dict[str, Any]:
    series = [
        {
            "t_s": 60.0 * k,
            "iterations": 4000 * k,
            "tflops": 690.0 * (1 - decay_pct / 100 * k / 10),
            "clock_mhz": 1755.0,
            "temp_c": 60.0 + k,
            "power_w": 695.0,
        }
        for k in range(1, 11)
    ]
    return {
        "backend": "cuda",
        "device_index": index,
        "device": GPU,
        "kernel": "gemm",
        "impl": "cublas",
        "dtype": "bf16",
        "shape": {"M": 8192, "N": 8192, "K": 8192},
        "duration_s": 600.0,
        "elapsed_s": 600.2,
        "interval_s": 60.0,
        "check_every_s": 10.0,
        "check_every_iterations": 1000,
        "iterations": 40000,
        "checks": 60,
        "mismatches": mismatches,
        "series": series,
        "decay_ratio": 1 - decay_pct / 100,
        "decay_pct": decay_pct,
        "decay_window_s": 60.0,
        "throttled": decay_pct > 5,
        "throttle_reasons": ["hw_thermal_slowdown"] if decay_pct > 5 else [],
        "stopped_by": None,
        "status": "mismatch" if mismatches else "ok",
        "reason": f"{len(mismatches)} check(s) found wrong values" if mismatches else "",
    }


def _health(index: int, ecc: int) -> dict[str, Any]:
    return {
        "backend": "cuda",
        "device_index": index,
        "device": GPU,
        "sources": ["nvml"],
        "readings": {"ecc_uncorrected": ecc, "retired_pages": 0, "xid_events": 0, "pcie_gen": 5, "pcie_width": 16},
        "problems": [f"{ecc} uncorrectable ECC errors since boot"] if ecc else [],
        "skipped": {"nvlink": "no NVLink on this device"},
        "clean": not ecc,
    }


def _checked(r: dict[str, Any]) -> dict[str, Any]:
    """A record whose output was checked against the float64 reference, and passed."""
    r["parity"] = {"max_abs_err": 0.0, "max_rel_err": 0.0, "atol": 0.0, "rtol": 0.0, "exact": True, "passed": True}
    return r


def _node(records: list[dict[str, Any]]) -> dict[str, Any]:
    records = [_checked(r) for r in records]
    gpus = [{**device("cuda", GPU, "gpu", index=i), "driver": "580.65", "runtime": "13.0"} for i in (0, 1)]
    doc = document(records, gpus)
    doc["host"] = {**doc["host"], "hostname": HOST}
    if any(r["kernel"] == "allreduce" for r in records):
        doc["collective"] = {"participants": [{"rank": r, "hostname": HOST, "device": f"cuda:{r}"} for r in (0, 1)]}
    return doc


def main() -> None:
    good = [_gemm(i, d, p) for i in (0, 1) for d, p in (("bf16", 70.0), ("fp32", 75.0))]
    write(HERE / "pass.json", _node(good + [_triad(i, 2900.0) for i in (0, 1)] + _allreduce(360.0)))
    burn = _node([])
    burn["burn"] = [_burn(i, 2.0, []) for i in (0, 1)]
    burn["health"] = [_health(i, 0) for i in (0, 1)]
    write(HERE / "pass-burn.json", burn)

    bad = [_gemm(i, "bf16", 45.0 if i == 0 else 70.0) for i in (0, 1)] + [_triad(i, 2300.0) for i in (0, 1)]
    fail = _node(bad + _allreduce(200.0))
    mismatch = {"iteration": 4711, "t_s": 123.4, "max_abs_err": 0.5, "count": 3}
    fail["burn"] = [_burn(0, 1.0, [mismatch]), _burn(1, 9.0, [])]
    fail["health"] = [_health(0, 0), _health(1, 2)]
    write(HERE / "fail.json", fail)

    write(HERE / "missing.json", _node([_gemm(i, "bf16", 70.0) for i in (0, 1)]))


if __name__ == "__main__":
    main()
