"""The stack as it is configured: every value the roles receive, derived from `Resolved` only.

This is the deploy side of "what you simulate is what you deploy". Each role's variables are a
model here whose fields are the Ansible variable names (prefixed with the role name, as
ansible-lint's production profile wants). Nothing in the roles recomputes a number: block and
chunk sizes, per-rank or per-server tier sizes, eviction policies, pool size and the lifecycle
TTL all come from the same `Resolved` the simulator reads, and tests/test_deploy_invariant.py
holds the two together.

Real-stack facts used (shared/reference/lmcache-vllm.md):
- in-process LMCache reads a YAML file of `LMCacheEngineConfig` keys, sizes in GB per rank (§1.1);
- MP mode runs `lmcache server` with --l1-size-gb, --eviction-policy, --chunk-size and one
  --l2-adapter JSON per lower tier (§1.2, §3.3); `noop` is its name for no eviction; the batch
  eviction's watermark and ratio, which LMCache defaults to what kvplan simulates, are written out
  (--eviction-trigger-watermark, --eviction-ratio, and each adapter's "eviction" block), so the
  deployment does not lean on a default that another LMCache version may change;
- LMCache reaches Ceph through RGW S3 with virtual-hosted addressing (s3://<bucket>.<dns>:<port>);
  (a CephFS path is the other way, which kvplan refuses: it does not deploy CephFS); credentials
  come from the standard AWS environment variables, so they stay out of command lines and config
  files (§3.2, §4);
- PYTHONHASHSEED must be equal on every process that shares a persistent tier (§3.3);
- usage telemetry is off with LMCACHE_TRACK_USAGE=false / VLLM_NO_USAGE_STATS=1 / DO_NOT_TRACK=1 (§1.1, §4);
- the CPU build of vLLM takes its KV space from VLLM_CPU_KVCACHE_SPACE (GiB) and pairs with an
  MP server in engine-driven shared-memory mode (shared/reference/vllm-cpu-lmcache.md §4.3).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import SerializerFunctionWrapHandler, model_serializer

from .. import warmup as warm
from ..resolve import Resolved
from ..resolved_tiers import ResolvedTier
from ..spec.base import SpecModel
from ..spec.grammar import host_port, local_address
from ..units import GIB
from . import disagg
from .vllm_command import LMCACHE_HOST, RouterVars, placement, router_policy, router_vars, vllm_args

LMCACHE_CONFIG_FILE = "/etc/lmcache/lmcache.yaml"
"""Where in-process LMCache's config lives on a GPU node (vLLM finds it through LMCACHE_CONFIG_FILE)."""

PYTHONHASHSEED = "0"
"""Same chunk hashes on every vLLM and LMCache process, so shared and persistent tiers hit."""

MP_POLICY = {"none": "noop"}
"""kvplan policy name -> LMCache MP server name, where they differ."""

LMCACHE_ENGINE_KEYS = frozenset({
    "chunk_size", "local_cpu", "max_local_cpu_size", "local_disk", "max_local_disk_size", "remote_url",
    "remote_serde", "save_decode_cache", "save_unfull_chunk", "cache_policy", "min_retrieve_tokens",
    "extra_config", "pre_caching_hash_algorithm", "local_disk_path_sharding"})
"""The LMCacheEngineConfig (0.5.6) keys kvplan writes; every one exists in reference Appendix A."""


class CephVars(SpecModel):
    """Variables of the ceph role."""

    ceph_deploy: str
    ceph_osds_per_host: int
    ceph_osd_size: int
    ceph_osd_devices: list[str]
    ceph_device_class: str
    ceph_failure_domain: str
    ceph_crush_rule: str
    """Replicated CRUSH rule of the KV pool, on ceph_device_class across ceph_failure_domain."""
    ceph_pool_name: str
    ceph_pool_size: int
    ceph_pool_min_size: int
    ceph_pool_pg_num: int
    ceph_pool_application: str
    ceph_pool_adopt: bool
    """External cluster: an existing pool of this name may be changed to the spec; else the deploy stops first."""
    ceph_options: dict[str, str]
    """`ceph config set global <name> <value>`, values as Ceph prints them back, so re-runs compare equal."""
    ceph_access: str
    ceph_rgw_port: int
    ceph_rgw_address: str
    """Where GPU nodes reach RGW; <bucket>.<dns name> resolves to it."""
    ceph_rgw_endpoint: str
    """RGW's URL at that address (http://host:port, an IPv6 address bracketed), where the deploy waits for it and
    makes the bucket."""
    ceph_rgw_dns_name: str
    ceph_rgw_bucket: str
    ceph_rgw_region: str
    ceph_rgw_user: str
    ceph_rgw_expiration_days: int | None
    """Lifecycle expiration of the bucket (the ceph tier's ttl), whole days."""


