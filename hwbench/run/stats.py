"""Summary statistics of timing samples and the warnings they call for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from hwbench.core.results_types import TimingSection

#: A relative spread above this makes a figure untrustworthy.
CV_WARN = 0.10
#: A sample within this many timer resolutions is dominated by timer granularity.
RESOLUTION_MARGIN = 10.0


@dataclass(frozen=True)
class Summary:
    """Median, spread and extremes of a sample set (seconds)."""

    n: int
    median: float
    mean: float
    std: float
    q1: float
    q3: float
    iqr: float
    cv: float
    min: float
    max: float
    p99: float


def summarize(samples: Sequence[float]) -> Summary:
    """Statistics of ``samples``: quartiles by linear interpolation, sample std (ddof=1)."""
    if len(samples) == 0:
        raise ValueError("no samples to summarize")
    x = np.asarray(samples, dtype=np.float64)
    q1, median, q3, p99 = np.percentile(x, [25, 50, 75, 99])
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if len(x) > 1 else 0.0
    return Summary(
        n=len(x),
        median=float(median),
        mean=mean,
        std=std,
        q1=float(q1),
        q3=float(q3),
        iqr=float(q3 - q1),
        cv=std / mean if mean > 0 else (0.0 if std == 0 else math.inf),
        min=float(x.min()),
        max=float(x.max()),
        p99=float(p99),
    )


def timing_section(samples: Sequence[float], *, timer: str | None, **fields: Any) -> TimingSection:
    """A record's ``timing``: the statistics of ``samples`` (seconds), then the ``timer`` and
    ``fields`` (of :class:`~hwbench.core.results_types.TimingSection`: resolution, how the samples
    were taken), then the samples themselves."""
    s = summarize(samples)
    section: TimingSection = {
        "median_s": s.median,
        "iqr_s": s.iqr,
        "q1_s": s.q1,
        "q3_s": s.q3,
        "mean_s": s.mean,
        "std_s": s.std,
        "cv": s.cv,
        "min_s": s.min,
        "max_s": s.max,
        "p99_s": s.p99,
        "n": s.n,
        "timer": timer,
    }
    section.update(cast(TimingSection, fields))  # optional keys of the section
    section["samples_s"] = list(samples)
    return section


def stability_warnings(summary: Summary, resolution_s: float) -> list[str]:
    """Human warnings for a noisy figure or one near the timer's resolution."""
    warnings = []
    if summary.n > 1 and summary.cv > CV_WARN:
        warnings.append(f"noisy: CV {summary.cv:.1%} > {CV_WARN:.0%}")
    if summary.min < RESOLUTION_MARGIN * resolution_s:
        warnings.append(
            f"shortest sample {summary.min:.3g} s is within {RESOLUTION_MARGIN:g}x "
            f"the timer resolution {resolution_s:.3g} s"
        )
    return warnings
