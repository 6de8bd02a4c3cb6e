"""A report document: the parts of `kvplan report`, renderer-neutral (HTML in html.py, Markdown here).

A document is a title and a list of parts; each part has tables (`Section`s, the same ones
`kvplan simulate` prints) and figures (`figures.py`). What goes in depends on the input:

- one simulation: the summary with the bottleneck verdict (kvplan.sim.bottleneck), latency CDFs,
  where the KV came from, links (the bottleneck marked), the queue, TTFT and utilisation over
  time, and the cost when the file carries one;
- several seeds: the mean ± CI table, the seeds' CDFs overlaid, then the first seed in detail;
- an ablation: the comparison table over every seed (mean ± CI, paired tests), each setup's TTFT
  p99 per seed, the plots of the first seed, then the spec as written in detail (both parts,
  seeds first, for `--seeds N --ablate`);
- a plan (`kvplan plan --json`): the answer, the ledger and cost against the SLO (`plan_page.py`);
- a capacity search (`kvplan capacity --out`): the answer, the probes and latency against load
  with the limit marked (`capacity_page.py`);
- a diagnosis (`kvplan doctor --json`): the findings, their fixes and each proven fix's metric
  before and after (`doctor_page.py`);
- a comparison with a live run (`kvplan compare --json`): predicted against observed (`compare_page.py`);
- a live snapshot (`kvplan observe --json`): components, counters, prompt sources (`observe_page.py`);
- a sweep: the points' table, heat maps (two varied paths) or per-point lines, and the cost vs
  p99 TTFT Pareto frontier when the points carry a cost;
- a tier sizing (`kvplan size --out`): each tier's table, its hit ratio against capacity and all
  tiers' hit ratio against cost (`sizing.py`).
"""

from __future__ import annotations

from typing import Any

from ..sim.result import SimResult
from . import figures as fig
from .figures import Figure, Ids
from .inputs import ReportInput
from .markdown import markdown
from .page import Document, Part
from ..units import fmt_duration
from .sections import Section, ablation_section, result_sections, seeds_section
from .sizing import document as size_document
from .sweep import sweep_section


def build(data: ReportInput) -> Document:
    """The document for a loaded result file; its subtitle names the --set overrides the result was computed with."""
    doc = _build(data)
    given = data.overrides or list(getattr(data.sweep or data.size or data.capacity, "overrides", None) or [])
    if data.plan is not None:
        given = given or list((data.plan.model_extra or {}).get("overrides") or [])
    if given:
        doc.subtitle += "; with " + " ".join(f"--set {o}" for o in given)
    return doc


def _build(data: ReportInput) -> Document:
    ids = Ids()
    if data.kind == "sweep":
        return _sweep_document(data, ids)
    if data.kind == "size":
        return size_document(data, ids)
    if data.kind == "plan":
        from .plan_page import document as plan_document

        return plan_document(data.plan, data.path.name)
    if data.kind == "snapshot":
        from .observe_page import document as snapshot_document

        return snapshot_document(data.snapshot, data.path.name)
    if data.kind == "compare":
        from .compare_page import document as compare_document

        return compare_document(data.compare, data.path.name)
    if data.kind == "doctor":
        from .doctor_page import document as doctor_document

        return doctor_document(data.doctor, data.path.name, data.healthy)
    if data.kind == "capacity":
        from .capacity_page import document as capacity_document

        return capacity_document(data.capacity, data.path.name)
    first = data.results[0]
    subtitle = f"spec {first.spec_hash[:12]}, {data.path.name}"
    parts: list[Part] = []
    what = []
    if len(data.results) > 1:
        what.append(f"{len(data.results)} seeds ({data.results[0].seed}..{data.results[-1].seed})")
        parts.append(_seeds_part(data.results, ids))
    if data.ablation:
        seeds = [r.seed for r in data.ablation[0][1]]
        what.append(f"ablation (seed {seeds[0]})" if len(seeds) == 1 else f"ablation ({len(seeds)} seeds)")
        parts.append(_ablation_part(data.ablation, ids))
    title = f"{first.name}: " + (", ".join(what) if what else f"simulation, seed {first.seed}")
    parts += _result_parts(first, ids, detail=data.kind != "result")
    if data.cost is not None:
        parts.append(_cost_part(data.cost, ids))
    else:
        parts.append(Part("Cost", notes=["This result file carries no cost: it was written before kvplan priced runs, "
                                         "or a price was missing. Run `kvplan simulate SPEC --out FILE` again to "
                                         "include one."]))
    return Document(title, subtitle, parts)


def _result_parts(res: SimResult, ids: Ids, *, detail: bool) -> list[Part]:
    from ..sim.bottleneck import bottleneck
    from .pressure import busy_shares, queue_length, ttft_over_time

    one = [("this run", res)]
    verdict = bottleneck(res)
    heading = f"Seed {res.seed} in detail" if detail else "Summary"
    summary = Part(heading, tables=result_sections(res) + [_bottleneck_section(verdict)])
    latency = Part("Latency", "Time to first token (TTFT) and time per output token (TPOT) of every request.",
                   figures=[fig.latency_cdf(ids, "ttft", one, what="this run"),
                            fig.latency_cdf(ids, "tpot", one, what="this run")])
    kv = Part("Where the KV came from", figures=_drawn(fig.kv_sources(ids, one, what="run"),
                                                       fig.lmcache_shares(ids, one, what="run"),
                                                       fig.hit_ratios(ids, res), fig.tier_bytes(ids, res)))
    links = Part("Links", verdict.verdict(), figures=_drawn(busy_shares(ids, res, verdict), fig.link_bytes(ids, res)))
    time = Part("Over time", figures=_drawn(queue_length(ids, res), ttft_over_time(ids, res),
                                            fig.block_utilisation(ids, res), fig.tier_fill(ids, res)))
    return [summary, latency, kv, links, time]


