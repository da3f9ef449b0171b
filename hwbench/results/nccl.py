"""Collective records as nccl-tests prints them: one row per size, out of place then in place.

A kernel that spans ranks (AllReduce) has one record per (backend, device, impl, dtype, count,
ranks, in_place). Its records make one block per (backend, device, impl, dtype, ranks), as
each run of nccl-tests' ``all_reduce_perf`` prints one: the column header of
``writeResultHeader`` (``size count type redop root`` then ``time algbw busbw #wrong`` for
out of place and again for in place), one row per count in the widths of
``writeBenchmarkLinePreamble``/``writeBenchmarkLineBody``, and the footer of
``writeResultFooter`` (``# Out of bounds values`` and ``# Avg bus bandwidth``, the mean busbw
over the block's timings, both placements, as nccl-tests averages every timing it printed).
Each block opens with nccl-tests' ``# Collective test starting: PROGRAM`` line and closes with
its ``# Collective test concluded: PROGRAM`` line, PROGRAM naming the block
(``all_reduce_perf impl=llvm_shm device=cpu:0 type=float ranks=2``: :func:`block_name`), so a
script splits the output into blocks as it splits the logs of several nccl-tests runs.

The rule for scripts: every line but the rows starts with ``#``, and every row has
nccl-tests' 13 columns (:data:`COLUMNS`), whatever happened to its case, so a script that
reads nccl-tests' output reads these blocks too.

Differences, each said in the legend line: ``time`` is the median iteration (each iteration
the slowest rank's), where nccl-tests prints the mean; a case that did not run, or whose
output was wrong, shows its status in the time column and ``N/A`` as algbw and busbw
(``#wrong`` still counts the wrong elements when they were counted); a placement without a
record shows ``-`` in its four columns.
"""

from __future__ import annotations

from collections.abc import Iterable
from statistics import fmean
from typing import Any

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.core.kernel import get_kernel
from hwbench.core.results_types import Record
from hwbench.core.text import printable

#: nccl-tests' names of the dtypes (``test_typenames``).
NCCL_TYPES = {"fp32": "float", "fp64": "double", "fp16": "half", "bf16": "bfloat16"}
#: The redop and root nccl-tests prints per collective; others print ``none`` and -1, as its all_gather.
OPS = {"allreduce": ("sum", -1)}
#: nccl-tests' program per collective kernel (``all_reduce_perf``); others are ``KERNEL_perf``.
PROGRAMS = {"allreduce": "all_reduce_perf"}
#: Width nccl-tests gives time, algbw, busbw together (``%7s  %6s  %6s``): a status and two N/A go there.
STATUS_WIDTH = 23
#: The columns of a row: size, count, type, redop, root, then time, algbw, busbw, #wrong twice.
COLUMNS = 13

LEGEND = (
    "# time: median iteration in us, each the slowest rank's (nccl-tests prints the mean)",
    "# algbw = size / time, busbw = algbw x bus factor (allreduce: 2(n-1)/n), in GB/s of 1e9 bytes",
)
#: The note under the ordinary table when it holds collective records.
BUSBW_NOTE = (
    "GB/s of a collective: its busbw (algbw x 2(n-1)/n for allreduce, as nccl-tests); "
    "metrics.gbps in the file is its algbw"
)

HEADER = (
    f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place                       in-place",
    f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
    + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}" * 2,
    f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
    + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}" * 2,
)


def is_collective(record: Record) -> bool:
    """Whether ``record`` is a case of a kernel that spans ranks (a kernel this hwbench does not
    know, or a record without a count, goes to the ordinary table)."""
    if record.get("impl") == "*" or "count" not in (record.get("shape") or {}):
        return False
    try:
        return get_kernel(record["kernel"]).spans_ranks
    except UserError:
        return False


def float_cell(value: float | None, width: int) -> str:
    """``value`` in ``width`` characters as nccl-tests' ``getFloatStr``: two decimals, then
    fewer, then an exponent; '-' for None."""
    if value is None:
        return "-".rjust(width)
    for fmt in (".2f", ".1f", ".0f"):
        text = format(value, f">{width}{fmt}")
        if len(text) <= width:
            return text
    return format(value, f">{width}.{1 if width >= 7 else 0}e")


def _wrong(record: Record) -> str:
    mismatches = (record.get("parity") or {}).get("mismatches")
    return "N/A".rjust(6) if mismatches is None else format(float(mismatches), "6g")


def _body(record: Record | None) -> str:
    """time, algbw, busbw and #wrong of one placement (``writeBenchmarkLineBody``)."""
    if record is None:
        return f"  {'-':>7}  {'-':>6}  {'-':>6}  {'-':>6}"
    if record["status"] != "ok":
        status = record["status"]
        cells = f"{status:>7}  {'N/A':>6}  {'N/A':>6}" if len(status) <= 7 else f"{status} N/A N/A"
        return f"  {cells:>{STATUS_WIDTH}}  {_wrong(record)}"
    median = record["timing"].get("median_s")
    m = record["metrics"]
    time = float_cell(None if median is None else median * 1e6, 7)
    return f"  {time}  {float_cell(m.get('algbw_gbps'), 6)}  {float_cell(m.get('busbw_gbps'), 6)}  {_wrong(record)}"


