"""Ranking fixes by what they cost, and the one combination `--write` writes, simulated as written.

A missed SLO usually has several fixes: more instances, a larger batch, a faster or larger tier, and, as
`simulate --ablate` shows, sometimes no tier at all (a slow tier that every store and retrieve waits on).
Besides the rules' fixes, every finding about a missed SLO target (`long-ttft-tail`, `slow-decode`) is
given the tier candidates that no finding proposes already: each offload tier removed, and the dearest
tier that served any prompt tokens at half its size (`tier_fixes`; one halved tier bounds the extra runs),
so that removing or shrinking a tier is always weighed, and the same accelerators split into prefill and decode
pools, or merged back (`shape_fixes`, kvplan.doctor.disaggregation), so that whether disaggregation pays is
too. They are proven like any fix.

When an SLO target is missed, `ranking` orders the proven fixes of every finding (a faster disk for a
saturated link is a fix for the tail too): first the ones whose simulated runs meet every SLO target (on
the mean of the seeds), cheapest bill first, then the largest headroom; after them the ones that help an
SLO target's metric beyond the noise without meeting the SLO. A fix that is refused, untested, or neither
meets the SLO nor helps on it is left out.

`written` is what `--write` applies: the cheapest fix that meets the SLO (or, when none does, each finding's
best kept fix, as `diagnose.chosen` picks them), plus the best kept fix of every finding that is not about
the SLO and does not clash with it (`overlaps`: the same path, or a path in a tier it removes). One fix is
written with its own proof. Several are simulated together on the same seeds; the combination is written
only when each improvement still helps its own metric, no saving makes its metric worse, and, where the
first fix met the SLO, the combination meets it too; otherwise the single first fix is written, and the
reason is given.
"""

from __future__ import annotations

import math

from ..errors import SpecError
from .case import METRICS, Case
from .disaggregation import shape_fixes
from .finding import Change, Diagnosis, Finding, Fix, Proof, Ranked

SLO_FINDINGS = {"long-ttft-tail": "ttft_p99", "slow-decode": "tpot_p99"}
"""The findings about a missed SLO target, and the target each judges its fixes on."""


def _half(nbytes: float) -> str:
    """Half of a size, in whole GiB (whole MiB below one GiB)."""
    half = nbytes / 2
    return f"{math.ceil(half / 2 ** 20)}MiB" if half < 2 ** 30 else f"{math.ceil(half / 2 ** 30)}GiB"


def tier_fixes(case: Case, metric: str) -> list[Fix]:
    """Each offload tier of the spec removed, and the dearest one that served prompt tokens at half its size,
    judged on `metric`."""
    from ..cost import cost_of

    lm, native = case.topo.lmcache, case.topo.serving.kv_offloading
    sizes = {tier: getattr(lm, tier).size for tier in ("ddr", "nvme", "ceph") if lm is not None and getattr(lm, tier)}
    paths = {tier: f"lmcache.{tier}.size" for tier in sizes}
    if native is not None:
        sizes["ddr"], paths["ddr"] = native.size, "serving.kv_offloading.size"
    fixes = [Fix(summary=f"no {tier} tier", metric=metric,
                 changes=[Change(path="serving.kv_offloading", value=None) if path.startswith("serving.")
                          else Change(path=path, value=0)]) for tier, path in paths.items()]
    try:
        bill = cost_of(case.topo, case.resolved)
    except SpecError:
        return fixes
    served = [tier for tier in sizes if case.mean(f"{tier}_served_share") > 0]   # one that served nothing: no better at half
    if served:
        dearest = max(served, key=lambda tier: bill.tier(tier).usd_per_hour if bill.tier(tier) else 0.0)
        fixes.append(Fix(summary=f"the {dearest} tier at half its size", metric=metric,
                         changes=[Change(path=paths[dearest], value=_half(sizes[dearest]))]))
    return fixes


