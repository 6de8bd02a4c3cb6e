"""Plots as inline SVG, written by hand: line/CDF charts, bar charts, heat maps and a scatter with
its Pareto frontier.

Every chart is a plain string of SVG with axes, ticks, axis labels, a legend when there is more
than one series, and an accessible `<title>`/`<desc>` (plus a `<title>` on each mark, which
browsers show as a tooltip). Coordinates are rounded to 0.1 px and nothing depends on the clock
or on dict order, so the same data always gives byte-identical SVG. No plotting library: the
report must open anywhere, offline, and `kvplan simulate` must not pay for imports it never uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Callable, Sequence

Format = Callable[[float], str]

WIDTH, HEIGHT = 640, 340
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif"
CHAR_PX = 6.4                      # rough width of one 11 px character, for legends and margins
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
"""Okabe and Ito's colour-blind safe palette."""


def colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _n(x: float) -> str:
    """A coordinate: one decimal, no '-0.0'."""
    text = f"{x:.1f}"
    return "0.0" if text == "-0.0" else text


def _text(x: float, y: float, text: str, *, anchor: str = "middle", size: int = 11, cls: str = "",
          rotate: bool = False, fill: str | None = None) -> str:
    attrs = [f'x="{_n(x)}"', f'y="{_n(y)}"', f'text-anchor="{anchor}"', f'font-size="{size}"']
    if cls:
        attrs.append(f'class="{cls}"')
    if fill:
        attrs.append(f'fill="{fill}"')
    if rotate:
        attrs.append(f'transform="rotate(-90 {_n(x)} {_n(y)})"')
    return f"<text {' '.join(attrs)}>{escape(text)}</text>"


