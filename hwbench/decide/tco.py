"""Owning against renting: the arithmetic of ``hwbench tco`` over a checked model (:mod:`.tco_model`).

Per platform, with D devices, H = 8760 hours a year and utilization u (the share of the
hours the devices do paid work), in the model's currency:

- initial investment C = hardware + data-centre build-out, x (1 + liquid_premium) when cooled by liquid;
- depreciation, straight line without residual value: C x rate a year until C is written off;
- electricity a year = P x PUE x H x (idle + (1 - idle) x u) x price per kWh, P the full-load
  power in kW (devices x watts per device + servers x host watts per server);
- owning a year = depreciation + electricity + staff; renting a year = rent per device-hour x D x H x u
  (paid per used hour);
- break-even utilization over y years: owning = A + B u and renting = R u cost the same at
  u = A / (R - B); "never" where that is outside (0, 1];
- cost per delivered PFLOP-hour = cumulative cost / (TFLOPS x D x H x u x years / 1000), the
  TFLOPS measured (the best GEMM in a results file), never assumed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from hwbench.core.errors import UserError
from hwbench.core.results_types import Record
from hwbench.core.text import printable
from hwbench.decide.catalog import Catalog
from hwbench.decide.platform import Platform
from hwbench.decide.score import CostBasis, best_gemm
from hwbench.decide.tco_model import HOURS_PER_YEAR, LIMITS, Model, Spec
from hwbench.results.checked import Loaded

Wanted = Callable[[Record], bool]
#: The most TFLOPS a device's record may claim (a zettaFLOPS): beyond it a file is not a measurement.
MAX_TFLOPS = 1_000_000_000
#: The largest power of a device a record may claim, in W: the model's own limit of watts_per_device.
MAX_WATTS = LIMITS["watts"][0]
#: Break-even utilizations above this show as "over" it.
MAX_SHOWN_BREAK_EVEN = 100.0


@dataclass(frozen=True)
class Figure:
    """A figure of the model (None where unknown) and where it comes from, or why it is unknown."""

    value: float | None
    source: str

    def as_json(self) -> dict[str, Any]:
        """``{"value": ..., "source": ...}``."""
        return {"value": self.value, "source": self.source}


@dataclass(frozen=True)
class Inputs:
    """One platform's figures, resolved: the model's, the measured ones and the catalog's."""

    spec: Spec
    catalog_key: str | None
    hardware: float
    buildout: float
    premium: float
    device_watts: Figure
    pue: float
    rent: Figure
    tflops: Figure

    @property
    def devices(self) -> int:
        """Devices of the platform."""
        return self.spec.devices

    @property
    def capex(self) -> float:
        """Initial investment: hardware, build-out and any liquid-cooling premium."""
        return self.hardware + self.buildout + self.premium

    @property
    def power_kw(self) -> float:
        """Full-load IT power of the whole platform in kW."""
        watts = float(self.device_watts.value or 0.0)
        host = float(self.spec.get("host_watts_per_server"))
        return (self.devices * watts + int(self.spec.get("servers")) * host) / 1000.0

    @property
    def electricity_full_year(self) -> float:
        """Electricity of a year busy all the time, cooling (PUE) included."""
        return self.power_kw * self.pue * HOURS_PER_YEAR * float(self.spec.get("electricity_per_kwh"))

    def electricity(self, u: float) -> float:
        """Electricity of a year at utilization ``u`` (idle hours at the idle share of full power)."""
        idle = float(self.spec.get("idle_power_fraction"))
        return self.electricity_full_year * (idle + (1.0 - idle) * u)

    def depreciation(self, year: int) -> float:
        """Depreciation counted in ``year`` (1-based): straight line, nothing after the write-off."""
        rate = float(self.spec.get("depreciation_per_year"))
        return self.capex * max(0.0, min(rate, 1.0 - rate * (year - 1)))

    def written_off(self, years: int) -> float:
        """Depreciation counted over the first ``years`` years: the sum of :meth:`depreciation`, in closed form."""
        rate = float(self.spec.get("depreciation_per_year"))
        return self.capex * min(1.0, rate * years)

    def owning(self, year: int, u: float) -> dict[str, float]:
        """The cost of owning in ``year`` at utilization ``u``, by part and in total."""
        parts = {
            "depreciation": self.depreciation(year),
            "electricity": self.electricity(u),
            "staff": float(self.spec.get("staff_per_year")),
        }
        return {**parts, "total": sum(parts.values())}

    def renting(self, u: float) -> float | None:
        """The rent of a year at utilization ``u`` (None without a rental price)."""
        if self.rent.value is None:
            return None
        return self.rent.value * self.devices * HOURS_PER_YEAR * u


