"""The disaggregated stack: a prefill pool and a decode pool of vLLM instances, NIXL between them, vllm-router in front.

A spec with serving.disaggregation (connector: nixl) is deployed as the simulator runs it (kvplan/sim/disagg.py):

- **Placement.** Each pool is placed as an aggregated deployment of its own (kvplan.deploy.stack's rule: instances fill
  nodes in order, instances_per_node each, TP consecutive devices per instance), the prefill pool on the first gpu
  hosts of the inventory and the decode pool on the hosts after them, so that no host runs both pools (Resolved's
  nodes counts both pools' nodes). Instance numbers (the service names vllm-<index>) count on across both pools.
- **vLLM.** Each pool's instances get the pool's own `vllm serve` arguments (its TP, max_num_seqs and
  max_num_batched_tokens; vllm_command.vllm_args of the pool's Resolved) through their hosts' host_vars, which Ansible puts
  above group_vars/all, plus `--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":...,
  "kv_buffer_device":...}` (vLLM 0.32 vllm/config/kv_transfer.py KVTransferConfig; NixlConnector supports
  kv_buffer_device cuda on a CUDA GPU and cpu on a CPU host, _NIXL_SUPPORTED_DEVICE in
  vllm/distributed/kv_transfer/kv_connector/v1/nixl/utils.py). The prefill pool is kv_producer and the decode pool
  kv_consumer: vLLM 0.32 deprecates kv_both with NixlConnector ("Please set kv_role='kv_producer' for prefill
  instances and kv_role='kv_consumer' for decode instances", nixl/connector.py NixlBaseConnector.__init__).
- **The side channel.** The decode instance reads a prompt's blocks from the prefill instance after a handshake on
  the prefill engine's side channel, at the remote_host and remote_port the prefill instance returns in its
  response's kv_transfer_params: VLLM_NIXL_SIDE_CHANNEL_HOST (default localhost, vllm/envs.py) and
  VLLM_NIXL_SIDE_CHANNEL_PORT (default 5600) plus the engine's data-parallel index
  (nixl/base_scheduler.py `side_channel_port`). Each instance gets its host's inventory address and a port of its
  own (5600 + its slot on the host), so that instances sharing a host do not collide and the other host can reach it.
- **The proxy.** vllm-router 0.1.17, the router kvplan deploys anyway, has vLLM's P/D mode:
  `--vllm-pd-disaggregation --prefill URL ... --decode URL ... --kv-connector nixl`. Its VllmPDRouter
  (vllm-project/router src/routers/http/vllm_pd_router.rs, commit 079da2e3) sends the request to a prefill instance
  with max_tokens=1, stream false and kv_transfer_params {do_remote_decode: true}, then the original request with the
  prefill response's kv_transfer_params to a decode instance: the two legs vLLM's toy_proxy_server.py makes, which
  the simulator models. disaggregation.proxy round_robin is `--policy round_robin` (each pool inherits it).

What is not deployed is refused by the rules (kvplan.spec.disaggregation: connector: lmcache, buffer_size, an lmcache
section beside the pools), which the render refuses as simulation-only.
"""

from __future__ import annotations

import json
from typing import Any

from ..resolve import Resolved
from ..spec.base import SpecModel
from ..spec.grammar import host_port
from . import vllm_command
from .vllm_command import RouterVars, vllm_args

SIDE_CHANNEL_PORT = 5600
"""vLLM's default VLLM_NIXL_SIDE_CHANNEL_PORT (vllm/envs.py); an instance's side channel is this plus its slot."""
ROUTER_POLICY = {"round_robin": "round_robin"}
"""disaggregation.proxy -> vllm-router --policy (prefill and decode inherit it)."""


class PoolHost(SpecModel):
    """The vllm role's variables for one host of a pool (its host_vars, above group_vars/all)."""

    vllm_instances: list[dict[str, Any]]
    """The host's instances: {index, port, devices, env} (env: the NIXL side channel of the instance)."""
    vllm_args: list[str]
    """The pool's `vllm serve` arguments, NixlConnector's --kv-transfer-config among them."""
    vllm_tensor_parallel: int


KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
"""Each pool's NixlConnector kv_role (vLLM 0.32 deprecates kv_both with it)."""


def transfer_config(pool: Resolved, role: str) -> dict[str, Any]:
    """vLLM --kv-transfer-config of an instance of the pool `role` ("prefill" or "decode"): NixlConnector, the pool's
    side of the transfer, its buffer on the pool's device."""
    return {"kv_connector": "NixlConnector", "kv_role": KV_ROLE[role],
            "kv_buffer_device": "cpu" if pool.device.kind == "cpu" else "cuda"}


def pool_args(pool: Resolved, role: str) -> list[str]:
    """`vllm serve` arguments of a pool's instances: the pool's own limits and TP, and NixlConnector."""
    args = vllm_args(pool)
    assert "--kv-transfer-config" not in args, "a pool has no other connector (lmcache and kv_offloading are refused)"
    return args + ["--kv-transfer-config", json.dumps(transfer_config(pool, role), separators=(",", ":"))]


def placement(r: Resolved, gpu_hosts: list[str], address: dict[str, str]) -> dict[str, PoolHost]:
    """Each host's instances: the prefill pool's on the first hosts, the decode pool's on the hosts after them."""
    d = r.disaggregation
    assert d is not None
    out: dict[str, PoolHost] = {}
    first, index = 0, 0
    for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
        args = pool_args(pool, role)
        for host, instances in vllm_command.placement(pool, gpu_hosts[first:first + pool.nodes], index).items():
            for slot, instance in enumerate(instances):
                instance["env"] = {"VLLM_NIXL_SIDE_CHANNEL_HOST": address[host],
                                   "VLLM_NIXL_SIDE_CHANNEL_PORT": str(SIDE_CHANNEL_PORT + slot)}
            out[host] = PoolHost(vllm_instances=instances, vllm_args=args, vllm_tensor_parallel=pool.tensor_parallel)
        first, index = first + pool.nodes, index + pool.instances
    return out


def worker_urls(hosts: dict[str, PoolHost], address: dict[str, str], role: str, r: Resolved) -> list[str]:
    """The URLs of one pool's instances ("prefill" or "decode"), in instance order."""
    d = r.disaggregation
    assert d is not None
    names = list(hosts)
    pool_hosts = names[:d.prefill.nodes] if role == "prefill" else names[d.prefill.nodes:]
    return [f"http://{host_port(address[h], i['port'], url=True)}" for h in pool_hosts for i in hosts[h].vllm_instances]


def router(r: Resolved, hosts: dict[str, PoolHost], address: dict[str, str], router_host: str) -> RouterVars:
    """vllm-router in vLLM's P/D mode: each prefill instance as --prefill, each decode instance as --decode."""
    d = r.disaggregation
    assert d is not None
    pd: list[str] = ["--vllm-pd-disaggregation"]
    for url in worker_urls(hosts, address, "prefill", r):
        pd += ["--prefill", url]
    for url in worker_urls(hosts, address, "decode", r):
        pd += ["--decode", url]
    return vllm_command.router_vars(r, address[router_host],
                                    [*pd, "--kv-connector", d.connector, "--policy", ROUTER_POLICY[d.proxy]])
