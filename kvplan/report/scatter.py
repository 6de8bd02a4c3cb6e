"""A scatter of design points with their Pareto frontier: cost against latency, lower-left is better.

The frontier is the set of points no other point beats on both axes, joined by a staircase.
Every point is labelled with its name where the label fits: the first free spot right, left,
above or below it, the frontier's points first; a label with no free spot is left to the
point's tooltip, and the caller says how many. A target (an SLO) is a dashed horizontal line.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Sequence

from .axis import Format, label_px, scale_for
from .svg import HEIGHT, WIDTH, axes, colour, coord, legend, open_plot, text_at


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


Box = tuple[float, float, float, float]


def _free(box: Box, taken: Sequence[Box], area: Box) -> bool:
    x0, y0, x1, y1 = box
    if x0 < area[0] or y0 < area[1] or x1 > area[2] or y1 > area[3]:
        return False
    return all(x1 <= a0 or x0 >= a1 or y1 <= b0 or y0 >= b1 for a0, b0, a1, b1 in taken)


SPOTS = (("right", 0), ("left", 0), ("right", -1), ("left", -1), ("right", 1), ("left", 1), ("middle", -1),
         ("middle", 1))
"""Where a point's label may go, in order: beside it (right, left), then above and below it leaning right or left,
then centred above and below."""


def place_labels(anchors: Sequence[tuple[float, float, str]], area: Box,
                 taken: Sequence[Box] = ()) -> list[tuple[float, float, str, str] | None]:
    """Where each (x, y, text) label goes: (x, y, text-anchor, text) at the first of SPOTS around its point that
    stays inside `area` and covers neither an earlier label nor a box in `taken` (the points), or None."""
    boxes, out = list(taken), []
    for px, py, text in anchors:
        w, placed = label_px(text, 10), None
        for side, row in SPOTS:
            base = py + 3.5 + 13 * row                                    # the text's baseline
            gap = 7 if row == 0 else 1
            x0 = {"right": px + gap - 1, "left": px - gap - w, "middle": px - w / 2}[side]
            box = (x0, base - 9.5, x0 + w + 1, base + 1.5)
            if _free(box, boxes, area):
                anchor = {"right": "start", "left": "end", "middle": "middle"}[side]
                x = {"right": px + gap, "left": px - gap, "middle": px}[side]
                placed = (x, base, anchor, text)
                boxes.append(box)
                break
        out.append(placed)
    return out


def scatter_frontier(ident: str, title: str, points: Sequence[Point], *, x_label: str, y_label: str,
                     x_format: Format, y_format: Format, desc: str = "", frontier_label: str = "Pareto frontier",
                     y_marks: Sequence[tuple[float, str]] = ()) -> tuple[str, int]:
    """Every point, the frontier's points highlighted and joined by a staircase (lower-left is better), each point
    labelled where its label fits (the frontier's first), and `y_marks` as labelled horizontal lines (an SLO).
    Returns the SVG and how many labels did not fit (those points keep their tooltip)."""
    frontier = pareto_frontier(points)
    on_frontier = {id(p) for p in frontier}
    top = 14 + 16
    x = scale_for(x_format, [p.x for p in points], 70, WIDTH - 16)
    y = scale_for(y_format, [p.y for p in points] + [m for m, _ in y_marks], HEIGHT - 52, top, zero=True)
    parts = open_plot(ident, title, desc or title)
    parts += axes(x, y, x_label, y_label, x_format, y_format)
    entries = [("design point", "#9a9a9a"), (frontier_label, colour(5))] + [(label, "#D55E00") for _, label in y_marks]
    parts += legend(entries, 70, 16, WIDTH - 16, dashed=[False, False] + [True] * len(y_marks))
    for at, label in y_marks:
        parts.append(f'<g class="mark"><title>{escape(label)}</title><line x1="{coord(x.a)}" y1="{coord(y(at))}" '
                     f'x2="{coord(x.b)}" y2="{coord(y(at))}" stroke="#D55E00" stroke-width="1.5" stroke-dasharray="5 3"/></g>')
    if frontier:
        path = [f"M{coord(x(frontier[0].x))} {coord(y(frontier[0].y))}"]
        for p in frontier[1:]:
            path.append(f"H{coord(x(p.x))} V{coord(y(p.y))}")
        parts.append(f'<path class="frontier" d="{" ".join(path)}" fill="none" stroke="{colour(5)}" stroke-width="2"/>')
    parts.append('<g class="points">')
    for p in points:
        fill = colour(5) if id(p) in on_frontier else "#9a9a9a"
        tip = f"{p.label}: {x_format(p.x)}, {y_format(p.y)}" + (" (on the frontier)" if id(p) in on_frontier else "")
        parts.append(f'<circle cx="{coord(x(p.x))}" cy="{coord(y(p.y))}" r="{4.5 if id(p) in on_frontier else 3.5}" '
                     f'fill="{fill}" stroke="#fff" stroke-width="1"><title>{escape(tip)}</title></circle>')
    parts.append("</g>")
    ordered = sorted(points, key=lambda p: (id(p) not in on_frontier, p.x, p.y, p.label))
    dots = [(x(p.x) - 5, y(p.y) - 5, x(p.x) + 5, y(p.y) + 5) for p in points]
    placed = place_labels([(x(p.x), y(p.y), p.label) for p in ordered], (x.a + 2, y.b - 4, WIDTH - 2, y.a - 2), dots)
    parts.append('<g class="point-labels" font-size="10" fill="#333">')
    parts += [text_at(px, py, text, anchor=anchor, size=10) for px, py, anchor, text in filter(None, placed)]
    parts.append("</g></svg>")
    return "\n".join(parts), sum(spot is None for spot in placed)


__all__ = ["Point", "pareto_frontier", "place_labels", "scatter_frontier"]
