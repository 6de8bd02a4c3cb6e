"""Per-layer operator profiles: one transformer layer's matrix multiplies and elementwise kernels,
timed on one GPU by token count and tensor-parallel degree (microsoft/vidur's mlp.csv tables,
kept under models/profiles/vidur/compute/<gpu>/<model>.csv; SOURCE.yaml says where from).

Each row times one layer on one rank: the QKV, output, up and down projections and the norms,
rotary, activation and residual adds around them. kvplan's step-time model predicts the same
thing with `StepTime.linear_layers` for a one-layer model of the profiled dimensions, so a fit
here sets exactly the coefficients the simulator uses:

    layer time = roofline( 2 P_layer N / TP x (1 + small_gemm_params TP / P_layer) / (peak x compute_efficiency),
                           (W_layer / TP + activations x N) / (HBM bandwidth x memory_efficiency) )
                 + layer_overhead,     roofline(c, m) = (c^1.5 + m^1.5)^(1/1.5)

The fit has two stages, each on the steps that one coefficient governs:
- steps of at most 16 tokens are memory-bound: time = bytes / (bandwidth x memory_efficiency)
  + layer_overhead, a straight line in bytes fitted by least absolute deviations;
- steps of 1024 tokens or more are compute-bound: each row gives the compute_efficiency that
  reproduces it once the memory side and layer_overhead are taken out; the fit is their median.
  small_gemm_params (how much slower a layer's small matrices run) is the value of SMALL_GEMM_GRID
  whose median compute_efficiency leaves the smallest 95th-percentile error on those rows.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

from ..catalog import Device
from ..sim.steptime import ROOFLINE_EXPONENT, StepTime
from ..spec.architecture import Architecture
from ..step_coefficients import StepCoefficients

LINEAR = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMENTWISE = ("input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
DECODE_MAX_TOKENS = 16
PREFILL_MIN_TOKENS = 1024
REGIMES = (("decode-size steps (1-16 tokens)", 1, 16), ("mid-size steps (17-1023 tokens)", 17, 1023),
           ("prefill-size steps (1024-8192 tokens)", 1024, 1 << 30))


@dataclass(frozen=True)
class LayerPoint:
    """One measured layer: `model` at `tokens` new tokens on `tp` ranks took `seconds` (median)."""

    gpu: str
    model: str
    tokens: int
    tp: int
    seconds: float


def root() -> Path:
    from ..resources import data_root
    return data_root() / "models" / "profiles" / "vidur"


@lru_cache(maxsize=None)
def source() -> dict:
    return yaml.safe_load((root() / "SOURCE.yaml").read_text())


@lru_cache(maxsize=None)
def layer_model(name: str) -> Architecture:
    """A one-layer model with the profiled model's dimensions (source()['models'][name]); its params are the
    layer's plus the embedding and LM head, which StepTime.linear_layers leaves out again."""
    d = source()["models"][name]
    h, heads, kv, inter, vocab = d["n_embd"], d["n_head"], d["n_kv_head"], d["n_expanded_embd"], d["vocab_size"]
    hd = h // heads
    layer = h * (heads + 2 * kv) * hd + heads * hd * h + h * inter * (3 if d["use_gated_mlp"] else 2)
    return Architecture(name="profiled", attention="gqa" if kv < heads else "mha", num_layers=1, hidden_size=h,
                        num_attention_heads=heads, num_kv_heads=kv, head_dim=hd, intermediate_size=inter,
                        vocab_size=vocab, params=float(layer + 2 * vocab * h), max_context=4096)


def points(gpu: str) -> list[LayerPoint]:
    """Every measured layer of `gpu` ("a100" or "h100"), all models."""
    out = []
    for path in sorted((root() / "compute" / gpu).glob("*.csv")):
        with path.open() as f:
            for row in csv.DictReader(f):
                ms = sum(float(row[f"{op}_ms"]) for op in LINEAR + ELEMENTWISE if row[f"{op}_ms"])
                out.append(LayerPoint(gpu, path.stem, int(row["num_tokens"]), int(row["tensor_parallel"]), ms * 1e-3))
    return out