def _row(kernel: str, dtype: str | None, count: int, pair: dict[int, Record]) -> str:
    """One size: ``writeBenchmarkLinePreamble``, then out of place and in place."""
    width = DTYPE_BYTES.get(dtype or "")
    size = str(count * width) if width else "-"
    redop, root = OPS.get(kernel, ("none", -1))
    type_name = NCCL_TYPES.get(dtype or "", dtype or "-")
    return f"{size:>12}  {count:>12}  {type_name:>8}  {redop:>6}  {root:>6}" + _body(pair.get(0)) + _body(pair.get(1))


def _device_id(record: Record) -> str:
    index = record.get("device_index")
    return f"{record['backend']}:{index}" if isinstance(index, int) and index >= 0 else record["backend"]


def _blocks(records: Iterable[Record]) -> dict[tuple[Any, ...], list[Record]]:
    """Records by (kernel, backend, device, impl, dtype, ranks), in the order they first appear."""
    blocks: dict[tuple[Any, ...], list[Record]] = {}
    for r in records:
        key = (r["kernel"], r["backend"], _device_id(r), r["impl"], r.get("dtype"), r["shape"].get("ranks"))
        blocks.setdefault(key, []).append(r)
    return blocks


def _pairs(records: list[Record]) -> list[tuple[int, dict[int, Record]]]:
    """(count, {in_place: record}) ascending by count; a second record of a taken slot opens a new row."""
    rows: list[tuple[int, dict[int, Record]]] = []
    for r in sorted(records, key=lambda r: r["shape"]["count"]):
        count, placement = r["shape"]["count"], int(bool(r["shape"].get("in_place", 0)))
        if not rows or rows[-1][0] != count or placement in rows[-1][1]:
            rows.append((count, {}))
        rows[-1][1][placement] = r
    return rows


def _speeds(records: list[Record]) -> str:
    """``gloo 0.87x-5.4x, mpi 2.1x``: t_native / t over the block's timings, per native."""
    found: dict[str, list[float]] = {}
    for r in records:
        m = r["metrics"]
        native_impl, speed = m.get("native_impl"), m.get("speed_vs_native")
        speeds = m.get("speeds_vs_natives") or ({native_impl: speed} if native_impl and speed else {})
        for native, ratio in speeds.items():
            found.setdefault(native, []).append(ratio)
    parts = []
    for native, ratios in found.items():
        low, high = format(min(ratios), ".3g"), format(max(ratios), ".3g")
        parts.append(f"{native} {low}x" + (f"-{high}x" if high != low else ""))
    return ", ".join(parts)


def _footer(records: list[Record]) -> list[str]:
    """nccl-tests' footer (``writeResultFooter``), then speed against the natives and noise."""
    wrong = sum(1 for r in records if ((r.get("parity") or {}).get("mismatches") or 0) > 0)
    busbw = [b for r in records if r["status"] == "ok" and (b := r["metrics"].get("busbw_gbps"))]
    if not busbw:
        average = "N/A (no timing ok)"
    else:
        average = format(fmean(busbw), "g") + (
            f" ({len(busbw)} of {len(records)} timings ok)" if len(busbw) < len(records) else ""
        )
    lines = [
        f"# {'Out of bounds values':<20} : {wrong} {'FAILED' if wrong else 'OK'}",
        f"# {'Avg bus bandwidth':<20} : {average}",
    ]
    speeds = _speeds(records)
    if speeds:
        lines.append(f"# {'Speed vs native':<20} : {speeds} (t_native / t)")
    noisy = sum(any(w.startswith("noisy") for w in r.get("warnings", [])) for r in records)
    if noisy:
        lines.append(
            f"# {'Noisy timings':<20} : {noisy} of {len(records)}, CV above 10 % (each record's warnings give it)"
        )
    return lines


def block_name(kernel: str, device_id: str, impl: str, dtype: str | None, ranks: Any) -> str:
    """What the lines opening and closing a block name: nccl-tests' program, then the block's
    implementation, device (``BACKEND:INDEX``), type and ranks as ``KEY=VALUE`` words."""
    type_name = NCCL_TYPES.get(dtype or "", dtype or "-")
    program = PROGRAMS.get(kernel, f"{kernel}_perf")
    return f"{program} impl={impl} device={device_id} type={type_name} ranks={ranks}"


def nccl_tables(records: Iterable[Record], device: bool = False) -> list[str]:
    """The blocks of the collective records among ``records`` (each line made printable), after
    the legend; no lines when there are none. ``device`` names the device (``BACKEND:INDEX``) in
    each block's title rather than the backend. Every line but the rows starts with ``#``."""
    blocks = _blocks(r for r in records if is_collective(r))
    if not blocks:
        return []
    lines = list(LEGEND)
    for (kernel, backend, device_id, impl, dtype, ranks), members in blocks.items():
        kind = members[0].get("impl_kind")
        type_name = NCCL_TYPES.get(dtype or "", dtype or "-")
        name = block_name(kernel, device_id, impl, dtype, ranks)
        lines += [
            "#",
            f"# Collective test starting: {name}",
            f"# {kernel} on {device_id if device else backend}: {impl}"
            + (f" ({kind})" if kind else "")
            + f", {type_name}, {ranks} ranks",
            "#",
            *HEADER,
            *(_row(kernel, dtype, count, pair) for count, pair in _pairs(members)),
            *_footer(members),
            "#",
            f"# Collective test concluded: {name}",
        ]
    lines.append("#")
    return [printable(line).rstrip() for line in lines]
