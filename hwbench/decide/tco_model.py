"""The cost model ``hwbench tco`` reads: a TOML file, checked, with the source of every default.

Layout (``hwbench/decide/data/tco-example.toml`` is a worked, commented example)::

    currency = "CNY"              # every money figure of the file (default "USD")
    years = 5                     # horizon in whole years (default 5)
    utilization = [0.35, 0.68]    # share of the hours the devices do paid work, each in (0, 1]
    electricity_per_kwh = 0.6     # a platform key here is the default of every platform

    [rate]                        # required for any currency other than USD
    per_usd = 7.1                 # units of the currency per US dollar
    as_of = "2026-11"
    source = "..."

    [[platforms]]
    name = "A100, air-cooled"
    device = "nvidia-a100-sxm-80gb"   # catalog key or device name (results records match it)
    servers = 100
    devices_per_server = 8
    price_per_server = 300000         # or price_per_device
    ...                               # the keys of PLATFORM_KEYS

A key the file leaves out takes its default (:data:`DEFAULTS`, each with its source or marked
illustrative); anything wrong is one line naming the file, the platform and the key. Every count
and sum is bounded (:data:`MAX_YEARS`, :data:`MAX_UTILIZATIONS`, :data:`MAX_PLATFORMS`,
:data:`LIMITS`), so every figure the arithmetic derives stays a finite number; a platform whose
owning costs nothing (price, build-out, staff and electricity all 0) is refused, since no cost
can be compared with it or divided by it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.loading import tomllib
from hwbench.core.text import MAX_SETTINGS_BYTES, read_regular_text
from hwbench.decide.catalog import toml_kind

#: Hours of a year of 365 days.
HOURS_PER_YEAR = 8760.0
COOLING = ("air", "liquid")

#: The longest horizon, in years, a model may ask for.
MAX_YEARS = 100
#: The most utilizations and platforms a model may compare.
MAX_UTILIZATIONS = 10
MAX_PLATFORMS = 50
#: The smallest utilization (0.1 % of the hours): below it, costs per delivered hour lose meaning.
MIN_UTILIZATION = 0.001
#: The rate per USD a model may give: [MIN_PER_USD, MAX_PER_USD] units of its currency.
MIN_PER_USD = 1e-6
MAX_PER_USD = 1e9
#: Per kind of a platform key: the largest value hwbench takes, and what that value is.
#: Every product of the arithmetic stays far from float overflow under these limits.
LIMITS: dict[str, tuple[int, str]] = {
    "count": (1_000_000, "a count of one platform"),
    "money": (10**15, "a sum in the model's currency: is a digit too many?"),
    "price": (10**15, "a sum in the model's currency: is a digit too many?"),
    "watts": (1_000_000, "watts of one device"),
    "watts0": (1_000_000, "watts of one server"),
    "pue": (10, "total facility power / IT power"),
    "premium": (10, "0.3 is 30 %"),
}


@dataclass(frozen=True)
class Default:
    """A value the model takes where the file gives none, and where it comes from."""

    value: Any
    source: str


UPTIME_PUE = (
    "Uptime Institute's industry-average PUE was 1.58 in 2023 "
    "(https://intelligence.uptimeinstitute.com/resource/"
    "large-data-centers-are-mostly-more-efficient-analysis-confirms, 2023-11)"
)
DEFAULTS: dict[str, Default] = {
    "currency": Default("USD", "hwbench: money in US dollars unless the file says otherwise"),
    "years": Default(5, "illustrative: a five-year horizon, as a 20 %/year straight-line write-off"),
    "utilization": Default(
        (0.35, 0.68), "illustrative: about 35 % of the hours busy without a cluster scheduler, about 68 % with one"
    ),
    "servers": Default(1, "hwbench: one server unless given"),
    "devices_per_server": Default(1, "hwbench: one device per server unless given"),
    "datacenter_buildout": Default(0.0, "hwbench: none unless given"),
    "staff_per_year": Default(0.0, "hwbench: none unless given"),
    "cooling": Default("air", "hwbench: air cooling unless given"),
    "pue_air": Default(1.5, f"illustrative: an air-cooled hall; for comparison, {UPTIME_PUE}"),
    "pue_liquid": Default(1.15, "illustrative: cold-plate liquid cooling"),
    "liquid_premium": Default(0.30, "illustrative: cold-plate liquid cooling's extra initial investment"),
    "host_watts_per_server": Default(0.0, "hwbench: the devices' power only unless given"),
    "idle_power_fraction": Default(0.0, "illustrative: power counted for busy hours only"),
    "depreciation_per_year": Default(0.20, "illustrative: straight line over five years, no residual value"),
    "electricity_per_kwh": Default(None, "required: no default price of electricity"),
}

#: Keys of a platform (also accepted at the top level as every platform's default): their kind.
PLATFORM_KEYS: dict[str, str] = {
    "name": "text",
    "device": "text",
    "notes": "text",
    "servers": "count",
    "devices_per_server": "count",
    "price_per_server": "money",
    "price_per_device": "money",
    "datacenter_buildout": "money",
    "staff_per_year": "money",
    "electricity_per_kwh": "money",
    "rent_per_device_hour": "price",
    "rent_source": "text",
    "rent_as_of": "date",
    "cooling": "text",
    "pue": "pue",
    "liquid_premium": "premium",
    "watts_per_device": "watts",
    "host_watts_per_server": "watts0",
    "idle_power_fraction": "fraction",
    "depreciation_per_year": "rate",
}
#: What owning a platform costs besides its hardware price: a platform where all are 0 is refused.
COSTS = ("datacenter_buildout", "staff_per_year", "electricity_per_kwh")
TOP_KEYS = ("currency", "years", "utilization", "rate", "platforms", "title")
RATE_KEYS = ("per_usd", "as_of", "source")


@dataclass(frozen=True)
class Rate:
    """How many units of ``currency`` one US dollar buys, as of when and according to whom."""

    currency: str
    per_usd: float
    as_of: str
    source: str


@dataclass(frozen=True)
class Spec:
    """One platform of the model: the file's figures with the defaults filled in."""

    name: str
    device: str
    values: dict[str, Any]
    given: frozenset[str]

    def get(self, key: str) -> Any:
        """The platform's value of ``key`` (None where neither the file nor a default gives one)."""
        return self.values.get(key)

    def source(self, key: str) -> str:
        """Where the value of ``key`` comes from: the model file, or its default's source."""
        if key in self.given:
            return "model file"
        if key == "pue":
            return DEFAULTS[f"pue_{self.values['cooling']}"].source
        return DEFAULTS[key].source if key in DEFAULTS else ""

    @property
    def devices(self) -> int:
        """Devices of the platform: servers x devices per server."""
        return int(self.values["servers"]) * int(self.values["devices_per_server"])


