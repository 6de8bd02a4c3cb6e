"""A plan as tables: the candidates simulated (winner marked), then what was left out and why."""

from __future__ import annotations

import dataclasses

from rich.table import Table

from ..plan.headroom import FIGURES, LOW_LOAD_SHARE, comparison
from ..plan.search import Candidate, Plan, rate_words, runner_up_within_noise, with_ci
from ..units import fmt_duration
from .sections import Section
from .terminal import tables

def plan_sections(plan: Plan, show_all: bool = False) -> list[Section]:
    keys = list(plan.slo.targets())
    head = Section("Plan", None, [
        ["target", rate_words(plan) + ("" if plan.headroom else " with no headroom (--headroom 0)")
                   + f", offered {plan.offered_rate:.3g} req/s, "
                   + ", ".join(f"{k} <= {fmt_duration(v)}" for k, v in plan.slo.targets().items())
                   + (f", at most ${plan.budget:,.2f}/h" if plan.budget is not None else "")],
        ["considered", f"{len(plan.candidates)} candidates ({plan.invalid} other combinations did not validate)"
                       + _not_enumerated(plan)],
        ["simulated", f"{sum(1 for c in plan.candidates if c.measured)} candidates x {len(plan.seeds)} seed(s) = "
                      f"{plan.simulations} runs" + _stopped(plan)]])
    n = len(plan.seeds)
    head.rows.append(["seeds", f"{n} ({plan.seeds[0]}..{plan.seeds[-1]}): each SLO metric is the mean over them, "
                               "decided at 95 %; --seeds N for more" if n > 1 else
                      f"1 (seed {plan.seeds[0]}): differences are not tested against the noise; "
                      "--seeds 3 (or more) tests them"])
    winner = plan.winner
    head.rows.append(["winner", _short(winner) + f", ${winner.usd_per_hour:,.2f}/h"
                      + ("" if winner.decided else "; meets the SLO, but not distinguishably from missing it")
                      + _simulation_only(winner) if winner else "none"])
    lim = plan.limits
    if winner and lim is not None:
        head.rows.append(["capacity", _capacity(plan)])
        head.rows.append(["utilisation", f"engines' batches {lim.utilisation:.0%} full at {plan.rate:g} req/s"
                          + (f"; UNHEALTHY: {lim.unhealthy['utilisation']}" if "utilisation" in lim.unhealthy else
                             f" (healthy: at most {lim.utilisation_limit:.0%})")])
        head.rows.append(["your spec", comparison(winner.describe()["accelerator"], winner.usd_per_hour, lim, keys)])
    runner = plan.alternatives[0] if winner and plan.alternatives else None
    if runner is not None and n > 1:
        close = runner_up_within_noise(winner, runner)
        head.rows.append(["runner-up", _short(runner) + f", +${runner.usd_per_hour - winner.usd_per_hour:,.2f}/h; "
                          + (f"its {', '.join(_label(k) for k in close)} not distinguishable from the winner's "
                             f"at {n} seeds" if close else "its SLO metrics differ from the winner's beyond the noise")])
    head.rows.append(["search", search_verdict(plan)])
    head.rows.append(["disaggregated", disaggregation_verdict(plan)])

    shown = plan.candidates if show_all else [c for c in plan.candidates if c.measured]
    shown = sorted(shown, key=lambda c: (c.usd_per_hour, c.index))
    table = Section("Candidates simulated, cheapest first" if not show_all else "Every candidate, cheapest first",
                    ["#", "instances", "tiers", "eviction", "$/h", *[_label(k) for k in keys], "verdict"])
    for c in shown:
        d = c.describe()
        table.rows.append([str(c.index), d["accelerator"], _tiers(d) or "-", d["eviction"],
                           f"{c.usd_per_hour:,.2f}", *[_measured(c, k) for k in keys],
                           _verdict(c)])
    targets = plan.slo.targets()
    table.narrow = [("verdict", [_short_verdict(c, targets) for c in shown]), ("eviction", None),
                    *_means_only(shown, keys), ("verdict", [_short_verdict(c, targets, terse=True) for c in shown])]
    sections = [head, *_winner_figures(plan), *_top(plan), table]
    if not show_all:
        left = Section("Not simulated (--all lists each)", ["why", "candidates", "cheapest", "e.g."])
        for status in ("over budget", "pruned", "dominated", "not simulated"):
            group = sorted((c for c in plan.candidates if c.status == status), key=lambda c: (c.usd_per_hour, c.index))
            if group:
                left.rows.append([status, str(len(group)), f"${group[0].usd_per_hour:,.2f}/h",
                                  f"{_short(group[0])}: {group[0].reason}"])
        left.narrow = [("e.g.", [row[3].split(": ", 1)[0] for row in left.rows]), ("e.g.", None)]
        sections.append(left)
    return sections


