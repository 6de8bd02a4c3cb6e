"""Tier checks: a valid spec whose KV tiers cannot do what they are sized for.

The hierarchy is HBM (vLLM's prefix cache) over ddr over nvme over ceph, and each LMCache tier
stores every chunk that is computed, so a tier is useful only where it holds reuse the tiers
above it no longer hold. Two sizes make a tier all but useless without making the spec invalid:

- **smaller than the tier above it.** A tier that holds fewer tokens per instance than the one
  above keeps only what that tier already keeps: its hits are the few chunks the tier above has
  just evicted, while every chunk is still written into it (the flagship example's ddr once held a
  fifth of its HBM prefix cache per instance: 0 % ddr hits, 1.4 TiB written).
- **smaller than one request's prompt.** A cache that cannot hold a typical request's prompt
  (its shared prefix and new text) evicts the prompt's first chunks while storing its last ones,
  and LMCache's lookup stops at the first miss, so the prompt never hits.

Shares are per instance, so that a node's cache shared by its instances (MP mode) and the
cluster-wide ceph tier compare with HBM, which each instance has for itself. The checks are
warnings: `kvplan validate` prints them and still exits 0.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from .errors import Problem
from .resolve import Resolved
from .resolved_tiers import ResolvedTier
from .spec.workload import Dist, Workload
from .units import GIB, fmt_bytes, fmt_count

TIER_ABOVE = {"ddr": "hbm", "nvme": "ddr", "ceph": "nvme"}


def below_the_tier_above(r: Resolved) -> list[tuple[ResolvedTier, int, str, int]]:
    """(tier, its tokens per instance, the tier above it, that tier's tokens per instance) for each LMCache
    tier that holds no more per instance than the nearest tier above it."""
    if r.lmcache is None:
        return []
    shares = {"hbm": r.hbm_tokens} if r.prefix_caching else {}
    found = []
    for tier in r.lmcache.tiers:
        share = tier.capacity_tokens * tier.caches // r.instances
        above = _nearest_above(tier.name, shares)
        if above is not None and share <= shares[above]:
            found.append((tier, share, above, shares[above]))
        shares[tier.name] = share
    return found


def tier_warnings(r: Resolved) -> list[Problem]:
    """Every tier of the spec that is smaller than the one above it or than one request's prompt."""
    if r.lmcache is None:
        return []
    warnings = []
    for tier, share, above, above_share in below_the_tier_above(r):
        what = "HBM prefix cache" if above == "hbm" else f"{above} tier"
        warnings.append(Problem(
            f"lmcache.{tier.name}.size", f"holds {fmt_count(share)} tokens per instance, no more than the "
            f"{fmt_count(above_share)} of the {what} above it: it can keep only what that tier already keeps, "
            "so expect almost no hits on it while every chunk is still written to it", _capacity(tier),
            fix=f"raise lmcache.{tier.name}.size above {size_for(r, tier, above_share)}, or remove the tier"))
    prompt = typical_prompt_tokens(r.workload)
    for tier in r.lmcache.tiers:
        if prompt is not None and tier.capacity_tokens < prompt:
            warnings.append(Problem(
                f"lmcache.{tier.name}.size", f"one cache holds {fmt_count(tier.capacity_tokens)} tokens, fewer than one "
                f"typical prompt of this workload ({fmt_count(prompt)} tokens): storing a prompt evicts its own first "
                "chunks, and a lookup stops at the first miss", _capacity(tier),
                fix=f"raise lmcache.{tier.name}.size above {size_for(r, tier, prompt * tier.caches // r.instances)}"))
    return warnings


def _nearest_above(name: str, shares: dict[str, int]) -> str | None:
    above = TIER_ABOVE[name]
    while above is not None and above not in shares:
        above = TIER_ABOVE.get(above)
    return above


def _capacity(tier: ResolvedTier) -> str:
    return f"{fmt_bytes(tier.capacity_bytes)} per {tier.scope}"


def size_for(r: Resolved, tier: ResolvedTier, tokens_per_instance: float) -> str:
    """The spec size (per node for ddr and nvme, cluster-wide for ceph) that holds this many tokens per instance, in
    whole GiB (whole MiB below one GiB, whole TiB above one TiB)."""
    lm = r.lmcache
    sharing = r.instances if tier.name == "ceph" else r.instances_per_node
    needed = tokens_per_instance * sharing * lm.chunk_bytes / lm.chunk_size
    if needed < GIB:
        return f"{math.ceil(needed / 2**20)}MiB"
    if needed > 1024 * GIB:
        return f"{math.ceil(needed / (1024 * GIB))}TiB"
    return f"{math.ceil(needed / GIB)}GiB"


def typical_prompt_tokens(w: Workload) -> int | None:
    """A typical request's prompt, in tokens: the mean shared prefix plus the mean new text
    (synthetic kinds), or the median input of the trace; None when it cannot be told cheaply."""
    if w.kind == "trace":
        return _trace_median_input(w)
    prefix = _mean(w.shared_prefixes.tokens) if w.shared_prefixes else 0
    return round(prefix + _mean(w.prompt))


def _mean(d: Dist) -> float:
    if d.dist == "uniform":
        return (d.min + d.max) / 2
    mean = d.mean
    return min(max(mean, d.min), d.max) if d.max is not None else max(mean, d.min)


def _trace_median_input(w: Workload) -> int | None:
    """Median input_length of the trace's first requests (the replayed ones, at most 10,000)."""
    path = Path(w.trace.path)
    lengths = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                lengths.append(int(json.loads(line)["input_length"]))
            except (ValueError, KeyError, TypeError):
                return None  # the simulator reports a bad trace line with its number
            if len(lengths) >= min(w.trace.limit or 10_000, 10_000):
                break
    return round(statistics.median(lengths)) if lengths else None