class LMCacheVars(SpecModel):
    """Variables of the lmcache role."""

    lmcache_mode: str
    lmcache_cpu_host: bool
    """The node is CPU-only: the MP server shares KV with vLLM through POSIX shared memory."""
    lmcache_config: dict[str, Any]
    """In-process: the lmcache.yaml LMCacheEngineConfig (empty in mp mode)."""
    lmcache_config_file: str
    lmcache_server_args: list[str]
    """MP: the `lmcache server` arguments (empty in-process)."""
    lmcache_host: str
    """MP: where the server takes requests (its --host), where the deploy waits for it."""
    lmcache_port: int
    """MP: its --port."""
    lmcache_http_url_host: str
    """MP: where the deploy asks the server's HTTP API for its /status on its node (loopback where --http-host is
    every address), as a URL's host (url_host)."""
    lmcache_http_port: int
    """MP: that API's --http-port."""
    lmcache_env: dict[str, str]
    lmcache_nvme_paths: list[str]
    """The nvme tier's directories on each node (Resolved nvme_paths; empty without the tier)."""
    lmcache_nvme_own_volume: bool
    """Each directory must lie on a mounted volume, not on the root filesystem (several drives: Resolved nvme)."""
    lmcache_s3_host: str | None
    """<bucket>.<rgw dns name>, which must resolve on every GPU node for virtual-hosted S3."""


class VllmVars(SpecModel):
    """Variables of the vllm role (per-host instance lists go in host_vars)."""

    vllm_model: str
    vllm_args: list[str]
    """`vllm serve` arguments shared by every instance (host and port are per instance)."""
    vllm_env: dict[str, str]
    vllm_host: str
    vllm_url_host: str
    """Where the deploy asks each instance for its /health: vllm_host, loopback where that is every address, as a
    URL's host (url_host)."""
    vllm_tensor_parallel: int
    vllm_cpu_host: bool
    """CPU-only node: no CUDA_VISIBLE_DEVICES; the KV space comes from VLLM_CPU_KVCACHE_SPACE."""
    vllm_s3_credentials: bool
    """In-process LMCache runs inside vLLM, so vLLM gets the RGW keys (as AWS_* variables)."""
    vllm_api_key_env: str
    """The variable, where the deploy runs, whose value each instance gets as VLLM_API_KEY through its private
    environment file (serving.api_key_env); empty: vLLM asks no key."""


class WarmupVars(SpecModel):
    """Variables of the warmup role."""

    warmup_model: str
    warmup_url_host: str
    """Where this host's instances answer (loopback where they bind every address), as a URL's host (url_host)."""
    warmup_prompts: list[dict[str, Any]]
    """{name, prompt: token ids} for each prompt lmcache.warmup prefills (kvplan.warmup: the simulator's and
    kvplan bench's warm-up too)."""
    warmup_api_key_env: str
    """The variable holding the key vLLM asks of clients (serving.api_key_env), sent as a bearer token; empty: none."""


class MonitoringVars(SpecModel):
    """Variables of the monitoring role."""

    monitoring_port: int
    monitoring_web_listen_address: str
    """Prometheus's --web.listen-address: host:port, an IPv6 address bracketed."""
    monitoring_self_target: str
    """host:port where Prometheus scrapes itself (loopback where it listens on every address)."""
    monitoring_url_host: str
    """Where the deploy asks Prometheus whether it is ready (the self target's host), as a URL's host (url_host)."""
    monitoring_scrape_interval: str
    monitoring_rules: dict[str, Any]
    """Prometheus alert rules file content."""
    monitoring_vllm_targets: list[str]
    monitoring_lmcache_targets: list[str]
    monitoring_dashboard: dict[str, Any] = {}
    """The Grafana dashboard (deploy/dashboard.py), set by the render; written beside the rules."""
    """host:port of each GPU host's LMCache MP server HTTP API (its /metrics); empty without one."""
    monitoring_ceph_targets: list[str]


