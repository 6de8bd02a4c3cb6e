"""A sweep (kvplan.sweep.result.SweepResult) as one table: a row per point, the headline metrics, and
under each row its 95 % interval when the points ran several seeds. `kvplan sweep` prints it and the
report shows it; `kvplan capacity` prints its probes with the same columns.
"""

from __future__ import annotations

from typing import Callable

from ..sweep.result import SweepResult
from ..units import fmt_duration, pct
from .sections import Section


TABLE_COLUMNS: list[tuple[str, str, Callable[[float], str]]] = [
    ("requests_per_s", "req/s", lambda x: f"{x:.2f}"),
    ("goodput_per_s", "goodput", lambda x: f"{x:.2f}"),
    ("ttft_p50", "TTFT p50", fmt_duration),
    ("ttft_p99", "TTFT p99", fmt_duration),
    ("tpot_p50", "TPOT p50", fmt_duration),
    ("e2e_p99", "E2E p99", fmt_duration),
    ("recomputed", "recomp.", pct),
]
"""The metrics the terminal table shows (the JSON and CSV have all of METRICS)."""

NARROW: list[tuple[str, list[str] | None]] = [("goodput", None), ("TPOT p50", None), ("recomp.", None),
                                               ("TTFT p50", None)]
"""The metric columns a narrow terminal leaves out, in this order (kvplan.report.terminal); the varied values,
req/s, TTFT p99 and E2E p99 stay."""


def sweep_section(result: SweepResult) -> Section:
    """The sweep as one table: a row per point, the headline metrics (± 95 % CI over several seeds)."""
    seeds = len(result.points[0].seeds) if result.points else 1
    title = f"Sweep of {result.name} over {' x '.join(result.varied)}: {len(result.points)} point(s) x {seeds} seed(s)"
    if seeds > 1:
        title += ", mean ± 95 % CI"
    section = Section(title, [*short_names(result.varied), *(label for _, label, _ in TABLE_COLUMNS)], narrow=NARROW)
    for point in result.points:
        row, ci = [point.values[p] for p in result.varied], ["± 95 % CI", *([""] * (len(result.varied) - 1))]
        for key, _, fmt in TABLE_COLUMNS:
            stat = point.metrics.get(key)
            row.append("-" if stat is None else fmt(stat.mean))
            ci.append("" if stat is None else fmt(stat.ci95))
        section.rows.append(row)
        if seeds > 1:                          # the interval on a row of its own, under the means
            section.rows.append(ci)
    return section


def short_names(paths: list[str]) -> list[str]:
    """Column headers for dotted paths: the path without its top-level section (`ddr.size`,
    `instances`), longer where two would look alike."""
    names = []
    for path in paths:
        parts = path.split(".")
        k = max(1, len(parts) - 1)
        while k < len(parts) and sum(p.split(".")[-k:] == parts[-k:] for p in paths) > 1:
            k += 1
        names.append(".".join(parts[-k:]))
    return names


__all__ = ["NARROW", "TABLE_COLUMNS", "short_names", "sweep_section"]
