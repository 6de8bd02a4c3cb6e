"""The page of a capacity search (`kvplan capacity SPEC --out capacity.json`, then `kvplan report capacity.json`).

The search probes rates (or a trace's replay speeds) and decides at each whether the SLO holds. The page
shows the answer in words (the same lines `kvplan capacity` prints), every probe with its verdict, and
each SLO metric against the load: the probes' means with their 95 % intervals, the target as a dashed
line, and the capacity found (the limit) marked at its rate.
"""

from __future__ import annotations

import math
from typing import Callable

from ..sweep.capacity import CapacityResult, Knob, headline
from ..units import fmt_duration
from . import svg
from .figures import Figure, Ids
from .page import Document, Part
from .sections import Section


def _label(key: str) -> str:
    metric, _, pct = key.rpartition("_")
    return f"{metric.upper()} {pct}" if metric else key


def _rate_format(result: CapacityResult) -> Callable[[float], str]:
    if result.unit == "x":
        return lambda v: f"x{svg.fmt_plain(v)}"
    return lambda v: f"{svg.fmt_plain(v)}/s"


def answer_part(result: CapacityResult) -> Part:
    fmt = _rate_format(result)
    if result.rate is None:
        found = "none: no probed load met the SLO"
    elif result.tested and result.low is not None and result.high is not None:
        found = Knob(result.knob, 1.0, 1.0 if result.unit == "x" else None).fmt_interval(result.rate, result.low,
                                                                                      result.high) + ", 95 %"
    else:
        found = fmt(result.rate) + ("" if result.tested else " (1 seed per probe: not tested against noise)")
    rows = [["spec path searched", result.knob],
            ["target", ", ".join(f"{_label(k)} <= {fmt_duration(v)}" for k, v in result.slo.items()) or "-"],
            ["capacity", found + ("" if result.outcome == "found" else f" ({result.outcome.replace('_', ' ')})")],
            ["probes", f"{len(result.probes)}, {sum(len(p.seeds) for p in result.probes)} runs, at most "
                       f"{len(result.seeds)} seeds each"]]
    return Part("Answer", "The highest load at which the spec still meets its SLO.",
                tables=[Section("Capacity", None, rows)], notes=[line.strip() for line in headline(result)])


def probes_part(result: CapacityResult) -> Part:
    fmt = _rate_format(result)
    keys = list(result.slo)
    table = Section("Every probe, by load", ["load", "seeds", "verdict", "req/s", *(_label(k) for k in keys)])
    for p in sorted(result.probes, key=lambda p: p.rate):
        served = p.metrics.get("requests_per_s")
        cells = []
        for key in keys:
            stat = p.metrics.get(key)
            cells.append("-" if stat is None else fmt_duration(stat.mean)
                         + (f" ± {fmt_duration(stat.ci95)}" if len(p.seeds) > 1 else ""))
        table.rows.append([fmt(p.rate), str(len(p.seeds)), p.verdict, "-" if served is None else f"{served.mean:.3g}",
                           *cells])
    return Part("Probes", "Each load the search tried, with the mean over its seeds and the 95 % interval.",
                tables=[table])


def curves_part(result: CapacityResult, ids: Ids) -> Part:
    fmt = _rate_format(result)
    part = Part("Latency against load", "Each SLO metric at every probe; the dashed line is the target and the "
                                        "marked load is the capacity found.")
    probes = sorted(result.probes, key=lambda p: p.rate)
    marks = [(result.rate, f"capacity {fmt(result.rate)}")] if result.rate is not None else []
    for key, target in result.slo.items():
        points = [(p.rate, stat) for p in probes if (stat := p.metrics.get(key)) is not None and math.isfinite(stat.mean)]
        if not points:
            continue
        rates = [r for r, _ in points]
        spread = rates[-1] / rates[0] if rates[0] > 0 else 1.0
        measured = svg.Series(f"{_label(key)} (mean ± 95 % CI)", rates, [s.mean for _, s in points],
                              error=[s.ci95 for _, s in points], markers=True)
        line = svg.Series(f"SLO {_label(key)} {svg.fmt_seconds(target)}", [rates[0], rates[-1]], [target, target],
                          dashed=True)
        title = f"{_label(key)} against load"
        ident = ids()
        chart = svg.line_chart(ident, title, [measured, line], x_label=result.knob, y_label=_label(key),
                               x_format=fmt, y_format=svg.fmt_seconds, x_log=spread >= 8, marks=marks,
                               colours=[svg.colour(0), "#D55E00"],
                               desc=f"{_label(key)} at each probed load, with the SLO target and the capacity found.")
        caption = (f"{len(points)} probes" + (", log scale" if spread >= 8 else "") + "; "
                   + (f"the limit is {fmt(result.rate)} ({result.outcome.replace('_', ' ')})." if result.rate is not None
                      else "no probed load met the SLO."))
        part.figures.append(Figure(ident, title, chart, caption))
    if not part.figures:
        part.notes.append("No probe carries a value of the SLO metrics, so there is no curve to draw.")
    return part


def document(result: CapacityResult, name: str) -> Document:
    ids = Ids()
    fmt = _rate_format(result)
    title = f"{result.name}: capacity " + ("not found" if result.rate is None else fmt(result.rate))
    subtitle = f"spec {result.spec_hash[:12]}, {name}; searched {result.knob}"
    return Document(title, subtitle, [answer_part(result), probes_part(result), curves_part(result, ids)])


__all__ = ["document"]