def with_tier_fixes(case: Case, findings: list[Finding]) -> list[Finding]:
    """The findings, each one about a missed SLO target given the tier candidates and the same accelerators
    disaggregated or aggregated (kvplan.doctor.disaggregation) that no finding proposes already."""
    proposed = {tuple(sorted((c.path, str(c.value)) for c in fix.changes)) for f in findings for fix in f.fixes}
    out = []
    for f in findings:
        metric = SLO_FINDINGS.get(f.code)
        if metric is not None:
            new = [x for x in tier_fixes(case, metric) + shape_fixes(case, metric)
                   if tuple(sorted((c.path, str(c.value)) for c in x.changes)) not in proposed]
            f = f.model_copy(update={"fixes": f.fixes + new})
        out.append(f)
    return out


def margin(proof: Proof) -> float:
    """The smallest relative headroom over the SLO targets (negative: a target missed)."""
    return min(((c.target - c.after) / c.target for c in proof.slo if c.target > 0), default=0.0)


def _usd(proof: Proof) -> float:
    return proof.usd_per_hour_after if proof.usd_per_hour_after is not None else math.inf


def overlaps(a: Change, b: Change) -> bool:
    """Two changes that cannot both be applied: the same path, or one removes the section the other sets in."""
    if a.path == b.path:
        return True
    for x, y in ((a, b), (b, a)):
        section = x.path.removesuffix(".size") if x.path.endswith(".size") and x.value == 0 else x.path
        if (x.value is None or section != x.path) and y.path.startswith(section + "."):
            return True
    return False


def ranking(findings: list[Finding]) -> list[Ranked]:
    """With an SLO target missed: every proven fix that meets the SLO, or helps on an SLO target's metric, meeting
    fixes cheapest first (then the largest headroom), then the ones that help without meeting it."""
    if not any(f.code in SLO_FINDINGS for f in findings):
        return []
    seen: set = set()
    ranked = []
    for f in findings:
        for fix in f.fixes:
            p = fix.proof
            changes = tuple(sorted((c.path, str(c.value)) for c in fix.changes))
            if p is None or p.verdict in ("refused", "untested") or changes in seen:
                continue
            if not (p.meets_slo or (p.verdict == "helps" and any(c.key == fix.metric for c in p.slo))):
                continue
            seen.add(changes)
            ranked.append(Ranked(code=f.code, fix=fix, meets_slo=p.meets_slo, margin=margin(p)))
    return sorted(ranked, key=lambda r: (not r.meets_slo, _usd(r.fix.proof), -r.margin))


def _gain(fix: Fix) -> float:
    p = fix.proof
    if fix.goal == "save":
        return (p.usd_per_hour_before or 0) - (p.usd_per_hour_after or 0)
    return -p.difference if METRICS[fix.metric].better == "lower" else p.difference


def _costs_more(fix: Fix) -> bool:
    p = fix.proof
    return p.usd_per_hour_before is not None and p.usd_per_hour_after is not None and p.usd_per_hour_after > p.usd_per_hour_before


def chosen(diagnosis: Diagnosis) -> tuple[list[tuple[Finding, Fix]], list[tuple[Finding, Fix, str]]]:
    """Per finding its best kept fix (an improvement before a saving, one that costs nothing more before one that
    does, then the largest gain); and the ones left out because they clash with an earlier finding's pick."""
    taken: list[tuple[Change, str]] = []
    applied, skipped = [], []
    for finding in diagnosis.findings:
        kept = finding.kept
        if not kept:
            continue
        best = max(kept, key=lambda fix: (fix.goal == "improve", not _costs_more(fix), _gain(fix)))
        clash = next(((c, t, code) for c in best.changes for t, code in taken if overlaps(c, t)), None)
        if clash is not None:
            skipped.append((finding, best, f"{clash[0].path} clashes with {clash[1]}, changed for {clash[2]}"))
            continue
        applied.append((finding, best))
        taken += [(c, finding.code) for c in best.changes]
    return applied, skipped


