"""Warm start: the offload tiers as this workload leaves them after long traffic, before a run's first request.

A multi-TB nvme tier or a Ceph tier with a 24 h ttl needs hours of simulated traffic to fill (kvplan.sim.steady
says how long); until then its hit ratio is a cold cache's. `workload.warm_start: true` (or `kvplan simulate
--warm`) fills the tiers first, without simulating time: a warm-up stream of the same workload (the same
distributions and shared prefixes; its own random draws, from a seed derived from the run's, so the measured
requests are the ones a cold run has) is fed through the tiers' store and lookup paths in arrival order, and the
measured run then starts with the caches it left.

What each warm-up request does to the tiers is what its admission and its stores do in the simulator
(lmcache.py, native.py): LMCache looks the prompt's chunks up across ddr -> nvme -> ceph and refreshes every chunk
it finds in its tier's policy; in-process mode writes what it found below ddr back into ddr; then the chunks past
the hit are written through to every tier (nvme and ceph take those they lack), and with save_decode_cache the
chunks that hold generated tokens too. vLLM's native CPU tier refreshes its hit and stores the prompt's chunks
it lacks. Each entry is stamped with the warm-up request's arrival, and the run's clock starts at the last one,
so a ttl expires warm-up entries as it would have. Simplifications, stated: the HBM prefix cache starts cold (it
fills in seconds), so in-process promotion takes every chunk hit below ddr; a request goes to the instance of its
session (or of its number) in turn, not to the router's pick; the warm-up has no timing, link or queueing effect.

How long: the warm-up draws the stream in generations of growing size and stops once every tier is warm (it looks
every CHECK requests): written over WRITTEN_OVER times its capacity, or (a ttl tier) fed for a whole ttl, or full
and refusing (a tier that cannot evict), or holding all this workload writes (a generation wrote it nothing new).
MAX_REQUESTS bounds it; a tier still cold then is reported so. Nothing of the warm-up is counted in the run's
figures (requests, hit ratios, bytes, evictions): the result lists, per tier, the requests and bytes that warmed it
(`SimResult.warm_start`).
"""

from __future__ import annotations

import numpy as np

from ..errors import SpecError
from ..spec.rules import warm_start
from . import workload as wl
from .arrivals import gaps
from .steady import WarmTier

WRITTEN_OVER = 1.5
"""A tier is warm once the warm-up has written this many times its capacity into it: full, and half its capacity
more, so that its policy has chosen what it holds from this workload's traffic, not from its first fill (an
LRU tier then holds the most recently used; an LFU or ARC one has seen more of the traffic than it holds)."""
MAX_REQUESTS = 4_000_000
"""Warm-up requests at most (a few minutes of this machine's time at worst)."""
CHECK = 1024
"""The warm-up looks at whether its tiers are warm every this many requests."""
FIRST_GENERATION = 4096
"""Requests of the first generation; each next one draws four times as many."""
NAMES = 1 << 62
"""Warm-up sessions and turns are numbered from here: their text is never a measured request's
(load stages number theirs from k x 2^40, far below)."""
SPAWN_KEY = 0x7761726D
"""The warm-up's draws come from SeedSequence(seed, spawn_key=(SPAWN_KEY,)): independent of the run's."""


def check(resolved) -> None:
    """Refuse a warm start the workload cannot have (kvplan.spec.rules.warm_start: a spec changed after it was
    validated, as `kvplan simulate --warm` changes it, is checked here)."""
    problems = list(warm_start(resolved.workload))
    if problems:
        raise SpecError(problems)


class _Draws:
    """What `wl._Drawn` reads to draw a stream other than the spec's: the warm-up's generator, arrivals and names."""

    duration = None
    first = NAMES

    def __init__(self, arrivals, seed: int, requests: int):
        self.arrivals, self.seed, self.requests = arrivals, seed, requests

    def generator(self, first: np.random.Generator) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(SPAWN_KEY,))))

    def starts(self, rng: np.random.Generator, t0: float, size: int) -> np.ndarray:
        return t0 + np.cumsum(gaps(self.arrivals, rng, size))


def _settle(tiers: list["_Tier"], fed: int, span: float) -> bool:
    """Give each tier that has become warm its reason and the warm-up requests it took; True once all are warm."""
    for t in tiers:
        if t.reason:
            continue
        if t.written >= WRITTEN_OVER * t.capacity:
            t.reason = f"written {t.written / t.capacity:.1f} times its capacity"
        elif t.ttl is not None and span >= t.ttl:
            t.reason = "fed for a whole ttl: expiry balances writes"
        elif t.refused:
            t.reason = "full: it refuses what it cannot hold, as it does without eviction"
        if t.reason:
            t.requests = fed
    return all(t.reason for t in tiers)


class _Tier:
    def __init__(self, name: str, caches: list, ttl: float | None):
        self.name, self.caches, self.ttl = name, caches, ttl
        self.capacity = sum(c.capacity for c in caches)
        self.written = 0
        self.refused = 0
        self.requests = 0
        self.reason = ""

    def used(self) -> int:
        return sum(c.used for c in self.caches)


