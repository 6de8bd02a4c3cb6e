"""The offload tiers as resolved: LMCache's tiers (ddr, nvme, ceph) as the stack is configured and as the simulator
models them, and the Ceph cluster that holds the ceph tier.

The arithmetic follows the real stack (reference/lmcache-vllm.md §6):

- LMCache stores one object per chunk per rank (MLA: rank 0 only), so a chunk costs
  chunk_size x per-rank bytes x storing ranks.
- Tier sizes in the spec are per node (ddr, nvme) and cluster-wide (ceph). In-process LMCache
  is configured per rank (each rank of each instance on a node gets an equal share); an MP
  server per node is configured with the node's size; the ceph budget is split over the MP
  servers, which each account for their own objects in the shared bucket.
- MP mode evicts in batches (MP_EVICTION_WATERMARK, MP_EVICTION_RATIO), which kvplan simulates and deploys.
- The Ceph pool holds raw / pool size; the ceph tier must fit below Ceph's nearfull ratio. RGW writes an
  S3 object as RADOS objects of at most 4 MiB, and the op latency alert fires at a multiple of the slowest
  unloaded op.

A tier that holds no whole chunk and a ceph tier over the pool's nearfull ratio are added to the caller's
problems. vLLM's native CPU tier is resolved in kvplan/offload.py, the nvme tier's drives in node_storage.py.
"""

from __future__ import annotations

from typing import Literal

from .catalog import CephDeviceClass, Nic
from .errors import Problem
from .spec import Topology
from .spec.base import SpecModel
from .spec.grammar import local_address
from .units import GIB, fmt_bytes

CEPH_NEARFULL_RATIO = 0.85
"""Ceph warns at 85 % full by default (mon_osd_nearfull_ratio); the KV tier must fit below it."""
RADOS_OP_BYTES = 4 * 2**20
"""RGW writes an S3 object as RADOS objects of at most this (rgw_max_chunk_size = rgw_obj_stripe_size, 4 MiB):
one OSD op, as op_r_latency / op_w_latency count it."""
OP_ALERT_FACTOR = 2.0
"""The Ceph op latency alert's default: this many times the slowest unloaded op, i.e. the OSDs queue."""
MP_EVICTION_WATERMARK, MP_EVICTION_RATIO = 0.8, 0.2
"""LMCache MP mode's batch eviction: once a tier's usage reaches the watermark (a fraction of its capacity) it
evicts ratio x capacity at once. LMCache 0.5.6's defaults, for L1 (`lmcache server --eviction-trigger-watermark
0.8 --eviction-ratio 0.2`, lmcache/v1/distributed/config.py EvictionConfig and its add_argument calls) and for an
L2 adapter's "eviction" block (`trigger_watermark` 0.8, `eviction_ratio` 0.2: lmcache/v1/distributed/l2_adapters/
config.py `_parse_eviction_config`). kvplan simulates them and writes them into the deployment, both from here."""


class ResolvedTier(SpecModel):
    """One LMCache tier as the stack is configured and as the simulator models it."""

    name: Literal["ddr", "nvme", "ceph"]
    scope: Literal["instance", "node", "cluster"]
    """What one cache of this tier serves: one vLLM instance (in-process), one node (MP server), or everyone."""
    caches: int
    """Independent caches of this tier in the deployment."""
    capacity_bytes: int
    """Bytes one cache can hold."""
    capacity_chunks: int
    """Full chunks one cache can hold."""
    capacity_tokens: int
    """Tokens one cache can hold (chunks x chunk_size)."""
    configured_gb: float | None
    """The size LMCache is configured with, in its GB (2^30 bytes): per rank in-process
    (max_local_cpu_size, max_local_disk_size), per server in MP mode (--l1-size-gb,
    max_capacity_gb); None where LMCache has no capacity setting (in-process remote)."""
    eviction: str
    ttl_s: float | None


