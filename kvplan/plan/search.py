"""The planner: the cheapest topology that meets a latency SLO at a request rate.

Every candidate is judged at the asked rate plus a headroom (kvplan.plan.headroom: 25 % by default), so
the winner is not planned at its own limit; the winner's capacity, utilisation and every SLO figure at the
asked rate are then measured with a few more runs.

Starting from a spec, `plan` varies what a buyer chooses (docs/planning.md, "Planner"):

- the accelerator (every catalog accelerator of the spec's kind with a price, or those named),
  tensor parallelism (1, 2, 4, 8 dividing gpus_per_node) and the number of instances;
- ddr and nvme per node on a ladder around the spec's sizes (x 1/4, x 1, x 4; nvme also off,
  ddr also off where the LMCache mode allows it);
- the Ceph tier off, or on at the spec's pool size or 2 replicas (an owned cluster's OSD count
  scales with the replicas, so replication is paid for);
- one eviction policy for every LMCache tier, among those the spec's mode really has
  (kvplan.spec.rules.REAL_POLICIES; IsolatedLRU is left out: without cache salts it is LRU).
- with a TPOT target (or `disaggregated`), prefill:decode splits of the same accelerators, with the same tiers
  (kvplan.plan.pools; their floors are each pool's, kvplan.plan.bounds).

Combinations are grouped by hardware (accelerator, TP, instances) and enumerated in the order of
what the accelerators alone cost, a lower bound on each combination's price known before it is
validated: a group is validated, resolved and priced only once the search may need it, and the
groups whose accelerators cost more than the winner and its alternatives are left out, counted
(validating 16,000 combinations took longer than simulating the few that matter). Only candidates
that validate and resolve are kept. Before anything is simulated they are
pruned with what needs no simulation: the exact hourly cost against the budget; a roofline
bound on the engine time the workload needs (it cannot keep up when that exceeds the time the
traffic spans); lower bounds on TTFT, TPOT and E2E percentiles from the never-cached prompt
tokens and the cheapest possible step; and dominance (a candidate whose tiers never fill behaves
exactly like a cheaper one with smaller tiers or another policy). The survivors are simulated
in ascending cost, a few at a time, until the cheapest that meets the SLO and a few alternatives
are known (a candidate that differs from one already meeting it only in its eviction policy costs
the same and is not simulated); every other candidate gets the reason it lost.

The search space is kvplan.plan.space; what is known before simulating (the workload at the rate,
the bounds, dominance) is kvplan.plan.bounds; this module is the search and its verdicts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from pydantic_core import PydanticCustomError

from ..catalog import Catalog, load_catalog, lookup
from ..cost import CostBreakdown, cost_of
from ..errors import Problem, SpecError
from ..resolve import Resolved, accelerator_problems, resolve
from ..sim.result import SimResult
from ..sim.slo_watch import SloMiss
from ..spec import Topology, from_mapping
from ..spec import stages
from ..spec.slo import Slo
from ..units import fmt_bytes, fmt_duration, is_bare_number, parse_rate
from .headroom import DEFAULT_HEADROOM, Limits, measure, simulate_all
from .bounds import Floors, WorkloadStats, at_rate, behaviour as plan_behaviour, floors
from . import pools
from .pools import Considered, considered
from .space import HardwareGroup, Specs, hardware_groups, variants

if TYPE_CHECKING:
    from ..sweep.cache import RunCache

ALTERNATIVES = 3
"""Feasible candidates reported besides the winner by default (`top` = 1 + ALTERNATIVES)."""
BATCH = 4
"""Candidates simulated per round (fixed, so that the result does not depend on --workers)."""
PRICE_STEP = 1.25
"""Each search round enumerates the hardware groups whose accelerators cost up to this factor more than the
last round's: a small step enumerates and simulates little beyond the winner and its alternatives (a
round re-sorts and re-prunes the candidates so far, which costs far less than validating a group)."""


@dataclass(eq=False)
class Candidate:
    """One topology the planner considered, and what became of it."""

    index: int
    topo: Topology
    resolved: Resolved
    cost: CostBreakdown
    status: str = ""
    """winner, alternative, meets SLO, missed SLO, pruned, over budget, dominated, not simulated."""
    reason: str = ""
    """Why it won or lost, in words."""
    measured: dict[str, float] = field(default_factory=dict)
    """SLO key -> the mean over the seeds (simulated candidates only)."""
    ci95: dict[str, float] = field(default_factory=dict)
    """SLO key -> half-width of the 95 % interval of that mean (0 with one seed)."""
    samples: dict[str, list[float]] = field(default_factory=dict)
    """SLO key -> the value of each seed, in seed order (the same seeds for every candidate)."""
    decided: bool = True
    """False: some target lies within the 95 % interval, so meeting or missing it is not
    distinguishable at these seeds (always True with one seed, where nothing is tested)."""
    requests_per_s: float | None = None
    stopped: SloMiss | None = None
    """Set when its run stopped at a certain miss (one seed only): `measured` then holds that key's lower bound."""

    @property
    def usd_per_hour(self) -> float:
        return self.cost.usd_per_hour

    def describe(self) -> dict[str, str]:
        """The candidate's choices, one word each (for tables)."""
        r, lm, c = self.resolved, self.topo.lmcache, self.topo.ceph
        tiers = {t.name: t for t in (r.lmcache.tiers if r.lmcache else [])}
        policy = ", ".join(sorted({t.eviction for t in tiers.values() if t.name != "ceph" or lm.mode == "mp"})) or "-"
        n = r.kv_offloading                      # vLLM's native CPU tier: per instance, named apart from LMCache's
        ddr = f"{_size(n.capacity_bytes)}/instance native" if n else _size(lm.ddr.size) if lm and lm.ddr else "-"
        return {"accelerator": pools.accelerators(r),
                "ddr": ddr,
                "nvme": _size(lm.nvme.size) if lm and lm.nvme else "-",
                "ceph": f"{c.hosts * c.osds_per_host} OSD x{c.pool.size}" if c and lm and lm.ceph else "-",
                "eviction": n.eviction if n else policy}


