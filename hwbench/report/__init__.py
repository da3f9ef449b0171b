"""The HTML report of one or more results files: one self-contained page, no script, no URL.

:func:`build` turns loaded results documents into the page; ``hwbench report`` writes it.
Every section reads its data defensively and says "no data" (and why) where a file lacks it.

May import: ``hwbench.core``, ``hwbench.results`` and ``hwbench.decide`` (the catalog); nothing
from the network, no script in the page.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from hwbench import __version__
from hwbench.decide.catalog import Catalog
from hwbench.decide.tco_model import Model
from hwbench.report import fleet, html, sections
from hwbench.report.burn import burn_sections
from hwbench.report.data import Run, rows
from hwbench.report.summary import summary
from hwbench.report.tco import tco_sections
from hwbench.report.train import train_sections


def build(
    runs: list[tuple[Path, dict[str, Any]]],
    catalog: Catalog | None = None,
    title: str = "hwbench report",
    tco: Model | None = None,
) -> str:
    """The report page for ``runs`` (path and loaded document of each results file); with a cost
    model ``tco``, its section too."""
    catalog = catalog or Catalog.load()
    loaded = [Run(Path(path), doc) for path, doc in runs]
    found = rows(loaded)
    hosts = ", ".join(dict.fromkeys(run.host for run in loaded))
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    subtitle = (
        f"{len(loaded)} results file(s): {', '.join(run.path.name for run in loaded)} · host(s) {hosts} · "
        f"made by hwbench {__version__} at {stamp}"
    )
    body = {
        "summary": summary(loaded, catalog),
        "roofline": sections.roofline(found, catalog),
        "overhead": sections.overhead(found),
        "portability": sections.portability(found),
        "allreduce": sections.allreduce(found, loaded),
        "parity": sections.parity(found),
        "compile": sections.compile_section(loaded),
        **train_sections(loaded),
        **burn_sections(loaded),
        **fleet.section(loaded),
        **tco_sections(tco, loaded, catalog),
    }
    return html.page(title, subtitle, body)
