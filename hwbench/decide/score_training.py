"""The two dimensions of ``hwbench score`` a training job measures: time to first step and recovery.

*Time to first step* is a training run's ``train.submit_to_first_step_s`` (``hwbench train``) where
a results file has an ok ``train`` record of the cache state the weights ask for, else the GEMM
startup probe's median (``hwbench probe startup``); the source says which (``source``).

*Recovery* is the drill's measured ``drill.time_to_resume_s`` (``hwbench drill``, in minutes) or the
platform file's hardware MTTR (``mttr_minutes``), as the weights' ``counts`` says; the other figure
is shown beside it in the source and the note. ``counts = "drill"`` (the default) falls back to the
MTTR where no drill was measured, and says so: a figure is never swapped silently.
"""

from __future__ import annotations

import math
from typing import Any

from hwbench.core.results_types import Record
from hwbench.core.text import printable
from hwbench.decide.catalog import Catalog
from hwbench.decide.figures import ACCELERATOR_KINDS, Raw, ok_records, record_source
from hwbench.decide.platform import Platform
from hwbench.decide.weights import Dimension
from hwbench.results.checked import Loaded
from hwbench.results.metrics import median_s

#: How the source names each figure.
TRAIN_SOURCE = "training submit-to-first-step"
PROBE_SOURCE = "GEMM startup probe"
DRILL_SOURCE = "drill time to resume"
MTTR_SOURCE = "platform file MTTR"


def _figure(value: Any) -> float | None:
    """``value`` as a float when it is a finite non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def _cache(dim: Dimension) -> tuple[int, str]:
    warm = dim.options.get("cache", "cold") == "warm"
    return (1, "warm") if warm else (0, "cold")


def _training(platform: Platform, warm: int) -> tuple[float, Loaded, int, Record] | None:
    """The ok train record of cache state ``warm`` that counts: accelerators first, then the eager run
    (torch.compile off), then the lowest submit-to-first-step."""
    rows = []
    for loaded in platform.results:
        for index, record in ok_records(loaded, "train"):
            value = _figure((record.get("train") or {}).get("submit_to_first_step_s"))
            if value is None or record["shape"].get("warm_cache") != warm:
                continue
            accel = loaded.device_kind(record) in ACCELERATOR_KINDS
            rows.append((accel, record["impl"] == "eager", -value, loaded, index, record))
    if not rows:
        return None
    _, _, neg, loaded, index, record = max(rows, key=lambda row: row[:3])
    return -neg, loaded, index, record


def time_to_first_step(platform: Platform, dim: Dimension, catalog: Catalog) -> Raw:
    """Seconds to the first step: a training run's submit-to-first-step where the files have one
    (``hwbench train``), else the median of the GEMM startup probe (``hwbench probe startup``),
    accelerator records first; the cache state is the weights' ``cache``."""
    warm, cache = _cache(dim)
    trained = _training(platform, warm)
    if trained is not None:
        value, loaded, index, record = trained
        train = record.get("train") or {}
        submit = train.get("submit_source")
        source = record_source(
            loaded,
            index,
            record,
            source=TRAIN_SOURCE,
            cache=cache,
            submit_source=submit,
            preset=train.get("preset"),
            ranks=record["shape"].get("ranks"),
        )
        note = f"{TRAIN_SOURCE} of hwbench train ({record['impl']}, from the {submit or 'unknown submit time'})"
        return Raw(value, source, note=printable(note))
    rows = [
        (f.device_kind(r) in ACCELERATOR_KINDS, -median_s(r), f, i, r)
        for f in platform.results
        for i, r in ok_records(f, "startup")
        if r["shape"].get("warm_cache") == warm
    ]
    if not rows:
        return Raw(
            None,
            reason=f"no ok train record with {cache} compile caches (run hwbench train) and no ok startup record "
            f"with {cache} compile caches (run hwbench probe startup)",
        )
    _, neg_median, loaded, index, record = max(rows, key=lambda row: row[:2])
    source = record_source(loaded, index, record, source=PROBE_SOURCE, cache=cache, samples=record["timing"]["n"])
    return Raw(-neg_median, source)