def money(value: float | None) -> str:
    """A sum of money, compact: 12.79 M, 2.5 k, 0.6 (an en dash when unknown)."""
    if value is None:
        return "–"
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {suffix}"
    return f"{value:.4g}"


def year_table(platform: dict[str, Any], currency: str) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a TCO document's platform: one row per utilization and year."""
    headers = [
        "utilization",
        "year",
        f"owning ({currency}, cum.)",
        f"renting ({currency}, cum.)",
        "cheaper",
        "break-even utilization",
        f"owning per PFLOP-h ({currency})",
        f"renting per PFLOP-h ({currency})",
    ]
    rows = [
        [
            f"{scenario['utilization']:.0%}",
            str(row["year"]),
            money(row["owning_cumulative"]),
            money(row["renting_cumulative"]),
            row["cheaper"] or "–",
            row["break_even"]["text"],
            money(row["owning_per_pflop_hour"]),
            money(row["renting_per_pflop_hour"]),
        ]
        for scenario in platform["scenarios"]
        for row in scenario["years"]
    ]
    return headers, rows


def device_matcher(spec: Spec, catalog: Catalog) -> Wanted:
    """Whether a record is of the platform's device: the same catalog device, or the same name."""
    key = spec.device if spec.device in catalog.devices else catalog.match(spec.device)
    name = spec.device.casefold()

    def wanted(record: Record) -> bool:
        device = str(record.get("device") or "")
        return device.casefold() == name or (key is not None and catalog.match(device) == key)

    return wanted


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _watts(loaded: Loaded, index: int, record: Record) -> float | None:
    """The record's measured ``energy.watts`` (None where it has none); UserError over :data:`MAX_WATTS`."""
    energy = record.get("energy")
    watts = energy.get("watts") if isinstance(energy, dict) else None
    if watts is None or not _positive(watts):
        return None
    if watts > MAX_WATTS:
        raise UserError(
            f"{loaded.where(index)}: energy.watts {watts:g} is over the {MAX_WATTS:,} W of a device hwbench takes: "
            "is it the right results file?"
        )
    return float(watts)


def _measured_watts(files: Sequence[Loaded], wanted: Wanted, best: tuple[Loaded, int, Record] | str) -> Figure:
    if not isinstance(best, str) and (watts := _watts(*best)) is not None:
        return Figure(watts, f"measured: {best[0].where(best[1])} energy.watts (the best GEMM)")
    rows = [
        (w, f, i) for f in files for i, r in f.records() if r["status"] == "ok" and wanted(r) and (w := _watts(f, i, r))
    ]
    if rows:
        watts, loaded, index = max(rows, key=lambda row: row[0])
        return Figure(watts, f"measured: {loaded.where(index)} energy.watts (the device's highest)")
    return Figure(None, "no results file measured the device's power")


def _device_watts(spec: Spec, model: Model, key: str | None, catalog: Catalog, measured: Figure) -> Figure:
    if measured.value is not None:
        return measured
    if spec.get("watts_per_device") is not None:
        return Figure(float(spec.get("watts_per_device")), "model file: watts_per_device")
    entry = catalog.devices.get(key, {}) if key else {}
    if _positive(entry.get("tdp_w")):
        return Figure(float(entry["tdp_w"]), f"catalog {key} TDP ({entry.get('source', '')}, {entry.get('as_of', '')})")
    raise UserError(
        f"model file {model.path}, platform '{printable(spec.name)}': no power for device "
        f"'{printable(spec.device)}' (no results file "
        "measured it and the catalog has no TDP for it): give watts_per_device"
    )


def _rent(spec: Spec, model: Model, key: str | None, catalog: Catalog) -> Figure:
    if spec.get("rent_per_device_hour") is not None:
        source = f"model file: rent_per_device_hour ({spec.get('rent_source')}, as of {spec.get('rent_as_of')})"
        return Figure(float(spec.get("rent_per_device_hour")), source)
    quote = catalog.price(key) if key else None
    if quote is None:
        return Figure(None, f"no rental price for '{printable(spec.device)}': give rent_per_device_hour")
    source = f"catalog {key}: {quote.basis} ({quote.source}; as of {quote.as_of})"
    if model.rate is not None:
        rate = model.rate
        source += f", x {rate.per_usd:g} {rate.currency}/USD (as of {rate.as_of}; {rate.source})"
    return Figure(model.from_usd(quote.usd_per_hour), source)


