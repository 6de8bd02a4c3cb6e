"""`kvplan size`: each tier's hit ratio as a function of its capacity, for the spec's workload.

The request stream is the simulator's own (`kvplan.sim.workload.requests` and `warmup`, same spec,
same seed), and so are the keys: LMCache chunk keys (`lmcache.chunk_size` tokens, prefix-chained)
for the ddr, nvme and ceph tiers, vLLM block keys (`serving.block_size`) for hbm. Each tier is
looked at *as if it were the only cache*, seeing every request in arrival order, one request at
a time (a lookup, then its stores):

- LMCache (a tier alone): a request looks up its full prompt chunks (only full chunks exist:
  the trailing partial chunk never hits) and hits the longest held prefix; it refreshes the hit
  chunks, then stores the rest in order (with `save_decode_cache`, also the full chunks that hold
  generated tokens). Hit ratio = held prefix tokens / prompt tokens, LMCache's own definition.
- vLLM's prefix cache: a request hits the longest cached prefix of its prompt blocks, at most
  (prompt - 1) // block_size of them (vLLM always computes the last token); when it finishes, all
  its full blocks (prompt and output) are cached and join the free queue last block first, after
  its partial last block: LRU over blocks with that order inside a request.

Two ways to get the curve, and the output names the one each tier used:

- `stack`: exact LRU stack distances (`stack.needs`), one pass for every capacity. Used for LRU
  (and IsolatedLRU, which is one LRU here) when no entry can expire during the workload.
- `simulated`: the tier's own cache class (`kvplan.sim.eviction.make`, with MP mode's batch
  eviction and the TTL) replayed at a set of capacities: 4 x the working set (room for all of it
  below MP mode's watermark), then the working set halved down to 1/1024 of it, then bisected
  near the 50/90/99 % points. Used for every other policy and
  for a TTL shorter than the workload.

Every LMCache tier is also replayed once at its configured size with its cache exactly as the
simulator builds it (batch eviction in MP mode, TTL, and nvme and ceph writing only chunks they
do not hold, without refreshing the others); that figure is printed beside the curve's.
A tier made of several caches (one per instance or per node) is shown pooled: its configured
point is the sum of their sizes, an upper bound for split caches that each see part of the
traffic.

Costs use `kvplan.cost` (models/prices.yaml and the spec's cost section), in USD per hour as
everywhere in kvplan: ddr and nvme per GB, ceph per raw GB (the bytes times the pool's size), and
hbm as the GPUs whose KV memory holds it (whole instances).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from ..errors import SpecError
from ..resolve import Resolved, resolve
from ..resolved_tiers import ResolvedTier
from ..sim import stages
from ..sim import workload as wl
from ..sim.eviction import make
from ..spec import Topology
from ..spec.overrides import RecordsOverrides
from ..units import fmt_bytes, fmt_duration
from .stack import NEVER, Needs, Stream, hits_at, least_capacity, needs, previous

__all__ = ["SizeResult", "TierSize", "SizePoint", "size", "TARGETS", "STACK_POLICIES", "replayed_hit_ratio",
           "workload_streams"]

TARGETS = (50, 90, 99)
"""Shares of a tier's maximum reuse (percent) whose capacities are reported."""
STACK_POLICIES = ("LRU", "IsolatedLRU")
"""Policies whose curve is exact from LRU stack distances."""
CURVE_POINTS = 160
"""Capacities at which a stack curve is sampled for the JSON and the plot (log-spaced, plus the marks)."""
GRID_HALVINGS = 10
"""A simulated curve is replayed at 4 x, 1 x, 1/2 x, ... 1/2^GRID_HALVINGS x the working set."""
BISECTIONS = 4
"""Bisections (in log capacity) between two simulated points around each 50/90/99 % point."""
GB = 1e9
PARTIAL_TAG = 0x7061727469616C
"""Tags the key given to a request's partial last block, hash((PARTIAL_TAG, request)): no other block has it
(keys are Python hashes of int tuples, as in kvplan.sim.workload)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SizePoint(_Model):
    """One capacity of a tier and what it gets."""

    capacity_units: int
    """Blocks (hbm) or chunks (LMCache tiers)."""
    capacity_bytes: int
    capacity_tokens: int
    hit_ratio: float
    """Prompt tokens hit / prompt tokens, with the tier of this capacity as the only cache."""
    usd_per_hour: float | None = None
    """What this much of the tier costs (None without a price)."""


class Target(SizePoint):
    share: int
    """Percent of the tier's maximum reuse this capacity reaches: the least capacity that does."""


