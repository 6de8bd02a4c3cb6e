"""The report's plots, drawn from simulation and sweep results with `svg.py`.

Each function returns `Figure`s: an SVG chart with its title and a caption saying what is
plotted and from which data. Latency CDFs come from the per-request table every SimResult
carries (`per_request`), so they are the real empirical distributions, not curves fitted to the
p50/p90/p99 summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..sim.result import SimResult
from . import scatter, svg

TIER_COLOURS = {"hbm": "#0072B2", "ddr": "#009E73", "nvme": "#E69F00", "ceph": "#CC79A7", "recomputed": "#D55E00"}
CDF_POINTS = 400
"""At most this many steps per CDF line: a million-request run still makes a small page."""
DEVICE_LINKS = ("nvme/", "osds/")
"""Links whose work is device time (seconds), not bytes: NVMe drives and each Ceph host's OSDs."""


@dataclass(frozen=True)
class Figure:
    ident: str
    title: str
    svg: str
    caption: str


class Ids:
    """Element ids fig-1, fig-2, ... in page order (stable, so the page is byte-identical)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> str:
        self.count += 1
        return f"fig-{self.count}"


# --- latency distributions ----------------------------------------------------------------------

def cdf(values: np.ndarray, max_points: int = CDF_POINTS) -> tuple[list[float], list[float]]:
    """An empirical CDF as step corners: (x, share of values <= x), starting from share 0.

    Above `max_points` values it keeps the sample at evenly spaced ranks (real values, not
    interpolated ones), which draws the same staircase at screen resolution.
    """
    v = np.sort(values[np.isfinite(values)])
    n = len(v)
    if n == 0:
        return [], []
    ranks = np.arange(1, n + 1) if n <= max_points else \
        np.unique(np.ceil(np.linspace(1 / max_points, 1, max_points) * n).astype(int))
    xs = [float(v[0]), *(float(v[r - 1]) for r in ranks)]
    ys = [0.0, *(float(r / n) for r in ranks)]
    return xs, ys


def latency_cdf(ids: Ids, metric: str, runs: Sequence[tuple[str, SimResult]], *, what: str) -> Figure:
    """The CDF of one per-request latency (`ttft`, `tpot`, `e2e`, `queue`), one line per run."""
    label = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E latency", "queue": "queueing delay"}[metric]
    series, dropped = [], 0
    columns = [np.asarray(getattr(res.per_request, metric), dtype=float) for _, res in runs]
    positive = np.concatenate([c[np.isfinite(c) & (c > 0)] for c in columns]) if columns else np.array([])
    log = bool(positive.size and positive.max() / positive.min() > 30)
    for (name, res), column in zip(runs, columns):
        kept = column[np.isfinite(column) & (column > 0)] if log else column
        dropped += int(column.size - kept.size)
        xs, ys = cdf(kept)
        series.append(svg.Series(name, xs, ys))
    marks = []
    if len(runs) == 1:
        marks = [(c.target, f"SLO {c.key.split('_')[1]} {svg.fmt_seconds(c.target)}")
                 for c in runs[0][1].slo if c.key.startswith(metric + "_")]
    n = sum(len(res.per_request) for _, res in runs)
    caption = (f"Empirical CDF over {n:,} requests ({what}), from the per-request table; "
               f"{'log' if log else 'linear'} time axis." if n else "No request completed: there is nothing to plot.")
    if dropped:
        caption += f" {dropped:,} request(s) with a {label} of 0 are left off the log axis."
    if marks:
        caption += " Dashed: the spec's SLO targets."
    title = f"{label}: share of requests within x"
    ident = ids()
    chart = svg.line_chart(ident, title, series, x_label=label, y_label="share of requests", x_format=svg.fmt_seconds,
                           y_format=svg.fmt_share, x_log=log, step=True, y_max=1.0, marks=marks,
                           desc=f"Cumulative distribution of {label} per request, one line per {what}.")
    return Figure(ident, title, chart, caption)


# --- where the KV came from ---------------------------------------------------------------------

def _sources(res: SimResult) -> list[tuple[str, float]]:
    shares = [(t.name, t.served_share) for t in res.tiers]
    return shares + [("recomputed", res.recomputed_tokens / res.prompt_tokens if res.prompt_tokens else 0.0)]


def kv_sources(ids: Ids, runs: Sequence[tuple[str, SimResult]], *, what: str) -> Figure:
    """Share of prompt tokens each tier served, and the recomputed share: one stacked bar per run."""
    names: list[str] = []
    for _, res in runs:
        names += [n for n, _ in _sources(res) if n not in names]
    names.sort(key=lambda n: list(TIER_COLOURS).index(n) if n in TIER_COLOURS else len(TIER_COLOURS))
    shares = [dict(_sources(res)) for _, res in runs]
    bars = [svg.Bars(n, [s.get(n, 0.0) for s in shares], TIER_COLOURS.get(n)) for n in names]
    title = "Where prompt KV came from"
    ident = ids()
    chart = svg.bar_chart(ident, title, [name for name, _ in runs], bars, value_label="share of prompt tokens",
                          value_format=svg.fmt_share, stacked=True, value_max=1.0,
                          desc="Share of all prompt tokens whose KV each tier supplied, and the share recomputed.")
    return Figure(ident, title, chart,
                  f"One bar per {what}: the shares of hbm (vLLM's prefix cache), the LMCache tiers and recomputation "
                  f"add up to 100 %.")


LMCACHE_TIERS = ("ddr", "nvme", "ceph")


def lmcache_shares(ids: Ids, runs: Sequence[tuple[str, SimResult]], *, what: str) -> Figure | None:
    """The LMCache tiers' shares of the prompt tokens on their own scale: next to hbm and recomputation they are
    often slivers, and they are the tiers being sized. None when no LMCache tier served anything."""
    names = [n for n in LMCACHE_TIERS if any(t.name == n for _, res in runs for t in res.tiers)]
    shares = [dict(_sources(res)) for _, res in runs]
    if not any(s.get(n, 0.0) > 0 for s in shares for n in names):
        return None
    bars = [svg.Bars(name, [s.get(n, 0.0) for n in names], svg.colour(i)) for i, (name, s) in
            enumerate(zip([name for name, _ in runs], shares))]
    if len(runs) == 1:
        bars = [svg.Bars("share", bars[0].values, TIER_COLOURS["ddr"])]
    title = "Prompt tokens served by each LMCache tier"
    ident = ids()
    chart = svg.bar_chart(ident, title, names, bars, value_label="share of prompt tokens", value_format=svg.fmt_share,
                          desc="Share of all prompt tokens whose KV each LMCache tier supplied, on its own scale.")
    return Figure(ident, title, chart, f"The LMCache rows of the bar on the left, on a scale of their own"
                                       f"{'' if len(runs) == 1 else f', one bar per {what}'}.")


def hit_ratios(ids: Ids, res: SimResult) -> Figure:
    """Token and chunk hit ratio per tier."""
    tiers = [t for t in res.tiers]
    bars = [svg.Bars("token hit (served / reached the tier)", [t.token_hit_ratio for t in tiers], svg.colour(0)),
            svg.Bars("chunk hit (LMCache's view)", [t.chunk_hit_ratio if t.lookup_chunks else 0.0 for t in tiers],
                     svg.colour(1))]
    title = "Hit ratio per tier"
    ident = ids()
    chart = svg.bar_chart(ident, title, [t.name for t in tiers], bars, value_label="hit ratio",
                          value_format=svg.fmt_share, value_max=1.0,
                          desc="Token hit ratio and LMCache chunk hit ratio of every tier.")
    recomputed = res.recomputed_tokens / res.prompt_tokens if res.prompt_tokens else 0.0
    return Figure(ident, title, chart,
                  f"Token hit: prompt tokens the tier served over those that reached it (not served above it). "
                  f"Chunk hit: chunks LMCache held over chunks it was asked about (hbm has none). "
                  f"Recomputed: {svg.fmt_share(recomputed)} of all prompt tokens.")


# --- links and tiers ----------------------------------------------------------------------------

def link_bytes(ids: Ids, res: SimResult) -> Figure | None:
    links = [link for link in res.links if not link.name.startswith(DEVICE_LINKS)]
    if not links:
        return None
    title = "Bytes moved per link"
    ident = ids()
    chart = svg.bar_chart(ident, title, [link.name for link in links],
                          [svg.Bars("bytes", [link.work for link in links], svg.colour(2))],
                          value_label="bytes moved", value_format=svg.fmt_bytes,
                          desc="Bytes each bandwidth link carried during the run.")
    return Figure(ident, title, chart,
                  "Bandwidth links only: NVMe drives and OSDs are modelled in device time (see the busy shares).")


def tier_bytes(ids: Ids, res: SimResult) -> Figure:
    tiers = list(res.tiers)
    title = "Bytes read from and written to each tier"
    ident = ids()
    chart = svg.bar_chart(ident, title, [t.name for t in tiers],
                          [svg.Bars("read", [float(t.bytes_read) for t in tiers], svg.colour(0)),
                           svg.Bars("written (incl. promotions)", [float(t.bytes_written) for t in tiers], svg.colour(1))],
                          value_label="bytes", value_format=svg.fmt_bytes,
                          desc="Bytes moved out of (read) and into (written) every tier.")
    return Figure(ident, title, chart, "Reads serve prompt KV; writes include stores and promotions.")


# --- over time ----------------------------------------------------------------------------------

def block_utilisation(ids: Ids, res: SimResult) -> Figure:
    xs = [t for t, _ in res.block_utilisation]
    ys = [u for _, u in res.block_utilisation]
    title = "HBM KV block utilisation over time"
    ident = ids()
    chart = svg.line_chart(ident, title, [svg.Series("HBM blocks in use", xs, ys)], x_label="simulated time",
                           y_label="share of HBM blocks", x_format=svg.fmt_seconds, y_format=svg.fmt_share,
                           desc="Share of vLLM's KV blocks held by running requests, averaged over instances.")
    return Figure(ident, title, chart,
                  f"{len(xs)} samples; blocks held by running requests (cached but free blocks do not count); "
                  f"mean {svg.fmt_share(res.mean_block_utilisation)}.")


def tier_fill(ids: Ids, res: SimResult) -> Figure:
    series = []
    for t in res.tiers:
        if t.capacity_bytes and t.occupancy:
            series.append(svg.Series(t.name, [x for x, _ in t.occupancy], [b / t.capacity_bytes for _, b in t.occupancy]))
    title = "Tier fill over time"
    colours = [TIER_COLOURS.get(s.label, svg.colour(i)) for i, s in enumerate(series)]
    ident = ids()
    chart = svg.line_chart(ident, title, series, x_label="simulated time", y_label="share of capacity",
                           x_format=svg.fmt_seconds, y_format=svg.fmt_share, colours=colours,
                           desc="Bytes each tier held, over its capacity (all caches of the tier together).")
    return Figure(ident, title, chart, "Bytes held in all caches of each tier over the tier's capacity.")


# --- comparisons across runs --------------------------------------------------------------------

def latency_bars(ids: Ids, runs: Sequence[tuple[str, SimResult]], metric: str, *, what: str) -> Figure:
    label = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}[metric]
    bars = [svg.Bars(p, [getattr(getattr(res, metric), p) for _, res in runs], svg.colour(i))
            for i, p in enumerate(("p50", "p90", "p99"))]
    title = f"{label} percentiles"
    ident = ids()
    chart = svg.bar_chart(ident, title, [name for name, _ in runs], bars, value_label=label,
                          value_format=svg.fmt_seconds, desc=f"{label} p50, p90 and p99 per {what}.")
    return Figure(ident, title, chart, f"p50, p90 and p99 of {label} per {what}.")


# --- cost ---------------------------------------------------------------------------------------

COST_LABELS = {"hbm": "accelerators (hbm)", "ddr": "ddr", "nvme": "nvme", "ceph": "ceph", "network": "network ports"}


def cost_breakdown(ids: Ids, cost) -> Figure:
    """The hourly bill of a kvplan.cost.CostBreakdown, one bar per line of it."""
    lines = list(cost.tiers)
    names = [COST_LABELS.get(t.tier, t.tier) for t in lines]
    bars = [svg.Bars(name, [t.usd_per_hour if j == i else 0.0 for j in range(len(lines))],
                     TIER_COLOURS.get(t.tier, "#777777"))
            for i, (name, t) in enumerate(zip(names, lines))]
    title = "Cost per hour by tier"
    ident = ids()
    chart = svg.bar_chart(ident, title, names, bars, value_label="USD per hour", value_format=svg.fmt_dollars,
                          stacked=True, desc="Hourly cost of each line of the bill: rented accelerators and "
                                             "amortised hardware for each KV tier and the storage network.")
    caption = f"Total {svg.fmt_dollars(cost.usd_per_hour)}/h (rent {svg.fmt_dollars(cost.opex_usd_per_hour)}, " \
              f"bought hardware over 36 months {svg.fmt_dollars(cost.capex_usd_per_hour)})"
    if cost.usd_per_1m_prompt_tokens is not None:
        caption += f"; {svg.fmt_dollars(cost.usd_per_1m_prompt_tokens)} per 1M prompt tokens at the simulated rate"
    return Figure(ident, title, chart, caption + ".")


def kv_tier_cost(ids: Ids, cost) -> Figure | None:
    """The KV tiers' lines of the bill on their own scale (next to the accelerators they are slivers); None when
    the bill has no KV tier with a cost."""
    lines = [t for t in cost.tiers if t.tier in LMCACHE_TIERS and t.usd_per_hour > 0]
    if not lines:
        return None
    title = "Cost per hour of the KV tiers"
    ident = ids()
    usd = [t.usd_per_hour for t in lines]
    chart = svg.bar_chart(ident, title, [t.tier for t in lines], [svg.Bars("USD per hour", usd, svg.colour(2))],
                          value_label="USD per hour", value_format=svg.dollars_telling_apart([0.0, *usd]),
                          desc="Hourly cost of each KV tier, on its own scale.")
    share = sum(usd) / cost.usd_per_hour if cost.usd_per_hour else 0.0
    return Figure(ident, title, chart, f"The ddr, nvme and ceph lines of the bill on a scale of their own: "
                                       f"{svg.fmt_share(share)} of the total.")


# --- sweeps -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    format: Callable[[float], str]
    lower_is_better: bool


SWEEP_METRICS = [Metric("ttft_p99", "TTFT p99", svg.fmt_seconds, True),
                 Metric("ttft_p50", "TTFT p50", svg.fmt_seconds, True),
                 Metric("tpot_p99", "TPOT p99", svg.fmt_seconds, True),
                 Metric("requests_per_s", "throughput (req/s)", svg.fmt_plain, False),
                 Metric("goodput_per_s", "goodput (req/s)", svg.fmt_plain, False),
                 Metric("recomputed", "recomputed share", svg.fmt_share, True),
                 Metric("lmcache_hit", "LMCache hit ratio", svg.fmt_share, False)]
"""What the sweep part plots, in order (keys of kvplan.sweep.result.METRICS)."""


def _stat(point, key: str) -> tuple[float, float] | None:
    stat = point.metrics.get(key)
    return None if stat is None else (stat.mean, stat.ci95)


def sweep_heat_map(ids: Ids, sweep, metric: Metric, cost: Callable | None = None) -> Figure | None:
    """A metric over a two-path grid sweep: the first varied path across, the second up."""
    px, py = sweep.varied
    xs = list(dict.fromkeys(p.values[px] for p in sweep.points))
    ys = list(dict.fromkeys(p.values[py] for p in sweep.points))
    grid: list[list[float | None]] = [[None] * len(xs) for _ in ys]
    for point in sweep.points:
        value = cost(point) if cost else _stat(point, metric.key)
        value = value[0] if isinstance(value, tuple) else value
        grid[ys.index(point.values[py])][xs.index(point.values[px])] = value
    if all(v is None for row in grid for v in row):
        return None
    title = f"{metric.label} over {px} and {py}"
    ident = ids()
    values = [v for row in grid for v in row if v is not None]
    cells = svg.dollars_telling_apart(values) if metric.format is svg.fmt_dollars else metric.format
    lo, hi = svg.colour_range(values, metric.format)
    chart = svg.heat_map(ident, title, xs, ys, grid, x_label=px, y_label=py, value_format=metric.format,
                         cell_format=cells, lower_is_better=metric.lower_is_better, key_label=metric.label,
                         desc=f"{metric.label} (mean over seeds) for every combination of {px} and {py}.")
    return Figure(ident, title, chart,
                  f"Mean over seeds; darker cells are better ({'lower' if metric.lower_is_better else 'higher'} "
                  f"is better here) on a fixed scale from {metric.format(lo)} to {metric.format(hi)}, so cells that "
                  f"differ little look alike; grey: no value.")


def point_label(sweep, point) -> str:
    return ", ".join(f"{path.rsplit('.', 1)[-1]}={point.values[path]}" for path in sweep.varied)


def sweep_line(ids: Ids, sweep, metric: Metric) -> Figure | None:
    """A metric against the sweep's points in order, ± its 95 % CI over seeds."""
    stats = [_stat(p, metric.key) for p in sweep.points]
    if all(s is None for s in stats):
        return None
    names = [point_label(sweep, p) if len(sweep.varied) > 1 else p.values[sweep.varied[0]] for p in sweep.points]
    kept = [(i, s) for i, s in enumerate(stats) if s is not None]
    seeds = max(len(p.seeds) for p in sweep.points)
    series = svg.Series(metric.label, [float(i) for i, _ in kept], [s[0] for _, s in kept],
                        error=[s[1] for _, s in kept] if seeds > 1 else None, markers=True)
    title = f"{metric.label} per point"
    x_label = sweep.varied[0] if len(sweep.varied) == 1 else " / ".join(sweep.varied)
    ident = ids()
    chart = svg.line_chart(ident, title, [series], x_label=x_label, y_label=metric.label, x_format=svg.fmt_plain,
                           y_format=metric.format, x_categories=names,
                           desc=f"{metric.label} (mean over seeds) at every point of the sweep.")
    return Figure(ident, title, chart,
                  f"Mean over {seeds} seed(s)" + ("; bars: 95 % confidence interval." if seeds > 1 else "."))


