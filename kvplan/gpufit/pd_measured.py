"""Disaggregated serving on real GPUs: public measurements of prefill/decode disaggregation, replayed through kvplan.

A measurement here is a published pair of runs on the same workload, one aggregated (every instance prefills and
decodes) and one disaggregated (prefill instances, decode instances, the prompt's KV sent between them), with the
setup the source states and the figures it printed (models/profiles/disaggregation/public.yaml cites each one). Each
arm becomes one kvplan spec with the published configuration and nothing fitted to these rows: the catalog's GPU,
model and NIC, the source's instances, TP, lengths and load; kvplan's simulation of it is the prediction, and the
verdict (does disaggregation beat aggregation on a metric) is read from the measured pair and from the predicted
pair side by side.

What a source does not state is assumed, and said in ASSUMPTIONS (the page prints them). A published arm that kvplan
cannot express is kept and shown with the reason (NOT_EXPRESSIBLE), not dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..resolve import resolve
from ..spec import from_mapping

ARMS = ("aggregated", "disaggregated")
"""The two arms kvplan predicts for every scenario."""
METRICS = ("ttft_mean", "ttft_p50", "ttft_p99", "tpot_mean", "tpot_p50", "tpot_p99", "output_tps_per_gpu")
"""Milliseconds for the latencies, output tokens per second per GPU for throughput; a source prints some of them."""
HIGHER_IS_BETTER = frozenset({"output_tps_per_gpu"})
SEED = 1
"""The workload's seed in every spec (the sources' prompts are not published; kvplan draws its own)."""

NOT_EXPRESSIBLE = {
    "aggregated_unchunked": "vLLM 0.6's V0 scheduler without chunked prefill (a prompt's prefill runs as a step of "
                            "its own and decode steps wait for it); kvplan simulates vLLM V1, which always chunks, "
                            "so this published arm has no kvplan spec. The chunked-prefill arm of the same page is "
                            "the aggregated arm compared.",
}
"""Published arms kvplan cannot express, with the reason."""

ASSUMPTIONS = {
    "mooncake-vllm-a10": [
        "GPU: the catalog's A10G, whose figures are the A10's (125 dense BF16 TFLOPS, 600 GB/s; models/hardware/"
        "gpus.yaml) and whose efficiencies are A100's, carried over and not fitted: the catalog has no A10.",
        "Weights: GPTQ int4 (`weights_dtype: int4`, `quantization: gptq`), the KV cache in BF16.",
        "Aggregated: one instance of TP 1 (the page does not say how many; its disaggregated arm is one prefill and "
        "one decode instance). Its `--enable-chunked-prefill` ran with vLLM 0.6's default max_num_batched_tokens "
        "of 512 under chunked prefill (vLLM's docs/source/models/performance.rst of the time), set here.",
        "Disaggregated: vLLM 0.6 without chunked prefill schedules max(max_model_len, 2048) = 10,000 tokens a "
        "step, set on both pools; kvplan's nixl connector stands for PR 8498's transfer over Mooncake (the decode "
        "side receives the prompt's KV and computes its last token, as kvplan's nixl path does).",
        "Network: not stated (one RDMA NIC, the demo config's erdma_0); the catalog's 25GbE is assumed. A "
        "1,012-token prompt of this model is 58 MB of KV, 19 ms at 25 Gbit/s (kvplan's transfer time of each "
        "scenario is printed below).",
        "Prompts: the runs' mean input (total input tokens / 200) at a fixed length; kvplan's own prompt contents "
        "(the sonnet dataset's 50-token shared prefix is not reproduced: the launch commands leave vLLM 0.6's "
        "prefix caching off, its default).",
    ],
    "dynamo-vllm-llama70b-h100": [
        "GPU: H100-SXM (the page says H100 nodes of 8, not the form factor); weights FP8 (`weights_dtype: fp8`), "
        "the KV cache in BF16 (the launch scripts' kv-cache dtype is not read here).",
        "Network between the nodes: not stated; the catalog's 400GbE per GPU (an 8 x H100 server's usual "
        "rail) is assumed. kvplan's nixl connector stands for triton_distributed's own KV transfer.",
        "Scheduler limits: kvplan's defaults (vLLM V1's per-GPU defaults); the patched vLLM's are not stated.",
        "Load: the stated concurrency, closed loop, 10 x concurrency requests (the warm-up requests are not "
        "simulated). The arms differ in GPUs (16 against 4) and concurrency (48 against 4), as published: the "
        "source compares them per GPU at a latency target of about 50 tokens per second per user.",
    ],
}


@dataclass(frozen=True)
class Key:
    source: str
    scenario: str
    arm: str


def data() -> dict[str, Any]:
    import yaml

    from ..resources import data_root

    return yaml.safe_load((data_root() / "models" / "profiles" / "disaggregation" / "public.yaml").read_text())


def sources(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["id"]: s for s in d["sources"]}


def measured(d: dict[str, Any]) -> dict[Key, dict[str, float]]:
    """Every published arm's figures, by source, scenario and arm (only the metrics the source printed)."""
    out: dict[Key, dict[str, float]] = {}
    for s in d["sources"]:
        for row in s["results"]:
            out[Key(s["id"], row["scenario"], row["arm"])] = {m: float(row[m]) for m in METRICS if m in row}
    return out


def _scenario(src: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in src["scenarios"] if s["name"] == name)


