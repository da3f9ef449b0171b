"""Inline SVG charts: linear and log axes, ticks, lines, markers, bars, legend, tooltips.

No plotting library: a :class:`Plot` maps data to pixels with two :class:`Scale` objects
and renders plain SVG. Tooltips are ``<title>`` children, which every browser shows on
hover without any script.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from hwbench.report.html import escape

#: Okabe-Ito colours (distinguishable with the common colour-vision deficiencies), then greys.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#8C564B", "#7F7F7F", "#B8860B")
MARKERS = ("circle", "square", "triangle", "diamond")
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif"
CHAR_PX = 6.6  # average glyph width at 12 px, for layout


def color(index: int) -> str:
    """The ``index``-th colour of the palette (cycling)."""
    return PALETTE[index % len(PALETTE)]


def fmt_number(value: float) -> str:
    """Compact tick label: 0.001, 0.25, 12, 1e6."""
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(abs(value)))
    if exponent >= 5 or exponent <= -4:
        mantissa = value / 10**exponent
        return f"{mantissa:g}e{exponent}" if abs(mantissa - 1) > 1e-9 else f"1e{exponent}"
    return f"{value:.6g}"


def fmt_bytes(value: float) -> str:
    """Byte count with a decimal unit: 512 B, 4 kB, 16 MB."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.4g} {unit}"
    return f"{value:.4g} B"


def fmt_percent(value: float) -> str:
    """A fraction as a percentage: 0.25 -> 25%."""
    return f"{value * 100:.4g}%"


def nice_step(span: float, count: int = 5) -> float:
    """A 1-2-5 step giving about ``count`` intervals over ``span``."""
    raw = span / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def data_range(values: Sequence[float], log: bool, include_zero: bool = False) -> tuple[float, float]:
    """Axis limits covering ``values``: whole decades on a log axis, 1-2-5 steps on a linear one."""
    finite = [v for v in values if v is not None and math.isfinite(v) and (v > 0 or not log)]
    if not finite:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = min(finite), max(finite)
    if log:
        top = sys.float_info.max_10_exp  # 10.0**309 overflows: the axis ends at the largest decade a float holds
        lo_e, hi_e = math.floor(math.log10(lo)), min(math.ceil(math.log10(hi)), top)
        if hi_e <= lo_e:
            lo_e, hi_e = min(lo_e, top - 1), min(lo_e, top - 1) + 1
        return 10.0**lo_e, 10.0**hi_e
    if include_zero:
        lo, hi = min(lo, 0.0), max(hi, 0.0)
    if hi == lo:
        lo, hi = lo - (abs(lo) or 1) * 0.5, hi + (abs(hi) or 1) * 0.5
    step = nice_step(hi - lo)
    return math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step


