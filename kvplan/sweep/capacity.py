"""Capacity: the highest arrival rate at which a spec still meets its SLO, found by bisection.

The searched knob is the workload's load:

- synthetic workloads (chat, codegen, rag): `workload.arrivals.rate`, in requests per second
  (new sessions per second for chat with sessions);
- trace replays: the replay speed, a multiple of the spec's own pace; speed x sets
  `workload.trace.time_scale` to the spec's time_scale / x (x2 replays twice as fast).

A *probe* runs the spec at one rate with each seed. It *meets* the SLO when every target holds
at the mean over seeds (e.g. the mean of the seeds' TTFT p99 is at most `ttft_p99`). The search
starts from `low`/`high` when given, else from the spec's own rate, doubling or halving until a
probe that meets the SLO and one that misses it bracket the answer; then it bisects until the
two are within `tolerance` (relative) of each other. Probe rates are rounded to 4 significant
digits, so the same search always probes the same specs and the run cache serves a repeated
search (or one sharing probes with a sweep) without simulating anything.

The answer is the rate of the highest probe that met the SLO; the lowest probe that missed it
is reported beside it. When even `low` misses, or `high` still meets, the result says so
(`outcome`) instead of inventing a rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict

from ..errors import Problem, SpecError
from ..spec import from_mapping, read_yaml
from ..spec.topology import Topology
from .cache import RunCache, run_cached
from .executor import Task
from .result import Stat, summarise
from .variants import apply

MAX_STEPS = 10
"""Doublings (or halvings) from the start before giving up on finding the other side (x1024)."""


class SloUsageError(ValueError):
    """An --slo flag that is not KEY=VALUE (the CLI's usage error, exit 2)."""


@dataclass(frozen=True)
class Knob:
    """What a rate means for this spec, and how to set it."""

    path: str
    """workload.arrivals.rate or workload.trace.time_scale."""
    start: float
    """The spec's own rate (1/s), or 1.0 for a trace (its own pace)."""
    time_scale: float | None
    """The spec's trace time_scale (None for synthetic workloads)."""

    sessions: bool = False
    """The rate counts new sessions (chat with sessions), each bringing several requests."""

    @classmethod
    def of(cls, topo: Topology) -> "Knob":
        w = topo.workload
        if w.kind == "trace":
            return cls("workload.trace.time_scale", 1.0, w.trace.time_scale)
        return cls("workload.arrivals.rate", float(w.arrivals.rate), None, w.sessions is not None)

    @property
    def meaning(self) -> str:
        if self.time_scale is not None:
            return "the trace's replay speed"
        return "new sessions/s" if self.sessions else "arrivals/s"

    @property
    def unit(self) -> str:
        return "x" if self.time_scale is not None else "/s"

    def value(self, rate: float) -> float:
        return rate if self.time_scale is None else self.time_scale / rate

    def fmt(self, rate: float) -> str:
        return f"x{rate:g}" if self.time_scale is not None else f"{rate:g}/s"

    def parse(self, text: str, flag: str) -> float:
        """A --low/--high value: a rate ('2/s', '120/min', '2') or, for a trace, a speed ('2', '2x')."""
        from ..units import parse_rate

        try:
            if self.time_scale is not None:
                rate = float(text.strip().removeprefix("x").removesuffix("x"))
            else:
                rate = float(text) if _is_number(text) else parse_rate(text)
        except Exception:
            what = "a replay speed such as 2 or 0.5x (this spec replays a trace)" if self.time_scale is not None \
                else "a rate such as 2/s or 120/min"
            raise SloUsageError(f"{flag} '{text}' is not {what}") from None
        if not rate > 0:
            raise SloUsageError(f"{flag} must be above 0, not '{text}'")
        return rate


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _round(x: float) -> float:
    return float(f"{x:.4g}")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Probe(_Model):
    rate: float
    """Requests per second (synthetic workloads) or replay speed (traces)."""
    spec_hash: str
    met: bool
    """Every SLO target holds at the mean over seeds."""
    metrics: dict[str, Stat | None]
    """The same metrics as a sweep point (kvplan.sweep.result.METRICS)."""


class CapacityResult(_Model):
    name: str
    spec_hash: str
    knob: str
    """The spec path the search sets: workload.arrivals.rate or workload.trace.time_scale."""
    unit: Literal["/s", "x"]
    """/s: rates are arrivals per second; x: rates are replay speeds of the trace."""
    slo: dict[str, float]
    """The targets, in seconds."""
    seeds: list[int]
    tolerance: float
    outcome: Literal["found", "below_low", "above_high"]
    """found: `rate` met the SLO and `missed` (within tolerance above it) did not; below_low: even
    the lowest rate probed missed it; above_high: even the highest rate probed met it."""
    rate: float | None
    """The highest rate probed that met the SLO (None when none did)."""
    met: Probe | None
    missed: Probe | None
    """The lowest rate probed that missed the SLO (None when none did)."""
    probes: list[Probe]
    """Every probe, in the order run."""


OnProbe = Callable[[Probe, int], None]
"""Called as on_probe(probe, simulated) after each probe; simulated = runs not found in the cache."""


def search(spec_path: str | Path, slo: dict[str, float] | None = None, *, seeds: int = 1,
           first_seed: int | None = None, low: str | None = None, high: str | None = None,
           tolerance: float = 0.05, workers: int = 1, ray: str | None = None, cache: RunCache | None = None,
           on_probe: OnProbe | None = None) -> tuple[CapacityResult, int]:
    """Search the highest rate meeting `slo` (default: the spec's slo); returns it and the runs simulated."""
    spec_path = Path(spec_path)
    data = read_yaml(spec_path)
    base = from_mapping(data, base_dir=spec_path.parent, source=str(spec_path))
    targets = slo if slo else base.slo.targets()
    if not targets:
        raise SpecError([Problem("slo", "there is no SLO to search against",
                                 fix="pass one or more --slo KEY=VALUE (e.g. --slo ttft_p99=500ms), or set slo: in the spec")],
                        str(spec_path))
    if not 0 < tolerance < 1:
        raise SloUsageError(f"--tolerance must be between 0 and 1 (a share of the rate), not {tolerance}")
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
        results, fresh = run_cached([Task(spec, s) for s in seed_list], cache, workers=workers, ray=ray)
        simulated += fresh
        metrics = summarise(results)
        met = all(metrics[key] is not None and metrics[key].mean <= target for key, target in targets.items())
        probes[rate] = p = Probe(rate=rate, spec_hash=spec.spec_hash(), met=met, metrics=metrics)
        if on_probe:
            on_probe(p, fresh)
        return p

    def done(outcome: str, met: Probe | None, missed: Probe | None) -> tuple[CapacityResult, int]:
        return CapacityResult(name=base.name, spec_hash=base.spec_hash(), knob=knob.path, unit=knob.unit, slo=targets,
                              seeds=seed_list, tolerance=tolerance, outcome=outcome,
                              rate=met.rate if met else None, met=met, missed=missed,
                              probes=list(probes.values())), simulated

    lo = hi = None
    if lo_rate is not None:
        lo = probe(lo_rate)
        if not lo.met:
            return done("below_low", None, lo)
    if hi_rate is not None:
        hi = probe(hi_rate)
        if hi.met:
            return done("above_high", hi, None)
    if lo is None and hi is None:
        start = probe(knob.start)
        lo, hi = (start, None) if start.met else (None, start)
    for _ in range(MAX_STEPS):
        if hi is not None:
            break
        p = probe(lo.rate * 2)
        lo, hi = (p, None) if p.met else (lo, p)
    else:
        if hi is None:
            return done("above_high", lo, None)
    for _ in range(MAX_STEPS):
        if lo is not None:
            break
        p = probe(hi.rate / 2)
        lo, hi = (p, hi) if p.met else (None, p)
    else:
        if lo is None:
            return done("below_low", None, hi)
    while hi.rate - lo.rate > tolerance * lo.rate:
        mid = _round((lo.rate + hi.rate) / 2)
        if not lo.rate < mid < hi.rate:
            break
        p = probe(mid)
        if p.met:
            lo = p
        else:
            hi = p
    return done("found", lo, hi)


__all__ = ["CapacityResult", "Knob", "MAX_STEPS", "OnProbe", "Probe", "SloUsageError", "search"]
