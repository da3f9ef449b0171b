"""hwbench tco: the model's arithmetic by hand, the worked example, break-even utilization, the
score's TCO cost basis and TFLOPS per watt, bad input, and the report's TCO section."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from synthetic_results import DATA, device, document, record, write

from hwbench.cli.main import main
from hwbench.decide.catalog import Catalog
from hwbench.decide.platform import Platform
from hwbench.decide.score import score_platforms
from hwbench.decide.tco import break_even, resolve, score_cost, tco_document, year_rows
from hwbench.decide.tco_model import load_model, model_from
from hwbench.decide.weights import load_weights
from hwbench.report import build
from hwbench.results.checked import Loaded

EXAMPLE = Path(__file__).resolve().parents[2] / "hwbench" / "decide" / "data" / "tco-example.toml"
MATMUL = {"M": 1024, "N": 1024, "K": 1024}
SMALL = {
    "years": 3,
    "utilization": 0.5,
    "platforms": [
        {
            "name": "small",
            "device": "Test GPU",
            "servers": 1,
            "devices_per_server": 2,
            "price_per_device": 10000,
            "datacenter_buildout": 4000,
            "staff_per_year": 1000,
            "electricity_per_kwh": 0.1,
            "watts_per_device": 500,
            "host_watts_per_server": 200,
            "pue": 1.2,
            "idle_power_fraction": 0.2,
            "depreciation_per_year": 0.25,
            "rent_per_device_hour": 2.0,
            "rent_source": "quote 1",
            "rent_as_of": "2026-11",
        }
    ],
}


def _model(data: dict[str, Any], **changes: Any) -> Any:
    data = copy.deepcopy(data)
    data["platforms"][0].update(changes)
    return model_from(data, Path("model.toml"))


def _energy(watts: float, tflops_per_watt: float | None) -> dict[str, Any]:
    """A record's ``energy`` as a run that measured it writes it."""
    return {
        "joules_per_call": watts * 1e-3,
        "watts": watts,
        "tflops_per_watt": tflops_per_watt,
        "gbps_per_watt": None,
        "source": "nvml",
        "method": "counter",
        "window_s": 1.0,
        "calls": 1000,
        "error_pct": 0.5,
        "reason": "",
    }


def _gpu_doc(tflops: float, watts: float | None = None, gpu: str = "Test GPU") -> dict[str, Any]:
    """A results document: one bf16 GEMM on ``gpu``, with measured energy when ``watts``."""
    doc = document(
        [record("gemm", "cublas", "bf16", MATMUL, tflops=tflops, backend="cuda", device=gpu, impl_kind="native")],
        [device("cuda", gpu, "gpu")],
    )
    if watts is not None:
        doc["records"][0]["energy"] = _energy(watts, tflops / watts)
    return doc


def _gpu_file(name: str, tflops: float, watts: float | None = None, gpu: str = "Test GPU") -> Loaded:
    """:func:`_gpu_doc` as loaded from the file ``name``."""
    return Loaded(Path(name), _gpu_doc(tflops, watts, gpu))


