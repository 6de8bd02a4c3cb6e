"""LMCache as the real one behaves, chunk for chunk, in the mode the spec chose.

The rules (reference/lmcache-vllm.md §2 and §6, read from LMCache 0.5.6):

- Keys are prefix-chained chunk hashes; only full chunks exist. The trailing partial chunk of a
  prompt is never stored or hit unless `save_unfull_chunk` (§6 "Chunking").
- Lookup is the longest contiguous prefix across tiers in the order ddr -> nvme -> ceph: each
  tier says how many consecutive keys it holds from where the previous one stopped; the hit
  ends at the first key no tier holds, so one prefix may be split over tiers (§6 "Lookup").
  vLLM asks about the whole prompt, and every key found is refreshed in its tier's policy (0.5.6
  `LMCacheEngine.lookup` pins the hits, then `touch_cache`), the ones vLLM's own prefix cache
  serves included; only what lies beyond vLLM's hit is loaded.
- A request's lookup is counted once, at its first admission; a preempted request admitted
  again looks up again, and that re-lookup is counted apart (`relookup_*`).
- Stores are write-through to every tier (not demote-on-evict), skip chunks the lookup already
  hit, and happen only at full chunk boundaries; generated tokens only with save_decode_cache
  (§6 "Stores").
- In-process mode: one cache per vLLM instance (its TP ranks each hold their slice of every
  chunk) for ddr and nvme; LocalCPU and LocalDisk evict one object at a time on demand; the
  remote (ceph) tier never evicts and expires only by the RGW lifecycle rule (TTL); a chunk read
  from nvme or ceph is written back into ddr (§2, §6 "Promotion").
- MP mode: one server per node shared by its instances; L1 (ddr) and every L2 adapter with a
  capacity evict in batches, a ratio of the capacity once usage reaches a watermark (§1.2
  --eviction-trigger-watermark/--eviction-ratio: `Resolved.lmcache.eviction_watermark` and
  `eviction_ratio`, LMCache's 80 % and 20 %, which the deployment writes too); every store goes to all L2 adapters and stays
  in L1 (`--l2-store-policy default`); chunks loaded from L2 are not retained in L1
  (`--l2-prefetch-policy default`) (§1.2, §6).

Timing: retrieval is synchronous, before the request's prefill; the GPU -> DRAM copy of a store
is on the critical path, the NVMe and Ceph writes are asynchronous and a chunk becomes visible
in a tier when its write completes (§6 "Async behaviour").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from ..resolve import Resolved
from .clock import AllOf, Environment
from .eviction import TTL, make
from .policies import Cache
from .fabric import Fabric

TIERS = ("ddr", "nvme", "ceph")


@dataclass
class TierCounters:
    lookup_chunks: int = 0      # keys this tier was asked about by requests' first lookups
    hit_chunks: int = 0         # of those, held here
    relookup_chunks: int = 0    # keys asked about again by preempted requests' re-admissions
    relookup_hit_chunks: int = 0
    served_chunks: int = 0      # chunks actually loaded from here (beyond vLLM's own HBM hit)
    served_tokens: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    stored_chunks: int = 0
    refused_chunks: int = 0     # stores a full tier without eviction could not take
    promoted_chunks: int = 0    # in-process: copies written back into ddr after a lower-tier hit


class Span:
    """Chunks [start, end) of a lookup, held in `tier`. A plain class, not a dataclass: one is made for
    every tier a lookup hits, and a compiled dataclass's __init__ is the interpreted one dataclasses writes."""

    __slots__ = ("tier", "start", "end")

    def __init__(self, tier: str, start: int, end: int):
        self.tier = tier
        self.start = start                      # chunk index
        self.end = end

    def __repr__(self) -> str:
        return f"Span({self.tier!r}, {self.start}, {self.end})"


