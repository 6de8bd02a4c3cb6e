"""A tier-sizing result (`kvplan size`) as tables, terminal output and report plots.

The same sections serve the terminal (`terminal_tables`, rich tables whose cells are plain
text: a spec's name or a path is never read as rich markup), Markdown and the HTML report
(`document`), where each tier's curve is plotted against its capacity and all tiers against
their cost.
"""

from __future__ import annotations

import math

from rich.table import Table

from ..cost import HOURS_PER_MONTH
from ..sizing.view import SizeResult, TierSize
from ..units import fmt_bytes, fmt_count, fmt_duration, fmt_si, pct
from . import svg, terminal
from .figures import TIER_COLOURS, Figure, Ids
from .page import Document, Part
from .sections import Section

METHODS = {"stack": "exact (LRU stack distances)", "simulated": "simulated (its policy replayed)"}
UNIT_PRICES = {"hbm": "GPU-hour", "ddr": "GB-month", "nvme": "GB-month", "ceph": "raw GB-month"}


def usd(x: float | None) -> str:
    """USD amounts from a thousandth of a cent to thousands: '1,706', '0.362', '0.000052'."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    if abs(x) >= 1e-6:
        return f"{x:.2g}" if abs(x) >= 0.01 else f"{x:.6f}".rstrip("0")
    return "<0.000001"


def _tick_usd(x: float) -> str:
    """A log axis's dollar ticks, down to the smallest power of ten ($0.0000001): a tick is a value, not a bound."""
    if 0 < x < 1e-6:
        return f"${x:.{-math.floor(math.log10(x) + 1e-9)}f}"
    return "$" + usd(x)


def _policy(t: TierSize) -> str:
    ttl = f" + ttl {fmt_duration(t.ttl_s)}" if t.ttl_s is not None else ""
    return ("vLLM LRU" if t.tier == "hbm" else t.policy) + ttl


def _price(t: TierSize) -> str:
    if t.usd_per_unit_hour is None:
        return "no price"
    per = t.usd_per_unit_hour * (1 if t.tier == "hbm" else HOURS_PER_MONTH)
    return f"${per:.4g}/{UNIT_PRICES[t.tier]} ({t.price})"


def summary_section(res: SizeResult) -> Section:
    rows = [["workload", f"{fmt_count(res.requests)} requests (+{res.warmup_requests} warm-up, "
                         f"{res.rejected_requests} rejected as too long) over {fmt_duration(res.last_arrival_s)}, "
                         f"{fmt_count(res.prompt_tokens)} prompt tokens"]]
    for t in res.tiers:
        rows.append([t.tier, f"{_policy(t)}, {METHODS[t.method]}; {fmt_count(t.lookups)} lookups of "
                             f"{t.unit_tokens}-token {t.unit}s ({fmt_bytes(t.unit_bytes)} each); {_price(t)}"])
    return Section(f"Tier sizing of {res.name} (seed {res.seed}): each tier as the only cache", None, rows)


def tier_section(t: TierSize) -> Section:
    section = Section(f"{t.tier}: hit ratio by capacity (max reuse {pct(t.max_hit_ratio)} of prompt tokens)",
                      ["", "capacity", "tokens", "hit ratio", "of max", "$/hour"])

    def row(label: str, p, hit: float | None = None) -> list[str]:
        hit = p.hit_ratio if hit is None else hit
        return [label, fmt_bytes(p.capacity_bytes), fmt_si(p.capacity_tokens), pct(hit),
                pct(hit / t.max_hit_ratio) if t.max_hit_ratio else "-", usd(p.usd_per_hour)]

    for target in t.targets:
        section.rows.append(row(f"{target.share} % of max reuse", target))
    section.rows.append(["working set", fmt_bytes(t.working_set_bytes), fmt_si(t.working_set_tokens),
                         pct(t.max_hit_ratio), "100.0%" if t.max_hit_ratio else "-",
                         usd(next((p.usd_per_hour for p in t.curve if p.capacity_units == t.working_set_units),
                                  None))])
    c = t.configured
    if c is not None:
        label = "configured" + (f" ({c.caches} caches pooled)" if c.caches > 1 else "")
        section.rows.append(row(label, c))
        if t.method == "stack" and c.simulated_hit_ratio is not None:
            section.rows.append(["  replayed as configured", "", "", pct(c.simulated_hit_ratio),
                                 pct(c.simulated_hit_ratio / t.max_hit_ratio) if t.max_hit_ratio else "-", ""])
    return section


def sections(res: SizeResult) -> list[Section]:
    out = [summary_section(res)] + [tier_section(t) for t in res.tiers]
    if res.notes:
        out.append(Section("Notes", None, [[n] for n in res.notes]))
    return out


def terminal_tables(res: SizeResult, width: int | None = None) -> list[Table]:
    """The sections as rich tables within `width` columns (kvplan.report.terminal); every cell and title is plain
    Text (no markup is interpreted)."""
    return terminal.tables(sections(res), width)


# --- plots --------------------------------------------------------------------------------------

