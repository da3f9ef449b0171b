"""The weighted matrix of ``hwbench score``: dimensions, weights, and raw figure -> 0-100.

The shipped matrix is ``hwbench/data/weights.toml`` (its comments document the mapping);
``--weights FILE`` replaces it. The shipped file's ``[optional.NAME]`` tables are mappings of
dimensions outside the default matrix (TFLOPS per watt) that a ``--weights`` file may weigh.
Anything wrong in a file is one line naming the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hwbench.core.errors import UserError
from hwbench.core.loading import tomllib
from hwbench.core.text import MAX_SETTINGS_BYTES, read_regular_text

#: Every dimension hwbench can score, in display order.
DIMENSIONS = ("compute_density", "network", "storage", "time_to_first_step", "recovery", "tflops_per_watt")
#: Keys a dimension may have besides the mapping, with their types.
OPTIONS: dict[str, dict[str, type]] = {
    "network": {"max_message_bytes": int},
    "time_to_first_step": {"cache": str},
    "recovery": {"counts": str},
}
#: What the recovery dimension's ``counts`` may say: the drill's time to resume (falling back to
#: the platform file's MTTR where no drill was measured) or the MTTR.
RECOVERY_COUNTS = ("drill", "mttr")
COMMON = {"weight", "label", "unit", "better", "mode", "points"}
WEIGHT_SUM = 100.0
#: The largest magnitude of a point's raw figure: interpolating between larger ones loses the score.
MAX_POINT = 1e15


@dataclass(frozen=True)
class Dimension:
    """One column of the matrix: weight, direction and how a raw figure becomes a score."""

    name: str
    weight: float
    label: str
    unit: str
    better: str  # "higher" or "lower"
    mode: str  # "points" or "relative"
    points: tuple[tuple[float, float], ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)

    def score(self, raw: float, best: float | None = None) -> float:
        """0-100 score of ``raw``; ``best`` is the best raw figure among the platforms (relative mode)."""
        if self.mode == "relative":
            if best is None or best <= 0 or raw <= 0:
                return 0.0
            ratio = raw / best if self.better == "higher" else best / raw
            return float(min(100.0, 100.0 * ratio))
        xs = [p[0] for p in self.points]
        ys = [p[1] for p in self.points]
        return float(np.interp(raw, xs, ys))

    def describe(self) -> str:
        """The mapping in words, for tables and JSON."""
        if self.mode == "relative":
            return (
                "100 x raw / best raw among the platforms"
                if self.better == "higher"
                else "100 x best raw / raw among the platforms"
            )
        return (
            "piecewise linear through "
            + ", ".join(f"({x:g} {self.unit} -> {y:g})" for x, y in self.points)
            + ", clamped outside"
        )

    def as_json(self) -> dict[str, Any]:
        """The dimension as the score document shows it."""
        return {
            "weight": self.weight,
            "label": self.label,
            "unit": self.unit,
            "better": self.better,
            "mode": self.mode,
            "points": [list(p) for p in self.points],
            "mapping": self.describe(),
            **dict(self.options),
        }


def _read(path: Path | None) -> tuple[dict[str, Any], str]:
    if path is None:
        return tomllib.loads(resources.files("hwbench.decide.data").joinpath("weights.toml").read_text()), "default"
    text = read_regular_text(path, MAX_SETTINGS_BYTES, "weights file")
    if not text.strip():
        raise UserError(f"weights file {path} is empty: it needs [dimensions.NAME] tables with a weight each")
    try:
        return tomllib.loads(text), str(path)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"weights file {path} is not valid TOML: {exc}") from None


def _number(value: Any, what: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UserError(f"{where}: {what} must be a finite number, got {value!r}")
    return float(value)


def _points(value: Any, where: str) -> tuple[tuple[float, float], ...]:
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise UserError(f"{where}: points must be a list of at least two [raw, score] pairs")
    points = tuple(
        (_number(p[0], "a point's raw figure", where), _number(p[1], "a point's score", where)) for p in value
    )
    if any(abs(x) > MAX_POINT for x, _ in points):
        raise UserError(f"{where}: the raw figures of points must lie between -{MAX_POINT:g} and {MAX_POINT:g}")
    if any(b[0] <= a[0] for a, b in zip(points, points[1:], strict=False)):
        raise UserError(f"{where}: the raw figures of points must increase strictly")
    if any(not 0 <= s <= 100 for _, s in points):
        raise UserError(f"{where}: the scores of points must lie between 0 and 100")
    return points


def _dimension(name: str, given: Mapping[str, Any], default: Mapping[str, Any], where: str) -> Dimension:
    allowed = COMMON | set(OPTIONS.get(name, {}))
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise UserError(f"{where}: unknown key '{unknown[0]}'; a dimension takes {', '.join(sorted(allowed))}")
    merged = {**default, **given}
    if "points" in given and "mode" not in given:
        merged["mode"] = "points"
    if "weight" not in merged:
        raise UserError(f"{where}: no weight")
    weight = _number(merged["weight"], "weight", where)
    if weight < 0:
        raise UserError(f"{where}: weight must not be negative, got {weight:g}")
    better = merged.get("better", "higher")
    if better not in ("higher", "lower"):
        raise UserError(f'{where}: better must be "higher" or "lower", got {better!r}')
    mode = merged.get("mode", "points")
    if mode not in ("points", "relative"):
        raise UserError(f'{where}: mode must be "points" or "relative", got {mode!r}')
    points = _points(merged.get("points"), where) if mode == "points" else ()
    options = {}
    for key, kind in OPTIONS.get(name, {}).items():
        value = merged.get(key)
        if value is None or not isinstance(value, kind) or isinstance(value, bool):
            raise UserError(f"{where}: {key} must be a {kind.__name__}, got {value!r}")
        options[key] = value
    if name == "time_to_first_step" and options["cache"] not in ("cold", "warm"):
        raise UserError(f'{where}: cache must be "cold" or "warm", got {options["cache"]!r}')
    if name == "recovery" and options["counts"] not in RECOVERY_COUNTS:
        raise UserError(f'{where}: counts must be "drill" or "mttr", got {options["counts"]!r}')
    return Dimension(
        name, weight, str(merged.get("label", name)), str(merged.get("unit", "")), better, mode, points, options
    )


def load_weights(path: str | Path | None = None) -> tuple[dict[str, Dimension], str]:
    """The matrix (shipped, or ``path`` over the shipped mappings) and where it came from."""
    shipped, _ = _read(None)
    mappings = {**shipped["dimensions"], **shipped.get("optional", {})}
    data, origin = _read(Path(path) if path is not None else None)
    if path is None:
        data = {"dimensions": shipped["dimensions"]}
    tables = data.get("dimensions")
    extra = sorted(set(data) - {"dimensions"})
    if extra or not isinstance(tables, dict) or not tables:
        raise UserError(
            f"weights file {origin}: expected only [dimensions.NAME] tables"
            + (f", found '{extra[0]}'" if extra else "")
        )
    unknown = [n for n in tables if n not in DIMENSIONS]
    if unknown:
        raise UserError(f"weights file {origin}: unknown dimension '{unknown[0]}'; known: {', '.join(DIMENSIONS)}")
    dims = {}
    for name in DIMENSIONS:
        if name in tables:
            if not isinstance(tables[name], dict):
                raise UserError(f"weights file {origin}: dimensions.{name} must be a table")
            dims[name] = _dimension(name, tables[name], mappings[name], f"weights file {origin}, dimension {name}")
    total = sum(d.weight for d in dims.values())
    if not math.isclose(total, WEIGHT_SUM, abs_tol=1e-6):
        raise UserError(
            f"weights file {origin}: weights sum to {total:g}, not {WEIGHT_SUM:g} "
            f"({', '.join(f'{n} {d.weight:g}' for n, d in dims.items())})"
        )
    return dims, origin
