"""run(resolved, seed) -> SimResult: the workload through the KV-cache hierarchy, in SimPy.

One process per request. A request is routed to an instance, waits for one of its max_num_seqs
running slots (vLLM's admission limit), looks up vLLM's HBM prefix cache
(blocks), then LMCache (chunks) for the rest of its prompt, loads what LMCache holds beyond the
HBM hit (synchronously, before its prefill), stores the chunks LMCache did not have, and on
finishing leaves its blocks cached in HBM. Where the KV of every prompt token came from — HBM,
ddr, nvme, ceph, or recomputation — is recorded per request and per tier.

The GPU's compute time is Simulator II's: here prefill and decode take no time, so timing
orders loads, stores and asynchronous writes correctly but latencies are transfer times only.

vLLM details copied (reference/lmcache-vllm.md §6 "Partial hit with vLLM"): the HBM hit is
whole blocks and stops one token short of the prompt; LMCache loads only the tokens beyond what
HBM already has; on a full-prompt LMCache hit one token is still recomputed; nothing is loaded
when the extra hit is below min_retrieve_tokens.
"""

from __future__ import annotations

import gc
from itertools import count
from typing import Callable

import simpy

from ..resolve import Resolved
from . import workload as wl
from .fabric import Fabric
from .lmcache import TIERS, LMCacheModel
from .prefix_cache import PrefixCache
from .result import LinkResult, RequestRecord, SimResult, TierResult

Progress = Callable[[float], None]


class Router:
    """Which instance serves a request: round_robin, least_loaded, session_affinity, prefix_aware."""

    def __init__(self, kind: str, instances: int, hbm: list[PrefixCache], load: list[int]):
        self.kind, self.n, self.hbm, self.load = kind, instances, hbm, load
        self._turn = count()

    def pick(self, request: wl.Request, block_keys: list[int]) -> int:
        if self.n == 1:
            return 0
        if self.kind == "session_affinity" and request.session >= 0:
            return request.session % self.n
        if self.kind == "least_loaded":
            return min(range(self.n), key=lambda i: (self.load[i], i))
        if self.kind == "prefix_aware":
            return max(range(self.n), key=lambda i: (self.hbm[i].match(block_keys), -self.load[i], -i))
        return next(self._turn) % self.n


