"""Device peaks and rental prices from ``hwbench/data/*.toml``, plus a user's own file.

Every figure carries its source and date; a price-derived figure is never shown without
its ``as_of``.
"""

from __future__ import annotations

import datetime as dt
import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from hwbench.core.errors import UserError
from hwbench.core.loading import tomllib
from hwbench.core.text import MAX_SETTINGS_BYTES, read_regular_text


@dataclass(frozen=True)
class PriceQuote:
    """USD per hour for one device, and where the figure comes from."""

    usd_per_hour: float
    source: str
    as_of: str
    basis: str


@dataclass(frozen=True)
class DevicePeak:
    """Datasheet peak of a catalog device for one dtype."""

    key: str
    tflops: float
    source: str
    as_of: str


@dataclass(frozen=True)
class CacheSize:
    """A catalog device's last-level cache, and where the figure comes from."""

    key: str
    bytes: int
    level: str
    source: str
    as_of: str


@dataclass(frozen=True)
class Bandwidth:
    """A catalog figure in GB/s (10^9 bytes per second), and where it comes from."""

    key: str
    gbps: float
    what: str
    source: str
    as_of: str


class Catalog:
    """The shipped device and price tables, optionally extended by a user file."""

    def __init__(self, devices: dict[str, dict[str, Any]], prices: list[dict[str, Any]]) -> None:
        self.devices = devices
        self.prices = prices

    @classmethod
    def load(cls, user_file: Path | None = None) -> Catalog:
        """Shipped tables, then ``user_file`` (same layout: [devices.KEY] and [[prices]]) on top."""
        data = resources.files("hwbench.decide.data")
        devices = tomllib.loads(data.joinpath("devices.toml").read_text())["devices"]
        prices = tomllib.loads(data.joinpath("prices.toml").read_text())["prices"]
        if user_file is not None:
            text = read_regular_text(user_file, MAX_SETTINGS_BYTES, "catalog file")
            try:
                extra = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise UserError(f"catalog file {user_file} is not valid TOML: {exc}") from None
            check_user_catalog(extra, Path(user_file))
            devices = {**devices, **extra.get("devices", {})}
            mine = [_per_device({**row, "user_file": str(user_file)}) for row in extra.get("prices", [])]
            prices = mine + prices  # the user's rows win ties
        return cls(devices, prices)

    def match(self, device_name: str) -> str | None:
        """Catalog key of the device whose ``match`` strings occur in ``device_name``."""
        best: tuple[int, str] | None = None
        for key, entry in self.devices.items():
            for pattern in entry.get("match", []):
                # Whole-token match: "A10" must not match "A100", nor "L4" match "L40".
                if re.search(rf"(?<![A-Za-z0-9]){re.escape(pattern)}(?![A-Za-z0-9])", device_name, re.IGNORECASE) and (
                    best is None or len(pattern) > best[0]
                ):
                    best = (len(pattern), key)
        return best[1] if best else None

    def peak(self, key: str, dtype: str) -> DevicePeak | None:
        """Datasheet dense peak for ``dtype`` (tf32 falls back to nothing, not to fp32)."""
        entry = self.devices.get(key, {})
        value = entry.get("peak_tflops", {}).get(dtype)
        if value is None:
            return None
        return DevicePeak(key, float(value), entry.get("source", ""), str(entry.get("as_of", "")))

    def last_level_cache(self, device_name: str) -> CacheSize | None:
        """The last-level cache of the device called ``device_name`` (its ``llc`` table: ``mib``,
        ``level``, ``source``, ``as_of``), or None where the catalog gives none."""
        key = self.match(device_name)
        llc = self.devices.get(key, {}).get("llc") if key else None
        if not isinstance(llc, dict) or not _positive(llc.get("mib")):
            return None
        return CacheSize(
            str(key),
            int(llc["mib"] * 2**20),
            str(llc.get("level", "")),
            str(llc.get("source", "")),
            str(llc.get("as_of", "")),
        )

    def memory_bandwidth(self, device_name: str) -> Bandwidth | None:
        """The datasheet DRAM/HBM bandwidth of the device called ``device_name`` (``mem_tbps``), or None."""
        key = self.match(device_name)
        entry = self.devices.get(key, {}) if key else {}
        if not _positive(entry.get("mem_tbps")):
            return None
        source, as_of = str(entry.get("source", "")), str(entry.get("as_of", ""))
        return Bandwidth(str(key), float(entry["mem_tbps"]) * 1000, "memory", source, as_of)

    def host_link(self, device_name: str) -> Bandwidth | None:
        """The host link of the device called ``device_name`` (its ``host_link`` table: ``gbps`` per
        direction, ``kind`` such as "PCIe 5.0 x16" or "NVLink-C2C", ``source``, ``as_of``), or None."""
        key = self.match(device_name)
        link = self.devices.get(key, {}).get("host_link") if key else None
        if not isinstance(link, dict) or not _positive(link.get("gbps")):
            return None
        source, as_of = str(link.get("source", "")), str(link.get("as_of", ""))
        return Bandwidth(str(key), float(link["gbps"]), str(link.get("kind", "")), source, as_of)

    def device_peak(
        self, name: str, own: Mapping[str, float] | None, dtype: str, method: str | None = None
    ) -> tuple[float | None, str | None]:
        """Peak TFLOPS of the device called ``name`` for ``dtype`` and where it comes from: its own
        (measured or reported, ``own`` with ``method``) where it has one, else the datasheet's."""
        if own and dtype in own:
            return float(own[dtype]), method
        key = self.match(name)
        found = self.peak(key, dtype) if key else None
        if found is None:
            return None, None
        return found.tflops, f"datasheet {found.key} ({found.source}, {found.as_of})"

    def device_price(self, name: str) -> PriceQuote | None:
        """Price per hour of the device called ``name`` (the median on-demand offer), if any."""
        return self.price(self.match(name))

    def price(self, key: str | None, instance: str | None = None) -> PriceQuote | None:
        """Price per device-hour: the named instance's row, else the median on-demand offer."""
        if instance:
            rows = [
                r
                for r in self.prices
                if r.get("instance") == instance and ("usd_per_hour" in r or "usd_per_gpu_hour" in r)
            ]
            if not rows:
                known = sorted(
                    {
                        r["instance"]
                        for r in self.prices
                        if r.get("instance") and ("usd_per_hour" in r or "usd_per_gpu_hour" in r)
                    }
                )
                raise UserError(f"no price for instance '{instance}' in the catalog; known: {', '.join(known)}")
            row = rows[0]
            per_device = row.get("usd_per_gpu_hour") or row["usd_per_hour"] / row.get("gpus", 1)
            return PriceQuote(
                float(per_device),
                row.get("source", ""),
                str(row.get("as_of", "")),
                f"{row.get('provider', '?')} {instance} ({row.get('pricing', '?')})",
            )
        if key is None:
            return None
        mine = [r for r in self.prices if r.get("device") == key and r.get("user_file") and r.get("usd_per_gpu_hour")]
        rows = mine or [
            r
            for r in self.prices
            if r.get("device") == key
            and r.get("usd_per_gpu_hour")
            and str(r.get("pricing", "")).startswith("on-demand")
        ]
        if not rows:
            return None
        value = statistics.median(float(r["usd_per_gpu_hour"]) for r in rows)
        dates = sorted(str(r.get("as_of", "")) for r in rows)
        providers = ", ".join(sorted({str(r.get("provider")) for r in rows}))
        basis = (
            f"median of {len(rows)} offers in {mine[0]['user_file']}"
            if mine
            else f"median of {len(rows)} on-demand offers"
        )
        return PriceQuote(value, f"catalog: {providers}", f"{dates[0]}..{dates[-1]}", basis)


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _per_device(row: dict[str, Any]) -> dict[str, Any]:
    """A user's price row with ``usd_per_gpu_hour`` filled from ``usd_per_hour / gpus``."""
    if "usd_per_gpu_hour" not in row and row.get("device"):
        row["usd_per_gpu_hour"] = row["usd_per_hour"] / row.get("gpus", 1)
    return row


