"""The page of a plan (`kvplan plan SPEC --rate R --json > plan.json`, then `kvplan report plan.json`).

A plan's answer is its ledger: every candidate considered, cheapest first, with its price, its SLO
metrics (mean ± 95 % CI over the seeds, when simulated) and the verdict on it; the winner is the
cheapest that meets the SLO. The page shows the question and the answer, the winner's headroom when the
file carries one, the ledger, and each SLO metric against the price of every simulated candidate with
the Pareto frontier (the candidates no other beats on both) and the SLO target marked.

`PlanFile` reads the JSON that `report.plan.plan_json` writes; keys it does not know (a headroom added
by a later kvplan) are kept and shown as written, never dropped.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..units import fmt_duration
from . import scatter, svg
from .figures import Figure, Ids
from .page import Document, Part
from .sections import Section


class PlanCandidate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    index: int
    status: str
    reason: str
    usd_per_hour: float
    choices: dict[str, str]
    instances: int
    accelerator: str
    tensor_parallel: int = 1
    disaggregation: dict[str, Any] | None = None
    """A disaggregated candidate's pools (each one's accelerator, TP and instances) and connector; None: aggregated."""
    measured: dict[str, float] = {}
    """Each SLO metric's mean over the seeds, seconds (empty when not simulated)."""
    ci95: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    decided: bool = True
    requests_per_s: float | None = None
    stopped: dict[str, Any] | None = None


class PlanFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    rate: float
    offered_rate: float
    slo: dict[str, float]
    budget_usd_per_hour: float | None = None
    seeds: list[int]
    simulations: int
    invalid_combinations: int = 0
    not_enumerated: int = 0
    not_enumerated_from_usd_per_hour: float | None = None
    over_budget_not_enumerated: int = 0
    search: str
    winner: int | None
    candidates: list[PlanCandidate]
    disaggregated: dict[str, Any] | None = None
    """Whether aggregated and disaggregated candidates were searched, and the verdict on disaggregation (plans
    written before kvplan planned it have none)."""

    def candidate(self, index: int | None) -> PlanCandidate | None:
        return next((c for c in self.candidates if c.index == index), None)


def _label(key: str) -> str:
    metric, _, pct = key.rpartition("_")
    return f"{metric.upper()} {pct}" if metric else key


def _short(c: PlanCandidate) -> str:
    tiers = ", ".join(f"{k} {c.choices[k]}" for k in ("ddr", "nvme", "ceph") if c.choices.get(k, "-") != "-")
    return f"#{c.index} {c.choices.get('accelerator', c.accelerator)}" + (f", {tiers}" if tiers else "")


def _metric(c: PlanCandidate, key: str, seeds: int) -> str:
    if key not in c.measured:
        return "-"
    text = fmt_duration(c.measured[key])
    if c.stopped and c.stopped.get("key") == key:
        return f">= {text} (stopped)"
    half = c.ci95.get(key)
    return text + (f" ± {fmt_duration(half)}" if seeds > 1 and half is not None else "")


