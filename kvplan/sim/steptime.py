"""How long one vLLM engine step takes: a roofline over compute and memory traffic, plus
tensor-parallel all-reduces and fixed per-step and per-layer costs (docs/step-time.md; fitted to
public A100 and H100 measurements in docs/fidelity-gpu.md).

One step is one forward pass of one instance: TP ranks each do 1/TP of the work in parallel,
so everything below is per rank (per GPU). A step's batch holds prefill chunks, each `q` new
tokens after `c` tokens already in the KV cache, and decoding sequences, each one new token
after a context of `L` tokens. With N = all new tokens in the step (sum of q, plus one per
decoding sequence) and R = the rows it samples (one per chunk, one per decoding sequence):

    FLOPs   = [ 2 P_body N  +  2 V h R                              linear layers; LM head per row
              + A ( sum over chunks q (c + (q + 1) / 2)  +  sum over decodes L ) ] / TP
              A = 2 x layers x attention heads x (qk dim + v dim)   per (query, key) pair
    bytes   = W / TP + K_rank ( sum of c + sum of L )  +  (K_rank + E_rank) N
              weights once      KV read                   KV written, elementwise traffic
    compute = linear FLOPs x (1 + small_gemm_params / P_layer) / (peak x compute_efficiency)
              + LM-head FLOPs / (peak x compute_efficiency) + attention FLOPs / (peak x attention_efficiency)
    memory  = bytes / (HBM bandwidth x memory_efficiency)
    time    = roofline(compute, memory) = (compute^1.5 + memory^1.5)^(1/1.5)
              + [TP > 1] 2 x layers x ( allreduce_latency + 2 (TP - 1) / TP x N x hidden x 2 B
                                                            / (link x allreduce_efficiency) )
              + step_overhead + layers x layer_overhead

- P_layer = P_body / layers / TP, the weights of one layer on one rank: matrix multiplies that small
  leave part of the GPU's cores idle (too few output tiles for its SMs), so they run at
  compute_efficiency x P_layer / (P_layer + small_gemm_params). Fitted (docs/fidelity-gpu.md): a 7B
  model at TP 8 (25 M weights per layer per GPU) loses 14 % of its matrix-multiply speed on A100 and
  24 % on H100, a 70B model at TP 4 (214 M) 2-4 %.
- P_body is `active_params` (mixture of experts) or `params`, less the embedding table and the
  LM head (V x h each, once if tied): vLLM looks the embedding up and computes logits only at
  the positions it samples, the last scheduled token of each request in the step. W = params x
  bytes per weight, `Resolved.weight_bytes_per_gpu`; K_rank = `Resolved.kv_bytes_per_token_per_rank`;
  E_rank = `activation_bytes_per_token`.
- Attention is causal: a chunk's i-th new token attends to c + i keys, so a chunk costs
  q (c + (q + 1) / 2) pairs; splitting a prompt into chunks does not change the total. For
  GQA/MHA the qk and v dims are both head_dim, so A = 4 x layers x heads x head_dim. For MLA the
  attention runs over the cached latent (vLLM's weight-absorbed form, which its decode kernels
  use): qk dim = kv_lora_rank + qk_rope_head_dim (= head_dim), v dim = kv_lora_rank. vLLM
  computes MLA prefill in the cheaper decompressed form, so this over-counts MLA prefill
  attention; linear FLOPs dominate it below a few thousand tokens of context.
- roofline(): compute and memory overlap only partly; see ROOFLINE_EXPONENT.
- Two all-reduces per layer (after attention and after the MLP), each of N x hidden_size
  activations of 2 bytes, as a ring: every rank sends 2 (TP - 1) / TP of it over its link
  (NVLink, else PCIe), plus a fixed latency. None at TP 1.
- Known simplifications: GEMM tile effects (a smooth roofline), every expert of an MoE read
  every step. The coefficients absorb what this misses; kvplan.gpufit fits them to public GPU
  data, calibration to a live stack.

The coefficients come from `Resolved.step` (catalog defaults per accelerator, a serving.step_profile
on top, serving.step_model on top of that). `StepTime` precomputes every constant when built, so
`step` is plain float arithmetic; `decode_run` gives many consecutive pure-decode steps at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, NamedTuple, Sequence

from ..resolve import Resolved
from ..spec.architecture import Architecture
from ..step_coefficients import StepCoefficients

ACTIVATION_BYTES = 2
"""Bytes per activation element in the tensor-parallel all-reduce (bf16/fp16)."""


ROOFLINE_EXPONENT: Final = 1.5
"""How a step's compute time and memory time combine: (compute^p + memory^p)^(1/p). p = 1 would add them
(no overlap), p -> infinity is the classic max(); 1.5 is what one layer's measured times on A100 and H100
show across the ridge (docs/fidelity-gpu.md; the decode- and prefill-size steps far from it barely care).
Written math.pow: the same C pow as **, which mypyc compiles to a call with both operands boxed."""
_P: Final = ROOFLINE_EXPONENT
_INVERSE: Final = 1.0 / ROOFLINE_EXPONENT


def roofline(compute_s: float, memory_s: float) -> float:
    """A step's time from its compute-bound and memory-bound times (see ROOFLINE_EXPONENT)."""
    return math.pow(math.pow(compute_s, _P) + math.pow(memory_s, _P), _INVERSE)


