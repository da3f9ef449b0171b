"""Terminal output: progress while running, and the results table (run end and ``show``).

Names and reasons come from results files and drivers: every cell and line is printed through
:func:`hwbench.core.text.printable`, so a control character (an ANSI escape) shows as an escape.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from hwbench.core.dtypes import is_integer
from hwbench.core.errors import UserError
from hwbench.core.kernel import Kernel, get_kernel
from hwbench.core.results_types import Document, Parity, Record
from hwbench.core.text import aligned, printable
from hwbench.results.nccl import BUSBW_NOTE, is_collective, nccl_tables
from hwbench.run.case import CaseRequest
from hwbench.sensors.health import health_lines

HEADERS = (
    "backend",
    "kernel",
    "impl",
    "dtype",
    "shape",
    "status",
    "median",
    "TFLOPS",
    "GB/s",
    "% peak",
    "vs native",
    "parity",
)


#: Short names for the table (the results file keeps the full ones).
SHORT = {"batch": "B", "heads": "H", "seq_q": "Sq", "seq_k": "Sk", "head_dim": "D"}


def _shape(shape: dict[str, int], kernel: str = "") -> str:
    """The shape as the kernel describes it where it has its own form (stream: ``triad,n=...``),
    else ``NAME=VALUE`` pairs with short names."""
    try:
        spec = get_kernel(kernel) if kernel else None
    except UserError:  # a kernel this hwbench does not know (a file from elsewhere)
        spec = None
    if spec is not None and type(spec).describe_shape is not Kernel.describe_shape and shape:
        try:
            return spec.describe_shape(shape)
        except (KeyError, IndexError, TypeError):  # a shape its kernel would not take
            pass
    return ",".join(f"{SHORT.get(k, k)}={v}" for k, v in shape.items()) or "-"


def seconds(value: float | None) -> str:
    """A duration with a readable unit (s, ms, us, ns); '-' for None."""
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def speed(ratio: float | None) -> str:
    """A speed ratio as people read it: ``0.87x`` (87 % of the native's speed), ``5.4x``; '-' for None."""
    return "-" if ratio is None else f"{ratio:.3g}x"


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _parity(parity: Parity) -> str:
    if parity.get("passed") is None:
        return "-"
    if parity.get("exact"):
        return "exact" if parity["passed"] else f"{parity.get('mismatches')} wrong"
    err = parity.get("max_abs_err")
    verdict = "ok" if parity["passed"] else "FAIL"
    return f"{verdict} {err:.1e}" if err is not None else verdict


def _noisy(record: Record) -> bool:
    return any(w.startswith("noisy") for w in record.get("warnings", []))


def device_column(doc: Document) -> bool:
    """Whether the table needs a device column: a backend of the file has more than one device."""
    return any(len(b.get("devices") or []) > 1 for b in doc.get("backends", []))


def with_device(headers: tuple[str, ...]) -> tuple[str, ...]:
    """``headers`` with ``device`` after ``backend``."""
    at = headers.index("backend") + 1
    return (*headers[:at], "device", *headers[at:])


def device_id(record: Record) -> str:
    """``BACKEND:INDEX`` of the record's device (as ``--device`` takes it); '-' where it has none."""
    index = record.get("device_index")
    return f"{record['backend']}:{index}" if isinstance(index, int) and index >= 0 else "-"


def figures(record: Record) -> dict[str, Any]:
    """The figures of a record's table row, as numbers (None where it has none): ``median_s``,
    ``tflops``, ``gbps`` (a collective's busbw), ``pct_peak`` (a bandwidth kernel's share of
    the memory bandwidth), ``speed_vs_native``, and whether the timing is ``noisy``."""
    m, t = record["metrics"], record["timing"]
    return {
        "median_s": t.get("median_s"),
        "tflops": m.get("tflops"),
        "gbps": m.get("busbw_gbps", m.get("gbps")),
        "pct_peak": m["pct_bw_peak"] if "pct_bw_peak" in m else m.get("pct_peak"),
        "speed_vs_native": m.get("speed_vs_native"),
        "noisy": _noisy(record),
    }


def shape_text(record: Record) -> str:
    """The record's shape as the table shows it (``M=1024,N=1024,K=1024``, ``triad,n=4194304``)."""
    return _shape(record["shape"], record["kernel"])


def row(record: Record, device: bool = False) -> tuple[str, ...]:
    """One table row of a record (with its ``BACKEND:INDEX`` after the backend when ``device``)."""
    f = figures(record)
    return (
        record["backend"],
        *((device_id(record),) if device else ()),
        record["kernel"],
        record["impl"],
        record.get("dtype") or "-",
        shape_text(record),
        record["status"],
        seconds(f["median_s"]) + ("~" if f["noisy"] else ""),
        _rate(f["tflops"], record.get("dtype")),
        _num(f["gbps"], ".4g"),
        _num(f["pct_peak"], ".1f"),
        speed(f["speed_vs_native"]),
        _parity(record["parity"]),
    )


#: Columns of the run table aligned right.
NUMBER_COLUMNS = frozenset({"median", "TFLOPS", "GB/s", "% peak", "vs native"})


def _rate(value: Any, dtype: str | None) -> str:
    """The TFLOPS cell: integer dtypes' figures are operations, labelled TOPS."""
    text = _num(value, ".4g")
    return f"{text} TOPS" if text != "-" and dtype and is_integer(dtype) else text


def table(rows: Iterable[tuple[str, ...]], headers: tuple[str, ...] = HEADERS) -> str:
    """Rows aligned under headers (numbers right-aligned), every cell made printable."""
    return aligned(rows, headers, NUMBER_COLUMNS)


def nccl_form(doc: Document, collective: str = "nccl") -> bool:
    """Whether :func:`summary` prints ``doc`` as nccl-tests' output: ``collective`` is ``"nccl"``
    and the file holds collective records. Then every line but nccl-tests' rows starts with
    ``#``, and so must every line printed after it on the same stream (:func:`comment`)."""
    return collective == "nccl" and any(is_collective(r) for r in doc["records"])


def comment(text: str) -> str:
    """``text`` with every line a comment of nccl-tests' output: ``# `` before each line that
    does not start with ``#``, and ``#`` for an empty one."""
    return "\n".join(line if line.startswith("#") else f"# {line}".rstrip() for line in text.split("\n"))


def summary(doc: Document, warnings: bool = True, collective: str = "nccl") -> str:
    """Header, results table and the reasons behind every record that is not ok (and the file's
    warnings, unless ``warnings`` is False: ``run`` prints those on stderr).

    Records of kernels that span ranks (AllReduce) print as nccl-tests does
    (:mod:`hwbench.results.nccl`) when ``collective`` is ``"nccl"``, in the table with the
    others when it is ``"table"`` (its GB/s being their busbw, said under it). In nccl-tests'
    form (:func:`nccl_form`) every other line, the table of the other kernels included, is a
    ``#`` comment: a script that reads each line not starting with ``#`` as a row of
    nccl-tests' 13 columns reads only the rows."""
    if collective not in ("nccl", "table"):
        raise ValueError(f"collective is 'nccl' or 'table', not {collective!r}")
    host, run = doc["host"], doc["run"]
    blas = [b for b in doc.get("software", {}).get("blas", []) if "internal_api" in b]
    lines = [
        f"hwbench {run['hwbench']['version']}  run {run['id'][:8]}  {run['started']}"
        + ("  (INCOMPLETE)" if run.get("incomplete") else ""),
        f"host {host['hostname']}: {host['cpu']['model']}, {host['cpu']['cores']} cores",
    ]
    if blas:
        lines.append(
            "BLAS " + ", ".join(f"{b['internal_api']} {b['version']} ({b.get('architecture')} kernel)" for b in blas)
        )
    for backend in doc.get("backends", []):
        many = len(backend["devices"]) > 1
        state = (
            ", ".join(f"{backend['name']}:{d['index']} {d['name']}" if many else d["name"] for d in backend["devices"])
            if backend["available"]
            else f"unavailable: {backend['reason']}"
        )
        lines.append(f"backend {backend['name']}: {state}")
    lines += [f"warning: {w}" for w in doc.get("warnings", [])] if warnings else []
    lines = [printable(line) for line in lines]
    records = doc["records"]
    device = device_column(doc)
    spanning = [r for r in records if is_collective(r)] if collective == "nccl" else []
    # The nccl blocks count their own noisy timings; the ~ note counts the table's.
    quiet: dict[int, Record] = {
        id(r): {**r, "warnings": [w for w in r.get("warnings", []) if not w.startswith("noisy")]} for r in spanning
    }
    cases = [r for r in records if r["impl"] != "*" and id(r) not in quiet]
    headers = with_device(HEADERS) if device else HEADERS
    if cases or not spanning:
        lines += ["", table((row(r, device) for r in cases), headers) if cases else "no cases ran"]
    if any(is_collective(r) for r in cases):
        lines.append(BUSBW_NOTE)
    blocks = nccl_tables(spanning, device) if spanning else []
    after = _notes([quiet.get(id(r), r) for r in records], device)
    health = [printable(line) for line in health_lines(doc)]
    after += ["", *health] if health else []
    price = next((r["metrics"].get("price_source") for r in records if r["metrics"].get("price_source")), None)
    if price:
        after.append(printable(f"price: {price}"))
    if not blocks:
        return "\n".join(lines + after)
    # nccl-tests' form: the blocks' rows are the only lines that are not comments
    parts = [comment("\n".join(lines)), "#", *blocks]
    if after:
        parts.append(comment("\n".join(after)))
    return "\n".join(parts)


def _notes(records: list[Record], device: bool = False) -> list[str]:
    """Why each record is not ok (kernels that share a reason on one line), then timing notes."""
    grouped: dict[tuple[str, str, str], list[str]] = {}
    lines = []
    for r in records:
        who = device_id(r) if device and device_id(r) != "-" else r["backend"]
        what = f"{who} {r['kernel']} {r['impl']} {r.get('dtype') or ''} {_shape(r['shape'], r['kernel'])}".replace(
            "  ", " "
        )
        if r["impl"] == "*":
            grouped.setdefault((r["status"], r["backend"], r["reason"]), []).append(r["kernel"])
        elif r["status"] != "ok":
            lines.append(f"{r['status']}: {what}: {r['reason']}")
        lines += [f"note: {what}: {w}" for w in r.get("warnings", []) if not w.startswith("noisy")]
    lines = [
        f"{status}: {backend} {', '.join(kernels)}: {reason}" for (status, backend, reason), kernels in grouped.items()
    ] + lines
    noisy = sum(_noisy(r) for r in records)
    if noisy:
        lines.append(f"~ after a median: noisy, CV above 10 % ({noisy} records; each record's warnings give the CV)")
    return [""] + [printable(line) for line in lines] if lines else []


def elapsed(seconds_: float) -> str:
    """Wall time so far as a clock: ``0:07``, ``12:34``, ``1:02:03``."""
    whole = int(seconds_)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressLine:
    """One line per finished case (a live counter on a terminal), with the run's elapsed time."""

    def __init__(self, stream: TextIO = sys.stderr, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.live = stream.isatty()
        self.clock = clock
        self.started = clock()

    def __call__(self, number: int, total: int, record: Record | None, case: CaseRequest | None) -> None:
        assert case is not None
        count = f"{number}/{total}" if total else str(number)  # no total: a search's budget ends it
        what = printable(
            f"[{count} {elapsed(self.clock() - self.started)}] {case.backend} {case.kernel} {case.impl} "
            f"{case.dtype} {_shape(case.shape, case.kernel)}"
        )
        if record is None:
            if self.live:
                self.stream.write(f"\r\033[K{what} ...")
                self.stream.flush()
            return
        median = record["timing"].get("median_s")
        result = record["status"] if median is None else f"ok {seconds(median)}"
        if record["status"] != "ok":
            result += f" ({record['reason'][:100]})"
        self.stream.write(("\r\033[K" if self.live else "") + f"{what} {printable(result)}\n")
        self.stream.flush()
