"""Device peaks and rental prices: the shipped catalog, lookups, and a user's own file."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from hwbench.core.errors import UserError
from hwbench.decide.catalog import Catalog, DevicePeak, PriceQuote, user_price


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.load()


def test_shipped_catalog_loads(catalog: Catalog) -> None:
    assert len(catalog.devices) >= 10
    assert len(catalog.prices) >= 10
    assert "nvidia-h200-sxm" in catalog.devices
    assert "amd-mi300x" in catalog.devices


def test_every_device_has_source_and_as_of(catalog: Catalog) -> None:
    missing = [
        key
        for key, entry in catalog.devices.items()
        if not str(entry.get("source", "")).strip() or not str(entry.get("as_of", "")).strip()
    ]
    assert missing == []


def test_every_price_row_has_source_and_as_of(catalog: Catalog) -> None:
    missing = [
        (row.get("provider"), row.get("instance"))
        for row in catalog.prices
        if not str(row.get("source", "")).strip() or not str(row.get("as_of", "")).strip()
    ]
    assert missing == []


def test_every_price_row_names_a_catalog_device_and_a_positive_price(catalog: Catalog) -> None:
    for row in catalog.prices:
        assert row["device"] in catalog.devices, row
        assert row.get("usd_per_hour", 0) > 0 or row.get("usd_per_gpu_hour", 0) > 0, row
        assert all(row[k] > 0 for k in ("usd_per_hour", "usd_per_gpu_hour", "gpus") if k in row), row
        if {"usd_per_hour", "usd_per_gpu_hour", "gpus"} <= row.keys():
            assert row["usd_per_gpu_hour"] == pytest.approx(row["usd_per_hour"] / row["gpus"], rel=1e-3), row


@pytest.mark.parametrize(
    "name,key",
    [
        ("NVIDIA H200", "nvidia-h200-sxm"),
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm-80gb"),
        ("NVIDIA A10G", "nvidia-a10g"),  # longest pattern wins over "NVIDIA A10"
        ("NVIDIA L40S", "nvidia-l40s"),  # over "L4"
        ("AMD Instinct MI300X", "amd-mi300x"),
        ("Intel(R) Xeon(R) Platinum 8480+", None),
        ("", None),
    ],
)
def test_match(catalog: Catalog, name: str, key: str | None) -> None:
    assert catalog.match(name) == key


def test_match_does_not_take_a100_pcie_for_a10(catalog: Catalog) -> None:
    assert catalog.match("NVIDIA A100 80GB PCIe") != "nvidia-a10"


def test_match_does_not_take_l40_for_l4(catalog: Catalog) -> None:
    assert catalog.match("NVIDIA L40") != "nvidia-l4"


def test_peak(catalog: Catalog) -> None:
    peak = catalog.peak("nvidia-h200-sxm", "bf16")
    assert peak == DevicePeak("nvidia-h200-sxm", 989.5, catalog.devices["nvidia-h200-sxm"]["source"], "2023-11")
    assert catalog.peak("nvidia-h200-sxm", "fp32").tflops == 67.0
    assert catalog.peak("nvidia-h200-sxm", "tf32").tflops == 494.5
    assert catalog.peak("nvidia-a100-sxm-80gb", "fp64").tflops == 9.7
    assert catalog.peak("amd-mi300x", "fp16").tflops == 1307.4
    assert isinstance(catalog.peak("nvidia-h100-sxm", "fp64").tflops, float)  # int in TOML, float out


def test_peak_missing(catalog: Catalog) -> None:
    assert catalog.peak("nvidia-a10g", "fp32") is None  # no peak_tflops at all
    assert catalog.peak("nvidia-l40s", "fp64") is None  # dtype not published
    assert catalog.peak("no-such-device", "fp32") is None


def test_price_median_of_on_demand_offers(catalog: Catalog) -> None:
    key = "nvidia-h200-sxm"
    rows = [r for r in catalog.prices if r["device"] == key]
    on_demand = [r for r in rows if r.get("usd_per_gpu_hour") and r.get("pricing", "").startswith("on-demand")]
    assert len(on_demand) >= 3
    assert len(on_demand) < len(rows)  # the marketplace offer is left out
    expected = statistics.median(r["usd_per_gpu_hour"] for r in on_demand)
    quote = catalog.price(key)
    assert quote.usd_per_hour == pytest.approx(expected)
    assert quote.basis == f"median of {len(on_demand)} on-demand offers"
    dates = sorted(r["as_of"] for r in on_demand)
    assert quote.as_of == f"{dates[0]}..{dates[-1]}"
    assert quote.source.startswith("catalog: ")
    for provider in {r["provider"] for r in on_demand}:
        assert provider in quote.source
    # the offers as shipped: 4.5, 4.59, 6.305, 7.912, 10.6, 10.6009 -> (6.305 + 7.912) / 2
    if sorted(r["usd_per_gpu_hour"] for r in on_demand) == [4.5, 4.59, 6.305, 7.912, 10.6, 10.6009]:
        assert quote.usd_per_hour == pytest.approx(7.1085)


def test_price_without_device_or_offer(catalog: Catalog) -> None:
    assert catalog.price(None) is None
    assert catalog.price("no-such-device") is None
    assert catalog.price("intel-gaudi3") is None  # no price rows at all
    assert catalog.price("cpu-aws-c7a") is None  # rows priced per instance, none per device


def test_price_of_instance(catalog: Catalog) -> None:
    quote = catalog.price(None, instance="c7a.xlarge")
    row = next(r for r in catalog.prices if r.get("instance") == "c7a.xlarge")
    assert quote == PriceQuote(
        row["usd_per_hour"], row["source"], row["as_of"], f"{row['provider']} c7a.xlarge ({row['pricing']})"
    )
    assert quote.usd_per_hour == 0.2053


def test_price_of_multi_gpu_instance_is_per_device(catalog: Catalog) -> None:
    quote = catalog.price(None, instance="p5en.48xlarge")
    assert quote.usd_per_hour == pytest.approx(63.296 / 8)
    assert catalog.price("nvidia-h100-sxm", instance="p5en.48xlarge") == quote  # the instance wins


def test_instance_priced_per_gpu_only(catalog: Catalog) -> None:
    name = "Standard_ND96isr_MI300X_v5"
    row = next(r for r in catalog.prices if r.get("instance") == name)
    assert "usd_per_hour" not in row and row["usd_per_gpu_hour"] == 6.0
    assert catalog.price(None, instance=name).usd_per_hour == 6.0


def test_unknown_instance(catalog: Catalog) -> None:
    with pytest.raises(UserError) as info:
        catalog.price(None, instance="m99.huge")
    assert "no price for instance 'm99.huge'" in str(info.value)
    assert "c7a.xlarge" in str(info.value)


@pytest.mark.parametrize("value", [0, 0.0, -1.5, float("nan"), float("inf")])
def test_user_price_rejects_non_positive(value: float) -> None:
    with pytest.raises(UserError, match="--price-per-hour must be a positive"):
        user_price(value)


def test_user_price() -> None:
    assert user_price(2) == PriceQuote(2.0, "--price-per-hour", "user", "given by the user")
    assert isinstance(user_price(2).usd_per_hour, float)


USER_FILE = """
[devices.my-gpu]
vendor = "acme"
name = "Acme X1"
match = ["Acme X1"]
peak_tflops = { fp32 = 12.5 }
source = "my lab"
as_of = "2026-01"