def _size(n: int) -> str:
    return fmt_bytes(n).replace(".0 ", "").replace(" ", "")


@dataclass
class Plan:
    rate: float
    """Requests per second asked for."""
    offered_rate: float
    """Requests per second the workload every candidate was judged at really offers: the asked rate x (1 +
    headroom), as generated (sessions make it differ from arrivals.rate)."""
    slo: Slo
    budget: float | None
    seeds: list[int]
    candidates: list[Candidate]
    simulations: int
    """Simulation runs made (candidates simulated x seeds)."""
    invalid: int
    """Combinations that did not validate or resolve (not candidates)."""
    not_enumerated: int = 0
    """Combinations never validated: their accelerators alone cost `not_enumerated_from` $/h or more, above
    every candidate the search needed (the winner and its alternatives were found for less)."""
    not_enumerated_from: float | None = None
    over_budget_unpriced: int = 0
    """Combinations never validated because their accelerators alone cost more than the budget."""
    headroom: float = 0.0
    """The share of the asked rate added before judging: candidates were judged at rate x (1 + headroom)."""
    top: int = 1 + ALTERNATIVES
    """The winner and its alternatives: at most this many candidates meeting the SLO are reported."""
    limits: Limits | None = None
    """The winner's capacity, utilisation and figures at the asked rate (kvplan.plan.headroom; None without a
    winner, or when not asked for)."""
    considered: Considered = Considered(True, False, "")
    """Whether aggregated and disaggregated candidates were searched, and why (kvplan.plan.pools)."""

    @property
    def judged_rate(self) -> float:
        """Requests per second every candidate was judged at."""
        return self.rate * (1 + self.headroom)
    session_rate: float | None = None
    """New sessions per second of every candidate's workload, which offers the judged rate (arrivals.session_rate);
    None without sessions."""

    @property
    def winner(self) -> Candidate | None:
        return next((c for c in self.candidates if c.status == "winner"), None)

    @property
    def alternatives(self) -> list[Candidate]:
        return [c for c in self.candidates if c.status == "alternative"]

    @property
    def unsearched(self) -> list[Candidate]:
        """Candidates left unsimulated because --max-runs ran out, that could have beaten the winner
        (all of them when there is no winner), cheapest first. Empty: the answer is proven."""
        bound = self.winner.usd_per_hour if self.winner else math.inf
        return sorted((c for c in self.candidates if c.status == "not simulated" and "(--max-runs)" in c.reason
                       and c.usd_per_hour < bound), key=lambda c: (c.usd_per_hour, c.index))


