"""hwbench tco and score at the edges: the arithmetic linear in the horizon, every count and sum a
model may give bounded, every written number finite, a model that costs nothing refused, every
division of the score safe, and text from files escaped on the terminal."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from synthetic_results import device, document, record, write

from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.decide.catalog import Catalog
from hwbench.decide.platform import Platform
from hwbench.decide.score import CostBasis, finite_json, score_platforms
from hwbench.decide.tco import Inputs, break_even, resolve, year_rows
from hwbench.decide.tco_model import model_from
from hwbench.decide.weights import load_weights
from hwbench.results.checked import load_checked

MATMUL = {"M": 1024, "N": 1024, "K": 1024}
ESC = "\x1b"
GOOD = '[[platforms]]\ndevice = "nvidia-a100-sxm-80gb"\nprice_per_device = 10000\nelectricity_per_kwh = 0.1\n'
RENT = 'rent_per_device_hour = 2.0\nrent_source = "quote"\nrent_as_of = "2026-11"\n'


def _strict(text: str) -> Any:
    """JSON as a strict parser reads it: NaN and Infinity refused."""

    def refuse(name: str) -> None:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _one_line(argv: list[str], capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hwbench: error: "), err
    for text in expected:
        assert text in err, err
    return err


def _gpu_file(path: Path, tflops: float, gpu: str = "Test GPU", median: float = 1e-3) -> Path:
    return write(
        path,
        document(
            [record("gemm", "cublas", "bf16", MATMUL, median, tflops=tflops, backend="cuda", device=gpu)],
            [device("cuda", gpu, "gpu")],
        ),
    )


def _inputs(years: int = 5, **changes: Any) -> Inputs:
    platform = {"device": "Test GPU", "price_per_device": 10000, "electricity_per_kwh": 0.1}
    platform |= {"watts_per_device": 500, "rent_per_device_hour": 2.0, "rent_source": "q", "rent_as_of": "2026-11"}
    model = model_from({"years": years, "platforms": [platform | changes]}, Path("m.toml"))
    return resolve(model.platforms[0], model, Catalog.load(), [])


# item 12: linear in the horizon, bounded inputs, finite outputs


def test_year_rows_are_linear_in_years(monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = _inputs()
    calls = []
    original = Inputs.depreciation

    def counted(self: Inputs, year: int) -> float:
        calls.append(year)
        return original(self, year)

    monkeypatch.setattr(Inputs, "depreciation", counted)
    rows = year_rows(inputs, 2000, 0.5)
    # one depreciation a year for the owning cost; break-even each year in closed form, not summed again
    assert len(rows) == 2000 and len(calls) == 2000


@pytest.mark.parametrize("rate", [0.2, 0.3, 0.45, 1.0])
def test_break_even_in_closed_form_is_the_sum_of_the_years(rate: float) -> None:
    inputs = _inputs(depreciation_per_year=rate)
    for years in range(1, 9):
        assert inputs.written_off(years) == pytest.approx(sum(inputs.depreciation(y) for y in range(1, years + 1)))
        u = break_even(inputs, years)["utilization"]
        if u is not None:  # where both cost the same, they do
            assert sum(inputs.owning(y, u)["total"] for y in range(1, years + 1)) == pytest.approx(
                inputs.renting(u) * years  # type: ignore[operator]
            )


LIMITED = [
    ("years = 1000\n" + GOOD, "years must be at most 100"),
    ("years = 1000000\n" + GOOD, "years must be at most 100"),
    (GOOD.replace("price_per_device = 10000", "price_per_server = 1e308"), "price_per_server must be at most 1,000,"),
    (GOOD.replace("10000", "1e16"), "price_per_device must be at most 1,000,000,000,000,000"),
    (GOOD + "servers = 2000000\n", "servers must be at most 1,000,000"),
    (GOOD + "devices_per_server = 2000000\n", "devices_per_server must be at most 1,000,000"),
    (GOOD + "staff_per_year = 1e300\n", "staff_per_year must be at most"),
    (GOOD + "datacenter_buildout = 1e300\n", "datacenter_buildout must be at most"),
    (GOOD.replace("0.1", "1e300"), "electricity_per_kwh must be at most"),
    (GOOD + RENT.replace("2.0", "1e300"), "rent_per_device_hour must be at most"),
    (GOOD + "watts_per_device = 1e300\n", "watts_per_device must be at most 1,000,000"),
    (GOOD + "host_watts_per_server = 1e300\n", "host_watts_per_server must be at most 1,000,000"),
    (GOOD + "pue = 1e300\n", "pue must be at most 10"),
    (GOOD + 'cooling = "liquid"\nliquid_premium = 1e300\n', "liquid_premium must be at most 10"),
    ("utilization = 1e-300\n" + GOOD, "utilization must be at least 0.001"),
    ("utilization = [" + ", ".join(["0.5"] * 11) + "]\n" + GOOD, "utilization lists 11 values, over the 10"),
    ('currency = "EUR"\n[rate]\nper_usd = 1e-300\nas_of = "2026-11"\n' + GOOD, "rate.per_usd must lie between"),
    ('currency = "EUR"\n[rate]\nper_usd = 1e300\nas_of = "2026-11"\n' + GOOD, "rate.per_usd must lie between"),
    ("".join(GOOD + f'name = "p{n}"\n' for n in range(51)), "51 platforms, over the 50"),
]


@pytest.mark.parametrize("text,expected", LIMITED)
def test_every_count_and_sum_is_bounded(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.toml"
    model.write_text(text)
    _one_line(["tco", "--model", str(model)], capsys, expected)


AT_THE_LIMITS = """years = 100
utilization = [0.001, 1.0]
cooling = "liquid"
liquid_premium = 10
pue = 10
[[platforms]]
name = "everything at its limit"
device = "Test GPU"
servers = 1000000
devices_per_server = 1000000
price_per_server = 1e15
datacenter_buildout = 1e15
staff_per_year = 1e15
electricity_per_kwh = 1e15
watts_per_device = 1000000
host_watts_per_server = 1000000
rent_per_device_hour = 1e15
rent_source = "q"
rent_as_of = "2026-11"
"""


def test_a_model_at_every_limit_writes_strict_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.toml"
    model.write_text(AT_THE_LIMITS)
    # TFLOPS so small that a PFLOP-hour costs more than a float holds: no figure rather than inf
    results = _gpu_file(tmp_path / "r.json", 1e-300)
    out = tmp_path / "tco.json"
    assert main(["tco", str(results), "--model", str(model), "--json", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    for doc in (_strict(printed), _strict(out.read_text())):
        rows = doc["platforms"][0]["scenarios"][0]["years"]
        assert math.isfinite(rows[-1]["owning_cumulative"]) and rows[-1]["owning_per_pflop_hour"] is None
    assert main(["tco", "--model", str(model)]) == 0
    text = capsys.readouterr().out
    assert "inf" not in text and "nan" not in text


def test_measured_figures_beyond_a_device_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.toml"
    model.write_text(
        '[[platforms]]\ndevice = "Test GPU"\nprice_per_device = 1\nelectricity_per_kwh = 0.1\nwatts_per_device = 300\n'
    )
    results = _gpu_file(tmp_path / "r.json", 1e300)
    _one_line(["tco", str(results), "--model", str(model)], capsys, "r.json#records[0]", "metrics.tflops 1e+300")
    doc = document(
        [record("gemm", "cublas", "bf16", MATMUL, tflops=100.0, backend="cuda", device="Test GPU")],
        [device("cuda", "Test GPU", "gpu")],
    )
    doc["records"][0]["energy"] = {
        "joules_per_call": 1e297,
        "watts": 1e300,
        "tflops_per_watt": 1e-298,
        "gbps_per_watt": None,
        "source": "nvml",
        "method": "counter",
        "window_s": 1.0,
        "calls": 1000,
        "error_pct": 0.5,
        "reason": "",
    }
    write(tmp_path / "w.json", doc)
    _one_line(["tco", str(tmp_path / "w.json"), "--model", str(model)], capsys, "energy.watts 1e+300")


def test_finite_json_names_the_figure() -> None:
    assert _strict(finite_json({"a": [1.0, {"b": 2}]}, "doc")) == {"a": [1.0, {"b": 2}]}
    with pytest.raises(UserError, match=r"TCO document has a figure that is not a finite number at \$\.a\[1\]\.b"):
        finite_json({"a": [1.0, {"b": math.inf}]}, "TCO document")


def test_weights_points_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = tmp_path / "w.toml"
    weights.write_text("[dimensions.storage]\nweight = 100\npoints = [[-1e308, 0], [1e308, 100]]\n")
    with pytest.raises(UserError, match="raw figures of points must lie between"):
        load_weights(weights)


# item 13: a model that costs nothing, and every division of the score


ZERO = '[[platforms]]\ndevice = "Test GPU"\nwatts_per_device = 300\nprice_per_device = 0\nelectricity_per_kwh = 0\n'


def test_a_model_that_costs_nothing_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "zero.toml"
    model.write_text(ZERO)
    results = _gpu_file(tmp_path / "r.json", 100.0)
    _one_line(["tco", "--model", str(model)], capsys, "platform 1", "owning it costs nothing")
    _one_line(["score", str(results), "--cost", f"tco:{model}"], capsys, "owning it costs nothing")
    # one cost is enough: electricity alone, or the hardware alone
    model.write_text(ZERO.replace("electricity_per_kwh = 0", "electricity_per_kwh = 0.1"))
    assert main(["score", str(results), "--cost", f"tco:{model}", "--json"]) == 0
    assert _strict(capsys.readouterr().out)["platforms"][0]["dimensions"]["compute_density"]["raw"] > 0


def _density(tmp_path: Path) -> dict[str, Any]:
    weights = tmp_path / "w.toml"
    weights.write_text("[dimensions.compute_density]\nweight = 100\n")
    return load_weights(weights)[0]


@pytest.mark.parametrize("usd", [0.0, 5e-324, math.inf, math.nan])
def test_compute_density_is_safe_against_any_cost(usd: float, tmp_path: Path) -> None:
    loaded = load_checked(_gpu_file(tmp_path / "r.json", 100.0))
    cost = CostBasis("test", "TFLOPS per USD", lambda platform, loaded, record: (usd, "test cost", {}))
    doc = score_platforms([Platform("P", (loaded,))], _density(tmp_path), Catalog.load(), cost=cost)
    entry = doc["platforms"][0]["dimensions"]["compute_density"]
    assert entry["missing"] and "USD an hour" in entry["reason"]
    _strict(finite_json(doc, "score document"))


def test_score_never_writes_an_infinite_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a rental price that TFLOPS per USD overflows, and a latency whose milliseconds overflow
    _gpu_file(tmp_path / "r.json", 100.0)
    on_gpu = {"backend": "cuda", "device": "Test GPU"}
    slow = record("allreduce", "nccl", "fp32", {"count": 64, "ranks": 8}, 1e307, **on_gpu)
    write(tmp_path / "n.json", document([slow], [device("cuda", "Test GPU", "gpu")]))
    (tmp_path / "p.toml").write_text(
        'usd_per_hour = 1e-310\nprice_source = "q"\nprice_as_of = "2026-11"\nresults = ["r.json", "n.json"]\n'
    )
    assert main(["score", str(tmp_path / "p.toml"), "--json"]) == 0
    doc = _strict(capsys.readouterr().out)
    dims = doc["platforms"][0]["dimensions"]
    assert dims["compute_density"]["missing"] and "overflows" in dims["compute_density"]["reason"]
    assert dims["network"]["missing"] and "not a finite number" in dims["network"]["reason"]


# item 6: text from files escaped on the terminal


def test_tco_escapes_the_model_and_the_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.toml"
    model.write_text(
        'title = "T\\u001b[31m"\n' + RENT.replace('"quote"', '"quote\\u001b[2J"') + "[[platforms]]\n"
        'name = "P\\u001b]0;owned\\u0007"\ndevice = "Evil\\u001b[5m GPU"\nprice_per_device = 10\n'
        "electricity_per_kwh = 0.1\nwatts_per_device = 300\n"
    )
    results = _gpu_file(tmp_path / "r.json", 100.0, gpu=f"Evil{ESC}[5m GPU")
    assert main(["tco", str(results), "--model", str(model)]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "\x07" not in out
    assert "T\\x1b[31m" in out and "P\\x1b]0;owned\\x07: 1 devices" in out and "Evil\\x1b[5m GPU" in out
    assert "quote\\x1b[2J" in out
    assert main(["tco", str(results), "--model", str(model), "--json"]) == 0
    assert _strict(capsys.readouterr().out)["title"] == f"T{ESC}[31m"  # the document keeps the text as it is


def test_score_escapes_platform_and_device_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = f"Evil{ESC}[5m GPU"
    _gpu_file(tmp_path / "r.json", 100.0, gpu=gpu)
    (tmp_path / "p.toml").write_text(
        'name = "P\\u001b[2J\\nfake: line"\nusd_per_hour = 2.0\nprice_source = "q\\u001b[31m"\n'
        'price_as_of = "2026-11"\nresults = ["r.json"]\n'
    )
    assert main(["score", str(tmp_path / "p.toml")]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "\nfake: line" not in out
    assert "P\\x1b[2J\\nfake: line" in out and "q\\x1b[31m" in out
    # without a price: the missing line names the platform and the device, both escaped
    (tmp_path / "p.toml").write_text('name = "P\\u001b[2J"\nresults = ["r.json"]\n')
    assert main(["score", str(tmp_path / "p.toml")]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "missing: P\\x1b[2J" in out and "Evil\\x1b[5m GPU" in out


def test_score_with_a_tco_model_escapes_its_platform_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = _gpu_file(tmp_path / "r.json", 100.0)
    model = tmp_path / "m.toml"
    model.write_text(
        '[[platforms]]\nname = "M\\u001b[1m"\ndevice = "Test GPU"\nwatts_per_device = 300\nprice_per_device = 1000\n'
        "electricity_per_kwh = 0.1\n"
    )
    assert main(["score", f"N{ESC}[4m={results}", "--cost", f"tco:{model}"]) == 0
    out = capsys.readouterr().out
    assert ESC not in out and "platform 'M\\x1b[1m'" in out and "cost: N\\x1b[4m" in out


def test_score_repeats_that_the_best_gemms_timed_calls_were_not_verified(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _gpu_file(tmp_path / "r.json", 100.0)
    doc = json.loads(path.read_text())
    doc["records"][0]["parity"]["after_timing"] = (
        "not verified: result() handed back a new array each time; the output checked after the timed calls may "
        "be the first call's"
    )
    path.write_text(json.dumps(doc))
    (tmp_path / "p.toml").write_text(
        'name = "P"\nusd_per_hour = 2.0\nprice_source = "q"\nprice_as_of = "2026-11"\nresults = ["r.json"]\n'
    )
    assert main(["score", str(tmp_path / "p.toml")]) == 0
    out = capsys.readouterr().out
    notes = [line for line in out.splitlines() if line.startswith("note: P ")]
    assert any("timed calls not verified: result() handed back a new array each time" in n for n in notes), out