def written(case: Case, diagnosis: Diagnosis, cache=None, workers: int = 1) -> dict:
    """What `--write` writes: the changes, the proof of them as written, the fixes left out and why, as
    {"changes", "proof", "left_out", "data"} (`data`: the spec mapping with the changes applied)."""
    from .prove import changed, changed_mapping, judge

    best = diagnosis.ranking[0] if diagnosis.ranking and diagnosis.ranking[0].meets_slo else None
    if best is None:
        applied, skipped = chosen(diagnosis)
        picks = [fix for _, fix in applied]
        left_out = [f"{f.code}: {fix.summary} ({why})" for f, fix, why in skipped]
    else:
        others = [f for f in diagnosis.findings if f.code not in SLO_FINDINGS and f.code != best.code]
        applied, skipped = chosen(diagnosis.model_copy(update={"findings": others}))
        picks, left_out = [best.fix], [f"{f.code}: {fix.summary} ({why})" for f, fix, why in skipped]
        for f, fix in applied:
            clash = next((c for c in fix.changes for t in best.fix.changes if overlaps(c, t)), None)
            if clash is not None:
                left_out.append(f"{f.code}: {fix.summary} ({clash.path} clashes with {best.fix.summary}, the cheapest "
                                "fix that meets the SLO)")
                continue
            picks.append(fix)
    proof = picks[0].proof if picks else None
    if len(picks) > 1:
        changes = [c for fix in picks for c in fix.changes]
        try:
            topo, resolved = changed(case, changes)
        except SpecError as exc:
            why = "; ".join(p.message for p in exc.problems)
            return _single(case, picks, left_out, f"together they are refused: {why}")
        from ..sweep.cache import run_cached
        from ..sweep.executor import Task

        runs, _ = run_cached([Task(topo, seed) for seed in case.seeds], cache, workers=workers)
        runs = list(runs)
        each = [judge(case, fix.model_copy(update={"changes": changes}), topo, resolved, runs) for fix in picks]
        lost = [fix.summary for fix, p in zip(picks, each) if not _holds(fix, p)]
        missed = best is not None and not each[0].meets_slo
        if lost or missed:
            why = (f"together they miss the SLO ({_slo_line(each[0])})" if missed
                   else f"together {', '.join(lost)} no longer helps")
            return _single(case, picks, left_out, why)
        proof = each[0]
    changes = [c for fix in picks for c in fix.changes]
    return {"changes": changes, "proof": proof, "left_out": left_out, "data": changed_mapping(case, changes)}


def _holds(fix: Fix, together: Proof) -> bool:
    """A fix still does its part in a combination: an improvement helps its metric beyond the noise; a saving (a
    removal, which lowers the bill of any spec it is applied to) does not make its metric worse beyond the noise
    or break the SLO, whatever the other fixes add to the bill."""
    if fix.goal == "save":
        return together.verdict not in ("hurts", "breaks the SLO", "refused", "untested")
    return together.verdict == "helps"


def _single(case: Case, picks: list[Fix], left_out: list[str], why: str) -> dict:
    """The first pick alone, written with its own proof; the others left out for `why` (simulated together)."""
    from .prove import changed_mapping

    first, rest = picks[0], picks[1:]
    left_out = left_out + [f"{fix.summary} ({why}; simulated with {first.summary})" for fix in rest]
    return {"changes": list(first.changes), "proof": first.proof, "left_out": left_out,
            "data": changed_mapping(case, first.changes)}


def _slo_line(proof: Proof) -> str:
    from ..units import fmt_duration

    return ", ".join(f"{c.key} {fmt_duration(c.after)} against {fmt_duration(c.target)}" for c in proof.slo)


__all__ = ["SLO_FINDINGS", "chosen", "margin", "overlaps", "ranking", "tier_fixes", "with_tier_fixes", "written"]
