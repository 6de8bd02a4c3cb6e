"""llm-d's scheduler as the router: weighted scorers over the instances, the highest sum takes the request.

llm-d routes through a Kubernetes gateway whose endpoint picker (EPP) runs a scheduling profile for
each request. The profile's scorers each rate every instance in [0, 1]; the scheduler adds them up,
each times its weight (pkg/epp/scheduling/scheduler_profile.go `runScorerPlugins`, a score outside
[0, 1] clipped into it), and the max-score-picker takes the instance with the highest sum, ties
broken at random (picker/maxscore/picker.go: the candidates shuffled, then a stable sort by score).
Sources, llm-d/llm-d-inference-scheduler at 520af47896e5f06e43d09aca281a1149187b0ffd, under
pkg/epp/framework/plugins/scheduling/ unless said:

- queue-scorer (scorer/queuedepth/queue.go): (max - q) / (max - min) over the instances' waiting
  queues q (vLLM's num_requests_waiting); 1 for every instance when all queues are equal.
- kv-cache-utilization-scorer (scorer/kvcacheutilization/kvcache_utilization.go): 1 - the share of
  the instance's KV blocks in use (vLLM's kv_cache_usage_perc: blocks not free over all blocks).
- prefix-cache-scorer (scorer/prefix/plugin.go): matched / total blocks of the prompt, as the
  approx-prefix-cache-producer found them (requestcontrol/dataproducer/approximateprefix/): it hashes
  the prompt in chained blocks (at most maxPrefixBlocksToMatch, 256; a partial last block counts in
  the total), keeps per instance an LRU of the block hashes it routed there (as many as the
  instance's GPU blocks), and, walking the prompt's blocks in order until no instance holds one,
  counts for each instance the blocks it holds. The index is of routed prompts, not of what the
  instance still holds: an evicted prefix still attracts requests until the LRU drops it.
  llm-d's tiered-prefix-cache guide (llm-d/llm-d guides/tiered-prefix-cache/cpu/router/
  tiered-prefix-cache-cpu.values.yaml, commit c2405cdf) adds a second one for the CPU tier: a
  producer whose LRU is as large as the CPU tier (lruCapacityPerServer) and its own prefix scorer.
- precise-prefix-cache-scorer (scorer/preciseprefixcache/ with llm-d/llm-d-kv-cache at
  7be76e119ca50c5700b3bca65a19b6a0218a9b62, pkg/kvcache/kvblock_scorer.go): an index fed by the
  engines' KV events, so it sees what each instance holds, in HBM and in its CPU tier. Walking the
  prompt's full blocks from the first while the instance holds them in some tier, each block adds
  its tier's weight (gpu 1.0, cpu 0.8: pkg/kvcache/backend.go; a block in both counts 1); the
  score is that sum over the prompt's blocks, at most 1.
- no-hit-lru-scorer (scorer/nohitlru/no_hit_lru.go): for a request no instance has any prefix of
  (a cold one), instances never given a cold request score 1, 1 - 1/(n-1), ... in order, then those
  given one, least recently first, continuing the ranks down to 0; a warm request scores 0.5
  everywhere. The chosen instance of a cold request becomes the most recently used.

What the simulator does not copy: llm-d reads the engines' metrics when it scrapes them (every
50 ms by default), the simulator at the request's arrival; llm-d hashes characters (4 to a token)
where the simulator hashes tokens, so a block here is block_size tokens exactly, and its partial
last block is never matched (only an identical prompt would match it). A tie is broken by the
run's seed, so a run is repeatable. An instance's CPU tier is read through the engine's
`cpu_prefix_tokens` (an offload engine answers it: LMCache's ddr tier today). The precise scorer
sees a CPU tier only through the KV events its offload engine publishes (vLLM's offloading
connector does: llm-d-kv-cache pkg/kvevents/pool.go handles their CPU-tier updates); that LMCache
publishes them too is assumed here, not checked, and kvplan refuses to deploy precise matching.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..router_settings import LlmDScheduler
    from .workload import Request


def queue_scores(waiting: list[int]) -> list[float]:
    """queue-scorer: the shortest waiting queue 1, the longest 0, linear between; all 1 when they are equal."""
    lo, hi = min(waiting), max(waiting)
    if hi == lo:
        return [1.0] * len(waiting)
    return [(hi - q) / (hi - lo) for q in waiting]


def kv_utilization_scores(usage: list[float]) -> list[float]:
    """kv-cache-utilization-scorer: 1 - the share of KV blocks in use."""
    return [1.0 - u for u in usage]


def prefix_scores(matched: list[int], total: int) -> list[float]:
    """prefix-cache-scorer: matched / total blocks; 0 for a prompt with no block."""
    return [m / total if total else 0.0 for m in matched]


def precise_scores(gpu_blocks: list[int], cpu_blocks: list[int], total: int, cpu_weight: float) -> list[float]:
    """precise-prefix-cache-scorer: leading blocks held in HBM count 1, those beyond held only in the CPU tier
    `cpu_weight`, over the prompt's `total` blocks (at most 1). Both tiers hold leading runs of the prompt (its
    blocks chain), so the instance holds the first max(gpu, cpu) blocks in one tier or the other."""
    if not total:
        return [0.0] * len(gpu_blocks)
    return [min(1.0, (g + cpu_weight * max(0, c - g)) / total) for g, c in zip(gpu_blocks, cpu_blocks)]


def no_hit_lru_scores(n: int, recent: list[int], cold: bool) -> list[float]:
    """no-hit-lru-scorer over instances 0..n-1, `recent` the instances given a cold request, least recently first."""
    if not cold:
        return [0.5] * n
    if n == 1:
        return [1.0]
    used = set(recent)
    order = [i for i in range(n) if i not in used] + recent      # never used (in instance order), then least recent
    scores = [0.0] * n
    for rank, i in enumerate(order):
        scores[i] = max(0.0, 1.0 - rank / (n - 1))
    return scores


class PrefixIndex:
    """approx-prefix-cache-producer's index: per instance an LRU of the block hashes routed there, and for each hash
    the instances that hold it (one look-up a block, however many instances)."""

    def __init__(self, instances: int, capacity: int):
        self.capacity = capacity
        self.lrus: list[OrderedDict[int, None]] = [OrderedDict() for _ in range(instances)]
        self.holders: dict[int, set[int]] = {}

    def matched(self, keys: list[int]) -> list[int]:
        """Per instance, the blocks of `keys` it holds, counted along the prompt until no instance holds one."""
        counts = [0] * len(self.lrus)
        holders = self.holders
        for key in keys:
            held = holders.get(key)
            if not held:
                break
            for i in held:
                counts[i] += 1
        return counts

    def add(self, instance: int, keys: list[int]) -> None:
        """The prompt's blocks routed to `instance`: each becomes its most recent, the oldest beyond capacity go."""
        lru, holders = self.lrus[instance], self.holders
        for key in keys:
            if key in lru:
                lru.move_to_end(key)
            else:
                lru[key] = None
                holders.setdefault(key, set()).add(instance)
        while len(lru) > self.capacity:
            old, _ = lru.popitem(last=False)
            held = holders[old]
            held.discard(instance)
            if not held:
                del holders[old]

    def clear(self) -> None:
        for lru in self.lrus:
            lru.clear()
        self.holders.clear()