Simulate = Callable[[list[Topology], list[int], int], list[list["SimResult | SloMiss"]]]
Progress = Callable[[int, int, "Candidate | None"], None]
"""Told after each batch of simulations: runs made, --max-runs, the cheapest candidate meeting the SLO so far."""


# ---- the user's targets ------------------------------------------------------------------------

def parse_rate_arg(text: str) -> float:
    """'40/s' -> 40.0 requests per second; a SpecError naming --rate otherwise. A bare number is refused (per second
    or per minute?), and so is a rate of sessions: --rate counts requests, whatever the workload."""
    allowed = "requests per second, such as 40/s, 40req/s or 600/min"
    if is_bare_number(text):
        raise SpecError([Problem("--rate", "a bare number: the unit is missing", text, allowed,
                                 f"write it like --rate {text.strip()}/s (requests per second)")])
    try:
        rate: float | None = parse_rate(text)
        why = "not a positive request rate"
    except PydanticCustomError as exc:
        rate, why = None, exc.message()
    if rate is None or not rate > 0:
        raise SpecError([Problem("--rate", why if rate is None else "not a positive request rate", text, allowed,
                                 "write it like --rate 40/s")])
    return rate


def parse_budget_arg(text: str) -> float:
    """'100/h' (USD per hour), '2000/day', '70000/month' or a bare number of USD per hour."""
    m = re.fullmatch(r"\s*\$?([0-9]+(?:\.[0-9]*)?)\s*(?:/\s*(h|hour|day|month))?\s*", text)
    if not m:
        raise SpecError([Problem("--budget", "not a budget in USD per hour", text, "100/h, 2400/day, 70000/month",
                                 "write it like --budget 100/h")])
    per = {"h": 1.0, "hour": 1.0, "day": 24.0, "month": 730.0, None: 1.0}[m.group(2)]
    return float(m.group(1)) / per


# ---- the search --------------------------------------------------------------------------------

