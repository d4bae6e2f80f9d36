"""Charts as inline SVG, drawn on the server: no JavaScript library, no CDN.

Every label is escaped; numbers are formatted here, so templates only place the markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

FONT = 'font-family="sans-serif" font-size="11"'


@dataclass(frozen=True, kw_only=True)
class Bar:
    label: str
    value: float
    colour: str = "#417690"
    href: str = ""


@dataclass(frozen=True, kw_only=True)
class Series:
    name: str
    colour: str
    values: Sequence[float | None]  #: one per x label; None leaves a gap


def number(value: float) -> str:
    """A short human number: 12, 3.4k, 1.2M, 0.25."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    if value == int(value):
        return str(int(value))
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _svg(width: int, height: int, body: list[str], title: str) -> SafeString:
    return mark_safe(  # noqa: S308 -- every text in `body` went through escape()
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="{escape(title)}" class="atf-chart">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def empty(title: str, message: str = "no data yet", width: int = 460) -> SafeString:
    text = f'<text x="{width / 2}" y="30" text-anchor="middle" fill="#888" {FONT}>'
    return _svg(width, 50, [text + f"{escape(message)}</text>"], title)


def bars(rows: Sequence[Bar], *, title: str, width: int = 460) -> SafeString:
    """Horizontal bars, one per row, labelled on the left and valued on the right."""
    if not rows:
        return empty(title, width=width)
    label_w, value_w, row_h = 170, 50, 20
    top = max(row.value for row in rows) or 1
    span = width - label_w - value_w
    body = []
    for i, row in enumerate(rows):
        y = i * row_h
        length = max(row.value / top * span, 1 if row.value else 0)
        bar = (f'<rect x="{label_w}" y="{y + 3}" width="{length:.1f}" height="{row_h - 6}" '
               f'fill="{escape(row.colour)}"/>')
        if row.href:
            bar = f'<a href="{escape(row.href)}">{bar}</a>'
        label = row.label if len(row.label) <= 28 else row.label[:27] + "…"
        body.append(
            f'<text x="{label_w - 6}" y="{y + 14}" text-anchor="end" {FONT}>{escape(label)}'
            f"</text>{bar}"
            f'<text x="{label_w + length + 4:.1f}" y="{y + 14}" {FONT}>{number(row.value)}</text>'
        )
    return _svg(width, len(rows) * row_h + 4, body, title)


def lines(series: Sequence[Series], x_labels: Sequence[str], *, title: str, unit: str = "",
          width: int = 460, height: int = 170, columns: bool = False) -> SafeString:
    """A time series chart: lines (or columns, for one series) over `x_labels`."""
    values = [v for s in series for v in s.values if v is not None]
    if not values or not x_labels:
        return empty(title, width=width)
    left, right, top_pad, bottom = 44, 8, 16, 22
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    top = max(values) or 1
    step = plot_w / max(len(x_labels), 1)

    def y_of(v: float) -> float:
        return top_pad + plot_h - v / top * plot_h

    body = [f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{width - right}" '
            f'y2="{top_pad + plot_h}" stroke="#bbb"/>']
    for fraction in (0.5, 1.0):
        y = y_of(top * fraction)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" '
                    f'stroke="#eee"/><text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end" '
                    f'{FONT}>{number(top * fraction)}{escape(unit)}</text>')
    last = len(x_labels) - 1
    for i, anchor in ((0, "start"), (last // 2, "middle"), (last, "end")):
        x = left + i * step + (0 if anchor == "start" else step if anchor == "end" else step / 2)
        body.append(f'<text x="{x:.1f}" y="{height - 6}" text-anchor="{anchor}" {FONT}>'
                    f"{escape(x_labels[i])}</text>")
    for s in series:
        if columns:
            body += [f'<rect x="{left + i * step + 0.5:.1f}" y="{y_of(v):.1f}" '
                     f'width="{max(step - 1, 1):.1f}" height="{top_pad + plot_h - y_of(v):.1f}" '
                     f'fill="{escape(s.colour)}"><title>{escape(x_labels[i])}: {number(v)}'
                     f"</title></rect>"
                     for i, v in enumerate(s.values) if v]
            continue
        points = " ".join(f"{left + i * step + step / 2:.1f},{y_of(v):.1f}"
                          for i, v in enumerate(s.values) if v is not None)
        body.append(f'<polyline points="{points}" fill="none" stroke="{escape(s.colour)}" '
                    f'stroke-width="2"/>')
        body += [f'<circle cx="{left + i * step + step / 2:.1f}" cy="{y_of(v):.1f}" r="2.5" '
                 f'fill="{escape(s.colour)}"><title>{escape(x_labels[i])} {escape(s.name)}: '
                 f"{number(v)}{escape(unit)}</title></circle>"
                 for i, v in enumerate(s.values) if v is not None]
    legend_x = left
    for s in series:
        body.append(f'<rect x="{legend_x}" y="2" width="10" height="10" fill="{escape(s.colour)}"/>'
                    f'<text x="{legend_x + 14}" y="11" {FONT}>{escape(s.name)}</text>')
        legend_x += 14 + 7 * len(s.name) + 16
    return _svg(width, height, body, title)
