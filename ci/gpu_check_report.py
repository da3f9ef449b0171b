"""The GPU check's closing lines: each figure's speed against its native, read from the results files.

    python ci/gpu_check_report.py RESULTS.json...

For each figure the GPU check measures (the Triton and llvmlite kernels beside cuBLAS and SDPA,
the fp8 GEMM beside ``torch._scaled_mm``), and each device the files hold records of, the line
says ``t_native / t_portable`` as the run derived it (``metrics.speed_vs_native``, against the
first native of the case), its goal, or why there is no ratio (not measured, no native timed
beside it, or the record's status and reason). Every other portable record with a ratio
follows, then what a compile file says failed or spilled, then the figures below their goal
(said, never a failure: a goal is what the kernels aim at, not what the check proves). Text
from the files is printed through ``hwbench.core.text.printable``. Exit status 0 when every figure row has its ratio;
1 when one is missing, skipped or failed (one line on stderr names them); 2 when a file cannot
be read as JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NamedTuple

from hwbench.core.errors import UserError
from hwbench.core.text import printable, read_regular_text

SQUARE = {"M": 8192, "N": 8192, "K": 8192}
#: The SIMT fp32 GEMM's shape: 4096^3 already fills an H200 (1024 tiles of 128 x 128) and keeps
#: its float64 reference an eighth of 8192^3's.
SIMT_SQUARE = {"M": 4096, "N": 4096, "K": 4096}


class Figure(NamedTuple):
    """A figure the check reports, with its goal (None: reported, no goal set)."""

    label: str
    kernel: str
    impl: str
    dtype: str
    shape: dict[str, int]
    goal: float | None


def attention(batch: int, heads: int, seq: int, head_dim: int, causal: int) -> dict[str, int]:
    """An attention shape as records carry it (seq_k equal to seq_q)."""
    return {"batch": batch, "heads": heads, "seq_q": seq, "seq_k": seq, "head_dim": head_dim, "causal": causal}


FIGURES = (
    Figure("Triton bf16 GEMM 8192^3", "gemm", "triton", "bf16", SQUARE, 0.9),
    Figure(
        "Triton causal bf16 attention B=1,H=32,S=4096,D=128",
        "attention",
        "triton",
        "bf16",
        attention(1, 32, 4096, 128, 1),
        0.8,
    ),
    Figure("llvmlite SIMT fp32 GEMM 4096^3 (PTX, TF32 off)", "gemm", "llvm", "fp32", SIMT_SQUARE, 0.5),
    Figure("llvmlite SIMT bf16 GEMM 8192^3 (mma.sync)", "gemm", "llvm", "bf16", SQUARE, 0.5),
    Figure(
        "llvmlite SIMT fp32 attention B=1,H=8,S=4096,D=64",
        "attention",
        "llvm",
        "fp32",
        attention(1, 8, 4096, 64, 0),
        None,
    ),
    Figure("Triton fp8 GEMM 8192^3", "gemm", "triton", "fp8", SQUARE, 0.85),
)


def load(paths: list[str]) -> list[dict[str, Any]]:
    """The documents of ``paths``; SystemExit(2) with one line when one is not a JSON object."""
    docs = []
    for path in paths:
        try:
            doc = json.loads(read_regular_text(path, what="results file"))
        except (UserError, ValueError) as exc:
            print(f"gpu-check report: cannot read {printable(path)}: {printable(exc)}", file=sys.stderr)
            raise SystemExit(2) from None
        if not isinstance(doc, dict):
            print(f"gpu-check report: {printable(path)} is not a results file (a JSON object)", file=sys.stderr)
            raise SystemExit(2)
        docs.append(doc)
    return docs


def _dicts(items: Any) -> list[dict[str, Any]]:
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _metrics(record: dict[str, Any]) -> dict[str, Any]:
    metrics = record.get("metrics")
    return metrics if isinstance(metrics, dict) else {}


def speed(record: dict[str, Any]) -> float | None:
    """The record's ``t_native / t_portable``: None unless it ran (status ok) and has a number."""
    value = _metrics(record).get("speed_vs_native") if record.get("status") == "ok" else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ratio_text(record: dict[str, Any]) -> str:
    """``0.93x vs torch_matmul``, or the reason there is no ratio."""
    if record.get("status") != "ok":
        return f"{record.get('status')}: {' '.join(str(record.get('reason', '')).split())[:100]}"
    ratio = speed(record)
    if ratio is None:
        return "no native timed beside it"
    return f"{ratio:.2f}x vs {_metrics(record).get('native_impl')}"


def where(record: dict[str, Any]) -> str:
    """The record's device as --device takes it."""
    return f"{record.get('backend')}:{record.get('device_index')}"


