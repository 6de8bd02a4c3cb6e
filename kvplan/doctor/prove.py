"""Proof: a proposed fix simulated on the case's own seeds, and judged against the noise.

The changed spec is the case's spec mapping with each change applied (kvplan.sweep.variants.apply, the
same as `--vary`), validated and resolved like any spec: a change the rules of the real stack refuse is
reported with the loader's reason, never simulated. It runs on the seeds the case ran, so each seed's
workload is the same before and after and the paired difference (kvplan.sweep.confidence.compare)
removes the noise both see alike. Latencies are paired on the log scale (ln after - ln before): their
noise is relative (one seed's p99 is 7 s where another's is 21 s), so a fix that cuts every seed's p99
tenfold is distinguishable even where the seeds' absolute differences vary widely. Runs go through the run cache, so a repeated doctor simulates nothing
it has simulated before.

Verdicts, for the metric the fix is for:

- improve: *helps* when the difference's 95 % interval excludes 0 on the better side, *hurts* on the
  worse side, *within noise* otherwise;
- save: *saves* when the bill falls and the metric is not worse beyond the noise; *costs more* when the
  bill does not fall; *hurts* when the metric is worse beyond the noise.

A fix that would be kept but makes another SLO target worse beyond the noise, and misses it, *breaks the
SLO* and is not kept (halving the batch for TPOT can leave requests queueing for minutes).

With one seed there is no interval: the verdict is *untested*, and the fix is not kept.
"""

from __future__ import annotations

import math
from typing import Sequence

from ..errors import SpecError
from ..resolve import resolve
from ..spec import from_mapping
from ..sweep.confidence import compare, confidence
from ..sweep.variants import apply
from .case import METRICS, Case
from .finding import Change, Fix, Proof, SloCheck


def changed_mapping(case: Case, changes: Sequence[Change]) -> dict:
    """The case's spec mapping with the changes applied (units as the file wrote them)."""
    data = case.data
    for change in changes:
        data = apply(data, change.path, change.value)
    return data


def changed(case: Case, changes: Sequence[Change]):
    """The case's spec with the changes applied, as (Topology, Resolved); SpecError when it is refused."""
    topo = from_mapping(changed_mapping(case, changes), base_dir=case.base_dir)
    return topo, resolve(topo)


def prove(case: Case, fix: Fix, cache=None, workers: int = 1, memo: dict | None = None) -> Proof:
    """`fix` simulated on the case's seeds and judged; `memo` (one diagnosis's) keeps each changed spec's runs, so
    the same changes judged on two metrics (a tier removed for TTFT and for TPOT) are simulated once."""
    from ..sweep.cache import run_cached
    from ..sweep.executor import Task

    key = tuple(sorted((c.path, str(c.value)) for c in fix.changes))
    if memo is not None and key in memo:
        topo, resolved, runs = memo[key]
        return judge(case, fix, topo, resolved, runs)
    try:
        topo, resolved = changed(case, fix.changes)
    except SpecError as exc:
        metric = METRICS[fix.metric]
        return Proof(metric=fix.metric, label=metric.label, better=metric.better, unit=metric.unit, seeds=case.seeds,
                     before=case.mean(fix.metric) if case.results else 0.0, usd_per_hour_before=case.usd_per_hour,
                     nodes_before=case.resolved.nodes, after=0.0, after_ci95=0.0, difference=0.0, difference_ci95=0.0,
                     usd_per_hour_after=None, verdict="refused",
                     refused="; ".join(p.message + (f" ({p.fix})" if p.fix else "") for p in exc.problems))
    runs, _ = run_cached([Task(topo, seed) for seed in case.seeds], cache, workers=workers)
    if memo is not None:
        memo[key] = (topo, resolved, list(runs))
    return judge(case, fix, topo, resolved, list(runs))


def judge(case: Case, fix: Fix, topo, resolved, runs: list) -> Proof:
    """The proof of `fix` from the changed spec's runs (one per seed of the case, in its order)."""
    from ..cost import cost_of

    metric = METRICS[fix.metric]
    before = [metric.value(r, case.resolved) for r in case.results]
    after = [metric.value(r, resolved) for r in runs]
    log = metric.unit == "s" and min(before + after) > 0
    diff = compare([math.log(v) for v in before], [math.log(v) for v in after]) if log else compare(before, after)
    try:
        usd_after = cost_of(topo, resolved, runs).usd_per_hour
    except SpecError:
        usd_after = None
    mean_after, half_after = confidence(after)
    verdict = _verdict(fix, metric.better, diff, case.usd_per_hour, usd_after)
    broken = _broken(case, runs, fix.metric)
    if broken and verdict in ("helps", "saves"):
        verdict = "breaks the SLO"
    return Proof(metric=fix.metric, label=metric.label, better=metric.better, unit=metric.unit, seeds=case.seeds,
                 before=sum(before) / len(before), usd_per_hour_before=case.usd_per_hour, after=mean_after,
                 after_ci95=half_after, scale="log" if log else "linear", difference=diff.mean, difference_ci95=diff.ci95,
                 usd_per_hour_after=usd_after, verdict=verdict, broken=broken, slo=slo_checks(case, runs),
                 nodes_before=case.resolved.nodes, nodes_after=resolved.nodes)


def slo_checks(case: Case, runs) -> list[SloCheck]:
    """Every SLO target of the case's spec on `runs` (the p99s as the SimResult gives them), judged on the log scale."""
    from .tail import against

    checks = []
    for key, target in case.resolved.slo.targets().items():
        name, pct = key.rsplit("_", 1)
        values = [getattr(getattr(r, name), pct) for r in runs]
        verdict = against(values, target)
        mean, half = confidence(values)
        checks.append(SloCheck(key=key, target=target, after=mean, after_ci95=half, met=mean <= target,
                               outcome=verdict.outcome))
    return checks


def _broken(case: Case, runs, judged: str) -> list[str]:
    """The SLO targets other than the judged metric that the change makes worse beyond the noise (paired, log scale)
    and that it then misses: a fix for TPOT that wrecks TTFT is no fix."""
    from ..units import fmt_duration

    broken = []
    for key, target in case.resolved.slo.targets().items():
        if key == judged:
            continue
        name, pct = key.rsplit("_", 1)
        before = [getattr(getattr(r, name), pct) for r in case.results]
        after = [getattr(getattr(r, name), pct) for r in runs]
        if min(before + after) <= 0:
            continue
        diff = compare([math.log(v) for v in before], [math.log(v) for v in after])
        mean_after = sum(after) / len(after)
        if diff.distinguishable and diff.mean > 0 and mean_after > target:
            broken.append(f"{key} {fmt_duration(sum(before) / len(before))} -> {fmt_duration(mean_after)} "
                          f"(target {fmt_duration(target)})")
    return broken


def _verdict(fix: Fix, better: str, diff, usd_before, usd_after) -> str:
    if not diff.tested:
        return "untested"
    gain = -diff.mean if better == "lower" else diff.mean
    worse = diff.distinguishable and gain < 0
    if fix.goal == "save":
        if usd_before is None or usd_after is None or usd_after >= usd_before:
            return "costs more"
        return "hurts" if worse else "saves"
    if worse:
        return "hurts"
    return "helps" if diff.distinguishable else "within noise"


__all__ = ["changed", "changed_mapping", "judge", "prove", "slo_checks"]
