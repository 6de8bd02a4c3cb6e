"""Diagnoses of a low hit ratio: why prompts that were seen before are computed again.

Reuse is lost five ways, each checked against the workload's own chunk stream (kvplan.sizing, the keys
the simulator uses) and the simulated runs:

- `tier-below-working-set`: a tier holds less than the capacity at which it gets 90 % of the reuse it
  could ever get (`kvplan size`'s curve), and it shows: its replayed hit ratio is below 90 % of that
  maximum. Fix: the 90 % capacity.
- `ttl-shorter-than-reuse`: a tier's TTL expires chunks before they are asked for again: the share of
  the workload's reuses that come back later than the TTL, and the chunks the runs expired. Fix: a
  TTL that covers 90 % of the reuses.
- `policy-loses`: another eviction policy the real stack offers on that tier (spec rules) hits more on
  this stream at the configured size, by at least 2 points of prompt tokens. Fix: that policy.
- `tier-duplicates-above`: a tier holds no more per instance than the tier above it (vLLM's prefix
  cache for ddr), and serves almost nothing in the runs while every chunk is written to it. Fixes: size
  it above the tier above, or remove it and save its cost.
- `prompts-never-fill-a-chunk`: LMCache stores and hits whole chunks only, so the tokens of a prompt's
  last partial chunk are never served from it; when they are a large part of the prompt tokens a smaller
  chunk_size keeps more of them. Fix: half (and a quarter of) the chunk size, in whole blocks.
"""

from __future__ import annotations

import math

import numpy as np

from ..spec.rules import REAL_POLICIES
from ..tier_checks import below_the_tier_above, size_for
from ..units import fmt_bytes, fmt_duration
from .case import Case
from .finding import Change, Finding, Fix

MIN_REUSE = 0.02
"""A tier whose workload could hit less than this share of prompt tokens has no reuse to lose."""
REACH = 90
"""Percent of a tier's possible reuse it should reach at its size (a `kvplan size` target)."""
CLEARLY = 0.8
"""A tier is diagnosed below its working set when it holds less than this share of its 90 % capacity."""
POLICY_MARGIN = 0.02
"""How much more of the prompt tokens another policy must hit in the replay to be proposed."""
DUPLICATE_SHARE = 0.02
"""A tier serving less than this share of prompt tokens serves almost nothing."""
PARTIAL_SHARE = 0.25
"""The share of prompt tokens in partial last chunks above which chunk_size is diagnosed."""


def tier_below_working_set(case: Case) -> list[Finding]:
    r, sizing = case.resolved, case.sizing
    if r.lmcache is None or sizing is None:
        return []
    found = []
    duplicates = {t.name for t, *_ in below_the_tier_above(r)}      # tier-duplicates-above diagnoses those
    for tier in r.lmcache.tiers:
        if tier.name in duplicates:
            continue
        view = sizing.tier(tier.name)
        if view is None or view.configured is None or view.max_hit_ratio < MIN_REUSE:
            continue
        target = next(t for t in view.targets if t.share == REACH)
        conf = view.configured
        got = conf.simulated_hit_ratio if conf.simulated_hit_ratio is not None else conf.hit_ratio
        if conf.capacity_bytes >= CLEARLY * target.capacity_bytes or got >= REACH / 100 * view.max_hit_ratio:
            continue
        evidence = {"capacity_bytes": conf.capacity_bytes, "working_set_bytes": view.working_set_bytes,
                    "hit_ratio_at_capacity": got, "max_hit_ratio": view.max_hit_ratio,
                    f"capacity_for_{REACH}pct_bytes": target.capacity_bytes}
        runs = any(res.tier(tier.name) for res in case.results)
        if runs:
            evidence |= {"simulated_served_share": case.tier_mean(tier.name, lambda t: t.served_share),
                         "simulated_peak_fill": case.tier_mean(tier.name, lambda t: t.peak_used_bytes / t.capacity_bytes),
                         "simulated_evictions": case.tier_mean(tier.name, lambda t: t.evictions)}
        size = size_for(r, tier, target.capacity_tokens / r.instances)
        found.append(Finding(
            code="tier-below-working-set", area="hit ratio", severity="problem",
            title=f"the {tier.name} tier is smaller than this workload's reuse needs",
            symptom=f"{tier.name} hits {got:.1%} of prompt tokens on its own, of the {view.max_hit_ratio:.1%} its reuse "
                    f"could give",
            cause=f"its {conf.caches} cache(s) hold {fmt_bytes(conf.capacity_bytes)} together while the workload "
                  f"touches {fmt_bytes(view.working_set_bytes)} of chunks; {REACH} % of its reuse needs "
                  f"{fmt_bytes(target.capacity_bytes)} (lmcache.{tier.name}.size {size})" + (f"; in the runs it filled to {evidence['simulated_peak_fill']:.0%} "
                                                            f"and evicted {evidence['simulated_evictions']:,.0f} chunks" if runs else ""),
            evidence=evidence,
            fixes=[Fix(summary=f"size {tier.name} for {REACH} % of its reuse",
                       changes=[Change(path=f"lmcache.{tier.name}.size", value=size)], metric=f"{tier.name}_served_share")]))
    return found


