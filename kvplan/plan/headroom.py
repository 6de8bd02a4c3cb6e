"""Headroom: how far a plan's winner sits from its own limit, and whether its figures look healthy.

Nobody deploys at the edge. `plan` judges every candidate at the asked rate times (1 + headroom), so
the winner meets the SLO at a load above the one asked for; this module then measures, for the winner
only and with a bounded number of extra runs (docs/planning.md, "Headroom"):

- every SLO-relevant figure (TTFT, TPOT and E2E at p50, p90 and p99) and how full the engines' batches
  are (SimResult.engine_occupancy) at the asked rate, the load it will really serve;
- the same figures at LOW_LOAD_SHARE of the asked rate, where nothing queues: a figure the user set
  no target for is flagged *unhealthy* when load has made it more than UNHEALTHY_FACTOR times its
  low-load value (then over half of it is waiting, not work), and the utilisation is flagged when
  the engines' batches are fuller than 1 / (1 + headroom), the share that leaves the headroom free, or than
  1 / (1 + DEFAULT_HEADROOM) (80 %) under a thinner headroom: planning at the edge is allowed, not hidden;
- its own capacity, the highest rate at which it still meets the SLO: from the judged rate (met),
  doubling until a probe misses, then bisecting, CAPACITY_PROBES probes at most, reported as the
  bracket of the highest rate met and the lowest missed, as `kvplan capacity` reports one seed;
- the user's own spec at the asked rate, for one sentence comparing the winner with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import SpecError
from ..sim.result import SimResult
from ..sim.slo_watch import SloMiss
from ..spec import Topology, from_mapping
from ..spec.slo import Slo
from ..sweep.capacity import DEFAULT_HEADROOM, parse_headroom_arg
from .bounds import at_rate

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..sweep.cache import RunCache

LOW_LOAD_SHARE = 0.1
"""The winner's unloaded figures are measured at this share of the asked rate."""
UNHEALTHY_FACTOR = 2.0
"""A figure without a target is unhealthy when load made it more than this many times its low-load value."""
CAPACITY_PROBES = 4
"""Most probes (each one run per seed) of the winner's own capacity: from the judged rate, x2 until a miss,
then bisection; four probes bracket it within 1/8 of the judged rate when the first doubling misses."""
__all__ = ["CAPACITY_PROBES", "DEFAULT_HEADROOM", "FIGURES", "LOW_LOAD_SHARE", "Limits", "Probe", "UNHEALTHY_FACTOR",
           "comparison", "measure", "parse_headroom_arg"]
FIGURES = tuple(f"{m}_{p}" for m in ("ttft", "tpot", "e2e") for p in ("p50", "p90", "p99"))
"""Every SLO-relevant figure, by SLO key."""


@dataclass
class Probe:
    rate: float
    """Requests per second the probe offered (the planner's rate, corrected for sessions)."""
    met: bool
    """Every target's mean over the seeds held (a run stopped at a certain miss missed)."""


@dataclass
class Limits:
    """The winner against its own limit, and the figures at the asked load (the JSON fields of plan's winner)."""

    headroom: float
    judged_rate: float
    """The rate every candidate was judged at: the asked rate x (1 + headroom)."""
    figures: dict[str, float]
    """SLO key -> the winner's mean over the seeds at the asked rate (every key in FIGURES; seconds)."""
    low_load: dict[str, float]
    """SLO key -> the same at LOW_LOAD_SHARE of the asked rate (the unloaded value)."""
    unhealthy: dict[str, str]
    """Key (an SLO key without a target, or "utilisation") -> why it looks unhealthy."""
    utilisation: float
    """How full the winner's engines' batches were at the asked rate, mean over instances (engine_occupancy)."""
    utilisation_limit: float
    """1 / (1 + headroom): the fullness that leaves the headroom free; at most 1 / (1 + DEFAULT_HEADROOM)."""
    capacity: float | None
    """The highest rate probed at which the winner met the SLO (requests/s; the judged rate at least)."""
    capacity_missed: float | None
    """The lowest rate probed at which it missed (None: it met every probe, the capacity is at least `capacity`)."""
    probes: list[Probe] = field(default_factory=list)
    simulations: int = 0
    """Runs these measurements made (besides the search's)."""
    spec_usd_per_hour: float | None = None
    """The user's own spec, simulated at the asked rate for the comparison (None when it cannot be priced)."""
    spec_accelerator: str = ""
    """The user's spec's accelerators, e.g. '8 x H100-SXM'."""
    spec_figures: dict[str, float] = field(default_factory=dict)
    spec_problem: str = ""
    """Why the user's spec could not be compared ("" when it was)."""