def test_arithmetic_by_hand() -> None:
    inputs = resolve(_model(SMALL).platforms[0], _model(SMALL), Catalog.load(), [_gpu_file("g.json", 100.0)])
    # capex = 2 devices x 10000 + 4000 build-out = 24000; written off at 25 % = 6000 a year
    assert inputs.capex == 24000 and inputs.depreciation(1) == 6000
    # full-load power (2 x 500 W + 200 W) = 1.2 kW; x PUE 1.2 x 8760 h x 0.1 USD = 1261.44 USD a year
    assert inputs.power_kw == pytest.approx(1.2) and inputs.electricity_full_year == pytest.approx(1261.44)
    rows = year_rows(inputs, 3, 0.5)
    # electricity at u = 0.5 with idle share 0.2: 1261.44 x (0.2 + 0.8 x 0.5) = 756.864
    assert rows[0]["owning"]["electricity"] == pytest.approx(756.864)
    # owning a year = 6000 + 756.864 + 1000 staff = 7756.864; three years 23270.592
    assert rows[0]["owning"]["total"] == pytest.approx(7756.864)
    assert rows[2]["owning_cumulative"] == pytest.approx(23270.592)
    # renting = 2 USD x 2 devices x 8760 h x 0.5 = 17520 a year; three years 52560
    assert rows[0]["renting"] == pytest.approx(17520) and rows[2]["renting_cumulative"] == pytest.approx(52560)
    assert rows[2]["cheaper"] == "owning"
    # 100 TFLOPS x 2 x 8760 x 0.5 / 1000 = 876 PFLOP-hours a year; 23270.592 / (3 x 876) = 8.8548676
    assert rows[2]["delivered_pflop_hours"] == pytest.approx(2628)
    assert rows[2]["owning_per_pflop_hour"] == pytest.approx(8.8548676)
    # renting: 2 USD per device-hour / 0.1 PFLOPS = 20 USD per PFLOP-hour
    assert rows[0]["renting_per_pflop_hour"] == pytest.approx(20.0)
    # break-even over 3 years: fixed A = 3 x 6000 + 3 x 1000 + 3 x 1261.44 x 0.2 = 21756.864,
    # owning per unit u B = 3 x 1261.44 x 0.8 = 3027.456, renting R = 3 x 2 x 2 x 8760 = 105120:
    # u = A / (R - B) = 21756.864 / 102092.544 = 0.2131092
    assert break_even(inputs, 3)["utilization"] == pytest.approx(0.2131092)
    assert rows[0]["break_even"]["utilization"] == pytest.approx(0.2131092)  # linear while depreciating


def test_depreciation_stops_at_the_write_off() -> None:
    model = _model(SMALL, depreciation_per_year=0.4)
    inputs = resolve(model.platforms[0], model, Catalog.load(), [])
    # 24000 at 40 %: 9600, 9600, then the remaining 4800, then nothing
    assert [inputs.depreciation(y) for y in (1, 2, 3, 4)] == pytest.approx([9600, 9600, 4800, 0])


def test_break_even_is_where_both_cost_the_same() -> None:
    model = _model(SMALL)
    inputs = resolve(model.platforms[0], model, Catalog.load(), [])
    u = break_even(inputs, 3)["utilization"]
    last = year_rows(inputs, 3, u)[-1]
    assert last["owning_cumulative"] == pytest.approx(last["renting_cumulative"])


@pytest.mark.parametrize(
    "changes,cheaper,text",
    [
        # rent 0.01 USD/h: renting's cost per unit of utilization (3 x 0.01 x 2 x 8760 = 525.6) is below
        # owning's electricity (3027.456): renting is cheaper at every utilization
        ({"rent_per_device_hour": 0.01}, "renting", "renting is cheaper at every utilization"),
        # rent 0.2 USD/h: R = 10512, u = 21756.864 / (10512 - 3027.456) = 2.9 > 1
        ({"rent_per_device_hour": 0.2}, "renting", "renting is cheaper up to 100 % utilization"),
        # nothing fixed (free hardware, no build-out, no staff, no idle power): owning is cheaper
        (
            {"price_per_device": 0, "datacenter_buildout": 0, "staff_per_year": 0, "idle_power_fraction": 0},
            "owning",
            "owning is cheaper at every utilization",
        ),
    ],
)
def test_break_even_never(changes: dict[str, Any], cheaper: str, text: str) -> None:
    model = _model(SMALL, **changes)
    found = break_even(resolve(model.platforms[0], model, Catalog.load(), []), 3)
    assert found["utilization"] is None and found["cheaper"] == cheaper
    assert found["text"].startswith("never: ") and text in found["text"]