def toml_kind(value: Any) -> str:
    """What a TOML value is, in the words of the file's layout."""
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    return f"the {type(value).__name__} {str(value)!r}"


def _sourced(entry: dict[str, Any]) -> bool:
    """``source`` a non-empty string and ``as_of`` one too, or a TOML date (``as_of = 2026-11-01``)."""
    source, as_of = entry.get("source", ""), entry.get("as_of", "")
    return (
        isinstance(source, str)
        and bool(source.strip())
        and (bool(as_of.strip()) if isinstance(as_of, str) else isinstance(as_of, dt.date))
    )


def _check_device(where: str, key: str, entry: Any) -> None:
    what = f"{where}: devices.{key}"
    if not isinstance(entry, dict):
        raise UserError(f"{what} must be a table ([devices.{key}]), not {toml_kind(entry)}")
    if not _sourced(entry):
        raise UserError(f"{what} needs source and as_of (where and when its figures come from)")
    match = entry.get("match", [])
    if not isinstance(match, list) or not all(isinstance(m, str) and m.strip() for m in match):
        raise UserError(f'{what}.match must be an array of device names (e.g. ["H100 SXM"]), not {toml_kind(match)}')
    peaks = entry.get("peak_tflops", {})
    if not isinstance(peaks, dict):
        raise UserError(f"{what}.peak_tflops must be a table (e.g. {{ fp32 = 67 }}), not {toml_kind(peaks)}")
    bad = [d for d, v in peaks.items() if not _positive(v)]
    if bad:
        raise UserError(f"{what}.peak_tflops.{bad[0]} must be a positive number, not {toml_kind(peaks[bad[0]])}")
    if "mem_tbps" in entry and not _positive(entry["mem_tbps"]):
        raise UserError(f"{what}.mem_tbps must be a positive number, not {toml_kind(entry['mem_tbps'])}")