[[prices]]
device = "cpu-aws-c7a"
provider = "me"
instance = "c7a.xlarge"
usd_per_hour = 0.1
pricing = "negotiated"
source = "my invoice"
as_of = "2026-01"

[[prices]]
device = "my-gpu"
provider = "me"
instance = "x1"
gpus = 1
usd_per_hour = 3.0
usd_per_gpu_hour = 3.0
pricing = "on-demand"
source = "my invoice"
as_of = "2026-01"
"""


def test_user_catalog_overrides_a_price_and_adds_a_device(tmp_path: Path, catalog: Catalog) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(USER_FILE)
    mine = Catalog.load(path)
    quote = mine.price(None, instance="c7a.xlarge")
    assert quote.usd_per_hour == 0.1
    assert quote.source == "my invoice"
    assert catalog.price(None, instance="c7a.xlarge").usd_per_hour == 0.2053  # shipped one unchanged
    assert mine.match("Acme X1 rev2") == "my-gpu"
    assert mine.peak("my-gpu", "fp32").tflops == 12.5
    assert mine.price("my-gpu").usd_per_hour == 3.0
    assert len(mine.prices) == len(catalog.prices) + 2
    assert mine.peak("nvidia-h200-sxm", "bf16").tflops == 989.5  # shipped devices still there


def test_user_catalog_unreadable(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[prices]\nthis is not toml")
    with pytest.raises(UserError, match="catalog file .*bad.toml is not valid TOML"):
        Catalog.load(bad)
    with pytest.raises(UserError, match="catalog file .*absent.toml: no such file"):
        Catalog.load(tmp_path / "absent.toml")


def test_memory_bandwidth_and_host_link_come_with_their_sources() -> None:
    from hwbench.decide.catalog import Catalog

    catalog = Catalog(
        {
            "gpu-x": {
                "match": ["GPU X"],
                "mem_tbps": 4.8,
                "source": "https://example.org/x",
                "as_of": "2024-11",
                "host_link": {"gbps": 64, "kind": "PCIe 5.0 x16", "source": "https://example.org/p", "as_of": "2019"},
            },
            "gpu-y": {"match": ["GPU Y"], "host_link": {"gbps": "fast"}},
        },
        [],
    )
    memory = catalog.memory_bandwidth("Vendor GPU X 141GB")
    assert memory is not None and memory.gbps == 4800 and memory.source == "https://example.org/x"
    link = catalog.host_link("Vendor GPU X 141GB")
    assert link is not None and (link.gbps, link.what, link.as_of) == (64, "PCIe 5.0 x16", "2019")
    assert catalog.memory_bandwidth("GPU Y") is None and catalog.host_link("GPU Y") is None  # no figure, not a guess
    assert catalog.memory_bandwidth("unknown") is None and catalog.host_link("unknown") is None
    shipped = Catalog.load().memory_bandwidth("NVIDIA H200")
    assert shipped is not None and shipped.gbps == 4800
