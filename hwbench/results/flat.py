"""The table a user sees, as data: one flat row per record of a results file.

``hwbench show FILE --format csv`` prints these rows; :func:`hwbench.results.rows` returns
them, so ``pd.DataFrame(hwbench.results.rows("file.json"))`` is the table as a data frame.
Every figure comes from what the terminal table shows (:func:`hwbench.results.tables.figures`,
:func:`~hwbench.results.tables.shape_text`), as numbers in the units of the column's name.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from hwbench.core.results_types import Document, Record
from hwbench.core.text import printable
from hwbench.results.files import load
from hwbench.results.tables import device_id, figures, shape_text

#: The columns of a row, in order: where the record ran (``device`` is ``BACKEND:INDEX``, as
#: ``--device`` takes it; None for a backend's record that ran on none), what ran, its status,
#: then the figures the table shows: median in seconds, TFLOPS (tera-operations for integer
#: dtypes, the table's TOPS), GB/s (a collective's busbw), % of peak, speed against the native
#: (t_native / t), whether the timing was noisy (the table's ``~``), and why it is not ok.
COLUMNS = (
    "backend",
    "device",
    "kernel",
    "impl",
    "dtype",
    "shape",
    "status",
    "median_s",
    "tflops",
    "gbps",
    "pct_peak",
    "speed_vs_native",
    "noisy",
    "reason",
)


def record_row(record: Record) -> dict[str, Any]:
    """One record as a flat row of :data:`COLUMNS` (numbers as numbers, None where none)."""
    device = device_id(record)
    return {
        "backend": record["backend"],
        "device": None if device == "-" else device,
        "kernel": record["kernel"],
        "impl": record["impl"],
        "dtype": record.get("dtype"),
        "shape": shape_text(record),
        "status": record["status"],
        **figures(record),
        "reason": record.get("reason") or None,
    }


def doc_rows(doc: Document) -> list[dict[str, Any]]:
    """The rows of a loaded results document, in its records' order."""
    return [record_row(r) for r in doc["records"]]


def rows(path: str | Path) -> list[dict[str, Any]]:
    """The records of the results file at ``path`` as flat rows, one dict per record with the
    keys of :data:`COLUMNS`: the table ``hwbench show`` prints, as data.

    The file is loaded (migrated and validated) as every command loads it; a bad file raises
    :class:`hwbench.core.errors.UserError` with one line saying what is wrong::

        import pandas as pd
        import hwbench.results

        df = pd.DataFrame(hwbench.results.rows("results/hwbench-HOST-TIME.json"))
        df[df.status == "ok"].groupby(["kernel", "impl"]).tflops.max()
    """
    return doc_rows(load(path))


def to_csv(table: list[dict[str, Any]]) -> str:
    """``table`` as CSV text with a header line; None is an empty cell, and every text cell is
    made printable (an escape sequence from a file shows as ``\\x1b``)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for entry in table:
        writer.writerow({k: printable(v) if isinstance(v, str) else v for k, v in entry.items()})
    return out.getvalue()
