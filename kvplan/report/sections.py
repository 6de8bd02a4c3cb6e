"""A simulation result as renderer-neutral sections: a title, optional column headers, rows.

`kvplan simulate` prints them with rich (`terminal.py`) or as Markdown (`markdown.py`); the
sections hold the wording and the formatting of numbers, so both outputs say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cost import HOURS_PER_MONTH, CostBreakdown
from ..sim.result import SimResult
from ..sweep.confidence import compare, confidence
from ..units import fmt_bytes, fmt_count, fmt_duration, fmt_si, pct


@dataclass
class Section:
    title: str
    headers: list[str] | None                      # None: a key/value list
    rows: list[list[str]] = field(default_factory=list)
    narrow: list[tuple[str, list[str] | None]] = field(default_factory=list)
    """How the terminal makes the table fit its width (`terminal.fitted`), step by step until it does: (header,
    None) leaves that column out, (header, cells) prints it shorter, a cell per row. Never an answer's column."""


def _warm_start(res: SimResult) -> str:
    """How a warm start left each tier (kvplan.sim.warm): none of it is in the figures below."""
    tiers = "; ".join(f"{w.tier} {pct(w.used_bytes / w.capacity_bytes if w.capacity_bytes else 0)} full after "
                      f"{fmt_count(w.requests)} warm-up requests wrote {fmt_bytes(w.bytes_written)}"
                      + ("" if w.warm else " (still cold)") for w in res.warm_start)
    return f"{tiers}; {fmt_duration(res.warm_start[0].span_s)} of traffic, not counted"


def result_sections(res: SimResult) -> list[Section]:
    head = Section(f"Simulation of {res.name} (seed {res.seed})", None, [
        ["requests", f"{fmt_count(res.requests)} (+{res.warmup_requests} warm-up, {res.rejected_requests} rejected as too long)"],
        *([["warm start", _warm_start(res)]] if res.warm_start else []),
        ["simulated time", fmt_duration(res.duration)],
        ["prompt tokens", f"{fmt_count(res.prompt_tokens)}, recomputed {fmt_count(res.recomputed_tokens)} "
                          f"({pct(res.recomputed_tokens / res.prompt_tokens if res.prompt_tokens else 0)})"]])
    if res.lmcache_hit_ratio is not None and res.offload_engine == "native":
        head.rows.append(["offload hit ratio", f"{pct(res.lmcache_hit_ratio)} (vLLM native CPU offloading, beyond "
                                               "its HBM prefix cache)"])
    elif res.lmcache_hit_ratio is not None:
        head.rows.append(["LMCache hit ratio", f"{pct(res.lmcache_hit_ratio)} ({res.lmcache_mode} mode)"])
    sessions = f" ({res.sessions_per_s:.2f} new sessions/s)" if res.sessions_per_s is not None else ""
    head.rows.append(["throughput", f"{res.requests_per_s:.2f} req/s{sessions}, {fmt_si(res.prompt_tokens_per_s)} prompt tok/s, "
                                    f"{fmt_si(res.generated_tokens_per_s)} generated tok/s; goodput {res.goodput_per_s:.2f} req/s"])
    head.rows.append(["HBM blocks in use", f"{pct(res.mean_block_utilisation)} on average; {fmt_count(res.preemptions)} preemptions"])
    busy = sum(res.engine_busy) / len(res.engine_busy) if res.engine_busy else 0.0
    full = sum(res.engine_occupancy) / len(res.engine_occupancy) if res.engine_occupancy else 0.0
    head.rows.append(["engines", f"{fmt_count(sum(res.engine_steps))} steps, busy {pct(busy)} of the time, batches "
                                 f"{pct(full)} full on average"])
    if res.ceph_op_latency is not None:
        head.rows.append(["Ceph op latency", f"mean {fmt_duration(res.ceph_op_latency.mean)}, "
                                             f"p99 {fmt_duration(res.ceph_op_latency.p99)}"])
    latency = Section("Latency", ["", "mean", "p50", "p90", "p99", "SLO"])
    for name in ("ttft", "tpot", "e2e", "queue"):
        dist = getattr(res, name)
        targets = [f"{c.key.split('_')[1]} {fmt_duration(c.target)} {'met' if c.met else 'MISSED'}"
                   for c in res.slo if c.key.startswith(name)]
        latency.rows.append([name.upper() if name != "queue" else "queue", fmt_duration(dist.mean), fmt_duration(dist.p50),
                             fmt_duration(dist.p90), fmt_duration(dist.p99), ", ".join(targets) or "-"])
    tiers = Section("Where prompt KV came from",
                    ["tier", "tokens", "share", "tok hit", "chunk hit", "read", "written", "evicted", "peak fill"])
    for t in res.tiers:
        tiers.rows.append([t.name, fmt_si(t.served_tokens), pct(t.served_share), pct(t.token_hit_ratio),
                           pct(t.chunk_hit_ratio) if t.lookup_chunks else "-", fmt_bytes(t.bytes_read),
                           fmt_bytes(t.bytes_written), fmt_si(t.evictions + t.expired),
                           pct(t.peak_used_bytes / t.capacity_bytes if t.capacity_bytes else 0)])
    tiers.rows.append(["recompute", fmt_si(res.recomputed_tokens),
                       pct(res.recomputed_tokens / res.prompt_tokens if res.prompt_tokens else 0), "", "", "", "", "", ""])
    links = Section("Busiest links", ["link", "transfers", "utilisation"],
                    [[link.name, fmt_count(link.transfers), pct(link.utilisation)]
                     for link in sorted(res.links, key=lambda l: (-l.utilisation, l.name))[:6]])
    sections = [head, latency, *([stages_section(res)] if res.stages else []), tiers, links]
    if res.alerts:
        sections.append(Section("Alerts (design-note thresholds)", None, [[a] for a in res.alerts]))
    return sections