class Row(NamedTuple):
    """One figure on one device: its line's parts, and what it says (ratio None: missing or failed)."""

    figure: Figure
    device: str
    text: str
    ratio: float | None


def devices(records: list[dict[str, Any]]) -> list[str]:
    """The devices the files hold records of, in their first record's order."""
    return list(dict.fromkeys(where(r) for r in records))


def figure_rows(records: list[dict[str, Any]]) -> list[Row]:
    """Each figure on each device the records name ("not measured" where it has no record there;
    every record it has there, should there be more than one)."""
    rows = []
    names = devices(records) or [""]
    for figure in FIGURES:
        hits = [
            r
            for r in records
            if (r.get("kernel"), r.get("impl"), r.get("dtype")) == (figure.kernel, figure.impl, figure.dtype)
            and r.get("shape") == figure.shape
        ]
        for device in names:
            here = [r for r in hits if where(r) == device]
            for record in here or [None]:
                if record is None:
                    rows.append(Row(figure, device, "not measured", None))
                    continue
                rows.append(Row(figure, device, ratio_text(record), speed(record)))
    return rows


def figure_lines(rows: list[Row]) -> list[str]:
    """One line per row (the device said where the rows name more than one)."""
    several = len({row.device for row in rows}) > 1
    lines = []
    for row in rows:
        goal = f"(goal >= {row.figure.goal}x)" if row.figure.goal is not None else ""
        device = row.device if several else ""
        lines.append(f"{row.figure.label:<54} {device:<8} {row.text:<32} {goal}".rstrip())
    return lines


def _named(row: Row) -> str:
    return f"{row.figure.label}{' on ' + row.device if row.device else ''}"


def below_goal_lines(rows: list[Row]) -> list[str]:
    """The rows measured below their goal (none when every measured one reached it)."""
    return [
        f"below goal: {_named(row)}: {row.ratio:.2f}x, goal {row.figure.goal}x"
        for row in rows
        if row.ratio is not None and row.figure.goal is not None and row.ratio < row.figure.goal
    ]


def failed_rows(rows: list[Row]) -> list[Row]:
    """The rows with no ratio: not measured, skipped, failed, or no native timed beside them."""
    return [row for row in rows if row.ratio is None]


def other_lines(records: list[dict[str, Any]]) -> list[str]:
    """The speed of every other portable record that has one."""
    named = {(f.kernel, f.impl, f.dtype, json.dumps(f.shape, sort_keys=True)) for f in FIGURES}
    lines = []
    for r in records:
        key = (r.get("kernel"), r.get("impl"), r.get("dtype"), json.dumps(r.get("shape"), sort_keys=True))
        if r.get("impl_kind") != "portable" or key in named or r.get("impl") == "*":
            continue
        shape = r.get("shape")
        shape = ",".join(f"{k}={v}" for k, v in shape.items()) if isinstance(shape, dict) else str(shape)
        lines.append(f"{where(r)} {r.get('kernel')} {r.get('impl')} {r.get('dtype')} {shape}: {ratio_text(r)}")
    return lines


def compile_lines(docs: list[dict[str, Any]]) -> list[str]:
    """What the compile sections say failed or spilled (one line when nothing did)."""
    compiled = [r for doc in docs for r in _dicts(doc.get("compile"))]
    lines = []
    for r in compiled:
        if r.get("status") != "ok" or r.get("spilled"):
            spills = " (spills)" if r.get("spilled") else ""
            reason = " ".join(str(r.get("reason", "")).split())[:120]
            lines.append(f"compile: {r.get('target')} {r.get('kernel')} {r.get('impl')} {r.get('variant')}: ")
            lines[-1] += f"{r.get('status')}{spills} {reason}".rstrip()
    if compiled and not lines:
        lines.append(f"compile: {len(compiled)} kernel variants compiled, none spilled")
    return lines


def main(argv: list[str]) -> int:
    """Print the figures, the other ratios, the compile problems and the figures below their goal
    of the files in ``argv``; 1 when a figure row has no ratio, else 0."""
    docs = load(argv)
    records = [r for doc in docs for r in _dicts(doc.get("records"))]
    rows = figure_rows(records)
    others = other_lines(records)
    lines = ["figure (t_native / t_portable)", *figure_lines(rows)]
    lines += ["other portable cases", *others] if others else []
    lines += compile_lines(docs)
    lines += below_goal_lines(rows) or ["below goal: none (every figure measured reached its goal)"]
    for line in lines:
        print(printable(line))
    failed = failed_rows(rows)
    if failed:
        named = "; ".join(f"{_named(row)} ({row.text.split(':')[0]})" for row in failed)
        line = f"gpu-check report: {len(failed)} of {len(rows)} figure rows have no ratio: {named}"
        print(printable(line), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
