"""Capacity: the highest arrival rate at which a spec still meets its SLO, found by bisection.

The searched knob is the workload's load:

- synthetic workloads (chat, codegen, rag): `workload.arrivals.rate`, in requests per second; with
  sessions `workload.arrivals.session_rate`, new sessions per second, and each probe also measures the
  requests per second its workload offers, so that every answer is said in requests per second with the
  sessions per second beside it;
- replays of a trace or a per-request log: the replay speed, a multiple of the spec's own pace; speed x
  sets `workload.trace.time_scale` (`workload.replay.time_scale`) to the spec's time_scale / x (x2 replays
  twice as fast).

A *probe* runs the spec at one rate on MIN_SEEDS seeds, adding one at a time up to `seeds`
while it is undecided (kvplan.sweep.confidence): it *surely meets* the SLO when every target's
95 % interval over its seeds is at or below the target, *surely misses* it when one target's
interval is above it, and is *undecided* otherwise. The search starts from `low`/`high` when
given, else from the spec's own rate, doubling or halving until a probe that surely meets and
one that surely misses bracket the answer; then it bisects the gaps between the highest surely
met, the undecided probes (the noise band: more probes there cannot decide at these seeds) and
the lowest surely missed, until each gap is within `tolerance` (relative). Probe rates are
rounded to 4 significant digits, so the same search always probes the same specs and the run
cache serves a repeated search (or one sharing probes with a sweep) without simulating anything.

The answer is a rate with its 95 % interval: `low` (the highest rate surely met) to `high` (the
lowest surely missed), around the point estimate `rate` (the highest probe whose mean meets the
SLO, below every probe whose mean misses it). With one seed there is no interval: the values
decide as they are, the bracket is the plain bisection's, and `tested` is False. When even `low`
misses, or `high` still meets, the result says so (`outcome`) instead of inventing a rate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import Problem, SpecError
from ..spec import from_mapping, stages
from ..spec.overrides import Override, RecordsOverrides, recorded
from ..spec.topology import Topology
from .cache import RunCache, run_cached
from .executor import Task
from .confidence import Outcome, classify, combine, fmt_interval, rounded
from .result import METRICS, Stat, summarise
from .variants import apply

DEFAULT_HEADROOM = 0.25
"""`plan` judges candidates at 1.25 x the asked rate, so the asked load is at most 80 % of a load the winner
meets; `capacity` divides the limit it finds by 1.25 for the rate a spec can be planned for. 80 % is where
queueing starts to dominate: in an M/M/1 queue the mean wait is rho / (1 - rho) service times (L. Kleinrock,
Queueing Systems vol. 1, 1975, ch. 3): 1 at 50 % busy, 4 at 80 %, then 9 at 90 % and 19 at 95 %, so beyond
80 % a small swing in traffic multiplies the wait."""
MAX_STEPS = 10
"""Doublings (or halvings) from the start before giving up on finding the other side (x1024)."""


class SloUsageError(ValueError):
    """An --slo flag that is not KEY=VALUE (the CLI's usage error, exit 2)."""


@dataclass(frozen=True)
class Knob:
    """What a rate means for this spec, and how to set it."""

    path: str
    """workload.arrivals.rate, workload.arrivals.session_rate, workload.trace.time_scale or workload.replay.time_scale."""
    start: float
    """The spec's own rate (1/s), or 1.0 for a trace or log (its own pace)."""
    time_scale: float | None
    """The spec's trace or log time_scale (None for workloads with an arrival rate)."""

    sessions: bool = False
    """The rate counts new sessions (chat with sessions), each bringing several requests."""

    @classmethod
    def of(cls, topo: Topology) -> "Knob":
        w = topo.workload
        unrated = stages.unrated(w, "kvplan capacity", "search an open loop (a spec without stages or "
                                 "arrivals.concurrency), or simulate each load with kvplan simulate")
        if unrated is not None:
            raise SpecError([unrated])
        if w.kind == "trace":
            return cls("workload.trace.time_scale", 1.0, w.trace.time_scale)
        if w.kind == "replay":
            return cls("workload.replay.time_scale", 1.0, w.replay.time_scale)
        if w.sessions is not None:
            return cls("workload.arrivals.session_rate", w.arrivals.starts_per_s, None, True)
        return cls("workload.arrivals.rate", float(w.arrivals.rate), None)

    @property
    def meaning(self) -> str:
        if self.time_scale is not None:
            return "the replay speed"
        return "new sessions/s; each probe's requests/s measured on its workload" if self.sessions else "requests/s"

    @property
    def unit(self) -> str:
        return "x" if self.time_scale is not None else "/s"

    def value(self, rate: float) -> float:
        return rate if self.time_scale is None else self.time_scale / rate

    def fmt_probe(self, p: "Probe") -> str:
        """A probe's rate: '12 req/s', 'x2', or with sessions '12.3 req/s (2.5 sessions/s)'."""
        if self.sessions and p.requests_per_s is not None:
            return f"{p.requests_per_s:.3g} req/s ({p.rate:g} sessions/s)"
        return self.fmt(p.rate)

    def fmt(self, rate: float) -> str:
        if self.time_scale is not None:
            return f"x{rate:g}"
        return f"{rate:g} sessions/s" if self.sessions else f"{rate:g} req/s"

    def fmt_interval(self, rate: float, low: float, high: float) -> str:
        """'7.0/s (6.0\u20138.5/s)' or 'x2.1 (x1.9\u2013x2.4)': rounded to what the interval supports."""
        w = high - low
        if self.time_scale is not None:
            return f"x{rounded(rate, w)} (x{rounded(low, w)}\u2013x{rounded(high, w)})"
        return fmt_interval(rate, low, high, " req/s")

    def parse(self, text: str, flag: str) -> float:
        """A --low/--high value: a rate ('2/s', '120/min'; with sessions '2sessions/s') or, for a trace, a speed
        ('2', '2x'). A bare number is a speed for a trace, and refused for a rate (is it per second or per minute?)."""
        from ..units import is_bare_number, parse_rate, parse_session_rate

        if self.time_scale is None and is_bare_number(text):
            example = f"{text.strip()}sessions/s" if self.sessions else f"{text.strip()}/s"
            raise SloUsageError(f"{flag} '{text}' is a bare number: write the unit, e.g. {flag} {example}")
        try:
            if self.time_scale is not None:
                rate = float(text.strip().removeprefix("x").removesuffix("x"))
            else:
                rate = parse_session_rate(text) if self.sessions else parse_rate(text)
        except Exception as exc:
            what = "a rate such as 2/s or 120/min" if self.time_scale is None \
                else "a replay speed such as 2 or 0.5x (this spec replays a trace or log)"
            why = getattr(exc, "message", lambda: "")() if self.time_scale is None else ""
            raise SloUsageError(f"{flag} '{text}' is not {what}" + (f": {why}" if why else "")) from None
        if not rate > 0:
            raise SloUsageError(f"{flag} must be above 0, not '{text}'")
        return rate


def parse_headroom_arg(text: str, flag: str = "--headroom") -> float:
    """'25%' or '0.25' -> 0.25; a SpecError naming the flag otherwise (0 is allowed: judge at the asked rate)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(%?)\s*", text)
    value = None if m is None else float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    if value is None or value > 10:
        raise SpecError([Problem(flag, "not a headroom: the share added to the asked rate before judging", text,
                                 "a percentage from 0% to 1000% or a fraction from 0 to 10",
                                 f"write it like {flag} 25% (or {flag} 0 to plan at the edge)")])
    return value


def _round(x: float) -> float:
    return float(f"{x:.4g}")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Probe(_Model):
    rate: float
    """Requests per second (synthetic workloads), new sessions per second (with sessions) or replay speed (traces)."""
    requests_per_s: float | None = None
    """With sessions: the requests per second the probe's workload offers (its requests over their arrivals' span, on
    the first seed); None otherwise (`rate` is requests per second, or a replay speed)."""
    spec_hash: str
    met: bool
    """Every SLO target holds at the mean over seeds (the point estimate)."""
    metrics: dict[str, Stat | None]
    """The same metrics as a sweep point (kvplan.sweep.result.METRICS)."""
    verdict: Outcome = "met"
    """met: every target's 95 % interval is at or below it; missed: one target's interval is above
    it; undecided: neither, at the most seeds allowed (the noise band). With one seed, as `met` says."""
    seeds: list[int] = []
    """The seeds this probe ran (more when fewer could not decide it)."""


class CapacityResult(RecordsOverrides, _Model):
    name: str
    spec_hash: str
    knob: str
    """The spec path the search sets: workload.arrivals.rate, workload.arrivals.session_rate (rates are then new
    sessions per second, and each probe has its requests_per_s) or workload.trace.time_scale."""
    unit: Literal["/s", "x"]
    """/s: rates are per second; x: rates are replay speeds of the trace."""
    slo: dict[str, float]
    """The targets, in seconds."""
    seeds: list[int]
    """The most seeds a probe may run (a probe starts with MIN_SEEDS of them)."""
    tolerance: float
    outcome: Literal["found", "below_low", "above_high"]
    """found: `rate` is bracketed by `low` and `high`; below_low: even the lowest rate probed
    missed it; above_high: even the highest rate probed met it."""
    rate: float | None
    """The point estimate: the highest probe between `low` and `high` whose mean over seeds met
    the SLO, below every one whose mean missed it (None when none met it)."""
    met: Probe | None
    """The highest probe that surely met the SLO (the interval's low end; None when none did)."""
    missed: Probe | None
    """The lowest probe that surely missed the SLO (the interval's high end; None when none did)."""
    probes: list[Probe]
    """Every probe, in the order run."""
    low: float | None = None
    high: float | None = None
    """The capacity's 95 % interval: the highest rate surely met and the lowest surely missed
    (with one seed, the bracket of the point estimates: no interval, `tested` is False)."""
    noise_band: list[float] = []
    """Rates probed inside the interval whose SLO stayed undecided at the most seeds."""
    tested: bool = True
    """False with one seed: no probe had an interval; the answer was not tested against noise."""
    headroom: float = 0.0
    """The share kept free (--headroom): the spec can be planned for its capacity / (1 + headroom)."""
    planned_rate: float | None = None
    """`rate` / (1 + headroom): the highest rate to plan this spec for with that headroom (None with no `rate`)."""
    planned_low: float | None = None
    planned_high: float | None = None
    """`low` and `high` / (1 + headroom): the planned rate's interval."""


OnProbe = Callable[[Probe, int], None]
"""Called as on_probe(probe, simulated) after each probe; simulated = runs not found in the cache."""

MIN_SEEDS = 2
"""Seeds a probe starts with; it adds one at a time, up to --seeds, while undecided."""
DEFAULT_SEEDS = 3
"""--seeds by default: enough for an interval, few enough that a first search stays fast."""


def search(spec_path: str | Path, slo: dict[str, float] | None = None, *, seeds: int = DEFAULT_SEEDS,
           first_seed: int | None = None, low: str | None = None, high: str | None = None,
           tolerance: float = 0.05, workers: int = 1, ray: str | None = None, cache: RunCache | None = None,
           on_probe: OnProbe | None = None, headroom: float = DEFAULT_HEADROOM,
           overrides: Iterable[Override] = ()) -> tuple[CapacityResult, int]:
    """Search the highest rate meeting `slo` (default: the spec's slo) for the spec file with the --set `overrides`
    applied; returns it and the runs simulated. The result also says the rate the spec can be planned for with
    `headroom` kept free (capacity / (1 + headroom))."""
    from ..validation import from_mapping as validated, read

    spec_path, overrides = Path(spec_path), tuple(overrides)
    data, _, _ = read(spec_path, overrides)
    base = validated(data, spec_path.parent, str(spec_path), overrides)
    targets = slo if slo else base.slo.targets()
    if not targets:
        raise SpecError([Problem("slo", "there is no SLO to search against",
                                 fix="pass one or more --slo KEY=VALUE (e.g. --slo ttft_p99=500ms), or set slo: in the spec")],
                        str(spec_path))
    if not 0 < tolerance < 1:
        raise SloUsageError(f"--tolerance must be between 0 and 1 (a share of the rate), not {tolerance}")
    if seeds < 1:
        raise SloUsageError(f"--seeds must be at least 1, not {seeds}")
    if not 0 <= headroom <= 10:
        raise SloUsageError(f"--headroom must be between 0 and 10 (0 % to 1000 %), not {headroom}")
    knob = Knob.of(base)
    lo_rate = knob.parse(low, "--low") if low is not None else None
    hi_rate = knob.parse(high, "--high") if high is not None else None
    if lo_rate is not None and hi_rate is not None and lo_rate >= hi_rate:
        raise SloUsageError(f"--low ({low}) must be below --high ({high})")
    first = base.workload.seed if first_seed is None else first_seed
    seed_list = [first + i for i in range(seeds)]
    probes: dict[float, Probe] = {}
    simulated = 0

    def probe(rate: float) -> Probe:
        nonlocal simulated
        rate = _round(rate)
        if rate in probes:
            return probes[rate]
        try:
            spec = from_mapping(apply(data, knob.path, knob.value(rate)), base_dir=spec_path.parent)
        except SpecError as exc:
            raise exc.with_source(f"{spec_path} at {knob.fmt(rate)}") from None
        results, fresh = [], 0
        n = min(MIN_SEEDS, seeds)
        while True:      # add seeds while the SLO is undecided, up to --seeds
            more, new = run_cached([Task(spec, s) for s in seed_list[len(results):n]], cache, workers=workers, ray=ray)
            results += more
            fresh += new
            verdict = _verdict(results, targets)
            if verdict != "undecided" or n >= seeds:
                break
            n += 1
        simulated += fresh
        metrics = summarise(results)
        met = all(metrics[key] is not None and metrics[key].mean <= target for key, target in targets.items())
        probes[rate] = p = Probe(rate=rate, spec_hash=spec.spec_hash(), met=met, metrics=metrics, verdict=verdict,
                                 seeds=seed_list[:n], requests_per_s=offered(spec, seed_list[0]) if knob.sessions else None)
        if on_probe:
            on_probe(p, fresh)
        return p

    def bracket() -> tuple[Probe | None, Probe | None, list[Probe]]:
        """The lowest probe surely missed, the highest surely met below it, and the undecided between."""
        ordered = sorted(probes.values(), key=lambda p: p.rate)
        hi = next((p for p in ordered if p.verdict == "missed"), None)
        below = [p for p in ordered if hi is None or p.rate < hi.rate]
        lo = next((p for p in reversed(below) if p.verdict == "met"), None)
        band = [p for p in below if p.verdict == "undecided" and (lo is None or p.rate > lo.rate)]
        return lo, hi, band

    def done(outcome: str) -> tuple[CapacityResult, int]:
        lo, hi, band = bracket()
        if outcome == "below_low":     # the lowest probe, surely missed or missed at the mean
            lo, hi = None, min(probes.values(), key=lambda p: p.rate)
        inside = sorted((p for p in probes.values() if (lo is None or p.rate >= lo.rate)
                         and (hi is None or p.rate <= hi.rate)), key=lambda p: p.rate)
        first_miss = next((p.rate for p in inside if not p.met), None)
        estimate = [p for p in inside if p.met and (first_miss is None or p.rate < first_miss)]
        rate = estimate[-1].rate if estimate and outcome != "below_low" else None
        low = lo.rate if lo is not None and outcome == "found" else None
        high = hi.rate if hi is not None and outcome == "found" else None

        def planned(x: float | None) -> float | None:
            return None if x is None else x / (1 + headroom)
        return CapacityResult(name=base.name, spec_hash=base.spec_hash(), knob=knob.path, unit=knob.unit, slo=targets,
                              seeds=seed_list, tolerance=tolerance, outcome=outcome, rate=rate, met=lo, missed=hi,
                              probes=list(probes.values()),
                              low=low, high=high, headroom=headroom, planned_rate=planned(rate),
                              planned_low=planned(low), planned_high=planned(high),
                              noise_band=[p.rate for p in band] if outcome == "found" else [],
                              tested=seeds > 1, overrides=recorded(overrides)), simulated

    if lo_rate is not None:
        p = probe(lo_rate)
        if p.verdict == "missed" or (p.verdict == "undecided" and not p.met):
            return done("below_low")
    if hi_rate is not None:
        p = probe(hi_rate)
        if p.verdict == "met" or (p.verdict == "undecided" and p.met):
            return done("above_high")
    if not probes:
        probe(knob.start)
    for _ in range(MAX_STEPS):      # up, until a probe surely misses
        lo, hi, band = bracket()
        if hi is not None or hi_rate is not None:
            break
        probe(max(probes) * 2)
    else:
        if bracket()[1] is None:
            return done("above_high")
    for _ in range(MAX_STEPS):      # down, until a probe surely meets
        lo, hi, band = bracket()
        if lo is not None or lo_rate is not None:
            break
        probe(min(probes) / 2)          # below the lowest probe so far (the start, when it surely missed)
    else:
        if bracket()[0] is None:
            return done("below_low")
    for _ in range(4 * MAX_STEPS):  # bisect the gaps on either side of the noise band
        lo, hi, band = bracket()
        if lo is None or hi is None:
            break
        edges = [lo.rate, *(p.rate for p in band), hi.rate]
        gaps = [(a, b) for a, b in ((edges[0], edges[1]), (edges[-2], edges[-1]))
                if b - a > tolerance * lo.rate and a < _round((a + b) / 2) < b]
        if not gaps:
            break
        a, b = max(gaps, key=lambda g: g[1] - g[0])
        probe((a + b) / 2)
    lo, hi, _ = bracket()
    if hi is None:
        return done("above_high")
    if lo is None and not any(p.met for p in probes.values() if p.rate < hi.rate):
        return done("below_low")
    return done("found")


def offered(spec: Topology, seed: int) -> float:
    """Requests per second the spec's workload offers on `seed`: its requests over the span of their arrivals."""
    from ..resolve import resolve
    from ..sim import stages as generated

    reqs = generated.requests(resolve(spec), seed)
    span = reqs[-1].arrival if reqs else 0.0
    return len(reqs) / span if span > 0 else 0.0


def headline(result: CapacityResult) -> list[str]:
    """The answer in words: the rate with its interval, how many seeds decided it, how to ask for more. Rates are
    requests per second; with sessions, each with the new sessions per second that offer it."""
    knob = Knob(result.knob, 1.0, 1.0 if result.unit == "x" else None, result.knob.endswith("session_rate"))
    fmt, most = rate_words(result), len(result.seeds)
    more = f"--seeds {max(DEFAULT_SEEDS, 2 * most)}"
    if result.outcome == "above_high":
        lines = [f"the SLO is still met at {fmt(result.rate)}, the highest rate probed: raise --high to search further"]
    elif result.outcome == "below_low":
        lines = [f"the SLO is missed even at {fmt(result.probes[0].rate if result.missed is None else result.missed.rate)}, "
                 "the lowest rate probed: lower --low, relax the SLO or add capacity"]
    elif not result.tested:
        return [f"highest sustainable rate: {fmt(result.rate)} (met at {fmt(result.low)}, missed at {fmt(result.high)}; "
                f"tolerance {result.tolerance:.0%})",
                f"1 seed per probe: no interval, so the rate is not tested against noise; {more} to test it",
                *planned_line(result)]
    else:
        seeds = sorted({len(p.seeds) for p in result.probes})
        used = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}"
        lines = [f"highest sustainable rate: {_interval(knob, result)}, 95 %, "
                 f"{used} seeds per probe",
                 f"  surely met at {fmt(result.low)}, surely missed at {fmt(result.high)}"
                 + (f"; undecided at {', '.join(fmt(r) for r in result.noise_band)} (within the noise at {most} seeds)"
                    if result.noise_band else f"; tolerance {result.tolerance:.0%}")]
        if result.noise_band:
            lines.append(f"  the interval is the noise band at {most} seeds: {more} narrows it")
            return lines + planned_line(result)
    if not result.tested:
        lines.append(f"1 seed per probe: not tested against noise; {more} to test it")
    return lines + planned_line(result)


