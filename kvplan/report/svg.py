"""Plots as inline SVG, written by hand: line/CDF charts, bar charts and heat maps (and, in
scatter.py, a scatter with its Pareto frontier).

Every chart is a plain string of SVG with axes, ticks, axis labels, a legend when there is more
than one series (a line swatch for lines, a box for bars), and an accessible `<title>`/`<desc>`
(plus a `<title>` on each mark, which browsers show as a tooltip). Nothing is drawn outside the
chart's box and no two labels overlap: tick labels are thinned and the last one is kept inside,
and bar values are written next to their bar (a sliver still says what it is). Scales, ticks and
label formats are axis.py's. Coordinates are rounded to 0.1 px and nothing depends on the clock
or on dict order, so the same data always gives byte-identical SVG. No plotting library: the
report must open anywhere, offline, and `kvplan simulate` must not pay for imports it never uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Sequence

from .axis import (Format, Scale, dollars_telling_apart, fmt_bytes, fmt_dollars, fmt_plain, fmt_seconds, fmt_share,
                   label_px, scale_for)

WIDTH, HEIGHT = 640, 340
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif"
GAP_PX = 8                         # the least room between two tick labels
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
"""Okabe and Ito's colour-blind safe palette."""


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def coord(x: float) -> str:
    """A coordinate: one decimal, no '-0.0'."""
    text = f"{x:.1f}"
    return "0.0" if text == "-0.0" else text


def text_at(x: float, y: float, text: str, *, anchor: str = "middle", size: int = 11, cls: str = "",
          rotate: bool = False, fill: str | None = None) -> str:
    attrs = [f'x="{coord(x)}"', f'y="{coord(y)}"', f'text-anchor="{anchor}"', f'font-size="{size}"']
    if cls:
        attrs.append(f'class="{cls}"')
    if fill:
        attrs.append(f'fill="{fill}"')
    if rotate:
        attrs.append(f'transform="rotate(-90 {coord(x)} {coord(y)})"')
    return f"<text {' '.join(attrs)}>{escape(text)}</text>"