class ResolvedLMCache(SpecModel):
    mode: Literal["mp", "inprocess"]
    chunk_size: int
    chunk_bytes_per_rank: int
    """Bytes of one chunk's object on one rank."""
    storing_ranks: int
    """Ranks of an instance that store each chunk (TP, or 1 for MLA)."""
    chunk_bytes: int
    """Bytes one chunk costs in a tier (all storing ranks)."""
    blocks_per_chunk: int
    tiers: list[ResolvedTier]
    save_decode_cache: bool
    save_unfull_chunk: bool
    min_retrieve_tokens: int
    port: int
    """LMCache server port (mp mode)."""
    http_host: str
    """MP mode: where the server's HTTP API (health, status, its Prometheus /metrics) listens, --http-host: the
    spec's monitoring.metrics_address."""
    http_port: int
    """MP mode: that API's --http-port, the one after the server's port."""
    http_address: str
    """Where a process on the server's node reaches that API: http_host, or loopback where it listens on every
    address (the deploy's health check, kvplan observe)."""
    eviction_watermark: float
    """MP mode: the usage fraction of a tier's capacity at which LMCache evicts a batch, for L1 and every L2
    adapter (--eviction-trigger-watermark, each adapter's eviction.trigger_watermark). In-process LMCache evicts one
    object at a time on demand and has no such setting."""
    eviction_ratio: float
    """MP mode: the fraction of a tier's capacity one batch evicts (--eviction-ratio, eviction.eviction_ratio)."""
    nvme_path: str | None
    """Directory of the nvme tier (raid0: on the striped volume; per_drive: the first drive's)."""
    nvme_paths: list[str] = []
    """Every directory of the nvme tier on a node, in drive order: [nvme_path] for raid0, one per drive for
    per_drive."""
    merging_window_s: float | None
    merging_max_tokens: int | None
    warmup_system_prompts: int
    warmup_template_tokens: list[int]
    warmup_template_names: list[str] = []

    def tier(self, name: str) -> ResolvedTier | None:
        return next((t for t in self.tiers if t.name == name), None)


class ResolvedCeph(SpecModel):
    deploy: str
    hosts: int
    osds: int
    osd_size: int
    raw_bytes: int
    usable_bytes: int
    """raw / pool size: what the pool can hold before replication."""
    kv_budget_bytes: int | None
    """The ceph tier's size, when LMCache uses one."""
    pool_name: str
    pool_size: int
    pool_min_size: int
    pool_pg_num: int
    pool_adopt: bool
    """An existing pool of an external cluster may be changed to the spec (ceph.pool.adopt)."""
    failure_domain: str
    access: str
    rgw_port: int
    rgw_dns_name: str
    rgw_bucket: str
    rgw_region: str
    rgw_user: str
    rgw_address: str | None
    osd_devices: list[str]
    cephfs_mount: str
    options: dict[str, str | int | float | bool]
    device_class: CephDeviceClass
    network: Nic
    op_latency_alert: float
    """Seconds one OSD op may take (mean, slowest OSD) before the Ceph alert fires:
    monitoring.max_ceph_op_latency, else OP_ALERT_FACTOR x the slowest unloaded op (`unloaded_op_latency`)."""



def resolve_lmcache(topo: Topology, per_rank_token: int, storing_ranks: int, instances_per_node: int, nodes: int,
                    problems: list[Problem]) -> ResolvedLMCache:
    lm, tp = topo.lmcache, topo.serving.tensor_parallel
    chunk_rank = per_rank_token * lm.chunk_size
    chunk = chunk_rank * storing_ranks
    tiers = []
    for name in ("ddr", "nvme", "ceph"):
        tier = getattr(lm, name)
        if tier is None:
            continue
        # LMCache takes GB (2^30 bytes) as a float; bytes / 2^30 is exact in binary floating
        # point, so the configured figure and the simulated capacity are the same bytes.
        if name == "ceph":
            scope, caches, capacity = "cluster", 1, tier.size
            configured = tier.size / nodes / GIB if lm.mode == "mp" else None
        elif lm.mode == "mp":
            scope, caches, capacity, configured = "node", nodes, tier.size, tier.size / GIB
        else:
            per_rank = tier.size // (instances_per_node * tp)
            scope, caches = "instance", topo.serving.instances
            capacity, configured = per_rank * storing_ranks, per_rank / GIB
        chunks = capacity // chunk
        if chunks < 1:
            problems.append(Problem(f"lmcache.{name}.size", f"holds no whole chunk: each {scope}'s share is {fmt_bytes(capacity)} "
                                    f"but one {lm.chunk_size}-token chunk is {fmt_bytes(chunk)}", tier.size,
                                    f">= {fmt_bytes(chunk * (instances_per_node if scope == 'instance' else 1))}",
                                    "raise the size or lower lmcache.chunk_size"))
        tiers.append(ResolvedTier(name=name, scope=scope, caches=caches, capacity_bytes=capacity, capacity_chunks=chunks,
                                  capacity_tokens=chunks * lm.chunk_size, configured_gb=configured,
                                  eviction=tier.eviction, ttl_s=tier.ttl))
    return ResolvedLMCache(
        mode=lm.mode, chunk_size=lm.chunk_size, chunk_bytes_per_rank=chunk_rank, storing_ranks=storing_ranks,
        chunk_bytes=chunk, blocks_per_chunk=lm.chunk_size // topo.serving.block_size, tiers=tiers,
        save_decode_cache=lm.save_decode_cache, save_unfull_chunk=lm.save_unfull_chunk,
        min_retrieve_tokens=lm.min_retrieve_tokens, port=lm.port, http_host=topo.monitoring.metrics_address,
        http_port=lm.port + 1, http_address=local_address(topo.monitoring.metrics_address),
        eviction_watermark=MP_EVICTION_WATERMARK, eviction_ratio=MP_EVICTION_RATIO,
        nvme_path=(lm.nvme.paths[0] if lm.nvme.paths else lm.nvme.path) if lm.nvme else None,
        nvme_paths=(list(lm.nvme.paths) or [lm.nvme.path]) if lm.nvme else [],
        merging_window_s=lm.merging.window if lm.merging else None,
        merging_max_tokens=lm.merging.max_tokens if lm.merging else None,
        warmup_system_prompts=lm.warmup.system_prompts if lm.warmup else 0,
        warmup_template_tokens=[t.tokens for t in lm.warmup.templates] if lm.warmup else [],
        warmup_template_names=[t.name for t in lm.warmup.templates] if lm.warmup else [])


