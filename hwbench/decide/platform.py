"""A candidate platform for ``hwbench score``: its results files and an optional platform file.

On the command line a platform is ``[NAME=]FILE[,FILE...]``: results files (``.json``) and
at most one platform file (``.toml``). A platform file may list its results files itself
(``results = [...]``, relative to the platform file), so ``hwbench score a.toml b.toml``
works. Platform file keys::

    name = "vendor A, 8x H200"        # shown in the ranking (default: NAME=, else the file's stem)
    usd_per_hour = 3.80               # rental price of ONE device per hour
    price_source = "quote Q-1234"     # where the price comes from (required with usd_per_hour)
    price_as_of = "2026-11"           # when it was quoted (required with usd_per_hour)
    sla_availability = 99.9           # percent, reported beside the score
    mttr_minutes = 25                 # mean time to repair a hardware fault (the recovery dimension)
    mttr_source = "SLA section 4.2"   # required with mttr_minutes
    notes = "..."
    results = ["a-run.json", "a-probes.json"]

Every file named is read only when it is a regular file of sane size (a FIFO or ``/dev/zero``
would hang or exhaust memory): one line says which is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.loading import tomllib
from hwbench.core.text import MAX_RESULTS_BYTES, MAX_SETTINGS_BYTES, check_regular, read_regular_text
from hwbench.results.checked import Loaded, load_checked

KEYS = {
    "name": str,
    "usd_per_hour": float,
    "price_source": str,
    "price_as_of": str,
    "sla_availability": float,
    "mttr_minutes": float,
    "mttr_source": str,
    "notes": str,
    "results": list,
}


@dataclass(frozen=True)
class Platform:
    """Everything known about one candidate."""

    name: str
    results: tuple[Loaded, ...]
    platform_file: Path | None = None
    facts: dict[str, Any] = field(default_factory=dict)


def _value(key: str, value: Any, where: str) -> Any:
    kind = KEYS[key]
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UserError(f"{where}: {key} must be a finite number, got {value!r}")
        if value < 0 or (key == "usd_per_hour" and value == 0):
            raise UserError(f"{where}: {key} must be positive, got {value!r}")
        if key == "sla_availability" and value > 100:
            raise UserError(f"{where}: sla_availability is a percentage (e.g. 99.9), got {value!r}")
        return float(value)
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UserError(f"{where}: results must be a list of file names")
        return value
    if not isinstance(value, str):
        raise UserError(f"{where}: {key} must be a string, got {value!r}")
    return value


def load_platform_file(path: Path) -> dict[str, Any]:
    """The checked keys of a platform file; UserError (one line) on anything wrong."""
    where = f"platform file {path}"
    text = read_regular_text(path, MAX_SETTINGS_BYTES, "platform file")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where} is not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise UserError(f"{where}: unknown key '{unknown[0]}'; known keys: {', '.join(KEYS)}")
    facts = {key: _value(key, value, where) for key, value in data.items()}
    if "mttr_minutes" in facts and not facts.get("mttr_source", "").strip():
        raise UserError(f"{where}: mttr_minutes needs mttr_source (where the figure comes from)")
    unsourced = [k for k in ("price_source", "price_as_of") if not facts.get(k, "").strip()]
    if "usd_per_hour" in facts and unsourced:
        raise UserError(
            f"{where}: usd_per_hour needs price_source and price_as_of (where and when the price comes from); "
            f"{unsourced[0]} is missing"
        )
    return facts


def parse_platform(text: str) -> Platform:
    """``[NAME=]FILE[,FILE...]`` as a :class:`Platform` with its files loaded and checked."""
    name, eq, files = text.partition("=")
    if not eq:
        name, files = "", text
    paths = [Path(p.strip()) for p in files.split(",") if p.strip()]
    if not paths:
        raise UserError(f"platform '{text}' names no file: give [NAME=]RESULTS.json[,...][,PLATFORM.toml]")
    tomls = [p for p in paths if p.suffix == ".toml"]
    if len(tomls) > 1:
        raise UserError(f"platform '{text}' names {len(tomls)} platform files; give at most one")
    facts: dict[str, Any] = {}
    platform_file = tomls[0] if tomls else None
    result_paths = [p for p in paths if p.suffix != ".toml"]
    if platform_file is not None:
        facts = load_platform_file(platform_file)
        result_paths += [platform_file.parent / p for p in facts.get("results", [])]
    if not result_paths:
        raise UserError(
            f"platform '{text}' has no results file (name one, or list them in the platform file's results = [...])"
        )
    unique = list(dict.fromkeys(result_paths))
    for path in unique:  # before any is read: a FIFO or /dev/zero would hang the reader or exhaust memory
        check_regular(path, MAX_RESULTS_BYTES, "results file")
    loaded = tuple(load_checked(p) for p in unique)
    label = facts.get("name") or name.strip() or (platform_file or result_paths[0]).stem
    return Platform(label, loaded, platform_file, facts)