def test_worked_example_figures() -> None:
    model = load_model(EXAMPLE)
    catalog = Catalog.load()
    assert (model.currency, model.rate.per_usd, model.rate.as_of, model.years) == ("CNY", 7.1, "2026-11", 5)
    assert model.utilizations == (0.35, 0.68)
    doc = tco_document(model, catalog)
    air, liquid = doc["platforms"]
    rent = catalog.price("nvidia-a100-sxm-80gb").usd_per_hour * 7.1  # the catalog's A100 price in CNY
    for platform in (air, liquid):
        i = platform["inputs"]
        # 100 servers x (8 x 400 W catalog TDP + 3300 W) = 650 kW
        assert i["devices"] == 800 and i["power_kw"] == pytest.approx(650.0)
        assert "TDP" in i["watts_per_device"]["source"]
        assert i["rent_per_device_hour"]["value"] == pytest.approx(rent)
        assert "7.1 CNY/USD" in i["rent_per_device_hour"]["source"]
        assert i["tflops"]["value"] is None
    # air: 30 M + 15 M = 45 M; 650 kW x 1.5 x 8760 h x 0.6 CNY = 5 124 600 CNY a year at full load
    assert air["inputs"]["initial_investment"] == pytest.approx(45e6)
    assert air["inputs"]["electricity_full_year"] == pytest.approx(5_124_600)
    # liquid: 45 M x 1.3 = 58.5 M; 650 x 1.15 x 8760 x 0.6 = 3 928 860 CNY
    assert liquid["inputs"]["initial_investment"] == pytest.approx(58.5e6)
    assert liquid["inputs"]["electricity_full_year"] == pytest.approx(3_928_860)
    at35 = air["scenarios"][0]["years"]
    # year 1 at 35 %: 9 M depreciation + 2 M staff + 0.35 x 5 124 600 = 12 793 610 CNY
    assert at35[0]["owning"]["total"] == pytest.approx(12_793_610)
    # five years at 68 %: 45 M + 10 M + 5 x 0.68 x 5 124 600 = 72 423 640 CNY
    assert air["scenarios"][1]["years"][4]["owning_cumulative"] == pytest.approx(72_423_640)
    # liquid, five years at 35 %: 58.5 M + 10 M + 5 x 0.35 x 3 928 860 = 75 375 505 CNY
    assert liquid["scenarios"][0]["years"][4]["owning_cumulative"] == pytest.approx(75_375_505)
    # renting, year 1 at 35 %: 800 x 8760 h x 0.35 x rent
    assert at35[0]["renting"] == pytest.approx(800 * 8760 * 0.35 * rent)
    # break-even over 5 years: (45 M + 10 M) / (5 x 800 x 8760 x rent - 5 x 5 124 600)
    assert air["break_even"]["utilization"] == pytest.approx(55e6 / (5 * 7_008_000 * rent - 25_623_000))


def test_worked_example_with_measured_power_and_tflops() -> None:
    model = load_model(EXAMPLE)
    measured = _gpu_file("a100.json", 250.0, watts=300.0, gpu="NVIDIA A100-SXM4-80GB")
    air = tco_document(model, Catalog.load(), [measured])["platforms"][0]
    i = air["inputs"]
    assert i["watts_per_device"]["value"] == 300.0 and "a100.json#records[0]" in i["watts_per_device"]["source"]
    # 100 x (8 x 300 W + 3300 W) = 570 kW; x 1.5 x 8760 x 0.6 = 4 493 880 CNY a year at full load
    assert i["power_kw"] == pytest.approx(570.0) and i["electricity_full_year"] == pytest.approx(4_493_880)
    five = air["scenarios"][0]["years"][4]
    # 55 M + 5 x 0.35 x 4 493 880 = 62 864 290 CNY over 3 066 000 PFLOP-hours
    # (250 TFLOPS x 800 x 8760 h x 0.35 x 5 / 1000) = 20.503682 CNY per delivered PFLOP-hour
    assert five["owning_cumulative"] == pytest.approx(62_864_290)
    assert five["delivered_pflop_hours"] == pytest.approx(3_066_000)
    assert five["owning_per_pflop_hour"] == pytest.approx(20.503682)
    rent = Catalog.load().price("nvidia-a100-sxm-80gb").usd_per_hour * 7.1
    assert five["renting_per_pflop_hour"] == pytest.approx(rent * 1000 / 250)


def test_power_falls_back_to_another_measured_record_then_the_model() -> None:
    model = _model(SMALL)
    spec, catalog = model.platforms[0], Catalog.load()
    loaded = _gpu_file("g.json", 100.0)
    stream = record("stream", "torch", "fp32", {"n": 1 << 20}, backend="cuda", device="Test GPU", gbps=900.0)
    stream["energy"] = _energy(420.0, None)
    loaded.doc["records"].append(stream)
    inputs = resolve(spec, model, catalog, [loaded])
    assert inputs.device_watts.value == 420.0 and "highest" in inputs.device_watts.source
    assert resolve(spec, model, catalog, []).device_watts.source == "model file: watts_per_device"


def _platform(name: str, loaded: Loaded) -> Platform:
    return Platform(name, (loaded,), None, {"usd_per_hour": 1.0, "price_source": "quote", "price_as_of": "2026-11"})