class Stack(SpecModel):
    """Every role's variables for one spec and inventory."""

    ceph: CephVars | None
    lmcache: LMCacheVars | None
    vllm: VllmVars
    router: RouterVars
    router_host: str
    """The inventory host the router runs on: the first gpu host."""
    warmup: WarmupVars | None
    monitoring: MonitoringVars
    instances: dict[str, list[dict[str, Any]]]
    """GPU host -> its vLLM instances ({index, port, devices}; disaggregated, env too)."""
    pools: dict[str, dict[str, Any]] | None = None
    """Disaggregated: GPU host -> its pool's vllm role variables (kvplan.deploy.disagg.PoolHost), its host_vars;
    None: aggregated (every instance takes group_vars/all's vllm_args)."""

    @model_serializer(mode="wrap")
    def _aggregated_as_before(self, handler: SerializerFunctionWrapHandler) -> dict:
        """An aggregated stack serialises as it did before disaggregation existed (kvplan.json): no pools key."""
        data = handler(self)
        if self.pools is None:
            data.pop("pools", None)
        return data


def build(r: Resolved, gpu_hosts: list[str], ceph_hosts: list[str], gpu_addresses: list[str] | None = None) -> Stack:
    """The stack for a resolved spec placed on these inventory hosts (addresses: where Prometheus reaches them)."""
    address = dict(zip(gpu_hosts, gpu_addresses or gpu_hosts))
    pools = None
    if r.disaggregation is not None:
        pools = disagg.placement(r, gpu_hosts, address)
        instances = {host: pool.vllm_instances for host, pool in pools.items()}
    else:
        instances = placement(r, gpu_hosts)
    placed = [(address[host], i["port"]) for host, items in instances.items() for i in items]
    ports = [host_port(host, port) for host, port in placed]
    workers = [f"http://{host_port(host, port, url=True)}" for host, port in placed]
    mp = r.lmcache is not None and r.lmcache.mode == "mp"
    lmcache_targets = [host_port(address[host], r.lmcache.http_port) for host in instances] if mp else []
    router = (router_vars(r, address[gpu_hosts[0]], ["--worker-urls", *workers, *router_policy(r.router, r.router_thresholds)])
              if pools is None
              else disagg.router(r, pools, address, gpu_hosts[0]))
    return Stack(ceph=_ceph(r, ceph_hosts) if r.ceph else None, lmcache=_lmcache(r) if r.lmcache else None, vllm=_vllm(r),
                 router=router, router_host=gpu_hosts[0], warmup=_warmup(r),
                 monitoring=_monitoring(r, ports, lmcache_targets, ceph_hosts), instances=instances,
                 pools=None if pools is None else {host: pool.model_dump() for host, pool in pools.items()})


def url_host(host: str) -> str:
    """`host` as a URL's host: an IPv6 address in brackets, a scope id's '%' as '%25' (`[fe80::1%25eth0]`), the
    rule of host_port, which writes every host:port kvplan renders (urllib reads the %25 back as '%')."""
    return host_port(host, 0, url=True).removesuffix(":0")