class Scheduler:
    """Picks an instance for each request as llm-d's scheduler with `config`'s scorers and weights does
    (`Resolved.llm_d`); ties are broken by a generator seeded with `seed`."""

    def __init__(self, config: "LlmDScheduler", engines: list, block_size: int, seed: int):
        self.config, self.engines, self.bs = config, engines, block_size
        n = len(engines)
        self.gpu_index = PrefixIndex(n, config.gpu_index_blocks)
        self.cpu_index = PrefixIndex(n, config.cpu_index_blocks)
        self.recent_cold: list[int] = []           # instances given a cold request, least recently first
        self.cold = False                           # whether the request last scored has no prefix anywhere
        self.rng = random.Random(seed)

    def scores(self, req: "Request") -> list[float]:
        """The weighted sum of the scorers for each instance (the approximate indexes are not changed)."""
        c, engines, n = self.config, self.engines, len(self.engines)
        total = [0.0] * n

        def add(weight: float, scores: list[float]) -> None:
            for i, s in enumerate(scores):
                total[i] += weight * min(1.0, max(0.0, s))

        if c.queue:
            add(c.queue, queue_scores([e.waiting_count for e in engines]))
        if c.kv_cache_utilization:
            add(c.kv_cache_utilization, kv_utilization_scores([e.hbm.used_blocks / e.hbm.num_blocks for e in engines]))
        gpu = self._gpu_match(req)
        self.cold = not any(gpu)
        if c.prefix:
            add(c.prefix, gpu)
        if c.cpu_prefix:
            keys, blocks = self._hashed(req)
            add(c.cpu_prefix, prefix_scores(self.cpu_index.matched(keys), blocks))
        if c.no_hit_lru:
            add(c.no_hit_lru, no_hit_lru_scores(n, self.recent_cold, self.cold))
        return total

    def pick(self, req: "Request") -> int:
        scores = self.scores(req)
        best = max(scores)
        tied = [i for i, s in enumerate(scores) if s == best]
        choice = tied[0] if len(tied) == 1 else self.rng.choice(tied)
        self._routed(req, choice)
        return choice

    def _hashed(self, req: "Request") -> tuple[list[int], int]:
        """The approximate index's block hashes of the prompt and its block count (a partial last block included),
        both at most max_prefix_blocks."""
        cap = self.config.max_prefix_blocks
        blocks = min(-(-req.prompt_tokens // self.bs), cap)
        return req.content.keys(self.bs, min(req.prompt_tokens, cap * self.bs)), blocks

    def _gpu_match(self, req: "Request") -> list[float]:
        """The GPU prefix scorer's scores: from the routed-prompt index (approximate) or the engines' HBM and CPU
        tiers (precise)."""
        c = self.config
        if c.prefix_match == "approximate":
            keys, blocks = self._hashed(req)
            return prefix_scores(self.gpu_index.matched(keys), blocks)
        full = req.prompt_tokens // self.bs
        return precise_scores([e.gpu_prefix_blocks(req) for e in self.engines],
                              [e.cpu_prefix_tokens(req) // self.bs for e in self.engines], full, c.cpu_tier_weight)

    def _routed(self, req: "Request", choice: int) -> None:
        """What the scheduler records once it has picked (its PreRequest hooks): the prompt into the approximate
        indexes, the instance as the most recent for a cold request."""
        c = self.config
        if c.prefix_match == "approximate" or c.cpu_prefix:
            keys, _ = self._hashed(req)
            if c.prefix_match == "approximate":
                self.gpu_index.add(choice, keys)
            if c.cpu_prefix:
                self.cpu_index.add(choice, keys)
        if c.no_hit_lru and self.cold:
            if choice in self.recent_cold:
                self.recent_cold.remove(choice)
            self.recent_cold.append(choice)

    def forget(self) -> None:
        self.gpu_index.clear()
        self.cpu_index.clear()