def _bottleneck_section(verdict) -> Section:
    rows = [["verdict", verdict.verdict().removeprefix("bottleneck: ")]]
    if verdict.saturated:
        rows.append(["next", verdict.fix])
    return Section("Bottleneck", None, rows)


def _drawn(*figures: Figure | None) -> list[Figure]:
    """The figures there is something to draw for, in order."""
    return [f for f in figures if f is not None]


def _seeds_part(results: list[SimResult], ids: Ids) -> Part:
    runs = [(f"seed {r.seed}", r) for r in results]
    return Part("Across seeds", "The same spec run with each seed: the spread is the run-to-run noise.",
                tables=[seeds_section(results)],
                figures=_drawn(fig.latency_cdf(ids, "ttft", runs, what="seed"),
                               fig.latency_cdf(ids, "tpot", runs, what="seed"), fig.kv_sources(ids, runs, what="seed"),
                               fig.lmcache_shares(ids, runs, what="seed")))


def _ablation_part(ablation: list[tuple[str, list[SimResult]]], ids: Ids) -> Part:
    seeds = [r.seed for r in ablation[0][1]]
    first = [(name, runs[0]) for name, runs in ablation]
    tables = [ablation_section([(name, list(runs)) for name, runs in ablation])]
    intro = ("The same workload with the cache hierarchy built up one tier at a time: each row adds one tier to the "
             "row above")
    if len(seeds) > 1:
        per_seed = Section("TTFT p99 of each setup under each seed", ["setup", *(f"seed {s}" for s in seeds)])
        for name, runs in ablation:
            per_seed.rows.append([name, *(fmt_duration(r.ttft.p99) for r in runs)])
        tables.append(per_seed)
        intro += (f". The table compares the means over {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}), paired by seed; "
                  f"the plots show seed {seeds[0]}.")
    else:
        intro += f", seed {seeds[0]}; --seeds 3 tests each change against the noise."
    return Part("Ablation", intro, tables=tables,
                figures=_drawn(fig.latency_cdf(ids, "ttft", first, what="setup"),
                               fig.latency_bars(ids, first, "ttft", what="setup"),
                               fig.latency_cdf(ids, "tpot", first, what="setup"),
                               fig.kv_sources(ids, first, what="setup"),
                               fig.lmcache_shares(ids, first, what="setup")))


def _cost_part(cost: Any, ids: Ids) -> Part:
    from .sections import cost_section

    return Part("Cost", "What the topology costs per hour (rented accelerators plus amortised hardware for the "
                        "KV tiers) and per million tokens at the simulated throughput.",
                tables=[cost_section(cost)], figures=_drawn(fig.cost_breakdown(ids, cost), fig.kv_tier_cost(ids, cost)))


def _sweep_document(data: ReportInput, ids: Ids) -> Document:
    sweep = data.sweep
    seeds = max((len(p.seeds) for p in sweep.points), default=0)
    title = f"{sweep.name}: sweep of {len(sweep.points)} point(s) x {seeds} seed(s)"
    subtitle = f"spec {sweep.spec_hash[:12]}, {data.path.name}; varied: {', '.join(sweep.varied)}"
    table = Part("Points", "Every point of the sweep" + (", mean ± 95 % CI over seeds." if seeds > 1 else "."),
                 tables=[sweep_section(sweep)])
    grid = len(sweep.varied) == 2 and not sweep.zip and _is_grid(sweep)
    plots = Part("Heat maps" if grid else "Metrics per point",
                 "One cell per combination of the two varied paths." if grid else
                 "Each metric at every point, in sweep order.")
    for metric in fig.SWEEP_METRICS:
        figure = fig.sweep_heat_map(ids, sweep, metric) if grid else fig.sweep_line(ids, sweep, metric)
        if figure is not None:
            plots.figures.append(figure)
    parts = [table, plots]
    cost = fig.point_cost(sweep)
    frontier = Part("Cost against p99 TTFT", "Each point's cost per hour against its p99 TTFT; the frontier is "
                                             "the set of points no other point beats on both.")
    figure = fig.pareto(ids, sweep, cost) if cost else None
    if figure is not None:
        if grid:
            heat = fig.sweep_heat_map(ids, sweep, fig.Metric("usd_per_hour", "cost ($/h)", fig.svg.fmt_dollars, True),
                                      cost=cost)
            frontier.figures += [heat] if heat else []
        frontier.figures.insert(0, figure)
    else:
        frontier.notes.append("The sweep's points carry no cost, so there is no cost frontier: this sweep file was "
                              "written by a kvplan that does not price sweep points.")
    parts.append(frontier)
    return Document(title, subtitle, parts)


def _is_grid(sweep) -> bool:
    a, b = sweep.varied
    cells = {(p.values[a], p.values[b]) for p in sweep.points}
    return len(cells) == len(sweep.points)


def to_markdown(doc: Document) -> str:
    """The document as Markdown: every table; each plot named, pointing to the HTML report."""
    lines = [f"# {doc.title}", "", f"_{doc.subtitle}_", ""]
    for part in doc.parts:
        lines += [f"## {part.title}", ""]
        if part.intro:
            lines += [part.intro, ""]
        if part.tables:
            lines.append(markdown(part.tables))
        for note in part.notes:
            lines += [f"> {note}", ""]
        if part.figures:
            lines.append("Plots (in the HTML report, `kvplan report FILE -o report.html`):")
            lines.append("")
            lines += [f"- {f.title}: {f.caption}" for f in part.figures]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


__all__ = ["Document", "Part", "build", "to_markdown"]