def stages_section(res: SimResult) -> Section:
    """Per load stage (workload.stages): what it sent, at what throughput, and the latencies its requests saw. A
    stage's three rows are its TTFT, TPOT and E2E; its load, end and span read down the second column."""
    section = Section("Stages (each stage's requests, wherever they finished)",
                      ["stage", "load", "requests", "req/s", "", "mean", "p50", "p90", "p99"])
    for st in res.stages:
        load, _, ends = st.load.partition(", ")
        rejected = f" (+{fmt_count(st.rejected_requests)} rejected)" if st.rejected_requests else ""
        sent = fmt_count(st.requests) + rejected
        left = [[str(st.index), load, sent, f"{st.requests_per_s:.2f}"], ["", f"until {ends}", "", ""],
                ["", f"at {st.start:,.1f}-{st.end:,.1f} s", "", ""]]
        for lead, name in zip(left, ("ttft", "tpot", "e2e")):
            dist = getattr(st, name)
            section.rows.append([*lead, name.upper(), fmt_duration(dist.mean), fmt_duration(dist.p50),
                                 fmt_duration(dist.p90), fmt_duration(dist.p99)])
    return section


ABLATION_METRICS = [("req/s", lambda r: r.requests_per_s, lambda x: f"{x:.2f}"),
                    ("TTFT p50", lambda r: r.ttft.p50, fmt_duration), ("TTFT p99", lambda r: r.ttft.p99, fmt_duration),
                    ("TPOT p50", lambda r: r.tpot.p50, fmt_duration), ("E2E p50", lambda r: r.e2e.p50, fmt_duration),
                    ("recomputed", lambda r: r.recomputed_tokens / r.prompt_tokens if r.prompt_tokens else 0.0, pct),
                    ("HBM blocks", lambda r: r.mean_block_utilisation, pct)]
"""The ablation table's columns: name, how to read it from a run, how to print it."""


def ablation_section(results: list[tuple[str, SimResult | list[SimResult]]],
                     costs: list[float | None] | None = None) -> Section:
    """One row per variant: what each tier adds, what it costs ($/h, when `costs` gives each setup's bill) and
    whether it meets the spec's SLO (by the mean over the seeds). Each setup holds one run, or one per seed (the
    same seeds for every setup); then each row shows mean ± 95 % CI, and its last column which metrics differ
    from the row above beyond the noise (paired over the seeds) and which are within noise. With one seed that
    column says the change is not tested."""
    runs = [(name, r if isinstance(r, list) else [r]) for name, r in results]
    n = len(runs[0][1]) if runs else 1
    priced = costs is not None
    section = Section("Ablation: the same workload, one tier at a time",
                      ["setup", *(label for label, _, _ in ABLATION_METRICS), *(["$/h"] if priced else []), "SLO",
                       f"vs the row above ({n} seeds, paired)" if n > 1 else "vs the row above"])
    previous, short = None, []
    for k, (name, rs) in enumerate(runs):
        values = {label: [get(r) for r in rs] for label, get, _ in ABLATION_METRICS}
        row = [name]
        for label, _, fmt in ABLATION_METRICS:
            mean, half = confidence(values[label])
            row.append(fmt(mean) + (f" ± {fmt(half)}" if n > 1 else ""))
        if priced:
            row.append("-" if costs[k] is None else f"{costs[k]:,.2f}")
        row.append(_slo_verdict(rs))
        if previous is None:
            change = "-"
        elif n < 2:
            change = "not tested (1 seed; --seeds 3 tests it)"
        else:
            differs = [label for label, _, _ in ABLATION_METRICS
                       if compare(previous[label], values[label]).distinguishable]
            same = [label for label, _, _ in ABLATION_METRICS if label not in differs]
            change = "; ".join(part for part in (f"differs: {', '.join(differs)}" if differs else "",
                                                 f"within noise: {', '.join(same)}" if same else "") if part)
        short.append(change if previous is None else "not tested" if n < 2 else _fewer(differs, same))
        row.append(change)
        section.rows.append(row)
        previous = values
    section.narrow = [(section.headers[-1], short), *((label, None) for label in ABLATION_NARROW)]
    return section