def plan(topo: Topology, rate: float, slo: Slo | None = None, budget: float | None = None, seeds: int = 1,
         workers: int = 1, gpus: Sequence[str] | None = None, max_instances: int = 8, max_runs: int = 200,
         catalog: Catalog | None = None, simulate: Simulate | None = None, progress: Progress | None = None,
         cache: "RunCache | None" = None, headroom: float = DEFAULT_HEADROOM, top: int = 1 + ALTERNATIVES,
         limits: bool = True, disaggregated: str = "auto") -> Plan:
    """The cheapest candidate that meets `slo` (default: the spec's) at `rate` x (1 + `headroom`) requests/s, and
    why the others lost; the `top` - 1 next cheapest that meet it as alternatives. With `limits`, the winner's
    own capacity, utilisation and figures at `rate` are measured too (kvplan.plan.headroom.measure: at most 7 runs
    per seed, through the run cache, not `simulate`, and not counted in `simulations` or against `max_runs`).

    Runs are looked up in `cache` first. With one seed, a candidate's run stops as soon as it has
    certainly missed a target (kvplan.sim.slo_watch): the verdict is the finished run's, and most of
    a plan's time was simulating hopeless candidates to the end. With several seeds every run goes to
    the end, since the 95 % intervals need every seed's value.

    `disaggregated` (auto, on, only, off) says whether prefill:decode splits of the same accelerators are
    candidates too (kvplan.plan.pools)."""
    catalog = catalog or load_catalog()
    slo = slo if slo is not None and slo.targets() else topo.slo
    if not slo.targets():
        raise SpecError([Problem("--slo", "no latency target to plan for", None, ", ".join(Slo.model_fields),
                                 "give --slo ttft_p99=500ms (repeatable), or add an slo: section to the spec")])
    unrated = stages.unrated(topo.workload, "the planner", "plan for an open loop at --rate (a spec without "
                             "stages or arrivals.concurrency), then simulate the winner under this load")
    if unrated is not None:
        raise SpecError([unrated])
    if topo.workload.kind in ("trace", "replay"):
        kind = topo.workload.kind
        raise SpecError([Problem("workload.kind", f"a {'trace' if kind == 'trace' else 'per-request log'} replays its "
                                 "own timestamps, so the planner cannot set its rate", kind,
                                 "chat, codegen, rag, shared_prefix", "plan with a workload shaped like it that has an "
                                 f"arrival rate (or scale it with workload.{kind}.time_scale and simulate it)")])
    if gpus:
        problems = []
        named = []
        for name in gpus:
            try:
                named.append(lookup(catalog.devices, name, "--gpu", "accelerator").name)
            except SpecError as exc:
                problems += exc.problems
        if problems:
            raise SpecError(problems)
        gpus = named
    if not 0 <= headroom <= 10:
        raise SpecError([Problem("--headroom", "outside 0 to 10 (0 % to 1000 %)", str(headroom), "0 to 10",
                                 "write it like --headroom 25%")])
    if top < 1:
        raise SpecError([Problem("--top", "must list at least the winner", str(top), "1 or more", "write --top 3")])
    which = considered(topo, slo, disaggregated)
    seed_list = [topo.workload.seed + i for i in range(seeds)]
    if simulate is None:
        stop = slo.targets() if seeds == 1 else None

        def simulate(topos: list[Topology], seeds: list[int], workers: int) -> list[list[SimResult | SloMiss]]:
            return simulate_all(topos, seeds, workers, cache=cache, stop_at_miss=stop)

    base, offered, stats = at_rate(topo, rate * (1 + headroom), slo, seed_list[0], cache)
    groups = hardware_groups(variants(base, topo, catalog, gpus, max_instances, which), topo, catalog)
    search = _Search(Specs(from_mapping(base)), seed_list, slo, budget, stats, offered, simulate, workers, max_runs,
                     progress, top - 1)
    waiting = list(groups)                   # not enumerated yet, cheapest accelerators first
    if budget is not None:                   # accelerators alone over the budget: nothing to enumerate
        waiting = [g for g in waiting if g.gpu_usd_per_hour <= budget]
    limit = waiting[0].gpu_usd_per_hour * PRICE_STEP if waiting else 0.0
    while True:
        while waiting and waiting[0].gpu_usd_per_hour <= limit:
            search.enumerate(waiting.pop(0), catalog)
        _named_accelerators(gpus, search, waiting, catalog)
        search.run()
        floor = waiting[0].gpu_usd_per_hour if waiting else math.inf
        if not waiting or search.decided_below(floor):
            break
        limit = max(limit * PRICE_STEP, floor)
    result = search.result(rate, slo, budget, groups, waiting)
    result.headroom, result.top, result.considered = headroom, top, which
    if limits and result.winner is not None:
        result.limits = measure(result.winner.topo, topo, rate, headroom, slo, seed_list, workers, catalog, cache)
    result.session_rate = base["workload"]["arrivals"].get("session_rate") if topo.workload.sessions else None
    return result