def _drill(platform: Platform) -> dict[str, Any] | None:
    """The ok drill record that counts, as its source entry: accelerators first, then the fastest resume."""
    rows = []
    for loaded in platform.results:
        for index, record in ok_records(loaded, "drill"):
            drill = record.get("drill") or {}
            seconds = _figure(drill.get("time_to_resume_s"))
            if seconds is not None:
                rows.append((loaded.device_kind(record) in ACCELERATOR_KINDS, -seconds, loaded, index, record))
    if not rows:
        return None
    _, neg, loaded, index, record = max(rows, key=lambda row: row[:2])
    drill = record.get("drill") or {}
    return record_source(
        loaded,
        index,
        record,
        source=DRILL_SOURCE,
        minutes=-neg / 60.0,
        time_to_resume_s=-neg,
        launcher=drill.get("launcher"),
        steps_lost=drill.get("steps_lost"),
        restarts=drill.get("restarts"),
    )


def _mttr(platform: Platform) -> dict[str, Any] | None:
    facts = platform.facts
    if "mttr_minutes" not in facts:
        return None
    return {
        "source": MTTR_SOURCE,
        "minutes": facts["mttr_minutes"],
        "platform_file": str(platform.platform_file),
        "mttr_source": facts["mttr_source"],
    }


def _no_mttr(platform: Platform) -> str:
    where = f"platform file {platform.platform_file}" if platform.platform_file else "no platform file"
    return f"no mttr_minutes ({where}); give mttr_minutes and mttr_source in a platform file"


def _drill_words(drill: dict[str, Any]) -> str:
    return f"the drill resumed in {drill['minutes']:.3g} min ({drill['record']}, {drill.get('launcher') or '?'})"


def _mttr_words(mttr: dict[str, Any]) -> str:
    return f"the hardware MTTR is {mttr['minutes']:g} min ({mttr['mttr_source']})"


def recovery(platform: Platform, dim: Dimension, catalog: Catalog) -> Raw:
    """Minutes to recover: the drill's measured time to resume (``hwbench drill``) or the platform
    file's hardware MTTR, as ``counts`` says, the other beside it; ``counts = "drill"`` falls back
    to the MTTR where the files have no ok drill record, and the note says so."""
    counts = str(dim.options.get("counts", "drill"))
    drill, mttr = _drill(platform), _mttr(platform)
    if counts == "drill" and drill is not None:
        source = {**drill, "counts": counts, "mttr": mttr}
        beside = _mttr_words(mttr) if mttr else "no hardware MTTR given (mttr_minutes in a platform file)"
        counted = f"{DRILL_SOURCE} counts ({drill.get('launcher') or '?'}, {drill['record']})"
        return Raw(drill["minutes"], source, note=printable(f"{counted}; {beside}"))
    if mttr is None:
        source = {"source": MTTR_SOURCE, "counts": counts, "drill": drill}
        if drill is None:
            return Raw(None, source, reason=f"no ok drill record (run hwbench drill) and {_no_mttr(platform)}")
        return Raw(
            None,
            source,
            reason=printable(f'{_no_mttr(platform)}; counts = "mttr", so {_drill_words(drill)} but does not count'),
        )
    source = {
        "source": MTTR_SOURCE,
        "counts": counts,
        "platform_file": mttr["platform_file"],
        "mttr_source": mttr["mttr_source"],
        "mttr_minutes": mttr["minutes"],
        "drill": drill,
    }
    if drill is not None:
        note = f'{MTTR_SOURCE} counts (counts = "mttr"); {_drill_words(drill)}'
    elif counts == "drill":
        note = (
            f'{MTTR_SOURCE} counts: no ok drill record (counts = "drill" falls back to it; hwbench drill measures one)'
        )
    else:
        note = ""
    return Raw(mttr["minutes"], source, note=printable(note))
