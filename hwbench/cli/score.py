"""Rank candidate platforms with a weighted matrix of their results.

Each PLATFORM is [NAME=]FILE[,FILE...]: results files (.json: runs and probes) and at most
one platform file (.toml: name, usd_per_hour per device, price_source, sla_availability,
mttr_minutes + mttr_source, notes, results = [...]). Dimensions (default weights):
compute density 25 (best 16-bit GEMM TFLOPS, fp32 on CPUs, or --dtype's, per USD/hour of one device),
network 20 (small-message AllReduce p50), storage 15 (hwbench probe storage IOPS), time to
first step 20 (hwbench train's submit-to-first-step, else hwbench probe startup; cold caches),
recovery 20 (hwbench drill's time to resume, else the platform file's MTTR; a --weights file's
counts = "mttr" counts the MTTR). Missing data is shown as missing; its weight is not redistributed: total counts it
as 0 (a lower bound) and max_total as 100. --cost tco:MODEL.toml divides compute density's
TFLOPS by the cost of owning a device per used hour under a TCO model (see hwbench tco)
instead of its rental price; a --weights file may add tflops_per_watt (measured energy).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hwbench.cli.options import check_out, print_document
from hwbench.core.dtypes import DTYPE_BYTES
from hwbench.core.errors import UserError
from hwbench.core.text import printable
from hwbench.decide.catalog import Catalog
from hwbench.decide.platform import parse_platform
from hwbench.decide.score import CostBasis, finite_json, score_platforms
from hwbench.decide.tco import score_cost
from hwbench.decide.tco_model import load_model
from hwbench.decide.weights import load_weights
from hwbench.results.tables import table

HELP = "rank platforms with a weighted matrix (compute density, network, storage, startup, recovery)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``hwbench score``."""
    parser.add_argument(
        "platforms",
        nargs="+",
        metavar="PLATFORM",
        help="[NAME=]RESULTS.json[,MORE.json][,PLATFORM.toml], or just PLATFORM.toml listing results",
    )
    parser.add_argument(
        "--weights",
        type=Path,
        default=None,
        help="TOML matrix replacing the default (hwbench/data/weights.toml); weights must sum to 100",
    )
    parser.add_argument(
        "--catalog",
        type=Path,
        default=None,
        help="TOML catalog of your own ([devices.KEY], [[prices]]) over the shipped one",
    )
    parser.add_argument(
        "--cost",
        default="rental",
        metavar="rental|tco:MODEL.toml",
        help="what compute density divides by: the rental price of a device-hour (default), or the cost of "
        "owning it per used hour under a TCO model (hwbench tco)",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="the GEMM dtype compute density (and TFLOPS per watt) takes, e.g. fp8 or int8 (TOPS) "
        "(default: bf16/fp16 on accelerators, fp32 on CPUs)",
    )
    parser.add_argument("--json", action="store_true", help="print the score document as JSON instead of the table")
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        default=None,
        help="also write the score document (JSON) to this new file (never overwritten; '-': stdout, "
        "the table then on stderr)",
    )


def _cell(entry: dict[str, Any]) -> str:
    if entry["missing"]:
        return "missing"
    raw = entry["raw"]
    text = f"{raw:.4g}" if abs(raw) < 1e5 else f"{raw:.3g}"
    return f"{entry['score']:.0f} ({text} {entry['unit']})"


def render(doc: dict[str, Any]) -> str:
    """The ranking table, the missing reasons and what the total means; text from results, platform
    and model files (names, reasons, sources) escaped for the terminal."""
    names = list(doc["dimensions"])
    headers = (
        "rank",
        "platform",
        "total",
        "max",
        *(f"{doc['dimensions'][n]['label']} {doc['dimensions'][n]['weight']:g}%" for n in names),
    )
    rows = [
        (
            str(p["rank"]),
            p["name"],
            f"{p['total']:.1f}",
            f"{p['max_total']:.1f}",
            *(_cell(p["dimensions"][n]) for n in names),
        )
        for p in doc["platforms"]
    ]
    lines = []
    for p in doc["platforms"]:
        for n in names:
            entry = p["dimensions"][n]
            if entry["missing"]:
                lines.append(f"missing: {p['name']} {doc['dimensions'][n]['label']}: {entry['reason']}")
            elif entry.get("note"):
                lines.append(f"note: {p['name']} {doc['dimensions'][n]['label']}: {entry['note']}")
            price = entry["source"].get("price_source") if entry["source"].get("usd_per_hour") is not None else None
            if price and entry["source"].get("cost_basis"):
                lines.append(f"cost: {p['name']}: {entry['source']['usd_per_hour']:.4g} USD per used hour ({price})")
            elif price:
                lines.append(f"price: {p['name']}: {entry['source']['usd_per_hour']:g} USD/hour ({price})")
    lines.append(_dtype_line(doc))
    lines.append(f"weights: {doc['weights_source']}; {doc['total_means']}")
    return "\n".join([table(rows, headers), "", *(printable(line) for line in lines)])


def _dtype_line(doc: dict[str, Any]) -> str:
    """Which GEMM dtype compute density took for each platform, and why."""
    if "compute_density" not in doc["dimensions"]:
        return f"compute density: not in the matrix (dtype {doc['compute_dtype']})"
    used = [f"{p['name']} {p['dimensions']['compute_density']['source'].get('dtype') or '-'}" for p in doc["platforms"]]
    chosen = doc["compute_dtype"]
    how = (
        f"the {chosen.replace(' (', ': ').rstrip(')')}; --dtype chooses" if chosen.startswith("default") else "--dtype"
    )
    return f"compute density: GEMM dtype {', '.join(used)} ({how})"


def _cost_basis(text: str, catalog: Catalog) -> CostBasis | None:
    """``--cost``: None for the rental price, else the TCO model's cost basis."""
    if text == "rental":
        return None
    kind, colon, path = text.partition(":")
    if kind != "tco" or not colon or not path.strip():
        raise UserError(f"--cost must be rental or tco:MODEL.toml, got {text!r}")
    return score_cost(load_model(path), catalog)


def main(args: argparse.Namespace) -> int:
    """Score the platforms; 0 on success, 2 on bad input (an existing --out among it)."""
    check_out(args.out)
    if args.dtype is not None and args.dtype not in DTYPE_BYTES:
        raise UserError(f"--dtype {args.dtype!r} is not a dtype hwbench knows; use one of {', '.join(DTYPE_BYTES)}")
    dims, origin = load_weights(args.weights)
    catalog = Catalog.load(args.catalog)
    cost = _cost_basis(args.cost, catalog)
    platforms = [parse_platform(text) for text in args.platforms]
    names = [p.name for p in platforms]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"two platforms are called '{twice[0]}': name them apart with NAME=FILE,...")
    doc = score_platforms(platforms, dims, catalog, origin, cost, args.dtype)
    text = finite_json(doc, "score document")
    print_document(text, render(doc), args.out, args.json, "score document")
    return 0