def resolve(
    spec: Spec, model: Model, catalog: Catalog, files: Sequence[Loaded], wanted: Wanted | None = None
) -> Inputs:
    """``spec``'s figures: power and TFLOPS measured in ``files`` (records ``wanted`` accepts: by
    default those of the platform's device), else the model's or the catalog's; UserError without power."""
    key = spec.device if spec.device in catalog.devices else catalog.match(spec.device)
    wanted = wanted or device_matcher(spec, catalog)
    best = best_gemm(files, wanted)
    if isinstance(best, str):
        seen = any(wanted(r) for f in files for _, r in f.records())
        reason = best if seen else "no results file given" if not files else "no results file has a record of it"
        tflops = Figure(None, f"no measured TFLOPS for '{printable(spec.device)}': {reason}")
    else:
        value = float(cast(float, best[2]["metrics"]["tflops"]))  # best_gemm's candidates have TFLOPS
        if value > MAX_TFLOPS:
            raise UserError(
                f"{best[0].where(best[1])}: metrics.tflops {value:g} is over the {MAX_TFLOPS:,} TFLOPS of a device "
                "hwbench takes: is it the right results file?"
            )
        tflops = Figure(value, f"measured: {best[0].where(best[1])} ({best[2]['dtype']})")
    watts = _device_watts(spec, model, key, catalog, _measured_watts(files, wanted, best))
    price = spec.get("price_per_server")
    hardware = price * spec.get("servers") if price is not None else spec.get("price_per_device") * spec.devices
    buildout = float(spec.get("datacenter_buildout"))
    liquid = spec.get("cooling") == "liquid"
    premium = (hardware + buildout) * float(spec.get("liquid_premium")) if liquid else 0.0
    return Inputs(
        spec,
        key,
        float(hardware),
        buildout,
        premium,
        watts,
        float(spec.get("pue")),
        _rent(spec, model, key, catalog),
        tflops,
    )


def break_even(inputs: Inputs, years: int) -> dict[str, Any]:
    """The utilization at which owning and renting cost the same over ``years``, or why there is none
    in (0, 1]: ``{"utilization": u | None, "cheaper": "owning"|"renting"|None, "text": ...}``."""
    if inputs.rent.value is None:
        return {"utilization": None, "cheaper": None, "text": "unknown: no rental price"}
    idle = float(inputs.spec.get("idle_power_fraction"))
    fixed = inputs.written_off(years) + years * (
        float(inputs.spec.get("staff_per_year")) + inputs.electricity_full_year * idle
    )
    per_u_owning = years * inputs.electricity_full_year * (1.0 - idle)
    per_u_renting = years * inputs.rent.value * inputs.devices * HOURS_PER_YEAR
    margin = per_u_renting - per_u_owning
    if margin <= 0:
        text = "never: renting is cheaper at every utilization (the rent is at most owning's electricity per hour)"
        return {"utilization": None, "cheaper": "renting", "text": text}
    if fixed <= 0:
        return {"utilization": None, "cheaper": "owning", "text": "never: owning is cheaper at every utilization"}
    u = fixed / margin  # margin > 0; a tiny margin gives inf, which is > 1 as well
    if u > 1:
        at = f"{u:.0%}" if u <= MAX_SHOWN_BREAK_EVEN else f"over {MAX_SHOWN_BREAK_EVEN:.0%}"
        text = f"never: renting is cheaper up to 100 % utilization (owning would break even at {at})"
        return {"utilization": None, "cheaper": "renting", "text": text}
    return {"utilization": u, "cheaper": None, "text": f"{u:.1%}"}


def _per_pflop_hour(cost: float | None, inputs: Inputs, u: float, years: int) -> float | None:
    """``cost`` per delivered PFLOP-hour; None without TFLOPS, or where the quotient is not a finite number."""
    if cost is None or inputs.tflops.value is None:
        return None
    delivered = inputs.tflops.value * inputs.devices * HOURS_PER_YEAR * u * years / 1000.0
    per = cost / delivered if delivered > 0 else math.inf
    return per if math.isfinite(per) else None


def _cheaper(owned: float, rented: float | None) -> str | None:
    if rented is None:
        return None
    if math.isclose(owned, rented, rel_tol=1e-12):
        return "same"
    return "owning" if owned < rented else "renting"


def year_rows(inputs: Inputs, years: int, u: float) -> list[dict[str, Any]]:
    """Year by year at utilization ``u``: owning (by part) and renting, each cumulative too,
    which is cheaper, break-even utilization and cost per delivered PFLOP-hour so far."""
    rows, owned, rented = [], 0.0, 0.0
    pflop_hours_a_year = (
        None if inputs.tflops.value is None else inputs.tflops.value * inputs.devices * HOURS_PER_YEAR * u / 1000
    )
    for year in range(1, years + 1):
        owning, renting = inputs.owning(year, u), inputs.renting(u)
        owned += owning["total"]
        rented += renting or 0.0
        rent_total = None if renting is None else rented
        rows.append(
            {
                "year": year,
                "owning": owning,
                "renting": renting,
                "owning_cumulative": owned,
                "renting_cumulative": rent_total,
                "cheaper": _cheaper(owned, rent_total),
                "break_even": break_even(inputs, year),
                "delivered_pflop_hours": None if pflop_hours_a_year is None else pflop_hours_a_year * year,
                "owning_per_pflop_hour": _per_pflop_hour(owned, inputs, u, year),
                "renting_per_pflop_hour": _per_pflop_hour(rent_total, inputs, u, year),
            }
        )
    return rows