@dataclass(frozen=True)
class Scale:
    """Maps data values in [lo, hi] to pixels in [px_lo, px_hi], linearly or by log10."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool = False

    def __call__(self, value: float) -> float:
        if self.log:
            value = max(value, self.lo * 1e-3)
            t = (math.log10(value) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (value - self.lo) / ((self.hi - self.lo) or 1.0)
        return self.px_lo + t * (self.px_hi - self.px_lo)

    def ticks(self) -> list[float]:
        """Tick positions: decades (with 2 and 5 when there are few) or 1-2-5 steps."""
        if not self.log:
            step = nice_step(self.hi - self.lo)
            first = math.ceil(self.lo / step - 1e-9)
            return [round((first + i) * step, 12) for i in range(int((self.hi - self.lo) / step + 1e-9) + 1)]
        lo_e, hi_e = math.floor(math.log10(self.lo) + 1e-9), math.ceil(math.log10(self.hi) - 1e-9)
        decades = [10.0**e for e in range(lo_e, hi_e + 1)]
        if hi_e - lo_e <= 2:
            decades = sorted(d * m for d in decades for m in (1, 2, 5))
        step = max(1, math.ceil(len(decades) / 9))
        return [d for d in decades[::step] if self.lo * (1 - 1e-9) <= d <= self.hi * (1 + 1e-9)]


@dataclass
class Axis:
    """One axis: label, limits, log or not, tick formatter, or explicit (value, label) ticks."""

    label: str
    lo: float
    hi: float
    log: bool = False
    fmt: Callable[[float], str] = fmt_number
    ticks: Sequence[tuple[float, str]] | None = None


@dataclass
class LegendEntry:
    label: str
    color: str
    marker: str | None = None
    dash: str | None = None


def _marker(shape: str, x: float, y: float, fill: str, tip: str, r: float = 4.5) -> str:
    title = f"<title>{escape(tip)}</title>" if tip else ""
    common = f'fill="{fill}" stroke="#fff" stroke-width="1"'
    if shape == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" {common}>{title}</rect>'
    if shape in ("triangle", "diamond"):
        pts = (
            [(x, y - r * 1.2), (x + r * 1.1, y + r * 0.8), (x - r * 1.1, y + r * 0.8)]
            if shape == "triangle"
            else [(x, y - r * 1.3), (x + r, y), (x, y + r * 1.3), (x - r, y)]
        )
        coords = " ".join(f"{a:.1f},{b:.1f}" for a, b in pts)
        return f'<polygon points="{coords}" {common}>{title}</polygon>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" {common}>{title}</circle>'


@dataclass
class Plot:
    """A chart with an x and a y axis; add lines, markers and bars in data units, then render."""

    ident: str
    title: str
    x: Axis
    y: Axis
    width: int = 660
    height: int = 380
    margin_left: int = 64
    legend_width: int = 200
    items: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    legend: list[LegendEntry] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.left, self.top = self.margin_left, 34
        self.right = self.width - (self.legend_width if self.legend_width else 16)
        self.bottom = self.height - 46
        self.sx = Scale(self.x.lo, self.x.hi, self.left, self.right, self.x.log)
        self.sy = Scale(self.y.lo, self.y.hi, self.bottom, self.top, self.y.log)

    def add_legend(self, label: str, color_: str, marker: str | None = None, dash: str | None = None) -> None:
        """One legend row (added once per label)."""
        if all(e.label != label for e in self.legend):
            self.legend.append(LegendEntry(label, color_, marker, dash))

    def line(
        self,
        xs: Sequence[float],
        ys: Sequence[float],
        color_: str,
        tip: str = "",
        dash: str | None = None,
        width: float = 2.0,
    ) -> None:
        """A polyline through (xs, ys) in data units."""
        coords = " ".join(f"{self.sx(a):.1f},{self.sy(b):.1f}" for a, b in zip(xs, ys, strict=False))
        style = f' stroke-dasharray="{dash}"' if dash else ""
        title = f"<title>{escape(tip)}</title>" if tip else ""
        self.items.append(
            f'<polyline points="{coords}" fill="none" stroke="{color_}" stroke-width="{width}"'
            f'{style} stroke-linejoin="round">{title}</polyline>'
        )

    def point(self, x: float, y: float, color_: str, tip: str, marker: str = "circle") -> None:
        """One marker at (x, y) with a hover tooltip."""
        self.items.append(_marker(marker, self.sx(x), self.sy(y), color_, tip))

    def bar(self, x0: float, y0: float, x1: float, y1: float, color_: str, tip: str) -> None:
        """A filled rectangle between two data corners."""
        a, b = sorted((self.sx(x0), self.sx(x1)))
        c, d = sorted((self.sy(y0), self.sy(y1)))
        self.items.append(
            f'<rect x="{a:.1f}" y="{c:.1f}" width="{max(b - a, 1):.1f}" height="{max(d - c, 1):.1f}" '
            f'fill="{color_}"><title>{escape(tip)}</title></rect>'
        )

    def label(self, x: float, y: float, text: str, color_: str = "#333", anchor: str = "end", dy: float = -4) -> None:
        """A short text annotation at (x, y) in data units."""
        self.items.append(
            f'<text x="{self.sx(x):.1f}" y="{self.sy(y) + dy:.1f}" text-anchor="{anchor}" '
            f'fill="{color_}" font-size="11">{escape(text)}</text>'
        )

    def _axis_ticks(self, axis: Axis, scale: Scale) -> list[tuple[float, str]]:
        if axis.ticks is not None:
            return list(axis.ticks)
        return [(v, axis.fmt(v)) for v in scale.ticks()]

    def _axes(self) -> list[str]:
        out = [
            f'<rect x="{self.left}" y="{self.top}" width="{self.right - self.left}" '
            f'height="{self.bottom - self.top}" fill="#fff" stroke="#999"/>'
        ]
        for value, text in self._axis_ticks(self.x, self.sx):
            px = self.sx(value)
            out.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{self.top}" y2="{self.bottom}" stroke="#e4e4e4"/>')
            out.append(
                f'<text x="{px:.1f}" y="{self.bottom + 15}" text-anchor="middle" font-size="11">{escape(text)}</text>'
            )
        label_px = self.left - 6
        for value, text in self._axis_ticks(self.y, self.sy):
            py = self.sy(value)
            out.append(f'<line x1="{self.left}" x2="{self.right}" y1="{py:.1f}" y2="{py:.1f}" stroke="#e4e4e4"/>')
            out.append(
                f'<text x="{label_px}" y="{py + 4:.1f}" text-anchor="end" font-size="11">'
                f"<title>{escape(text)}</title>{escape(_clip(text, int((self.left - 10) / CHAR_PX)))}</text>"
            )
        mid_x, mid_y = (self.left + self.right) / 2, (self.top + self.bottom) / 2
        out.append(
            f'<text x="{mid_x:.1f}" y="{self.bottom + 34}" text-anchor="middle" font-size="12">'
            f"{escape(self.x.label)}</text>"
        )
        if self.y.label:
            out.append(
                f'<text transform="translate(14 {mid_y:.1f}) rotate(-90)" text-anchor="middle" '
                f'font-size="12">{escape(self.y.label)}</text>'
            )
        return out

    def _legend(self) -> list[str]:
        out, x0 = [], self.right + 14
        max_chars = int((self.width - x0 - 26) / CHAR_PX)
        for i, entry in enumerate(self.legend):
            y = self.top + 8 + i * 18
            if entry.marker:
                out.append(_marker(entry.marker, x0 + 8, y, entry.color, "", r=4.5))
            else:
                dash = f' stroke-dasharray="{entry.dash}"' if entry.dash else ""
                out.append(
                    f'<line x1="{x0}" x2="{x0 + 16}" y1="{y}" y2="{y}" stroke="{entry.color}" stroke-width="2"{dash}/>'
                )
            out.append(
                f'<text x="{x0 + 22}" y="{y + 4}" font-size="11"><title>{escape(entry.label)}</title>'
                f"{escape(_clip(entry.label, max_chars))}</text>"
            )
        return out

    def render(self) -> str:
        """The chart as one ``<svg>`` element."""
        clip = f"clip-{self.ident}"
        parts = [
            f'<svg id="{escape(self.ident)}" class="chart" role="img" '
            f'viewBox="0 0 {self.width} {self.height}" width="{self.width}" height="{self.height}" '
            f'font-family="{escape(FONT)}" aria-label="{escape(self.title)}">',
            f"<title>{escape(self.title)}</title>",
            f'<clipPath id="{clip}"><rect x="{self.left}" y="{self.top}" width="{self.right - self.left}" '
            f'height="{self.bottom - self.top}"/></clipPath>',
            f'<text x="10" y="20" font-size="13" font-weight="600">{escape(self.title)}</text>',
        ]
        parts += self._axes()
        parts.append(f'<g clip-path="url(#{clip})">')
        parts += self.items
        parts.append("</g>")
        parts += self._legend()
        parts.append("</svg>")
        return "\n".join(parts)


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: max(chars - 1, 1)] + "…"