def _named_accelerators(gpus: Sequence[str] | None, search: "_Search", waiting: list[HardwareGroup], catalog: Catalog) -> None:
    """An accelerator asked for by name that no combination could use: say why rather than plan without it
    (its combinations are enumerated until one validates, or all are known not to)."""
    for name in dict.fromkeys(g.lower() for g in gpus or []):
        while name not in search.planned_on:
            mine = next((g for g in waiting if g.hardware[0] == name), None)
            if mine is None:
                if name in search.refused:
                    raise SpecError(list(search.refused[name].problems))
                break
            waiting.remove(mine)
            search.enumerate(mine, catalog)


class _Search:
    """The candidates enumerated so far, pruned and simulated cheapest first (one `run` per set of them).

    Runs are remembered across `run`s, so enumerating more candidates and searching again simulates
    only what is new; `simulations` counts every run made."""

    def __init__(self, specs: Specs, seeds: list[int], slo: Slo, budget: float | None, stats: WorkloadStats,
                 offered: float, simulate: Simulate, workers: int, max_runs: int, progress: Progress | None,
                 alternatives: int = ALTERNATIVES):
        self.specs = specs
        self.alternatives = alternatives
        self.seeds, self.slo, self.budget, self.stats, self.offered = seeds, slo, budget, stats, offered
        self.targets = slo.targets()
        self.simulate, self.workers, self.max_runs, self.progress = simulate, workers, max_runs, progress
        self.candidates: list[Candidate] = []
        self.invalid = 0
        self.refused: dict[str, SpecError] = {}
        self.planned_on: set[str] = set()
        self.runs: dict[int, list] = {}          # candidate index -> its outcome per seed
        self.floors: dict[tuple, Floors] = {}
        self.behaviours: dict[int, str] = {}     # candidate index -> plan_bounds.behaviour
        self.concluded_at: float | None = None
        self.feasible: list[Candidate] = []

    @property
    def simulations(self) -> int:
        return len(self.runs) * len(self.seeds)

    def enumerate(self, group: HardwareGroup, catalog: Catalog) -> None:
        if self._unfit(group, catalog):
            return
        for index, spec in group.variants:
            try:
                t = self.specs.topology(spec)
                r = resolve(t, catalog)
                cost = cost_of(t, r, catalog=catalog)
            except SpecError as exc:
                self.invalid += 1
                self.refused.setdefault(group.hardware[0], exc)
                continue
            self.planned_on.add(group.hardware[0])
            self.candidates.append(Candidate(index=index, topo=t, resolved=r, cost=cost))

    def _unfit(self, group: HardwareGroup, catalog: Catalog) -> bool:
        """Whether the model does not fit the group's hardware (weights, heads over ranks): then no
        combination in it resolves, whatever its tiers, and all of them are counted invalid unvalidated."""
        try:
            first = self.specs.topology(group.variants[0][1])
        except SpecError:
            return False                     # its own problems: each combination is validated as before
        problems = accelerator_problems(first, catalog)
        if problems:
            self.invalid += len(group.variants)
            self.refused.setdefault(group.hardware[0], SpecError(problems))
        return bool(problems)

    def decided_below(self, floor: float) -> bool:
        """Whether the last `run` settled every candidate that costs `floor` or more without looking at it:
        the winner and its alternatives were all found below it."""
        return self.concluded_at is not None and self.concluded_at < floor

    def run(self) -> None:
        self.candidates.sort(key=lambda c: (c.usd_per_hour, c.index))
        for c in self.candidates:
            c.status, c.reason, c.measured, c.ci95, c.samples = "", "", {}, {}, {}
            c.decided, c.requests_per_s, c.stopped = True, None, None
        self.concluded_at = None
        self._prune()
        self._simulate_cheapest_first()

    def _prune(self) -> None:
        targets, kept = self.targets, {}
        for c in self.candidates:
            if self.budget is not None and c.usd_per_hour > self.budget:
                c.status, c.reason = "over budget", f"over budget: ${c.usd_per_hour:,.2f}/h > ${self.budget:,.2f}/h"
                continue
            r = c.resolved
            key = (pools.shape(r), r.hbm_blocks, r.max_num_seqs, r.max_num_batched_tokens)
            f = self.floors.get(key) or self.floors.setdefault(key, floors(r, self.stats, self.slo))
            if f.load > 1:
                c.status = "pruned"
                c.reason = (f"pruned: cannot reach {self.offered:.3g} req/s even at full batch (needs {f.load:.2f} s of "
                            f"engine time per second on each of {r.instances} instance(s))")
                continue
            missed = [k for k, v in f.latency.items() if v > targets[k]]
            if missed:
                k = missed[0]
                c.status = "pruned"
                c.reason = (f"pruned: {_label(k)} cannot go below {fmt_duration(f.latency[k])} on {r.device.name} "
                            f"(> {fmt_duration(targets[k])})")
                continue
            behaviour = self.behaviours.get(c.index) or self.behaviours.setdefault(
                c.index, plan_behaviour(c.topo, c.resolved, self.stats))
            same = kept.get(behaviour)
            if same is not None:
                c.status = "dominated"
                c.reason = f"dominated by #{same.index}: its tiers never fill either, so it runs the same for less"
                continue
            kept[behaviour] = c

    def _simulate_cheapest_first(self) -> None:
        """The survivors in ascending cost; each hardware is first tried with its richest tiers."""
        survivors = [c for c in self.candidates if not c.status]
        for c in survivors:                      # already simulated by an earlier search
            if c.index in self.runs:
                _judge(c, self.runs[c.index], self.targets)
        richest: dict[tuple, Candidate] = {}
        for c in survivors:
            best = richest.get(_hardware(c))
            if best is None or _capacity(c) > _capacity(best):
                richest[_hardware(c)] = c
        feasible: list[Candidate] = []
        choices: dict[tuple, Candidate] = {}     # the feasible choices (the eviction policy aside), each's cheapest

        def run_batch(batch: list[Candidate]) -> None:
            for c, results in zip(batch, self.simulate([c.topo for c in batch], self.seeds, self.workers)):
                self.runs[c.index] = results
                _judge(c, results, self.targets)
            if self.progress is not None:
                met = [c for c in survivors if c.status == "meets SLO"]
                self.progress(self.simulations, self.max_runs,
                              min(met, key=lambda c: (c.usd_per_hour, c.index)) if met else None)

        def found(c: Candidate) -> None:
            feasible.append(c)
            choices.setdefault(_choice(c), c)
            if len(choices) > self.alternatives and self.concluded_at is None:
                self.concluded_at = c.usd_per_hour

        for pos, c in enumerate(survivors):
            if c.status and c is not richest[_hardware(c)] and not c.measured:
                continue
            if c.measured:       # simulated ahead of its turn (its hardware's probe, or by an earlier search)
                if c.status == "meets SLO" and len(choices) <= self.alternatives:
                    found(c)
                continue
            if len(choices) > self.alternatives:
                c.status = "not simulated"
                c.reason = f"not simulated: {len(feasible)} cheaper candidates already meet the SLO"
                continue
            twin = choices.get(_choice(c))
            if twin is not None:     # it could only be reported as differing from that one in its policy
                c.status = "not simulated"
                c.reason = f"not simulated: #{twin.index}, the same purchase with another eviction policy, meets the SLO"
                continue
            probe = richest[_hardware(c)]
            if probe is not c and probe.status == "missed SLO":
                c.status = "pruned"
                c.reason = f"pruned: the same accelerators miss the SLO even with the largest tiers (#{probe.index})"
                continue
            if self.simulations + len(self.seeds) > self.max_runs:
                c.status = "not simulated"
                c.reason = f"not simulated: the planner's {self.max_runs} runs (--max-runs) are spent"
                continue
            if not probe.status:   # probe this hardware, and the next few unprobed ones, together
                later = [richest[_hardware(x)] for x in survivors[pos:]]
                batch = list(dict.fromkeys(p for p in later if not p.status))[:BATCH]
                run_batch(batch)
            if probe is not c and probe.status == "missed SLO":
                c.status = "pruned"
                c.reason = f"pruned: the same accelerators miss the SLO even with the largest tiers (#{probe.index})"
                continue
            if not c.status:
                run_batch([c])
            if c.status == "meets SLO":
                found(c)
        self.feasible = sorted(feasible, key=lambda c: (c.usd_per_hour, c.index))

    def result(self, rate: float, slo: Slo, budget: float | None, groups: list[HardwareGroup],
               waiting: list[HardwareGroup]) -> Plan:
        """The plan: the winner, its alternatives, and every enumerated candidate's verdict."""
        feasible, candidates = self.feasible, self.candidates
        if feasible:
            winner = feasible[0]
            winner.status, winner.reason = "winner", "cheapest that meets the SLO" + (
                "" if winner.decided else " (not distinguishable from missing it)")
            chosen = {_choice(winner)}
            for c in feasible[1:]:
                if _choice(c) in chosen:
                    c.reason = "meets the SLO, but differs from a cheaper choice only in its eviction policy"
                    continue
                if len(chosen) > self.alternatives:
                    break
                chosen.add(_choice(c))
                c.status = "alternative"
                c.reason = f"meets the SLO; +${c.usd_per_hour - winner.usd_per_hour:,.2f}/h" + (
                    "" if c.decided else " (not distinguishable from missing the SLO)")
            for c in candidates:
                if c.status == "missed SLO" and c.usd_per_hour <= winner.usd_per_hour:
                    c.reason = "cheaper, but " + c.reason
        candidates.sort(key=lambda c: c.index)
        left = {id(g) for g in waiting}
        over = [g for g in groups if budget is not None and g.gpu_usd_per_hour > budget]
        later = [g for g in groups if id(g) in left]
        return Plan(rate=rate, offered_rate=self.offered, slo=slo, budget=budget, seeds=self.seeds,
                    candidates=candidates, simulations=self.simulations, invalid=self.invalid,
                    not_enumerated=sum(len(g.variants) for g in later),
                    not_enumerated_from=min((g.gpu_usd_per_hour for g in later), default=None),
                    over_budget_unpriced=sum(len(g.variants) for g in over))


