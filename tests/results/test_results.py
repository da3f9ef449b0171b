"""Results files: save/load round trip, refusal to overwrite, schema, migration, corrupt files."""

from __future__ import annotations

import copy
import errno
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

from hwbench.core.errors import UserError
from hwbench.results import files as results
from hwbench.run.case import CaseRequest, base_record, failed

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = sorted([*ROOT.glob("results/*.json"), *ROOT.glob("tests/data/*.json")])


def make_doc() -> dict[str, Any]:
    """A minimal valid results document, built by hand: one ok record and one skipped."""
    ok = {
        "kernel": "gemm",
        "impl": "numpy",
        "impl_kind": "native",
        "language": "blas",
        "backend": "cpu",
        "device": "Test CPU",
        "device_index": 0,
        "dtype": "fp32",
        "shape": {"M": 64, "N": 64, "K": 64},
        "status": "ok",
        "reason": "",
        "parity": {
            "max_abs_err": 1.5e-6,
            "max_rel_err": 2.5e-7,
            "atol": 1e-5,
            "rtol": 2.4e-7,
            "exact": False,
            "mismatches": 0,
            "nonfinite": 0,
            "elements": 4096,
            "passed": True,
        },
        "timing": {
            "median_s": 1.25e-4,
            "iqr_s": 2e-6,
            "cv": 0.01,
            "n": 20,
            "timer": "perf_counter",
            "resolution_s": 1e-7,
            "flushed": True,
            "samples_s": [1.25e-4, 1.26e-4],
        },
        "metrics": {
            "tflops": 0.0042,
            "gbps": 1.5,
            "pct_peak": 4.2,
            "peak_tflops": 0.1,
            "porting_overhead": None,
            "native_impl": None,
            "tflops_per_usd_hour": None,
            "usd_per_hour": None,
        },
        "compile_s": 0.0,
        "config": {"threads": 4},
        "warnings": [],
    }
    skipped = {
        "kernel": "gemm",
        "impl": "*",
        "impl_kind": None,
        "language": None,
        "backend": "cuda",
        "device": None,
        "device_index": -1,
        "dtype": "",
        "shape": {},
        "status": "skipped",
        "reason": "backend cuda unavailable: no GPU",
        "parity": {"max_abs_err": None, "max_rel_err": None, "atol": None, "rtol": None, "passed": None},
        "timing": {"median_s": None, "iqr_s": None, "cv": None, "n": 0, "timer": None},
        "metrics": {"tflops": None, "pct_peak": None, "porting_overhead": None, "tflops_per_usd_hour": None},
    }
    return {
        "schema_version": results.SCHEMA_VERSION,
        "kind": "hwbench-results",
        "run": {
            "id": "0123abcd",
            "started": "2026-01-02T03:04:05+00:00",
            "finished": "2026-01-02T03:05:05+00:00",
            "incomplete": False,
            "command": ["hwbench", "run", "--profile", "quick"],
            "profile": "quick",
            "seed": 0,
            "timeout_s": 300.0,
            "timing": {"budget_s": 0.25},
            "price": None,
            "hwbench": {"version": "0.1.0", "git_commit": None},
        },
        "host": {
            "hostname": "testhost",
            "os": "Linux-6.0-x86_64",
            "cpu": {"model": "Test CPU", "cores": 4, "features": ["avx2", "fma"]},
        },
        "software": {"python": "3.12.0", "numpy": "2.0.0"},
        "settings": {"OMP_NUM_THREADS": None},
        "warnings": [],
        "backends": [
            {
                "name": "cpu",
                "available": True,
                "reason": "",
                "devices": [
                    {
                        "backend": "cpu",
                        "index": 0,
                        "name": "Test CPU",
                        "vendor": "test",
                        "kind": "cpu",
                        "peak": {"tflops": {"fp32": 0.1}, "method": "test"},
                    }
                ],
            },
            {"name": "cuda", "available": False, "reason": "no GPU", "devices": []},
        ],
        "records": [ok, skipped],
    }


@pytest.fixture
def sample_doc() -> dict[str, Any]:
    return make_doc()


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# --- schema and round trip -------------------------------------------------------------------


def test_sample_doc_is_valid(sample_doc) -> None:
    assert results.validate(sample_doc) == []


def test_schema_is_the_current_version() -> None:
    schema = results.schema()
    assert schema["properties"]["schema_version"] == {"const": results.SCHEMA_VERSION}
    assert schema["properties"]["kind"] == {"const": results.KIND}
    assert tuple(schema["$defs"]["record"]["properties"]["status"]["enum"]) == results.STATUSES


