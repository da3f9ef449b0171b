"""Acceptance floors: what each device must reach for ``hwbench check`` to pass it.

The shipped floors are ``data/floors.toml`` (its comments document the layout): sections
``[default]``, ``[cpu]``/``[gpu]``/``[accelerator]`` and ``[devices.KEY]`` (a catalog device,
matched by name as the catalog matches it, or any model with its own ``match``), each floor
with its reason. A user's file of the same layout goes over them: every floor it sets wins.
Anything wrong in a file (unknown key, negative or non-numeric floor) is one UserError line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.core.loading import tomllib
from hwbench.core.text import MAX_SETTINGS_BYTES, read_regular_text
from hwbench.decide.catalog import Catalog


@dataclass(frozen=True)
class Check:
    """What one floor judges: its unit, the comparison that passes and its label."""

    unit: str
    op: str  # ">=", "<=" or "=="
    label: str


#: Every floor a floors file may set, in the order the verdict lists them.
CHECKS: dict[str, Check] = {
    "gemm_pct_peak": Check("%", ">=", "GEMM % of peak"),
    "stream_gbps": Check("GB/s", ">=", "stream triad"),
    "allreduce_busbw_gbps": Check("GB/s", ">=", "AllReduce busbw"),
    "allreduce_latency_us": Check("us", "<=", "AllReduce latency"),
    "burn_decay_pct": Check("%", "<=", "burn decay"),
    "mismatches": Check("", "<=", "wrong results"),
    "health_clean": Check("", "==", "health clean"),
}
KINDS = ("cpu", "gpu", "accelerator")
PERCENT_FLOORS = ("gemm_pct_peak", "burn_decay_pct")
SHIPPED = "hwbench/decide/data/floors.toml"


@dataclass(frozen=True)
class Floor:
    """One floor as it applies to a device: value (a number, true, or per dtype), why, and where from."""

    name: str
    value: Any
    reason: str
    origin: str


def _bad(where: str, what: str) -> UserError:
    return UserError(f"floors file {where}: {what}")


def _number(value: Any, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(where, f"{name} must be a number (or false to turn it off), not {value!r}")
    if value < 0:
        raise _bad(where, f"{name} must not be negative, got {value:g}")
    if name.split(".")[0] in PERCENT_FLOORS and value > 100:
        raise _bad(where, f"{name} is a percentage: at most 100, got {value:g}")
    return float(value)


def _value(name: str, value: Any, where: str) -> Any:
    """A floor's value checked: ``False`` (off), or what its check takes."""
    if value is False:
        return False
    if name == "health_clean":
        if value is not True:
            raise _bad(where, f"health_clean must be true or false, not {value!r}")
        return True
    if name == "mismatches":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise _bad(where, f"mismatches must be a whole number of at least 0, not {value!r}")
        return value
    if name == "gemm_pct_peak" and isinstance(value, dict):
        unknown = sorted(set(value) - set(DTYPE_BYTES) - {"default"})
        if unknown:
            known = ", ".join(["default", *DTYPE_BYTES])
            raise _bad(where, f"gemm_pct_peak.{unknown[0]} is not a dtype; known: {known}")
        return {dtype: _number(v, where, f"gemm_pct_peak.{dtype}") for dtype, v in value.items()}
    return _number(value, where, name)


def _section(data: Any, where: str, named: str, with_match: bool) -> dict[str, Any]:
    """One section checked: its floors, ``reasons`` and (device models) ``match``."""
    if not isinstance(data, dict):
        raise _bad(where, f"[{named}] must be a table")
    allowed = set(CHECKS) | {"reasons"} | ({"match"} if with_match else set())
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise _bad(where, f"[{named}]: unknown key '{unknown[0]}'; a section takes {', '.join(sorted(allowed))}")
    reasons = data.get("reasons", {})
    if not isinstance(reasons, dict) or not all(isinstance(r, str) and r.strip() for r in reasons.values()):
        raise _bad(where, f'[{named}]: reasons must be a table of floor = "why" strings')
    strays = sorted(set(reasons) - set(CHECKS))
    if strays:
        raise _bad(where, f"[{named}]: reasons.{strays[0]} names no floor; floors: {', '.join(CHECKS)}")
    match = data.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and m.strip() for m in match):
        raise _bad(where, f'[{named}]: match must be an array of device names (e.g. ["EPYC 9654"])')
    floors = {name: _value(name, data[name], where) for name in CHECKS if name in data}
    return {"floors": floors, "reasons": dict(reasons), "match": list(match)}


