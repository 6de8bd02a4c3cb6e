"""llm-d's scheduler configuration: the EndpointPickerConfig that routes as kvplan simulated (serving.router: llm_d).

llm-d routes through a Kubernetes gateway: an InferencePool names the vLLM pods, and its endpoint picker (EPP)
reads a plugins file, an EndpointPickerConfig (apiVersion llm-d.ai/v1alpha1: llm-d/llm-d-inference-scheduler
apix/config/v1alpha1, commit 520af47896e5f06e43d09aca281a1149187b0ffd). The file lists plugins by type (each
named, with its parameters) and a scheduling profile that refers to the scorers by name with their weights;
llm-d's guides hand it to the InferencePool chart as `pluginsCustomConfig` (llm-d/llm-d guides/
tiered-prefix-cache/cpu/router/tiered-prefix-cache-cpu.values.yaml, commit c2405cdf). kvplan writes it with
every setting the simulator used, explicit rather than left to defaults it happens to share:

- queue-scorer, kv-cache-utilization-scorer, no-hit-lru-scorer: the weights of serving.llm_d;
- the approximate GPU prefix scorer: an approx-prefix-cache-producer told the block size, the index's size per
  instance (its HBM blocks, `Resolved.llm_d.gpu_index_blocks`) and the prompt blocks it hashes (256), read by a
  prefix-cache-scorer; the CPU one, as the guide has it, a second producer sized to the CPU tier
  (`cpu_index_blocks`) and its own prefix-cache-scorer;
- a single profile and the max-score-picker, which llm-d would add itself, written out.

Each prefix scorer names its producer (prefixMatchInfoProducerName), as the tiered guide does and later
versions of the scorer (scorer/prefix/plugin.go, llm-d/llm-d-router) read it; the 520af47 snapshot's scorer
takes no parameters and reads the one producer's matches, so there only the GPU scorer is meant.

Refused, with the reason: prefix_match precise (it needs vLLM to publish KV events to the scheduler and a
tokenizer beside it, which kvplan does not deploy yet). The Ansible path runs vllm-router, which has no weighted
scorers, so its render refuses serving.router: llm_d (kvplan.deploy.render).
"""

from __future__ import annotations

from typing import Any

from ..errors import Problem
from ..resolve import Resolved

API_VERSION = "llm-d.ai/v1alpha1"
GPU_PRODUCER, CPU_PRODUCER = "gpu-prefix-cache-producer", "cpu-prefix-cache-producer"


def refusals(r: Resolved) -> list[Problem]:
    """What of serving.llm_d the rendered configuration cannot carry, each with why."""
    if r.llm_d is None or r.llm_d.prefix_match != "precise":
        return []
    return [Problem("serving.llm_d.prefix_match", "the precise prefix scorer reads vLLM's KV events through a "
                    "tokenizer beside the scheduler; kvplan deploys neither vLLM's KV-events publisher nor that "
                    "tokenizer yet", "precise", fix="use prefix_match: approximate to deploy, or simulate only")]


def _producer(name: str, block_size: int, blocks: int, max_blocks: int) -> dict[str, Any]:
    return {"type": "approx-prefix-cache-producer", "name": name,
            "parameters": {"autoTune": False, "blockSizeTokens": block_size, "lruCapacityPerServer": blocks,
                           "maxPrefixBlocksToMatch": max_blocks}}


def endpoint_picker_config(r: Resolved) -> dict[str, Any]:
    """The EndpointPickerConfig of `Resolved.llm_d` (approximate prefix matching; see `refusals`)."""
    c = r.llm_d
    assert c is not None and c.prefix_match == "approximate", "render only serving.router: llm_d, approximate"
    plugins: list[dict[str, Any]] = []
    weighted: list[dict[str, Any]] = []

    def scorer(kind: str, name: str, weight: float, parameters: dict | None = None) -> None:
        if weight:
            plugins.append({"type": kind, "name": name, **({"parameters": parameters} if parameters else {})})
            weighted.append({"pluginRef": name, "weight": float(weight)})

    scorer("queue-scorer", "queue-scorer", c.queue)
    scorer("kv-cache-utilization-scorer", "kv-cache-utilization-scorer", c.kv_cache_utilization)
    if c.prefix or c.no_hit_lru:                       # the no-hit scorer reads the GPU producer's matches
        plugins.append(_producer(GPU_PRODUCER, r.block_size, c.gpu_index_blocks, c.max_prefix_blocks))
    scorer("prefix-cache-scorer", "gpu-prefix-cache-scorer", c.prefix, {"prefixMatchInfoProducerName": GPU_PRODUCER})
    if c.cpu_prefix:
        plugins.append(_producer(CPU_PRODUCER, r.block_size, c.cpu_index_blocks, c.max_prefix_blocks))
    scorer("prefix-cache-scorer", "cpu-prefix-cache-scorer", c.cpu_prefix, {"prefixMatchInfoProducerName": CPU_PRODUCER})
    scorer("no-hit-lru-scorer", "no-hit-lru-scorer", c.no_hit_lru, {"prefixMatchInfoProducerName": GPU_PRODUCER})
    plugins += [{"type": "single-profile-handler", "name": "single-profile-handler"},
                {"type": "max-score-picker", "name": "max-score-picker", "parameters": {"maxNumOfEndpoints": 1}}]
    weighted.append({"pluginRef": "max-score-picker"})
    return {"apiVersion": API_VERSION, "kind": "EndpointPickerConfig", "plugins": plugins,
            "schedulingProfiles": [{"name": "default", "plugins": weighted}]}