def _workload(prompt: int, output: int, arrivals: dict[str, Any], requests: int) -> dict[str, Any]:
    return {"kind": "chat", "seed": SEED, "requests": requests, "arrivals": arrivals,
            "prompt": {"dist": "fixed", "mean": prompt}, "output": {"dist": "fixed", "mean": output}}


def _mooncake(src: dict[str, Any], scenario: str, arm: str) -> dict[str, Any]:
    setup, sc = src["setup"], _scenario(src, scenario)
    serving: dict[str, Any] = {"gpu": "A10G", "gpus_per_node": 1, "weights_dtype": "int4", "quantization": "gptq",
                               "max_model_len": setup["max_model_len"],
                               "gpu_memory_utilization": setup["gpu_memory_utilization"]}
    body: dict[str, Any] = {"name": f"pd-{src['id']}-{scenario}-{arm}", "model": "Qwen2.5-7B", "serving": serving,
                            "workload": _workload(sc["prompt"], sc["output"],
                                                  {"process": "poisson", "rate": f"{sc['rate']}/s"}, sc["requests"])}
    tp = setup["tensor_parallel"]
    if arm == "aggregated":
        serving.update(instances=1, tensor_parallel=tp, max_num_batched_tokens=512)
    else:
        whole = max(setup["max_model_len"], 2048)
        body["simulate_only"] = True
        serving["disaggregation"] = {
            "prefill": {"instances": setup["prefill_instances"], "tensor_parallel": tp,
                        "max_num_batched_tokens": whole},
            "decode": {"instances": setup["decode_instances"], "tensor_parallel": tp, "max_num_batched_tokens": whole},
            "connector": "nixl", "network": "25GbE"}
    return body


def _dynamo(src: dict[str, Any], scenario: str, arm: str) -> dict[str, Any]:
    setup, sc = src["setup"], _scenario(src, scenario)
    row = next(r for r in src["results"] if r["scenario"] == scenario and r["arm"] == arm)
    serving: dict[str, Any] = {"gpu": "H100-SXM", "gpus_per_node": setup["gpus_per_node"], "weights_dtype": "fp8"}
    body: dict[str, Any] = {"name": f"pd-{src['id']}-{scenario}-{arm}", "model": "Llama-3.1-70B", "serving": serving,
                            "workload": _workload(sc["prompt"], sc["output"], {"concurrency": row["concurrency"]},
                                                  10 * row["concurrency"])}
    if arm == "aggregated":
        agg = setup["aggregated"]
        serving.update(instances=agg["instances"], tensor_parallel=agg["tp"])
    else:
        dis = setup["disaggregated"]
        body["simulate_only"] = True
        serving["disaggregation"] = {
            "prefill": {"instances": dis["prefill_instances"], "tensor_parallel": dis["prefill_tp"]},
            "decode": {"instances": dis["decode_instances"], "tensor_parallel": dis["decode_tp"]},
            "connector": "nixl", "network": "400GbE"}
    return body


SPECS: dict[str, Callable[[dict[str, Any], str, str], dict[str, Any]]] = {
    "mooncake-vllm-a10": _mooncake, "dynamo-vllm-llama70b-h100": _dynamo}
"""The spec builder of each source (its setup as published, ASSUMPTIONS for the rest)."""


def spec(d: dict[str, Any], key: Key) -> dict[str, Any]:
    """The kvplan spec of one published arm; ValueError for an arm in NOT_EXPRESSIBLE."""
    if key.arm in NOT_EXPRESSIBLE:
        raise ValueError(f"{key.arm}: {NOT_EXPRESSIBLE[key.arm]}")
    return SPECS[key.source](sources(d)[key.source], key.scenario, key.arm)


@dataclass(frozen=True)
class Prediction:
    figures: dict[str, float]
    """METRICS as kvplan predicts them (milliseconds, output tokens per second per GPU)."""
    gpus: int
    transfer_p50_ms: float | None
    """The disaggregated arm's KV transfer, median over requests (None aggregated)."""


def predict(body: dict[str, Any]) -> Prediction:
    from ..sim.run import run as simulate

    r = resolve(from_mapping(body))
    res = simulate(r)
    d = body["serving"].get("disaggregation")
    if d is None:
        gpus = body["serving"]["instances"] * body["serving"]["tensor_parallel"]
    else:
        gpus = sum(d[p]["instances"] * d[p]["tensor_parallel"] for p in ("prefill", "decode"))
    figures = {f"{name}_{stat}": getattr(getattr(res, name), stat) * 1e3
               for name in ("ttft", "tpot") for stat in ("mean", "p50", "p99")}
    figures["output_tps_per_gpu"] = res.generated_tokens_per_s / gpus
    transfer = res.disaggregation.transfer.p50 * 1e3 if res.disaggregation is not None else None
    return Prediction(figures, gpus, transfer)


def error(predicted: float, measured_value: float) -> float:
    return predicted / measured_value - 1.0


def pd_better(metric: str, aggregated: float, disaggregated: float) -> bool:
    """Whether the disaggregated arm's figure beats the aggregated one's on this metric."""
    return disaggregated > aggregated if metric in HIGHER_IS_BETTER else disaggregated < aggregated


__all__ = ["ARMS", "ASSUMPTIONS", "HIGHER_IS_BETTER", "Key", "METRICS", "NOT_EXPRESSIBLE", "Prediction", "data",
           "error", "measured", "pd_better", "predict", "sources", "spec"]