def _simulation_only(c: Candidate) -> str:
    """'; simulation only: ...' for a candidate that kvplan render refuses (its simulate_only settings), else ''."""
    refused = c.resolved.simulation_only
    if not refused:
        return ""
    return "; simulation only, render refuses " + ", ".join(dict.fromkeys(path for path, _ in refused))


def _capacity(plan: Plan) -> str:
    """The winner's own limit in words: the bracket its probes found, and how far above the asked rate it is."""
    lim = plan.limits
    assert lim is not None and lim.capacity is not None
    probes = len(lim.probes) - 1
    how = f"{probes} probes above the judged rate, " + (f"{len(plan.seeds)} seeds each" if len(plan.seeds) > 1
                                                           else "1 seed: no interval")
    if lim.capacity_missed is None:
        return (f"at least {lim.capacity:.3g} req/s ({lim.capacity / plan.rate:.2f} x the asked rate): it met the SLO "
                f"at every rate probed ({how})")
    return (f"{lim.capacity:.3g} req/s, {lim.capacity / plan.rate:.2f} x the asked rate (meets the SLO at "
            f"{lim.capacity:.3g}, misses it at {lim.capacity_missed:.3g} req/s; {how})")


def _winner_figures(plan: Plan) -> list[Section]:
    """Every SLO figure of the winner at the asked rate, against its target or, without one, its low-load value."""
    lim, targets = plan.limits, plan.slo.targets()
    if plan.winner is None or lim is None or not lim.figures:
        return []
    section = Section(f"The winner at the asked {plan.rate:g} req/s (mean over {len(plan.seeds)} seed(s))",
                      ["figure", f"at {plan.rate:g} req/s", f"at {plan.rate * LOW_LOAD_SHARE:.3g} req/s", "target",
                       "health"])
    for k in FIGURES:
        if k not in lim.figures:
            continue
        value = lim.figures[k]
        if k in targets:
            health = "meets its target" if value <= targets[k] else "MISSES its target at the asked rate"
        else:
            health = f"UNHEALTHY: {lim.unhealthy[k]}" if k in lim.unhealthy else "no target; healthy"
        section.rows.append([_label(k), fmt_duration(value),
                             fmt_duration(lim.low_load[k]) if k in lim.low_load else "-",
                             fmt_duration(targets[k]) if k in targets else "-", health])
    return [section]


def _top(plan: Plan) -> list[Section]:
    """The `--top` best candidates: the winner, then its alternatives, cheapest first (none without a winner)."""
    best = [c for c in (plan.winner, *plan.alternatives) if c is not None]
    if not best:
        return []
    keys = list(plan.slo.targets())
    section = Section(f"Top {plan.top} (--top): the cheapest meeting the SLO at {plan.judged_rate:.3g} req/s"
                      + (f", {len(best)} found" if len(best) < plan.top else ""),
                      ["rank", "candidate", "$/h", "vs winner", *[_label(k) for k in keys]])
    for rank, c in enumerate(best, 1):
        section.rows.append([str(rank), _short(c), f"{c.usd_per_hour:,.2f}",
                             "-" if rank == 1 else f"+${c.usd_per_hour - best[0].usd_per_hour:,.2f}/h",
                             *[_measured(c, k) for k in keys]])
    section.narrow = [("vs winner", None), *_means_only(best, keys),
                      ("candidate", [f"#{c.index} {c.describe()['accelerator']}" for c in best])]
    return [section]


def search_verdict(plan: Plan) -> str:
    """Whether the winner is proven cheapest, or what a search cut short by --max-runs could have missed."""
    left = plan.unsearched
    if not left:
        return "complete: every cheaper candidate was simulated or ruled out"
    than = "the winner" if plan.winner else "any candidate simulated"
    return (f"cut short by --max-runs after {plan.simulations} runs: {len(left)} candidate(s) from "
            f"${left[0].usd_per_hour:,.2f}/h were not simulated and could be cheaper than {than} "
            f"(e.g. {_short(left[0])}); raise --max-runs to at most {plan.simulations + len(left) * len(plan.seeds)} "
            "to decide")