def _sections(data: dict[str, Any], where: str) -> dict[str, dict[str, Any]]:
    """Every section of one floors file, checked, by name (``default``, a kind, ``devices.KEY``)."""
    unknown = sorted(set(data) - {"default", "devices", *KINDS})
    if unknown:
        raise _bad(
            where, f"unknown table [{unknown[0]}]; sections: [default], [cpu], [gpu], [accelerator], [devices.KEY]"
        )
    out = {name: _section(data[name], where, name, False) for name in ("default", *KINDS) if name in data}
    models = data.get("devices", {})
    if not isinstance(models, dict):
        raise _bad(where, "devices must hold [devices.KEY] tables")
    for key, section in models.items():
        out[f"devices.{key}"] = _section(section, where, f"devices.{key}", True)
    return out


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _bad(where, f"not valid TOML: {exc}") from None
    return _sections(data, where)


class Floors:
    """The shipped floors and a user's file over them; :meth:`for_device` resolves one device's."""

    def __init__(self, layers: list[tuple[str, dict[str, dict[str, Any]]]], catalog: Catalog) -> None:
        self.layers = layers
        self.origins = [origin for origin, _ in layers]
        patterns: dict[str, dict[str, Any]] = {}
        for origin, sections in layers:
            for name, section in sections.items():
                if not name.startswith("devices."):
                    continue
                key = name.split(".", 1)[1]
                own = (
                    section["match"]
                    or (catalog.devices.get(key) or {}).get("match")
                    or patterns.get(key, {}).get("match")
                )
                if not own:
                    raise _bad(origin, f"[{name}] is not a catalog device and gives no match = [...] of its own")
                patterns[key] = {"match": list(own)}
        self._models = Catalog(patterns, [])  # the catalog's name matching over these sections' patterns

    @classmethod
    def load(cls, user_file: Path | None = None, catalog: Catalog | None = None) -> Floors:
        """The shipped floors, then ``user_file`` over them; every shipped floor must give its reason."""
        catalog = catalog or Catalog.load()
        shipped = _parse(resources.files("hwbench.decide.data").joinpath("floors.toml").read_text(), SHIPPED)
        for name, section in shipped.items():
            missing = sorted(set(section["floors"]) - set(section["reasons"]))
            if missing:
                raise _bad(SHIPPED, f"[{name}] gives no reasons.{missing[0]}")
        layers = [(SHIPPED, shipped)]
        if user_file is not None:
            text = read_regular_text(user_file, MAX_SETTINGS_BYTES, "floors file")
            layers.append((str(user_file), _parse(text, str(user_file))))
        return cls(layers, catalog)

    def model(self, device_name: str) -> str | None:
        """The ``devices.KEY`` section key matching ``device_name``, if any."""
        return self._models.match(device_name)

    def for_device(self, device_name: str, kind: str) -> dict[str, Floor]:
        """The floors of a device: per layer (shipped, then the user's) default, kind, model."""
        model = self.model(device_name)
        chain = ["default", kind] + ([f"devices.{model}"] if model else [])
        out: dict[str, Floor] = {}
        for origin, sections in self.layers:
            for name in chain:
                section = sections.get(name)
                if section is None:
                    continue
                for floor, value in section["floors"].items():
                    reason = section["reasons"].get(floor, "")
                    out[floor] = Floor(floor, value, reason, f"{origin} [{name}]")
        return {name: floor for name, floor in out.items() if floor.value is not False}