@dataclass(frozen=True)
class Model:
    """A checked cost model."""

    path: Path
    title: str
    currency: str
    rate: Rate | None
    years: int
    utilizations: tuple[float, ...]
    platforms: tuple[Spec, ...]
    given: frozenset[str]

    def from_usd(self, usd: float) -> float:
        """``usd`` US dollars in the model's currency."""
        return usd * (self.rate.per_usd if self.rate else 1.0)

    def to_usd(self, amount: float) -> float:
        """``amount`` of the model's currency in US dollars."""
        return amount / (self.rate.per_usd if self.rate else 1.0)

    def source(self, key: str) -> str:
        """Where a model-wide value (years, utilization, currency) comes from."""
        return "model file" if key in self.given else DEFAULTS[key].source


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _checked(key: str, value: Any, where: str) -> Any:
    """``value`` of platform key ``key`` when it is of its kind and range; UserError otherwise."""
    kind = PLATFORM_KEYS[key]
    if kind in ("text", "date"):
        if kind == "date" and isinstance(value, dt.date):
            return value.isoformat()
        if not isinstance(value, str) or not value.strip():
            raise UserError(f"{where}: {key} must be a non-empty string, not {toml_kind(value)}")
        return value
    if kind == "count":
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{where}: {key} must be a whole number of at least 1, not {toml_kind(value)}")
        _bounded(key, value, where)
        return value
    if not _real(value):
        raise UserError(f"{where}: {key} must be a finite number, not {toml_kind(value)}")
    value = float(value)
    problem = {
        "money": "must not be negative" if value < 0 else "",
        "watts0": "must not be negative" if value < 0 else "",
        "premium": "must not be negative (0.3 is 30 %)" if value < 0 else "",
        "price": "must be positive" if value <= 0 else "",
        "watts": "must be positive" if value <= 0 else "",
        "pue": "must be at least 1 (total facility power / IT power)" if value < 1 else "",
        "fraction": "must lie between 0 and 1" if not 0 <= value <= 1 else "",
        "rate": "must lie in (0, 1] (0.2 is 20 % a year)" if not 0 < value <= 1 else "",
    }[kind]
    if problem:
        raise UserError(f"{where}: {key} {problem}, got {value:g}")
    _bounded(key, value, where)
    return value