def disaggregation_verdict(plan: Plan) -> str:
    """Whether prefill:decode splits were searched and, if so, whether one pays: the cheapest disaggregated candidate
    meeting the SLO against the cheapest aggregated one, with the interval of each figure over the seeds."""
    why = plan.considered.why
    if not plan.considered.disaggregated:
        return why
    split = [c for c in plan.candidates if c.resolved.disaggregation is not None]
    if not plan.considered.aggregated:
        best = plan.winner
        return why + (f"; the cheapest meeting the SLO is {_short(best)}, ${best.usd_per_hour:,.2f}/h" if best
                      else f"; none of {len(split)} meets the SLO")
    met = sorted((c for c in plan.candidates if c.status in ("winner", "alternative", "meets SLO")),
                 key=lambda c: (c.usd_per_hour, c.index))
    pd = next((c for c in met if c.resolved.disaggregation is not None), None)
    agg = next((c for c in met if c.resolved.disaggregation is None), None)
    keys = list(plan.slo.targets())

    def figures(c: Candidate) -> str:
        return ", ".join(f"{_label(k)} {with_ci(c, k)}" for k in keys)

    if pd is not None and (agg is None or pd.usd_per_hour < agg.usd_per_hour):
        than = (f"${agg.usd_per_hour - pd.usd_per_hour:,.2f}/h less than the cheapest aggregated candidate meeting it "
                f"({_short(agg)})" if agg else "no aggregated candidate meets it")
        return (f"pays: {_short(pd)} meets the SLO for ${pd.usd_per_hour:,.2f}/h ({figures(pd)}), {than}"
                + ("" if pd.decided else "; not distinguishable from missing the SLO at these seeds"))
    if pd is not None and agg is not None:
        return (f"does not pay: the cheapest disaggregated candidate meeting the SLO, {_short(pd)}, costs "
                f"${pd.usd_per_hour - agg.usd_per_hour:,.2f}/h more than {_short(agg)} ({figures(agg)})")
    simulated = [c for c in split if c.measured]
    if simulated:
        cheapest = min(simulated, key=lambda c: (c.usd_per_hour, c.index))
        return (f"does not pay: none of the {len(simulated)} disaggregated candidates simulated meets the SLO "
                f"(the cheapest, {_short(cheapest)} at ${cheapest.usd_per_hour:,.2f}/h: {cheapest.reason})")
    if not split:
        return why + "; none validated"
    cheapest = min(split, key=lambda c: (c.usd_per_hour, c.index))
    return (f"does not pay here: no disaggregated candidate needed simulating ({len(split)} considered; the "
            f"cheapest, {_short(cheapest)} at ${cheapest.usd_per_hour:,.2f}/h: {cheapest.reason})")


def plan_tables(plan: Plan, show_all: bool = False, width: int | None = None) -> list[Table]:
    """The plan's tables, each narrowed to `width` columns (None: whole; kvplan.report.terminal)."""
    return tables(plan_sections(plan, show_all), width)


def _short(c: Candidate) -> str:
    d = c.describe()
    tiers = _tiers(d)
    return f"#{c.index} {d['accelerator']}" + (f", {tiers}" if tiers else "")


def _tiers(d: dict[str, str]) -> str:
    return ", ".join(f"{k} {d[k]}" for k in ("ddr", "nvme", "ceph") if d[k] != "-")


def _label(key: str) -> str:
    metric, pct = key.rsplit("_", 1)
    return f"{metric.upper()} {pct}"


def _not_enumerated(plan: Plan) -> str:
    parts = []
    if plan.not_enumerated:
        parts.append(f"{plan.not_enumerated} more not enumerated: their accelerators alone cost "
                     f"${plan.not_enumerated_from:,.2f}/h or more, above the winner and its alternatives")
    if plan.over_budget_unpriced:
        parts.append(f"{plan.over_budget_unpriced} more whose accelerators alone are over the budget")
    return "; " + "; ".join(parts) if parts else ""


def _stopped(plan: Plan) -> str:
    n = sum(1 for c in plan.candidates if c.stopped)
    return f" ({n} stopped as soon as their miss was certain)" if n else ""


def _measured(c: Candidate, key: str) -> str:
    return with_ci(c, key) if key in c.measured else "-"


