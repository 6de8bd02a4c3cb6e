"""A plan as tables: the candidates simulated (winner marked), then what was left out and why."""

from __future__ import annotations

import dataclasses

from rich.table import Table

from ..plan.search import Candidate, Plan, rate_words, runner_up_within_noise, with_ci
from ..units import fmt_duration
from .sections import Section
from .terminal import tables

def plan_sections(plan: Plan, show_all: bool = False) -> list[Section]:
    keys = list(plan.slo.targets())
    head = Section("Plan", None, [
        ["target", f"{rate_words(plan)}, offered {plan.offered_rate:.3g} req/s, "
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
                      if winner else "none"])
    runner = plan.alternatives[0] if winner and plan.alternatives else None
    if runner is not None and n > 1:
        close = runner_up_within_noise(winner, runner)
        head.rows.append(["runner-up", _short(runner) + f", +${runner.usd_per_hour - winner.usd_per_hour:,.2f}/h; "
                          + (f"its {', '.join(_label(k) for k in close)} not distinguishable from the winner's "
                             f"at {n} seeds" if close else "its SLO metrics differ from the winner's beyond the noise")])
    head.rows.append(["search", search_verdict(plan)])

    shown = plan.candidates if show_all else [c for c in plan.candidates if c.measured]
    shown = sorted(shown, key=lambda c: (c.usd_per_hour, c.index))
    table = Section("Candidates simulated, cheapest first" if not show_all else "Every candidate, cheapest first",
                    ["#", "instances", "tiers", "eviction", "$/h", *[_label(k) for k in keys], "verdict"])
    for c in shown:
        d = c.describe()
        table.rows.append([str(c.index), d["accelerator"], _tiers(d) or "-", d["eviction"],
                           f"{c.usd_per_hour:,.2f}", *[_measured(c, k) for k in keys],
                           _verdict(c)])
    sections = [head, table]
    if not show_all:
        left = Section("Not simulated (--all lists each)", ["why", "candidates", "cheapest", "e.g."])
        for status in ("over budget", "pruned", "dominated", "not simulated"):
            group = sorted((c for c in plan.candidates if c.status == status), key=lambda c: (c.usd_per_hour, c.index))
            if group:
                left.rows.append([status, str(len(group)), f"${group[0].usd_per_hour:,.2f}/h",
                                  f"{_short(group[0])}: {group[0].reason}"])
        sections.append(left)
    return sections


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


def plan_tables(plan: Plan, show_all: bool = False) -> list[Table]:
    return tables(plan_sections(plan, show_all))


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


def plan_json(plan: Plan) -> dict:
    """The plan as data (`kvplan plan --json`): what was asked, how the search went, and every candidate with its
    choices, price, status and reason; simulated ones with each SLO metric's mean, 95 % half-width and per-seed values
    (seconds)."""
    winner = plan.winner
    return {
        "rate": plan.rate, "offered_rate": plan.offered_rate, "session_rate": plan.session_rate,
        "slo": plan.slo.targets(), "budget_usd_per_hour": plan.budget,
        "seeds": plan.seeds, "simulations": plan.simulations, "invalid_combinations": plan.invalid,
        "not_enumerated": plan.not_enumerated, "not_enumerated_from_usd_per_hour": plan.not_enumerated_from,
        "over_budget_not_enumerated": plan.over_budget_unpriced,
        "search": search_verdict(plan), "winner": winner.index if winner else None,
        "candidates": [{"index": c.index, "status": c.status, "reason": c.reason, "usd_per_hour": c.usd_per_hour,
                        "choices": c.describe(), "instances": c.resolved.instances, "accelerator": c.resolved.device.name,
                        "tensor_parallel": c.resolved.tensor_parallel, "measured": c.measured, "ci95": c.ci95,
                        "samples": c.samples, "decided": c.decided, "requests_per_s": c.requests_per_s,
                        "stopped": dataclasses.asdict(c.stopped) if c.stopped else None}
                       for c in sorted(plan.candidates, key=lambda c: (c.usd_per_hour, c.index))]}
