"""vLLM's native KV offloading (the OffloadingConnector with its CPU tier), as vLLM 0.32.0 behaves.

The other offload engine beside LMCache (lmcache.py); a spec has one or the other. What it does, read from
vLLM 0.32.0 (/opt/kvplan/vllm-venv):

- One CPU tier per instance (vllm/v1/kv_offload/cpu/manager.py `CPUOffloadingManager`), `Resolved.kv_offloading`
  chunks of `chunk_tokens` tokens (offload.py). Keys are the prompt's prefix-chained chunk hashes; only full
  chunks exist. It evicts by LRU (cpu/policies/lru.py, the default) or ARC (cpu/policies/arc.py), and a store
  that finds the tier full of nothing evictable is dropped.
- Lookup (offloading/scheduler.py `get_num_new_matched_tokens`): after vLLM's own HBM prefix-cache hit, the
  connector counts the consecutive chunks the tier holds from there. Those are loaded *asynchronously*: the
  scheduler allocates the request's blocks, parks it as WAITING_FOR_REMOTE_KVS and schedules others; the
  worker copies the chunks host -> GPU between steps, reports them finished in a step's output, and the
  request is scheduled at the next schedule point after that (engine.py: one step later, two with async
  scheduling). A request whose blocks are loading does not hold the step, unlike LMCache's synchronous
  retrieve, which the forward pass waits for.
- Stores (`_build_store_jobs`): the blocks a step completes are copied GPU -> host after the step,
  asynchronously; a chunk is in the tier (and can be hit) once its copy completes. Only prompt blocks
  (`offload_prompt_only`, default true); chunks the tier already holds are not copied again (`prepare_store`).
- Transfers are each rank's slice over its host link, at the catalog's PCIe rate: loads on the host -> GPU
  direction, stores on GPU -> host (fabric.py). Each direction runs its transfers one after the other, in the
  order they were submitted (cpu/gpu_worker.py `SingleDirectionOffloadingHandler`: a transfer's stream starts
  once the previous transfer's has finished), so a load queues behind the loads before it, not beside them.

Counted as LMCache's tiers are (lmcache.py `TierCounters`), under the tier name `ddr`, so reports, sizing and
the doctor read both engines alike: a request's lookup counts once, at its first admission; re-lookups of
preempted requests apart.
"""

from __future__ import annotations

from ..resolve import Resolved
from .clock import Environment, Event, Steps
from .eviction import make
from .fabric import Fabric
from .lmcache import TierCounters

TIER = "ddr"
"""The native CPU tier is host DRAM: reports name it as LMCache's L1 is named."""


class NativeOffload:
    """The CPU tiers of every instance (one each) and their transfers (see the module docstring)."""

    def __init__(self, env: Environment, r: Resolved, fabric: Fabric):
        n = r.kv_offloading
        if n is None:
            raise ValueError("NativeOffload needs a spec with serving.kv_offloading")
        self.env, self.fabric = env, fabric
        self.chunk_tokens, self.chunk_bytes = n.chunk_tokens, n.chunk_bytes
        self.chunk_bytes_per_rank = n.chunk_bytes_per_rank
        self._kv_per_token = r.kv_bytes_per_token_per_rank
        self.caches = {TIER: [make(n.eviction, n.capacity_bytes) for _ in range(r.instances)]}
        self.counters = {TIER: TierCounters()}
        self.order = [TIER]
        self._storing: list[set[int]] = [set() for _ in range(r.instances)]   # keys whose copy is under way
        self._last: dict[tuple[int, bool], Event] = {}    # (instance, to GPU) -> the last transfer submitted
        self.requested_tokens = 0
        self.hit_tokens = 0
        self.relookups = 0
        self.relookup_tokens = 0
        self.relookup_hit_tokens = 0
        self.loads = 0                 # requests that waited for a load
        self.load_seconds = 0.0        # their loads' durations, summed

    def cache(self, instance: int):
        return self.caches[TIER][instance]

    # ---- lookup
    def lookup(self, instance: int, keys: list[int], start: int) -> int:
        """How many consecutive chunks of `keys` from chunk `start` the instance's tier holds."""
        return self.cache(instance).prefix(keys, start) if start < len(keys) else 0

    def cpu_prefix_tokens(self, instance: int, content, prompt_tokens: int) -> int:
        """Leading tokens of a prompt (`content`, `prompt_tokens` long) the instance's CPU tier holds, in whole
        chunks. A query (nothing touched or counted): llm-d's precise CPU prefix scorer asks it of every instance
        (kvplan.sim.llmd), as it asks LMCache's ddr tier."""
        return self.cache(instance).prefix(content.keys(self.chunk_tokens, prompt_tokens), 0) * self.chunk_tokens

    def count_lookup(self, asked: int, held: int, tokens: int, relookup: bool) -> None:
        """Count an admitted request's lookup: `asked` chunks beyond the HBM hit, `held` of them in the tier."""
        c = self.counters[TIER]
        if relookup:
            self.relookups += 1
            self.relookup_tokens += tokens
            self.relookup_hit_tokens += held * self.chunk_tokens
            c.relookup_chunks += asked
            c.relookup_hit_chunks += held
            return
        self.requested_tokens += tokens
        self.hit_tokens += held * self.chunk_tokens
        c.lookup_chunks += asked
        c.hit_chunks += held

    # ---- loads
    def load(self, instance: int, keys: list[int], first_token: int, last_token: int) -> Steps:
        """A process: copy tokens [first_token, last_token) host -> GPU; the chunks are refreshed in the policy."""
        size = self.chunk_tokens
        a, b = first_token // size, -(-last_token // size)
        hit = keys[a:b]
        self.cache(instance).touch(hit, self.env.now)
        tokens = last_token - first_token
        c = self.counters[TIER]
        c.served_chunks += len(hit)
        c.served_tokens += tokens
        c.bytes_read += len(hit) * self.chunk_bytes
        start = self.env.now
        yield from self._in_turn(instance, True, tokens * self._kv_per_token)
        self.loads += 1
        self.load_seconds += self.env.now - start

    # ---- stores
    def store(self, instance: int, keys: list[int]) -> None:
        """Copy the chunks the tier lacks GPU -> host in the background; each is in the tier once copied."""
        storing = self._storing[instance]
        fresh = [k for k in self.cache(instance).absent(keys) if k not in storing]
        if not fresh:
            return
        storing.update(fresh)
        self.env.process(self._copy(instance, fresh))

    def _copy(self, instance: int, keys: list[int]) -> Steps:
        yield from self._in_turn(instance, False, len(keys) * self.chunk_bytes_per_rank)
        self._stored(instance, keys)

    def _in_turn(self, instance: int, to_gpu: bool, nbytes_per_rank: float) -> Steps:
        """One transfer in its direction's queue: it starts when the one submitted before it has finished."""
        before = self._last.get((instance, to_gpu))
        done = self._last[(instance, to_gpu)] = self.env.event()
        if before is not None and not before.processed:
            yield before
        f = self.fabric
        yield from (f.to_gpu(instance, nbytes_per_rank) if to_gpu else f.from_gpu(instance, nbytes_per_rank))
        done.succeed()

    def _stored(self, instance: int, keys: list[int]) -> None:
        self._storing[instance].difference_update(keys)
        stored, refused = self.cache(instance).store(keys, self.chunk_bytes, self.env.now)
        c = self.counters[TIER]
        c.stored_chunks += stored
        c.bytes_written += stored * self.chunk_bytes
        c.refused_chunks += refused

    # ---- state
    def used_bytes(self, tier: str = TIER) -> int:
        return sum(cache.used for cache in self.caches[tier])

