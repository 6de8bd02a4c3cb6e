"""resolve(topology, catalog) -> Resolved: the ONE place where derived numbers are computed.

The simulator and the deployer both read `Resolved` and never re-derive a number from the raw
spec; that is how what is simulated stays what is deployed. The arithmetic follows the real
stack (reference/lmcache-vllm.md §6):

- KV bytes per token = layers x (2, or 1 for MLA) x KV heads x head dim x dtype bytes.
- Per tensor-parallel rank vLLM holds max(1, KV heads // TP) heads (MLA: the whole latent).
- LMCache stores one object per chunk per rank (MLA: rank 0 only), so a chunk costs
  chunk_size x per-rank bytes x storing ranks.
- HBM for KV per GPU = CUDA's total x gpu_memory_utilization - weights/TP - what vLLM's start-up profiling
  takes (activation peak at max_num_batched_tokens, non-torch memory: kvplan/kv_capacity.py,
  docs/kv-capacity.md), or serving.activation_memory in its place when set, or kv_cache_memory when given;
  blocks = that // (block_size x per-rank bytes per token).
- Step-time coefficients (compute and memory efficiency, per-step overhead, all-reduce latency)
  are the accelerator's catalog defaults with the spec's serving.step_model on top; the all-reduce
  ring runs over NVLink, else PCIe, else (a CPU device) host memory (docs/step-time.md).
- Tier sizes in the spec are per node (ddr, nvme) and cluster-wide (ceph). In-process LMCache
  is configured per rank (each rank of each instance on a node gets an equal share); an MP
  server per node is configured with the node's size; the ceph budget is split over the MP
  servers, which each account for their own objects in the shared bucket.

Checks that need the catalog (unknown names, TP vs KV heads, weights fitting in HBM, room for a
max-length sequence, tiers holding at least one chunk, Ceph capacity) are made here and raised
as one SpecError listing every problem; `catalog_problems` makes those that the valid sections of an
invalid spec allow (kvplan/validation.py), so one round of `kvplan validate` reports them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

from pydantic import SerializerFunctionWrapHandler, model_serializer

from .catalog import Catalog, CephDeviceClass, Device, Nic, load_catalog, lookup
from .errors import Problem, SpecError, did_you_mean
from .kv_capacity import ProfiledMemory, profiled_memory
from .node_storage import HostMemory, ResolvedNvme, drive_of, host_memory, resolve_nvme
from .offload import ResolvedOffload, resolve_offload
from .spec import Topology
from .spec.architecture import Architecture
from .spec.base import SpecModel
from .spec.disaggregation import POOL_FIELDS, InstancePool
from .spec.grammar import local_address
from .spec.cost import CostOverrides
from .spec.profile import read_profile
from .spec.serving import LlmD, StepModel
from .spec.slo import Monitoring, Slo
from .spec.workload import Workload
from .units import fmt_bytes

if TYPE_CHECKING:
    from .spec.partial import Sections

GIB = 1024**3
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

KV_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5}
AUTO_KV_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}
"""The dtype a model runs in -> the KV dtype vLLM's --kv-cache-dtype auto stores: the activation dtype, which
for the checkpoints released in fp8 (DeepSeek-V3: torch_dtype bfloat16 beside an fp8 quantization_config) is bf16."""
UNQUANTISED = ("fp32", "bf16", "fp16")
"""Weight dtypes vLLM serves by --dtype: the model then runs (and keeps its KV) in that dtype, not its config's."""


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


class StepCoefficients(SpecModel):
    """The step-time model's coefficients (kvplan.sim.steptime, docs/step-time.md)."""

    compute_efficiency: float
    """Achieved / peak FLOP/s of a compute-bound step."""
    attention_efficiency: float
    """Achieved / peak FLOP/s of attention over the KV cache (compute_efficiency unless measured apart)."""
    memory_efficiency: float
    """Achieved / peak memory bandwidth of a memory-bound step."""
    step_overhead: float
    """Seconds every engine step costs besides the roofline and the all-reduces."""
    allreduce_latency: float
    """Seconds one tensor-parallel all-reduce costs besides its bytes over the link."""
    request_overhead: float
    """Seconds of each request outside engine steps (HTTP, streaming), added to its TTFT and E2E."""
    layer_overhead: float
    """Seconds every transformer layer adds to every step besides the roofline (small kernels)."""
    graph_step_overhead: float
    """step_overhead of a step that runs as a captured CUDA graph (at most Resolved.cuda_graph_max_tokens tokens)."""
    graph_layer_overhead: float
    """layer_overhead of a step that runs as a captured CUDA graph."""
    allreduce_efficiency: float
    """Achieved / link bandwidth of a large all-reduce."""
    small_gemm_params: float
    """Weight parameters per layer per GPU at which the matrix multiplies run at half of compute_efficiency."""
    allreduce_bandwidth: float
    """Bytes/s one direction of the link the all-reduce ring uses: NVLink, else PCIe, else host memory."""
    overridden: list[str] = []
    """The coefficients the spec set (serving.step_model); the others are the catalog's."""


