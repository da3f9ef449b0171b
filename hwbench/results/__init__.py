"""Results files and the figures in them: load, migrate, validate and save documents
(:mod:`.files`, schema in ``schema/``), figure-checked loading for downstream commands
(:mod:`.checked`), derived metrics (:mod:`.derive`, :mod:`.metrics`, :mod:`.collective_figures`),
terminal tables (:mod:`.tables`) and the same table as data (:mod:`.flat`, :func:`rows`).

May import: ``hwbench.core`` and ``hwbench.run``. Reference data (device peaks, prices) is
handed in by the caller, never imported from ``hwbench.decide``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["rows"]


def rows(path: str | Path) -> list[dict[str, Any]]:
    """The records of the results file at ``path`` as flat rows, one dict per record: backend,
    device (``cpu:0``), kernel, impl, dtype, shape as the table shows it, status, median_s,
    tflops, gbps, pct_peak, speed_vs_native, noisy, reason (:data:`hwbench.results.flat.COLUMNS`).
    The table ``hwbench show`` prints, as data::

        import pandas as pd
        import hwbench.results

        df = pd.DataFrame(hwbench.results.rows("results/hwbench-HOST-TIME.json"))

    A bad file raises :class:`hwbench.core.errors.UserError` with one line saying what is wrong.
    """
    from hwbench.results.flat import rows as flat_rows  # the tables' imports only when asked for

    return flat_rows(path)
