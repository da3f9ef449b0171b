"""Own or rent: the total cost of owning each platform of a cost model against renting it, year by year.

The model (TOML; a commented worked example is hwbench/decide/data/tco-example.toml) gives
per platform the hardware price, data-centre build-out, staff, cooling (PUE; liquid cooling's
premium), electricity price, depreciation and rental price, the horizon in years and the
utilizations to compare. Results files, where given, supply what was measured: the power
(records' energy.watts, else the catalog's TDP) and the TFLOPS of the best GEMM, from which the
cost per delivered PFLOP-hour follows. Per platform and year: owning and renting, cumulative,
which is cheaper, the break-even utilization and the cost per delivered PFLOP-hour.

  hwbench tco --model hwbench/decide/data/tco-example.toml
  hwbench tco results/a100.json --model my-model.toml --json -o tco.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hwbench.cli.options import check_out, print_document
from hwbench.core.text import MAX_RESULTS_BYTES, check_regular, printable
from hwbench.decide.catalog import Catalog
from hwbench.decide.score import finite_json
from hwbench.decide.tco import device_matcher, money, tco_document, year_table
from hwbench.decide.tco_model import load_model
from hwbench.results.checked import load_checked
from hwbench.results.tables import table

HELP = "cost of owning against renting per platform and year, break-even utilization, cost per PFLOP-hour"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench tco``."""
    parser.add_argument(
        "files", type=Path, nargs="*", metavar="RESULTS", help="results files with the platforms' measured figures"
    )
    parser.add_argument("--model", type=Path, required=True, metavar="MODEL.toml", help="the cost model (TOML)")
    parser.add_argument(
        "--catalog",
        type=Path,
        default=None,
        help="TOML catalog of your own ([devices.KEY], [[prices]]) over the shipped one",
    )
    parser.add_argument("--json", action="store_true", help="print the TCO document as JSON instead of the tables")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="also write the TCO document (JSON) to this new file (never overwritten; '-': stdout, "
        "the tables then on stderr)",
    )


def _right(rows: Sequence[tuple[str, ...]], headers: tuple[str, ...], first: int) -> list[tuple[str, ...]]:
    """Rows with columns from ``first`` on right-aligned (numbers)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    return [tuple(c.rjust(widths[i]) if i >= first else c for i, c in enumerate(r)) for r in rows]


def _inputs_lines(platform: dict[str, Any], currency: str) -> list[str]:
    i = platform["inputs"]
    buildout = i["datacenter_buildout"]["value"]
    premium = f", liquid-cooling premium {money(i['liquid_premium_amount'])}" if i["liquid_premium_amount"] else ""
    rate = i["depreciation_per_year"]["value"]
    watts = i["watts_per_device"]
    host = i["host_watts_per_server"]["value"]
    rent = i["rent_per_device_hour"]
    rent_text = f"{rent['value']:.4g} {currency} per device-hour" if rent["value"] is not None else "unknown"
    tflops = i["tflops"]
    lines = [
        f"{platform['name']}: {i['devices']} devices "
        f"({i['servers']} servers x {i['devices_per_server']} {i['device']})",
        f"  initial investment {money(i['initial_investment'])} {currency}: hardware {money(i['hardware'])}, "
        f"data-centre build-out {money(buildout)}{premium}; written off at {rate:.0%} a year",
        f"  power {i['power_kw']:.4g} kW at full load: {watts['value']:g} W per device ({watts['source']})"
        + (f" + {host:g} W per server" if host else "")
        + f"; PUE {i['pue']['value']:g} ({i['cooling']['value']}); electricity {i['electricity_per_kwh']['value']:g} "
        f"{currency}/kWh, idle share {i['idle_power_fraction']['value']:g}",
        f"  staff {money(i['staff_per_year']['value'])} {currency} a year; rent {rent_text} ({rent['source']})",
        f"  TFLOPS {tflops['value']:.4g} ({tflops['source']})"
        if tflops["value"] is not None
        else f"  {tflops['source']}",
        f"  break-even utilization over the horizon: {platform['break_even']['text']}",
    ]
    return [printable(line) for line in lines]


def render(doc: dict[str, Any]) -> str:
    """Per platform: its inputs, then a table of the years at each utilization; text from the model and
    the results files (title, names, sources) escaped for the terminal."""
    cur = doc["currency"]
    rate = doc["rate"]
    header = f"TCO model {doc['title']} ({doc['model']}): money in {cur}" + (
        f" ({rate['per_usd']:g} {cur} per USD, as of {rate['as_of']}; {rate['source']})" if rate else ""
    )
    blocks = [printable(f"{header}; {doc['years']['value']} years of {doc['hours_per_year']:g} hours")]
    for platform in doc["platforms"]:
        headers, rows = year_table(platform, cur)
        lined = _right([tuple(r) for r in rows], tuple(headers), 1)
        blocks.append("\n".join([*_inputs_lines(platform, cur), "", table(lined, tuple(headers))]))
    blocks.append(
        "owning = depreciation (straight line, no residual) + electricity (x PUE) + staff; renting = rent per "
        "used device-hour; per PFLOP-h: cumulative cost / PFLOP-hours delivered (measured TFLOPS x utilization)"
    )
    return "\n\n".join(blocks)


def main(args: argparse.Namespace) -> int:
    """Print the TCO tables (or JSON) and write the document where -o says; 2 on bad input."""
    check_out(args.out)
    model = load_model(args.model)
    catalog = Catalog.load(args.catalog)
    for path in args.files:  # before any is read: a FIFO or /dev/zero would hang the reader
        check_regular(path, MAX_RESULTS_BYTES, "results file")
    files = [load_checked(path) for path in dict.fromkeys(args.files)]
    matchers = [device_matcher(spec, catalog) for spec in model.platforms]
    for loaded in files:
        if not any(m(r) for m in matchers for _, r in loaded.records()):
            print(
                f"hwbench: warning: {printable(loaded.path)} has no record of a device of the model's platforms",
                file=sys.stderr,
            )
    doc = tco_document(model, catalog, files)
    text = finite_json(doc, "TCO document")
    print_document(text, render(doc), args.out, args.json, "TCO document")
    return 0
