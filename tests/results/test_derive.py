"""Metrics filled into a results document: throughput, % of peak, porting overhead, cost."""

from __future__ import annotations

import copy
import statistics
from typing import Any

import pytest

from hwbench.decide.catalog import Catalog
from hwbench.results.derive import add_metrics
from hwbench.results.files import validate

SHAPE = {"M": 1000, "N": 1000, "K": 1000}  # 2e9 flops, 1.2e7 bytes in fp32


def _record(
    impl: str,
    kind: str | None,
    median: float | None,
    status: str = "ok",
    *,
    backend: str = "cpu",
    device_index: int | None = 0,
    dtype: str = "fp32",
    shape: dict | None = None,
    kernel: str = "gemm",
) -> dict[str, Any]:
    return {
        "kernel": kernel,
        "impl": impl,
        "impl_kind": kind,
        "language": "test",
        "backend": backend,
        "device": "Test CPU",
        "device_index": device_index,
        "dtype": dtype,
        "shape": dict(shape or SHAPE),
        "status": status,
        "reason": "" if status == "ok" else f"{status} on purpose",
        "parity": {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None},
        "timing": {
            "median_s": median,
            "iqr_s": None,
            "cv": None,
            "n": 0 if median is None else 10,
            "timer": None if median is None else "perf_counter",
        },
        "metrics": {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None},
    }


def _doc(records: list[dict[str, Any]], price: dict | None, devices: list[dict] | None = None) -> dict[str, Any]:
    devices = (
        devices
        if devices is not None
        else [
            {
                "backend": "cpu",
                "index": 0,
                "name": "Test CPU",
                "vendor": "test",
                "kind": "cpu",
                "peak": {"tflops": {"fp32": 2.0, "fp64": 1.0}, "method": "measured fma loop"},
            },
            {"backend": "cpu", "index": 1, "name": "Other CPU", "vendor": "test", "kind": "cpu", "peak": None},
        ]
    )
    return {
        "schema_version": 1,
        "kind": "hwbench-results",
        "run": {
            "id": "r",
            "started": "2026-01-01T00:00:00+00:00",
            "finished": None,
            "incomplete": False,
            "command": ["hwbench", "run"],
            "seed": 0,
            "price": price,
            "hwbench": {"version": "0.1.0"},
        },
        "host": {"hostname": "h", "os": "Linux", "cpu": {"model": "Test CPU", "cores": 4}},
        "software": {},
        "settings": {},
        "warnings": [],
        "backends": [
            {"name": "cpu", "available": True, "reason": "", "devices": devices},
            {"name": "cuda", "available": False, "reason": "no GPU", "devices": []},
        ],
        "records": records,
    }


PRICE = {"usd_per_hour": 2.0, "source": "--price-per-hour", "as_of": "user", "basis": "given by the user"}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


@pytest.fixture
def derived(catalog: Catalog) -> dict[str, Any]:
    records = [
        _record("*", None, None, "skipped", backend="cuda", device_index=-1, dtype="", shape={}),
        _record("portable", "portable", 0.02),  # listed before its native
        _record("blas", "native", 0.01),  # the first native: the twin
        _record("other-native", "native", 0.005),  # a later native is not used
        _record("broken", "portable", None, "parity_failed"),
        _record("portable", "portable", 0.04, dtype="fp64"),  # no fp64 native
        _record("portable", "portable", 0.02, device_index=1),  # other device, no native there
    ]
    doc = _doc(records, PRICE)
    add_metrics(doc, catalog)
    return doc


def test_tflops_gbps_from_flops_and_median(derived) -> None:
    m = derived["records"][2]["metrics"]  # native, 0.01 s
    assert m["tflops"] == pytest.approx(2e9 / 0.01 / 1e12)  # 0.2
    assert m["gbps"] == pytest.approx(4 * 3e6 / 0.01 / 1e9)  # 1.2
    p = derived["records"][1]["metrics"]  # portable, 0.02 s
    assert p["tflops"] == pytest.approx(0.1)
    assert p["gbps"] == pytest.approx(0.6)