def ttl_shorter_than_reuse(case: Case) -> list[Finding]:
    r = case.resolved
    tiers = [t for t in (r.lmcache.tiers if r.lmcache else []) if t.ttl_s is not None]
    if not tiers or not case.reuse_times.size:
        return []
    reuse = case.reuse_times
    found = []
    for tier in tiers:
        late = float(np.mean(reuse > tier.ttl_s))
        expired = case.tier_mean(tier.name, lambda t: t.expired)
        if late < 0.05 or expired == 0:
            continue
        p50, p90 = (float(x) for x in np.percentile(reuse, [50, 90]))
        ttl = _round_duration(max(p90, tier.ttl_s * 2), days=not case.topo.simulate_only)
        found.append(Finding(
            code="ttl-shorter-than-reuse", area="hit ratio", severity="problem",
            title=f"the {tier.name} tier's TTL expires chunks before they are reused",
            symptom=f"{late:.0%} of this workload's reuses come back later than the {tier.name} TTL "
                    f"({fmt_duration(tier.ttl_s)}); the runs expired {expired:,.0f} chunks",
            cause=f"the time from a chunk's last use to its next lookup is {fmt_duration(p50)} at the median and "
                  f"{fmt_duration(p90)} at p90, longer than the TTL",
            evidence={"ttl_s": tier.ttl_s, "reuse_p50_s": p50, "reuse_p90_s": p90, "reuses_later_than_ttl": late,
                      "simulated_expired_chunks": expired},
            fixes=[Fix(summary=f"a TTL that covers {REACH} % of the reuses",
                       changes=[Change(path=f"lmcache.{tier.name}.ttl", value=ttl)], metric=f"{tier.name}_served_share")]))
    return found


def _round_duration(seconds: float, days: bool) -> str:
    """A TTL of at least `seconds` written in whole minutes, hours or days (`days`: whole days only, what an S3
    lifecycle rule, and so a deployed ceph tier, can express)."""
    if days:
        return f"{math.ceil(seconds / 86400)}d"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{math.ceil(seconds / size)}{unit}"
    return f"{math.ceil(seconds)}s"


def policy_loses(case: Case) -> list[Finding]:
    from ..sizing.view import replayed_hit_ratio

    r, topo = case.resolved, case.topo
    if r.lmcache is None or not case.results:
        return []
    found = []
    for tier in r.lmcache.tiers:
        if tier.eviction == "none":
            continue
        allowed = REAL_POLICIES[r.lmcache.mode][tier.name]
        options = [p for p in allowed if p not in ("none", tier.eviction)]
        if r.lmcache.mode == "inprocess" and tier.name == "nvme" and topo.lmcache.ddr is not None:
            continue                         # in-process LMCache has one policy for ddr and nvme: judged on ddr
        if not options:
            continue
        mine = replayed_hit_ratio(case.streams, r, tier.name, tier.eviction)
        others = {p: replayed_hit_ratio(case.streams, r, tier.name, p) for p in options}
        best = max(others, key=others.get)
        if others[best] < mine + POLICY_MARGIN:
            continue
        paths = [f"lmcache.{tier.name}.eviction"]
        if r.lmcache.mode == "inprocess" and tier.name == "ddr" and topo.lmcache.nvme is not None:
            paths.append("lmcache.nvme.eviction")
        found.append(Finding(
            code="policy-loses", area="hit ratio", severity="problem",
            title=f"{tier.eviction} loses on this workload in the {tier.name} tier",
            symptom=f"at its size the {tier.name} tier hits {mine:.1%} of prompt tokens with {tier.eviction}",
            cause=f"replaying this workload's chunks at the same size, {best} hits {others[best]:.1%} ("
                  + ", ".join(f"{p} {v:.1%}" for p, v in others.items()) + ")",
            evidence={"policy": tier.eviction, "replayed_hit_ratio": mine,
                      **{f"replayed_hit_ratio_{p}": v for p, v in others.items()}},
            fixes=[Fix(summary=f"evict with {best}", changes=[Change(path=p, value=best) for p in paths],
                       metric=f"{tier.name}_served_share")]))
    return found