def _bounded(key: str, value: float, where: str) -> None:
    """UserError (naming the key, its limit and what it is) when ``value`` is over its kind's limit."""
    limit = LIMITS.get(PLATFORM_KEYS[key])
    if limit is not None and value > limit[0]:
        raise UserError(f"{where}: {key} must be at most {limit[0]:,} ({limit[1]}), got {value:,}")


def _unknown(keys: Any, known: Any, where: str) -> None:
    extra = sorted(set(keys) - set(known))
    if extra:
        raise UserError(f"{where}: unknown key '{extra[0]}'; known keys: {', '.join(known)}")


def _spec(number: int, table: Any, shared: dict[str, Any], where: str) -> Spec:
    if not isinstance(table, dict):
        raise UserError(f"{where}: platforms must be an array of tables ([[platforms]]), not {toml_kind(table)}")
    label = f"{where}, platform {number}" + (f" ('{table['name']}')" if isinstance(table.get("name"), str) else "")
    _unknown(table, PLATFORM_KEYS, label)
    given = {key: _checked(key, value, label) for key, value in table.items()}
    merged = {**shared, **given}
    if "device" not in merged:
        raise UserError(f'{label}: no device: give device = "CATALOG-KEY" or a device name')
    prices = [k for k in ("price_per_server", "price_per_device") if k in merged]
    if len(prices) != 1:
        raise UserError(f"{label}: give exactly one of price_per_server and price_per_device (the hardware price)")
    if "electricity_per_kwh" not in merged:
        raise UserError(f"{label}: no electricity_per_kwh (price of a kWh in the model's currency)")
    if merged.get("cooling", DEFAULTS["cooling"].value) not in COOLING:
        raise UserError(f'{label}: cooling must be "air" or "liquid", got {merged["cooling"]!r}')
    if "rent_per_device_hour" in merged and not ("rent_source" in merged and "rent_as_of" in merged):
        raise UserError(f"{label}: rent_per_device_hour needs rent_source and rent_as_of (where and when it is quoted)")
    values = {key: d.value for key, d in DEFAULTS.items() if key in PLATFORM_KEYS} | merged
    if not any(values[k] for k in (*prices, *COSTS)):
        raise UserError(
            f"{label}: owning it costs nothing ({prices[0]}, {', '.join(COSTS)} are all 0), so no cost can be "
            "compared or divided by: give what it costs (its price, or the price of its electricity)"
        )
    values.setdefault("pue", DEFAULTS[f"pue_{values['cooling']}"].value)
    name = str(values.get("name") or f"{values['device']} #{number}")
    return Spec(name, str(values["device"]), values, frozenset(merged))


def _rate(data: dict[str, Any], currency: str, where: str) -> Rate | None:
    table = data.get("rate")
    if currency == "USD":
        if table is not None:
            raise UserError(f"{where}: [rate] is for a currency other than USD; this model is in USD")
        return None
    if not isinstance(table, dict) or "per_usd" not in table or "as_of" not in table:
        raise UserError(
            f"{where}: currency {currency} needs its rate: add [rate] with per_usd ({currency} per USD) and as_of"
        )
    _unknown(table, RATE_KEYS, f"{where}, [rate]")
    per_usd, as_of, source = table["per_usd"], table["as_of"], table.get("source", "model file")
    if not _real(per_usd) or per_usd <= 0:
        raise UserError(
            f"{where}: rate.per_usd must be a positive number ({currency} per USD), not {toml_kind(per_usd)}"
        )
    if not MIN_PER_USD <= per_usd <= MAX_PER_USD:
        raise UserError(
            f"{where}: rate.per_usd must lie between {MIN_PER_USD:g} and {MAX_PER_USD:,.0f} ({currency} per USD), "
            f"got {per_usd:g}: give the units of {currency} one US dollar buys"
        )
    as_of = as_of.isoformat() if isinstance(as_of, dt.date) else as_of
    if not isinstance(as_of, str) or not as_of.strip() or not isinstance(source, str) or not source.strip():
        raise UserError(f"{where}: rate.as_of and rate.source must be non-empty strings (when and where it is quoted)")
    return Rate(currency, float(per_usd), as_of, source)


