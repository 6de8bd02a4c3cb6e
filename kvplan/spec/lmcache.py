"""LMCache: the offload tiers below HBM (ddr, nvme, ceph) and how they are used.

`mode` picks the integration, because the two really differ (reference/lmcache-vllm.md §0, §2):
`mp` runs one `lmcache server` per node shared by that node's instances (the default, and the
only mode that runs on CPU-only hosts); `inprocess` runs LMCache inside each vLLM worker.
Tier sizes are per node for ddr and nvme and cluster-wide for ceph; `resolve` turns them into
what each mode is configured with (per-rank GB in-process, per-server GB in MP mode).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from ..units import Duration, Size
from .base import SpecModel
from .grammar import DataDir

POLICIES = ("LRU", "LFU", "FIFO", "MRU", "ARC", "IsolatedLRU", "none")


def _canonical_policy(value: Any) -> Any:
    """Policies are matched case-insensitively ('lru' -> 'LRU'); 'noop' is LMCache's name for none."""
    if isinstance(value, str):
        key = value.strip().lower()
        if key == "noop":
            return "none"
        for name in POLICIES:
            if name.lower() == key:
                return name
    return value


EvictionPolicy = Annotated[Literal["LRU", "LFU", "FIFO", "MRU", "ARC", "IsolatedLRU", "none"],
                           BeforeValidator(_canonical_policy)]


class Tier(SpecModel):
    size: Size
    """Capacity of the tier (per node for ddr and nvme, cluster-wide for ceph)."""

    eviction: EvictionPolicy = "LRU"
    """Eviction policy. Which ones exist depends on lmcache.mode (see the rules in docs/spec-reference.md)."""

    ttl: Duration | None = None
    """Expire entries this long after they were written. Real only on the ceph tier (an RGW lifecycle rule)."""


class DdrTier(Tier):
    """Host DRAM (LMCache LocalCPU in-process, L1 in MP mode)."""


class NvmeTier(Tier):
    """Local NVMe (LMCache LocalDisk in-process, an fs_native L2 adapter in MP mode)."""

    device: str = "gen4"
    """NVMe class from the catalog (`kvplan catalog`), e.g. gen4 or gen5."""

    path: DataDir = "/var/lib/lmcache/nvme"
    """Directory on the NVMe device where LMCache keeps chunks: absolute and dedicated to LMCache (not a system
    directory such as /, /etc or /var); the deploy creates it, or leaves an existing one's mode and owner alone."""


class CephTier(Tier):
    """The shared Ceph cluster, reached through RGW S3 or CephFS (see the ceph section)."""

    eviction: EvictionPolicy = "none"
    """Eviction policy; in-process LMCache never evicts from remote storage, so there it must be none."""


class Merging(SpecModel):
    """The design note's request merging: hold arrivals briefly and batch them into one prefill."""

    window: Duration = "50ms"
    """How long to hold a request waiting for others to merge with."""

    max_tokens: int = Field(512, ge=1)
    """Largest merged batch, in prompt tokens."""


class WarmupTemplate(SpecModel):
    name: str = Field(min_length=1)
    """A label for the template (shown in reports)."""

    tokens: int = Field(ge=1)
    """Template length in tokens."""


class Warmup(SpecModel):
    """Prefill common prompts into the cache before traffic starts."""

    system_prompts: int = Field(0, ge=0)
    """Prefill this many of the workload's most popular shared prefixes."""

    templates: list[WarmupTemplate] = []
    """Further fixed templates to prefill."""


class LMCache(SpecModel):
    mode: Literal["mp", "inprocess"] = "mp"
    """mp: one `lmcache server` per node (LMCacheMPConnector); inprocess: LMCache inside each vLLM worker (LMCacheConnectorV1)."""

    chunk_size: int = Field(256, ge=1)
    """Tokens per LMCache chunk, the unit of storing and hitting; a multiple of serving.block_size."""

    ddr: DdrTier | None = None
    """Host DRAM tier (L2). Required in mp mode, where it is the server's L1."""

    nvme: NvmeTier | None = None
    """Local NVMe tier (L3)."""

    ceph: CephTier | None = None
    """Ceph tier (L4); needs a top-level ceph section."""

    port: int = Field(5555, ge=1, le=65535)
    """Port of the LMCache server on each node (mp mode)."""
    save_decode_cache: bool = False
    """Also store the KV of generated tokens."""

    save_unfull_chunk: bool = False
    """Also store the trailing partial chunk of a prompt (LMCache default: off, so the tail always misses)."""

    min_retrieve_tokens: int = Field(0, ge=0)
    """Skip a retrieve when fewer tokens than this would be hit."""

    merging: Merging | None = None
    """Request merging; off when absent."""

    warmup: Warmup | None = None
    """Cache warm-up; off when absent."""