def _write_density_weights(tmp_path: Path, extra: str = "") -> Path:
    weights = tmp_path / "w.toml"
    weights.write_text("[dimensions.compute_density]\nweight = 100\n" + extra)
    return weights


COST_MODEL = """years = 1
utilization = 0.5
electricity_per_kwh = 0.0
depreciation_per_year = 1.0
watts_per_device = 300
[[platforms]]
name = "A"
device = "Alpha GPU"
price_per_device = 100000
[[platforms]]
name = "other name"
device = "Beta GPU"
price_per_device = 1000
"""


def test_score_with_tco_cost_changes_the_ranking(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, gpu, price in (("a", "Alpha GPU", 1.0), ("b", "Beta GPU", 2.0)):
        write(
            tmp_path / f"{name}.json",
            document(
                [record("gemm", "cublas", "bf16", MATMUL, tflops=100.0, backend="cuda", device=gpu)],
                [device("cuda", gpu, "gpu")],
            ),
        )
        (tmp_path / f"{name}.toml").write_text(
            f'usd_per_hour = {price}\nprice_source = "quote {name}"\nprice_as_of = "2026-11"\n'
        )
    (tmp_path / "model.toml").write_text(COST_MODEL)
    platforms = [f"{n.upper()}={tmp_path / f'{n}.json'},{tmp_path / f'{n}.toml'}" for n in ("a", "b")]
    weights = _write_density_weights(tmp_path)
    assert main(["score", *platforms, "--weights", str(weights), "--json"]) == 0
    rental = json.loads(capsys.readouterr().out)
    assert rental["cost_basis"] == "rental" and [p["name"] for p in rental["platforms"]] == ["A", "B"]
    assert (
        main(["score", *platforms, "--weights", str(weights), "--json", "--cost", f"tco:{tmp_path / 'model.toml'}"])
        == 0
    )
    owned = json.loads(capsys.readouterr().out)
    assert owned["cost_basis"].startswith("tco:") and "TCO" in owned["dimensions"]["compute_density"]["unit"]
    b, a = owned["platforms"]
    assert (b["name"], a["name"]) == ("B", "A")
    # A (by name): 100000 USD over 1 year of 8760 h at 50 %: 22.83 USD per used hour; 100 TFLOPS x 4380 / 100000 = 4.38
    assert a["dimensions"]["compute_density"]["raw"] == pytest.approx(4.38)
    assert a["dimensions"]["compute_density"]["source"]["tco_platform"] == "A"
    # B (by device): 1000 USD: 100 x 4380 / 1000 = 438, the best: 100; A: 100 x 4.38 / 438 = 1
    assert b["dimensions"]["compute_density"]["raw"] == pytest.approx(438.0)
    assert b["dimensions"]["compute_density"]["source"]["tco_platform"] == "other name"
    assert (b["total"], a["total"]) == pytest.approx((100.0, 1.0))
    assert main(["score", *platforms, "--weights", str(weights), "--cost", f"tco:{tmp_path / 'model.toml'}"]) == 0
    assert "cost: A: 22.83 USD per used hour (TCO of " in capsys.readouterr().out


def test_score_tco_platform_missing_from_the_model(tmp_path: Path) -> None:
    model = model_from(
        {
            "electricity_per_kwh": 0.1,
            "platforms": [{"device": "Alpha GPU", "price_per_device": 1, "watts_per_device": 1}],
        },
        tmp_path / "m.toml",
    )
    dims, origin = load_weights(_write_density_weights(tmp_path))
    cost = score_cost(model, Catalog.load())
    doc = score_platforms([_platform("Z", _gpu_file("z.json", 10.0))], dims, Catalog.load(), origin, cost)
    entry = doc["platforms"][0]["dimensions"]["compute_density"]
    assert entry["missing"] and "no platform named 'Z' nor one of device 'Test GPU'" in entry["reason"]


def test_tflops_per_watt_dimension(tmp_path: Path) -> None:
    assert "tflops_per_watt" not in load_weights()[0]  # optional: not in the default matrix
    weights = tmp_path / "w.toml"
    weights.write_text("[dimensions.compute_density]\nweight = 50\n[dimensions.tflops_per_watt]\nweight = 50\n")
    dims, origin = load_weights(weights)
    assert dims["tflops_per_watt"].unit == "TFLOPS/W" and dims["tflops_per_watt"].mode == "relative"
    measured = _platform("M", _gpu_file("m.json", 200.0, watts=400.0))  # 0.5 TFLOPS/W
    better = _platform("E", _gpu_file("e.json", 100.0, watts=100.0))  # 1 TFLOPS/W
    unmeasured = _gpu_file("u.json", 300.0)
    unmeasured.doc["sensors"] = [
        {
            "backend": "cuda",
            "device_index": 0,
            "device": "Test GPU",
            "source": None,
            "energy": False,
            "reason": "NVML not readable",
        }
    ]
    doc = score_platforms([measured, better, _platform("U", unmeasured)], dims, Catalog.load(), origin)
    got = {p["name"]: p["dimensions"]["tflops_per_watt"] for p in doc["platforms"]}
    assert got["M"]["raw"] == pytest.approx(0.5) and got["M"]["score"] == pytest.approx(50.0)
    assert got["E"]["raw"] == pytest.approx(1.0) and got["E"]["score"] == pytest.approx(100.0)
    assert got["M"]["source"]["watts"] == 400.0 and got["M"]["source"]["record"] == "m.json#records[0]"
    assert (
        got["U"]["missing"]
        and "no GEMM record on 'Test GPU' has TFLOPS per watt: NVML not readable" in got["U"]["reason"]
    )
    plain = score_platforms([_platform("P", _gpu_file("p.json", 1.0))], dims, Catalog.load(), origin)
    assert "no energy readings" in plain["platforms"][0]["dimensions"]["tflops_per_watt"]["reason"]


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], expected: str) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.startswith("hwbench: error: "), err
    assert expected in err, err


