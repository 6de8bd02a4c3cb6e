"""The page of a comparison with a live run (`kvplan compare SPEC --observed RUN --json > compare.json`,
then `kvplan report compare.json`).

The file is a list of rows: a metric, its unit, the simulator's prediction, what the benchmark observed,
and the error (shares: predicted - observed in percentage points; everything else: (predicted -
observed) / observed; kvplan.live.compare.Row). The page shows the table and, side by side, the
predicted and observed latencies and how far off each metric is.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from . import svg
from .figures import Figure, Ids
from .page import Document, Part
from .sections import Section


class CompareRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    metric: str
    unit: str
    predicted: float | None
    observed: float | None
    error: float | None


FORMATS = {"s": svg.fmt_seconds, "share": svg.fmt_share, "bytes": svg.fmt_bytes}


def _value(row: CompareRow, v: float | None) -> str:
    if v is None:
        return "-"
    fmt = FORMATS.get(row.unit)
    return fmt(v) if fmt else f"{svg.fmt_plain(v)} {row.unit}"


def _error(row: CompareRow) -> str:
    if row.error is None:
        return "-"
    return f"{row.error:+.1f} pp" if row.unit == "share" else f"{100 * row.error:+.1f} %"   # shares: already points


def table_part(rows: list[CompareRow]) -> Part:
    table = Section("Predicted against observed", ["metric", "predicted", "observed", "error"])
    for row in rows:
        table.rows.append([row.metric, _value(row, row.predicted), _value(row, row.observed), _error(row)])
    return Part("Predicted against observed", "Each metric as the simulator predicts it for the benchmarked requests "
                                              "and as the run observed it; shares differ in percentage points, the "
                                              "rest relative to the observed value.", tables=[table])


def figures_part(rows: list[CompareRow], ids: Ids) -> Part:
    part = Part("How far off", "The latencies side by side, and each metric's error (its size; the table gives "
                               "its sign).")
    latency = [r for r in rows if r.unit == "s" and r.predicted is not None and r.observed is not None]
    if latency:
        title = "Latency: predicted and observed"
        ident = ids()
        chart = svg.bar_chart(ident, title, [r.metric for r in latency],
                              [svg.Bars("predicted", [r.predicted or 0.0 for r in latency], svg.colour(0)),
                               svg.Bars("observed", [r.observed or 0.0 for r in latency], svg.colour(1))],
                              value_label="seconds", value_format=svg.fmt_seconds,
                              desc="Each latency metric as predicted by the simulator and as observed on the stack.")
        part.figures.append(Figure(ident, title, chart, f"{len(latency)} latency metrics."))
    relative = [r for r in rows if r.unit != "share" and r.error is not None and math.isfinite(r.error)]
    if relative:
        title = "Relative error of each metric"
        ident = ids()
        chart = svg.bar_chart(ident, title, [r.metric for r in relative],
                              [svg.Bars("|error|", [abs(r.error or 0.0) for r in relative], svg.colour(5))],
                              value_label="|predicted - observed| / observed", value_format=svg.fmt_share,
                              desc="How far each prediction is from the observation, relative to the observation.")
        worst = max(relative, key=lambda r: abs(r.error or 0.0))
        part.figures.append(Figure(ident, title, chart, f"Shares are left out (the table gives them in percentage "
                                                        f"points); the largest error is {worst.metric}'s, "
                                                        f"{_error(worst)}."))
    if not part.figures:
        part.notes.append("No metric has both a prediction and an observation to plot.")
    return part


def document(rows: list[CompareRow], name: str) -> Document:
    ids = Ids()
    off = [r for r in rows if r.error is not None]
    return Document(f"predicted against observed: {len(rows)} metrics", f"{name}; {len(off)} with both values",
                    [table_part(rows), figures_part(rows, ids)])


__all__ = ["CompareRow", "document"]