def _value(value: Any) -> str:
    """A value of a key this page does not know, as written (numbers rounded for reading)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value)
    return str(value)


def _extras(title: str, data: dict[str, Any]) -> Section | None:
    """A key/value table of the fields a later kvplan added (headroom, capacity, utilisation, ...)."""
    rows: list[list[str]] = []
    for key, value in data.items():
        if isinstance(value, dict) and value and all(not isinstance(v, (dict, list)) for v in value.values()):
            rows += [[f"{key}: {k}", _value(v)] for k, v in value.items()]
        else:
            rows.append([key, _value(value)])
    return Section(title, None, rows) if rows else None


def _not_enumerated(plan: PlanFile) -> str:
    parts = []
    if plan.not_enumerated:
        parts.append(f"{plan.not_enumerated} more not enumerated: their accelerators alone cost "
                     f"${plan.not_enumerated_from_usd_per_hour or 0:,.2f}/h or more, above the winner and its "
                     "alternatives")
    if plan.over_budget_not_enumerated:
        parts.append(f"{plan.over_budget_not_enumerated} more whose accelerators alone are over the budget")
    return "; " + "; ".join(parts) if parts else ""


def answer_part(plan: PlanFile) -> Part:
    seeds = len(plan.seeds)
    targets = ", ".join(f"{_label(k)} <= {fmt_duration(v)}" for k, v in plan.slo.items())
    head = Section("The question and the answer", None, [
        ["target", f"{plan.rate:g} req/s (offered {plan.offered_rate:.3g} req/s), {targets}"
                   + (f", at most ${plan.budget_usd_per_hour:,.2f}/h" if plan.budget_usd_per_hour is not None else "")],
        ["considered", f"{len(plan.candidates)} candidates ({plan.invalid_combinations} other combinations did not "
                       "validate)" + _not_enumerated(plan)],
        ["simulated", f"{sum(1 for c in plan.candidates if c.measured)} candidates x {seeds} seed(s) = "
                      f"{plan.simulations} runs"],
        ["seeds", f"{seeds}: each SLO metric is the mean over them, decided at 95 %" if seeds > 1 else
                  "1: differences are not tested against the noise (--seeds 3 tests them)"]])
    winner = plan.candidate(plan.winner)
    if winner is None:
        head.rows.append(["winner", "none: no candidate meets the SLO at this rate"
                          + (" within the budget" if plan.budget_usd_per_hour is not None else "")])
    else:
        head.rows.append(["winner", f"{_short(winner)}, ${winner.usd_per_hour:,.2f}/h; "
                          + ", ".join(f"{_label(k)} {_metric(winner, k, seeds)}" for k in plan.slo)
                          + ("" if winner.decided else "; meets the SLO, but not distinguishably from missing it")])
    head.rows.append(["search", plan.search])
    if plan.disaggregated is not None:
        head.rows.append(["disaggregated", str(plan.disaggregated.get("verdict", ""))])
    tables = [head]
    known = set(PlanCandidate.model_fields)
    if winner is not None:
        extra = _extras("The winner's headroom", {k: v for k, v in (winner.model_extra or {}).items()
                                                 if k not in known})
        tables += [extra] if extra else []
    more = dict(plan.model_extra or {})
    extra = _extras(f"Also in this plan file: {', '.join(more)}", more)
    tables += [extra] if extra else []
    return Part("Answer", "The cheapest candidate that meets every SLO target at the rate, and how sure the "
                          "search is of it.", tables=tables)


def ledger_part(plan: PlanFile) -> Part:
    seeds = len(plan.seeds)
    keys = list(plan.slo)
    table = Section("Every candidate, cheapest first", ["#", "instances", "ddr", "nvme", "ceph", "eviction", "$/h",
                                                        *(_label(k) for k in keys), "status", "why"])
    for c in sorted(plan.candidates, key=lambda c: (c.usd_per_hour, c.index)):
        table.rows.append([str(c.index), c.choices.get("accelerator", c.accelerator), c.choices.get("ddr", "-"),
                           c.choices.get("nvme", "-"), c.choices.get("ceph", "-"), c.choices.get("eviction", "-"),
                           f"{c.usd_per_hour:,.2f}", *(_metric(c, k, seeds) for k in keys),
                           c.status.upper() if c.status == "winner" else c.status, c.reason])
    return Part("Ledger", "What the planner considered and what it decided about each: simulated candidates carry "
                          "their SLO metrics; the others say why they were not simulated.", tables=[table])


def pareto_part(plan: PlanFile, ids: Ids) -> Part:
    part = Part("Cost against the SLO", "Each simulated candidate's price against its SLO metric: the frontier joins "
                                        "the candidates no other beats on both, the dashed line is the target.")
    for key, target in plan.slo.items():
        points = [scatter.Point(c.usd_per_hour, c.measured[key], f"#{c.index}") for c in plan.candidates
                  if key in c.measured and math.isfinite(c.measured[key]) and math.isfinite(c.usd_per_hour)]
        if not points:
            continue
        title = f"Cost against {_label(key)}"
        ident = ids()
        chart, unlabelled = scatter.scatter_frontier(
            ident, title, points, x_label="cost ($/h)", y_label=_label(key),
            x_format=svg.dollars_telling_apart([p.x for p in points]), y_format=svg.fmt_seconds,
            y_marks=[(target, f"SLO: {_label(key)} {svg.fmt_seconds(target)}")],
            desc=f"Every simulated candidate's cost per hour against its {_label(key)}.")
        winner = plan.candidate(plan.winner)
        caption = (f"{len(points)} simulated candidates; on the frontier: "
                   + ", ".join(p.label for p in scatter.pareto_frontier(points))
                   + (f". The winner is #{winner.index}, the cheapest at or below the line." if winner else
                      ". No candidate meets the SLO.")
                   + (f" {unlabelled} label(s) did not fit; hover a point for its label." if unlabelled else ""))
        part.figures.append(Figure(ident, title, chart, caption))
    if not part.figures:
        part.notes.append("No candidate was simulated, so there is nothing to plot: every one was ruled out before a "
                          "run (see the ledger).")
    return part


def document(plan: PlanFile, name: str) -> Document:
    ids = Ids()
    winner = plan.candidate(plan.winner)
    title = (f"plan: {_short(winner)} at ${winner.usd_per_hour:,.2f}/h" if winner else "plan: no candidate meets the SLO")
    subtitle = f"{plan.rate:g} req/s, {len(plan.candidates)} candidates, {len(plan.seeds)} seed(s); {name}"
    return Document(title, subtitle, [answer_part(plan), ledger_part(plan), pareto_part(plan, ids)])


__all__ = ["PlanCandidate", "PlanFile", "document"]