class Resolved(SpecModel):
    """Every number the simulator and the deployer use, in base units (bytes, seconds, 1/s)."""

    name: str
    spec_hash: str
    simulate_only: bool
    simulation_only: list[tuple[str, str]] = []
    """(field, why the real stack cannot honour it) for each setting that needs simulate_only."""
    model: Architecture
    device: Device

    instances: int
    tensor_parallel: int
    gpus_per_node: int
    gpus_total: int
    nodes: int
    instances_per_node: int
    """Instances on a full node."""

    block_size: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    prefix_caching: bool
    chunked_prefill: bool
    async_scheduling: bool
    """vLLM's engine schedules step k+1 while step k runs (vllm/v1/engine/core.py `step_with_batch_queue`, a batch
    queue of two), so a request arriving during step k is first scheduled into step k+2 (docs/step-time.md)."""
    cuda_graph_max_tokens: int
    """The largest step, in tokens, that vLLM runs as a captured CUDA graph: min(2 x max_num_seqs, 512) on a GPU
    (vllm/config/vllm.py `_set_cudagraph_sizes`, vLLM 0.11 onwards), 0 on a CPU host (--enforce-eager). A step of
    more tokens runs eagerly and pays step_overhead and layer_overhead; a smaller one the graph_* overheads."""
    router: str
    router_port: int = 30000
    router_metrics_port: int = 30001
    """The router's Prometheus port: the one after its API port."""
    router_thresholds: RouterThresholds
    """vllm-router's cache_aware thresholds (the prefix_aware policy), its defaults."""
    llm_d: LlmDScheduler | None = None
    """llm-d's scheduler, its scorers and their weights (serving.router: llm_d only)."""
    kv_cache_dtype: str
    """vLLM --kv-cache-dtype value."""
    kv_cache_memory_bytes: int | None
    """vLLM --kv-cache-memory-bytes (VLLM_CPU_KVCACHE_SPACE on CPU) when the spec sets it."""
    model_path: str | None
    """What vLLM serves: serving.model_path, else the catalog model's hf_id."""
    api_host: str
    api_port: int
    """Port of the first vLLM instance on a node (the next ones count up)."""
    api_key_env: str | None = None
    """The variable, where the deploy runs, holding the key vLLM asks of clients (serving.api_key_env); None: none."""
    weights_dtype: str
    quantization: str | None = None
    """vLLM --quantization (serving.quantization)."""

    kv_dtype_bytes: int
    weight_bytes_per_param: float
    peak_flops: float
    """Dense peak FLOP/s per accelerator at the weights' precision."""
    kv_bytes_per_token: int
    """Logical KV bytes per token of the model (all layers, all KV heads)."""
    kv_heads_per_rank: int
    kv_bytes_per_token_per_rank: int
    """KV bytes per token that one tensor-parallel rank holds (and LMCache stores per rank)."""
    block_bytes_per_rank: int
    block_bytes: int
    """HBM one block occupies across the instance's ranks."""
    hbm_bytes: int
    """HBM holding KV blocks, all instances together."""
    weight_bytes_per_gpu: int
    cuda_memory_bytes: int
    """The accelerator's memory as CUDA reports it, what gpu_memory_utilization is a share of (Device.cuda_memory, else
    its memory)."""
    non_kv_bytes_per_gpu: int
    """Memory per GPU that is neither weights nor KV cache: serving.activation_memory when set, else what vLLM's
    start-up profiling takes (`profiled`)."""
    profiled: ProfiledMemory | None
    """vLLM's start-up profiling of one GPU, term by term (kvplan/kv_capacity.py); None on a CPU device."""
    kv_budget_bytes_per_gpu: int
    """Accelerator memory left for the KV cache."""
    hbm_blocks: int
    """KV blocks per instance (every rank holds its slice of every block)."""
    hbm_tokens: int

    pcie_bandwidth: float | None
    nvlink_bandwidth: float | None
    hbm_bandwidth: float
    step: StepCoefficients
    """Step-time coefficients: the accelerator's catalog defaults with serving.step_model on top."""

    lmcache: ResolvedLMCache | None
    kv_offloading: ResolvedOffload | None = None
    """vLLM's native CPU offloading (serving.kv_offloading; offload.py), the other offload engine; None: off."""
    nvme: ResolvedNvme | None
    """The nvme tier's drives and the devices the simulator queues on (node_storage.py); None without the tier."""
    host_memory: HostMemory | None = None
    """The node's host memory and what the deployment pins there; None where neither the spec nor the catalog
    gives it (nothing is checked then)."""
    ceph: ResolvedCeph | None

    workload: Workload
    slo: Slo
    monitoring: Monitoring
    cost: CostOverrides
    disaggregation: "ResolvedDisaggregation | None" = None
    """Prefill/decode pools (serving.disaggregation); None: aggregated. With it, instances, gpus_total, nodes and
    hbm_bytes count both pools, and every per-instance figure above is the prefill pool's (each pool's own are in
    disaggregation.prefill and .decode)."""

    @model_serializer(mode="wrap")
    def _aggregated_as_before(self, handler: SerializerFunctionWrapHandler) -> dict:
        """An aggregated spec's Resolved serialises as it did before disaggregation existed: no such key."""
        data = handler(self)
        if self.disaggregation is None:
            data.pop("disaggregation", None)
        return data