def test_pct_peak_from_the_devices_own_peak(derived) -> None:
    native, portable, fp64 = (derived["records"][i]["metrics"] for i in (2, 1, 5))
    assert native["pct_peak"] == pytest.approx(10.0)  # 0.2 of 2.0 TFLOPS
    assert native["peak_tflops"] == 2.0
    assert native["peak_source"] == "measured fma loop"
    assert portable["pct_peak"] == pytest.approx(5.0)
    assert fp64["tflops"] == pytest.approx(0.05)
    assert fp64["pct_peak"] == pytest.approx(5.0)  # 0.05 of the fp64 peak 1.0


def test_no_peak_gives_none(derived) -> None:
    other = derived["records"][6]["metrics"]  # device 1 has no peak and no catalog match
    assert other["tflops"] == pytest.approx(0.1)
    assert other["peak_tflops"] is None
    assert other["pct_peak"] is None


def test_porting_overhead_against_first_native_twin(derived) -> None:
    portable = derived["records"][1]["metrics"]
    assert portable["native_impl"] == "blas"
    assert portable["porting_overhead"] == pytest.approx(1 - 0.01 / 0.02)  # 0.5


def test_speed_against_the_first_and_the_fastest_native(derived) -> None:
    """A ratio people read (0.5x: half the native's speed), against the first native listed and the fastest."""
    portable = derived["records"][1]["metrics"]
    assert portable["speed_vs_native"] == pytest.approx(0.01 / 0.02)
    assert portable["fastest_native_impl"] == "other-native"
    assert portable["speed_vs_fastest_native"] == pytest.approx(0.005 / 0.02)


def test_natives_and_twinless_portables_have_no_overhead(derived) -> None:
    for i in (2, 3, 5, 6):
        m = derived["records"][i]["metrics"]
        assert m["porting_overhead"] is None, derived["records"][i]["impl"]
        assert m["native_impl"] is None
        assert m["speed_vs_native"] is None and "speed_vs_fastest_native" not in m


def test_tflops_per_usd_hour_from_run_price(derived) -> None:
    m = derived["records"][1]["metrics"]
    assert m["usd_per_hour"] == 2.0
    assert m["tflops_per_usd_hour"] == pytest.approx(0.1 / 2.0)
    assert m["price_source"] == "given by the user; --price-per-hour; as of user"
    assert derived["records"][2]["metrics"]["tflops_per_usd_hour"] == pytest.approx(0.2 / 2.0)


def test_non_ok_records_keep_none_metrics(derived) -> None:
    for i in (0, 4):
        m = derived["records"][i]["metrics"]
        assert m == {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None}


def test_derived_document_is_still_valid(derived) -> None:
    assert validate(derived) == []


def test_failed_native_is_not_a_twin(catalog: Catalog) -> None:
    records = [
        _record("blas", "native", None, "runtime_error"),
        _record("blas2", "native", 0.03),
        _record("portable", "portable", 0.02),
    ]
    doc = _doc(records, PRICE)
    add_metrics(doc, catalog)
    m = doc["records"][2]["metrics"]
    assert m["native_impl"] == "blas2"
    assert m["porting_overhead"] == pytest.approx(1 - 0.03 / 0.02)  # -0.5: faster than the native


def test_shape_and_kernel_are_part_of_the_twin(catalog: Catalog) -> None:
    other_shape = {"M": 1000, "N": 1000, "K": 500}
    records = [
        _record("blas", "native", 0.01, shape=other_shape),
        _record("portable", "portable", 0.02),
        _record("portable", "portable", 0.01, shape={"K": 500, "N": 1000, "M": 1000}),  # same shape, other order
    ]
    doc = _doc(records, PRICE)
    add_metrics(doc, catalog)
    assert doc["records"][1]["metrics"]["porting_overhead"] is None
    assert doc["records"][2]["metrics"]["porting_overhead"] == pytest.approx(0.0)
    assert doc["records"][2]["metrics"]["tflops"] == pytest.approx(0.1)  # 1e9 flops in 0.01 s