def activation_bytes_per_token(model: Architecture, tp: int) -> float:
    """Bytes per new token (per rank) that a step's elementwise kernels move through HBM in all layers: two
    RMSNorms and two residual adds over the hidden state (read and write, ~10 x hidden), rotary over the
    rank's query and key heads (read and write), and the gated activation (reads 2 x, writes 1 x the rank's
    intermediate width); 2 B per element."""
    heads = (model.num_attention_heads + model.num_kv_heads) / tp
    per_layer = 10 * model.hidden_size + 2 * heads * model.head_dim + 3 * model.intermediate_size / tp
    return float(model.num_layers * per_layer * ACTIVATION_BYTES)


def attention_dims(model: Architecture) -> tuple[int, int]:
    """(qk dim, v dim) of one attention head as the step-time model counts it (MLA: the latent form)."""
    if model.attention == "mla":
        assert model.kv_lora_rank is not None      # the spec refuses an mla model without it
        return model.head_dim, model.kv_lora_rank
    return model.head_dim, model.head_dim


@dataclass(frozen=True)
class StepCost:
    """One step taken apart (per GPU): what `StepTime.step` adds up."""

    tokens: int
    """New tokens in the step (prefill chunk tokens + one per decoding sequence)."""
    flops: float
    bytes: float
    compute_s: float
    """Linear FLOPs, each layer's slowed as small as it is, / (peak x compute_efficiency) + LM-head FLOPs / (peak x
    compute_efficiency) + attention FLOPs / (peak x attention_efficiency)."""
    memory_s: float
    """bytes / (HBM bandwidth x memory_efficiency)."""
    allreduce_s: float
    overhead_s: float
    seconds: float
    """roofline(compute_s, memory_s) + allreduce_s + overhead_s: equals StepTime.step."""

    @property
    def bound(self) -> str:
        """Which side of the roofline binds: "compute" or "memory"."""
        return "compute" if self.compute_s > self.memory_s else "memory"


class StepParts(NamedTuple):
    """What a step time is made of: the fields of `Resolved` that StepTime reads, for fitting the model to
    measured layers, where no spec exists."""

    model: Architecture
    tensor_parallel: int
    step: StepCoefficients
    peak_flops: float
    hbm_bandwidth: float
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_rank: float
    cuda_graph_max_tokens: int = 0
    """Per-layer operator profiles are measured eagerly: no step runs as a CUDA graph."""


