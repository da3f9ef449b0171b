"""Device peaks and rental prices from ``hwbench/data/*.toml``, plus a user's own file.

Every figure carries its source and date; a price-derived figure is never shown without
its ``as_of``.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import UserError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


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


class Catalog:
    """The shipped device and price tables, optionally extended by a user file."""

    def __init__(self, devices: dict[str, dict[str, Any]], prices: list[dict[str, Any]]) -> None:
        self.devices = devices
        self.prices = prices

    @classmethod
    def load(cls, user_file: Path | None = None) -> "Catalog":
        """Shipped tables, then ``user_file`` (same layout: [devices.KEY] and [[prices]]) on top."""
        data = resources.files("hwbench.data")
        devices = tomllib.loads(data.joinpath("devices.toml").read_text())["devices"]
        prices = tomllib.loads(data.joinpath("prices.toml").read_text())["prices"]
        if user_file is not None:
            try:
                extra = tomllib.loads(Path(user_file).read_text())
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise UserError(f"cannot read catalog file {user_file}: {exc}") from None
            devices = {**devices, **extra.get("devices", {})}
            prices = list(extra.get("prices", [])) + prices  # the user's rows win ties
        return cls(devices, prices)

    def match(self, device_name: str) -> str | None:
        """Catalog key of the device whose ``match`` strings occur in ``device_name``."""
        best: tuple[int, str] | None = None
        for key, entry in self.devices.items():
            for pattern in entry.get("match", []):
                # Whole-token match: "A10" must not match "A100", nor "L4" match "L40".
                if re.search(rf"(?<![A-Za-z0-9]){re.escape(pattern)}(?![A-Za-z0-9])", device_name, re.IGNORECASE) \
                        and (best is None or len(pattern) > best[0]):
                    best = (len(pattern), key)
        return best[1] if best else None

    def peak(self, key: str, dtype: str) -> DevicePeak | None:
        """Datasheet dense peak for ``dtype`` (tf32 falls back to nothing, not to fp32)."""
        entry = self.devices.get(key, {})
        value = entry.get("peak_tflops", {}).get(dtype)
        if value is None:
            return None
        return DevicePeak(key, float(value), entry.get("source", ""), str(entry.get("as_of", "")))

    def price(self, key: str | None, instance: str | None = None) -> PriceQuote | None:
        """Price per device-hour: the named instance's row, else the median on-demand offer."""
        if instance:
            rows = [r for r in self.prices if r.get("instance") == instance
                    and ("usd_per_hour" in r or "usd_per_gpu_hour" in r)]
            if not rows:
                known = sorted({r["instance"] for r in self.prices
                                if r.get("instance") and ("usd_per_hour" in r or "usd_per_gpu_hour" in r)})
                raise UserError(f"no price for instance '{instance}' in the catalog; known: {', '.join(known)}")
            row = rows[0]
            per_device = row.get("usd_per_gpu_hour") or row["usd_per_hour"] / row.get("gpus", 1)
            return PriceQuote(float(per_device), row.get("source", ""), str(row.get("as_of", "")),
                              f"{row.get('provider', '?')} {instance} ({row.get('pricing', '?')})")
        if key is None:
            return None
        rows = [r for r in self.prices
                if r.get("device") == key and r.get("usd_per_gpu_hour") and str(r.get("pricing", "")).startswith("on-demand")]
        if not rows:
            return None
        value = statistics.median(float(r["usd_per_gpu_hour"]) for r in rows)
        dates = sorted(str(r.get("as_of", "")) for r in rows)
        providers = ", ".join(sorted({str(r.get("provider")) for r in rows}))
        return PriceQuote(value, f"catalog: {providers}", f"{dates[0]}..{dates[-1]}",
                          f"median of {len(rows)} on-demand offers")


def user_price(usd_per_hour: float) -> PriceQuote:
    """A price given on the command line."""
    if not usd_per_hour > 0:
        raise UserError(f"--price-per-hour must be a positive number of USD, got {usd_per_hour}")
    return PriceQuote(float(usd_per_hour), "--price-per-hour", "user", "given by the user")