def point_cost(sweep) -> Callable | None:
    """How to read a point's USD per hour from this sweep, or None when its points carry no cost."""
    def usd_per_hour(point) -> float | None:
        cost = getattr(point, "cost", None)
        if cost is not None:
            return cost.usd_per_hour
        stat = point.metrics.get("usd_per_hour")
        return None if stat is None else stat.mean

    return usd_per_hour if any(usd_per_hour(p) is not None for p in sweep.points) else None


def pareto(ids: Ids, sweep, cost_per_hour: Callable) -> Figure | None:
    """Cost against p99 TTFT for every point, and the points no other beats on both."""
    points = []
    for p in sweep.points:
        c, t = cost_per_hour(p), _stat(p, "ttft_p99")
        if c is not None and t is not None and math.isfinite(c):
            points.append(scatter.Point(c, t[0], point_label(sweep, p)))
    if not points:
        return None
    title = "Cost against p99 TTFT: the Pareto frontier"
    ident = ids()
    targets = {p.slo.get("ttft_p99") for p in sweep.points}
    slo = targets.pop() if len(targets) == 1 else None
    marks = [(slo, f"SLO: TTFT p99 {svg.fmt_seconds(slo)}")] if slo is not None else []
    chart, unlabelled = scatter.scatter_frontier(
        ident, title, points, x_label="cost ($/h)", y_label="TTFT p99",
        x_format=svg.dollars_telling_apart([p.x for p in points]), y_format=svg.fmt_seconds, y_marks=marks,
        desc="Every sweep point's cost per hour against its p99 TTFT; the frontier joins the points no other point "
             "beats on both.")
    frontier = scatter.pareto_frontier(points)
    caption = (f"{len(points)} points; {len(frontier)} on the frontier (lower-left is better): "
               + "; ".join(p.label for p in frontier) + ".")
    if marks:
        caption += " Dashed: the spec's SLO target; points above it miss it."
    elif len(targets) > 1:
        caption += " The points have different TTFT p99 targets, so no SLO line is drawn."
    if unlabelled:
        caption += f" {unlabelled} point label(s) did not fit; hover a point for its label."
    return Figure(ident, title, chart, caption)


__all__ = ["Figure", "Ids", "cdf", "latency_cdf", "kv_sources", "hit_ratios", "link_bytes",
           "tier_bytes", "block_utilisation", "tier_fill", "latency_bars", "SWEEP_METRICS", "sweep_heat_map",
           "sweep_line", "pareto", "point_cost", "cost_breakdown", "kv_tier_cost", "lmcache_shares"]