class ResolvedDisaggregation(SpecModel):
    """Each pool resolved as an aggregated deployment of its own, and the KV transfer's numbers (kvplan.sim.disagg)."""

    connector: Literal["nixl", "lmcache"]
    proxy: Literal["round_robin"]
    prefill: Resolved
    decode: Resolved
    network: Nic
    """The NIC class of each GPU's port (bandwidth one direction, one-way latency per transfer)."""
    prefill_bytes_per_token_per_port: int
    """KV bytes one prefill rank sends per prompt token: its KV heads' (all of MLA's latent); every rank sends at once
    over its own port."""
    decode_bytes_per_token_per_port: int
    """KV bytes one decode rank receives per prompt token: the heads it holds, read from one prefill rank (vLLM's
    NixlConnector: rank r reads from prefill rank r // (decode TP / prefill TP))."""
    buffer_copy_bandwidth: float
    """Bytes/s of the decode side's copy out of LMCache's PD receive buffer into vLLM's blocks (connector: lmcache;
    a copy within the GPU's memory, at its bandwidth)."""
    buffer_chunk_tokens: int = 0
    """connector: lmcache: tokens of one slot of the proxy's buffer semaphore (LMCache's chunk_size)."""
    buffer_slots: int = 0
    """connector: lmcache: the proxy's semaphore, pd_buffer_size // (KV bytes per token x chunk_size) slots; a
    request holds ceil(prompt / chunk_size) of them from before its prefill until its KV is in the decode instance's
    buffer (LMCache examples/disagg_prefill/disagg_proxy_server.py, WeightedSemaphore)."""