GOOD = '[[platforms]]\ndevice = "nvidia-a100-sxm-80gb"\nprice_per_device = 10000\nelectricity_per_kwh = 0.1\n'
BAD_MODELS = [
    (GOOD.replace("10000", "-1"), "price_per_device must not be negative"),
    (GOOD.replace("0.1", "-0.1"), "electricity_per_kwh must not be negative"),
    (GOOD + "staff_per_year = -5\n", "staff_per_year must not be negative"),
    (GOOD + 'rent_per_device_hour = -2.0\nrent_source = "q"\nrent_as_of = "2026-11"\n', "must be positive"),
    (GOOD + "pue = 0.9\n", "pue must be at least 1"),
    ("utilization = 0\n" + GOOD, "utilization must lie in (0, 1]"),
    ("utilization = 1.5\n" + GOOD, "utilization must lie in (0, 1]"),
    ("utilization = [0.3, -0.1]\n" + GOOD, "utilization must lie in (0, 1]"),
    ("years = 0\n" + GOOD, "years must be a whole number of at least 1"),
    ("years = -3\n" + GOOD, "years must be a whole number of at least 1"),
    ("years = 2.5\n" + GOOD, "years must be a whole number of at least 1"),
    ('currency = "CNY"\n' + GOOD, "currency CNY needs its rate"),
    ('currency = "EUR"\n[rate]\nper_usd = 0.9\n' + GOOD, "currency EUR needs its rate"),
    ('currency = "EUR"\n[rate]\nper_usd = 0\nas_of = "2026-11"\n' + GOOD, "rate.per_usd must be a positive number"),
    ('currency = "yuan"\n' + GOOD, "three-letter code"),
    ('[rate]\nper_usd = 7.1\nas_of = "2026-11"\n' + GOOD, "[rate] is for a currency other than USD"),
    ("colour = 1\n" + GOOD, "unknown key 'colour'"),
    (GOOD + "gpus = 8\n", "unknown key 'gpus'"),
    ('currency = "CNY"\n[rate]\nper_usd = 7.1\nas_of = "2026-11"\nwhen = 1\n' + GOOD, "unknown key 'when'"),
    (GOOD + "rent_per_device_hour = 2.0\n", "needs rent_source and rent_as_of"),
    (GOOD + "price_per_server = 5\n", "exactly one of price_per_server and price_per_device"),
    (GOOD + 'cooling = "water"\n', 'cooling must be "air" or "liquid"'),
    (GOOD + "depreciation_per_year = 0\n", "depreciation_per_year must lie in (0, 1]"),
    (GOOD + "idle_power_fraction = 2\n", "idle_power_fraction must lie between 0 and 1"),
    (GOOD + "servers = 0\n", "servers must be a whole number of at least 1"),
    (GOOD.replace('device = "nvidia-a100-sxm-80gb"', 'device = "Acme X9"'), "no power for device 'Acme X9'"),
    (GOOD.replace("electricity_per_kwh = 0.1\n", ""), "no electricity_per_kwh"),
    (GOOD + '[[platforms]]\ndevice = "x"\n', "exactly one of price_per_server"),
    ((GOOD + 'name = "x"\n') * 2, "two platforms are called 'x'"),
    ("years = 5\n", "no platform"),
    ("", "is empty"),
    ("[[platforms]\n", "not valid TOML"),
]