class StepTime:
    """Step times of one vLLM instance of `Resolved` (see the module docstring for the formula)."""

    __slots__ = ("linear_flops", "head_flops", "head_cost", "attention_flops", "attention_cost", "weight_bytes",
                 "layer_weight_bytes", "token_bytes", "kv_bytes", "flops_rate", "bytes_rate", "layer_overhead",
                 "allreduce_fixed", "allreduce_per_token", "overhead", "graph_overhead", "graph_max")

    def __init__(self, r: Resolved | StepParts):
        m, tp = r.model, r.tensor_parallel
        # plain floats, whatever numbers the coefficients came as (a fit's numpy scalars): step times feed the
        # simulated clock and the compiled simulator's float fields
        c = {name: float(value) for name, value in r.step.model_dump(exclude={"overridden"}).items()}
        peak_flops, hbm_bandwidth = float(r.peak_flops), float(r.hbm_bandwidth)
        qk, v = attention_dims(m)
        head = m.vocab_size * m.hidden_size                                      # LM-head (= embedding) parameters
        outside = head * (1 if m.tie_word_embeddings else 2)                     # embedding table + LM head
        self.linear_flops = 2.0 * ((m.active_params or m.params) - outside) / tp  # per new token, per rank
        self.head_flops = 2.0 * head / tp                                        # per sampled row (vocab-parallel)
        self.attention_flops = 2.0 * m.num_layers * m.num_attention_heads * (qk + v) / tp   # per (query, key) pair
        self.weight_bytes = float(r.weight_bytes_per_gpu)
        self.layer_weight_bytes = self.weight_bytes * (m.params - outside) / m.params
        self.kv_bytes = float(r.kv_bytes_per_token_per_rank)
        # per new token: the KV written for it and its activations through the elementwise kernels of every layer
        self.token_bytes = self.kv_bytes + activation_bytes_per_token(m, tp)
        # the linear layers' rate: compute_efficiency, less what matrices this small leave idle
        small = 1.0 + c["small_gemm_params"] / max(self.linear_flops / 2.0 / m.num_layers, 1.0)
        self.flops_rate = peak_flops * c["compute_efficiency"] / small
        # attention and LM-head FLOPs as linear-layer FLOPs of the same time: attention runs at attention_efficiency,
        # the LM head (a large matrix) at compute_efficiency
        self.attention_cost = self.attention_flops * (c["compute_efficiency"] / c["attention_efficiency"]) / small
        self.head_cost = self.head_flops / small
        self.bytes_rate = hbm_bandwidth * c["memory_efficiency"]
        if tp > 1:
            allreduces = 2 * m.num_layers
            self.allreduce_fixed = allreduces * c["allreduce_latency"]
            self.allreduce_per_token = (allreduces * 2.0 * (tp - 1) / tp * m.hidden_size * ACTIVATION_BYTES
                                        / (c["allreduce_bandwidth"] * c["allreduce_efficiency"]))
        else:
            self.allreduce_fixed = 0.0
            self.allreduce_per_token = 0.0
        self.layer_overhead = m.num_layers * c["layer_overhead"]
        self.overhead = c["step_overhead"] + self.layer_overhead
        # a step of at most graph_max tokens runs as a captured CUDA graph, with its own fixed costs
        self.graph_max: int = r.cuda_graph_max_tokens
        self.graph_overhead = c["graph_step_overhead"] + m.num_layers * c["graph_layer_overhead"]

    @classmethod
    def of(cls, model: Architecture, tp: int, step: StepCoefficients, peak_flops: float, hbm_bandwidth: float,
           weight_bytes_per_gpu: float, kv_bytes_per_token_per_rank: float) -> "StepTime":
        """Step times from the parts `Resolved` supplies (for fitting the model to measured layers, where no spec exists)."""
        return cls(StepParts(model, tp, step, peak_flops, hbm_bandwidth, weight_bytes_per_gpu, kv_bytes_per_token_per_rank))

    def linear_layers(self, tokens: int) -> float:
        """Seconds the transformer layers' matrix multiplies and elementwise kernels take for `tokens` new tokens:
        the part of a step a per-layer operator profile measures (no attention, LM head, all-reduce or per-step
        overhead; the KV written is left out too, as those profiles write none)."""
        compute = self.linear_flops * tokens / self.flops_rate
        memory = (self.layer_weight_bytes + (self.token_bytes - self.kv_bytes) * tokens) / self.bytes_rate
        return roofline(compute, memory) + self.layer_overhead

    def step(self, prefills: Sequence[tuple[int, int]], decode_seqs: int, decode_context: int) -> float:
        """Seconds for one engine step: `prefills` = (new tokens q, cached context c) per prefill chunk in the
        batch; `decode_seqs` sequences each decoding one token, whose context lengths sum to `decode_context`.
        A step with no tokens takes no time."""
        tokens = decode_seqs
        pairs = float(decode_context)
        read = decode_context
        for q, c in prefills:
            tokens += q
            pairs += q * (c + (q + 1) * 0.5)
            read += c
        if tokens <= 0:
            return 0.0
        rows = decode_seqs + len(prefills)
        compute = (self.linear_flops * tokens + self.head_cost * rows + self.attention_cost * pairs) / self.flops_rate
        memory = (self.weight_bytes + self.kv_bytes * read + self.token_bytes * tokens) / self.bytes_rate
        return (math.pow(math.pow(compute, _P) + math.pow(memory, _P), _INVERSE) + self.allreduce_fixed
                + self.allreduce_per_token * tokens + (self.graph_overhead if tokens <= self.graph_max else self.overhead))

    def decode_run(self, seqs: int, context: int, steps: int) -> list[float]:
        """Cumulative end times (seconds from now) of `steps` consecutive pure-decode steps of `seqs` sequences
        whose contexts sum to `context` at the first step and grow by `seqs` per step. Equal, to floating-point
        tolerance, to summing step((), seqs, context + i*seqs) for i in range(steps)."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, not {steps}")
        ends: list[float] = []
        self.extend_run(ends, seqs, context, steps)
        return ends

    def extend_run(self, ends: list[float], seqs: int, context: int, steps: int) -> None:
        """Append the next `steps` end times to a decode run's `ends` (what decode_run(seqs, context, n)
        returned, or extend_run made of it): the same numbers, bit for bit, as one decode_run of them all.

        A plain loop over the steps (with the step's constants hoisted): a run is a few dozen steps
        on most calls, where numpy's per-call cost outweighs its per-element speed."""
        if seqs <= 0:
            ends += [0.0] * steps
            return
        rows_flops = (self.linear_flops + self.head_cost) * seqs
        attention, flops_rate = self.attention_cost, self.flops_rate
        weights, kv, tokens_bytes, bytes_rate = self.weight_bytes, self.kv_bytes, self.token_bytes * seqs, self.bytes_rate
        fixed, per_step = self.allreduce_fixed, self.allreduce_per_token * seqs
        overhead = self.graph_overhead if seqs <= self.graph_max else self.overhead
        first = len(ends)
        end = ends[-1] if ends else 0.0
        for i in range(first, first + steps):
            ctx = float(context + seqs * i)
            compute = (rows_flops + attention * ctx) / flops_rate
            memory = (weights + kv * ctx + tokens_bytes) / bytes_rate
            end += math.pow(math.pow(compute, _P) + math.pow(memory, _P), _INVERSE) + fixed + per_step + overhead
            ends.append(end)

    def prefill_seconds(self, tokens: int, context: int = 0) -> float:
        """One lone prefill chunk of `tokens` new tokens after `context` cached ones."""
        return self.step(((tokens, context),), 0, 0)

    def breakdown(self, prefills: Sequence[tuple[int, int]], decode_seqs: int, decode_context: int) -> StepCost:
        """The parts of `step` (for tests, docs and reports; not for the hot path)."""
        tokens = decode_seqs + sum(q for q, _ in prefills)
        rows = decode_seqs + len(prefills)
        pairs = decode_context + sum((q * (c + (q + 1) * 0.5) for q, c in prefills), 0.0)
        read = decode_context + sum(c for _, c in prefills)
        if tokens <= 0:
            return StepCost(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        flops = self.linear_flops * tokens + self.head_flops * rows + self.attention_flops * pairs
        nbytes = self.weight_bytes + self.kv_bytes * read + self.token_bytes * tokens
        compute = (self.linear_flops * tokens + self.head_cost * rows + self.attention_cost * pairs) / self.flops_rate
        memory = nbytes / self.bytes_rate
        allreduce = self.allreduce_fixed + self.allreduce_per_token * tokens
        overhead = self.graph_overhead if tokens <= self.graph_max else self.overhead
        return StepCost(tokens, flops, nbytes, compute, memory, allreduce, overhead,
                        self.step(prefills, decode_seqs, decode_context))


# ---- python -m kvplan.sim.steptime: the catalog's coefficients and a few worked numbers (docs/step-time.md)

def _example(gpu: str, model: str, tp: int, **step_model) -> Resolved:
    from ..resolve import resolve
    from ..spec import from_mapping

    serving = {"gpu": gpu, "tensor_parallel": tp, "max_model_len": 8192}
    if step_model:
        serving["step_model"] = step_model
    return resolve(from_mapping({"name": "steptime", "model": model, "serving": serving,
                                 "workload": {"kind": "chat", "duration": "1min", "arrivals": {"rate": "1/s"}}}))


def reuse_threshold(r: Resolved, prefix: int, *, full: bool = False) -> float:
    """Mooncake (FAST'25) Eq. 2: bytes/s above which loading `prefix` tokens of KV beats recomputing them:
    the prefix's KV bytes (whole instance) / its prefill time (compute side of the roofline only, as the
    paper compares; `full` = the whole step time, all-reduces and overhead included)."""
    st = StepTime(r)
    cost = st.breakdown(((prefix, 0),), 0, 0)
    seconds = cost.seconds if full else max(cost.compute_s, cost.memory_s)
    return r.kv_bytes_per_token * prefix / seconds


def main() -> None:
    from ..catalog import load_catalog
    from ..units import fmt_bandwidth, fmt_duration

    cat = load_catalog()
    print("Catalog defaults (models/hardware/gpus.yaml, efficiency:)")
    print(f"{'accelerator':<16}{'compute':>9}{'memory':>8}{'overhead':>10}{'all-reduce':>12}")
    for d in cat.devices.values():
        e = d.efficiency
        if e is None:
            print(f"{d.name:<16}{'(none)':>9}")
            continue
        print(f"{d.name:<16}{e.compute_efficiency:>9.2f}{e.memory_efficiency:>8.2f}"
              f"{fmt_duration(e.step_overhead):>10}{fmt_duration(e.allreduce_latency):>12}")

    r = _example("H100-SXM", "Llama-3.1-8B", 1)
    st = StepTime(r)
    print("\nLlama-3.1-8B on one H100-SXM (catalog defaults)")
    for label, prefills, seqs, ctx in (("prefill 2048 tokens", ((2048, 0),), 0, 0),
                                       ("decode 1 seq, context 1024", (), 1, 1024),
                                       ("decode 64 seqs, context 64 x 2048", (), 64, 64 * 2048),
                                       ("decode 256 seqs, context 256 x 512", (), 256, 256 * 512),
                                       ("512-token chunk + 32 decodes", ((512, 1024),), 32, 32 * 1024)):
        c = st.breakdown(prefills, seqs, ctx)
        print(f"  {label:<36}{fmt_duration(c.seconds):>9}  {c.bound}-bound "
              f"({c.flops / 1e12:.2f} TFLOP, {c.bytes / 1e9:.2f} GB per GPU)")

    print("\nMooncake FAST'25 Eq. 2: Llama-3.1-70B, TP 8, 8K-token prefix, idealised compute (efficiency 1)")
    for name, gpu, paper in (("A800 (A100-80GB)", "A100-80GB", "~6 GB/s"), ("H800 (H100-SXM)", "H100-SXM", "~19 GB/s")):
        r = _example(gpu, "Llama-3.1-70B", 8, compute_efficiency=1.0, small_gemm_params=0.0)
        print(f"  {name:<18} load beats recompute above {fmt_bandwidth(reuse_threshold(r, 8192))} "
              f"(paper {paper}); with all-reduces and overhead {fmt_bandwidth(reuse_threshold(r, 8192, full=True))}")


if __name__ == "__main__":
    main()