class Simulation:
    def __init__(self, r: Resolved, seed: int | None = None, progress: Progress | None = None):
        self.r = r
        self.seed = r.workload.seed if seed is None else seed
        self.progress = progress
        self.env = simpy.Environment()
        self.fabric = Fabric(self.env, r)
        self.hbm = [PrefixCache(r.hbm_blocks) for _ in range(r.instances)]
        self.load = [0] * r.instances
        self.slots = [simpy.Resource(self.env, capacity=r.max_num_seqs) for _ in range(r.instances)]
        self.lmcache = LMCacheModel(self.env, r, self.fabric) if r.lmcache else None
        self.router = Router(r.router, r.instances, self.hbm, self.load)
        self.records: list[RequestRecord] = []
        self.offset = 0.0                        # traffic starts after the warm-up
        self.finished = False
        self.hbm_served = 0
        self.occupancy: dict[str, list[tuple[float, int]]] = {t: [] for t in ("hbm", *TIERS)}
        self.peak: dict[str, int] = {}

    # ---- one request
    def serve(self, req: wl.Request, instance: int | None = None, record: bool = True):
        r, env, lm = self.r, self.env, self.lmcache
        yield env.timeout(max(0.0, req.arrival + self.offset - env.now))
        bs = r.block_size
        blocks = req.content.keys(bs, req.prompt_tokens)
        if instance is None:
            instance = self.router.pick(req, blocks)
        self.load[instance] += 1
        slot = self.slots[instance].request()     # vLLM runs at most max_num_seqs requests at once
        yield slot
        hbm = self.hbm[instance]
        hbm_hit = min(hbm.match(blocks), (req.prompt_tokens - 1) // bs) if r.prefix_caching else 0
        holding = hbm.allocate(blocks, hbm_hit, -(-(req.prompt_tokens + req.output_tokens) // bs))
        if holding is None:          # the pool is full of running requests: serve without reuse
            hbm_hit = 0
        hbm_tokens = hbm_hit * bs
        tokens = {"ddr": 0, "nvme": 0, "ceph": 0}
        load_time = store_time = 0.0
        if lm is not None:
            lmc = r.lmcache
            chunks = req.content.keys(lmc.chunk_size, req.prompt_tokens)
            spans = lm.lookup(instance, chunks)
            hit_tokens = (spans[-1].end if spans else 0) * lmc.chunk_size
            usable = min(hit_tokens, req.prompt_tokens - 1)
            if usable > hbm_tokens and usable - hbm_tokens >= lmc.min_retrieve_tokens:
                for span in spans:
                    a, b = max(span.start * lmc.chunk_size, hbm_tokens), min(span.end * lmc.chunk_size, usable)
                    tokens[span.tier] += max(0, b - a)
                start = env.now
                yield env.process(lm.retrieve(instance, chunks, spans, hbm_tokens, usable))
                load_time = env.now - start
            # the prefill computes the rest (Simulator II times it); then the new chunks are saved
            start = env.now
            stored_from = spans[-1].end if spans else 0
            new = chunks[stored_from:]
            if lmc.save_decode_cache:
                new = req.content.keys(lmc.chunk_size, req.prompt_tokens + req.output_tokens)[stored_from:]
            yield env.process(lm.store(instance, new))
            store_time = env.now - start
        if holding is not None and r.prefix_caching:
            full = req.content.keys(bs, req.prompt_tokens + req.output_tokens)
            hbm.commit(holding, full, len(full))
            hbm.release(holding)
        self.slots[instance].release(slot)
        self.load[instance] -= 1
        if record:
            served = hbm_tokens + sum(tokens.values())
            self.hbm_served += hbm_tokens
            self.records.append(RequestRecord(
                id=req.id, instance=instance, arrival=req.arrival, prompt_tokens=req.prompt_tokens,
                output_tokens=req.output_tokens, hbm_tokens=hbm_tokens, ddr_tokens=tokens["ddr"],
                nvme_tokens=tokens["nvme"], ceph_tokens=tokens["ceph"],
                recomputed_tokens=req.prompt_tokens - served, load_time=load_time, store_time=store_time))

    # ---- the run
    def sample(self, interval: float, end_hint: float):
        """Record occupancy (and report progress) every `interval` until the last request is done."""
        while not self.finished:
            self._sample()
            if self.progress and end_hint > 0:
                self.progress(min(1.0, self.env.now / end_hint))
            yield self.env.timeout(interval)

    def _sample(self) -> None:
        now = self.env.now
        used = {"hbm": sum(c.cached_blocks for c in self.hbm) * self.r.block_bytes_per_rank * self.r.tensor_parallel}
        if self.lmcache:
            for tier in self.lmcache.order:
                for cache in self.lmcache.caches[tier]:
                    cache.expire(now)
                used[tier] = self.lmcache.used_bytes(tier)
        for tier, value in used.items():
            self.occupancy[tier].append((round(now - self.offset, 9), value))
            self.peak[tier] = max(self.peak.get(tier, 0), value)

    def run(self) -> SimResult:
        env, r = self.env, self.r
        warm = wl.warmup(r, self.seed)
        if warm:   # prefill the templates on every instance before traffic
            env.run(simpy.AllOf(env, [env.process(self.serve(w, i, record=False))
                                      for i in range(r.instances) for w in warm]))
        self.offset = offset = env.now
        reqs = wl.requests(r, self.seed)
        done = simpy.AllOf(env, [env.process(self.serve(q)) for q in reqs])
        last = reqs[-1].arrival if reqs else 0.0
        env.process(self.sample(max(last / 100, 1e-3), last + offset))
        env.run(done)
        duration = env.now - offset
        self.finished = True
        env.run()                                # let the asynchronous writes still in flight land
        self._sample()
        return self._result(reqs, warm, duration)

    def _result(self, reqs, warm, duration: float) -> SimResult:
        r, recs = self.r, sorted(self.records, key=lambda x: x.id)
        prompt = sum(x.prompt_tokens for x in recs)
        reached, tiers = prompt, []
        bytes_per_block = r.block_bytes_per_rank * r.tensor_parallel
        tiers.append(TierResult(
            name="hbm", caches=r.instances, capacity_bytes=r.hbm_blocks * bytes_per_block * r.instances,
            served_tokens=self.hbm_served, served_share=_ratio(self.hbm_served, prompt),
            token_hit_ratio=_ratio(self.hbm_served, reached), lookup_chunks=0, hit_chunks=0, chunk_hit_ratio=0.0,
            bytes_read=0, bytes_written=0, stored_chunks=0, refused_chunks=0, promoted_chunks=0,
            evictions=sum(c.evictions for c in self.hbm), evicted_bytes=sum(c.evictions for c in self.hbm) * bytes_per_block,
            expired=0, peak_used_bytes=self.peak.get("hbm", 0), final_used_bytes=self.occupancy["hbm"][-1][1],
            occupancy=self.occupancy["hbm"]))
        reached -= self.hbm_served
        lm_hit = None
        if self.lmcache:
            lm = self.lmcache
            for tier in lm.order:
                c, caches = lm.counters[tier], lm.caches[tier]
                tiers.append(TierResult(
                    name=tier, caches=len(caches), capacity_bytes=sum(x.capacity for x in caches),
                    served_tokens=c.served_tokens, served_share=_ratio(c.served_tokens, prompt),
                    token_hit_ratio=_ratio(c.served_tokens, reached), lookup_chunks=c.lookup_chunks,
                    hit_chunks=c.hit_chunks, chunk_hit_ratio=_ratio(c.hit_chunks, c.lookup_chunks),
                    bytes_read=c.bytes_read, bytes_written=c.bytes_written, stored_chunks=c.stored_chunks,
                    refused_chunks=c.refused_chunks, promoted_chunks=c.promoted_chunks,
                    evictions=sum(x.evictions for x in caches), evicted_bytes=sum(x.evicted_bytes for x in caches),
                    expired=sum(getattr(x, "expired", 0) for x in caches), peak_used_bytes=self.peak.get(tier, 0),
                    final_used_bytes=lm.used_bytes(tier), occupancy=self.occupancy[tier]))
                reached -= c.served_tokens
            asked = sum(lm.counters[t].hit_chunks for t in lm.order) * r.lmcache.chunk_size
            lm_hit = _ratio(asked, prompt)
        span = self.env.now - self.offset           # the links worked until the last write landed
        links = [LinkResult(name=link.name, transfers=link.transfers, work=link.work_done,
                            utilisation=link.utilisation(span)) for link in self.fabric.links()]
        return SimResult(
            name=r.name, spec_hash=r.spec_hash, seed=self.seed, lmcache_mode=r.lmcache.mode if r.lmcache else None,
            requests=len(recs), warmup_requests=len(warm), rejected_requests=getattr(reqs, "rejected", 0),
            duration=duration, prompt_tokens=prompt, recomputed_tokens=sum(x.recomputed_tokens for x in recs),
            lmcache_hit_ratio=lm_hit, tiers=tiers, links=links, per_request=recs)


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def run(r: Resolved, seed: int | None = None, progress: Progress | None = None) -> SimResult:
    """Simulate the resolved spec's workload through its KV-cache hierarchy.

    The cyclic garbage collector is paused for the run: the workload's millions of small
    objects would otherwise be rescanned again and again, and the run creates no cycles
    worth collecting before it ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return Simulation(r, seed, progress).run()
    finally:
        if was_enabled:
            gc.enable()