def _ceph(r: Resolved, ceph_hosts: list[str]) -> CephVars:
    c = r.ceph
    tier = r.lmcache.tier("ceph") if r.lmcache else None
    ttl = tier.ttl_s if tier else None
    rgw = c.rgw_address or ceph_hosts[0]
    return CephVars(
        ceph_deploy=c.deploy, ceph_osds_per_host=c.osds // c.hosts, ceph_osd_size=c.osd_size,
        ceph_osd_devices=c.osd_devices, ceph_device_class=c.device_class.name, ceph_failure_domain=c.failure_domain,
        ceph_crush_rule=f"kvplan-{c.device_class.name}-{c.failure_domain}",
        ceph_pool_name=c.pool_name, ceph_pool_size=c.pool_size, ceph_pool_min_size=c.pool_min_size,
        ceph_pool_pg_num=c.pool_pg_num, ceph_pool_application="rgw",
        ceph_pool_adopt=c.pool_adopt,
        ceph_options={k: _ceph_value(v) for k, v in c.options.items()}, ceph_access=c.access,
        ceph_rgw_port=c.rgw_port, ceph_rgw_address=rgw, ceph_rgw_endpoint=f"http://{host_port(rgw, c.rgw_port, url=True)}",
        ceph_rgw_dns_name=c.rgw_dns_name, ceph_rgw_bucket=c.rgw_bucket,
        ceph_rgw_region=c.rgw_region, ceph_rgw_user=c.rgw_user,
        ceph_rgw_expiration_days=round(ttl / 86400) if ttl else None)


def _ceph_value(value: str | int | float | bool) -> str:
    """Ceph prints booleans as true/false and numbers plainly; write them the same way."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def s3_endpoint(r: Resolved) -> str:
    """LMCache's virtual-hosted S3 endpoint for the bucket."""
    return f"s3://{r.ceph.rgw_bucket}.{r.ceph.rgw_dns_name}:{r.ceph.rgw_port}"


def _lmcache(r: Resolved) -> LMCacheVars:
    lm = r.lmcache
    cpu = r.device.kind == "cpu"
    env = {"PYTHONHASHSEED": PYTHONHASHSEED, "LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"}
    s3_host = f"{r.ceph.rgw_bucket}.{r.ceph.rgw_dns_name}" if lm.tier("ceph") and r.ceph.access == "s3" else None
    own_volume = r.nvme is not None and r.nvme.own_volume
    server = dict(lmcache_host=LMCACHE_HOST, lmcache_port=lm.port, lmcache_http_url_host=url_host(lm.http_address),
                  lmcache_http_port=lm.http_port)
    if lm.mode == "inprocess":
        return LMCacheVars(lmcache_mode="inprocess", lmcache_cpu_host=cpu, lmcache_config=inprocess_config(r),
                           lmcache_config_file=LMCACHE_CONFIG_FILE, lmcache_server_args=[], **server,
                           lmcache_env=env, lmcache_nvme_paths=lm.nvme_paths, lmcache_s3_host=s3_host,
                           lmcache_nvme_own_volume=own_volume)
    return LMCacheVars(lmcache_mode="mp", lmcache_cpu_host=cpu, lmcache_config={}, lmcache_config_file=LMCACHE_CONFIG_FILE,
                       lmcache_server_args=server_args(r), **server,
                       lmcache_env=env, lmcache_nvme_paths=lm.nvme_paths, lmcache_s3_host=s3_host,
                       lmcache_nvme_own_volume=own_volume)


def inprocess_config(r: Resolved) -> dict[str, Any]:
    """lmcache.yaml for LMCacheConnectorV1: sizes are GB per rank (resolve splits each node's tier)."""
    lm = r.lmcache
    ddr, nvme, ceph = lm.tier("ddr"), lm.tier("nvme"), lm.tier("ceph")
    cfg: dict[str, Any] = {"chunk_size": lm.chunk_size, "local_cpu": ddr is not None}
    # Without a ddr tier LMCache still stages chunks in pinned CPU memory; give it two chunks.
    cfg["max_local_cpu_size"] = ddr.configured_gb if ddr else math.ceil(2 * lm.chunk_bytes_per_rank / 2**20) / 1024
    if nvme:   # per_drive: several directories, each worker on paths[its GPU index % drives] (by_gpu)
        cfg["local_disk"] = ",".join(f"file://{path.rstrip('/')}/" for path in lm.nvme_paths)
        cfg["max_local_disk_size"] = nvme.configured_gb
        if len(lm.nvme_paths) > 1:
            cfg["local_disk_path_sharding"] = "by_gpu"
    if ceph:
        cfg["remote_url"] = s3_endpoint(r)
        cfg["extra_config"] = {"s3_region": r.ceph.rgw_region, "disable_tls": True, "s3_prefer_http2": False}
        cfg["remote_serde"] = "naive"
    cfg["cache_policy"] = (ddr or nvme).eviction if (ddr or nvme) else "LRU"
    cfg["save_decode_cache"] = lm.save_decode_cache
    cfg["save_unfull_chunk"] = lm.save_unfull_chunk
    cfg["min_retrieve_tokens"] = lm.min_retrieve_tokens
    cfg["pre_caching_hash_algorithm"] = "builtin"
    assert set(cfg) <= LMCACHE_ENGINE_KEYS, set(cfg) - LMCACHE_ENGINE_KEYS
    return cfg