def _open(ident: str, title: str, desc: str, width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    return [f'<svg class="plot" id="{ident}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-labelledby="{ident}-title {ident}-desc" '
            f'style="{FONT}">',
            f'<title id="{ident}-title">{escape(title)}</title>',
            f'<desc id="{ident}-desc">{escape(desc)}</desc>']


# --- scales and ticks ------------------------------------------------------------------------

def nice_step(span: float, count: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about `count` intervals."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / count
    power = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * power * (1 + 1e-9):
            return mult * power
    return 10 * power


@dataclass(frozen=True)
class Scale:
    """Maps the domain lo..hi onto pixels a..b, linearly or logarithmically."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    @classmethod
    def fit(cls, values: Sequence[float], a: float, b: float, *, log: bool = False, zero: bool = False,
            lo: float | None = None, hi: float | None = None) -> "Scale":
        """A scale covering `values` widened to round tick values (from 0 when `zero`)."""
        finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
        vmin = lo if lo is not None else (min(finite) if finite else 0.0)
        vmax = hi if hi is not None else (max(finite) if finite else 1.0)
        if log:
            vmin = vmin if vmin > 0 else (vmax / 10 if vmax > 0 else 1e-3)
            vmax = vmax if vmax > vmin else vmin * 10
            return cls(10 ** math.floor(math.log10(vmin) + 1e-9), 10 ** math.ceil(math.log10(vmax) - 1e-9), a, b, True)
        if zero:
            vmin, vmax = min(vmin, 0.0), max(vmax, 0.0)
        if vmax <= vmin:
            vmin, vmax = (vmin - 1, vmax + 1) if vmin else (0.0, 1.0)
        step = nice_step(vmax - vmin)
        new_lo = vmin if lo is not None else math.floor(vmin / step + 1e-9) * step
        new_hi = vmax if hi is not None else math.ceil(vmax / step - 1e-9) * step
        return cls(new_lo, new_hi, a, b)

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.lo)
            t = (math.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            t = (v - self.lo) / (self.hi - self.lo) if self.hi != self.lo else 0.0
        return self.a + t * (self.b - self.a)

    def ticks(self) -> list[float]:
        if self.log:
            first, last = round(math.log10(self.lo)), round(math.log10(self.hi))
            mults = (1,) if last - first > 2 else (1, 2, 5)
            return [m * 10.0 ** k for k in range(first, last + 1) for m in mults if m * 10.0 ** k <= self.hi * (1 + 1e-9)]
        step = nice_step(self.hi - self.lo)
        start = math.ceil(self.lo / step - 1e-9)
        return [round(k * step, 12) for k in range(start, math.floor(self.hi / step + 1e-9) + 1)]


def _axes(x: Scale, y: Scale, x_label: str, y_label: str, x_format: Format, y_format: Format,
          x_ticks: list[float] | None = None) -> list[str]:
    """Grid, ticks, tick labels and axis titles for a plot area x.a..x.b by y.b..y.a."""
    parts = ['<g class="axes" font-size="11" fill="#333">']
    for t in y.ticks():
        py = y(t)
        parts.append(f'<line x1="{_n(x.a)}" y1="{_n(py)}" x2="{_n(x.b)}" y2="{_n(py)}" stroke="#e3e3e3"/>')
        parts.append(_text(x.a - 6, py + 4, y_format(t), anchor="end"))
    for t in x_ticks if x_ticks is not None else x.ticks():
        px = x(t)
        parts.append(f'<line x1="{_n(px)}" y1="{_n(y.a)}" x2="{_n(px)}" y2="{_n(y.a + 5)}" stroke="#555"/>')
        parts.append(_text(px, y.a + 18, x_format(t)))
    parts.append(f'<line x1="{_n(x.a)}" y1="{_n(y.a)}" x2="{_n(x.b)}" y2="{_n(y.a)}" stroke="#555"/>')
    parts.append(f'<line x1="{_n(x.a)}" y1="{_n(y.a)}" x2="{_n(x.a)}" y2="{_n(y.b)}" stroke="#555"/>')
    parts.append(_text((x.a + x.b) / 2, y.a + 38, x_label, size=12))
    parts.append(_text(16, (y.a + y.b) / 2, y_label, size=12, rotate=True))
    parts.append("</g>")
    return parts


def _legend(items: list[tuple[str, str]], left: float, top: float, right: float, *, dashed: Sequence[bool] = ()) -> list[str]:
    """Swatches and labels in rows from (left, top), wrapping before `right`."""
    parts = ['<g class="legend" font-size="11" fill="#333">']
    x, y = left, top
    for i, (label, fill) in enumerate(items):
        width = 22 + CHAR_PX * len(label) + 14
        if x + width > right and x > left:
            x, y = left, y + 16
        dash = ' stroke-dasharray="5 3"' if i < len(dashed) and dashed[i] else ""
        parts.append(f'<line x1="{_n(x)}" y1="{_n(y - 4)}" x2="{_n(x + 16)}" y2="{_n(y - 4)}" stroke="{fill}" '
                     f'stroke-width="3"{dash}/>')
        parts.append(_text(x + 22, y, label, anchor="start"))
        x += width
    parts.append("</g>")
    return parts


def _legend_rows(labels: Sequence[str], left: float, right: float) -> int:
    rows, x = 1, left
    for label in labels:
        width = 22 + CHAR_PX * len(label) + 14
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
    legend = len(series) > 1
    top = 14 + (16 * _legend_rows([s.label for s in series], 70, WIDTH - 16) if legend else 0)
    xs = [v for s in series for v in s.xs] + [m for m, _ in marks]
    ys = [v + (e or 0) for s in series for v, e in zip(s.ys, s.error or [0] * len(s.ys))]
    if x_categories is not None:
        x = Scale(-0.5, len(x_categories) - 0.5, 70, WIDTH - 16)
        names = list(x_categories)
        x_format, x_ticks = (lambda v: names[round(v)]), [float(i) for i in range(len(names))]
    else:
        x, x_ticks = Scale.fit(xs, 70, WIDTH - 16, log=x_log), None
    y = Scale.fit(ys, HEIGHT - 52, top, zero=y_zero, lo=0.0 if y_max is not None else None, hi=y_max)
    parts = _open(ident, title, desc or title)
    parts += _axes(x, y, x_label, y_label, x_format, y_format, x_ticks)
    for at, label in marks:
        px = x(at)
        parts.append(f'<g class="mark"><title>{escape(label)}</title><line x1="{_n(px)}" y1="{_n(y.a)}" x2="{_n(px)}" '
                     f'y2="{_n(y.b)}" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="2 3"/>'
                     f'{_text(px - 4, y.b + 12, label, anchor="end", fill="#D55E00")}</g>')
    if legend:
        parts += _legend([(s.label, c) for s, c in zip(series, colours)], 70, 16, WIDTH - 16,
                         dashed=[s.dashed for s in series])
    for s, c in zip(series, colours):
        points = [(px, py) for px, py in zip(s.xs, s.ys) if math.isfinite(px) and math.isfinite(py)
                  and (px > 0 or not x_log)]
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        parts.append(f'<g class="series"><title>{escape(s.label)}</title>')
        if points:
            path, (px0, py0) = [], points[0]
            path.append(f"M{_n(x(px0))} {_n(y(py0))}")
            for px1, py1 in points[1:]:
                path.append(f"H{_n(x(px1))} V{_n(y(py1))}" if step else f"L{_n(x(px1))} {_n(y(py1))}")
            parts.append(f'<path d="{" ".join(path)}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        for i, (px, py) in enumerate(points if s.markers or s.error else []):
            cx, cy = x(px), y(py)
            if s.error:
                e = s.error[i]
                parts.append(f'<line x1="{_n(cx)}" y1="{_n(y(py - e))}" x2="{_n(cx)}" y2="{_n(y(py + e))}" '
                             f'stroke="{c}" stroke-width="1.5"/>')
            tip = f"{s.label}: {x_format(px)} → {y_format(py)}" + (f" ± {y_format(s.error[i])}" if s.error else "")
            parts.append(f'<circle cx="{_n(cx)}" cy="{_n(cy)}" r="3.5" fill="{c}"><title>{escape(tip)}</title></circle>')
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


def bar_chart(ident: str, title: str, categories: Sequence[str], series: Sequence[Bars], *, value_label: str,
              value_format: Format, desc: str = "", stacked: bool = False, value_max: float | None = None) -> str:
    """Horizontal bars, one row per category: grouped side by side, or `stacked` into one bar."""
    colours = [s.colour or colour(i) for i, s in enumerate(series)]
    legend = len(series) > 1
    label_px = min(200, 12 + CHAR_PX * max((len(c) for c in categories), default=4))
    left = max(70, label_px)
    top = 14 + (16 * _legend_rows([s.label for s in series], left, WIDTH - 24) if legend else 0)
    per_row = 1 if stacked else len(series)
    row_px = max(14, min(26, 200 / max(1, len(categories) * per_row))) * per_row + 8
    height = int(top + row_px * len(categories) + 56)
    totals = [sum(s.values[i] for s in series) for i in range(len(categories))] if stacked else \
        [v for s in series for v in s.values]
    x = Scale.fit(totals, left, WIDTH - 24, zero=True, lo=0.0 if value_max is not None else None, hi=value_max)
    y = Scale(0, len(categories), height - 52, top)
    parts = _open(ident, title, desc or title, height=height)
    parts.append('<g class="axes" font-size="11" fill="#333">')
    for t in x.ticks():
        px = x(t)
        parts.append(f'<line x1="{_n(px)}" y1="{_n(y.a)}" x2="{_n(px)}" y2="{_n(y.b)}" stroke="#e3e3e3"/>')
        parts.append(_text(px, y.a + 18, value_format(t)))
    for i, name in enumerate(categories):
        parts.append(_text(left - 8, y(len(categories) - i - 0.5) + 4, name, anchor="end"))
    parts.append(f'<line x1="{_n(x.a)}" y1="{_n(y.a)}" x2="{_n(x.b)}" y2="{_n(y.a)}" stroke="#555"/>')
    parts.append(f'<line x1="{_n(x.a)}" y1="{_n(y.a)}" x2="{_n(x.a)}" y2="{_n(y.b)}" stroke="#555"/>')
    parts.append(_text((x.a + x.b) / 2, y.a + 38, value_label, size=12))
    parts.append("</g>")
    if legend:
        parts += _legend([(s.label, c) for s, c in zip(series, colours)], left, 16, WIDTH - 24)
    bar_px = (row_px - 8) / per_row
    for i, name in enumerate(categories):
        row_top = y(len(categories) - i) + 4
        offset = 0.0
        for j, (s, c) in enumerate(zip(series, colours)):
            v = s.values[i]
            if not math.isfinite(v) or v <= 0:
                continue
            x0 = x(offset) if stacked else x.a
            x1 = x(offset + v) if stacked else x(v)
            top_px = row_top if stacked else row_top + j * bar_px
            tip = f"{name} — {s.label}: {value_format(v)}" if len(series) > 1 else f"{name}: {value_format(v)}"
            parts.append(f'<rect x="{_n(x0)}" y="{_n(top_px)}" width="{_n(max(x1 - x0, 0.5))}" height="{_n(bar_px - 1)}" '
                         f'fill="{c}"><title>{escape(tip)}</title></rect>')
            if stacked:
                offset += v
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


def heat_map(ident: str, title: str, x_labels: Sequence[str], y_labels: Sequence[str],
             values: Sequence[Sequence[float | None]], *, x_label: str, y_label: str, value_format: Format,
             desc: str = "", lower_is_better: bool = True) -> str:
    """A grid of cells, values[row][col] with rows = y_labels (bottom to top) and cols = x_labels.

    Colour runs from dark (best) to yellow (worst) when `lower_is_better`, the other way round
    when not; every cell also prints its value, and a missing value (None) is drawn hatched grey.
    """
    finite = [v for row in values for v in row if v is not None and math.isfinite(v)]
    vmin, vmax = (min(finite), max(finite)) if finite else (0.0, 1.0)
    label_px = max(70, 24 + CHAR_PX * max((len(s) for s in y_labels), default=4))
    left, right, top, bottom = label_px, WIDTH - 90, 14, HEIGHT - 52
    cw, ch = (right - left) / max(1, len(x_labels)), (bottom - top) / max(1, len(y_labels))
    parts = _open(ident, title, desc or title)
    parts.append('<g class="cells" font-size="11">')
    for r, row in enumerate(values):
        for c, v in enumerate(row):
            cx, cy = left + c * cw, bottom - (r + 1) * ch
            where = f"{x_label} {x_labels[c]}, {y_label} {y_labels[r]}"
            if v is None or not math.isfinite(v):
                parts.append(f'<rect x="{_n(cx)}" y="{_n(cy)}" width="{_n(cw)}" height="{_n(ch)}" fill="#d0d0d0" '
                             f'stroke="#fff"><title>{escape(where)}: no value</title></rect>')
                continue
            t = (v - vmin) / (vmax - vmin) if vmax > vmin else 0.5
            t = t if lower_is_better else 1 - t
            parts.append(f'<rect x="{_n(cx)}" y="{_n(cy)}" width="{_n(cw)}" height="{_n(ch)}" fill="{ramp(t)}" '
                         f'stroke="#fff"><title>{escape(where)}: {escape(value_format(v))}</title></rect>')
            if cw >= 40 and ch >= 16:
                parts.append(_text(cx + cw / 2, cy + ch / 2 + 4, value_format(v), fill="#000" if t > 0.55 else "#fff"))
    parts.append("</g>")
    parts.append('<g class="axes" font-size="11" fill="#333">')
    for c, name in enumerate(x_labels):
        parts.append(_text(left + (c + 0.5) * cw, bottom + 18, name))
    for r, name in enumerate(y_labels):
        parts.append(_text(left - 8, bottom - (r + 0.5) * ch + 4, name, anchor="end"))
    parts.append(_text((left + right) / 2, bottom + 38, x_label, size=12))
    parts.append(_text(16, (top + bottom) / 2, y_label, size=12, rotate=True))
    # the colour key: best at the top
    kx, steps = right + 18, 20
    for i in range(steps):
        t = i / (steps - 1)
        ky = top + i * (bottom - top) / steps
        parts.append(f'<rect x="{_n(kx)}" y="{_n(ky)}" width="14" height="{_n((bottom - top) / steps + 0.5)}" fill="{ramp(t)}"/>')
    best, worst = (vmin, vmax) if lower_is_better else (vmax, vmin)
    parts.append(_text(kx + 18, top + 10, value_format(best), anchor="start"))
    parts.append(_text(kx + 18, bottom, value_format(worst), anchor="start"))
    parts.append("</g></svg>")
    return "\n".join(parts)


# --- scatter with a Pareto frontier -------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str


def pareto_frontier(points: Sequence[Point]) -> list[Point]:
    """The points no other point beats on both x and y (lower is better on both), by x."""
    best: list[Point] = []
    for p in sorted(points, key=lambda p: (p.x, p.y, p.label)):
        if not best or p.y < best[-1].y:
            best.append(p)
    return best


def scatter_frontier(ident: str, title: str, points: Sequence[Point], *, x_label: str, y_label: str,
                     x_format: Format, y_format: Format, desc: str = "", frontier_label: str = "Pareto frontier") -> str:
    """Every point, the frontier's points highlighted and joined by a staircase (lower-left is better)."""
    frontier = pareto_frontier(points)
    on_frontier = {id(p) for p in frontier}
    top = 14 + 16
    x = Scale.fit([p.x for p in points], 70, WIDTH - 16)
    y = Scale.fit([p.y for p in points], HEIGHT - 52, top, zero=True)
    parts = _open(ident, title, desc or title)
    parts += _axes(x, y, x_label, y_label, x_format, y_format)
    parts += _legend([("design point", "#9a9a9a"), (frontier_label, colour(5))], 70, 16, WIDTH - 16)
    if frontier:
        path = [f"M{_n(x(frontier[0].x))} {_n(y(frontier[0].y))}"]
        for p in frontier[1:]:
            path.append(f"H{_n(x(p.x))} V{_n(y(p.y))}")
        parts.append(f'<path class="frontier" d="{" ".join(path)}" fill="none" stroke="{colour(5)}" stroke-width="2"/>')
    parts.append('<g class="points">')
    for p in points:
        fill = colour(5) if id(p) in on_frontier else "#9a9a9a"
        tip = f"{p.label}: {x_format(p.x)}, {y_format(p.y)}" + (" (on the frontier)" if id(p) in on_frontier else "")
        parts.append(f'<circle cx="{_n(x(p.x))}" cy="{_n(y(p.y))}" r="{4.5 if id(p) in on_frontier else 3.5}" '
                     f'fill="{fill}" stroke="#fff" stroke-width="1"><title>{escape(tip)}</title></circle>')
    parts.append("</g></svg>")
    return "\n".join(parts)


# --- axis formats -------------------------------------------------------------------------------

def _trim(text: str) -> str:
    return text.replace(".0 ", " ") if ".0 " in text else text.removesuffix(".0")


def fmt_seconds(s: float) -> str:
    """Tick labels for durations: '0', '500 us', '20 ms', '1.5 s'."""
    if s == 0:
        return "0"
    if abs(s) < 1e-3:
        return _trim(f"{s * 1e6:.3g} us")
    if abs(s) < 1:
        return _trim(f"{s * 1e3:.3g} ms")
    return _trim(f"{s:.3g} s")


def fmt_share(x: float) -> str:
    """A share as a percentage: 0.25 -> '25%', 0.125 -> '12.5%'."""
    return f"{100 * x:.3g}%"


def fmt_plain(x: float) -> str:
    if x == 0:
        return "0"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def fmt_bytes_tick(n: float) -> str:
    """Bytes in decimal units for ticks: '0', '500 MB', '1.2 GB'."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_dollars(x: float) -> str:
    return f"${x:,.2f}" if abs(x) < 100 else f"${x:,.0f}"


__all__ = ["Bars", "Point", "Scale", "Series", "bar_chart", "colour", "heat_map", "line_chart",
           "pareto_frontier", "scatter_frontier"]