def curve_figure(ids: Ids, t: TierSize) -> Figure:
    """One tier: hit ratio against capacity (log bytes), the 50/90/99 % points and the configured size."""
    points = [p for p in t.curve if p.capacity_bytes > 0]
    xs = [float(p.capacity_bytes) for p in points]
    colour = TIER_COLOURS.get(t.tier, svg.colour(0))
    label = f"{_policy(t)}, " + ("stack distances" if t.method == "stack" else "simulated points")
    series = [svg.Series(label, xs, [p.hit_ratio for p in points], markers=t.method == "simulated")]
    colours = [colour]
    for p, shade in zip(t.targets, ("#999999", "#555555", "#000000")):     # one point each: no line joins them
        if p.capacity_bytes > 0:
            series.append(svg.Series(f"{p.share} % of max: {fmt_bytes(p.capacity_bytes)}", [float(p.capacity_bytes)],
                                     [p.hit_ratio], markers=True))
            colours.append(shade)
    marks = []
    c = t.configured
    span = xs + ([float(c.capacity_bytes)] if c is not None and c.capacity_bytes > 0 else [])
    if span:
        series.append(svg.Series(f"max reuse {pct(t.max_hit_ratio)}", [min(span), max(span)],
                                 [t.max_hit_ratio] * 2, dashed=True))
        colours.append("#777777")
    if c is not None and c.capacity_bytes > 0:
        marks.append((float(c.capacity_bytes), f"configured {fmt_bytes(c.capacity_bytes)}: {pct(c.hit_ratio)}"))
        if c.simulated_hit_ratio is not None:
            series.append(svg.Series(f"replayed as configured: {pct(c.simulated_hit_ratio)}",
                                     [float(c.capacity_bytes)], [c.simulated_hit_ratio], markers=True))
            colours.append("#D55E00")
    title = f"{t.tier}: hit ratio against capacity"
    ident = ids()
    chart = svg.line_chart(ident, title, series, x_label=f"capacity ({t.unit}s of {t.unit_tokens} tokens, as bytes)",
                           y_label="share of prompt tokens hit", x_format=svg.fmt_bytes, y_format=svg.fmt_share,
                           x_log=True, colours=colours, marks=marks,
                           desc=f"Hit ratio of the {t.tier} tier as the only cache, against its capacity.")
    how = ("Exact at every capacity (LRU stack distances); drawn through "
           f"{len(points)} of them." if t.method == "stack" else
           f"{len(points)} replays of {t.policy} at the capacities marked.")
    targets = "; ".join(f"{p.share} % at {fmt_bytes(p.capacity_bytes)}" for p in t.targets)
    caption = f"{how} Working set {fmt_bytes(t.working_set_bytes)}; {targets}."
    if c is not None:
        caption += f" Dashed: the configured {fmt_bytes(c.capacity_bytes)}" + \
                   (f" ({c.caches} caches pooled)." if c.caches > 1 else ".")
    return Figure(ident, title, chart, caption)


def cost_figure(ids: Ids, res: SizeResult) -> Figure | None:
    """Every priced tier: hit ratio against what that much of it costs per hour."""
    series, colours = [], []
    for t in res.tiers:
        pts = [(p.usd_per_hour, p.hit_ratio) for p in t.curve if p.usd_per_hour]
        if not pts:
            continue
        series.append(svg.Series(t.tier, [x for x, _ in pts], [y for _, y in pts], markers=t.method == "simulated"))
        colours.append(TIER_COLOURS.get(t.tier, svg.colour(len(colours))))
    if not series:
        return None
    title = "Hit ratio against cost"
    ident = ids()
    chart = svg.line_chart(ident, title, series, x_label="USD per hour", y_label="share of prompt tokens hit",
                           x_format=_tick_usd, y_format=svg.fmt_share, x_log=True, colours=colours,
                           desc="Each tier's hit ratio against the hourly cost of the capacity that gets it.")
    return Figure(ident, title, chart,
                  "The cost of each capacity from kvplan's prices (amortised hardware per GB for ddr and nvme, raw GB "
                  "at the pool's size for ceph, whole instances of GPUs for hbm); each tier as the only cache.")


def document(data, ids: Ids):
    """The report for a size result file."""
    res: SizeResult = data.size
    summary = Part("Tier sizing", "Each tier's hit ratio as a function of its capacity for this workload, with the "
                                  "tier as the only cache: the working set, the capacities that reach 50, 90 and "
                                  "99 % of the reuse it could ever get, and what each costs.",
                   tables=sections(res)[:-1] if res.notes else sections(res), notes=list(res.notes))
    curves = Part("Hit ratio against capacity", figures=[curve_figure(ids, t) for t in res.tiers])
    parts = [summary, curves]
    cost = cost_figure(ids, res)
    if cost is not None:
        parts.append(Part("Hit ratio against cost", figures=[cost]))
    else:
        parts.append(Part("Hit ratio against cost", notes=["No tier has a price, so there is no cost plot."]))
    return Document(f"{res.name}: tier sizing, seed {res.seed}", f"spec {res.spec_hash[:12]}, {data.path.name}", parts)


__all__ = ["sections", "terminal_tables", "curve_figure", "cost_figure", "document", "usd"]