def _eviction(r: Resolved, tier: ResolvedTier) -> dict[str, Any]:
    """An L2 adapter's "eviction" block: its policy, and the batch eviction the simulator runs it with."""
    return {"eviction_policy": MP_POLICY.get(tier.eviction, tier.eviction),
            "trigger_watermark": r.lmcache.eviction_watermark, "eviction_ratio": r.lmcache.eviction_ratio}


def server_args(r: Resolved) -> list[str]:
    """`lmcache server` arguments: L1 is the node's ddr tier; nvme then ceph are L2 adapters, in lookup order."""
    lm = r.lmcache
    ddr, nvme, ceph = lm.tier("ddr"), lm.tier("nvme"), lm.tier("ceph")
    args = ["--host", LMCACHE_HOST, "--port", str(lm.port), "--chunk-size", str(lm.chunk_size),
            "--l1-size-gb", _num(ddr.configured_gb), "--eviction-policy", MP_POLICY.get(ddr.eviction, ddr.eviction),
            "--eviction-trigger-watermark", _num(lm.eviction_watermark), "--eviction-ratio", _num(lm.eviction_ratio),
            "--http-host", lm.http_host, "--http-port", str(lm.http_port)]
    if nvme:
        adapter = {"type": "fs_native", "base_path": lm.nvme_path, "max_capacity_gb": nvme.configured_gb,
                   "eviction": _eviction(r, nvme)}
        args += ["--l2-adapter", json.dumps(adapter, separators=(",", ":"))]
    if ceph:
        adapter = {"type": "s3", "s3_endpoint": s3_endpoint(r), "s3_region": r.ceph.rgw_region, "disable_tls": True,
                   "s3_prefer_http2": False}
        adapter.update(max_capacity_gb=ceph.configured_gb, shared=True, eviction=_eviction(r, ceph))
        args += ["--l2-adapter", json.dumps(adapter, separators=(",", ":"))]
    if r.device.kind == "cpu":
        args += ["--supported-transfer-mode", "auto", "--shm-name", f"kvplan_{r.name.replace('-', '_').replace('.', '_')}"]
    return args


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _vllm(r: Resolved) -> VllmVars:
    env = {"PYTHONHASHSEED": PYTHONHASHSEED, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "LMCACHE_TRACK_USAGE": "false"}
    if r.lmcache is not None and r.lmcache.mode == "inprocess":
        env["LMCACHE_CONFIG_FILE"] = LMCACHE_CONFIG_FILE
    if r.device.kind == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(r.kv_cache_memory_bytes // GIB)
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "1"
    s3_inside = (r.lmcache is not None and r.lmcache.mode == "inprocess" and r.lmcache.tier("ceph") is not None
                 and r.ceph.access == "s3")
    return VllmVars(vllm_model=r.model_path or "", vllm_args=vllm_args(r), vllm_env=env, vllm_host=r.api_host,
                    vllm_url_host=url_host(local_address(r.api_host)),
                    vllm_tensor_parallel=r.tensor_parallel, vllm_cpu_host=r.device.kind == "cpu", vllm_s3_credentials=s3_inside,
                    vllm_api_key_env=r.api_key_env or "")


def _warmup(r: Resolved) -> WarmupVars | None:
    """The warm-up prompts as the token ids kvplan bench's requests begin with (the same warm salt), for the
    workload's seed: the prefills the simulator makes before its requests."""
    prompts = warm.prompts(r)
    if not prompts:
        return None
    return WarmupVars(warmup_model=r.model.name, warmup_url_host=url_host(local_address(r.api_host)),
                      warmup_prompts=[{"name": p.name, "prompt": warm.token_ids(p, r.model.vocab_size)} for p in prompts],
                      warmup_api_key_env=r.api_key_env or "")


def hit_ratio_expr(r: Resolved) -> str:
    """The cache hit ratio in PromQL, in both modes from vLLM's counters: the prompt tokens whose KV
    came from a cache, vLLM's prefix cache (prefix_cache_hits) or LMCache's tiers beyond it
    (external_prefix_cache_hits), over all prompt tokens (prefix_cache_queries), each request's first
    admission (vLLM 0.33 counts preempted ones apart). The simulator's alert watches the same ratio
    (kvplan.sim.run: `cache_hit`). In-process LMCache's own num_hit_tokens / num_requested_tokens count
    only what a retrieve asked for, so that ratio is near 1 whenever anything loads; the MP server's
    lookup counters see only what reached LMCache, past vLLM's prefix cache."""
    return ("(sum(rate(vllm:prefix_cache_hits_total[5m])) + sum(rate(vllm:external_prefix_cache_hits_total[5m]))) / "
            "sum(rate(vllm:prefix_cache_queries_total[5m]))")


def _monitoring(r: Resolved, vllm_targets: list[str], lmcache_targets: list[str], ceph_hosts: list[str]) -> MonitoringVars:
    m = r.monitoring
    rules = [
        {"alert": "KVPlanLMCacheHitRatioLow", "expr": f"({hit_ratio_expr(r)}) < {m.min_lmcache_hit_ratio}", "for": "10m",
         "labels": {"severity": "warning"},
         "annotations": {"summary": f"LMCache token hit ratio below {m.min_lmcache_hit_ratio:g}",
                         "description": "The offload tiers serve fewer prompt tokens than planned; compare with "
                                        "`kvplan simulate` and check tier sizes and eviction."}},
        {"alert": "KVPlanKVBlockUtilizationHigh", "expr": f"max(vllm:kv_cache_usage_perc) > {m.max_block_utilization}",
         "for": "10m", "labels": {"severity": "warning"},
         "annotations": {"summary": f"vLLM KV block utilisation above {m.max_block_utilization:g}",
                         "description": "HBM blocks are nearly exhausted: expect preemptions and recomputation."}},
    ]
    if r.ceph is not None:
        # The mean latency of one OSD op (a RADOS read or write, queueing and replication included) over
        # the window, on the slowest OSD: Ceph's op_r_latency / op_w_latency, which the mgr's prometheus
        # module exports as _sum (seconds) and _count per ceph_daemon. The simulator's alert watches the same.
        ops = "rate(ceph_osd_op_r_latency_{0}[5m]) + rate(ceph_osd_op_w_latency_{0}[5m])"
        limit = r.ceph.op_latency_alert
        ms = round(limit * 1000, 3)
        rules.append(
            {"alert": "KVPlanCephOpLatencyHigh",
             "expr": f"max(({ops.format('sum')}) / ({ops.format('count')})) > {limit:g}", "for": "5m",
             "labels": {"severity": "warning"},
             "annotations": {"summary": f"Ceph OSD op latency above {ms:g} ms (mean of one op, slowest OSD)",
                             "description": "The ceph tier's reads slow down TTFT on misses of the local tiers; "
                                            "compare with `kvplan simulate` (Ceph op latency)."}})
    ceph_targets = [host_port(ceph_hosts[0], 9283)] if r.ceph is not None and r.ceph.deploy != "external" and ceph_hosts else []
    return MonitoringVars(monitoring_port=m.prometheus_port,
                          monitoring_web_listen_address=host_port(m.metrics_address, m.prometheus_port),
                          monitoring_self_target=host_port(local_address(m.metrics_address), m.prometheus_port),
                          monitoring_url_host=url_host(local_address(m.metrics_address)),
                          monitoring_scrape_interval=f"{round(m.scrape_interval)}s",
                          monitoring_rules={"groups": [{"name": f"kvplan-{r.name}", "rules": rules}]},
                          monitoring_vllm_targets=vllm_targets, monitoring_lmcache_targets=lmcache_targets,
                          monitoring_ceph_targets=ceph_targets)
