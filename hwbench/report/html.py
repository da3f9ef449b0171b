"""HTML building blocks of the report: page, sections, tables, "no data" notes. No script, no URL.

Every text goes through :func:`escape`: made printable first (control characters, a terminal
escape's ESC among them, and bidirectional marks as visible escapes), then HTML-escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape as html_escape
from typing import Any

from hwbench.core.text import printable


def escape(text: object) -> str:
    """``text`` as HTML text: printable (no control character or bidirectional mark), then escaped."""
    return html_escape(printable(text))


CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif;
       margin: 0 auto; padding: 16px 24px 48px; max-width: 1400px; color: #1d1d1f; background: #fafafa; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 2px solid #0072B2; padding-bottom: 3px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
nav a { margin-right: 14px; color: #0072B2; text-decoration: none; }
.meta { color: #555; }
.pair { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.pair > figure { margin: 0; flex: 0 0 auto; width: min-content; background: #fff; border: 1px solid #ddd;
  border-radius: 4px; }
.pair > .numbers { flex: 1 1 420px; min-width: 380px; max-height: 640px; overflow: auto; }
.pair > .numbers td { white-space: nowrap; }
.scroll { max-height: 560px; overflow: auto; }
table { border-collapse: collapse; background: #fff; font-size: 12.5px; margin: 4px 0 10px; }
th, td { border: 1px solid #ddd; padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #eef3f8; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.bad td { background: #fde8e4; }
.nodata { color: #8a5a00; background: #fff6e0; border: 1px solid #f0d9a8; padding: 6px 10px; border-radius: 4px;
          display: inline-block; }
.note { color: #555; font-size: 12.5px; margin: 4px 0; }
.ok { color: #00703c; font-weight: 600; } .fail { color: #b3261e; font-weight: 600; }
.stack { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 16px; }
.kv td:first-child { color: #555; white-space: nowrap; }
code { font-size: 12px; }
"""

SECTIONS = (
    ("summary", "Summary"),
    ("roofline", "Roofline"),
    ("overhead", "Porting overhead"),
    ("portability", "Performance portability"),
    ("allreduce", "AllReduce"),
    ("parity", "Parity"),
    ("compile", "Compile"),
    ("train", "Training"),
    ("burn", "Burn"),
    ("fleet", "Fleet"),
    ("tco", "TCO"),
)


def fmt(value: Any, spec: str = ".4g", suffix: str = "") -> str:
    """A number formatted with ``spec``, or an en dash when absent."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "–" if value is None else escape(str(value))
    return f"{value:{spec}}{suffix}"


def seconds(value: float | None) -> str:
    """A duration with a readable unit (ns, µs, ms, s)."""
    if value is None:
        return "–"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value / 1e-9:.4g} ns"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    numeric: Sequence[int] = (),
    bad: Sequence[bool] | None = None,
    css: str = "",
) -> str:
    """An HTML table; cells are escaped text except those wrapped by :class:`Raw`."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cells = "".join(
            f"<td{' class=num' if j in numeric else ''}>{c.html if isinstance(c, Raw) else escape(str(c))}</td>"
            for j, c in enumerate(row)
        )
        body.append(f"<tr{' class=bad' if bad and bad[i] else ''}>{cells}</tr>")
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Raw:
    """HTML that :func:`table` inserts as is (already escaped)."""

    def __init__(self, html: str) -> None:
        self.html = html


def no_data(why: str) -> str:
    """The note a section shows instead of a chart or table."""
    return f'<p class="nodata">no data: {escape(why)}</p>'


def note(text: str) -> str:
    """A small explanatory line."""
    return f'<p class="note">{escape(text)}</p>'


def pair(svg: str, numbers: str, caption: str = "") -> str:
    """A chart with its numbers beside it."""
    cap = f"<figcaption class=note>{escape(caption)}</figcaption>" if caption else ""
    return f'<div class="pair"><figure>{svg}{cap}</figure><div class="numbers">{numbers}</div></div>'


def section(ident: str, title: str, body: str) -> str:
    """One top-level section with an anchor."""
    return f'<section id="{ident}"><h2>{escape(title)}</h2>\n{body}\n</section>'


def page(title: str, subtitle: str, sections: dict[str, str]) -> str:
    """The whole self-contained document."""
    nav = "".join(f'<a href="#{ident}">{escape(name)}</a>' for ident, name in SECTIONS if ident in sections)
    body = "\n".join(section(ident, name, sections[ident]) for ident, name in SECTIONS if ident in sections)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head>\n<body>"
        f"<h1>{escape(title)}</h1><p class=meta>{escape(subtitle)}</p><nav>{nav}</nav>\n{body}\n</body></html>\n"
    )