def _utilizations(value: Any, where: str) -> tuple[float, ...]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(_real(u) for u in items):
        raise UserError(
            f"{where}: utilization must be a number or an array of numbers in (0, 1], not {toml_kind(value)}"
        )
    bad = [u for u in items if not 0 < u <= 1]
    if bad:
        raise UserError(f"{where}: utilization must lie in (0, 1] (0.35 is 35 % of the hours), got {bad[0]:g}")
    small = [u for u in items if u < MIN_UTILIZATION]
    if small:
        raise UserError(
            f"{where}: utilization must be at least {MIN_UTILIZATION:g} ({MIN_UTILIZATION:.1%} of the hours), "
            f"got {small[0]:g}: a share of the hours, 0.35 is 35 %"
        )
    if len(items) > MAX_UTILIZATIONS:
        raise UserError(
            f"{where}: utilization lists {len(items)} values, over the {MAX_UTILIZATIONS} a model compares: "
            "keep the ones you decide between"
        )
    return tuple(float(u) for u in items)


def model_from(data: dict[str, Any], path: Path) -> Model:
    """The checked model of the parsed TOML ``data`` read from ``path``; UserError (one line) otherwise."""
    where = f"model file {path}"
    _unknown(data, (*TOP_KEYS, *(k for k in PLATFORM_KEYS if k != "name")), where)
    currency = data.get("currency", DEFAULTS["currency"].value)
    if not isinstance(currency, str) or not re.fullmatch(r"[A-Z]{3}", currency):
        raise UserError(
            f'{where}: currency must be a three-letter code such as "USD" or "CNY", not {toml_kind(currency)}'
        )
    rate = _rate(data, currency, where)
    years = data.get("years", DEFAULTS["years"].value)
    if not isinstance(years, int) or isinstance(years, bool) or years < 1:
        raise UserError(f"{where}: years must be a whole number of at least 1, not {toml_kind(years)}")
    if years > MAX_YEARS:
        raise UserError(
            f"{where}: years must be at most {MAX_YEARS} (the horizon in whole years), got {years}: "
            "give a shorter horizon"
        )
    utilizations = _utilizations(data.get("utilization", list(DEFAULTS["utilization"].value)), where)
    title = data.get("title", path.stem)
    if not isinstance(title, str):
        raise UserError(f"{where}: title must be a string, not {toml_kind(title)}")
    shared = {k: _checked(k, v, where) for k, v in data.items() if k in PLATFORM_KEYS}
    tables = data.get("platforms")
    if not isinstance(tables, list) or not tables:
        raise UserError(f"{where}: no platform: add at least one [[platforms]] table (name, device, servers, ...)")
    if len(tables) > MAX_PLATFORMS:
        raise UserError(
            f"{where}: {len(tables)} platforms, over the {MAX_PLATFORMS} a model compares: split it into several models"
        )
    specs = tuple(_spec(n, t, shared, where) for n, t in enumerate(tables, 1))
    names = [s.name for s in specs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"{where}: two platforms are called '{twice[0]}': give each its own name")
    given = frozenset(k for k in ("currency", "years", "utilization") if k in data)
    return Model(path, title, currency, rate, years, utilizations, specs, given)


def load_model(path: str | Path) -> Model:
    """The cost model in the TOML file ``path``, checked; UserError (one line) on anything wrong."""
    path = Path(path)
    text = read_regular_text(path, MAX_SETTINGS_BYTES, "model file")
    if not text.strip():
        raise UserError(f"model file {path} is empty: it needs at least one [[platforms]] table")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"model file {path} is not valid TOML: {exc}") from None
    return model_from(data, path)
