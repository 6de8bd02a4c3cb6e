"""Where every spec field goes when the spec is deployed: the ledger behind "what you simulate is what you deploy".

Each field of `Topology`, named by its dotted path (a list's items by the list's path, e.g.
`lmcache.warmup.templates.tokens`), is in exactly one class:

- DEPLOYED: `kvplan render` writes the value into the stack (the entry says where), and
  tests/test_deploy_fields.py renders a spec that sets it and finds the value there.
- SIMULATION_ONLY: the real stack has no such setting. `validate` refuses a spec that sets it
  away from its default unless the spec says `simulate_only: true`, and `render` refuses every
  simulate_only spec, naming these settings (the entry says why the stack cannot honour it).
- NOT_DEPLOYED: the deployment needs neither the value nor a refusal: a name, free text, the
  traffic, a judgement, the hardware's own description (the entry says why).

An entry may stand for a whole subtree (`workload`), but no entry lies under another, so every
field has exactly one class; the test walks the schema and fails on a field no entry covers. Some
fields are deployed for some values only (an eviction policy LMCache's mode lacks, a router
policy the router lacks): those values are refused by `kvplan.spec.rules`, with the same
simulate_only escape.

STACK_FACTS does the same for the stack facts in `Resolved` that no spec field sets as it is: how
LMCache or the router behaves by default, which the simulator models, and what kvplan chooses for
the stack (the LMCache server's HTTP API). Each is named by its path in `Resolved`; a deployed one
is written into the stack, so that the deployment does not depend on a default it happens to share
with the simulator, nor a role on parsing it back out of a command line (tests/test_deploy_fields.py
changes each in `Resolved`, renders, and finds the new value there).
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["deployed", "simulation-only", "not deployed"]
DEPLOYED: Kind = "deployed"
SIMULATION_ONLY: Kind = "simulation-only"
NOT_DEPLOYED: Kind = "not deployed"

CHECKPOINT = "describes the checkpoint; vLLM reads the architecture from the checkpoint's own config.json"

LEDGER: dict[str, tuple[Kind, str]] = {
    "name": (DEPLOYED, "the header of every rendered file, the Prometheus rule group, LMCache's shared-memory name"),
    "description": (NOT_DEPLOYED, "free text"),
    "simulate_only": (NOT_DEPLOYED, "a switch: render refuses a spec that sets it, naming what it cannot deploy"),

    "model.name": (DEPLOYED, "vLLM --served-model-name, the name clients ask for"),
    "model.aliases": (NOT_DEPLOYED, "other names the catalog finds the model by"),
    "model.attention": (NOT_DEPLOYED, CHECKPOINT),
    "model.num_layers": (NOT_DEPLOYED, CHECKPOINT),
    "model.hidden_size": (NOT_DEPLOYED, CHECKPOINT),
    "model.num_attention_heads": (NOT_DEPLOYED, CHECKPOINT),
    "model.num_kv_heads": (NOT_DEPLOYED, CHECKPOINT),
    "model.head_dim": (NOT_DEPLOYED, CHECKPOINT),
    "model.intermediate_size": (NOT_DEPLOYED, CHECKPOINT),
    "model.vocab_size": (NOT_DEPLOYED, CHECKPOINT),
    "model.tie_word_embeddings": (NOT_DEPLOYED, CHECKPOINT),
    "model.params": (NOT_DEPLOYED, CHECKPOINT),
    "model.active_params": (NOT_DEPLOYED, CHECKPOINT),
    "model.max_context": (NOT_DEPLOYED, CHECKPOINT + " (serving.max_model_len is what vLLM is given)"),
    "model.kv_lora_rank": (NOT_DEPLOYED, CHECKPOINT),
    "model.qk_rope_head_dim": (NOT_DEPLOYED, CHECKPOINT),
    "model.weights_dtype": (NOT_DEPLOYED, "the checkpoint's dtype as released (serving.weights_dtype is what vLLM runs)"),
    "model.hf_id": (DEPLOYED, "the checkpoint vLLM serves when serving.model_path is unset"),
    "model.sources": (NOT_DEPLOYED, "citations"),
    "model.note": (NOT_DEPLOYED, "free text"),

    "serving.gpu": (NOT_DEPLOYED, "the hardware the inventory's gpu hosts have, which a render cannot choose (a CPU "
                                  "device gets vLLM's CPU settings)"),
    "serving.gpus_per_node": (DEPLOYED, "the devices each vLLM instance is given on its host (CUDA_VISIBLE_DEVICES)"),
    "serving.host_memory": (NOT_DEPLOYED, "the node's RAM, which a render cannot choose: resolve refuses a ddr "
                                          "tier and native offloading that do not fit in it"),
    "serving.instances": (DEPLOYED, "the vLLM instances placed on the gpu hosts (host_vars)"),
    "serving.tensor_parallel": (DEPLOYED, "vLLM --tensor-parallel-size"),
    "serving.block_size": (DEPLOYED, "vLLM --block-size"),
    "serving.gpu_memory_utilization": (DEPLOYED, "vLLM --gpu-memory-utilization"),
    "serving.kv_cache_memory": (DEPLOYED, "vLLM --kv-cache-memory-bytes (VLLM_CPU_KVCACHE_SPACE on a CPU device)"),
    "serving.activation_memory": (NOT_DEPLOYED, "kvplan's estimate of what vLLM measures for itself at start-up; the "
                                                "deployed KV space is vLLM's own measurement under "
                                                "--gpu-memory-utilization (set serving.kv_cache_memory to deploy an "
                                                "exact size)"),
    "serving.max_model_len": (DEPLOYED, "vLLM --max-model-len"),
    "serving.max_num_seqs": (DEPLOYED, "vLLM --max-num-seqs"),
    "serving.max_num_batched_tokens": (DEPLOYED, "vLLM --max-num-batched-tokens"),
    "serving.weights_dtype": (DEPLOYED, "vLLM --dtype, or --quantization with a checkpoint that has the weights "
                                        "(serving.quantization)"),
    "serving.quantization": (DEPLOYED, "vLLM --quantization"),
    "serving.kv_cache_dtype": (DEPLOYED, "vLLM --kv-cache-dtype"),
    "serving.prefix_caching": (DEPLOYED, "vLLM --enable-prefix-caching / --no-enable-prefix-caching"),
    "serving.chunked_prefill": (DEPLOYED, "vLLM --enable-chunked-prefill / --no-enable-chunked-prefill"),
    "serving.async_scheduling": (DEPLOYED, "vLLM --async-scheduling / --no-async-scheduling"),
    "serving.kv_offloading.size": (DEPLOYED, "vLLM's OffloadingConnector: kv_connector_extra_config.cpu_bytes_to_use "
                                             "of --kv-transfer-config (--kv-offloading-size, in exact bytes)"),
    "serving.kv_offloading.eviction": (DEPLOYED, "the OffloadingConnector's eviction_policy (lru or arc)"),
    "serving.kv_offloading.block_size": (DEPLOYED, "the OffloadingConnector's block_size (tokens per offloaded chunk)"),
    "serving.disaggregation.prefill.instances": (DEPLOYED, "the prefill pool's vLLM instances, placed on the first gpu "
                                                           "hosts (host_vars) and given to vllm-router as --prefill"),
    "serving.disaggregation.prefill.tensor_parallel": (DEPLOYED, "vLLM --tensor-parallel-size of the prefill pool's "
                                                                 "instances (their hosts' host_vars)"),
    "serving.disaggregation.prefill.gpu": (NOT_DEPLOYED, "the hardware the inventory's gpu hosts have, which a render "
                                                         "cannot choose; the prefill pool takes the first hosts"),
    "serving.disaggregation.prefill.max_num_seqs": (DEPLOYED, "vLLM --max-num-seqs of the prefill pool's instances"),
    "serving.disaggregation.prefill.max_num_batched_tokens": (DEPLOYED, "vLLM --max-num-batched-tokens of the "
                                                                        "prefill pool's instances"),
    "serving.disaggregation.decode.instances": (DEPLOYED, "the decode pool's vLLM instances, placed on the gpu hosts "
                                                          "after the prefill pool's (host_vars) and given to "
                                                          "vllm-router as --decode"),
    "serving.disaggregation.decode.tensor_parallel": (DEPLOYED, "vLLM --tensor-parallel-size of the decode pool's "
                                                                "instances (their hosts' host_vars)"),
    "serving.disaggregation.decode.gpu": (NOT_DEPLOYED, "the hardware the inventory's gpu hosts have, which a render "
                                                        "cannot choose; the decode pool takes the hosts after the "
                                                        "prefill pool's"),
    "serving.disaggregation.decode.max_num_seqs": (DEPLOYED, "vLLM --max-num-seqs of the decode pool's instances"),
    "serving.disaggregation.decode.max_num_batched_tokens": (DEPLOYED, "vLLM --max-num-batched-tokens of the decode "
                                                                       "pool's instances"),
    "serving.disaggregation.connector": (DEPLOYED, "nixl: NixlConnector in every instance's --kv-transfer-config, its "
                                                   "side channel (VLLM_NIXL_SIDE_CHANNEL_HOST/PORT) per instance, and "
                                                   "vllm-router --kv-connector nixl; lmcache is refused by the rules "
                                                   "(vllm-router cannot drive LMCache's PD mode)"),
    "serving.disaggregation.network": (NOT_DEPLOYED, "the NIC's class, whose bandwidth the simulator's transfer links "
                                                     "model; kvplan configures no NIC (NIXL picks its transport)"),
    "serving.disaggregation.network_bandwidth": (NOT_DEPLOYED, "the NIC's bandwidth, which the simulator's transfer "
                                                               "links model"),
    "serving.disaggregation.buffer_size": (SIMULATION_ONLY, "LMCache's PD receive buffer (pd_buffer_size) and its "
                                                            "proxy's --pd-buffer-size, which exist only with connector: "
                                                            "lmcache, which kvplan does not deploy (vllm-router cannot "
                                                            "drive LMCache's PD mode)"),
    "serving.disaggregation.proxy": (DEPLOYED, "vllm-router --vllm-pd-disaggregation with --policy round_robin over "
                                               "each pool"),
    "serving.router": (DEPLOYED, "the router in front of the instances (vllm-router) and its --policy; llm_d: llm-d's "
                                 "EndpointPickerConfig (render --format production-stack), which the Ansible render "
                                 "refuses: vllm-router has no weighted scorers"),
    "serving.llm_d": (DEPLOYED, "each scorer's weight and the prefix producers in llm-d's EndpointPickerConfig "
                                "(kvplan.deploy.llmd, render --format production-stack); prefix_match: precise is "
                                "refused at render (kvplan deploys no KV-events publisher)"),
    "serving.router_port": (DEPLOYED, "the router's --port (and --prometheus-port, the next one)"),
    "serving.model_path": (DEPLOYED, "the checkpoint `vllm serve` is given"),
    "serving.host": (DEPLOYED, "vLLM --host"),
    "serving.port": (DEPLOYED, "vLLM --port of each host's first instance"),
    "serving.api_key_env": (DEPLOYED, "VLLM_API_KEY of each instance, read from this variable where the deploy runs "
                                      "into the instance's private environment file; production-stack: the chart's "
                                      "servingEngineSpec.vllmApiKey Secret reference"),
    "serving.step_model": (NOT_DEPLOYED, "how fast the hardware runs engine steps: fitted to it, not a setting of it"),
    "serving.step_profile": (NOT_DEPLOYED, "a fitted device profile (kvplan calibrate): how fast the hardware runs, "
                                           "not a setting of it"),

    "lmcache.mode": (DEPLOYED, "an `lmcache server` with LMCacheMPConnector, or LMCacheConnectorV1 in vLLM"),
    "lmcache.chunk_size": (DEPLOYED, "LMCache --chunk-size / chunk_size"),
    "lmcache.ddr.size": (DEPLOYED, "LMCache --l1-size-gb / max_local_cpu_size"),
    "lmcache.ddr.eviction": (DEPLOYED, "LMCache --eviction-policy / cache_policy"),
    "lmcache.ddr.ttl": (SIMULATION_ONLY, "LMCache has no expiry by age in host memory"),
    "lmcache.nvme.size": (DEPLOYED, "the fs_native L2 adapter's max_capacity_gb / max_local_disk_size"),
    "lmcache.nvme.eviction": (DEPLOYED, "the fs_native L2 adapter's eviction / cache_policy"),
    "lmcache.nvme.ttl": (SIMULATION_ONLY, "LMCache has no expiry by age on local disk"),
    "lmcache.nvme.device": (NOT_DEPLOYED, "one drive's class (a catalog name or an inline class), whose speed the "
                                          "simulator models and whose capacity bounds the tier (validate); kvplan "
                                          "formats no drive"),
    "lmcache.nvme.drives": (NOT_DEPLOYED, "the node's hardware, which a render cannot choose: the simulator's device "
                                          "speed (raid0) or device count (per_drive, where paths deploys one "
                                          "directory per drive); kvplan builds, formats and mounts no drive or array"),
    "lmcache.nvme.layout": (DEPLOYED, "raid0: one directory in local_disk / base_path; per_drive: local_disk lists "
                                      "every drive's directory with local_disk_path_sharding: by_gpu (MP is refused)"),
    "lmcache.nvme.path": (DEPLOYED, "the fs_native L2 adapter's base_path / local_disk"),
    "lmcache.nvme.paths": (DEPLOYED, "per_drive: local_disk's comma-separated directories, each created by the "
                                     "lmcache role (lmcache_nvme_paths)"),
    "lmcache.ceph.size": (DEPLOYED, "the S3 L2 adapter's max_capacity_gb"),
    "lmcache.ceph.eviction": (DEPLOYED, "the S3 L2 adapter's eviction"),
    "lmcache.ceph.ttl": (DEPLOYED, "the bucket's RGW lifecycle expiration, in days"),
    "lmcache.port": (DEPLOYED, "the LMCache server's --port and the connector's lmcache.mp.port"),
    "lmcache.save_decode_cache": (DEPLOYED, "save_decode_cache / the connector's lmcache.mp.save_decode_cache"),
    "lmcache.save_unfull_chunk": (DEPLOYED, "save_unfull_chunk (in-process; the MP server has no such setting)"),
    "lmcache.min_retrieve_tokens": (DEPLOYED, "min_retrieve_tokens (in-process; the MP server has no such setting)"),
    "lmcache.merging": (SIMULATION_ONLY, "neither vLLM nor LMCache has a setting that holds requests back to merge "
                                         "their prefills"),
    "lmcache.warmup.system_prompts": (DEPLOYED, "the deploy's warm-up play, which prefills them through every instance"),
    "lmcache.warmup.templates": (DEPLOYED, "the deploy's warm-up play, which prefills them through every instance"),

    "ceph.deploy": (DEPLOYED, "how the ceph role builds or reaches the cluster"),
    "ceph.hosts": (DEPLOYED, "the inventory's ceph hosts that render places the cluster on"),
    "ceph.osds_per_host": (DEPLOYED, "the OSDs the ceph role creates on each host"),
    "ceph.osd_size": (DEPLOYED, "each file-backed OSD's size"),
    "ceph.osd_devices": (DEPLOYED, "the block devices the OSDs are created on"),
    "ceph.device_class": (DEPLOYED, "the KV pool's CRUSH rule, on this device class"),
    "ceph.network": (NOT_DEPLOYED, "the NIC's class, whose bandwidth the simulator's links model; kvplan configures no NIC"),
    "ceph.network_bandwidth": (NOT_DEPLOYED, "the NIC's bandwidth, which the simulator's links model"),
    "ceph.failure_domain": (DEPLOYED, "the KV pool's CRUSH rule, across this failure domain"),
    "ceph.pool.name": (DEPLOYED, "the KV pool's name"),
    "ceph.pool.size": (DEPLOYED, "the KV pool's size (replicas)"),
    "ceph.pool.min_size": (DEPLOYED, "the KV pool's min_size"),
    "ceph.pool.pg_num": (DEPLOYED, "the KV pool's pg_num"),
    "ceph.pool.adopt": (DEPLOYED, "whether the deploy may change an existing pool of that name"),
    "ceph.access": (DEPLOYED, "how LMCache reaches Ceph: RGW's S3 API (cephfs is refused, see rules)"),
    "ceph.rgw.port": (DEPLOYED, "RGW's port and LMCache's S3 endpoint"),
    "ceph.rgw.dns_name": (DEPLOYED, "RGW's rgw_dns_name and LMCache's virtual-hosted S3 endpoint"),
    "ceph.rgw.bucket": (DEPLOYED, "the bucket LMCache writes to"),
    "ceph.rgw.region": (DEPLOYED, "LMCache's s3_region"),
    "ceph.rgw.address": (DEPLOYED, "where GPU nodes reach RGW (/etc/hosts)"),
    "ceph.rgw.user": (DEPLOYED, "the RGW user whose keys LMCache uses"),
    "ceph.cephfs_mount": (SIMULATION_ONLY, "used only with ceph.access: cephfs, which kvplan does not deploy"),
    "ceph.options": (DEPLOYED, "`ceph config set`, and a rolling OSD restart for the options read at start-up"),
    "ceph.allow_no_auth": (NOT_DEPLOYED, "a switch: validate refuses ceph.options that turn cephx off unless it is "
                                         "set; the options themselves are deployed"),

    "workload": (NOT_DEPLOYED, "the traffic (its kind, arrivals, load stages and closed-loop users), which kvplan "
                               "bench sends to the stack, and whether a simulation starts with its tiers warm "
                               "(warm_start: the deployed stack warms with its own traffic); no setting of the stack"),
    "slo": (NOT_DEPLOYED, "the targets a plan is judged by; nothing in the stack enforces them"),
    "cost": (NOT_DEPLOYED, "prices"),

    "monitoring.min_lmcache_hit_ratio": (DEPLOYED, "the KVPlanLMCacheHitRatioLow alert's threshold"),
    "monitoring.max_block_utilization": (DEPLOYED, "the KVPlanKVBlockUtilizationHigh alert's threshold"),
    "monitoring.max_ceph_op_latency": (DEPLOYED, "the KVPlanCephOpLatencyHigh alert's threshold"),
    "monitoring.metrics_address": (DEPLOYED, "where Prometheus and the LMCache server's HTTP API listen"),
    "monitoring.prometheus_port": (DEPLOYED, "Prometheus's port"),
    "monitoring.scrape_interval": (DEPLOYED, "Prometheus's scrape_interval"),
}

STACK_FACTS: dict[str, tuple[Kind, str]] = {
    "lmcache.eviction_watermark": (DEPLOYED, "LMCache --eviction-trigger-watermark and each L2 adapter's "
                                             "eviction.trigger_watermark (MP mode)"),
    "lmcache.eviction_ratio": (DEPLOYED, "LMCache --eviction-ratio and each L2 adapter's eviction.eviction_ratio "
                                         "(MP mode)"),
    "router_thresholds.cache_threshold": (DEPLOYED, "vllm-router --cache-threshold (serving.router: prefix_aware)"),
    "router_thresholds.balance_abs": (DEPLOYED, "vllm-router --balance-abs-threshold (serving.router: prefix_aware)"),
    "router_thresholds.balance_rel": (DEPLOYED, "vllm-router --balance-rel-threshold (serving.router: prefix_aware)"),
    "llm_d.gpu_index_blocks": (DEPLOYED, "lruCapacityPerServer of llm-d's GPU approx-prefix-cache-producer"),
    "llm_d.cpu_index_blocks": (DEPLOYED, "lruCapacityPerServer of llm-d's CPU approx-prefix-cache-producer"),
    "llm_d.max_prefix_blocks": (DEPLOYED, "maxPrefixBlocksToMatch of llm-d's approx-prefix-cache-producers"),
    "llm_d.cpu_tier_weight": (NOT_DEPLOYED, "the precise prefix scorer's CPU tier weight (llm-d-kv-cache's default); "
                                            "prefix_match: precise is refused at render, so nothing carries it yet"),
    "lmcache.http_port": (DEPLOYED, "the LMCache server's --http-port (lmcache.port + 1): the lmcache role's health "
                                    "check and Prometheus's LMCache targets, where kvplan observe reads it too"),
    "lmcache.http_address": (DEPLOYED, "where the lmcache role asks the server on its node for its /status"),
}


def entry(path: str) -> tuple[str, Kind, str] | None:
    """The ledger entry that covers the field at `path` (itself or the subtree it lies in): (entry path, kind, why)."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in LEDGER:
            kind, why = LEDGER[key]
            return key, kind, why
    return None


def simulation_only(path: str) -> str:
    """Why the field at `path` cannot be deployed (its SIMULATION_ONLY entry's reason)."""
    found = entry(path)
    assert found is not None and found[1] == SIMULATION_ONLY, (path, found)
    return found[2]