def planned_line(result: CapacityResult) -> list[str]:
    """The rate to plan for with the headroom kept free, in the limit's own terms (none without a limit)."""
    if result.planned_rate is None or result.outcome != "found":
        return []
    knob = Knob(result.knob, 1.0, 1.0 if result.unit == "x" else None, result.knob.endswith("session_rate"))
    h = f"{result.headroom:.0%} headroom"
    if knob.sessions:                # requests/s grow with sessions/s: the measured limit's share, sessions beside
        req = {p.rate: p.requests_per_s for p in result.probes}.get(result.rate)
        at = ((f"{req / (1 + result.headroom):.3g} req/s" if req is not None else "? req/s")
              + f" ({result.planned_rate:.3g} new sessions/s)")
    elif result.tested and result.planned_low is not None and result.planned_high is not None:
        at = knob.fmt_interval(result.planned_rate, result.planned_low, result.planned_high)
    else:
        at = knob.fmt(float(f"{result.planned_rate:.3g}"))
    return [f"with {h} (--headroom) it can be planned for {at}: the limit / {1 + result.headroom:g}"]


def rate_words(result: CapacityResult) -> Callable[[float | None], str]:
    """How a rate of this search reads: '12 req/s', 'x2' or, with sessions, '12.3 req/s (2.5 sessions/s)'."""
    knob = Knob(result.knob, 1.0, 1.0 if result.unit == "x" else None, result.knob.endswith("session_rate"))
    measured = {p.rate: p.requests_per_s for p in result.probes}

    def words(rate: float | None) -> str:
        if rate is None:
            return "-"
        if not knob.sessions:
            return knob.fmt(rate)
        req = measured.get(rate)
        return (f"{req:.3g} req/s" if req is not None else "? req/s") + f" ({rate:g} sessions/s)"
    return words


def _interval(knob: Knob, result: CapacityResult) -> str:
    """The answer with its 95 % interval, in requests per second (with sessions: measured, sessions/s beside)."""
    if not knob.sessions:
        return knob.fmt_interval(result.rate, result.low, result.high)
    req = {p.rate: p.requests_per_s or 0.0 for p in result.probes}
    return (fmt_interval(req[result.rate], req[result.low], req[result.high], " req/s")
            + f" at {fmt_interval(result.rate, result.low, result.high, ' new sessions/s')}")


def _verdict(results: list, targets: dict[str, float]) -> Outcome:
    """The probe's runs (one per seed) against every target: met, missed or undecided at 95 %."""
    verdicts = []
    for key, target in targets.items():
        values = [METRICS[key](r) for r in results]
        if any(v is None for v in values):
            return "missed"
        verdicts.append(classify(values, target))
    return combine(verdicts)


__all__ = ["CapacityResult", "DEFAULT_HEADROOM", "DEFAULT_SEEDS", "Knob", "MAX_STEPS", "MIN_SEEDS", "OnProbe", "Probe",
           "SloUsageError", "headline", "offered", "parse_headroom_arg", "planned_line", "rate_words", "search"]