@pytest.mark.parametrize("text,expected", BAD_MODELS)
def test_bad_model_is_one_line_and_exit_2(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.toml"
    model.write_text(text)
    _one_line_error(["tco", "--model", str(model)], capsys, expected)


def test_bad_model_in_score_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.toml"
    model.write_text(GOOD + "pue = 0.5\n")
    base = str(DATA / "cpu-base.json")
    _one_line_error(["score", base, "--cost", f"tco:{model}"], capsys, "pue must be at least 1")
    _one_line_error(["report", base, "--tco", str(model), "-o", str(tmp_path / "r.html")], capsys, "pue must be")
    assert not (tmp_path / "r.html").exists()
    _one_line_error(["score", base, "--cost", "cheap"], capsys, "--cost must be rental or tco:MODEL.toml")
    _one_line_error(["score", base, "--cost", "tco:"], capsys, "--cost must be rental or tco:MODEL.toml")
    _one_line_error(["score", base, "--cost", f"tco:{tmp_path / 'none.toml'}"], capsys, "no such file")


def test_cli_table_json_and_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tco", "--model", str(EXAMPLE)]) == 0
    text = capsys.readouterr().out
    assert "A100 x 800, air-cooled: 800 devices" in text and "break-even utilization over the horizon: " in text
    assert "CNY per USD, as of 2026-11" in text
    out = tmp_path / "tco.json"
    assert main(["tco", str(DATA / "cpu-base.json"), "--model", str(EXAMPLE), "--json", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    assert "cpu-base.json has no record of a device of the model's platforms" in captured.err
    assert printed == json.loads(out.read_text()) and printed["kind"] == "hwbench-tco"
    assert printed["files"] == [str(DATA / "cpu-base.json")]
    before = out.read_text()
    _one_line_error(["tco", "--model", str(EXAMPLE), "-o", str(out)], capsys, "already exists")
    assert out.read_text() == before


def test_cli_reads_measured_energy_from_a_results_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    measured = write(tmp_path / "a100.json", _gpu_doc(250.0, watts=300.0, gpu="NVIDIA A100-SXM4-80GB"))
    assert main(["tco", str(measured), "--model", str(EXAMPLE), "--json"]) == 0
    air = json.loads(capsys.readouterr().out)["platforms"][0]
    assert air["inputs"]["watts_per_device"]["value"] == 300.0 and air["inputs"]["power_kw"] == pytest.approx(570.0)
    assert air["inputs"]["tflops"]["value"] == 250.0
    assert air["scenarios"][0]["years"][4]["owning_per_pflop_hour"] == pytest.approx(20.503682)  # as above


def test_report_section_only_with_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = DATA / "cpu-base.json"
    runs = [(base, json.loads(base.read_text()))]
    without = build(runs)
    assert 'id="tco"' not in without and 'href="#tco"' not in without
    with_model = build(runs, tco=load_model(EXAMPLE))
    assert 'id="tco"' in with_model and 'href="#tco"' in with_model
    assert (
        '<svg id="tco-a100-x-800-air-cooled"' in with_model and '<svg id="tco-a100-x-800-liquid-cooled"' in with_model
    )
    assert "Break-even utilization over the horizon: 7.4%" in with_model
    page = tmp_path / "r.html"
    assert main(["report", str(base), "--tco", str(EXAMPLE), "-o", str(page)]) == 0
    assert 'id="tco"' in page.read_text()


def test_a_model_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    from importlib import resources

    from hwbench.decide.tco_model import load_model

    src = resources.files("hwbench.decide.data").joinpath("tco-example.toml").read_bytes()
    (tmp_path / "m.toml").write_bytes(b"\xef\xbb\xbf" + src)
    assert load_model(tmp_path / "m.toml").platforms