class Configured(SizePoint):
    caches: int
    """Caches the tier is made of (per instance, per node or one for the cluster); the point is their sum."""
    scope: str
    simulated_hit_ratio: float | None = None
    """The same capacity replayed with the tier's cache as the simulator builds it (LMCache tiers)."""


class TierSize(_Model):
    tier: Literal["hbm", "ddr", "nvme", "ceph"]
    unit: Literal["block", "chunk"]
    unit_tokens: int
    unit_bytes: int
    """Bytes one block (all ranks of an instance) or one chunk (all storing ranks) takes."""
    policy: str
    ttl_s: float | None = None
    method: Literal["stack", "simulated"]
    """stack: exact LRU stack distances, every capacity; simulated: the policy replayed at `curve`'s capacities."""
    lookups: int
    """Blocks or chunks looked up by the requests (what a hit ratio counts)."""
    references: int
    """Blocks or chunks the cache is asked to hold or refresh (lookups, stores, warm-up)."""
    working_set_units: int
    """Distinct blocks or chunks referenced: at this capacity nothing is ever evicted."""
    working_set_bytes: int
    working_set_tokens: int
    max_hit_ratio: float
    """The hit ratio with unbounded capacity: all the reuse this tier could ever get."""
    targets: list[Target]
    configured: Configured | None = None
    curve: list[SizePoint]
    price: str | None = None
    """Where the price came from (kvplan.cost), or None."""
    usd_per_unit_hour: float | None = None
    """USD per hour of one GB (ddr, nvme), one raw GB (ceph) or one GPU (hbm)."""


class SizeResult(RecordsOverrides, _Model):
    kind: Literal["size"] = "size"
    name: str
    spec_hash: str
    seed: int
    requests: int
    warmup_requests: int
    rejected_requests: int
    prompt_tokens: int
    last_arrival_s: float
    tiers: list[TierSize]
    notes: list[str]

    def tier(self, name: str) -> TierSize | None:
        return next((t for t in self.tiers if t.tier == name), None)


# --------------------------------------------------------------------------- streams