@dataclass
class LMCacheModel:
    env: Environment
    r: Resolved
    fabric: Fabric
    caches: dict[str, list[Cache | TTL]] = field(default_factory=dict)   # tier -> its caches
    counters: dict[str, TierCounters] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lm = self.r.lmcache
        if lm is None:
            raise ValueError("LMCacheModel needs a spec with an lmcache section")
        # the settings each request reads, as plain fields (the spec's models are read by name)
        self.chunk_size, self.chunk_bytes, self.storing_ranks = lm.chunk_size, lm.chunk_bytes, lm.storing_ranks
        self.save_decode_cache: bool = lm.save_decode_cache
        self.min_retrieve_tokens: int = lm.min_retrieve_tokens
        self._per_node, self._kv_per_token = self.r.instances_per_node, self.r.kv_bytes_per_token_per_rank
        self._promote = lm.mode == "inprocess"   # a chunk read from below ddr is written back into it
        batch = dict(watermark=lm.eviction_watermark, ratio=lm.eviction_ratio) if lm.mode == "mp" else {}
        self._of_instance: dict[str, list[Cache | TTL]] = {}      # tier -> the cache each instance uses
        for t in lm.tiers:
            caches = self.caches[t.name] = [make(t.eviction, t.capacity_bytes, ttl=t.ttl_s, **batch)
                                            for _ in range(t.caches)]
            self.counters[t.name] = TierCounters()
            # an instance's cache is its own, its node's or the cluster's one
            owner = [i if t.scope == "instance" else self.node(i) if t.scope == "node" else 0
                     for i in range(self.r.instances)]
            self._of_instance[t.name] = [caches[o] for o in owner]
        self.order = [t for t in TIERS if t in self.caches]
        self.requested_tokens = 0       # prompt tokens of first lookups
        self.hit_tokens = 0             # of those, the held prefix (whole chunks)
        self.relookups = 0              # lookups of preempted requests being re-admitted
        self.relookup_tokens = 0
        self.relookup_hit_tokens = 0

    # ---- where an instance's caches are
    def cache(self, tier: str, instance: int) -> Cache | TTL:
        return self._of_instance[tier][instance]

    def node(self, instance: int) -> int:
        return instance // self._per_node

    # ---- lookup
    def probe(self, instance: int, keys: list[int]) -> tuple[list[Span], list[tuple[str, int, int]]]:
        """The longest prefix of `keys` held across the tiers, as spans per tier, and what each
        tier was asked and held (pass to `count_lookup` when the lookup counts)."""
        spans, counts, pos, now = [], [], 0, self.env.now
        for tier in self.order:
            if pos == len(keys):
                break
            cache = self.cache(tier, instance)
            cache.expire(now)
            held = cache.prefix(keys, pos)
            counts.append((tier, len(keys) - pos, held))
            if held:
                spans.append(Span(tier, pos, pos + held))
                pos += held
        return spans, counts

    def cpu_prefix_tokens(self, instance: int, content, prompt_tokens: int) -> int:
        """Leading tokens of a prompt (`content`, `prompt_tokens` long) that `instance`'s CPU tier (ddr) holds, in
        whole chunks; 0 without a ddr tier. A query: nothing is touched or counted (a router asks it of every
        instance: kvplan.sim.llmd)."""
        if "ddr" not in self.caches:
            return 0
        return self.cache("ddr", instance).prefix(content.keys(self.chunk_size, prompt_tokens), 0) * self.chunk_size

    def count_lookup(self, counts: list[tuple[str, int, int]], tokens: int, relookup: bool = False) -> None:
        """Count an admitted request's lookup of `tokens` tokens (what `probe` returned as `counts`).

        A request's prefix is counted once, at its first admission: the hit ratios then weigh every
        request once however often it was preempted. The lookup a preempted request makes when it
        is admitted again (`relookup`) is counted apart, so a ratio means the same under load.
        """
        size = self.chunk_size
        held = sum(h for _, _, h in counts) * size
        if relookup:
            self.relookups += 1
            self.relookup_tokens += tokens
            self.relookup_hit_tokens += held
            for tier, asked, hit in counts:
                c = self.counters[tier]
                c.relookup_chunks += asked
                c.relookup_hit_chunks += hit
            return
        self.requested_tokens += tokens
        self.hit_tokens += held
        for tier, asked, hit in counts:
            c = self.counters[tier]
            c.lookup_chunks += asked
            c.hit_chunks += hit

    def touch(self, instance: int, keys: list[int], spans: list[Span]) -> None:
        """An admitted request's lookup refreshes every chunk it found, in each tier's policy, the
        chunks vLLM's own prefix cache already serves included: LMCache 0.5.6 pins the hits of
        vLLM's lookup and then updates the policy for each of them (in-process:
        `LMCacheEngine.lookup` -> `StorageManager.touch_cache`; MP: the prefetch controller's
        `touch_keys` on L1 hits), not only for the chunks a retrieve later reads."""
        now = self.env.now
        for span in spans:
            self.cache(span.tier, instance).touch(keys[span.start:span.end], now)

    # ---- retrieve
    def portions(self, spans: list[Span], first_token: int, last_token: int) -> list[tuple[str, int, int, int]]:
        """What loading tokens [first_token, last_token) takes from each span: (tier, first chunk,
        end chunk, tokens). Chunks that hold only tokens outside the range are not read."""
        size, out = self.chunk_size, []
        for span in spans:
            a = max(span.start, first_token // size)
            b = min(span.end, -(-last_token // size))
            if a < b:
                out.append((span.tier, a, b, min(b * size, last_token) - max(a * size, first_token)))
        return out

    def retrieve(self, instance: int, keys: list[int], spans: list[Span], first_token: int, last_token: int):
        """A process: load tokens [first_token, last_token) from the spans into the GPU."""
        env = self.env
        loads = []
        for tier, a, b, tokens in self.portions(spans, first_token, last_token):
            c = self.counters[tier]
            c.served_chunks += b - a
            c.served_tokens += tokens
            c.bytes_read += (b - a) * self.chunk_bytes
            loads.append(env.process(self._load(instance, tier, keys[a:b], tokens)))
        if loads:
            yield AllOf(env, loads)

    def _load(self, instance: int, tier: str, keys: list[int], tokens: int):
        f = self.fabric
        if tier == "nvme":
            yield from f.nvme_read(self.node(instance), len(keys) * self.chunk_bytes, len(keys) * self.storing_ranks)
        elif tier == "ceph":
            yield from f.ceph_read(self.node(instance), keys, self.chunk_bytes, self.storing_ranks)
        yield from f.to_gpu(instance, tokens * self._kv_per_token)
        if tier != "ddr" and self._promote and "ddr" in self.caches:
            self._insert("ddr", instance, keys, promoted=True)

    # ---- store
    def store(self, instance: int, keys: list[int]):
        """Copy chunks off the GPU (waited for), then write through to every tier, as steps of the caller's
        process (`yield from`).

        Returns once the GPU -> DRAM copy is done; NVMe and Ceph writes continue on their own.
        """
        if not keys:
            return
        yield from self.fabric.from_gpu(instance, len(keys) * self.chunk_size * self._kv_per_token)
        if "ddr" in self.caches:
            self._insert("ddr", instance, keys)
        for tier in ("nvme", "ceph"):
            if tier in self.caches:
                cache = self.cache(tier, instance)
                fresh = cache.absent(keys)
                if fresh:
                    self._write(instance, tier, fresh)

    def _write(self, instance: int, tier: str, keys: list[int]) -> None:
        """Write chunks to nvme or ceph in the background; they are in the tier once the write is done."""
        f = self.fabric
        done = partial(self._insert, tier, instance, keys)
        if tier == "nvme":
            f.nvme_write(self.node(instance), len(keys) * self.chunk_bytes, len(keys) * self.storing_ranks, done)
        else:
            f.ceph_write(self.node(instance), keys, self.chunk_bytes, self.storing_ranks, done)

    def _insert(self, tier: str, instance: int, keys: list[int], promoted: bool = False) -> None:
        cache, c, size, now = self.cache(tier, instance), self.counters[tier], self.chunk_bytes, self.env.now
        cache.expire(now)
        stored, refused = cache.store(keys, size, now)
        c.stored_chunks += stored
        c.bytes_written += stored * size
        if promoted:
            c.promoted_chunks += stored
        c.refused_chunks += refused

    # ---- state
    def used_bytes(self, tier: str) -> int:
        return sum(cache.used for cache in self.caches[tier])