def open_plot(ident: str, title: str, desc: str, width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    return [f'<svg class="plot" id="{ident}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-labelledby="{ident}-title {ident}-desc" '
            f'style="{FONT}">',
            f'<title id="{ident}-title">{escape(title)}</title>',
            f'<desc id="{ident}-desc">{escape(desc)}</desc>']


def _tick_labels(scale: Scale, ticks: Sequence[float], fmt: Format, width: float = WIDTH) -> list[tuple[float, str]]:
    """(x, label) of the ticks whose labels fit: inside 0..width, and apart from the one before (thinned from the
    left; the rest keep their tick line)."""
    kept: list[tuple[float, str]] = []
    right_of_last = -math.inf
    for t in ticks:
        text = fmt(t)
        half = label_px(text) / 2
        x = min(max(scale(t), half + 1), width - half - 1)
        if x - half >= right_of_last + GAP_PX:
            kept.append((x, text))
            right_of_last = x + half
    return kept


def axes(x: Scale, y: Scale, x_label: str, y_label: str, x_format: Format, y_format: Format,
          x_ticks: list[float] | None = None) -> list[str]:
    """Grid, ticks, tick labels and axis titles for a plot area x.a..x.b by y.b..y.a."""
    parts = ['<g class="axes" font-size="11" fill="#333">']
    for t in y.ticks():
        py = y(t)
        parts.append(f'<line x1="{coord(x.a)}" y1="{coord(py)}" x2="{coord(x.b)}" y2="{coord(py)}" stroke="#e3e3e3"/>')
        parts.append(text_at(x.a - 6, py + 4, y_format(t), anchor="end"))
    ticks = x_ticks if x_ticks is not None else x.ticks()
    for t in ticks:
        px = x(t)
        parts.append(f'<line x1="{coord(px)}" y1="{coord(y.a)}" x2="{coord(px)}" y2="{coord(y.a + 5)}" stroke="#555"/>')
    parts += [text_at(px, y.a + 18, text) for px, text in _tick_labels(x, ticks, x_format)]
    parts.append(f'<line x1="{coord(x.a)}" y1="{coord(y.a)}" x2="{coord(x.b)}" y2="{coord(y.a)}" stroke="#555"/>')
    parts.append(f'<line x1="{coord(x.a)}" y1="{coord(y.a)}" x2="{coord(x.a)}" y2="{coord(y.b)}" stroke="#555"/>')
    parts.append(text_at((x.a + x.b) / 2, y.a + 38, x_label, size=12))
    parts.append(text_at(16, (y.a + y.b) / 2, y_label, size=12, rotate=True))
    parts.append("</g>")
    return parts


def legend(items: list[tuple[str, str]], left: float, top: float, right: float, *, dashed: Sequence[bool] = (),
            boxes: bool = False) -> list[str]:
    """Swatches (a line, or a box for bars and cells) and labels in rows from (left, top), wrapping before `right`."""
    parts = ['<g class="legend" font-size="11" fill="#333">']
    x, y = left, top
    for i, (label, fill) in enumerate(items):
        width = 22 + label_px(label) + 14
        if x + width > right and x > left:
            x, y = left, y + 16
        if boxes:
            parts.append(f'<rect x="{coord(x + 2)}" y="{coord(y - 10)}" width="12" height="10" fill="{fill}"/>')
        else:
            dash = ' stroke-dasharray="5 3"' if i < len(dashed) and dashed[i] else ""
            parts.append(f'<line x1="{coord(x)}" y1="{coord(y - 4)}" x2="{coord(x + 16)}" y2="{coord(y - 4)}" stroke="{fill}" '
                         f'stroke-width="3"{dash}/>')
        parts.append(text_at(x + 22, y, label, anchor="start"))
        x += width
    parts.append("</g>")
    return parts


def _legend_rows(labels: Sequence[str], left: float, right: float) -> int:
    rows, x = 1, left
    for label in labels:
        width = 22 + label_px(label) + 14
        if x + width > right and x > left:
            rows, x = rows + 1, left
        x += width
    return rows


# --- line charts (CDFs, time series, metric against a swept value) ----------------------------

@dataclass(frozen=True)
class Series:
    """One line: points (x, y); `error` gives optional ± half-widths drawn as error bars."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]
    error: Sequence[float] | None = None
    dashed: bool = False
    markers: bool = False


def line_chart(ident: str, title: str, series: Sequence[Series], *, x_label: str, y_label: str,
               x_format: Format, y_format: Format, desc: str = "", x_log: bool = False, step: bool = False,
               y_zero: bool = True, y_max: float | None = None, colours: Sequence[str] | None = None,
               marks: Sequence[tuple[float, str]] = (), x_categories: Sequence[str] | None = None) -> str:
    """Lines over a shared x axis; `step` draws each as a staircase (an empirical CDF).

    `marks` are labelled vertical dashed lines (an SLO target); with `x_categories` the xs are
    positions 0, 1, ... and the x ticks carry those names (values of a swept setting).
    """
    colours = list(colours) if colours else [colour(i) for i in range(len(series))]
    keyed = len(series) > 1
    top = 14 + (16 * _legend_rows([s.label for s in series], 70, WIDTH - 16) if keyed else 0)
    top += 14 if marks else 0                      # the marks' labels sit above the plot area
    xs = [v for s in series for v in s.xs] + [m for m, _ in marks]
    ys = [v + (e or 0) for s in series for v, e in zip(s.ys, s.error or [0] * len(s.ys))]
    if x_categories is not None:
        x = Scale(-0.5, len(x_categories) - 0.5, 70, WIDTH - 16)
        names = list(x_categories)
        x_format, x_ticks = (lambda v: names[round(v)]), [float(i) for i in range(len(names))]
    else:
        x, x_ticks = scale_for(x_format, xs, 70, WIDTH - 16, log=x_log), None
    y = scale_for(y_format, ys, HEIGHT - 52, top, zero=y_zero, lo=0.0 if y_max is not None else None, hi=y_max)
    parts = open_plot(ident, title, desc or title)
    parts += axes(x, y, x_label, y_label, x_format, y_format, x_ticks)
    for at, label in marks:
        px = x(at)
        half = label_px(label) / 2
        parts.append(f'<g class="mark"><title>{escape(label)}</title><line x1="{coord(px)}" y1="{coord(y.a)}" x2="{coord(px)}" '
                     f'y2="{coord(y.b - 4)}" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="2 3"/>'
                     f'{text_at(min(max(px, half + 1), WIDTH - half - 1), y.b - 7, label, fill="#D55E00")}</g>')
    if keyed:
        parts += legend([(s.label, c) for s, c in zip(series, colours)], 70, 16, WIDTH - 16,
                         dashed=[s.dashed for s in series])
    for s, c in zip(series, colours):
        points = [(px, py) for px, py in zip(s.xs, s.ys) if math.isfinite(px) and math.isfinite(py)
                  and (px > 0 or not x_log)]
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        parts.append(f'<g class="series"><title>{escape(s.label)}</title>')
        if points:
            path, (px0, py0) = [], points[0]
            path.append(f"M{coord(x(px0))} {coord(y(py0))}")
            for px1, py1 in points[1:]:
                path.append(f"H{coord(x(px1))} V{coord(y(py1))}" if step else f"L{coord(x(px1))} {coord(y(py1))}")
            parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for i, (px, py) in enumerate(points if s.markers or s.error else []):
            cx, cy = x(px), y(py)
            if s.error:
                e = s.error[i]
                low, high = min(y(py - e), y.a), max(y(py + e), y.b)      # cut at the plot area's edges
                parts.append(f'<line x1="{coord(cx)}" y1="{coord(low)}" x2="{coord(cx)}" y2="{coord(high)}" '
                             f'stroke="{c}" stroke-width="1.5"/>')
            tip = f"{s.label}: {x_format(px)} → {y_format(py)}" + (f" ± {y_format(s.error[i])}" if s.error else "")
            parts.append(f'<circle cx="{coord(cx)}" cy="{coord(cy)}" r="3.5" fill="{c}"><title>{escape(tip)}</title></circle>')
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


# --- bar charts ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Bars:
    """One series of bars: a value per category."""

    label: str
    values: Sequence[float]
    colour: str | None = None
    colours: Sequence[str] | None = None
    """A colour per category, overriding `colour` (one bar set apart from the rest, e.g. a bottleneck)."""


def bar_chart(ident: str, title: str, categories: Sequence[str], series: Sequence[Bars], *, value_label: str,
              value_format: Format, desc: str = "", stacked: bool = False, value_max: float | None = None) -> str:
    """Horizontal bars, one row per category: grouped side by side (each bar's value written after it), or
    `stacked` into one bar."""
    colours = [s.colour or colour(i) for i, s in enumerate(series)]
    keyed = len(series) > 1
    # capitals are wider than label_px's average character: "TPOT mean" needs about 8 px more
    label_w = min(200, 12 + max((label_px(c) + 1.6 * sum(ch.isupper() for ch in c) for c in categories),
                                default=label_px('name')))
    left = max(70, label_w)
    top = 14 + (16 * _legend_rows([s.label for s in series], left, WIDTH - 24) if keyed else 0)
    per_row = 1 if stacked else len(series)
    row_px = max(14, min(26, 200 / max(1, len(categories) * per_row))) * per_row + 8
    height = int(top + row_px * len(categories) + 56)
    totals = [sum(s.values[i] for s in series) for i in range(len(categories))] if stacked else \
        [v for s in series for v in s.values]
    # grouped bars keep room on the right for the longest value written after a bar
    room = 0.0 if stacked else max((label_px(value_format(v), 10) for v in totals if math.isfinite(v)), default=0.0)
    x = scale_for(value_format, totals, left, WIDTH - 24 - room, zero=True, lo=0.0 if value_max is not None else None,
                  hi=value_max)
    y = Scale(0, len(categories), height - 52, top)
    parts = open_plot(ident, title, desc or title, height=height)
    parts.append('<g class="axes" font-size="11" fill="#333">')
    ticks = x.ticks()
    for t in ticks:
        px = x(t)
        parts.append(f'<line x1="{coord(px)}" y1="{coord(y.a)}" x2="{coord(px)}" y2="{coord(y.b)}" stroke="#e3e3e3"/>')
    parts += [text_at(px, y.a + 18, text) for px, text in _tick_labels(x, ticks, value_format)]
    for i, name in enumerate(categories):
        parts.append(text_at(left - 8, y(len(categories) - i - 0.5) + 4, name, anchor="end"))
    parts.append(f'<line x1="{coord(x.a)}" y1="{coord(y.a)}" x2="{coord(x.b)}" y2="{coord(y.a)}" stroke="#555"/>')
    parts.append(f'<line x1="{coord(x.a)}" y1="{coord(y.a)}" x2="{coord(x.a)}" y2="{coord(y.b)}" stroke="#555"/>')
    parts.append(text_at((x.a + x.b) / 2, y.a + 38, value_label, size=12))
    parts.append("</g>")
    if keyed:
        parts += legend([(s.label, c) for s, c in zip(series, colours)], left, 16, WIDTH - 24, boxes=True)
    bar_px = (row_px - 8) / per_row
    for i, name in enumerate(categories):
        row_top = y(len(categories) - i) + 4
        offset = 0.0
        for j, (s, c) in enumerate(zip(series, colours)):
            v = s.values[i]
            if not math.isfinite(v) or v <= 0:
                if not stacked and v == 0:      # say it is nothing, not missing
                    baseline = row_top + j * bar_px + min(bar_px - 1, 14) / 2 + 3.5
                    parts.append(text_at(x.a + 4, baseline, value_format(0.0), anchor="start", size=10, cls="value",
                                         fill="#333"))
                continue
            x0 = x(offset) if stacked else x.a
            x1 = x(offset + v) if stacked else x(v)
            top_px = row_top if stacked else row_top + j * bar_px
            tip = f"{name} — {s.label}: {value_format(v)}" if len(series) > 1 else f"{name}: {value_format(v)}"
            fill = s.colours[i] if s.colours else c
            parts.append(f'<rect x="{coord(x0)}" y="{coord(top_px)}" width="{coord(max(x1 - x0, 0.5))}" height="{coord(bar_px - 1)}" '
                         f'fill="{fill}"><title>{escape(tip)}</title></rect>')
            if stacked:
                offset += v
            else:
                parts.append(text_at(max(x1, x0 + 0.5) + 4, top_px + min(bar_px - 1, 14) / 2 + 3.5, value_format(v),
                                   anchor="start", size=10, cls="value", fill="#333"))
    parts.append("</svg>")
    return "\n".join(parts)


# --- heat maps ----------------------------------------------------------------------------------

_RAMP = [(0.0, (68, 1, 84)), (0.25, (59, 82, 139)), (0.5, (33, 145, 140)), (0.75, (94, 201, 98)), (1.0, (253, 231, 37))]
"""Viridis at five stops: perceptually ordered and readable in grey."""


def ramp(t: float) -> str:
    t = min(1.0, max(0.0, t))
    for (t0, c0), (t1, c1) in zip(_RAMP, _RAMP[1:]):
        if t <= t1:
            f = (t - t0) / (t1 - t0)
            return "#" + "".join(f"{round(a + f * (b - a)):02x}" for a, b in zip(c0, c1))
    return "#fde725"


def colour_range(values: Sequence[float | None], value_format: Format) -> tuple[float, float]:
    """The fixed scale a heat map's colours span: 0-100 % for shares, else from 0 to a round value above the largest
    (so 46 ms and 48 ms look alike, as they are, and 73.8 % and 73.9 % are not painted as opposites)."""
    if value_format is fmt_share:
        return 0.0, 1.0
    finite = [v for v in values if v is not None and math.isfinite(v)]
    scale = scale_for(value_format, finite or [1.0], 0, 1, zero=True)
    return scale.lo, scale.hi


def heat_map(ident: str, title: str, x_labels: Sequence[str], y_labels: Sequence[str],
             values: Sequence[Sequence[float | None]], *, x_label: str, y_label: str, value_format: Format,
             desc: str = "", lower_is_better: bool = True, key_label: str = "",
             cell_format: Format | None = None) -> str:
    """A grid of cells, values[row][col] with rows = y_labels (bottom to top) and cols = x_labels.

    Colour runs over a fixed scale (`colour_range`) from dark (best) to yellow (worst) when
    `lower_is_better`, the other way round when not, with a labelled key; every cell also prints
    its value (`cell_format`, default `value_format`), and a missing value (None) is drawn grey.
    """
    cell_format = cell_format or value_format
    lo, hi = colour_range([v for row in values for v in row], value_format)
    label_w = max(70, 24 + max((label_px(s) for s in y_labels), default=label_px('name')))
    left, right, top, bottom = label_w, WIDTH - 110, 30 if key_label else 14, HEIGHT - 52
    cw, ch = (right - left) / max(1, len(x_labels)), (bottom - top) / max(1, len(y_labels))

    def badness(v: float) -> float:        # 0 = best end of the key, 1 = worst
        t = min(1.0, max(0.0, (v - lo) / (hi - lo))) if hi > lo else 0.5
        return t if lower_is_better else 1 - t

    parts = open_plot(ident, title, desc or title)
    parts.append('<g class="cells" font-size="11">')
    for r, row in enumerate(values):
        for c, v in enumerate(row):
            cx, cy = left + c * cw, bottom - (r + 1) * ch
            where = f"{x_label} {x_labels[c]}, {y_label} {y_labels[r]}"
            if v is None or not math.isfinite(v):
                parts.append(f'<rect x="{coord(cx)}" y="{coord(cy)}" width="{coord(cw)}" height="{coord(ch)}" fill="#d0d0d0" '
                             f'stroke="#fff"><title>{escape(where)}: no value</title></rect>')
                continue
            t = badness(v)
            parts.append(f'<rect x="{coord(cx)}" y="{coord(cy)}" width="{coord(cw)}" height="{coord(ch)}" fill="{ramp(t)}" '
                         f'stroke="#fff"><title>{escape(where)}: {escape(cell_format(v))}</title></rect>')
            if cw >= label_px(cell_format(v)) + 8 and ch >= 16:
                parts.append(text_at(cx + cw / 2, cy + ch / 2 + 4, cell_format(v), fill="#000" if t > 0.55 else "#fff"))
    parts.append("</g>")
    parts.append('<g class="axes" font-size="11" fill="#333">')
    for c, name in enumerate(x_labels):
        parts.append(text_at(left + (c + 0.5) * cw, bottom + 18, name))
    for r, name in enumerate(y_labels):
        parts.append(text_at(left - 8, bottom - (r + 0.5) * ch + 4, name, anchor="end"))
    parts.append(text_at((left + right) / 2, bottom + 38, x_label, size=12))
    parts.append(text_at(16, (top + bottom) / 2, y_label, size=12, rotate=True))
    # the colour key, best at the top, ticked at round values of the fixed scale
    kx, steps = right + 14, 20
    for i in range(steps):
        ky = top + i * (bottom - top) / steps
        parts.append(f'<rect x="{coord(kx)}" y="{coord(ky)}" width="14" height="{coord((bottom - top) / steps + 0.5)}" '
                     f'fill="{ramp(i / (steps - 1))}"/>')
    key = scale_for(value_format, [], 0, 1, lo=lo, hi=hi)
    for t in key.ticks():
        ky = top + badness(t) * (bottom - top)
        parts.append(f'<line x1="{coord(kx + 14)}" y1="{coord(ky)}" x2="{coord(kx + 18)}" y2="{coord(ky)}" stroke="#555"/>')
        parts.append(text_at(kx + 21, ky + 4, value_format(t), anchor="start"))
    if key_label:
        parts.append(text_at(min(kx + 7, WIDTH - label_px(key_label, 10) / 2 - 1), 14, key_label, size=10))
    parts.append("</g></svg>")
    return "\n".join(parts)


__all__ = ["Bars", "Scale", "Series", "bar_chart", "colour", "colour_range", "dollars_telling_apart", "fmt_bytes",
           "fmt_dollars", "fmt_plain", "fmt_seconds", "fmt_share", "heat_map", "line_chart"]
