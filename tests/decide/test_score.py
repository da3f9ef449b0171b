"""hwbench score: the mapping, each dimension's reading, hand-computed totals, bad input, the catalog."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from synthetic_results import DATA, device, document, record, write

from hwbench.cli.main import main
from hwbench.decide.catalog import Catalog
from hwbench.decide.platform import parse_platform
from hwbench.decide.score import score_platforms
from hwbench.decide.weights import load_weights
from hwbench.results.files import SCHEMA_VERSION

GPU = device("cuda", "Test GPU", "gpu")
CPU = device("cpu", "Test CPU", "cpu")
MATMUL = {"M": 1024, "N": 1024, "K": 1024}


def _gpu_records() -> list[dict]:
    on_gpu = {"backend": "cuda", "device": "Test GPU"}
    return [
        record("gemm", "cublas", "bf16", MATMUL, tflops=300.0, impl_kind="native", **on_gpu),
        record("gemm", "cublas", "fp16", MATMUL, tflops=250.0, impl_kind="native", **on_gpu),
        record("gemm", "cublas", "fp32", MATMUL, tflops=50.0, impl_kind="native", **on_gpu),
        record("allreduce", "nccl", "fp32", {"count": 64, "ranks": 8}, 0.020, **on_gpu),
        record("storage", "fio_randread", None, {"block_bytes": 4096}, 4e-4, backend="fio", device="nfs", iops=40000.0),
        record("startup", "triton", "bf16", {**MATMUL, "warm_cache": 0}, 120.0, **on_gpu),
        record("startup", "triton", "bf16", {**MATMUL, "warm_cache": 1}, 30.0, **on_gpu),
    ]


def _cpu_records() -> list[dict]:
    return [
        record("gemm", "numpy", "fp32", MATMUL, tflops=8.0),
        record("gemm", "numpy", "fp64", MATMUL, tflops=10.0),  # not the dtype the matrix asks for
        record("storage", "fio_randread", None, {"block_bytes": 4096}, 4e-4, backend="fio", device="nfs", iops=60000.0),
        record("startup", "llvm", "fp32", {**MATMUL, "warm_cache": 0}, 45.0),
    ]


@pytest.fixture
def platforms(tmp_path: Path) -> list[str]:
    write(tmp_path / "a.json", document(_gpu_records(), [GPU]))
    write(tmp_path / "b.json", document(_cpu_records(), [CPU]))
    (tmp_path / "a.toml").write_text(
        'name = "A"\nusd_per_hour = 3.0\nprice_source = "quote A"\nprice_as_of = "2026-01"\n'
        'mttr_minutes = 30\nmttr_source = "SLA 4.2"\nsla_availability = 99.9\nresults = ["a.json"]\n'
    )
    (tmp_path / "b.toml").write_text(
        'usd_per_hour = 0.2\nprice_source = "quote B"\nprice_as_of = "2026-01"\n'
        'mttr_minutes = 60\nmttr_source = "vendor answer"\n'
    )
    return [str(tmp_path / "a.toml"), f"B={tmp_path / 'b.json'},{tmp_path / 'b.toml'}"]


def _score(texts: list[str], weights: Path | None = None, catalog: Path | None = None) -> dict:
    dims, origin = load_weights(weights)
    return score_platforms([parse_platform(t) for t in texts], dims, Catalog.load(catalog), origin)


@pytest.mark.parametrize(
    "name,raw,expected",
    [
        ("network", 10.0, 100.0),
        ("network", 15.0, 100.0),
        ("network", 37.5, 50.0),
        ("network", 60.0, 0.0),
        ("network", 600.0, 0.0),
        ("storage", 25000.0, 50.0),
        ("storage", 75000.0, 100.0),
        ("time_to_first_step", 225.0, 50.0),
        ("recovery", 45.0, 100.0 * 75 / 90),
    ],
)
def test_points_mapping(name: str, raw: float, expected: float) -> None:
    dims, _ = load_weights()
    assert dims[name].score(raw) == pytest.approx(expected)


def test_relative_mapping() -> None:
    dims, _ = load_weights()
    density = dims["compute_density"]
    assert density.mode == "relative"
    assert density.score(10.0, best=10.0) == 100.0
    assert density.score(4.0, best=10.0) == pytest.approx(40.0)
    assert density.score(0.0, best=10.0) == 0.0


def test_default_weights_are_the_matrix() -> None:
    dims, origin = load_weights()
    assert origin == "default"
    assert {n: d.weight for n, d in dims.items()} == {
        "compute_density": 25,
        "network": 20,
        "storage": 15,
        "time_to_first_step": 20,
        "recovery": 20,
    }


def test_hand_computed_totals(platforms: list[str]) -> None:
    doc = _score(platforms)
    a, b = doc["platforms"]
    assert (a["name"], a["rank"], b["name"], b["rank"]) == ("A", 1, "B", 2)
    dims = a["dimensions"]
    assert dims["compute_density"]["raw"] == pytest.approx(100.0)  # 300 bf16 TFLOPS / 3 USD/hour
    assert dims["compute_density"]["source"]["dtype"] == "bf16"
    assert dims["network"]["raw"] == pytest.approx(20.0) and dims["network"]["score"] == pytest.approx(800 / 9)
    assert dims["storage"]["score"] == pytest.approx(80.0)
    assert dims["time_to_first_step"]["raw"] == 120.0 and dims["time_to_first_step"]["score"] == pytest.approx(800 / 9)
    assert dims["recovery"]["score"] == 100.0
    # 25 x 1 + 20 x 8/9 + 15 x 0.8 + 20 x 8/9 + 20 x 1
    assert a["total"] == pytest.approx(92.5555556) and a["max_total"] == pytest.approx(a["total"])
    assert a["complete"] and a["sla_availability"] == 99.9
    # B: 8 fp32 TFLOPS / 0.2 = 40 -> 40; network missing; 100; 100; (120 - 60) / 90 -> 66.7
    assert b["dimensions"]["compute_density"]["raw"] == pytest.approx(40.0)
    assert b["dimensions"]["compute_density"]["score"] == pytest.approx(40.0)
    assert b["dimensions"]["network"] == {
        **b["dimensions"]["network"],
        "missing": True,
        "score": None,
        "weighted": None,
    }
    assert "allreduce" in b["dimensions"]["network"]["reason"]
    assert b["total"] == pytest.approx(10 + 15 + 20 + 40 / 3)
    assert b["max_total"] == pytest.approx(b["total"] + 20) and b["covered_weight"] == 80 and not b["complete"]
    assert "lower bound" in doc["total_means"]


def test_missing_weight_is_not_redistributed(platforms: list[str], tmp_path: Path) -> None:
    weights = tmp_path / "w.toml"
    weights.write_text("[dimensions.network]\nweight = 50\n[dimensions.storage]\nweight = 50\n")
    doc = _score(platforms, weights)
    b = next(p for p in doc["platforms"] if p["name"] == "B")
    assert list(b["dimensions"]) == ["network", "storage"]
    assert b["total"] == pytest.approx(50.0) and b["max_total"] == pytest.approx(100.0)


def test_weights_file_keeps_shipped_mappings_and_can_replace_them(platforms: list[str], tmp_path: Path) -> None:
    weights = tmp_path / "w.toml"
    weights.write_text(
        "[dimensions.compute_density]\nweight = 60\npoints = [[0.0, 0.0], [200.0, 100.0]]\n"
        "[dimensions.recovery]\nweight = 40\n"
    )
    doc = _score(platforms, weights)
    a = doc["platforms"][0]
    assert a["dimensions"]["compute_density"]["score"] == pytest.approx(50.0)  # 100 on the absolute scale
    assert a["total"] == pytest.approx(60 * 0.5 + 40 * 1.0)
    assert doc["dimensions"]["recovery"]["points"] == [[30.0, 100.0], [120.0, 0.0]]


def test_compute_density_needs_16_bit_on_an_accelerator(tmp_path: Path) -> None:
    on_gpu = {"backend": "cuda", "device": "Test GPU"}
    write(tmp_path / "g.json", document([record("gemm", "cublas", "fp32", MATMUL, tflops=50.0, **on_gpu)], [GPU]))
    (tmp_path / "g.toml").write_text('usd_per_hour = 2.0\nprice_source = "quote G"\nprice_as_of = "2026-01"\n')
    entry = _score([f"{tmp_path / 'g.json'},{tmp_path / 'g.toml'}"])["platforms"][0]["dimensions"]["compute_density"]
    assert entry["missing"] and "bf16/fp16" in entry["reason"] and "fp32" in entry["reason"]


def test_price_from_a_user_catalog(tmp_path: Path) -> None:
    write(
        tmp_path / "c.json",
        document(
            [record("gemm", "numpy", "fp32", MATMUL, device="Acme X1 CPU", tflops=2.0)],
            [device("cpu", "Acme X1 CPU", "cpu")],
        ),
    )
    missing = _score([str(tmp_path / "c.json")])["platforms"][0]["dimensions"]["compute_density"]
    assert missing["missing"] and "no price for 'Acme X1 CPU'" in missing["reason"]
    catalog = tmp_path / "cat.toml"
    catalog.write_text(
        '[devices.acme-x1]\nmatch = ["Acme X1"]\nsource = "my lab"\nas_of = "2026-11"\n'
        '[[prices]]\ndevice = "acme-x1"\nprovider = "me"\nusd_per_hour = 0.5\n'
        'source = "invoice 17"\nas_of = "2026-11"\n'
    )
    entry = _score([str(tmp_path / "c.json")], catalog=catalog)["platforms"][0]["dimensions"]["compute_density"]
    assert entry["raw"] == pytest.approx(4.0)  # 2 TFLOPS / 0.5 USD/hour
    assert entry["source"]["usd_per_hour"] == 0.5 and "cat.toml" in entry["source"]["price_source"]


def test_network_reading(tmp_path: Path) -> None:
    ar = [
        record("allreduce", "gloo", "fp32", {"count": 64, "ranks": 8}, 0.009),  # 256 B, 8 ranks
        record("allreduce", "gloo", "fp32", {"count": 256, "ranks": 8}, 0.010),  # 1 KiB: gloo's slowest small
        record("allreduce", "gloo", "fp32", {"count": 512, "ranks": 8}, 0.001),  # 2 KiB: too big
        record("allreduce", "gloo", "fp32", {"count": 1, "ranks": 4}, 0.002),  # fewer ranks
        record("allreduce", "gloo", "fp32", {"count": 1, "ranks": 8}, 0.003, status="timeout"),
    ]
    write(tmp_path / "n.json", document(ar))
    entry = _score([str(tmp_path / "n.json")])["platforms"][0]["dimensions"]["network"]
    # The run summary's definition: each implementation's slowest small message, the best implementation.
    assert entry["raw"] == pytest.approx(10.0) and entry["source"]["ranks"] == 8
    assert entry["source"]["message_bytes"] == 1024 and entry["source"]["record"].endswith("#records[1]")
    faster = [
        record("allreduce", "shm", "fp32", {"count": 1, "ranks": 8}, 0.004),
        record("allreduce", "shm", "fp32", {"count": 256, "ranks": 8}, 0.006),
    ]
    write(tmp_path / "b.json", document(ar + faster))
    entry = _score([str(tmp_path / "b.json")])["platforms"][0]["dimensions"]["network"]
    assert entry["raw"] == pytest.approx(6.0) and entry["source"]["impl"] == "shm"
    write(tmp_path / "m.json", document(ar + [record("allreduce", "gloo", "fp16", {"count": 8, "ranks": 16}, 0.05)]))
    entry = _score([str(tmp_path / "m.json")])["platforms"][0]["dimensions"]["network"]
    assert entry["raw"] == pytest.approx(50.0) and entry["source"]["ranks"] == 16 and entry["note"] == "16 ranks"
    write(tmp_path / "f.json", document(ar[3:4]))
    entry = _score([str(tmp_path / "f.json")])["platforms"][0]["dimensions"]["network"]
    assert entry["note"] == "4 ranks (the matrix asks for 8 nodes)"


def test_warm_cache_option(platforms: list[str], tmp_path: Path) -> None:
    weights = tmp_path / "w.toml"
    weights.write_text('[dimensions.time_to_first_step]\nweight = 100\ncache = "warm"\n')
    doc = _score(platforms, weights)
    a = next(p for p in doc["platforms"] if p["name"] == "A")["dimensions"]["time_to_first_step"]
    b = next(p for p in doc["platforms"] if p["name"] == "B")["dimensions"]["time_to_first_step"]
    assert a["raw"] == 30.0 and a["source"]["cache"] == "warm"
    assert b["missing"] and "warm" in b["reason"]


def test_cli_on_frozen_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    platform = tmp_path / "vm.toml"
    platform.write_text(
        f'name = "dev vm"\nusd_per_hour = 0.2053\nprice_source = "AWS c7a.xlarge"\nprice_as_of = "2026-11"\n'
        f'mttr_minutes = 45\nmttr_source = "example"\nresults = ["{DATA / "cpu-base.json"}", '
        f'"{DATA / "probe-storage.json"}", "{DATA / "probe-startup.json"}"]\n'
    )
    out = tmp_path / "score.json"
    assert main(["score", str(platform), f"bare={DATA / 'cpu-base.json'}", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert re.search(r"^1\s+dev vm", text, re.M) and re.search(r"^2\s+bare", text, re.M)
    assert "missing: dev vm network" in text and "AWS c7a.xlarge, as of 2026-11" in text
    doc = json.loads(out.read_text())
    vm = doc["platforms"][0]["dimensions"]
    base = json.loads((DATA / "cpu-base.json").read_text())
    best = max(r["metrics"]["tflops"] for r in base["records"] if r["kernel"] == "gemm" and r["dtype"] == "fp32")
    assert vm["compute_density"]["raw"] == pytest.approx(best / 0.2053)
    storage = json.loads((DATA / "probe-storage.json").read_text())["records"][0]
    assert vm["storage"]["raw"] == storage["metrics"]["iops"]
    startup = json.loads((DATA / "probe-startup.json").read_text())["records"]
    assert (
        vm["time_to_first_step"]["raw"]
        == next(r for r in startup if r["shape"]["warm_cache"] == 0)["timing"]["median_s"]
    )
    assert vm["recovery"]["score"] == pytest.approx(100 * 75 / 90)


BAD_WEIGHTS = [
    ("[dimensions.latency]\nweight = 100\n", "unknown dimension 'latency'"),
    ("[dimensions.network]\nweight = 60\n[dimensions.storage]\nweight = 30\n", "weights sum to 90, not 100"),
    ("[dimensions.network]\nweight = 110\n[dimensions.storage]\nweight = -10\n", "must not be negative"),
    ("[dimensions.network]\nweight = nan\n", "finite number"),
    ("[dimensions.network]\nweight = 100\npoints = [[60.0, 0.0], [15.0, 100.0]]\n", "increase strictly"),
    ("[dimensions.network]\nweight = 100\npoints = [[15.0, 150.0], [60.0, 0.0]]\n", "between 0 and 100"),
    ("[dimensions.network]\nweight = 100\ncolour = 1\n", "unknown key 'colour'"),
    ('[dimensions.network]\nweight = 100\nbetter = "sideways"\n', "better must be"),
    ('[dimensions.time_to_first_step]\nweight = 100\ncache = "tepid"\n', "cache must be"),
    ("", "is empty"),
    ("[dimensions\nweight = 1", "not valid TOML"),
    ("[weights]\nnetwork = 100\n", "expected only [dimensions.NAME]"),
]


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], expected: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hwbench: error: "), err
    assert expected in err, err


@pytest.mark.parametrize("text,expected", BAD_WEIGHTS)
def test_bad_weights(
    text: str, expected: str, platforms: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = tmp_path / "w.toml"
    weights.write_text(text)
    _one_line_error(["score", *platforms, "--weights", str(weights)], capsys, expected)


BAD_PLATFORM = [
    ("usd_per_hour = -1.0\n", "usd_per_hour must be positive"),
    ("usd_per_hour = nan\n", "finite number"),
    ("mttr_minutes = 20\n", "needs mttr_source"),
    ("sla_availability = 999\n", "percentage"),
    ("price = 3\n", "unknown key 'price'"),
    ("name = 3\n", "must be a string"),
]


@pytest.mark.parametrize("text,expected", BAD_PLATFORM)
def test_bad_platform_file(text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.toml").write_text(text)
    _one_line_error(["score", f"{DATA / 'cpu-base.json'},{tmp_path / 'p.toml'}"], capsys, expected)


def _bad_results(tmp_path: Path) -> list[tuple[str, str]]:
    good = (DATA / "cpu-base.json").read_text()
    doc = json.loads(good)
    cases = {
        "empty.json": ("", "the file is empty"),
        "truncated.json": (good[: len(good) // 2], "truncated"),
        "newer.json": (
            good.replace(f'"schema_version": {doc["schema_version"]}', f'"schema_version": {SCHEMA_VERSION + 1}', 1),
            "upgrade hwbench",
        ),
    }
    nan = json.loads(good)
    nan["records"][0]["metrics"]["tflops"] = float("nan")
    negative = json.loads(good)
    negative["records"][1]["metrics"]["tflops"] = -2.0
    sample = json.loads(good)
    sample["records"][2]["timing"]["samples_s"][0] = float("inf")
    for name, bad, expected in (
        ("nan.json", nan, "records[0].metrics.tflops: nan is not a finite number"),
        ("negative.json", negative, "records[1].metrics.tflops: -2.0 is below the minimum 0"),
        ("sample.json", sample, "records[2].timing.samples_s[0]: inf is not a finite number"),
    ):
        cases[name] = (json.dumps(bad), expected)
    assert f'"schema_version": {SCHEMA_VERSION + 1}' in cases["newer.json"][0]
    out = []
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        out.append((str(tmp_path / name), expected))
    return out


def test_bad_results_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for path, expected in _bad_results(tmp_path):
        _one_line_error(["score", path], capsys, expected)
        _one_line_error(["compare", str(DATA / "cpu-base.json"), path], capsys, expected)
        _one_line_error(["pp", path], capsys, expected)
        _one_line_error(["show", path], capsys, expected)  # one validity rule: show and validate refuse it too
        assert main(["validate", path]) == 1
        assert expected in capsys.readouterr().err


def test_platform_names_must_differ(capsys: pytest.CaptureFixture[str]) -> None:
    base = str(DATA / "cpu-base.json")
    _one_line_error(["score", f"x={base}", f"x={base}"], capsys, "two platforms are called 'x'")


def test_every_catalog_value_has_source_and_as_of() -> None:
    catalog = Catalog.load()
    date = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")
    for key, entry in catalog.devices.items():
        assert str(entry.get("source", "")).strip(), key
        assert date.match(str(entry.get("as_of", ""))), (key, entry.get("as_of"))
        assert all(
            isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in entry.get("peak_tflops", {}).values()
        ), key
    for row in catalog.prices:
        assert str(row.get("source", "")).strip(), row
        assert date.match(str(row.get("as_of", ""))), row


@pytest.mark.parametrize(
    "text,expected",
    [
        ('[devices.x]\nmatch = ["X"]\nas_of = "2026-11"\n', "devices.x needs source and as_of"),
        ('[devices.x]\nsource = "s"\nas_of = "2026-11"\npeak_tflops = { fp32 = -1.0 }\n', "peak_tflops.fp32 must be"),
        ('[[prices]]\ndevice = "x"\nusd_per_hour = 1.0\nsource = "s"\n', "price row 1 needs source and as_of"),
        ('[[prices]]\ndevice = "x"\nusd_per_hour = 0.0\nsource = "s"\nas_of = "2026-11"\n', "positive number"),
        ("[gpus]\nx = 1\n", "unknown table 'gpus'"),
    ],
)
def test_user_catalog_must_source_every_value(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "cat.toml"
    catalog.write_text(text)
    _one_line_error(["score", str(DATA / "cpu-base.json"), "--catalog", str(catalog)], capsys, expected)
    _one_line_error(
        [
            "run",
            "--backend",
            "cpu",
            "--kernel",
            "gemm",
            "--catalog",
            str(catalog),
            "--out",
            str(tmp_path / "never.json"),
        ],
        capsys,
        expected,
    )
    assert not (tmp_path / "never.json").exists()


def test_run_prices_with_a_user_catalog(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hwbench.core.host import cpu_info
    from hwbench.results.files import load

    catalog = tmp_path / "cat.toml"
    catalog.write_text(
        f'[devices.this-cpu]\nmatch = [{json.dumps(cpu_info()["model"])}]\nsource = "test"\n'
        'as_of = "2026-11"\n[[prices]]\ndevice = "this-cpu"\nprovider = "me"\nusd_per_hour = 0.25\n'
        'source = "invoice 9"\nas_of = "2026-11"\n'
    )
    out = tmp_path / "run.json"
    assert (
        main(
            [
                "run",
                "--backend",
                "cpu",
                "--kernel",
                "gemm",
                "--impl",
                "numpy",
                "--dtype",
                "fp32",
                "--quiet",
                "--shape",
                "gemm:M=32,N=32,K=32",
                "--budget",
                "0.01",
                "--catalog",
                str(catalog),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    doc = load(out)
    (rec,) = [r for r in doc["records"] if r["status"] == "ok"]
    assert doc["run"]["catalog"] == str(catalog)
    assert rec["metrics"]["usd_per_hour"] == 0.25 and "cat.toml" in rec["metrics"]["price_source"]
    assert rec["metrics"]["tflops_per_usd_hour"] == pytest.approx(rec["metrics"]["tflops"] / 0.25)


def _must_not_run(*args: object, **kwargs: object) -> None:
    raise AssertionError("the work ran although its output could not be written")


def test_out_never_overwrites_the_input_or_any_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "r.json"
    results.write_text((DATA / "cpu-base.json").read_text())
    before = results.read_text()
    monkeypatch.setattr("hwbench.cli.score.score_platforms", _must_not_run)
    _one_line_error(["score", str(results), "--out", str(results)], capsys, "r.json already exists")
    assert results.read_text() == before  # still the results file, not a score document
    _one_line_error(["score", str(results), "--out", str(tmp_path)], capsys, "is a folder")
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    _one_line_error(["score", str(results), "--out", str(blocker / "s.json")], capsys, "is a file, not a folder")


def test_out_appearing_during_the_work_is_not_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "score.json"

    def score_while_another_writes(*args: object, **kwargs: object) -> dict:
        out.write_text("someone else's")
        return score_platforms(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("hwbench.cli.score.score_platforms", score_while_another_writes)
    _one_line_error(["score", str(DATA / "cpu-base.json"), "--out", str(out)], capsys, "score.json already exists")
    assert out.read_text() == "someone else's"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["score.json"]  # no temporary file left


def test_score_dtype_chooses_the_gemm_records_and_the_default_says_which(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    on_gpu = {"backend": "cuda", "device": "Test GPU"}
    records = [
        record("gemm", "cublas", "bf16", MATMUL, tflops=300.0, impl_kind="native", **on_gpu),
        record("gemm", "scaled_mm", "fp8", MATMUL, tflops=600.0, impl_kind="native", **on_gpu),
        record("gemm", "int_mm", "int8", MATMUL, tflops=900.0, impl_kind="native", **on_gpu),
    ]
    write(tmp_path / "g.json", document(records, [GPU]))
    (tmp_path / "g.toml").write_text('usd_per_hour = 3.0\nprice_source = "quote"\nprice_as_of = "2026-01"\n')
    platform = f"G={tmp_path / 'g.json'},{tmp_path / 'g.toml'}"
    assert main(["score", platform]) == 0
    out = capsys.readouterr().out
    assert (
        "compute density: GEMM dtype G bf16 (the default: bf16/fp16 on accelerators, fp32 on CPUs; --dtype chooses)"
        in out
    )
    assert main(["score", platform, "--dtype", "fp8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    entry = doc["platforms"][0]["dimensions"]["compute_density"]
    assert doc["compute_dtype"] == "fp8" and entry["source"]["dtype"] == "fp8" and entry["raw"] == pytest.approx(200.0)
    assert main(["score", platform, "--dtype", "int8", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["dimensions"]["compute_density"]["unit"] == "TOPS per USD/hour"
    assert doc["platforms"][0]["dimensions"]["compute_density"]["raw"] == pytest.approx(300.0)
    assert main(["score", platform, "--dtype", "fp64", "--json"]) == 0
    missing = json.loads(capsys.readouterr().out)["platforms"][0]["dimensions"]["compute_density"]
    assert (
        missing["missing"] and "no ok fp64 GEMM record on the accelerator (only bf16, fp8, int8)" in missing["reason"]
    )
    assert main(["score", platform, "--dtype", "fp7"]) == 2
    assert "--dtype 'fp7' is not a dtype hwbench knows" in capsys.readouterr().err