def measure(winner: Topology, spec: Topology, rate: float, headroom: float, slo: Slo, seeds: list[int],
            workers: int, catalog: "Catalog", cache: "RunCache | None" = None) -> Limits:
    """The winner's figures at `rate` and at low load, its capacity above the judged rate, and the user's spec."""
    from ..cost import cost_of
    from ..resolve import resolve
    from .pools import accelerators

    targets = slo.targets()
    judged = rate * (1 + headroom)

    def topo_at(t: Topology, r: float) -> Topology:
        return from_mapping(at_rate(t, r, slo, seeds[0], cache)[0])

    runs = [topo_at(winner, rate), topo_at(winner, rate * LOW_LOAD_SHARE)]
    spec_cost, problem, spec_accelerator = None, "", ""
    try:
        r = resolve(spec, catalog)
        spec_accelerator = accelerators(r)
        spec_cost = cost_of(spec, r, catalog=catalog).usd_per_hour
        runs.append(topo_at(spec, rate))
    except SpecError as exc:
        problem = exc.problems[0].message if exc.problems else str(exc)
    results = simulate_all(runs, seeds, workers, cache=cache)
    simulations = len(runs) * len(seeds)
    asked, low = _means(results[0]), _means(results[1])
    busy = [sum(r.engine_occupancy) / len(r.engine_occupancy) for r in results[0]
            if isinstance(r, SimResult) and r.engine_occupancy]
    utilisation = sum(busy) / len(busy) if busy else 0.0
    limit = 1 / (1 + max(headroom, DEFAULT_HEADROOM))
    unhealthy = {k: f"{asked[k] / low[k]:.1f} x its value at {LOW_LOAD_SHARE:.0%} of the load"
                 for k in FIGURES if k not in targets and k in asked and low.get(k, 0) > 0
                 and asked[k] > UNHEALTHY_FACTOR * low[k]}
    if utilisation > limit:
        unhealthy["utilisation"] = (f"engines' batches {utilisation:.0%} full > {limit:.0%}, the share that leaves "
                                    f"{max(headroom, DEFAULT_HEADROOM):.0%} headroom")

    probes = [Probe(rate=judged, met=True)]     # the search judged the winner there
    stop = targets if len(seeds) == 1 else None
    for _ in range(CAPACITY_PROBES):
        met = max((p.rate for p in probes if p.met), default=judged)
        missed = min((p.rate for p in probes if not p.met), default=None)
        at = float(f"{(met * 2 if missed is None else (met + missed) / 2):.4g}")   # as capacity rounds its probes
        outcome = simulate_all([topo_at(winner, at)], seeds, workers, cache=cache, stop_at_miss=stop)[0]
        simulations += len(seeds)
        means = _means(outcome)
        probes.append(Probe(rate=at, met=all(isinstance(o, SimResult) for o in outcome)
                            and all(means[k] <= v for k, v in targets.items())))
    met_rates = [p.rate for p in probes if p.met]
    missed_rates = [p.rate for p in probes if not p.met]
    return Limits(headroom=headroom, judged_rate=judged, figures=asked, low_load=low, unhealthy=unhealthy,
                  utilisation=utilisation, utilisation_limit=limit, capacity=max(met_rates),
                  capacity_missed=min(missed_rates) if missed_rates else None, probes=probes,
                  simulations=simulations, spec_usd_per_hour=spec_cost, spec_accelerator=spec_accelerator,
                  spec_figures=_means(results[2]) if len(results) > 2 else {}, spec_problem=problem)


def simulate_all(topos: list[Topology], seeds: list[int], workers: int, cache: "RunCache | None" = None,
                 stop_at_miss: dict[str, float] | None = None) -> "list[list[SimResult | SloMiss]]":
    """Every topology under every seed (kvplan.sweep.executor), results in topology order, then seed order;
    each looked up in `cache` first. With `stop_at_miss`, a run that certainly misses one of those targets
    stops there and gives its SloMiss (kvplan.sim.slo_watch)."""
    from ..sweep.cache import run_cached
    from ..sweep.executor import Task

    stop = tuple(sorted((stop_at_miss or {}).items()))
    flat, _ = run_cached([Task(spec=t, seed=s, stop_at_miss=stop) for t in topos for s in seeds], cache,
                         workers=workers)
    return [flat[i * len(seeds):(i + 1) * len(seeds)] for i in range(len(topos))]


def _means(outcome: "list[SimResult | SloMiss]") -> dict[str, float]:
    """Each figure's mean over the finished runs (empty when a run stopped at a miss: no figure is complete)."""
    done = [o for o in outcome if isinstance(o, SimResult)]
    if len(done) < len(outcome) or not done:
        return {}
    return {k: sum(getattr(getattr(r, k[:-4]), k[-3:]) for r in done) / len(done) for k in FIGURES}


def comparison(accelerator: str, usd_per_hour: float, limits: Limits, keys: list[str]) -> str:
    """One sentence: the winner against the user's spec at the asked rate (cost, and each target's figure)."""
    from ..units import fmt_duration

    if limits.spec_usd_per_hour is None:
        return f"your spec could not be compared: {limits.spec_problem}"
    change = (usd_per_hour / limits.spec_usd_per_hour - 1) if limits.spec_usd_per_hour > 0 else 0.0
    parts = [f"vs your spec ({limits.spec_accelerator}, ${limits.spec_usd_per_hour:,.2f}/h): {accelerator}, "
             f"{change:+.0%} cost"]
    for k in keys:
        mine, theirs = limits.figures.get(k), limits.spec_figures.get(k)
        if mine is not None and theirs is not None:
            metric, pct = k.rsplit("_", 1)
            parts.append(f"{metric.upper()} {pct} {fmt_duration(mine)} vs {fmt_duration(theirs)}")
    return ", ".join(parts) + " (both at the asked rate)"
