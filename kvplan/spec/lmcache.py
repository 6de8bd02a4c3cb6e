"""LMCache: the offload tiers below HBM (ddr, nvme, ceph) and how they are used.

`mode` picks the integration, because the two really differ (reference/lmcache-vllm.md §0, §2):
`mp` runs one `lmcache server` per node shared by that node's instances (the default, and the
only mode that runs on CPU-only hosts); `inprocess` runs LMCache inside each vLLM worker.
Tier sizes are per node for ddr and nvme and cluster-wide for ceph; `resolve` turns them into
what each mode is configured with (per-rank GB in-process, per-server GB in MP mode).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, field_validator, model_validator

from ..units import Bandwidth, Duration, Size
from .base import MAX_INT32, SpecModel
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


class NvmeDrive(SpecModel):
    """One NVMe drive's speed, written inline in place of a catalog class (like an inline model)."""

    name: str = Field("inline", min_length=1)
    """A label for the drive (shown in reports), e.g. pm1733."""

    read_bandwidth: Bandwidth
    """Sequential read bandwidth of one drive, e.g. 7GB/s."""

    write_bandwidth: Bandwidth
    """Sequential write bandwidth of one drive."""

    read_iops: int = Field(ge=1)
    """Random read operations per second of one drive."""

    write_iops: int = Field(ge=1)
    """Random write operations per second of one drive."""

    read_latency: Duration
    """Time of one read at an idle drive, e.g. 80us."""

    write_latency: Duration
    """Time of one write at an idle drive."""

    capacity: Size | None = None
    """One drive's capacity, e.g. 3.84TB; when given, the tier must fit on the node's drives (a catalog class
    gives its family's largest drive)."""


def _drive_kind(value: Any) -> str:
    return "inline" if isinstance(value, (dict, NvmeDrive)) else "name"


DriveRef = Annotated[Union[Annotated[str, Tag("name")], Annotated[NvmeDrive, Tag("inline")]],
                     Discriminator(_drive_kind)]


class NvmeTier(Tier):
    """Local NVMe (LMCache LocalDisk in-process, an fs_native L2 adapter in MP mode), built from the node's drives.

    `drives` NVMe drives per node of class `device`, used in one of two layouts:

    - raid0 (the default): the operator has striped the drives into one volume (md RAID 0, an LVM stripe) mounted
      under `path`. LMCache sees one directory; the kernel spreads every file over all drives, so the simulator
      models one device per node with `drives` x one drive's bandwidth and IOPS and one drive's latency. kvplan
      never builds, formats or wipes an array: it expects the volume mounted and only makes LMCache's directory.
    - per_drive: one directory on each drive (`paths`, one per drive). Only in-process LMCache can use them: it
      takes a comma-separated `local_disk` and each worker keeps its chunks on paths[GPU index % drives]
      (`local_disk_path_sharding: by_gpu`). Every instance sees its own GPUs as 0..TP-1, so rank r of every
      instance on a node writes drive r % drives: the simulator queues each rank's objects on that drive, and
      more drives than storing ranks are refused (they would never be written). MP mode's `lmcache server`
      writes every chunk to every L2 adapter, so several adapters would copy, not spread, and is refused.

    `size` is the node's total, as for one drive.
    """

    device: DriveRef = "gen4"
    """One drive's class: a catalog name (`kvplan catalog`), e.g. gen4 or gen5, or an inline class
    {name, read_bandwidth, write_bandwidth, read_iops, write_iops, read_latency, write_latency}."""

    drives: int = Field(1, ge=1, le=64)
    """NVMe drives per node that hold the tier."""

    layout: Literal["raid0", "per_drive"] = "raid0"
    """raid0: `path` is on one volume striped over the drives (built by the operator, never by kvplan);
    per_drive: `paths` gives one directory on each drive (in-process mode only)."""

    path: DataDir = "/var/lib/lmcache/nvme"
    """Directory on the NVMe device (raid0: on the striped volume) where LMCache keeps chunks: absolute and
    dedicated to LMCache (not a system directory such as /, /etc or /var); the deploy creates it, or leaves an
    existing one's mode and owner alone."""

    paths: list[DataDir] = []
    """per_drive layout: one directory per drive, `drives` of them, in drive order (e.g. /mnt/nvme0/lmcache,
    /mnt/nvme1/lmcache); empty with raid0."""

    @model_validator(mode="after")
    def _layout(self) -> "NvmeTier":
        if self.layout == "per_drive":
            if len(self.paths) != self.drives:
                raise ValueError(f"layout: per_drive needs one directory per drive in paths: drives is {self.drives}, "
                                 f"paths has {len(self.paths)}; list one directory on each drive, e.g. "
                                 f"paths: [/mnt/nvme0/lmcache, /mnt/nvme1/lmcache]")
            if len(set(self.paths)) != len(self.paths):
                raise ValueError("layout: per_drive needs a different directory on each drive; paths repeats one")
            if "path" in self.model_fields_set:
                raise ValueError("layout: per_drive uses paths (one per drive), not path; drop path")
        elif self.paths:
            raise ValueError("paths is for layout: per_drive; with raid0 the striped volume has one directory, path "
                             "(or set layout: per_drive)")
        return self


class CephTier(Tier):
    """The shared Ceph cluster, reached through RGW S3 or CephFS (see the ceph section)."""

    eviction: EvictionPolicy = "none"
    """Eviction policy; in-process LMCache never evicts from remote storage, so there it must be none."""


class Merging(SpecModel):
    """The design note's request merging: hold arrivals briefly and batch them into one prefill."""

    window: Duration = "50ms"
    """How long to hold a request waiting for others to merge with."""

    max_tokens: int = Field(512, ge=1, le=MAX_INT32)
    """Largest merged batch, in prompt tokens."""


class WarmupTemplate(SpecModel):
    name: str = Field(min_length=1, max_length=128)
    """A label for the template (shown in reports and as the deploy's warm-up step): printable text on one line."""

    @field_validator("name")
    @classmethod
    def _printable(cls, value: str) -> str:
        # The deploy prints it as its warm-up step's label: an escape byte would reach the terminal raw.
        if not value.isprintable():
            raise ValueError("must be printable text on one line: no line breaks, tabs, escape or other control "
                             "characters; write a label such as 'support-bot system prompt'")
        return value

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

    chunk_size: int = Field(256, ge=1, le=MAX_INT32)
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

    min_retrieve_tokens: int = Field(0, ge=0, le=MAX_INT32)
    """Skip a retrieve when fewer tokens than this would be hit."""

    merging: Merging | None = None
    """Request merging; off when absent."""

    warmup: Warmup | None = None
    """Cache warm-up; off when absent."""