def fill(sim, seed: int) -> tuple[list[WarmTier], float]:
    """Warm the offload tiers of `sim` (a run.Simulation before its first event); returns how each was left and
    the arrival of the last warm-up request, the time the run's clock must start at."""
    r = sim.r
    check(r)
    lm, native = sim.lmcache, sim.native
    if lm is not None:
        tiers = [_Tier(t, lm.caches[t], r.lmcache.tier(t).ttl_s) for t in lm.order]
        unit, size = lm.chunk_size, lm.chunk_bytes
    elif native is not None:
        tiers = [_Tier(t, native.caches[t], None) for t in native.order]
        unit, size = native.chunk_tokens, native.chunk_bytes
    else:
        return [], 0.0
    feed = _lmcache_feed(lm, r, tiers) if lm is not None else _native_feed(native, tiers)
    # disaggregated, the tiers are the prefill pool's (kvplan.sim.disagg): its instances are the ones warmed
    instances = r.instances if r.disaggregation is None else r.disaggregation.prefill.instances
    fed, first, last, limit = 0, None, 0.0, FIRST_GENERATION
    done = False
    while not done:
        before = [t.written for t in tiers]
        stream = wl._Drawn(r, seed, stage=_Draws(r.workload.arrivals, seed, limit)).stream()
        for i, req in enumerate(stream):
            if i < fed:
                continue
            first = req.arrival if first is None else first
            last = req.arrival
            who = (req.session if req.session >= 0 else req.id) % instances
            feed(who, req, unit, size, last)
            req.content.forget()
            fed = i + 1
            if fed % CHECK == 0 and _settle(tiers, fed, last - first):
                done = True
                break
        if not done:
            for t, was in zip(tiers, before):   # a whole generation wrote it nothing: it holds all there is
                if not t.reason and t.written == was:
                    t.reason = "holds all this workload writes: the last warm-up requests wrote it nothing new"
                    t.requests = fed
            done = _settle(tiers, fed, last - (first or 0.0)) or fed >= MAX_REQUESTS or len(stream) < limit
        limit = min(4 * limit, MAX_REQUESTS)
    span = last - (first or 0.0)
    for t in tiers:
        if not t.reason:
            t.requests = fed
    out = [WarmTier(tier=t.name, requests=t.requests, bytes_written=t.written, used_bytes=t.used(),
                    capacity_bytes=t.capacity, span_s=span, warm=bool(t.reason),
                    reason=t.reason or f"still filling when the warm-up stopped at its bound of {fed:,} requests")
           for t in tiers]
    return out, last


def _lmcache_feed(lm, r, tiers: list[_Tier]):
    """One warm-up request through LMCache's lookup and stores (module docstring)."""
    by_name = {t.name: t for t in tiers}
    promote = r.lmcache.mode == "inprocess" and "ddr" in by_name
    order = lm.order
    decode = lm.save_decode_cache

    def store(tier: _Tier, cache, keys: list[int], size: int, now: float) -> None:
        cache.expire(now)
        stored, refused = cache.store(keys, size, now)
        tier.written += stored * size
        tier.refused += refused

    def feed(instance: int, req: wl.Request, unit: int, size: int, now: float) -> None:
        keys = req.content.keys(unit, req.prompt_tokens)
        pos = 0
        for name in order:                     # the longest prefix across the tiers, refreshed where found
            if pos == len(keys):
                break
            cache = lm.cache(name, instance)
            cache.expire(now)
            held = cache.prefix(keys, pos)
            if held:
                cache.touch(keys[pos:pos + held], now)
                if promote and name != "ddr":
                    store(by_name["ddr"], lm.cache("ddr", instance), keys[pos:pos + held], size, now)
                pos += held
        fresh = keys[pos:]
        if decode:
            fresh = fresh + req.content.keys(unit, req.prompt_tokens + req.output_tokens)[len(keys):]
        if not fresh:
            return
        for name in order:                     # write-through; nvme and ceph take the chunks they lack
            cache = lm.cache(name, instance)
            keys_in = fresh if name == "ddr" else cache.absent(fresh)
            if keys_in:
                store(by_name[name], cache, keys_in, size, now)

    return feed


def _native_feed(native, tiers: list[_Tier]):
    """One warm-up request through vLLM's native CPU tier: its hit refreshed, the prompt chunks it lacks stored."""
    tier = tiers[0]

    def feed(instance: int, req: wl.Request, unit: int, size: int, now: float) -> None:
        cache = native.cache(instance)
        keys = req.content.keys(unit, req.prompt_tokens)
        held = cache.prefix(keys, 0)
        if held:
            cache.touch(keys[:held], now)
        fresh = cache.absent(keys[held:])
        if fresh:
            stored, refused = cache.store(fresh, size, now)
            tier.written += stored * size
            tier.refused += refused

    return feed


def baseline(sim) -> dict[str, tuple[int, int, int]]:
    """Each tier's evictions, evicted bytes and expiries so far (the warm-up's), which the run's figures leave out."""
    off = sim.offload
    if off is None:
        return {}
    return {t: (sum(c.evictions for c in off.caches[t]), sum(c.evicted_bytes for c in off.caches[t]),
                sum(getattr(c, "expired", 0) for c in off.caches[t])) for t in off.order}