def resolve_ceph(topo: Topology, device_class: CephDeviceClass, nic: Nic, lm: ResolvedLMCache | None,
                 problems: list[Problem]) -> ResolvedCeph:
    c = topo.ceph
    osds = c.hosts * c.osds_per_host
    raw = osds * c.osd_size
    usable = raw // c.pool.size
    tier = lm.tier("ceph") if lm else None
    budget = tier.capacity_bytes if tier else None
    if budget is not None and budget > usable * CEPH_NEARFULL_RATIO:
        problems.append(Problem("lmcache.ceph.size", f"exceeds what the pool can hold below Ceph's nearfull ratio: "
                                f"{fmt_bytes(raw)} raw / {c.pool.size} replicas x {CEPH_NEARFULL_RATIO} = "
                                f"{fmt_bytes(usable * CEPH_NEARFULL_RATIO)}", budget,
                                f"<= {fmt_bytes(usable * CEPH_NEARFULL_RATIO)}", "lower the tier size, or add OSDs or hosts"))
    network = nic if c.network_bandwidth is None else nic.model_copy(update={"bandwidth": c.network_bandwidth})
    chunk_object = lm.chunk_bytes_per_rank if lm else RADOS_OP_BYTES
    alert = topo.monitoring.max_ceph_op_latency
    if alert is None:
        alert = OP_ALERT_FACTOR * unloaded_op_latency(device_class, network, c.pool.size, chunk_object)
    return ResolvedCeph(
        deploy=c.deploy, hosts=c.hosts, osds=osds, osd_size=c.osd_size, raw_bytes=raw, usable_bytes=usable,
        kv_budget_bytes=budget, pool_name=c.pool.name, pool_size=c.pool.size, pool_min_size=c.pool.min_size,
        pool_pg_num=c.pool.pg_num, pool_adopt=c.pool.adopt, failure_domain=c.failure_domain, access=c.access, rgw_port=c.rgw.port,
        rgw_dns_name=c.rgw.dns_name, rgw_bucket=c.rgw.bucket, rgw_region=c.rgw.region, rgw_user=c.rgw.user, rgw_address=c.rgw.address, osd_devices=list(c.osd_devices), cephfs_mount=c.cephfs_mount,
        options=dict(c.options), device_class=device_class, network=network, op_latency_alert=alert)


def unloaded_op_latency(dev: CephDeviceClass, network: Nic, pool_size: int, s3_object_bytes: int) -> float:
    """Seconds the slower of one RADOS read and one RADOS write of an S3 object's pieces takes at an idle
    OSD: the device's latency, the op's bytes at its bandwidth (or one IOPS slot) and, for a write, the
    forwarding to the other replicas. RGW cuts an object into RADOS objects of at most RADOS_OP_BYTES."""
    pieces = max(1, -(-s3_object_bytes // RADOS_OP_BYTES))
    op = s3_object_bytes / pieces
    read = dev.read_latency + max(op / dev.osd_read_bandwidth, 1 / dev.osd_read_iops)
    write = (dev.write_latency + (pool_size - 1) * op / network.bandwidth
             + max(op / dev.osd_write_bandwidth, 1 / dev.osd_write_iops))
    return max(read, write)