def test_round_trip(tmp_path: Path, sample_doc) -> None:
    path = tmp_path / "run.json"
    assert results.save(sample_doc, path) == path
    loaded = results.load(path)
    assert loaded == sample_doc
    assert [r["status"] for r in loaded["records"]] == ["ok", "skipped"]
    assert loaded["records"][0]["timing"]["median_s"] == 1.25e-4


def test_save_creates_missing_folders(tmp_path: Path, sample_doc) -> None:
    path = tmp_path / "a" / "b" / "run.json"
    results.save(sample_doc, path)
    assert results.load(path) == sample_doc


def test_save_refuses_to_overwrite(tmp_path: Path, sample_doc) -> None:
    path = tmp_path / "run.json"
    path.write_text("original", encoding="utf-8")
    with pytest.raises(UserError, match="already exists"):
        results.save(sample_doc, path)
    assert path.read_text(encoding="utf-8") == "original"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temporary file left


def test_save_leaves_no_temp_file_on_success(tmp_path: Path, sample_doc) -> None:
    results.save(sample_doc, tmp_path / "run.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_save_without_hard_links_still_refuses_and_cleans_up(
    tmp_path: Path, sample_doc, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_link(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(results.os, "link", no_link)
    path = tmp_path / "run.json"
    results.save(sample_doc, path)
    assert results.load(path) == sample_doc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
    before = path.read_text(encoding="utf-8")
    changed = copy.deepcopy(sample_doc)
    changed["run"]["id"] = "other"
    with pytest.raises(UserError, match="already exists"):
        results.save(changed, path)
    assert path.read_text(encoding="utf-8") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def _take_name_first(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> list[Path]:
    """Between choosing a name and linking to it, another writer takes each name in ``names``."""
    real_link = os.link
    tried: list[Path] = []

    def link(src, dst):
        tried.append(Path(dst))
        if Path(dst).name in names:
            names.remove(Path(dst).name)
            Path(dst).write_text("another run's file", encoding="utf-8")
        return real_link(src, dst)

    monkeypatch.setattr(results.os, "link", link)
    return tried


def test_save_next_free_takes_the_next_name_when_one_is_taken_meanwhile(
    tmp_path: Path, sample_doc, monkeypatch: pytest.MonkeyPatch
) -> None:
    tried = _take_name_first(monkeypatch, ["run.json", "run.1.json"])
    saved = results.save(sample_doc, tmp_path / "run.json", next_free=True)
    assert saved == tmp_path / "run.2.json"
    assert tried == [tmp_path / "run.json", tmp_path / "run.1.json", tmp_path / "run.2.json"]
    assert results.load(saved) == sample_doc
    assert (tmp_path / "run.json").read_text(encoding="utf-8") == "another run's file"  # never replaced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.1.json", "run.2.json", "run.json"]


def test_save_without_next_free_refuses_a_name_taken_meanwhile(
    tmp_path: Path, sample_doc, monkeypatch: pytest.MonkeyPatch
) -> None:
    _take_name_first(monkeypatch, ["run.json"])
    with pytest.raises(UserError, match="already exists"):
        results.save(sample_doc, tmp_path / "run.json")
    assert (tmp_path / "run.json").read_text(encoding="utf-8") == "another run's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]


def test_save_next_free_starts_past_existing_files(tmp_path: Path, sample_doc) -> None:
    (tmp_path / "run.json").write_text("x")
    assert results.save(sample_doc, tmp_path / "run.json", next_free=True) == tmp_path / "run.1.json"


@pytest.mark.parametrize("where", ["mkstemp", "fsync"])
def test_save_failing_to_write_is_one_line_and_leaves_nothing(
    tmp_path: Path, sample_doc, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results.tempfile if where == "mkstemp" else results.os, where, full)
    with pytest.raises(UserError) as info:
        results.save(sample_doc, tmp_path / "run.json", next_free=True)
    message = str(info.value)
    assert "\n" not in message and "No space left on device" in message and "run.json" in message
    assert list(tmp_path.iterdir()) == []


def test_save_into_a_read_only_place_is_one_line(tmp_path: Path, sample_doc) -> None:
    blocker = tmp_path / "somefile"
    blocker.write_text("not a folder")
    for path in (blocker / "out.json", Path("/proc/hwbench-no-such/out.json")):
        with pytest.raises(UserError, match="cannot write") as info:
            results.save(sample_doc, path, next_free=True)
        assert "\n" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["somefile"]


def test_write_new_refuses_a_folder(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is a folder: give -o a file name"):
        results.write_new(tmp_path, "text", option="-o")


def test_check_writable(tmp_path: Path) -> None:
    results.check_writable(tmp_path / "new" / "deeper" / "out.json")  # folders it would create
    assert list(tmp_path.iterdir()) == []  # checking creates nothing that stays
    blocker = tmp_path / "somefile"
    blocker.write_text("x")
    with pytest.raises(UserError, match=r"somefile is a file, not a folder; choose another --csv"):
        results.check_writable(blocker / "sub" / "out.json", "--csv")
    for path in ("/proc/hwbench-no-such/out.json", "/sys/out.json"):
        with pytest.raises(UserError, match="is not writable") as info:
            results.check_writable(path)
        assert "\n" not in str(info.value)


def test_check_writable_refuses_a_folder_that_refuses_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(results.tempfile, "mkstemp", read_only)
    with pytest.raises(UserError, match=r"folder .* is not writable \(Read-only file system\)"):
        results.check_writable(tmp_path / "out.json")


def test_check_new_refuses_existing_files_before_any_work(tmp_path: Path) -> None:
    existing = tmp_path / "r.json"
    existing.write_text("x")
    with pytest.raises(UserError, match="r.json already exists; hwbench never overwrites a file: choose another -o"):
        results.check_new(existing, "-o")
    link = tmp_path / "dangling.json"
    link.symlink_to(tmp_path / "nowhere.json")
    with pytest.raises(UserError, match="already exists"):
        results.check_new(link)
    with pytest.raises(UserError, match="is a folder"):
        results.check_new(tmp_path)
    results.check_new(tmp_path / "free.json")


def test_fallback_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    name = f"hwbench-rescued-run-{os.getpid()}.json"
    assert results.fallback_path("/proc/nowhere/run.json") == here / name
    # the current folder is the one that failed: the system's temporary folder instead
    assert results.fallback_path(here / "run.json") == Path(tempfile.gettempdir()).absolute() / name
    real = tempfile.mkstemp

    def refuse_in(*folders: Path):
        def mkstemp(*args, dir=None, **kwargs):
            if dir is not None and Path(dir).absolute() in folders:
                raise PermissionError(errno.EROFS, "Read-only file system")
            return real(*args, dir=dir, **kwargs)

        return mkstemp

    monkeypatch.setattr(results.tempfile, "mkstemp", refuse_in(here))
    assert results.fallback_path("/proc/nowhere/run.json").parent == Path(tempfile.gettempdir()).absolute()
    monkeypatch.setattr(results.tempfile, "mkstemp", refuse_in(here, Path(tempfile.gettempdir()).absolute()))
    with pytest.raises(UserError, match="cannot rescue the results"):
        results.fallback_path("/proc/nowhere/run.json")
    assert list(here.iterdir()) == []


def test_non_finite_numbers_are_written_as_null(tmp_path: Path, sample_doc) -> None:
    metrics = sample_doc["records"][0]["metrics"]
    metrics["tflops"] = math.nan
    metrics["pct_peak"] = math.inf
    sample_doc["records"][0]["parity"]["max_rel_err"] = -math.inf
    sample_doc["run"]["timing"]["nested"] = [1.0, math.nan, (math.inf, 2.0)]
    path = results.save(sample_doc, tmp_path / "run.json")
    text = path.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    loaded = results.load(path)
    assert loaded["records"][0]["metrics"]["tflops"] is None
    assert loaded["records"][0]["metrics"]["pct_peak"] is None
    assert loaded["records"][0]["parity"]["max_rel_err"] is None
    assert loaded["run"]["timing"]["nested"] == [1.0, None, [None, 2.0]]


def test_finite_leaves_other_values_alone() -> None:
    value = {"a": 1, "b": True, "c": "nan", "d": None, "e": [0.5, -0.0]}
    assert results.finite(value) == value


# --- load refusals ---------------------------------------------------------------------------


def test_load_refuses_newer_schema(tmp_path: Path, sample_doc) -> None:
    sample_doc["schema_version"] = results.SCHEMA_VERSION + 1
    path = _write(tmp_path / "new.json", sample_doc)
    with pytest.raises(UserError, match="upgrade") as info:
        results.load(path)
    assert str(path) in str(info.value)
    assert f"schema_version {results.SCHEMA_VERSION + 1}" in str(info.value)


@pytest.mark.parametrize("version", ["missing", None, "1", 1.0, True])
def test_load_refuses_missing_or_non_integer_schema_version(tmp_path: Path, sample_doc, version) -> None:
    if version == "missing":
        del sample_doc["schema_version"]
    else:
        sample_doc["schema_version"] = version
    path = _write(tmp_path / "doc.json", sample_doc)
    with pytest.raises(UserError, match="schema_version"):
        results.load(path)


def test_load_refuses_unmigratable_older_version(tmp_path: Path, sample_doc) -> None:
    sample_doc["schema_version"] = 0
    path = _write(tmp_path / "old.json", sample_doc)
    with pytest.raises(UserError, match="cannot migrate"):
        results.load(path)


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_load_refuses_empty_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "empty.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match="empty"):
        results.load(path)


def test_load_refuses_truncated_json(tmp_path: Path, sample_doc) -> None:
    text = results.dumps(sample_doc)
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(UserError, match="truncated") as info:
        results.load(path)
    assert "not valid JSON" in str(info.value)


@pytest.mark.parametrize("top", [[], [1, 2], "text", 3, None])
def test_load_refuses_non_object_top_level(tmp_path: Path, top) -> None:
    path = _write(tmp_path / "top.json", top)
    with pytest.raises(UserError, match="top level is not an object"):
        results.load(path)


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        results.load(tmp_path / "absent.json")


def test_load_a_folder_or_binary_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is a folder, not a regular file"):
        results.load(tmp_path)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError, match="bin.json is not UTF-8 text"):
        results.load(binary)
    with pytest.raises(UserError, match="is a character device, not a regular file"):
        results.load("/dev/zero")


def _set_status(doc, value):
    doc["records"][0]["status"] = value


def _ok_without_median(doc):
    doc["records"][0]["timing"]["median_s"] = None


def _ok_with_zero_median(doc):
    doc["records"][0]["timing"]["median_s"] = 0.0


def _skipped_without_reason(doc):
    doc["records"][1]["reason"] = ""


def _missing_metrics(doc):
    del doc["records"][0]["metrics"]


def _shape_not_int(doc):
    doc["records"][0]["shape"]["M"] = 64.5


def _wrong_kind(doc):
    doc["kind"] = "something-else"


def _device_kind(doc):
    doc["backends"][0]["devices"][0]["kind"] = "fpga"


@pytest.mark.parametrize(
    "break_it",
    [
        lambda d: _set_status(d, "weird"),
        _ok_without_median,
        _ok_with_zero_median,
        _skipped_without_reason,
        _missing_metrics,
        _shape_not_int,
        _wrong_kind,
        _device_kind,
    ],
    ids=[
        "status-weird",
        "ok-median-null",
        "ok-median-zero",
        "skipped-empty-reason",
        "no-metrics",
        "shape-float",
        "kind",
        "device-kind",
    ],
)
def test_load_refuses_invalid_document(tmp_path: Path, sample_doc, break_it) -> None:
    break_it(sample_doc)
    assert results.validate(sample_doc) != []
    path = _write(tmp_path / "bad.json", sample_doc)
    with pytest.raises(UserError, match="invalid results file"):
        results.load(path)


def test_invalid_message_counts_the_other_problems(tmp_path: Path, sample_doc) -> None:
    sample_doc["records"][0]["status"] = "weird"
    sample_doc["records"][1]["reason"] = ""
    problems = results.validate(sample_doc)
    assert len(problems) >= 2
    path = _write(tmp_path / "bad.json", sample_doc)
    with pytest.raises(UserError, match=rf"and {len(problems) - 1} more"):
        results.load(path)


def test_ok_record_may_have_empty_reason_and_failed_one_needs_one(sample_doc) -> None:
    rec = sample_doc["records"][0]
    assert rec["reason"] == "" and results.validate(sample_doc) == []
    rec["status"], rec["reason"] = "parity_failed", "3 of 4096 elements outside tolerance"
    rec["timing"]["median_s"] = None
    assert results.validate(sample_doc) == []


def test_runner_style_skipped_record_is_valid(sample_doc) -> None:
    stub = CaseRequest("attention", "*", "rocm", -1, "", {})
    record = failed(base_record(stub, None, None), "skipped", "backend rocm unavailable: no torch")
    sample_doc["records"].append(record)
    assert results.validate(sample_doc) == []


# --- migration -------------------------------------------------------------------------------


def test_load_applies_registered_migration(tmp_path: Path, sample_doc, monkeypatch: pytest.MonkeyPatch) -> None:
    def v0_to_v1(doc):
        doc = dict(doc)
        doc["records"] = doc.pop("cases")  # version 0 called them "cases"
        return doc

    monkeypatch.setattr(results, "MIGRATIONS", {**results.MIGRATIONS, 0: v0_to_v1})
    old = copy.deepcopy(sample_doc)
    old["schema_version"] = 0
    old["cases"] = old.pop("records")
    loaded = results.load(_write(tmp_path / "v0.json", old))
    assert loaded == sample_doc
    assert loaded["schema_version"] == results.SCHEMA_VERSION


def test_version_1_file_loads_as_version_2(tmp_path: Path, sample_doc) -> None:
    v1 = copy.deepcopy(sample_doc)
    v1["schema_version"] = 1
    path = _write(tmp_path / "v1.json", v1)
    assert results.validate(v1) == [] and v1["schema_version"] == 1  # checked as loaded, not changed
    loaded = results.load(path)
    assert loaded == {**v1, "schema_version": 2} == sample_doc
    assert json.loads(path.read_text())["schema_version"] == 1  # the file itself is left as it was


def test_implausible_is_a_status_with_a_reason(sample_doc) -> None:
    assert "implausible" in results.STATUSES
    record = sample_doc["records"][0]
    record["status"] = "implausible"
    assert results.validate(sample_doc) != []  # a reason is required, as for every status but ok
    record["reason"] = "9000 TFLOPS is above 1.05x the device's fp32 peak 0.1 TFLOPS"
    assert results.validate(sample_doc) == []
    v1 = copy.deepcopy(sample_doc)
    v1["schema_version"] = 1
    assert results.validate(v1) == [  # version 2 added the status: a version 1 file never held it
        "records[0].status: 'implausible' is not one of ok, skipped, compile_error, runtime_error, parity_failed, "
        "timeout, crashed"
    ]


def test_migrate_chains_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    steps = []

    def step(n):
        def upgrade(doc):
            steps.append(n)
            return {**doc, "trail": doc.get("trail", []) + [n]}

        return upgrade

    monkeypatch.setattr(results, "SCHEMA_VERSION", 3)
    monkeypatch.setattr(results, "MIGRATIONS", {1: step(1), 2: step(2)})
    out = results.migrate({"schema_version": 1})
    assert out == {"schema_version": 3, "trail": [1, 2]}
    assert steps == [1, 2]
    assert results.migrate({"schema_version": 3}) == {"schema_version": 3}
    with pytest.raises(UserError, match="upgrade"):
        results.migrate({"schema_version": 4})
    with pytest.raises(UserError, match="cannot migrate"):
        results.migrate({"schema_version": 0})


# --- free_path -------------------------------------------------------------------------------


def test_free_path(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    assert results.free_path(path) == path
    path.write_text("x")
    assert results.free_path(path) == tmp_path / "run.1.json"
    (tmp_path / "run.1.json").write_text("x")
    (tmp_path / "run.2.json").write_text("x")
    assert results.free_path(path) == tmp_path / "run.3.json"
    assert results.free_path(str(path)) == tmp_path / "run.3.json"


# --- every results file committed in the repository ------------------------------------------


def test_committed_results_glob_looks_in_the_repo_root() -> None:
    assert (ROOT / "hwbench" / "results" / "files.py").is_file()
    assert (ROOT / "hwbench" / "results" / "schema" / f"results-v{results.SCHEMA_VERSION}.json").is_file()


@pytest.mark.parametrize(
    "path",
    COMMITTED
    or [pytest.param(None, marks=pytest.mark.skip(reason="no results/*.json or tests/data/*.json committed"))],
    ids=lambda p: p.name if isinstance(p, Path) else "none",
)
def test_committed_results_file_is_valid(path: Path) -> None:
    doc = results.load(path)
    assert doc["schema_version"] == results.SCHEMA_VERSION
    assert results.validate(doc) == []


def test_file_written_from_sample_doc_passes_cli_validate(tmp_path: Path, sample_doc, capsys) -> None:
    from hwbench.cli.main import main

    path = results.save(sample_doc, tmp_path / "run.json")
    assert main(["validate", str(path)]) == 0
    assert f"valid (schema_version {results.SCHEMA_VERSION}, 2 records)" in capsys.readouterr().out
    bad = _write(tmp_path / "bad.json", {**sample_doc, "kind": "x"})
    assert main(["validate", str(path), str(bad)]) == 1