def smooth_floor(pts: list[LayerPoint]) -> float:
    """The smallest worst-case relative error that any model nondecreasing and at most linear in tokens (as
    the roofline is: doubling the tokens at most doubles the time) can reach on `pts`: for each two
    neighbouring token counts n1 < n2 of one model and TP degree, measured t1 and t2, such a model's
    predictions differ by a factor in [1, n2 / n1], so a jump J = max(t2 / t1 / (n2 / n1), t1 / t2) > 1
    costs it at least (J - 1) / (J + 1) on one of the two. Measured kernel switches (an H100 layer of
    Llama-2-70B takes 0.71 ms at 512 tokens and 1.19 ms at 520) make this floor large."""
    by_shape: dict[tuple[str, int], list[LayerPoint]] = {}
    for p in pts:
        by_shape.setdefault((p.model, p.tp), []).append(p)
    worst = 0.0
    for shape in by_shape.values():
        shape.sort(key=lambda p: p.tokens)
        for a, b in zip(shape, shape[1:]):
            jump = max(b.seconds / a.seconds / (b.tokens / a.tokens), a.seconds / b.seconds)
            worst = max(worst, (jump - 1.0) / (jump + 1.0))
    return worst


def predict(p: LayerPoint, device: Device, step: StepCoefficients) -> float:
    """Seconds the step-time model gives the measured layer."""
    m = layer_model(p.model)
    st = StepTime.of(m, p.tp, step, device.bf16_tflops * 1e12, device.memory_bandwidth, m.params * 2.0 / p.tp, 0.0)
    return st.linear_layers(p.tokens)


GPU_PROFILES = {"A100-80GB": "a100", "H100-SXM": "h100"}
"""Catalog accelerator -> its folder of operator profiles."""


@lru_cache(maxsize=None)
def efficiency_ceiling(gpu: str) -> float | None:
    """The highest share of `gpu`'s bf16 peak that any measured layer's matrix multiplies reached (a whole
    layer's time, elementwise kernels included), or None when the GPU has no operator profiles: an upper
    bound, from measurement alone, on the efficiency a real prefill can show."""
    if gpu not in GPU_PROFILES:
        return None
    from ..catalog import load_catalog
    from ..step_coefficients import catalog_step

    device = load_catalog().devices[gpu]
    unit = catalog_step(device).model_copy(update={"compute_efficiency": 1.0, "small_gemm_params": 0.0})
    best = 0.0
    for p in points(GPU_PROFILES[gpu]):
        m = layer_model(p.model)
        st = StepTime.of(m, p.tp, unit, device.bf16_tflops * 1e12, device.memory_bandwidth, m.params * 2.0 / p.tp, 0.0)
        best = max(best, st.linear_flops * p.tokens / st.flops_rate / p.seconds)
    return best


SMALL_GEMM_GRID = (0.0, *(0.25e6 * 2 ** k for k in range(8)))
"""small_gemm_params tried by `fit`: none, then 0.25 M to 32 M weights per layer per GPU, doubling."""


def fit(pts: list[LayerPoint], device: Device, base: StepCoefficients) -> dict[str, float]:
    """compute_efficiency, small_gemm_params, memory_efficiency and layer_overhead fitted to `pts` (see the
    module docstring)."""
    from ..live.calibrate import least_absolute

    unit = base.model_copy(update={"compute_efficiency": 1.0, "attention_efficiency": 1.0, "memory_efficiency": 1.0,
                                   "layer_overhead": 0.0, "small_gemm_params": 0.0})
    parts = []
    for p in pts:
        m = layer_model(p.model)
        st = StepTime.of(m, p.tp, unit, device.bf16_tflops * 1e12, device.memory_bandwidth, m.params * 2.0 / p.tp, 0.0)
        compute = st.linear_flops * p.tokens / st.flops_rate
        memory = (st.layer_weight_bytes + (st.token_bytes - st.kv_bytes) * p.tokens) / st.bytes_rate
        parts.append((p.tokens, compute, memory, p.seconds, st.linear_flops / 2.0))
    tokens, compute, memory, seconds, layer_params = (np.array(c, dtype=float) for c in zip(*parts))
    small = tokens <= DECODE_MAX_TOKENS
    slope, layer_overhead = least_absolute(np.c_[memory[small], np.ones(small.sum())], seconds[small])
    memory_eff = 1.0 / slope
    large = tokens >= PREFILL_MIN_TOKENS
    p = ROOFLINE_EXPONENT
    left = np.maximum((seconds[large] - layer_overhead) ** p - (memory[large] / memory_eff) ** p, 1e-30)
    best = None
    for size in SMALL_GEMM_GRID:
        slowed = compute[large] * (1.0 + size / layer_params[large])
        eff = float(np.median(slowed / left ** (1.0 / p)))
        predicted = ((slowed / eff) ** p + (memory[large] / memory_eff) ** p) ** (1.0 / p) + layer_overhead
        score = float(np.percentile(np.abs(predicted / seconds[large] - 1.0), 95))
        if best is None or score < best[0]:
            best = (score, size, eff)
    _, size, compute_eff = best
    return {"compute_efficiency": round(compute_eff, 3), "small_gemm_params": size,
            "memory_efficiency": round(float(memory_eff), 3), "layer_overhead": round(float(layer_overhead), 7)}
