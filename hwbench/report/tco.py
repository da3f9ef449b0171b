"""The report's TCO section: owning against renting per platform of a cost model, year by year.

The section is there only when the user passes a model (``hwbench report --tco MODEL.toml``);
its measured figures (power, TFLOPS) come from the report's own results files.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any, cast

from hwbench.core.results_types import Document
from hwbench.decide.catalog import Catalog
from hwbench.decide.tco import money, tco_document, year_table
from hwbench.decide.tco_model import Model
from hwbench.report.data import Run
from hwbench.report.html import note, pair, table
from hwbench.report.svg import Axis, Plot, color, data_range
from hwbench.results.checked import Loaded


def chart(ident: str, platform: dict[str, Any], currency: str) -> str:
    """Cumulative cost of owning (solid) and renting (dashed) against the year, per utilization."""
    scenarios = platform["scenarios"]
    years = len(scenarios[0]["years"])
    values = [0.0] + [
        v
        for s in scenarios
        for row in s["years"]
        for v in (row["owning_cumulative"], row["renting_cumulative"])
        if v is not None
    ]
    lo, hi = data_range(values, log=False, include_zero=True)
    plot = Plot(
        ident,
        f"Own or rent: {platform['name']}",
        Axis("year", 0.5, years + 0.5, ticks=[(y, str(y)) for y in range(1, years + 1)]),
        Axis(f"cumulative cost ({currency})", lo, hi, fmt=money),
        legend_width=210,
    )
    for i, scenario in enumerate(scenarios):
        hue, u = color(i), f"{scenario['utilization']:.0%}"
        rows = scenario["years"]
        xs = [row["year"] for row in rows]
        plot.line(xs, [row["owning_cumulative"] for row in rows], hue, tip=f"owning at {u} utilization")
        plot.add_legend(f"owning, {u} utilization", hue)
        rented = [row for row in rows if row["renting_cumulative"] is not None]
        if rented:
            plot.line([r["year"] for r in rented], [r["renting_cumulative"] for r in rented], hue, dash="6 3")
            plot.add_legend(f"renting, {u} utilization", hue, dash="6 3")
        for row in rows:
            tip = (
                f"year {row['year']} at {u}: owning {money(row['owning_cumulative'])} {currency}, "
                f"renting {money(row['renting_cumulative'])} {currency} (cumulative)"
            )
            plot.point(row["year"], row["owning_cumulative"], hue, tip)
            if row["renting_cumulative"] is not None:
                plot.point(row["year"], row["renting_cumulative"], hue, tip, marker="square")
    return plot.render()


def _numbers(platform: dict[str, Any], currency: str) -> str:
    headers, rows = year_table(platform, currency)
    return table(headers, rows, numeric=(1, 2, 3, 6, 7))


def _inputs(platform: dict[str, Any], currency: str) -> str:
    i = platform["inputs"]
    figures = [
        ("devices", f"{i['devices']} ({i['servers']} servers x {i['devices_per_server']} {i['device']})", "model file"),
        (
            "initial investment",
            f"{money(i['initial_investment'])} {currency}",
            "hardware + build-out (+ liquid premium)",
        ),
        ("hardware", f"{money(i['hardware'])} {currency}", "model file"),
        ("liquid-cooling premium", f"{money(i['liquid_premium_amount'])} {currency}", i["liquid_premium"]["source"]),
        ("power per device", f"{i['watts_per_device']['value']:g} W", i["watts_per_device"]["source"]),
        ("power at full load", f"{i['power_kw']:.4g} kW", "devices x power per device + servers x host watts"),
        (
            "rent per device-hour",
            f"{money(i['rent_per_device_hour']['value'])} {currency}",
            i["rent_per_device_hour"]["source"],
        ),
        ("TFLOPS", money(i["tflops"]["value"]), i["tflops"]["source"]),
    ]
    shown = {
        "datacenter_buildout": ("data-centre build-out", f"{money(i['datacenter_buildout']['value'])} {currency}"),
        "staff_per_year": ("staff a year", f"{money(i['staff_per_year']['value'])} {currency}"),
        "cooling": ("cooling", str(i["cooling"]["value"])),
        "pue": ("PUE", f"{i['pue']['value']:g}"),
        "electricity_per_kwh": ("electricity", f"{i['electricity_per_kwh']['value']:g} {currency}/kWh"),
        "idle_power_fraction": ("idle power share", f"{i['idle_power_fraction']['value']:g}"),
        "depreciation_per_year": ("depreciation", f"{i['depreciation_per_year']['value']:.0%} a year"),
    }
    figures += [(label, value, i[key]["source"]) for key, (label, value) in shown.items()]
    return table(["figure", "value", "source"], figures, css="kv")


def section(doc: dict[str, Any]) -> str:
    """The whole section of a TCO document: per platform its chart, numbers and inputs."""
    cur, rate = doc["currency"], doc["rate"]
    money_note = f"Money in {cur}" + (
        f" ({rate['per_usd']:g} {cur} per USD as of {rate['as_of']}; {rate['source']})." if rate else "."
    )
    parts = [
        note(
            f"Cost model {doc['title']} ({doc['model']}): {doc['years']['value']} years of {doc['hours_per_year']:g} "
            "hours. Owning = depreciation (straight line, no residual value) + electricity (x PUE) + staff; "
            "renting = rent per used device-hour. Break-even utilization: where both cost the same over the "
            "years so far. Per PFLOP-hour: cumulative cost / PFLOP-hours delivered (measured TFLOPS x utilization). "
            + money_note
        )
    ]
    for platform in doc["platforms"]:
        ident = "tco-" + re.sub(r"[^a-z0-9]+", "-", platform["name"].lower()).strip("-")
        parts.append(f"<h3>{escape(platform['name'])}</h3>")
        parts.append(note(f"Break-even utilization over the horizon: {platform['break_even']['text']}."))
        parts.append(pair(chart(ident, platform, cur), _numbers(platform, cur)))
        parts.append(_inputs(platform, cur))
    return "\n".join(parts)


def tco_sections(model: Model | None, runs: list[Run], catalog: Catalog) -> dict[str, str]:
    """``{"tco": html}`` for the report's body when the user gave a model; nothing without one."""
    if model is None:
        return {}
    files = [Loaded(run.path, cast(Document, run.doc)) for run in runs]  # each loaded by results.load
    return {"tco": section(tco_document(model, catalog, files))}