def _verdict(c: Candidate) -> str:
    if c.status == "winner":
        return "WINNER" + ("" if c.decided else " (not distinguishable from missing the SLO)")
    if c.status == "alternative":
        return "alternative: " + c.reason.split("; ", 1)[-1]
    return c.reason


def _pools(c: Candidate) -> dict | None:
    """A disaggregated candidate's pools (each one's accelerator, TP and instances); None for an aggregated one."""
    d = c.resolved.disaggregation
    if d is None:
        return None
    return {role: {"accelerator": p.device.name, "tensor_parallel": p.tensor_parallel, "instances": p.instances}
            for role, p in (("prefill", d.prefill), ("decode", d.decode))} | {"connector": d.connector}


def _means_only(shown: list[Candidate], keys: list[str]) -> list[tuple[str, list[str]]]:
    """Narrowing steps (kvplan.report.terminal) that print each SLO column's mean without its 95 % interval."""
    def mean(c: Candidate, key: str) -> str:
        return _measured(c, key).split(" ± ")[0]

    return [(_label(k), [mean(c, k) for c in shown]) for k in keys
            if any(" ± " in _measured(c, k) for c in shown)]


def _short_verdict(c: Candidate, targets: dict[str, float], terse: bool = False) -> str:
    """The verdict in a few words, for a narrow terminal: the metrics a candidate misses, not by how much (its
    SLO columns show that), or its status; `terse` leaves out that a miss is cheaper than the winner (the order
    says it) and that its run stopped early."""
    undecided = "" if c.decided else " (undecided)"
    if c.status == "winner":
        return "WINNER" + undecided
    if c.status == "alternative":
        return "alternative" + undecided
    if c.status == "meets SLO":
        return "meets the SLO" + undecided
    if c.status == "missed SLO":
        missed = [c.stopped.key] if c.stopped else [k for k in targets if c.measured.get(k, 0) > targets[k]]
        cheaper = "cheaper, " if c.reason.startswith("cheaper") and not terse else ""
        stopped = "" if terse else " (stopped)"
        return (f"{cheaper}misses " + ", ".join(_label(k) for k in missed) + (stopped if c.stopped else undecided))
    return c.status


def plan_json(plan: Plan) -> dict:
    """The plan as data (`kvplan plan --json`): what was asked (`rate`; `headroom`, the share added before judging,
    and `judged_rate`, the rate every candidate was judged at; `top`), how the search went, the winner's own limits
    (`winner_limits`: kvplan.plan.headroom.Limits, with `capacity`, `utilisation` and every SLO figure at the asked
    rate; null without a winner), and every candidate with its choices, price, status and reason; simulated ones with
    each SLO metric's mean, 95 % half-width and per-seed values (seconds)."""
    winner = plan.winner
    return {
        "rate": plan.rate, "headroom": plan.headroom, "judged_rate": plan.judged_rate, "top": plan.top,
        "offered_rate": plan.offered_rate, "session_rate": plan.session_rate, "slo": plan.slo.targets(),
        "budget_usd_per_hour": plan.budget,
        "seeds": plan.seeds, "simulations": plan.simulations, "invalid_combinations": plan.invalid,
        "not_enumerated": plan.not_enumerated, "not_enumerated_from_usd_per_hour": plan.not_enumerated_from,
        "over_budget_not_enumerated": plan.over_budget_unpriced,
        "search": search_verdict(plan), "winner": winner.index if winner else None,
        "disaggregated": {"aggregated_searched": plan.considered.aggregated,
                          "disaggregated_searched": plan.considered.disaggregated, "verdict": disaggregation_verdict(plan)},
        "winner_limits": dataclasses.asdict(plan.limits) if plan.limits else None,
        "candidates": [{"index": c.index, "status": c.status, "reason": c.reason, "usd_per_hour": c.usd_per_hour,
                        "choices": c.describe(), "instances": c.resolved.instances, "accelerator": c.resolved.device.name,
                        "tensor_parallel": c.resolved.tensor_parallel, "disaggregation": _pools(c),
                        "measured": c.measured, "ci95": c.ci95,
                        "samples": c.samples, "decided": c.decided, "requests_per_s": c.requests_per_s,
                        "stopped": dataclasses.asdict(c.stopped) if c.stopped else None}
                       for c in sorted(plan.candidates, key=lambda c: (c.usd_per_hour, c.index))]}
