"""Per-layer operator profiles: one transformer layer's matrix multiplies and elementwise kernels,
timed on one GPU by token count and tensor-parallel degree (microsoft/vidur's mlp.csv tables,
kept under models/profiles/vidur/compute/<gpu>/<model>.csv; SOURCE.yaml says where from).

Each row times one layer on one rank: the QKV, output, up and down projections and the norms,
rotary, activation and residual adds around them. kvplan's step-time model predicts the same
thing with `StepTime.linear_layers` for a one-layer model of the profiled dimensions, so a fit
here sets exactly the coefficients the simulator uses:

    layer time = roofline( 2 P_layer N / TP / (peak x compute_efficiency),
                           (W_layer / TP + activations x N) / (HBM bandwidth x memory_efficiency) )
                 + layer_overhead,     roofline(c, m) = (c^1.5 + m^1.5)^(1/1.5)

The fit has two stages, each on the steps that one coefficient governs:
- steps of at most 16 tokens are memory-bound: time = bytes / (bandwidth x memory_efficiency)
  + layer_overhead, a straight line in bytes fitted by least absolute deviations;
- steps of 1024 tokens or more are compute-bound: each row gives the compute_efficiency that
  reproduces it once the memory side and layer_overhead are taken out; the fit is their median.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import yaml

from ..catalog import Device
from ..resolve import StepCoefficients
from ..sim.steptime import ROOFLINE_EXPONENT, StepTime
from ..spec.architecture import Architecture

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


def predict(p: LayerPoint, device: Device, step: StepCoefficients) -> float:
    """Seconds the step-time model gives the measured layer."""
    m = layer_model(p.model)
    st = StepTime.of(m, p.tp, step, device.bf16_tflops * 1e12, device.memory_bandwidth, m.params * 2.0 / p.tp, 0.0)
    return st.linear_layers(p.tokens)


def fit(pts: list[LayerPoint], device: Device, base: StepCoefficients) -> dict[str, float]:
    """compute_efficiency, memory_efficiency and layer_overhead fitted to `pts` (see the module docstring)."""
    from ..live.calibrate import least_absolute

    unit = base.model_copy(update={"compute_efficiency": 1.0, "attention_efficiency": 1.0, "memory_efficiency": 1.0,
                                   "layer_overhead": 0.0})
    parts = []
    for p in pts:
        m = layer_model(p.model)
        st = StepTime.of(m, p.tp, unit, device.bf16_tflops * 1e12, device.memory_bandwidth, m.params * 2.0 / p.tp, 0.0)
        compute = st.linear_flops * p.tokens / st.flops_rate
        memory = (st.layer_weight_bytes + (st.token_bytes - st.kv_bytes) * p.tokens) / st.bytes_rate
        parts.append((p.tokens, compute, memory, p.seconds))
    tokens, compute, memory, seconds = (np.array(c, dtype=float) for c in zip(*parts))
    small = tokens <= DECODE_MAX_TOKENS
    slope, layer_overhead = least_absolute(np.c_[memory[small], np.ones(small.sum())], seconds[small])
    memory_eff = 1.0 / slope
    large = tokens >= PREFILL_MIN_TOKENS
    p = ROOFLINE_EXPONENT
    left = np.maximum((seconds[large] - layer_overhead) ** p - (memory[large] / memory_eff) ** p, 1e-30)
    compute_eff = float(np.median(compute[large] / left ** (1.0 / p)))
    return {"compute_efficiency": round(compute_eff, 3), "memory_efficiency": round(float(memory_eff), 3),
            "layer_overhead": round(float(layer_overhead), 7)}