def resolve(topo: Topology, catalog: Catalog | None = None) -> Resolved:
    """Derive every number; raise SpecError listing all catalog-dependent problems."""
    catalog = catalog or load_catalog()
    if topo.serving.disaggregation is not None:
        return _disaggregated(topo, catalog)
    problems: list[Problem] = []
    s, lm = topo.serving, topo.lmcache
    model, device, nvme_class, ceph_class, nic = _entries(topo, catalog, problems)
    if model is None or device is None:
        raise SpecError(problems)

    tp = s.tensor_parallel
    max_num_seqs, max_batched = _batch_limits(device, s)
    mem = _accelerator_memory(model, device, s, catalog, problems)
    peak = _peak_tflops(device, mem.weights_dtype, problems)
    max_model_len = mem.max_model_len
    if max_batched < max_num_seqs:
        problems.append(Problem("serving.max_num_batched_tokens", f"vLLM requires it to be at least max_num_seqs ({max_num_seqs})",
                                max_batched, f">= {max_num_seqs}", f"use max_num_batched_tokens: {max_num_seqs} or more"))
    if not s.chunked_prefill and max_batched < max_model_len:
        problems.append(Problem("serving.max_num_batched_tokens", f"without chunked prefill a whole prompt must fit in one step: "
                                f"it must be at least max_model_len ({max_model_len})", max_batched, f">= {max_model_len}",
                                "raise it, lower max_model_len, or enable chunked_prefill"))

    gpus_total = s.instances * tp
    nodes = math.ceil(gpus_total / s.gpus_per_node)
    instances_per_node = min(s.instances, s.gpus_per_node // tp)  # rules: tp divides gpus_per_node
    vllm_ports = range(s.port, s.port + instances_per_node)
    if s.router_port in vllm_ports or s.router_port + 1 in vllm_ports:
        problems.append(Problem("serving.router_port", f"the router and its metrics (ports {s.router_port} and "
                                f"{s.router_port + 1}) share the first gpu host with vLLM's ports {s.port}.."
                                f"{s.port + instances_per_node - 1}", s.router_port,
                                fix=f"use router_port: {s.port + instances_per_node + 1000}"))
    storing_ranks = 1 if model.attention == "mla" else tp
    resolved_lm = _lmcache(topo, mem.per_rank_token, storing_ranks, instances_per_node, nodes, problems) if lm else None
    ceph = _ceph(topo, ceph_class, nic, resolved_lm, problems) if topo.ceph and ceph_class and nic else None
    drive = drive_of(lm.nvme, nvme_class) if lm and lm.nvme else None
    nvme = resolve_nvme(lm.nvme, drive, storing_ranks, problems) if lm and lm.nvme and drive else None
    offload = None
    if s.kv_offloading is not None:
        offload = resolve_offload(s.kv_offloading, s.block_size, mem.block_bytes_per_rank, storing_ranks,
                                  device.kind == "cpu", topo.simulate_only, problems)
    ddr = resolved_lm.tier("ddr") if resolved_lm else None
    # what LMCache pins: MP, the server's L1; in-process, max_local_cpu_size on every rank of every instance
    ddr_per_node = 0 if ddr is None or ddr.configured_gb is None else \
        round(ddr.configured_gb * GIB) * (instances_per_node * tp if ddr.scope == "instance" else 1)
    host = host_memory(device, s.host_memory, ddr_per_node, offload, instances_per_node, problems)
    step = _step_coefficients(device, s.step_model, s.step_profile, problems)
    llm_d = _llm_d(s, resolved_lm, offload, mem.hbm_blocks, problems) if s.router == "llm_d" else None

    if problems:
        raise SpecError(problems)

    return Resolved(
        name=topo.name, spec_hash=topo.spec_hash(), simulate_only=topo.simulate_only,
        simulation_only=_simulation_only(topo, device) if topo.simulate_only else [],
        model=model, device=device,
        instances=s.instances, tensor_parallel=tp, gpus_per_node=s.gpus_per_node, gpus_total=gpus_total, nodes=nodes,
        instances_per_node=instances_per_node, block_size=s.block_size, max_model_len=max_model_len,
        max_num_seqs=max_num_seqs, max_num_batched_tokens=max_batched, gpu_memory_utilization=s.gpu_memory_utilization,
        prefix_caching=s.prefix_caching, chunked_prefill=s.chunked_prefill, async_scheduling=s.async_scheduling,
        cuda_graph_max_tokens=0 if device.kind == "cpu" else min(2 * max_num_seqs, CUDA_GRAPH_MAX_CAPTURE),
        router=s.router,
        router_port=s.router_port, router_metrics_port=s.router_port + 1, router_thresholds=RouterThresholds(),
        llm_d=llm_d,
        kv_cache_dtype=mem.kv_dtype,
        kv_cache_memory_bytes=s.kv_cache_memory, model_path=s.model_path or model.hf_id, api_host=s.host, api_port=s.port,
        api_key_env=s.api_key_env,
        weights_dtype=mem.weights_dtype, quantization=s.quantization, kv_dtype_bytes=mem.kv_dtype_bytes,
        weight_bytes_per_param=WEIGHT_BYTES[mem.weights_dtype],
        peak_flops=peak * 1e12, kv_bytes_per_token=mem.kv_bytes, kv_heads_per_rank=mem.kv_heads_per_rank,
        kv_bytes_per_token_per_rank=mem.per_rank_token, block_bytes_per_rank=mem.block_bytes_per_rank,
        block_bytes=mem.block_bytes_per_rank * tp, hbm_bytes=mem.hbm_blocks * mem.block_bytes_per_rank * tp * s.instances,
        weight_bytes_per_gpu=mem.weight_bytes_per_gpu, cuda_memory_bytes=_cuda_total(device), non_kv_bytes_per_gpu=mem.non_kv,
        profiled=mem.profiled, kv_budget_bytes_per_gpu=mem.kv_budget, hbm_blocks=mem.hbm_blocks,
        hbm_tokens=mem.hbm_tokens, pcie_bandwidth=device.pcie, nvlink_bandwidth=device.nvlink,
        hbm_bandwidth=device.memory_bandwidth, step=step, lmcache=resolved_lm, kv_offloading=offload, nvme=nvme, host_memory=host, ceph=ceph, workload=topo.workload,
        slo=topo.slo, monitoring=topo.monitoring, cost=topo.cost)


def _entries(topo: Topology, catalog: Catalog, problems: list[Problem], parsed=lambda section: True) -> tuple:
    """The catalog entries the spec names: model, accelerator, NVMe class, Ceph device class and NIC; each None where
    the catalog has no such name (its problem added to `problems`), where the spec names none, or where `parsed`
    says the section naming it did not validate (spec/partial.py)."""
    def find(fn, *args):
        try:
            return fn(*args)
        except SpecError as exc:
            problems.extend(exc.problems)
            return None

    model = device = nvme = ceph_class = nic = None
    if parsed("model"):
        model = topo.model if isinstance(topo.model, Architecture) else find(_llm, catalog, topo.model)
    if parsed("serving"):
        device = find(lookup, catalog.devices, topo.serving.gpu, "serving.gpu", "accelerator")
    lm = topo.lmcache if parsed("lmcache") else None
    if lm is not None and lm.nvme is not None and isinstance(lm.nvme.device, str):   # else an inline class
        nvme = find(lookup, catalog.nvme, lm.nvme.device, "lmcache.nvme.device", "NVMe class")
    if parsed("ceph") and topo.ceph is not None:
        ceph_class = find(lookup, catalog.ceph_device_classes, topo.ceph.device_class, "ceph.device_class", "Ceph device class")
        nic = find(lookup, catalog.nics, topo.ceph.network, "ceph.network", "NIC class")
    return model, device, nvme, ceph_class, nic


def catalog_problems(topo: "Sections", found: list[Problem], catalog: Catalog | None = None) -> list[Problem]:
    """The catalog's word on a spec that did not validate, as far as its sections that did can tell (spec/partial.py):
    each name of theirs the catalog lacks, and, when the model and serving sections have no problem among `found`
    (those of its fields and rules), what keeps the model off its accelerator (accelerator_problems)."""
    catalog = catalog or load_catalog()
    problems: list[Problem] = []
    spec = cast(Topology, topo)
    model, device, *_ = _entries(spec, catalog, problems, topo.parsed)
    sound = not any(p.path.split(".")[0] in ("model", "serving") for p in [*found, *problems])
    if model is not None and device is not None and sound:
        mem = _accelerator_memory(model, device, spec.serving, catalog, problems)
        _peak_tflops(device, mem.weights_dtype, problems)
    return problems


def _disaggregated(topo: Topology, catalog: Catalog) -> Resolved:
    """A spec with prefill and decode pools: each pool resolved as an aggregated deployment of its pool's GPU, TP,
    count and limits (its problems named by the pool's fields), the transfer's numbers beside them."""
    s = topo.serving
    d = s.disaggregation
    assert d is not None
    problems: list[Problem] = []
    pools: list[Resolved] = []
    for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
        try:
            pools.append(resolve(_pool_topology(topo, pool), catalog))
        except SpecError as exc:
            problems += [_pool_problem(p, role) for p in exc.problems]
    nic = None
    try:
        nic = lookup(catalog.nics, d.network, "serving.disaggregation.network", "NIC class")
    except SpecError as exc:
        problems += exc.problems
    if problems or nic is None:
        raise SpecError(problems)
    network = nic if d.network_bandwidth is None else nic.model_copy(update={"bandwidth": d.network_bandwidth})
    prefill, decode = pools
    chunk = slots = 0
    if d.connector == "lmcache":
        chunk = prefill.lmcache.chunk_size if prefill.lmcache is not None else LMCACHE_CHUNK_DEFAULT
        buffer = d.buffer_size if d.buffer_size is not None else PD_BUFFER_DEFAULT
        slots = int(buffer // (prefill.kv_bytes_per_token * chunk))
        need = -(-prefill.max_model_len // chunk)
        if slots < need:
            raise SpecError([Problem("serving.disaggregation.buffer_size", f"LMCache's proxy holds a request back "
                                     f"until ceil(prompt / {chunk}) chunks fit in the decode buffer, and refuses one "
                                     f"that never can: this buffer has {slots} chunks, a {prefill.max_model_len}-token "
                                     f"prompt (max_model_len) needs {need}", fmt_bytes(buffer),
                                     f">= {fmt_bytes(need * chunk * prefill.kv_bytes_per_token)}",
                                     "raise buffer_size, or lower serving.max_model_len")])
    transfer = ResolvedDisaggregation(
        connector=d.connector, proxy=d.proxy, prefill=prefill, decode=decode, network=network,
        prefill_bytes_per_token_per_port=prefill.kv_bytes_per_token_per_rank,
        decode_bytes_per_token_per_port=decode.kv_bytes_per_token_per_rank,
        buffer_copy_bandwidth=decode.hbm_bandwidth, buffer_chunk_tokens=chunk, buffer_slots=slots)
    return prefill.model_copy(update={
        "spec_hash": topo.spec_hash(), "simulate_only": topo.simulate_only,
        "simulation_only": _simulation_only(topo, prefill.device) if topo.simulate_only else [],
        "instances": prefill.instances + decode.instances, "gpus_total": prefill.gpus_total + decode.gpus_total,
        "nodes": prefill.nodes + decode.nodes, "hbm_bytes": prefill.hbm_bytes + decode.hbm_bytes,
        "disaggregation": transfer})


LMCACHE_CHUNK_DEFAULT = 256
"""LMCache's chunk_size when the spec has no lmcache section (LMCache's default, and its disagg proxy's)."""
PD_BUFFER_DEFAULT = 2 * 2**30
"""LMCache's disagg proxy's --pd-buffer-size default, 2 GiB."""


def _pool_topology(topo: Topology, pool: InstancePool) -> Topology:
    """The spec as an aggregated deployment of one pool: its GPU, TP, count and scheduler limits in serving."""
    s = topo.serving
    serving = s.model_copy(update={"gpu": pool.gpu or s.gpu, "instances": pool.instances,
                                   "tensor_parallel": pool.tensor_parallel, "max_num_seqs": pool.max_num_seqs,
                                   "max_num_batched_tokens": pool.max_num_batched_tokens, "disaggregation": None})
    return topo.model_copy(update={"serving": serving})


def _pool_problem(p: Problem, role: str) -> Problem:
    """A pool's problem, named by the pool's field where the pool sets it, else said to be the pool's."""
    field = p.path.removeprefix("serving.")
    if p.path.startswith("serving.") and (field in POOL_FIELDS or field == "gpu"):
        return Problem(f"serving.disaggregation.{role}.{field}", p.message, p.value, p.allowed, p.fix)
    return Problem(p.path, f"(the {role} pool) {p.message}", p.value, p.allowed, p.fix)


def _simulation_only(topo: Topology, device: Device) -> list[tuple[str, str]]:
    """What a simulate_only spec sets that the real stack cannot honour: the rules' findings, and native offloading
    on a CPU device, which vLLM refuses to start (offload.py)."""
    out = [(p.path, p.message) for p in topo.simulation_only_settings()]
    if topo.serving.kv_offloading is not None and device.kind == "cpu":
        out.append(("serving.kv_offloading", "vLLM 0.32 offloads only from CUDA and XPU devices "
                                             "(vllm/v1/kv_offload/cpu/spec.py CPUOffloadingSpec.get_worker)"))
    return out


def _llm_d(s, lm: "ResolvedLMCache | None", native: ResolvedOffload | None, hbm_blocks: int,
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


@dataclass(frozen=True)
class _Memory:
    """How the model's weights and KV cache sit in one accelerator's memory at the spec's tensor parallelism."""

    max_model_len: int
    kv_dtype: str
    kv_dtype_bytes: int
    kv_bytes: int
    kv_heads_per_rank: int
    per_rank_token: int
    block_bytes_per_rank: int
    weights_dtype: str
    weight_bytes_per_gpu: int
    non_kv: int
    profiled: ProfiledMemory | None
    kv_budget: int
    hbm_blocks: int
    hbm_tokens: int


def _cuda_total(device: Device) -> int:
    """What CUDA reports as the device's memory (vLLM multiplies it by gpu_memory_utilization)."""
    return device.cuda_memory if device.cuda_memory is not None else device.memory


def _batch_limits(device: Device, s) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens: the spec's, else vLLM's defaults for the device
    (vLLM EngineArgs.get_batch_defaults, the API server's)."""
    big = device.memory >= 160 * GIB
    large_non_a100 = device.memory >= 70 * GIB and not device.name.upper().startswith("A100")
    default_seqs, default_tokens = (1024, 16384) if big else (1024, 8192) if large_non_a100 else (256, 2048)
    return s.max_num_seqs or default_seqs, s.max_num_batched_tokens or default_tokens


def _accelerator_memory(model: Architecture, device: Device, s, catalog: Catalog, problems: list[Problem]) -> _Memory:
    """The part of `resolve` that reads only the model and serving: heads over ranks, bytes per
    token, weights and KV in HBM; what does not fit is added to `problems`."""
    tp = s.tensor_parallel
    problems += _check_parallelism(model, s.tensor_parallel, s.gpus_per_node)
    max_model_len = s.max_model_len or model.max_context
    if max_model_len > model.max_context:
        problems.append(Problem("serving.max_model_len", f"exceeds {model.name}'s maximum context ({model.max_context})",
                                max_model_len, f"1..{model.max_context}", f"use max_model_len: {model.max_context} or less"))
    if device.kind == "cpu":
        if s.block_size % 32:
            problems.append(Problem("serving.block_size", "vLLM's CPU backend needs a multiple of 32", s.block_size,
                                    "32, 64, 96, 128, ...", f"use {(s.block_size // 32 + 1) * 32}"))
        if s.kv_cache_memory is None:
            problems.append(Problem("serving.kv_cache_memory", f"{device.name} is a CPU device: vLLM's CPU backend needs the KV "
                                    "space set (VLLM_CPU_KVCACHE_SPACE)", None, fix="add serving.kv_cache_memory: 1GiB"))
        elif s.kv_cache_memory % GIB:
            problems.append(Problem("serving.kv_cache_memory", "VLLM_CPU_KVCACHE_SPACE counts whole GiB", s.kv_cache_memory,
                                    "1GiB, 2GiB, ...", f"use {max(1, round(s.kv_cache_memory / GIB))}GiB"))

    # ---- bytes per token, block and chunk
    weights_dtype = s.weights_dtype if s.weights_dtype != "auto" else model.weights_dtype
    runs_in = weights_dtype if weights_dtype in UNQUANTISED else model.weights_dtype
    kv_dtype = s.kv_cache_dtype if s.kv_cache_dtype != "auto" else AUTO_KV_DTYPE[runs_in]
    kv_dtype_bytes = KV_DTYPE_BYTES[kv_dtype]
    token_bytes = kv_bytes_per_token(model, kv_dtype_bytes)
    kv_heads_per_rank = model.num_kv_heads if model.attention == "mla" else max(1, model.num_kv_heads // tp)
    per_rank_token = kv_bytes_per_token(model, kv_dtype_bytes, kv_heads_per_rank)
    block_bytes_per_rank = per_rank_token * s.block_size

    # ---- accelerator memory
    as_released = s.model_path is None or s.model_path == model.hf_id
    if model.weights_dtype == "fp8" and weights_dtype in UNQUANTISED and as_released:
        problems.append(Problem("serving.weights_dtype", f"{model.name} is released with fp8 weights, which vLLM serves as "
                                f"fp8 whatever --dtype says: {weights_dtype} would count more bytes than it loads",
                                s.weights_dtype, "auto or fp8 for this checkpoint",
                                "set serving.weights_dtype: auto, or serving.model_path to a 16-bit conversion of it"))
    weight_bytes_per_gpu = int(model.params * WEIGHT_BYTES[weights_dtype] / tp)
    profiled = None
    if device.kind != "cpu":   # vLLM's CPU worker does not profile: VLLM_CPU_KVCACHE_SPACE is the KV cache
        max_num_seqs, max_batched = _batch_limits(device, s)
        profiled = profiled_memory(model, device, catalog.vllm_memory, tensor_parallel=tp,
                                   gpu_memory_utilization=s.gpu_memory_utilization, max_num_batched_tokens=max_batched,
                                   max_num_seqs=max_num_seqs, activation_bytes=4 if runs_in == "fp32" else 2)
    non_kv = s.activation_memory if s.activation_memory is not None else profiled.non_kv if profiled else 0
    if s.kv_cache_memory is not None:
        kv_budget = s.kv_cache_memory
        if kv_budget < block_bytes_per_rank:    # no block at all: vLLM refuses to start, the simulator has no room
            problems.append(Problem("serving.kv_cache_memory", f"holds no KV block: one block of {s.block_size} tokens "
                                    f"is {fmt_bytes(block_bytes_per_rank)} per rank ({fmt_bytes(per_rank_token)}/token)",
                                    s.kv_cache_memory, f"at least one block's worth, {fmt_bytes(block_bytes_per_rank)}",
                                    f"give enough for max_model_len ({max_model_len} tokens = "
                                    f"{fmt_bytes(per_rank_token * max_model_len)} per rank)"
                                    + ("" if device.kind == "cpu" else ", or leave it out to let "
                                       "gpu_memory_utilization size it")))
        need = weight_bytes_per_gpu + non_kv + kv_budget
        if need > device.memory:
            problems.append(Problem("serving.kv_cache_memory", f"weights ({fmt_bytes(weight_bytes_per_gpu)} per device) + activation "
                                    f"and non-torch memory ({fmt_bytes(non_kv)}) + this KV space need {fmt_bytes(need)}, more than {device.name}'s {fmt_bytes(device.memory)}",
                                    s.kv_cache_memory, fix="lower kv_cache_memory or raise tensor_parallel"))
    else:
        kv_budget = int(_cuda_total(device) * s.gpu_memory_utilization) - weight_bytes_per_gpu - non_kv
        if kv_budget <= 0:
            problems.append(_weights_do_not_fit(model, device, s, weight_bytes_per_gpu, weights_dtype, non_kv))
    kv_budget = max(kv_budget, 0)
    hbm_blocks = kv_budget // block_bytes_per_rank
    hbm_tokens = hbm_blocks * s.block_size
    if kv_budget > 0 and hbm_tokens < max_model_len and (hbm_blocks > 0 or s.kv_cache_memory is None):
        problems.append(Problem("serving.max_model_len", f"one {max_model_len}-token sequence does not fit: {device.name} has "
                                f"{fmt_bytes(kv_budget)} for KV per GPU = {hbm_tokens} tokens at "
                                f"{fmt_bytes(per_rank_token)}/token per rank", max_model_len, f"1..{hbm_tokens}",
                                f"lower max_model_len to {hbm_tokens}, raise gpu_memory_utilization or tensor_parallel, "
                                "or use kv_cache_dtype: fp8"))
    return _Memory(max_model_len, kv_dtype, kv_dtype_bytes, token_bytes, kv_heads_per_rank, per_rank_token,
                   block_bytes_per_rank, weights_dtype, weight_bytes_per_gpu, non_kv, profiled, kv_budget, hbm_blocks,
                   hbm_tokens)


def _peak_tflops(device: Device, weights_dtype: str, problems: list[Problem]) -> float:
    """The dense peak the model's matrix multiplies run at: fp8's where the weights are fp8 and the device has
    fp8 units, fp32's for a model served in fp32, bf16's otherwise (fp16 and int4 run at the 16-bit rate)."""
    if weights_dtype == "fp8" and device.fp8_tflops:
        return device.fp8_tflops
    if weights_dtype != "fp32":
        return device.bf16_tflops
    if device.fp32_tflops is None:
        problems.append(Problem("serving.weights_dtype", f"the catalog has no fp32 peak for {device.name}, so an fp32 "
                                "model's step times cannot be simulated", weights_dtype, "bf16, fp16, or fp32 on a "
                                "device with fp32_tflops", "serve bf16, or add fp32_tflops to the device in the catalog"))
        return device.bf16_tflops
    return device.fp32_tflops


def accelerator_problems(topo: Topology, catalog: Catalog) -> list[Problem]:
    """What keeps the spec's model off its accelerator at its tensor parallelism, whatever its tiers:
    `resolve` reports the same problems for every spec that shares the model and serving section, so
    the planner rules out a hardware choice's every combination with one call. A disaggregated spec: each pool's,
    named by the pool's fields."""
    d = topo.serving.disaggregation
    if d is not None:
        return [_pool_problem(p, role) for role, pool in (("prefill", d.prefill), ("decode", d.decode))
                for p in accelerator_problems(_pool_topology(topo, pool), catalog)]
    problems: list[Problem] = []
    try:
        model = topo.model if isinstance(topo.model, Architecture) else _llm(catalog, topo.model)
        device = lookup(catalog.devices, topo.serving.gpu, "serving.gpu", "accelerator")
    except SpecError as exc:
        return list(exc.problems)
    mem = _accelerator_memory(model, device, topo.serving, catalog, problems)
    _peak_tflops(device, mem.weights_dtype, problems)
    return problems


def kv_bytes_per_token(model: Architecture, dtype_bytes: int, kv_heads: int | None = None) -> int:
    """layers x (2, or 1 for MLA) x KV heads x head dim x dtype bytes; `kv_heads` defaults to all of them."""
    heads = model.num_kv_heads if kv_heads is None else kv_heads
    return model.num_layers * model.kv_per_layer * heads * model.head_dim * dtype_bytes


def _llm(catalog: Catalog, name: str) -> Architecture:
    entry = catalog.llm(name)
    if entry is None:
        guess = did_you_mean(name, catalog.llm_names())
        raise SpecError([Problem("model", f"unknown model '{name}'", name, ", ".join(catalog.llm_names()),
                                 f"did you mean '{guess}'?" if guess else
                                 "pick a catalog model (`kvplan catalog`) or write the architecture inline")])
    return entry


def _check_parallelism(model: Architecture, tp: int, gpus_per_node: int) -> list[Problem]:
    """vLLM shards attention heads over TP ranks and replicates KV heads when TP exceeds them."""
    if tp == 1:
        return []
    def fits(t: int) -> bool:
        heads_ok = model.num_attention_heads % t == 0
        kv_ok = model.attention == "mla" or model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0
        return heads_ok and kv_ok
    if fits(tp):
        return []
    good = [str(t) for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0 and fits(t)]
    return [Problem("serving.tensor_parallel", f"does not suit {model.name}: {model.num_attention_heads} attention heads and "
                    f"{model.num_kv_heads} KV heads must split evenly over (or be replicated across) the ranks", tp,
                    ", ".join(good), f"use tensor_parallel: {good[-1]}" if good else "use tensor_parallel: 1")]


def _weights_do_not_fit(model, device, s, weight_bytes_per_gpu, weights_dtype, non_kv) -> Problem:
    usable = _cuda_total(device) * s.gpu_memory_utilization - non_kv
    total = model.params * WEIGHT_BYTES[weights_dtype]
    need_tp = next((t for t in (1, 2, 4, 8, 16, 32, 64) if total / t < usable * 0.9), None)
    fix = f"use tensor_parallel: {need_tp}" if need_tp else "use a larger accelerator"
    return Problem("serving.tensor_parallel", f"{model.name}'s weights ({fmt_bytes(weight_bytes_per_gpu)} per GPU in {weights_dtype}) "
                   f"leave no room for KV cache in {fmt_bytes(usable)} usable of {device.name} "
                   f"(gpu_memory_utilization {s.gpu_memory_utilization}, activation and non-torch memory {fmt_bytes(non_kv)})",
                   s.tensor_parallel, None, f"{fix}, weights_dtype: fp8 with quantization: fp8, or a larger accelerator")


CUDA_GRAPH_MAX_CAPTURE = 512
"""vLLM's default ceiling on CUDA graph capture sizes (1024 on data-center Blackwell; vllm/config/vllm.py
`_set_cudagraph_sizes`)."""

STEP_FIELDS = ("compute_efficiency", "attention_efficiency", "memory_efficiency", "step_overhead", "allreduce_latency",
               "request_overhead", "layer_overhead", "allreduce_efficiency", "small_gemm_params", "graph_step_overhead",
               "graph_layer_overhead")


def _step_coefficients(device: Device, overrides: StepModel | None, profile: str | None,
                       problems: list[Problem]) -> StepCoefficients | None:
    """The catalog's efficiency block for `device`, with the serving.step_profile file's step_model on top, and the
    spec's serving.step_model on top of that."""
    given = {k: v for k, v in (overrides.model_dump() if overrides else {}).items() if v is not None}
    if profile is not None:
        fitted = read_profile(profile, "serving.step_profile")
        if fitted.device != device.name:
            problems.append(Problem("serving.step_profile", f"the profile was fitted on {fitted.device}; this spec runs on "
                                    f"{device.name}", profile, fix=f"calibrate on {device.name}, or drop serving.step_profile"))
            return None
        given = {**{k: v for k, v in fitted.step_model.model_dump().items() if v is not None}, **given}
    default = device.efficiency.model_dump(include=set(STEP_FIELDS)) if device.efficiency else {}
    default = {k: v for k, v in default.items() if v is not None}
    # unmeasured: no HTTP or per-layer overhead, and all-reduces at the link's bandwidth
    values = {"request_overhead": 0.0, "layer_overhead": 0.0, "allreduce_efficiency": 1.0, "small_gemm_params": 0.0,
              **default, **given}
    if "compute_efficiency" in values:                         # attention as efficient as the rest unless measured
        values.setdefault("attention_efficiency", values["compute_efficiency"])
    # steps under CUDA graphs cost what eager steps do unless measured apart
    if "step_overhead" in values:
        values.setdefault("graph_step_overhead", values["step_overhead"])
    values.setdefault("graph_layer_overhead", values["layer_overhead"])
    missing = [k for k in STEP_FIELDS if k not in values]
    if missing:
        problems.append(Problem("serving.gpu", f"the catalog has no efficiency block for {device.name}, so the step-time model "
                                f"lacks {', '.join(missing)}", device.name,
                                fix=f"add an efficiency: block to {device.name} in models/hardware/gpus.yaml, or set "
                                    + ", ".join(f"serving.step_model.{k}" for k in missing)))
        return None
    return StepCoefficients(**values, allreduce_bandwidth=allreduce_link(device),
                            overridden=[k for k in STEP_FIELDS if k in given])


def allreduce_link(device: Device) -> float:
    """Bytes/s one direction of the link a tensor-parallel ring uses: NVLink, else PCIe, else (a CPU) host memory."""
    return device.nvlink or device.pcie or device.memory_bandwidth


def catalog_step(device: Device) -> StepCoefficients:
    """The catalog's step coefficients of `device`, no spec on top: what kvplan.gpufit fits and checks."""
    problems: list[Problem] = []
    step = _step_coefficients(device, None, None, problems)
    if step is None:
        raise SpecError(problems)
    return step


def _lmcache(topo: Topology, per_rank_token: int, storing_ranks: int, instances_per_node: int, nodes: int,
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


def _ceph(topo: Topology, device_class: CephDeviceClass, nic: Nic, lm: ResolvedLMCache | None,
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


Resolved.model_rebuild()