def test_catalog_peak_and_price_by_device_name(catalog: Catalog) -> None:
    devices = [{"backend": "cpu", "index": 0, "name": "NVIDIA H200", "vendor": "nvidia", "kind": "gpu"}]
    doc = _doc([_record("portable", "portable", 0.001)], None, devices)
    add_metrics(doc, catalog)
    m = doc["records"][0]["metrics"]
    assert m["tflops"] == pytest.approx(2.0)
    peak = catalog.peak("nvidia-h200-sxm", "fp32").tflops
    assert m["peak_tflops"] == peak
    assert m["pct_peak"] == pytest.approx(100 * 2.0 / peak)
    assert m["peak_source"].startswith("datasheet nvidia-h200-sxm (")
    rows = [
        r["usd_per_gpu_hour"]
        for r in catalog.prices
        if r["device"] == "nvidia-h200-sxm" and r.get("usd_per_gpu_hour") and r["pricing"].startswith("on-demand")
    ]
    assert m["usd_per_hour"] == pytest.approx(statistics.median(rows))
    assert m["tflops_per_usd_hour"] == pytest.approx(2.0 / statistics.median(rows))
    assert "as of" in m["price_source"]


def test_own_peak_wins_over_catalog(catalog: Catalog) -> None:
    devices = [
        {
            "backend": "cpu",
            "index": 0,
            "name": "NVIDIA H200",
            "vendor": "nvidia",
            "kind": "gpu",
            "peak": {"tflops": {"fp32": 40.0}, "method": "measured"},
        }
    ]
    doc = _doc([_record("portable", "portable", 0.001)], PRICE, devices)
    add_metrics(doc, catalog)
    m = doc["records"][0]["metrics"]
    assert m["peak_tflops"] == 40.0
    assert m["pct_peak"] == pytest.approx(5.0)
    assert m["usd_per_hour"] == 2.0  # the run's price wins over the catalog's


def test_add_metrics_is_idempotent(catalog: Catalog, derived) -> None:
    again = copy.deepcopy(derived)
    add_metrics(again, catalog)
    assert again == derived


@pytest.mark.parametrize(("median", "share"), [(0.016, 100 * (67108864 / 0.016 / 1e9) / 63.0), (0.0001, None)])
def test_a_host_copy_is_a_share_of_the_host_link_and_never_above_it(
    catalog: Catalog, median: float, share: float | None
) -> None:
    record = _record(
        "torch_copy",
        "native",
        median,
        kernel="transfer",
        backend="cuda",
        shape={"dir": 0, "bytes": 67108864, "pinned": 1, "peer": 0},
    )
    record["config"] = {"link": "host", "measures": "bandwidth"}
    gpu = {
        "backend": "cuda",
        "index": 0,
        "name": "NVIDIA H200",
        "vendor": "nvidia",
        "kind": "gpu",
        "extra": {"host_link_gbps": 63.0, "host_link": "PCIe 5.0 x16", "host_link_source": "nvml"},
    }
    doc = _doc([record], None, [])
    doc["backends"][1].update(available=True, reason="", devices=[gpu])
    add_metrics(doc, catalog)
    (out,) = doc["records"]
    if share is None:  # 671 GB/s over a 63 GB/s link: refused
        assert out["status"] == "implausible" and "PCIe 5.0 x16" in out["reason"], out
    else:
        assert out["status"] == "ok" and out["metrics"]["pct_host_link"] == pytest.approx(share)
        assert out["metrics"]["host_link_gbps"] == 63.0 and "nvml" in out["metrics"]["host_link_source"]
        validate(doc)
