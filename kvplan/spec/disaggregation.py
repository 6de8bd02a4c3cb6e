"""Prefill/decode disaggregation: prefill instances and decode instances, the KV sent from one to the other.

Aggregated serving (the default, no `serving.disaggregation`) runs every request's prefill and decode on one vLLM
instance. Disaggregated, a proxy sends each request first to a prefill instance (with max_tokens=1), then to a decode
instance, which receives the prompt's KV over the network instead of computing it (vLLM's
examples/online_serving/disaggregated_serving/ and tests/v1/kv_connector/nixl_integration/toy_proxy_server.py; the
simulator's model and its sources are in kvplan/sim/disagg.py, docs/disaggregation.md).

The section says the two pools (GPU, tensor-parallel size, count, scheduler limits each), the connector that moves
the KV (vLLM's NixlConnector, or LMCache's PD mode over NIXL), the network it crosses (a NIC class of the catalog)
and the proxy. kvplan simulates it, and `kvplan render` deploys connector: nixl (kvplan.deploy.disagg: each pool's
vLLM instances with NixlConnector, vllm-router's PD mode in front). connector: lmcache and its buffer_size, and
LMCache tiers beside the pools, are simulation-only (they need `simulate_only: true`; UNDEPLOYED says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Literal

from pydantic import Field

from ..errors import Problem
from ..units import Bandwidth, Size
from .base import MAX_INT32, SpecModel
from .deployment import simulation_only

if TYPE_CHECKING:
    from .topology import Topology

Connector = Literal["nixl", "lmcache"]
Proxy = Literal["round_robin"]

POOL_FIELDS = ("instances", "tensor_parallel", "max_num_seqs", "max_num_batched_tokens")
"""serving's fields that each pool sets for itself under serving.disaggregation."""


class InstancePool(SpecModel):
    """One pool of vLLM instances: all prefill or all decode."""

    instances: int = Field(1, ge=1, le=4096)
    """vLLM instances in the pool."""

    tensor_parallel: int = Field(1, ge=1, le=64)
    """vLLM --tensor-parallel-size of each of them."""

    gpu: str | None = None
    """Accelerator of the pool, by catalog name; default: serving.gpu."""

    max_num_seqs: int | None = Field(None, ge=1, le=MAX_INT32)
    """vLLM --max-num-seqs of the pool's instances; default: vLLM's per-GPU default."""

    max_num_batched_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    """vLLM --max-num-batched-tokens of the pool's instances; default: vLLM's per-GPU default."""


class Disaggregation(SpecModel):
    """Prefill and decode pools, the KV transfer between them and the proxy in front (docs/disaggregation.md)."""

    prefill: InstancePool
    """The instances that compute prompts (their prefix cache and LMCache tiers as in aggregated serving)."""

    decode: InstancePool
    """The instances that receive a prompt's KV and generate its output tokens."""

    connector: Connector = "nixl"
    """How the KV moves: nixl (vLLM's NixlConnector: the decode instance reads the prompt's blocks from the prefill
    instance's GPU once it has given the request its blocks) or lmcache (LMCache's PD mode: the prefill instance
    sends the KV over NIXL into the decode instance's receive buffer as it finishes, and the decode instance loads
    it from there)."""

    network: str = "100GbE"
    """NIC class of the network the KV crosses, by catalog name (`kvplan catalog`): one port per GPU, as on a GPU
    server with a NIC per accelerator."""

    network_bandwidth: Bandwidth | None = None
    """Bandwidth of each GPU's port when it differs from the NIC class's, e.g. 200Gbit."""

    buffer_size: Size | None = None
    """connector: lmcache: bytes of each decode instance's PD receive buffer (LMCache's pd_buffer_size; its proxy's
    --pd-buffer-size, which holds back a request until its prompt's chunks fit in it). Default: the proxy's, 2GiB."""

    proxy: Proxy = "round_robin"
    """How the proxy picks the prefill and the decode instance of a request: round_robin over each pool, as vLLM's
    toy proxy (toy_proxy_server.py) and LMCache's disagg proxy do."""

    @property
    def gpus(self) -> int:
        return self.prefill.instances * self.prefill.tensor_parallel + self.decode.instances * self.decode.tensor_parallel


LMCACHE_NOT_DEPLOYED = (
    "LMCache's PD mode needs its own proxy, which puts a disagg_spec (the decode instance's "
    "receiver host, init and alloc ports) into each prefill request's kv_transfer_params "
    "(lmcache/integration/vllm/vllm_v1_adapter.py, LMCache 0.5.6); vllm-router 0.1.17, the proxy kvplan deploys, "
    "speaks only NIXL's, Mooncake's and MoRI-IO's protocols (--kv-connector nixl|mooncake|moriio), and LMCache's "
    "proxy is an example script of its repository (examples/disagg_prefill/disagg_proxy_server.py), not a program "
    "its package installs")
"""Why connector: lmcache is not deployed (validate's and render's refusal)."""
MULTICONNECTOR_NOT_DEPLOYED = (
    "with serving.disaggregation the prefill pool's LMCache tiers need vLLM's MultiConnector (NixlConnector and "
    "LMCache's connector in one --kv-transfer-config), which kvplan's render does not write yet; deploying without "
    "them would not be what kvplan simulates")
"""Why an lmcache section beside the pools is not deployed."""