def _hardware(c: Candidate) -> tuple:
    return pools.shape(c.resolved)


def _choice(c: Candidate) -> tuple:
    """What a team would buy: the accelerators and every tier's size, the eviction policy aside."""
    d = c.describe()
    return (_hardware(c), d["ddr"], d["nvme"], d["ceph"])


def _capacity(c: Candidate) -> tuple:
    """Bytes of every offload tier together (LMCache's or vLLM's native one), then the earliest candidate (the
    spec's own policy)."""
    tiers = c.resolved.lmcache.tiers if c.resolved.lmcache else []
    n = c.resolved.kv_offloading
    native = n.capacity_bytes * c.resolved.instances if n else 0
    return (sum(t.capacity_bytes * t.caches for t in tiers) + native, -c.index)


def _judge(c: Candidate, results: list[SimResult | SloMiss], targets: dict[str, float]) -> None:
    """Each SLO metric's mean over the seeds against its target, and whether its 95 % interval
    decides it (kvplan.sweep.confidence.classify): a candidate meets the SLO when every mean is
    within its target, and is marked not distinguishable when an interval straddles a target.
    A run stopped at a certain miss (one seed) missed: its percentile is at least the bound it found."""
    from ..sweep.confidence import classify, combine

    if isinstance(results[0], SloMiss):
        miss = c.stopped = results[0]
        c.measured[miss.key] = miss.at_least
        c.status = "missed SLO"
        c.reason = (f"{_label(miss.key)} >= {fmt_duration(miss.at_least)} > {fmt_duration(targets[miss.key])} "
                    f"(stopped: {miss.over:,} of {miss.requests:,} requests over it)")
        return

    verdicts = {}
    for key, target in targets.items():
        metric, pct = key.rsplit("_", 1)
        c.samples[key] = [getattr(getattr(res, metric), pct) for res in results]
        verdicts[key] = v = classify(c.samples[key], target)
        c.measured[key], c.ci95[key] = v.mean, v.ci95
    c.requests_per_s = sum(res.requests_per_s for res in results) / len(results)
    c.decided = len(results) < 2 or combine(list(verdicts.values())) != "undecided"
    missed = [k for k in targets if c.measured[k] > targets[k]]
    if missed:
        c.status = "missed SLO"
        c.reason = ", ".join(f"{_label(k)} {with_ci(c, k)} > {fmt_duration(targets[k])}" for k in missed)
        if not c.decided:
            c.reason += " (not distinguishable from meeting it)"
    else:
        c.status = "meets SLO"
        c.reason = "meets the SLO"
        if not c.decided:
            close = [k for k, v in verdicts.items() if v.outcome == "undecided"]
            c.reason += (" (not distinguishable from missing it: "
                         + ", ".join(f"{_label(k)} {with_ci(c, k)} vs {fmt_duration(targets[k])}" for k in close) + ")")