class _Streams:
    """The chunk stream (LMCache tiers) and the block stream (hbm) of one workload, built in one pass."""

    def __init__(self, r: Resolved, warm: list, reqs: list):
        lm, n = r.lmcache, r.kv_offloading
        self.chunk = lm.chunk_size if lm else n.chunk_tokens if n else None   # the offload engine's chunks
        self.native = n is not None                 # vLLM's native tier stores only the chunks it lacks
        self.block = r.block_size if r.prefix_caching else None
        self.decode = bool(lm and lm.save_decode_cache)
        everything = list(warm) + list(reqs)
        self.counted = np.array([not q.warmup for q in everything], dtype=bool)
        self.arrivals = [q.arrival for q in everything]
        self.prompt_tokens = sum(q.prompt_tokens for q in reqs)
        c_cap = sum((q.prompt_tokens + q.output_tokens) // self.chunk for q in everything) if self.chunk else 0
        b_cap = sum(-(-(q.prompt_tokens + q.output_tokens) // self.block) for q in everything) if self.block else 0
        ck, coff, clook, cprompt = np.empty(c_cap, np.int64), [0], [0], []
        bk, boff, blook = np.empty(b_cap, np.int64), [0], [0]
        cpos = bpos = 0
        for r, (q, counted) in enumerate(zip(everything, self.counted.tolist())):
            total = q.prompt_tokens + q.output_tokens
            if self.chunk:
                keys = q.content.keys(self.chunk, total if self.decode else q.prompt_tokens)
                ck[cpos:cpos + len(keys)] = keys
                cpos += len(keys)
                coff.append(cpos)
                cprompt.append(q.prompt_tokens // self.chunk)
                clook.append(clook[-1] + (cprompt[-1] if counted else 0))
            if self.block:
                keys = q.content.keys(self.block, total)
                if total % self.block:               # the partial last block: no key, freed first
                    bk[bpos] = hash((PARTIAL_TAG, r))
                    bpos += 1
                bk[bpos:bpos + len(keys)] = keys[::-1]
                bpos += len(keys)
                boff.append(bpos)
                blook.append(blook[-1] + ((q.prompt_tokens - 1) // self.block if counted else 0))
            q.content.forget()
        self.chunk_keys = ck[:cpos]
        self.chunk_offsets = np.array(coff, dtype=np.int64)
        self.chunk_lookups = np.array(clook, dtype=np.int64)
        self.chunk_prompt = cprompt
        self.block_offsets = np.array(boff, dtype=np.int64)
        self.block_lookups = np.array(blook, dtype=np.int64)
        self.block_keys = bk[:bpos]

    def chunk_stream(self) -> Stream:
        lo, off = self.chunk_lookups, self.chunk_offsets
        lengths = np.diff(lo)
        within = np.arange(lo[-1], dtype=np.int64) - np.repeat(lo[:-1], lengths)
        return Stream(self.chunk_keys, off, np.repeat(off[:-1], lengths) + within, lo)

    def block_stream(self) -> Stream:
        lo, off = self.block_lookups, self.block_offsets
        lengths = np.diff(lo)
        within = np.arange(lo[-1], dtype=np.int64) - np.repeat(lo[:-1], lengths)
        return Stream(self.block_keys, off, np.repeat(off[1:] - 1, lengths) - within, lo)

    def reuse_times(self) -> np.ndarray:
        """Seconds from a chunk's previous reference to each counted lookup of it (lookups of chunks never seen
        before are left out): how long a tier must keep a chunk for the reuse to hit."""
        stream = self.chunk_stream()
        prev = previous(stream.keys)[stream.lookups]
        seen = prev >= 0
        when = np.asarray(self.arrivals, dtype=float)
        request_of = np.searchsorted(stream.offsets, np.arange(len(stream.keys)), side="right") - 1
        return when[request_of[stream.lookups[seen]]] - when[request_of[prev[seen]]]

    def replay(self, cache, tier: str, size: int) -> int:
        """Chunks hit when `cache` is the only tier (as the simulator's LMCache tier `tier` behaves)."""
        keys, off = self.chunk_keys.tolist(), self.chunk_offsets.tolist()
        write_all = tier == "ddr" and not self.native   # nvme, ceph and vLLM's native tier write only what they lack
        hits = 0
        for r, (now, counted, looked) in enumerate(zip(self.arrivals, self.counted.tolist(), self.chunk_prompt)):
            mine = keys[off[r]:off[r + 1]]
            cache.expire(now)
            held = cache.prefix(mine[:looked])
            if counted:
                hits += held
            if held:
                cache.touch(mine[:held], now)
            rest = mine[held:]
            if rest:
                cache.store(rest if write_all else cache.absent(rest), size, now)
        return hits


def workload_streams(r: Resolved, seed: int) -> _Streams:
    """The chunk and block streams of `r`'s workload for `seed` (warm-up first), as `size` builds them."""
    return _Streams(r, wl.warmup(r, seed), stages.requests(r, seed))


def replayed_hit_ratio(streams: _Streams, r: Resolved, tier_name: str, policy: str) -> float:
    """The tier's hit ratio (prompt tokens) as the only cache, its caches pooled, with eviction `policy`,
    replayed as the simulator builds the tier (MP mode's batch eviction, the tier's TTL)."""
    lm = r.lmcache
    t = lm.tier(tier_name)
    batch = dict(watermark=lm.eviction_watermark, ratio=lm.eviction_ratio) if lm.mode == "mp" else {}
    cache = make(policy, t.capacity_bytes * t.caches, ttl=t.ttl_s, **batch)
    return _share(streams.replay(cache, tier_name, lm.chunk_bytes), lm.chunk_size, streams.prompt_tokens)


def _never_evicts(capacity_bytes: int, distinct: int, size: int, ttl: float | None, last: float, watermark: float) -> bool:
    """True when a cache of `capacity_bytes` can hold every chunk of the stream without evicting (below
    MP mode's `watermark` too) and no entry expires: it then hits every chunk seen before, whatever
    its policy, so a replay would only repeat the unbounded hit count."""
    return (ttl is None or ttl > last) and (distinct + 1) * size < watermark * capacity_bytes


# --------------------------------------------------------------------------- prices

class _Prices:
    def __init__(self, topo: Topology, r: Resolved, catalog):
        from ..cost import cost_of

        self.lines, self.problem = {}, None
        try:
            bill = cost_of(topo, r, catalog=catalog)
        except SpecError as exc:
            self.problem = exc.render()
            return
        for line in bill.tiers:
            self.lines[line.tier] = line
        self.pool_size = r.ceph.pool_size if r.ceph is not None else 1
        self.instance_bytes = r.hbm_blocks * r.block_bytes
        self.tp = r.tensor_parallel

    def describe(self, tier: str) -> dict:
        """The price fields of a TierSize."""
        line = self.lines.get(tier)
        return {} if line is None else {"price": line.price, "usd_per_unit_hour": line.usd_per_unit_hour}

    def usd_per_hour(self, tier: str, nbytes: int) -> float | None:
        line = self.lines.get(tier)
        if line is None:
            return None
        if tier == "hbm":
            instances = math.ceil(nbytes / self.instance_bytes) if self.instance_bytes else 0
            return instances * self.tp * line.usd_per_unit_hour
        raw = self.pool_size if tier == "ceph" else 1
        return nbytes / GB * raw * line.usd_per_unit_hour


# --------------------------------------------------------------------------- curves

def _native_tier(r: Resolved, streams: _Streams, prompt: int, last: float, prices: _Prices) -> dict:
    """vLLM's native CPU tier (Resolved.kv_offloading), its instances' tiers pooled, replayed with its own policy
    (LRU or ARC), storing only the chunks it lacks."""
    n = r.kv_offloading
    stream = streams.chunk_stream()
    found = needs(stream)
    conf = (n.capacity_chunks * r.instances, n.capacity_bytes * r.instances, r.instances, "instance")
    tier = ResolvedTier(name="ddr", scope="instance", caches=r.instances, capacity_bytes=n.capacity_bytes,
                        capacity_chunks=n.capacity_chunks, capacity_tokens=n.capacity_tokens, configured_gb=None,
                        eviction=n.eviction, ttl_s=None)
    return _simulated_tier("ddr", tier, streams, stream, found, prompt, conf, prices, {}, n.eviction, n.chunk_bytes,
                           last, 1.0)


def _share(hits: int, unit_tokens: int, prompt_tokens: int) -> float:
    return hits * unit_tokens / prompt_tokens if prompt_tokens else 0.0


def _stack_tier(name, unit, unit_tokens, unit_bytes, stream: Stream, found: Needs, counted_tokens: int,
                configured: tuple[int, int, int, str] | None, prices: _Prices, policy: str, ttl):
    """A tier from its lookups' needs: exact at every capacity."""
    need, distinct = found.need, found.distinct
    ordered = np.sort(need)
    best = int(np.count_nonzero(need != NEVER))

    def point(units: int, cls=SizePoint, **extra):
        hits = hits_at(ordered, units)
        nbytes = units * unit_bytes
        return cls(capacity_units=units, capacity_bytes=nbytes, capacity_tokens=units * unit_tokens,
                   hit_ratio=_share(hits, unit_tokens, counted_tokens), usd_per_hour=prices.usd_per_hour(name, nbytes),
                   **extra)

    targets = [point(least_capacity(ordered, p), Target, share=p) for p in TARGETS]
    marks = [t.capacity_units for t in targets] + [distinct]
    conf = None
    if configured is not None:
        units, nbytes, caches, scope = configured
        marks.append(units)
        p = point(units)
        conf = Configured(**{**p.model_dump(), "capacity_bytes": nbytes,
                             "usd_per_hour": prices.usd_per_hour(name, nbytes)}, caches=caches, scope=scope)
    grid = np.unique(np.concatenate((np.rint(np.geomspace(1, max(distinct, 1), CURVE_POINTS)).astype(np.int64),
                                     np.array(marks, dtype=np.int64))))
    curve = [point(int(u)) for u in grid if u >= 1]
    return dict(tier=name, unit=unit, unit_tokens=unit_tokens, unit_bytes=unit_bytes, policy=policy, ttl_s=ttl,
                method="stack", lookups=len(need), references=stream.references, working_set_units=distinct,
                working_set_bytes=distinct * unit_bytes, working_set_tokens=distinct * unit_tokens,
                max_hit_ratio=_share(best, unit_tokens, counted_tokens), targets=targets, configured=conf, curve=curve)


def _simulated_tier(name, tier, streams: _Streams, stream: Stream, found: Needs, counted_tokens: int, configured,
                    prices, batch: dict, policy: str, unit_bytes: int, last: float, watermark: float):
    """A tier from replays of its own policy at a set of capacities (plus bisection near the targets)."""
    unit_tokens, distinct = streams.chunk, found.distinct
    unbounded = int(np.count_nonzero(found.need != NEVER))
    results: dict[int, int] = {}

    def replayed(nbytes: int) -> int:
        if _never_evicts(nbytes, distinct, unit_bytes, tier.ttl_s, last, watermark):
            return unbounded
        return streams.replay(make(policy, nbytes, ttl=tier.ttl_s, **batch), name, unit_bytes)

    def hits_at(units: int) -> int:
        if units not in results:
            results[units] = replayed(units * unit_bytes) if units > 0 else 0
        return results[units]

    top = 4 * max(distinct, 1)                          # room for every chunk, below MP mode's watermark
    best = hits_at(top)
    grid = sorted({max(1, distinct >> k) for k in range(GRID_HALVINGS + 1)} | {top})
    for u in grid:
        hits_at(u)
    for p in TARGETS:                                  # narrow each target between two replayed points
        below = [u for u in sorted(results) if results[u] * 100 < p * best]
        above = [u for u in sorted(results) if results[u] * 100 >= p * best]
        if not above:
            continue
        hi = above[0]
        lo = max([u for u in below if u < hi], default=0)
        for _ in range(BISECTIONS):
            if hi - lo <= 1:
                break
            mid = int(round(math.sqrt(max(lo, 1) * hi))) if lo else max(1, hi // 2)
            mid = min(max(mid, lo + 1), hi - 1)
            if hits_at(mid) * 100 >= p * best:
                hi = mid
            else:
                lo = mid
    conf = None
    if configured is not None:
        units, nbytes, caches, scope = configured
        hits = replayed(nbytes)
        conf = Configured(capacity_units=units, capacity_bytes=nbytes, capacity_tokens=units * unit_tokens,
                          hit_ratio=_share(hits, unit_tokens, counted_tokens),
                          usd_per_hour=prices.usd_per_hour(name, nbytes), caches=caches, scope=scope,
                          simulated_hit_ratio=_share(hits, unit_tokens, counted_tokens))

    def point(units: int, cls=SizePoint, **extra):
        nbytes = units * unit_bytes
        return cls(capacity_units=units, capacity_bytes=nbytes, capacity_tokens=units * unit_tokens,
                   hit_ratio=_share(results[units], unit_tokens, counted_tokens),
                   usd_per_hour=prices.usd_per_hour(name, nbytes), **extra)

    known = sorted(u for u in results if u > 0)
    targets = []
    for p in TARGETS:
        reach = [u for u in known if results[u] * 100 >= p * best]
        units = reach[0] if best else 0
        targets.append(point(units, Target, share=p) if units else
                       Target(capacity_units=0, capacity_bytes=0, capacity_tokens=0, hit_ratio=0.0,
                              usd_per_hour=prices.usd_per_hour(name, 0), share=p))
    ttl = tier.ttl_s
    return dict(tier=name, unit="chunk", unit_tokens=unit_tokens, unit_bytes=unit_bytes, policy=policy, ttl_s=ttl,
                method="simulated", lookups=len(stream.lookups), references=stream.references,
                working_set_units=distinct, working_set_bytes=distinct * unit_bytes,
                working_set_tokens=distinct * unit_tokens, max_hit_ratio=_share(best, unit_tokens, counted_tokens),
                targets=targets, configured=conf, curve=[point(u) for u in known])


# --------------------------------------------------------------------------- the view

def size(topo: Topology, resolved: Resolved | None = None, seed: int | None = None, catalog=None) -> SizeResult:
    """Every tier's hit ratio against its capacity for `topo`'s workload (see the module docstring).

    `seed` overrides workload.seed, as in `kvplan simulate`. Raises SpecError for a bad trace.
    """
    from ..catalog import load_catalog

    catalog = catalog or load_catalog()
    r = resolved or resolve(topo, catalog)
    seed = r.workload.seed if seed is None else seed
    warm = wl.warmup(r, seed)
    reqs = stages.requests(r, seed)
    streams = _Streams(r, warm, reqs)
    prices = _Prices(topo, r, catalog)
    prompt = streams.prompt_tokens
    last = max((q.arrival for q in reqs), default=0.0)
    tiers: list[TierSize] = []
    notes = ["Each tier is shown as the only cache, seeing the requests in arrival order one at a time "
             "(a lookup, then its stores): the tiers above it, concurrency and routing are left out; "
             "`kvplan simulate` has them."]
    pooled = []

    if streams.block:
        stream = streams.block_stream()
        found = needs(stream)
        conf = (r.hbm_blocks * r.instances, r.hbm_blocks * r.instances * r.block_bytes, r.instances, "instance")
        tiers.append(TierSize(**_stack_tier("hbm", "block", r.block_size, r.block_bytes, stream, found, prompt, conf,
                                            prices, "LRU", None), **prices.describe("hbm")))
        notes.append("hbm is vLLM's prefix cache as LRU over blocks, a finished request's blocks freed last block "
                     "first (vLLM's free queue); a request's running blocks are not evictable in vLLM, which this "
                     "view does not model.")
        if r.instances > 1:
            pooled.append(f"hbm ({r.instances} instances x {fmt_bytes(r.hbm_blocks * r.block_bytes)})")
    elif not r.prefix_caching:
        notes.append("serving.prefix_caching is off: vLLM keeps no prefix cache, so hbm has no curve.")

    lm = r.lmcache
    if lm is not None:
        stream = streams.chunk_stream()
        found = needs(stream)
        batch = dict(watermark=lm.eviction_watermark, ratio=lm.eviction_ratio) if lm.mode == "mp" else {}
        for t in lm.tiers:
            conf = (t.capacity_chunks * t.caches, t.capacity_bytes * t.caches, t.caches, t.scope)
            expires = t.ttl_s is not None and t.ttl_s <= last
            if t.eviction in STACK_POLICIES and not expires:
                data = _stack_tier(t.name, "chunk", lm.chunk_size, lm.chunk_bytes, stream, found, prompt, conf,
                                   prices, t.eviction, t.ttl_s)
                if _never_evicts(conf[1], found.distinct, lm.chunk_bytes, t.ttl_s, last, lm.eviction_watermark):
                    replayed = int(np.count_nonzero(found.need != NEVER))
                else:
                    replayed = streams.replay(make(t.eviction, conf[1], ttl=t.ttl_s, **batch), t.name, lm.chunk_bytes)
                data["configured"] = data["configured"].model_copy(
                    update={"simulated_hit_ratio": _share(replayed, lm.chunk_size, prompt)})
                if t.ttl_s is not None:
                    notes.append(f"{t.name}: its ttl ({fmt_duration(t.ttl_s)}) is longer than the workload "
                                 f"({fmt_duration(last)}): nothing expires, so the LRU curve is exact.")
            else:
                data = _simulated_tier(t.name, t, streams, stream, found, prompt, conf, prices, batch,
                                       t.eviction, lm.chunk_bytes, last, lm.eviction_watermark)
            tiers.append(TierSize(**data, **prices.describe(t.name)))
            if t.caches > 1:
                pooled.append(f"{t.name} ({t.caches} x {fmt_bytes(t.capacity_bytes)}, one per {t.scope})")
        if lm.mode == "mp":
            high, batch_size = lm.eviction_watermark * 100, lm.eviction_ratio * 100
            notes.append(f"MP mode evicts in batches ({batch_size:g} % of a tier once it is {high:g} % full), so an LRU "
                         f"tier holds {high - batch_size:g}-{high:g} % of its size: compare the curve with the replay "
                         "as configured.")
        if any(t.name in ("nvme", "ceph") for t in lm.tiers):
            notes.append("nvme and ceph store only the chunks they lack and do not refresh the ones they hold, as the "
                         "simulator models them; the curves refresh every stored chunk (the replay as configured "
                         "does not).")
        if lm.save_unfull_chunk:
            notes.append("lmcache.save_unfull_chunk is set: like the simulator, this view counts full chunks only "
                         "(a partial chunk hits only an identical prompt).")
    n = r.kv_offloading
    if n is not None:
        tiers.append(TierSize(**_native_tier(r, streams, prompt, last, prices), **prices.describe("ddr")))
        notes.append("ddr is vLLM's native CPU offloading tier (one per instance); it stores only the chunks it lacks "
                     "and is looked up after the HBM prefix cache, which this view leaves out.")
        if r.instances > 1:
            pooled.append(f"ddr ({r.instances} x {fmt_bytes(n.capacity_bytes)}, one per instance)")
    if pooled:
        notes.append("Pooled: " + "; ".join(pooled) + ". A tier of several caches is marked at their total, an "
                     "upper bound for caches that each see part of the traffic.")
    if prices.problem:
        notes.append(f"No costs: {prices.problem}")
    else:
        notes.append("Costs are USD per hour, as in `kvplan simulate`: hardware amortised per GB for ddr and nvme, "
                     "per raw GB (the bytes x the pool's size) for ceph, whole instances of GPUs for hbm.")
    return SizeResult(name=r.name, spec_hash=r.spec_hash, seed=seed, requests=len(reqs), warmup_requests=len(warm),
                      rejected_requests=getattr(reqs, "rejected", 0), prompt_tokens=prompt, last_arrival_s=last,
                      tiers=tiers, notes=notes)