def _check_price(where: str, number: int, row: Any) -> None:
    what = f"{where}: price row {number}"
    if not isinstance(row, dict):
        raise UserError(f"{what} must be a table ([[prices]]), not {toml_kind(row)}")
    for key in ("device", "instance", "provider", "pricing"):
        if key in row and not isinstance(row[key], str):
            raise UserError(f"{what}: {key} must be a string, not {toml_kind(row[key])}")
    if not (row.get("device") or row.get("instance")):
        raise UserError(f"{what} needs a device (catalog key) or an instance name")
    if not _sourced(row):
        raise UserError(f"{what} needs source and as_of (where and when the price comes from)")
    prices = [k for k in ("usd_per_hour", "usd_per_gpu_hour") if k in row]
    if not prices or not all(_positive(row[k]) for k in prices):
        raise UserError(f"{what} needs usd_per_hour or usd_per_gpu_hour, a positive number")
    if "gpus" in row and (not isinstance(row["gpus"], int) or isinstance(row["gpus"], bool) or row["gpus"] < 1):
        raise UserError(f"{what}: gpus must be a whole number of at least 1")


def check_user_catalog(data: dict[str, Any], path: Path) -> None:
    """UserError (one line naming the file and the key) unless a user's catalog has the shipped
    layout ([devices.KEY] tables, [[prices]] rows) and every device and price has source and as_of."""
    where = f"catalog file {path}"
    extra = sorted(set(data) - {"devices", "prices", "meta"})
    if extra:
        raise UserError(f"{where}: unknown table '{extra[0]}'; a catalog has [devices.KEY] and [[prices]]")
    for key in ("devices", "meta"):
        if not isinstance(data.get(key, {}), dict):
            raise UserError(f"{where}: {key} must be a table ([{key}...]), not {toml_kind(data[key])}")
    if not isinstance(data.get("prices", []), list):
        raise UserError(f"{where}: prices must be an array of tables ([[prices]]), not {toml_kind(data['prices'])}")
    for key, entry in data.get("devices", {}).items():
        _check_device(where, key, entry)
    for number, row in enumerate(data.get("prices", []), 1):
        _check_price(where, number, row)


def user_price(usd_per_hour: float) -> PriceQuote:
    """A price given on the command line."""
    if not (math.isfinite(usd_per_hour) and usd_per_hour > 0):
        raise UserError(f"--price-per-hour must be a positive, finite number of USD, got {usd_per_hour}")
    return PriceQuote(float(usd_per_hour), "--price-per-hour", "user", "given by the user")
