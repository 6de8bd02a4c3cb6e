"""The serving processes as the render writes them: where each vLLM instance runs, `vllm serve`'s arguments and
vllm-router's.

Each argument comes from `Resolved`, the numbers the simulator runs with (kvplan.deploy.stack explains the stack's
facts): the scheduler limits, block and KV dtype, the connector of the spec's offload tier (LMCache's, in process or
MP, or vLLM's native OffloadingConnector), and the router policy with the thresholds the simulator's Router uses.
kvplan.deploy.stack builds an aggregated stack with them, kvplan.deploy.disagg each pool of a disaggregated one, and
kvplan.deploy.helm passes the same arguments to production-stack.
"""

from __future__ import annotations

import json
from typing import Any

from ..resolve import Resolved
from ..router_settings import RouterThresholds
from ..spec.base import SpecModel
from ..spec.grammar import WILDCARDS, host_port

LMCACHE_HOST = "127.0.0.1"
"""Where an MP server takes requests (--host; the connector's lmcache.mp.host): only its node's vLLM instances talk
to it."""

VLLM_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
"""kvplan weights dtype -> vLLM --dtype, for weights served unquantised (exactly the bytes the simulation counts)."""
VLLM_KV_DTYPE = {"float32": "auto"}
"""Resolved KV dtype -> vLLM --kv-cache-dtype, where they differ: vLLM has no float32 choice; auto keeps KV in the
dtype the model runs in, which --dtype float32 makes fp32."""

NATIVE_POLICY = {"LRU": "lru", "ARC": "arc"}
"""serving.kv_offloading.eviction -> the OffloadingConnector's eviction_policy (vLLM 0.32
v1/kv_offload/cpu/policies/factory.py)."""


def kv_transfer_config(r: Resolved) -> dict[str, Any] | None:
    """vLLM --kv-transfer-config: the LMCache connector of the spec's mode, or vLLM's native OffloadingConnector
    (what --kv-offloading-backend native sets up, with the exact bytes, chunk size and policy the simulator used),
    recomputing on load failures."""
    n = r.kv_offloading
    if n is not None:
        extra: dict[str, Any] = {"cpu_bytes_to_use": n.capacity_bytes, "block_size": n.chunk_tokens,
                                 "eviction_policy": NATIVE_POLICY[n.eviction]}
        return {"kv_connector": "OffloadingConnector", "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
                "kv_connector_extra_config": extra}
    if r.lmcache is None:
        return None
    extra = {"lmcache.mp.host": f"tcp://{LMCACHE_HOST}", "lmcache.mp.port": r.lmcache.port}
    if r.lmcache.mode == "inprocess":
        return {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both", "kv_load_failure_policy": "recompute"}
    if r.lmcache.save_decode_cache:
        extra["lmcache.mp.save_decode_cache"] = True
    return {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
            "kv_connector_extra_config": extra}


def vllm_args(r: Resolved) -> list[str]:
    """`vllm serve MODEL` arguments shared by every instance."""
    args = ["--served-model-name", r.model.name, "--tensor-parallel-size", str(r.tensor_parallel),
            "--block-size", str(r.block_size), "--max-model-len", str(r.max_model_len),
            "--max-num-seqs", str(r.max_num_seqs), "--max-num-batched-tokens", str(r.max_num_batched_tokens),
            "--kv-cache-dtype", VLLM_KV_DTYPE.get(r.kv_cache_dtype, r.kv_cache_dtype)]
    if r.quantization is not None:
        args += ["--quantization", r.quantization]
    elif r.weights_dtype in VLLM_DTYPE:
        args += ["--dtype", VLLM_DTYPE[r.weights_dtype]]
    if r.device.kind == "cpu":
        args.append("--enforce-eager")
    elif r.kv_cache_memory_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(r.kv_cache_memory_bytes)]
    else:
        args += ["--gpu-memory-utilization", repr(r.gpu_memory_utilization)]
    args.append("--enable-prefix-caching" if r.prefix_caching else "--no-enable-prefix-caching")
    args.append("--enable-chunked-prefill" if r.chunked_prefill else "--no-enable-chunked-prefill")
    args.append("--async-scheduling" if r.async_scheduling else "--no-async-scheduling")
    transfer = kv_transfer_config(r)
    if transfer:
        args += ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))]
    return args


def router_policy(kind: str, thresholds: RouterThresholds) -> list[str]:
    """vllm-router's flags for a kvplan router policy; prefix_aware with `thresholds` (Resolved.router_thresholds,
    which the simulator's Router uses too)."""
    return {"round_robin": ["--policy", "round_robin"],
            "least_loaded": ["--policy", "cache_aware", "--cache-threshold", "1.0"],
            "session_affinity": ["--policy", "sticky_least_loaded"],
            "prefix_aware": ["--policy", "cache_aware", "--cache-threshold", repr(thresholds.cache_threshold),
                             "--balance-abs-threshold", str(thresholds.balance_abs),
                             "--balance-rel-threshold", repr(thresholds.balance_rel)]}[kind]


class RouterVars(SpecModel):
    """Variables of the router role (it runs on the first gpu host)."""

    router_args: list[str]
    """`vllm-router` arguments: listen address, the vLLM instances, the policy and its thresholds, metrics."""
    router_url: str
    """Where clients reach the router (kvplan bench --router)."""


def placement(r: Resolved, gpu_hosts: list[str], first_index: int = 0) -> dict[str, list[dict[str, Any]]]:
    """Instances fill nodes in order, instances_per_node each, TP consecutive devices per instance: {index, port,
    devices} per instance of each host, the indices counting from `first_index`."""
    out: dict[str, list[dict[str, Any]]] = {h: [] for h in gpu_hosts}
    for n in range(r.instances):
        host = gpu_hosts[n // r.instances_per_node]
        slot = n % r.instances_per_node
        devices = ",".join(str(slot * r.tensor_parallel + k) for k in range(r.tensor_parallel))
        out[host].append({"index": first_index + n, "port": r.api_port + slot, "devices": devices})
    return out


def router_vars(r: Resolved, address: str, routing: list[str]) -> RouterVars:
    """vllm-router's variables: its listen address and port, `routing` (the instances and the policy), its metrics;
    `address` is the router host's, where clients reach it when it listens on every address."""
    args = ["--host", r.api_host, "--port", str(r.router_port), *routing,
            "--prometheus-host", r.monitoring.metrics_address, "--prometheus-port", str(r.router_metrics_port),
            "--worker-startup-check-interval", "1", "--health-check-interval-secs", "5"]
    host = address if r.api_host in WILDCARDS else r.api_host
    return RouterVars(router_args=args, router_url=f"http://{host_port(host, r.router_port, url=True)}")