def _inputs_json(inputs: Inputs) -> dict[str, Any]:
    spec = inputs.spec
    figure = {
        key: Figure(spec.get(key), spec.source(key)).as_json() for key in SPEC_FIGURES if spec.get(key) is not None
    }
    return {
        "device": spec.device,
        "catalog_key": inputs.catalog_key,
        "servers": spec.get("servers"),
        "devices_per_server": spec.get("devices_per_server"),
        "devices": inputs.devices,
        **figure,
        "hardware": inputs.hardware,
        "liquid_premium_amount": inputs.premium,
        "initial_investment": inputs.capex,
        "watts_per_device": inputs.device_watts.as_json(),
        "power_kw": inputs.power_kw,
        "electricity_full_year": inputs.electricity_full_year,
        "rent_per_device_hour": inputs.rent.as_json(),
        "tflops": inputs.tflops.as_json(),
    }


SPEC_FIGURES = (
    "price_per_server",
    "price_per_device",
    "datacenter_buildout",
    "staff_per_year",
    "cooling",
    "pue",
    "liquid_premium",
    "host_watts_per_server",
    "electricity_per_kwh",
    "idle_power_fraction",
    "depreciation_per_year",
)


def tco_document(model: Model, catalog: Catalog, files: Sequence[Loaded] = ()) -> dict[str, Any]:
    """The TCO document: the model's settings, then per platform its inputs (each with its source),
    break-even utilization and, per utilization, the years."""
    platforms = []
    for spec in model.platforms:
        inputs = resolve(spec, model, catalog, files)
        platforms.append(
            {
                "name": spec.name,
                "notes": spec.get("notes"),
                "inputs": _inputs_json(inputs),
                "break_even": break_even(inputs, model.years),
                "scenarios": [
                    {"utilization": u, "years": year_rows(inputs, model.years, u)} for u in model.utilizations
                ],
            }
        )
    rate = model.rate
    return {
        "kind": "hwbench-tco",
        "model": str(model.path),
        "title": model.title,
        "currency": model.currency,
        "rate": None if rate is None else {"per_usd": rate.per_usd, "as_of": rate.as_of, "source": rate.source},
        "years": {"value": model.years, "source": model.source("years")},
        "utilization": {"values": list(model.utilizations), "source": model.source("utilization")},
        "hours_per_year": HOURS_PER_YEAR,
        "files": [str(f.path) for f in files],
        "platforms": platforms,
    }


def _spec_for(model: Model, catalog: Catalog, platform: Platform, record: Record) -> Spec | str:
    named = [s for s in model.platforms if s.name == platform.name]
    if named:
        return named[0]
    matching = [s for s in model.platforms if device_matcher(s, catalog)(record)]
    if matching:
        return matching[0]
    return (
        f"the TCO model {model.path} has no platform named '{printable(platform.name)}' nor one of device "
        f"'{printable(record.get('device'))}'"
    )


def score_cost(model: Model, catalog: Catalog) -> CostBasis:
    """Compute density's divisor from the model: owning's cost over its years at its first
    utilization per used device-hour, in USD (power measured in the platform's own files)."""
    u, years = model.utilizations[0], model.years

    def price(platform: Platform, loaded: Loaded, record: Record) -> tuple[float, str, dict[str, Any]] | str:
        spec = _spec_for(model, catalog, platform, record)
        if isinstance(spec, str):
            return spec
        inputs = resolve(spec, model, catalog, platform.results, lambda r: r.get("device") == record.get("device"))
        total = sum(inputs.owning(y, u)["total"] for y in range(1, years + 1))
        per_hour = total / (inputs.devices * HOURS_PER_YEAR * u * years)  # devices, u and years are positive
        if not (math.isfinite(per_hour) and per_hour > 0):
            return (
                f"the TCO model {model.path} platform '{printable(spec.name)}' costs {per_hour:g} {model.currency} "
                "per used device-hour: compute density divides by a positive cost"
            )
        text = (
            f"TCO of {model.path} platform '{printable(spec.name)}': {years} years at {u:.0%} utilization, "
            f"{per_hour:.4g} {model.currency} per used device-hour; power {inputs.device_watts.source}"
        )
        extra = {"tco_platform": spec.name, "utilization": u, "years": years, "tco_per_used_device_hour": per_hour}
        return model.to_usd(per_hour), text, {**extra, "currency": model.currency}

    return CostBasis(f"tco:{model.path}", "TFLOPS per USD/used hour (TCO)", price)
