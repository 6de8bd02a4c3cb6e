"""Offload on real GPUs: llm-d's published CPU-offload benchmark, replayed through kvplan.

The benchmark (models/profiles/offload/llmd-cpu/benchmark.yaml cites it) ran 8 vLLM engines of Qwen3-32B at TP 2
on 16 H100s behind llm-d's scheduler, with inference-perf's shared_prefix traffic at a constant concurrency of 45:
45 groups of 10 prompts, a 30,000-token system prompt per group (its KV outgrows the engines' HBM) or an
8,000-token one (it fits), 256-token questions, 1,024-token answers. Each workload ran on HBM alone and with vLLM's
native CPU offloading (41,000 CPU blocks per engine).

Each row becomes one spec with the published configuration and nothing fitted to the rows: the GPU, engines,
TP and gpu_memory_utilization as published (the KV pool as resolve computes it from them), the `llm_d` router with
its guide's default weights, the native CPU tier as `serving.kv_offloading` of the published blocks' bytes. Beside
it, the same bytes as an in-process LMCache ddr tier, so the two offload engines are compared on one workload.

What the guide does not state is assumed and said: the number of requests (REQUESTS: every prompt twice; the
page shows how the figures move with it), vLLM's max_num_seqs and max_num_batched_tokens (kvplan's defaults, as
vLLM's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..resolve import Resolved, resolve
from ..spec import from_mapping

REQUESTS = 900
"""Requests per run: the guide does not say; every one of the 450 prompts sent twice."""
ARMS = ("hbm_only", "cpu_offload", "lmcache")
"""HBM alone; vLLM's native CPU offloading (the published arm); the same bytes as LMCache's in-process ddr tier."""
METRICS = ("ttft_mean", "ttft_p90", "e2e_mean", "e2e_p90", "throughput")


@dataclass(frozen=True)
class Figures:
    """A run's figures: seconds, and tokens per second (prompt and output together) for throughput."""

    ttft_mean: float
    ttft_p90: float
    e2e_mean: float
    e2e_p90: float
    throughput: float

    def get(self, metric: str) -> float:
        return float(getattr(self, metric))


def benchmark() -> dict[str, Any]:
    import yaml

    from ..resources import data_root

    return yaml.safe_load((data_root() / "models" / "profiles" / "offload" / "llmd-cpu" / "benchmark.yaml").read_text())


def measured(bench: dict[str, Any]) -> dict[tuple[str, str], Figures]:
    return {(row["workload"], row["arm"]): Figures(*(float(row[m]) for m in METRICS)) for row in bench["results"]}


def spec(bench: dict[str, Any], workload: str, arm: str, requests: int = REQUESTS) -> dict[str, Any]:
    """The spec of one row (see the module docstring)."""
    setup, shape = bench["setup"], bench["workloads"][workload]
    serving: dict[str, Any] = {
        "gpu": setup["gpu"], "gpus_per_node": setup["gpus_per_node"], "tensor_parallel": setup["tensor_parallel"],
        "instances": setup["engines"], "gpu_memory_utilization": setup["gpu_memory_utilization"],
        "block_size": setup["block_size"], "router": "llm_d"}
    body: dict[str, Any] = {
        "name": f"llmd-cpu-{workload}-{arm}".replace("_", "-"), "model": "Qwen3-32B", "serving": serving,
        "workload": {"kind": "shared_prefix", "requests": requests,
                     "arrivals": {"concurrency": bench["load"]["concurrency"]}, "shared_prefix": dict(shape)}}
    if arm == "hbm_only":
        return body
    hbm_only = resolve(from_mapping(body))
    cpu_bytes = setup["cpu_blocks"] * hbm_only.block_bytes
    if arm == "cpu_offload":
        serving["kv_offloading"] = {"size": f"{cpu_bytes}B"}
    else:
        body["lmcache"] = {"mode": "inprocess", "ddr": {"size": f"{cpu_bytes * hbm_only.instances_per_node}B"}}
    return body


def block_bytes(body: dict[str, Any]) -> int:
    """Bytes of one KV block of one engine, all its TP ranks together."""
    return resolve(from_mapping(body)).block_bytes


def predict(body: dict[str, Any]) -> tuple[Figures, Resolved]:
    from ..sim.run import run as simulate

    r = resolve(from_mapping(body))
    res = simulate(r)
    tokens_per_s = res.prompt_tokens_per_s + res.generated_tokens_per_s
    return Figures(res.ttft.mean, res.ttft.p90, res.e2e.mean, res.e2e.p90, tokens_per_s), r


def error(predicted: float, measured_value: float) -> float:
    return predicted / measured_value - 1.0


__all__ = ["ARMS", "Figures", "METRICS", "REQUESTS", "benchmark", "block_bytes", "error", "measured", "predict", "spec"]