def with_ci(c: Candidate, key: str) -> str:
    """'290.1 ms' or, over several seeds, '290.1 ms ± 30.2 ms'; '>= 1.2 s' for a run stopped at a certain miss."""
    if c.stopped is not None:
        return f">= {fmt_duration(c.measured[key])}" if key == c.stopped.key else "-"
    return fmt_duration(c.measured[key]) + (f" ± {fmt_duration(c.ci95[key])}" if len(c.samples.get(key, [])) > 1 else "")


def runner_up_within_noise(winner: Candidate, runner_up: Candidate) -> list[str]:
    """The SLO keys on which the runner-up's per-seed values are not distinguishable from the
    winner's (paired over the same seeds); empty with one seed, where nothing is tested."""
    from ..sweep.confidence import compare

    return [k for k in winner.samples if len(winner.samples[k]) > 1 and k in runner_up.samples
            and not compare(winner.samples[k], runner_up.samples[k]).distinguishable]


def _label(key: str) -> str:
    metric, pct = key.rsplit("_", 1)
    return f"{pct} {metric.upper()}"


def rate_words(p: Plan) -> str:
    """'20 req/s', with headroom '20 req/s, judged with 25% headroom at 25 req/s', and with sessions the judged
    load's new sessions beside it, '(5.86 new sessions/s)': the planned load, requests first."""
    judged = f", judged with {p.headroom:.0%} headroom at {p.judged_rate:.3g} req/s" if p.headroom else ""
    sessions = f" ({p.session_rate:.4g} new sessions/s)" if p.session_rate is not None else ""
    return f"{p.rate:.3g} req/s{judged}{sessions}"


def winner_yaml(c: Candidate, result: Plan | None = None, base: Topology | None = None) -> str:
    """The winner as a spec file for `kvplan deploy`: human units, defaults left out, and a
    description that says what it is (kvplan.spec.written)."""
    import yaml

    from ..spec.written import human_mapping

    data = human_mapping(c.topo)
    measured = ", ".join(f"{_label(k)} {fmt_duration(v)}" for k, v in c.measured.items())
    choice = c.describe()
    what = (f"kvplan plan's cheapest topology for '{c.topo.name}'" + (f" at {rate_words(result)}" if result else "")
            + f": {choice['accelerator']}, ddr {choice['ddr']}, nvme {choice['nvme']}, ceph {choice['ceph']}, "
            f"eviction {choice['eviction']}; ${c.usd_per_hour:,.2f}/h; measured {measured}")
    if base is not None and base.ceph is not None and c.topo.ceph is None:
        what += "; the ceph tier and its cluster are left out: the SLO is met without them, for less"
    data["description"] = what
    data = {"name": data.pop("name"), "description": data.pop("description"), **data}
    header = f"# written by kvplan plan: ${c.usd_per_hour:,.2f}/h; {measured}\n"
    return header + yaml.safe_dump(data, sort_keys=False, width=1000)