def tier_duplicates_above(case: Case) -> list[Finding]:
    r = case.resolved
    found = []
    for tier, share, above, above_share in below_the_tier_above(r):
        served = case.mean(f"{tier.name}_served_share")
        if served >= DUPLICATE_SHARE:
            continue
        written = case.tier_mean(tier.name, lambda t: t.bytes_written)
        what = "vLLM's prefix cache (HBM)" if above == "hbm" else f"the {above} tier"
        found.append(Finding(
            code="tier-duplicates-above", area="hit ratio", severity="problem",
            title=f"the {tier.name} tier only duplicates {what}",
            symptom=f"{tier.name} serves {served:.1%} of prompt tokens while {fmt_bytes(written)} are written to it",
            cause=f"it holds {share:,} tokens per instance, no more than the {above_share:,} of {what}: whatever it "
                  f"holds, the tier above still holds",
            evidence={"tokens_per_instance": share, "above": above, "above_tokens_per_instance": above_share,
                      "simulated_served_share": served, "simulated_bytes_written": written},
            fixes=[Fix(summary=f"make {tier.name} hold twice what {what} holds",
                       changes=[Change(path=f"lmcache.{tier.name}.size", value=size_for(r, tier, 2 * above_share))],
                       metric="cache_hit_ratio"),
                   Fix(summary=f"remove the {tier.name} tier and its cost",
                       changes=[Change(path=f"lmcache.{tier.name}.size", value=0)], metric="ttft_p99", goal="save")]))
    return found


def prompts_never_fill_a_chunk(case: Case) -> list[Finding]:
    r = case.resolved
    if r.lmcache is None or not case.results or r.lmcache.save_unfull_chunk:
        return []
    chunk = r.lmcache.chunk_size
    prompts = case.column("prompt_tokens")
    partial = float((prompts % chunk).sum() / max(prompts.sum(), 1))
    if partial < PARTIAL_SHARE:
        return []
    short = float(np.mean(prompts < chunk))
    sizes = [c for c in (chunk // 2, chunk // 4) if c >= r.block_size and c % r.block_size == 0]
    return [Finding(
        code="prompts-never-fill-a-chunk", area="hit ratio", severity="problem",
        title=f"{partial:.0%} of prompt tokens sit in chunks LMCache never stores",
        symptom=f"LMCache hits {case.mean('lmcache_hit_ratio'):.1%} of the tokens it looks up; {short:.0%} of prompts are "
                f"shorter than one {chunk}-token chunk",
        cause=f"LMCache stores and hits whole chunks only: a prompt's last {chunk}-token chunk is never full, and those "
              f"tokens ({partial:.0%} of all prompt tokens) are always computed",
        evidence={"chunk_size": chunk, "partial_chunk_token_share": partial, "prompts_shorter_than_a_chunk": short,
                  "median_prompt_tokens": float(np.median(prompts))},
        fixes=[Fix(summary=f"chunks of {c} tokens", changes=[Change(path="lmcache.chunk_size", value=c)],
                   metric="lmcache_hit_ratio") for c in sizes])]


RULES = [tier_below_working_set, ttl_shorter_than_reuse, policy_loses, tier_duplicates_above, prompts_never_fill_a_chunk]