ABLATION_NARROW = ("HBM blocks", "E2E p50", "TPOT p50", "req/s", "TTFT p50")
"""The ablation's columns a narrow terminal leaves out, in this order, after it has shortened the last column to
what differs; TTFT p99, recomputed, $/h and SLO always stay."""


def _fewer(differs: list[str], same: list[str]) -> str:
    """What changed from the row above, in as few words as say it: the metrics that differ, or those within noise
    when fewer do."""
    if not differs:
        return "within noise"
    if not same:
        return "differs: all"
    return f"differs: {', '.join(differs)}" if len(differs) <= len(same) else f"within noise: {', '.join(same)}"


def _slo_verdict(runs: list[SimResult]) -> str:
    """"met", or "MISSED" and the targets the mean over `runs` misses; "-" without an SLO."""
    checks = runs[0].slo
    if not checks:
        return "-"
    missed = [c.key for k, c in enumerate(checks)
              if sum(r.slo[k].value for r in runs) / len(runs) > c.target]
    return "met" if not missed else "MISSED " + ", ".join(missed)


SEED_METRICS = [("req/s", lambda r: r.requests_per_s, lambda x: f"{x:.2f}"),
                ("TTFT p50", lambda r: r.ttft.p50, fmt_duration), ("TTFT p99", lambda r: r.ttft.p99, fmt_duration),
                ("TPOT p50", lambda r: r.tpot.p50, fmt_duration), ("E2E p50", lambda r: r.e2e.p50, fmt_duration),
                ("LMCache hit", lambda r: r.lmcache_hit_ratio or 0.0, pct),
                ("recomputed", lambda r: r.recomputed_tokens / r.prompt_tokens if r.prompt_tokens else 0.0, pct)]


def seeds_section(results: list[SimResult]) -> Section:
    section = Section(f"Across {len(results)} seeds ({results[0].seed}..{results[-1].seed}): mean ± 95 % CI",
                      ["metric", "mean", "± 95 % CI", "min", "max"])
    for name, get, fmt in SEED_METRICS:
        values = [get(r) for r in results]
        mean, half = confidence(values)
        section.rows.append([name, fmt(mean), fmt(half), fmt(min(values)), fmt(max(values))])
    return section


def cost_section(cost: CostBreakdown) -> Section:
    """The hourly bill per tier and, from the run's throughput, per million tokens (kvplan.cost)."""
    section = Section("Cost (USD per hour; docs/planning.md)", ["tier", "what", "price", "$/hour"])
    for t in cost.tiers:
        price = (f"{t.usd_per_unit_hour:.4g}/GPU-h" if t.kind == "opex"
                 else f"{t.usd_per_unit_hour * HOURS_PER_MONTH:.4g}/{t.unit}-month")
        section.rows.append([t.tier, t.what, price, f"{t.usd_per_hour:,.4f}"])
    section.rows.append(["total", f"rent {cost.opex_usd_per_hour:,.2f} + bought {cost.capex_usd_per_hour:,.2f}", "",
                         f"{cost.usd_per_hour:,.4f}"])
    for label, value in (("per 1M prompt tok", cost.usd_per_1m_prompt_tokens),
                         ("per 1M generated tok", cost.usd_per_1m_generated_tokens)):
        if value is not None:
            section.rows.append([label, "at this run's rate", "", f"{value:,.4f}"])
    return section
