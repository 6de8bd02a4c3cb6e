"""Where a simulated run waits: the queue and TTFT over time, and every resource's busy share with the
bottleneck (kvplan.sim.bottleneck) set apart.

Both time series come from the per-request table: a request is in the queue from its arrival until it is
admitted (`queue` seconds later), so the queue length at time t counts the requests that arrived by t and
were not yet admitted; TTFT over time is the TTFT of the requests arriving in each slice of the run.
"""

from __future__ import annotations

import numpy as np

from ..sim.bottleneck import ENGINES, SATURATED, Bottleneck
from ..sim.result import SimResult
from . import svg
from .figures import Figure, Ids

GRID_POINTS = 400
"""Queue length is sampled at this many times: a million-request run still makes a small page."""
SLICES = 60
"""At most this many arrival slices for TTFT over time (fewer when there are few requests)."""
MARK = "#D55E00"


def queue_length(ids: Ids, res: SimResult) -> Figure | None:
    t = res.per_request
    if len(t.arrival) == 0:
        return None
    arrived = np.sort(np.asarray(t.arrival, dtype=float))
    admitted = np.sort(np.asarray(t.arrival, dtype=float) + np.asarray(t.queue, dtype=float))
    start, end = float(arrived[0]), float(max(admitted[-1], arrived[-1]))
    grid = np.linspace(start, end, GRID_POINTS) if end > start else np.array([start])
    waiting = np.searchsorted(arrived, grid, side="right") - np.searchsorted(admitted, grid, side="right")
    title = "Requests waiting over time"
    ident = ids()
    chart = svg.line_chart(ident, title, [svg.Series("requests waiting", grid.tolist(), waiting.astype(float).tolist())],
                           x_label="simulated time", y_label="requests waiting", x_format=svg.fmt_seconds,
                           y_format=svg.fmt_plain, step=True,
                           desc="Requests that had arrived and were not yet admitted into a batch, over the run.")
    return Figure(ident, title, chart, f"Sampled at {len(grid)} times from every request's arrival and queue wait; "
                                       f"most waiting at once: {int(waiting.max())}; mean wait "
                                       f"{svg.fmt_seconds(res.queue.mean)}.")


def ttft_over_time(ids: Ids, res: SimResult) -> Figure | None:
    t = res.per_request
    n = len(t.arrival)
    if n == 0:
        return None
    order = np.argsort(np.asarray(t.arrival, dtype=float), kind="stable")
    arrival, ttft = np.asarray(t.arrival, dtype=float)[order], np.asarray(t.ttft, dtype=float)[order]
    slices = max(1, min(SLICES, n // 5))
    chunks = np.array_split(np.arange(n), slices)
    xs = [float(arrival[c].mean()) for c in chunks if len(c)]
    mean = [float(ttft[c].mean()) for c in chunks if len(c)]
    p90 = [float(np.percentile(ttft[c], 90)) for c in chunks if len(c)]
    title = "TTFT over time"
    ident = ids()
    chart = svg.line_chart(ident, title, [svg.Series("mean", xs, mean), svg.Series("p90", xs, p90, dashed=True)],
                           x_label="arrival time", y_label="TTFT", x_format=svg.fmt_seconds, y_format=svg.fmt_seconds,
                           desc="TTFT of the requests arriving in each slice of the run: mean and 90th percentile.")
    return Figure(ident, title, chart, f"{n} requests in {len(xs)} slices of about {n // len(xs)} requests each, "
                                       "by arrival time; a rising line is a queue that grows.")


def busy_shares(ids: Ids, res: SimResult, verdict: Bottleneck) -> Figure:
    """The engines and every link or device, by the share of the run they were busy; the bottleneck marked."""
    engines = sum(res.engine_occupancy) / len(res.engine_occupancy) if res.engine_occupancy else 0.0
    names = [f"{ENGINES} (mean)"] + [link.name for link in res.links]
    values = [engines] + [link.utilisation for link in res.links]
    marked = [verdict.saturated and (name == verdict.name or name == f"{verdict.name} (mean)") for name in names]
    colours = [MARK if m else svg.colour(0) for m in marked]
    title = "Busy share of the engines and every link"
    ident = ids()
    chart = svg.bar_chart(ident, title, names, [svg.Bars("busy", values, colours=colours)],
                          value_label="share of the run busy", value_format=svg.fmt_share,
                          desc="How full the engines' batches were (the fullest of slots, token budget and KV blocks, over the "
                               "run) and the share of the simulated time each link or device had work; "
                               "the saturated one in orange.")
    caption = f"A resource saturates from {SATURATED:.0%} busy. {verdict.verdict()}" + \
        (f" (marked in orange). Next: {verdict.fix}." if verdict.saturated else ".")
    return Figure(ident, title, chart, caption)


__all__ = ["busy_shares", "queue_length", "ttft_over_time"]
