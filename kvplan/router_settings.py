"""The router's settings as resolved: what the request router in front of the vLLM instances is told, which
kvplan.sim.router and kvplan.sim.llmd simulate and kvplan.deploy writes.

- vllm-router's cache_aware policy (kvplan's prefix_aware) follows the cache or balances the load by three
  thresholds, vllm-router 0.1.17's defaults (RouterThresholds), which kvplan.deploy.stack passes to the router
  explicitly.
- llm-d's scheduler (serving.router: llm_d) scores the instances by queue, KV-cache utilisation and prefix, each
  with the spec's weight or llm-d's default; its CPU prefix scorer counts only where the instances have a CPU
  tier (LMCache's ddr tier, or vLLM's native one), and its approximate prefix indexes hold as many blocks as an
  instance's HBM and CPU tier (LlmDScheduler). Sources: llm-d/llm-d-inference-scheduler at 520af478 (plugin
  defaults) and llm-d/llm-d-kv-cache at 7be76e11 (the precise scorer's tier weights).

A CPU prefix weight set where the instances have no CPU tier is added to the caller's problems.
"""

from __future__ import annotations

from typing import Literal

from .errors import Problem
from .offload import ResolvedOffload
from .resolved_tiers import ResolvedLMCache
from .spec.base import SpecModel
from .spec.serving import LlmD


class RouterThresholds(SpecModel):
    """When vllm-router's cache_aware policy (kvplan's prefix_aware) follows the cache and when it balances the load:
    vllm-router 0.1.17's defaults of --cache-threshold, --balance-abs-threshold and --balance-rel-threshold
    (vllm_router/router_args.py RouterArgs), which kvplan.sim.router simulates and kvplan.deploy.stack passes to the
    router explicitly (tests/test_router.py reads them there and runs the real router with them)."""

    cache_threshold: float = 0.3
    """A request goes to the instance it shares its longest routed prefix with when that prefix covers more than this
    fraction of its prompt (and the load is in balance)."""
    balance_abs: int = 64
    """The load is out of balance when the busiest instance has more than this many requests in flight more than
    the idlest..."""
    balance_rel: float = 1.5
    """... and more than this many times as many; then every request goes to the least-loaded instance."""


class LlmDScheduler(SpecModel):
    """llm-d's scheduler as kvplan simulates and renders it (serving.router: llm_d): the scorers' weights and what
    its plugins are told, each a fact kvplan.sim.llmd reads and kvplan.deploy.llmd writes into the
    EndpointPickerConfig. Sources: llm-d/llm-d-inference-scheduler at 520af478 (plugin defaults) and
    llm-d/llm-d-kv-cache at 7be76e11 (pkg/kvcache/backend.go, the precise scorer's tier weights)."""

    queue: float
    kv_cache_utilization: float
    prefix: float
    cpu_prefix: float
    """0 unless the instances have a CPU tier (lmcache.ddr) and prefix_match is approximate."""
    no_hit_lru: float
    prefix_match: Literal["approximate", "precise"]
    gpu_index_blocks: int
    """The approximate GPU prefix index's LRU capacity per instance: the instance's HBM blocks (llm-d's autoTune reads
    the same number from vLLM's num_gpu_blocks; kvplan writes it as lruCapacityPerServer)."""
    cpu_index_blocks: int
    """The approximate CPU prefix index's LRU capacity per instance: the blocks of block_size tokens the instance's
    CPU tier holds (lruCapacityPerServer of the guide's cpu prefix producer; 0 without a CPU tier)."""
    max_prefix_blocks: int = 256
    """Leading blocks of a prompt the approximate index hashes (maxPrefixBlocksToMatch, default 256:
    approximateprefix/types.go)."""
    cpu_tier_weight: float = 0.8
    """What a block the precise scorer finds only in the CPU tier counts, a block in HBM counting 1
    (llm-d-kv-cache DefaultKVCacheBackendConfig: gpu 1.0, cpu 0.8)."""


def llm_d_scheduler(s, lm: ResolvedLMCache | None, native: ResolvedOffload | None, hbm_blocks: int,
                    problems: list[Problem]) -> LlmDScheduler:
    """llm-d's scheduler for serving.llm_d (its defaults where unset): the CPU prefix scorer only over a CPU tier
    (LMCache's ddr tier, or vLLM's native one)."""
    spec = s.llm_d if s.llm_d is not None else LlmD()
    ddr = lm.tier("ddr") if lm is not None else None
    cpu_tokens = ddr.capacity_tokens if ddr is not None else native.capacity_tokens if native is not None else 0
    cpu_blocks = cpu_tokens // s.block_size
    cpu_weight = spec.cpu_prefix
    if cpu_weight is None:
        cpu_weight = 1.0 if cpu_blocks and spec.prefix_match == "approximate" else 0.0
    elif cpu_weight and not cpu_blocks:
        problems.append(Problem("serving.llm_d.cpu_prefix", "weighs a CPU prefix scorer, but the instances have no CPU "
                                "tier for it to find prompts in", cpu_weight, fix="set cpu_prefix: 0, or add lmcache.ddr or serving.kv_offloading"))
    return LlmDScheduler(queue=spec.queue, kv_cache_utilization=spec.kv_cache_utilization, prefix=spec.prefix,
                         cpu_prefix=cpu_weight, no_hit_lru=spec.no_hit_lru, prefix_match=spec.prefix_match,
                         gpu_index_blocks=hbm_blocks, cpu_index_blocks=cpu_blocks)
