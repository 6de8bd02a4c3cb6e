"""resolve(topology, catalog) -> Resolved: the ONE place where derived numbers are computed.

The simulator and the deployer both read `Resolved` and never re-derive a number from the raw
spec; that is how what is simulated stays what is deployed. The arithmetic follows the real
stack (reference/lmcache-vllm.md §6), each concept in its own module, which `resolve` joins:

- How the model fits one accelerator at its tensor parallelism: KV bytes per token, per rank and per
  block, weights and what vLLM's start-up profiling takes, the KV blocks left (accelerator_fit.py, over
  vLLM's formula in kv_capacity.py).
- The step-time coefficients: the accelerator's catalog defaults with the spec's on top
  (step_coefficients.py).
- LMCache's tiers and the Ceph cluster (resolved_tiers.py), vLLM's native CPU tier (offload.py), the nvme
  tier's drives and the node's host memory (node_storage.py).
- vllm-router's thresholds and llm-d's scheduler (router_settings.py).
- Here: the deployment's shape (instances over nodes and ports), vLLM's CUDA-graph ceiling, and a
  disaggregated spec's pools, each resolved as an aggregated deployment of its own beside the KV
  transfer's numbers.

Checks that need the catalog (unknown names, TP vs KV heads, weights fitting in HBM, room for a
max-length sequence, tiers holding at least one chunk, Ceph capacity) are made as `resolve` goes, here and
in those modules, and raised as one SpecError listing every problem; `catalog_problems` makes those that the valid sections of an
invalid spec allow (kvplan/validation.py), so one round of `kvplan validate` reports them all.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal, cast

from pydantic import SerializerFunctionWrapHandler, model_serializer

from .accelerator_fit import WEIGHT_BYTES, accelerator_memory, batch_limits, peak_tflops
from .catalog import Catalog, Device, Nic, load_catalog, lookup
from .errors import Problem, SpecError, did_you_mean
from .kv_capacity import ProfiledMemory, cuda_total
from .node_storage import HostMemory, ResolvedNvme, drive_of, host_memory, resolve_nvme
from .offload import ResolvedOffload, resolve_offload
from .resolved_tiers import ResolvedCeph, ResolvedLMCache, resolve_ceph, resolve_lmcache
from .router_settings import LlmDScheduler, RouterThresholds, llm_d_scheduler
from .spec import Topology
from .spec.architecture import Architecture
from .spec.base import SpecModel
from .spec.disaggregation import POOL_FIELDS, InstancePool
from .spec.cost import CostOverrides
from .spec.slo import Monitoring, Slo
from .spec.workload import Workload
from .step_coefficients import CUDA_GRAPH_MAX_CAPTURE, StepCoefficients, step_coefficients
from .units import GIB, fmt_bytes

if TYPE_CHECKING:
    from .spec.partial import Sections


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
    max_num_seqs, max_batched = batch_limits(device, s)
    mem = accelerator_memory(model, device, s, catalog, problems)
    peak = peak_tflops(device, mem.weights_dtype, problems)
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
    resolved_lm = resolve_lmcache(topo, mem.per_rank_token, storing_ranks, instances_per_node, nodes, problems) if lm else None
    ceph = resolve_ceph(topo, ceph_class, nic, resolved_lm, problems) if topo.ceph and ceph_class and nic else None
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
    step = step_coefficients(device, s.step_model, s.step_profile, problems)
    llm_d = llm_d_scheduler(s, resolved_lm, offload, mem.hbm_blocks, problems) if s.router == "llm_d" else None

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
        weight_bytes_per_gpu=mem.weight_bytes_per_gpu, cuda_memory_bytes=cuda_total(device), non_kv_bytes_per_gpu=mem.non_kv,
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
        mem = accelerator_memory(model, device, spec.serving, catalog, problems)
        peak_tflops(device, mem.weights_dtype, problems)
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
    mem = accelerator_memory(model, device, topo.serving, catalog, problems)
    peak_tflops(device, mem.weights_dtype, problems)
    return problems


def _llm(catalog: Catalog, name: str) -> Architecture:
    entry = catalog.llm(name)
    if entry is None:
        guess = did_you_mean(name, catalog.llm_names())
        raise SpecError([Problem("model", f"unknown model '{name}'", name, ", ".join(catalog.llm_names()),
                                 f"did you mean '{guess}'?" if guess else
                                 "pick a catalog model (`kvplan catalog`) or write the architecture inline")])
    return entry


Resolved.model_rebuild()
