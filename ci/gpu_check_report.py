"""The GPU check's closing lines: each figure's speed against its native, read from the results files.

    python ci/gpu_check_report.py RESULTS.json...

For each figure the GPU check measures (the Triton and llvmlite kernels beside cuBLAS and SDPA,
later the fp8 GEMM), the line says ``t_native / t_portable`` as the run derived it
(``metrics.speed_vs_native``, against the first native of the case), its goal, or why there is
no ratio (not measured, or the record's status and reason). Every other portable record with a
ratio follows, then what a compile file says failed or spilled. Reads the files with the
standard library alone; exit status 0, or 2 when a file cannot be read as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

SQUARE = {"M": 8192, "N": 8192, "K": 8192}


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
        "Triton causal bf16 attention B=4,H=32,S=4096,D=128",
        "attention",
        "triton",
        "bf16",
        attention(4, 32, 4096, 128, 1),
        0.8,
    ),
    Figure("llvmlite SIMT fp32 GEMM 8192^3 (PTX, TF32 off)", "gemm", "llvm", "fp32", SQUARE, 0.5),
    Figure("llvmlite SIMT bf16 GEMM 8192^3 (mma.sync)", "gemm", "llvm", "bf16", SQUARE, 0.5),
    Figure(
        "llvmlite SIMT fp32 attention B=1,H=8,S=4096,D=64",
        "attention",
        "llvm",
        "fp32",
        attention(1, 8, 4096, 64, 0),
        None,
    ),
    Figure("Triton fp8 GEMM 8192^3", "gemm", "triton", "fp8", SQUARE, 0.9),
)


def load(paths: list[str]) -> list[dict[str, Any]]:
    """The documents of ``paths``; SystemExit(2) with one line when one is not readable JSON."""
    docs = []
    for path in paths:
        try:
            docs.append(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            print(f"gpu-check report: cannot read {path}: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    return docs


def ratio_text(record: dict[str, Any]) -> str:
    """``0.93x vs torch_matmul``, or the reason there is no ratio."""
    if record.get("status") != "ok":
        return f"{record.get('status')}: {' '.join(str(record.get('reason', '')).split())[:100]}"
    metrics = record.get("metrics") or {}
    speed = metrics.get("speed_vs_native")
    if speed is None:
        return "no native timed beside it"
    return f"{speed:.2f}x vs {metrics.get('native_impl')}"


def where(record: dict[str, Any]) -> str:
    """The record's device as --device takes it."""
    return f"{record.get('backend')}:{record.get('device_index')}"


def figure_lines(records: list[dict[str, Any]]) -> list[str]:
    """One line per figure and device it was measured on ("not measured" where none was)."""
    lines = []
    for figure in FIGURES:
        hits = [
            r
            for r in records
            if (r.get("kernel"), r.get("impl"), r.get("dtype")) == (figure.kernel, figure.impl, figure.dtype)
            and r.get("shape") == figure.shape
        ]
        goal = f"(goal >= {figure.goal}x)" if figure.goal is not None else ""
        for record in hits or [None]:
            device = where(record) if record is not None and len(hits) > 1 else ""
            text = ratio_text(record) if record is not None else "not measured"
            lines.append(f"{figure.label:<54} {device:<8} {text:<32} {goal}".rstrip())
    return lines


def other_lines(records: list[dict[str, Any]]) -> list[str]:
    """The speed of every other portable record that has one."""
    named = {(f.kernel, f.impl, f.dtype, json.dumps(f.shape, sort_keys=True)) for f in FIGURES}
    lines = []
    for r in records:
        key = (r.get("kernel"), r.get("impl"), r.get("dtype"), json.dumps(r.get("shape"), sort_keys=True))
        if r.get("impl_kind") != "portable" or key in named or r.get("impl") == "*":
            continue
        shape = ",".join(f"{k}={v}" for k, v in (r.get("shape") or {}).items())
        lines.append(f"{where(r)} {r.get('kernel')} {r.get('impl')} {r.get('dtype')} {shape}: {ratio_text(r)}")
    return lines


def compile_lines(docs: list[dict[str, Any]]) -> list[str]:
    """What the compile sections say failed or spilled (one line when nothing did)."""
    compiled = [r for doc in docs for r in doc.get("compile") or []]
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
    """Print the figures, the other ratios and the compile problems of the files in ``argv``."""
    docs = load(argv)
    records = [r for doc in docs for r in doc.get("records") or []]
    print("figure (t_native / t_portable)")
    print("\n".join(figure_lines(records)))
    others = other_lines(records)
    if others:
        print("other portable cases")
        print("\n".join(others))
    for line in compile_lines(docs):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
