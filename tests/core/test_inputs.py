"""Hostile but realistic input: non-finite options, catalog and platform files of the wrong
structure, files that are not regular files (FIFOs, /dev/zero, folders) or too large, and names
holding control characters. Bad input is one line and exit 2; names print escaped.
"""

from __future__ import annotations

import copy
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hwbench.cli.main import main
from hwbench.core.errors import UserError
from hwbench.core.text import MAX_RESULTS_BYTES, check_regular, printable, read_regular_text
from hwbench.results.tables import summary, table

DATA = Path(__file__).resolve().parents[1] / "data"
ESC = "\x1b"


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """Fail, not hang, where a reader would block on a FIFO."""

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("blocked reading a file that is not a regular file")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def _one_line_error(argv: list[str], capsys: pytest.CaptureFixture[str], *expected: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hwbench: error: "), err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, err
    return err


# --- non-finite options -------------------------------------------------------------------------


def _run_argv(tmp_path: Path, *more: str) -> list[str]:
    out = tmp_path / "r.json"
    return ["run", "--backend", "cpu", "--kernel", "gemm", "--shape", "gemm:M=8,N=8,K=8", "--out", str(out), *more]


@pytest.mark.parametrize(
    "flag,value,expected",
    [
        ("--timeout", "inf", "--timeout must be a positive, finite number of seconds"),
        ("--timeout", "nan", "--timeout must be a positive"),
        ("--budget", "inf", "--budget must be a positive, finite number of seconds"),
        ("--budget", "-1", "--budget must be a positive"),
        ("--price-per-hour", "inf", "--price-per-hour must be a positive, finite number of USD"),
        ("--price-per-hour", "nan", "--price-per-hour must be a positive"),
        ("--price-per-hour", "-2", "--price-per-hour must be a positive"),
    ],
)
def test_non_finite_run_options_are_one_line(
    flag: str, value: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _one_line_error(_run_argv(tmp_path, flag, value), capsys, expected)
    assert not (tmp_path / "r.json").exists()


def test_list_refuses_an_infinite_timeout(capsys: pytest.CaptureFixture[str]) -> None:
    _one_line_error(["list", "--timeout", "inf"], capsys, "--timeout must be a positive, finite number")


# --- catalog files ------------------------------------------------------------------------------

GOOD_DEVICE = '[devices.x]\nmatch = ["X"]\nsource = "s"\nas_of = "2026-11"\n'
BAD_CATALOGS = [
    ("devices = 5\n", "devices must be a table"),
    ("devices = [1, 2]\n", "devices must be a table"),
    ("[devices]\nx = 5\n", "devices.x must be a table"),
    ('[devices]\nx = "H100"\n', "devices.x must be a table"),
    ("prices = 5\n", "prices must be an array of tables"),
    ("prices = [1, 2]\n", "price row 1 must be a table"),
    ("[prices]\ndevice = 'x'\n", "prices must be an array of tables"),
    ("meta = 3\n", "meta must be a table"),
    (GOOD_DEVICE + "peak_tflops = 5\n", "devices.x.peak_tflops must be a table"),
    (GOOD_DEVICE + 'peak_tflops = { fp32 = "fast" }\n', "devices.x.peak_tflops.fp32 must be a positive number"),
    (GOOD_DEVICE + "peak_tflops = { fp32 = inf }\n", "devices.x.peak_tflops.fp32 must be a positive number"),
    (GOOD_DEVICE + "peak_tflops = { fp32 = -1 }\n", "devices.x.peak_tflops.fp32 must be a positive number"),
    (GOOD_DEVICE + "peak_tflops = { fp32 = true }\n", "devices.x.peak_tflops.fp32 must be a positive number"),
    (GOOD_DEVICE + "mem_tbps = nan\n", "devices.x.mem_tbps must be a positive number"),
    ('[devices.x]\nmatch = "X"\nsource = "s"\nas_of = "2026-11"\n', "devices.x.match must be an array"),
    ('[devices.x]\nmatch = [1]\nsource = "s"\nas_of = "2026-11"\n', "devices.x.match must be an array"),
    ('[devices.x]\nsource = 5\nas_of = "2026-11"\n', "devices.x needs source and as_of"),
    ('[[prices]]\ndevice = 5\nusd_per_hour = 1.0\nsource = "s"\nas_of = "2026"\n', "price row 1: device must be"),
    ('[[prices]]\ninstance = "i"\nusd_per_hour = inf\nsource = "s"\nas_of = "2026"\n', "price row 1 needs usd_per"),
    ('[[prices]]\ninstance = "i"\nusd_per_hour = 1.0\ngpus = 0\nsource = "s"\nas_of = "2026"\n', "gpus must be"),
]


@pytest.mark.parametrize("text,expected", BAD_CATALOGS)
def test_a_catalog_of_the_wrong_structure_is_one_line(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    catalog = tmp_path / "cat.toml"
    catalog.write_text(text)
    _one_line_error(["score", str(DATA / "cpu-base.json"), "--catalog", str(catalog)], capsys, expected, str(catalog))


def test_a_catalog_may_date_its_figures_with_toml_dates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hwbench.decide.catalog import Catalog

    catalog = tmp_path / "cat.toml"
    catalog.write_text(
        '[devices.x]\nmatch = ["Acme X"]\nsource = "lab"\nas_of = 2026-11-01\npeak_tflops = { fp32 = 2 }\n'
    )
    assert Catalog.load(catalog).device_peak("Acme X", None, "fp32") == (2.0, "datasheet x (lab, 2026-11-01)")


def test_a_catalog_that_is_a_fifo_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "cat.toml"
    os.mkfifo(fifo)
    _one_line_error(["score", str(DATA / "cpu-base.json"), "--catalog", str(fifo)], capsys, "is a FIFO", str(fifo))


# --- platform files -----------------------------------------------------------------------------

PRICED = 'usd_per_hour = 1.5\nprice_source = "quote Q-1"\nprice_as_of = "2026-11"\n'


@pytest.mark.parametrize(
    "text,expected",
    [
        ("usd_per_hour = inf\n", "usd_per_hour must be a finite number"),
        ("mttr_minutes = -inf\nmttr_source = 's'\n", "mttr_minutes must be a finite number"),
        ("sla_availability = nan\n", "sla_availability must be a finite number"),
        ("mttr_minutes = -3\nmttr_source = 's'\n", "mttr_minutes must be positive"),
        ("usd_per_hour = 1.5\n", "usd_per_hour needs price_source and price_as_of"),
        ('usd_per_hour = 1.5\nprice_source = "quote"\n', "price_as_of is missing"),
        ('usd_per_hour = 1.5\nprice_as_of = "2026-11"\nprice_source = " "\n', "price_source is missing"),
        ("results = 5\n", "results must be a list of file names"),
    ],
)
def test_a_platform_files_values_are_checked(
    text: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    platform = tmp_path / "p.toml"
    platform.write_text(text)
    _one_line_error(["score", f"{DATA / 'cpu-base.json'},{platform}"], capsys, expected, str(platform))


def test_a_sourced_platform_price_is_used(tmp_path: Path) -> None:
    from hwbench.decide.platform import parse_platform

    platform = tmp_path / "p.toml"
    platform.write_text(PRICED)
    facts = parse_platform(f"{DATA / 'cpu-base.json'},{platform}").facts
    assert facts["usd_per_hour"] == 1.5 and facts["price_source"] == "quote Q-1"


def _platform_naming(tmp_path: Path, results: str) -> Path:
    platform = tmp_path / "p.toml"
    platform.write_text(f"results = [{json.dumps(results)}]\n")
    return platform


@pytest.mark.parametrize("name,expected", [("/dev/zero", "is a character device"), ("fifo.json", "is a FIFO")])
def test_a_platforms_results_must_be_regular_files(
    name: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if name == "fifo.json":
        os.mkfifo(tmp_path / name)
    platform = _platform_naming(tmp_path, name)
    err = _one_line_error(["score", str(platform)], capsys, expected, "results file")
    assert name in err


def test_a_results_folder_or_a_fifo_on_the_command_line_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(tmp_path / "pipe.json")
    _one_line_error(["score", str(tmp_path / "pipe.json")], capsys, "is a FIFO")
    (tmp_path / "dir.json").mkdir()
    _one_line_error(["score", str(tmp_path / "dir.json")], capsys, "is a folder")


def test_a_platform_file_that_is_a_fifo_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "p.toml")
    _one_line_error(["score", f"{DATA / 'cpu-base.json'},{tmp_path / 'p.toml'}"], capsys, "platform file", "FIFO")


def test_a_results_file_over_the_limit_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(MAX_RESULTS_BYTES + 1)  # sparse: no disk used, and never read
    platform = _platform_naming(tmp_path, "huge.json")
    _one_line_error(
        ["score", str(platform)], capsys, f"huge.json is {MAX_RESULTS_BYTES + 1:,} bytes, over the 2 GiB hwbench reads"
    )


# --- the readers themselves ---------------------------------------------------------------------


def test_read_regular_text_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path, kind in (
        (tmp_path / "fifo", "a FIFO"),
        (Path("/dev/zero"), "a character device"),
        (tmp_path, "a folder"),
    ):
        with pytest.raises(UserError, match=f"is {kind}.*, not a regular file"):
            read_regular_text(path, 1024, "results file")
        with pytest.raises(UserError, match=f"is {kind}.*, not a regular file"):
            check_regular(path, 1024, "results file")
    with pytest.raises(UserError, match="no such file"):
        read_regular_text(tmp_path / "missing", 1024)


def test_read_regular_text_limits_and_decodes(tmp_path: Path) -> None:
    small = tmp_path / "a.txt"
    small.write_text("héllo\n", encoding="utf-8")
    assert read_regular_text(small, 7) == "héllo\n"
    with pytest.raises(UserError, match="over the"):
        read_regular_text(small, 6)
    small.write_bytes(b"\xff\xfe{}")
    with pytest.raises(UserError, match="is not UTF-8 text"):
        read_regular_text(small, 100)
    link = tmp_path / "link.txt"
    link.symlink_to(small)
    assert check_regular(link, 100) == 4  # links are followed to what they name


def test_a_file_that_grows_while_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A regular file whose size says it fits but which yields more (as /proc files do)."""
    import hwbench.core.text as text

    path = tmp_path / "grows.txt"
    path.write_text("x" * 100)
    real = os.fstat

    def shrunk(fd: int) -> os.stat_result:
        info = list(real(fd))
        info[6] = 10  # st_size
        return os.stat_result(info)

    monkeypatch.setattr(text.os, "fstat", shrunk)
    with pytest.raises(UserError, match="grew past"):
        read_regular_text(path, 50)


# --- names on the terminal ----------------------------------------------------------------------


def test_printable_escapes_controls_and_keeps_text() -> None:
    assert printable("H100 80GB — ünïcode") == "H100 80GB — ünïcode"
    assert printable("a\x1b[31mred\x1b[0m") == "a\\x1b[31mred\\x1b[0m"
    assert printable("two\nlines\rand\ttab\x00\x7f") == "two\\nlines\\rand\\ttab\\x00\\x7f"
    assert printable("c1\x9b2J") == "c1\\x9b2J"
    assert printable("bidi\u202eevil\u2066") == "bidi\\u202eevil\\u2066"
    assert printable(3) == "3"


def test_table_cells_are_escaped() -> None:
    out = table([("a\x1b[2J", "b")], ("x", "y"))
    assert ESC not in out and "a\\x1b[2J" in out
    assert out.splitlines()[0].startswith("x")


def _hostile_doc() -> dict:
    doc = json.loads((DATA / "cpu-base.json").read_text())
    doc = copy.deepcopy(doc)
    doc["host"]["hostname"] = "evil\x1b]0;owned\x07host"
    for backend in doc["backends"]:
        for device in backend.get("devices", []):
            device["name"] = "dev\x1b[2Jice"
    record = doc["records"][0]
    record["backend"] = "cpu\x1b[31m"
    record["shape"] = {"M\x1b[1m": 8}
    record["warnings"] = ["odd\nwarning\x1b[0m"]
    return doc


def test_summary_prints_names_from_a_file_escaped() -> None:
    out = summary(_hostile_doc())
    assert ESC not in out and "\x07" not in out
    assert "evil\\x1b]0;owned\\x07host" in out and "dev\\x1b[2Jice" in out
    assert "cpu\\x1b[31m" in out and "M\\x1b[1m=8" in out and "odd\\nwarning\\x1b[0m" in out


def test_show_prints_a_hostile_file_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(_hostile_doc()))
    if main(["show", str(path)]) != 0:
        pytest.fail(capsys.readouterr().err)
    out = capsys.readouterr().out
    assert ESC not in out and "dev\\x1b[2Jice" in out