UNDEPLOYED = {
    "lmcache": (MULTICONNECTOR_NOT_DEPLOYED, "remove the lmcache section to deploy the disaggregated pools, or set "
                "simulate_only: true to study the prefill pool's tiers in simulation only (kvplan render then refuses "
                "the spec)"),
    "serving.disaggregation.connector": (LMCACHE_NOT_DEPLOYED, "use connector: nixl (vLLM's NixlConnector, which "
                                         "kvplan deploys), or set simulate_only: true to study LMCache's PD mode in "
                                         "simulation only (kvplan render then refuses the spec)"),
    "serving.disaggregation.buffer_size": (simulation_only("serving.disaggregation.buffer_size"), "remove buffer_size, "
                                           "or set simulate_only: true to study it in simulation only (kvplan render "
                                           "then refuses the spec)"),
}
"""What of a disaggregated spec kvplan simulates but does not deploy: each path, why, and the fix."""


def undeployed(connector: str, buffer_size: object, lmcache: bool) -> list[str]:
    """The paths of UNDEPLOYED that a disaggregated spec with this connector, buffer_size (None: unset) and an lmcache
    section or not sets: empty when its render deploys it (the planner asks this of each candidate it builds)."""
    return [path for path, sets in (("lmcache", lmcache), ("serving.disaggregation.connector", connector == "lmcache"),
                                    ("serving.disaggregation.buffer_size", buffer_size is not None)) if sets]


def problems(topo: "Topology") -> Iterator[Problem]:
    """What a disaggregated spec sets that cannot combine with it (each with the reason and a fix)."""
    s = topo.serving
    d = s.disaggregation
    if d is None:
        return
    for path in [] if topo.simulate_only else undeployed(d.connector, d.buffer_size, topo.lmcache is not None):
        value = {"lmcache": "set", "serving.disaggregation.connector": d.connector,
                 "serving.disaggregation.buffer_size": d.buffer_size}[path]
        why, fix = UNDEPLOYED[path]
        yield Problem(path, why, value, fix=fix)
    # a field at its default says nothing a pool could ignore (a spec dumped whole and read back sets every field)
    set_fields = {name for name in s.model_fields_set if getattr(s, name) != type(s).model_fields[name].default}
    for name in POOL_FIELDS:
        if name in set_fields:
            yield Problem(f"serving.{name}", "with serving.disaggregation each pool says its own; this setting would "
                          "be ignored", getattr(s, name), "unset",
                          f"move it to serving.disaggregation.prefill.{name} and .decode.{name}")
    if s.router == "llm_d" or s.llm_d is not None:
        yield Problem("serving.router", "llm-d's disaggregated path (its routing sidecar and P/D scorers) is not "
                      "modelled; with serving.disaggregation the proxy sends every request (disaggregation.proxy)",
                      s.router, "unset", "remove serving.router and serving.llm_d")
    elif "router" in set_fields:
        yield Problem("serving.router", "with serving.disaggregation the proxy picks the instances "
                      "(disaggregation.proxy); serving.router would be ignored", s.router, "unset",
                      "remove serving.router")
    if s.kv_offloading is not None:
        yield Problem("serving.kv_offloading", "vLLM's native offloading beside a P/D connector needs vLLM's "
                      "MultiConnector, which kvplan does not model yet", "set",
                      fix="remove serving.kv_offloading (an lmcache section gives the prefill pool its tiers)")
    for role, pool in (("prefill", d.prefill), ("decode", d.decode)):
        if s.gpus_per_node % pool.tensor_parallel:
            divisors = [n for n in range(1, s.gpus_per_node + 1) if s.gpus_per_node % n == 0]
            yield Problem(f"serving.disaggregation.{role}.tensor_parallel", f"must divide serving.gpus_per_node "
                          f"({s.gpus_per_node}): a tensor-parallel group lives on one node", pool.tensor_parallel,
                          ", ".join(map(str, divisors)), "pick one of the allowed sizes or change gpus_per_node")
    p, dec = d.prefill.tensor_parallel, d.decode.tensor_parallel
    if dec % p:
        yield Problem("serving.disaggregation.decode.tensor_parallel", f"must be a multiple of the prefill pool's "
                      f"({p}): each decode rank reads its heads from one prefill rank (vLLM's NixlConnector: "
                      "tp_ratio = decode TP // prefill TP)", dec, f"{p}, {2 * p}, {4 * p}, ...",
                      f"use decode.tensor_parallel: {p * max(1, dec // p)} or a prefill TP that divides {dec}")
    if d.buffer_size is not None and d.connector != "lmcache":
        yield Problem("serving.disaggregation.buffer_size", "sizes LMCache's PD receive buffer, which only connector: "
                      "lmcache has (vLLM's NixlConnector reads into the decode instance's KV blocks)", d.buffer_size,
                      fix="remove buffer_size, or set connector: lmcache")
    if d.connector == "lmcache" and topo.lmcache is not None and topo.lmcache.mode == "mp":
        yield Problem("serving.disaggregation.connector", "LMCache's PD mode runs inside vLLM (LMCacheConnectorV1, "
                      "enable_pd); the lmcache section's mode is mp (a separate LMCache server)", d.connector,
                      "nixl, or lmcache with lmcache.mode: inprocess", "set lmcache.mode: inprocess, or connector: nixl")
