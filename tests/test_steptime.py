"""The step-time model (kvplan.sim.steptime, docs/step-time.md) against hand arithmetic, its own
fast path, tensor parallelism, monotonicity, Mooncake FAST'25 Eq. 2 and the catalog/spec coefficients."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvplan.catalog import load_catalog
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.resources import data_root
from kvplan.sim.steptime import StepTime, attention_dims, reuse_threshold

from conftest import spec

H100_PEAK, H100_HBM, A100_PEAK = 989.4e12, 3.35e12, 312e12


def on(gpu: str, model: str, tp: int, catalog=None, **step_model):
    """The codegen example (no lmcache needed here, but harmless) on `gpu` with `model` at TP `tp`."""
    changes = dict(model=model, serving__gpu=gpu, serving__tensor_parallel=tp, serving__max_model_len=8192)
    if step_model:
        changes["serving__step_model"] = step_model
    return resolve(spec("codegen-70b", **changes), catalog)


@pytest.fixture(scope="module")
def h100_8b():
    return on("H100-SXM", "Llama-3.1-8B", 1)


# ---- units, by hand

def test_catalog_defaults_reach_resolved(h100_8b):
    c = h100_8b.step
    assert (c.compute_efficiency, c.memory_efficiency) == (0.676, 0.863)     # fitted to vidur's H100 profiles
    assert c.small_gemm_params == 8e6
    assert c.step_overhead == pytest.approx(1.9e-3) and c.layer_overhead == pytest.approx(32e-6)
    assert c.allreduce_latency == pytest.approx(8e-6) and c.allreduce_efficiency == 0.688
    assert c.allreduce_bandwidth == 450e9                       # NVLink, one direction
    assert c.overridden == []


# Llama-3.1-8B: 8.03e9 params of which the embedding and the (untied) LM head are 128256 x 4096 each
HEAD = 128256 * 4096
BODY = 8.03e9 - 2 * HEAD                                       # 6.979e9: what every token passes through
# elementwise traffic per token: 32 layers x 2 B x (10 x 4096 + 2 x (32 + 8) x 128 + 3 x 14336)
ACTIVATIONS = 32 * 2 * (10 * 4096 + 2 * 40 * 128 + 3 * 14336)  # 6,029,312 B
H100_OVERHEAD = 1.9e-3 + 32 * 32e-6                            # per step + per layer
H100_GRAPH_OVERHEAD = 1.623e-3 + 32 * 0.0                         # under a CUDA graph: per step, nothing per layer
SMALL = 1 + 8e6 / (BODY / 32)                                  # 218 M weights a layer: matrix multiplies 3.7 % slower


def blend(compute: float, memory: float) -> float:
    return (compute ** 1.5 + memory ** 1.5) ** (1 / 1.5)


def test_a_prefill_by_hand_is_compute_bound(h100_8b):
    """Llama-3.1-8B (32 layers, 32 heads x 128) on one H100, a 2,048-token prompt, nothing cached.

    FLOPs  = 2 x 6.979e9 x 2048                     = 2.8587e13   linear layers, every token
           + 2 x 5.253e8 x 1                        = 1.05e9      LM head, for the one sampled row
           + 4 x 32 x 32 x 128 x 2048 x 2049/2      = 1.100e12    causal attention (2048 x 1024.5 pairs)
    bytes  = 8.03e9 x 2 B                           = 1.606e10    weights
           + (131072 + 6,029,312) B x 2048          = 1.262e10    KV written, activations
    compute (2.8587e13 x 1.0367 + 1.05e9 + 1.100e12) / (989.4e12 x 0.676) = 46.0 ms: each layer holds 218 M
    weights, so its matrix multiplies run 1 + 8 M / 218 M slower; memory 2.868e10 / (3.35e12 x 0.863) = 9.9 ms
    time = (46.0^1.5 + 9.9^1.5)^(1/1.5) = 49.0 ms, + 1.9 ms + 32 x 32 us = 51.9 ms (no all-reduce at TP 1)
    """
    linear, rest = 2 * BODY * 2048, 2 * HEAD + 4 * 32 * 32 * 128 * 2048 * 2049 / 2
    flops = linear + rest
    nbytes = 8.03e9 * 2 + (131072 + ACTIVATIONS) * 2048
    c = StepTime(h100_8b).breakdown([(2048, 0)], 0, 0)
    assert c.flops == pytest.approx(flops, rel=1e-12)
    assert c.bytes == pytest.approx(nbytes, rel=1e-12)
    assert c.compute_s == pytest.approx((linear * SMALL + rest) / (H100_PEAK * 0.676), rel=1e-12)
    assert c.memory_s == pytest.approx(nbytes / (H100_HBM * 0.863), rel=1e-12)
    assert c.bound == "compute" and c.allreduce_s == 0
    assert c.seconds == pytest.approx(blend(c.compute_s, c.memory_s) + H100_OVERHEAD, rel=1e-12)
    assert c.seconds == pytest.approx(0.0519, abs=2e-4)
    assert StepTime(h100_8b).prefill_seconds(2048) == c.seconds


def test_small_batch_decode_by_hand_is_memory_bound(h100_8b):
    """8 sequences decoding, contexts summing to 8 x 1000 tokens: 8 new tokens, 8 sampled rows.

    FLOPs = 2 x 6.979e9 x 8 + 2 x 5.253e8 x 8 + 4 x 32 x 32 x 128 x 8000 = 1.117e11 + 8.4e9 + 4.19e9
    bytes = 1.606e10 weights + 131072 x 8000 KV read + (131072 + 6,029,312) x 8 = 1.711e10
    memory 1.711e10 / 2.891e12 = 5.92 ms  >>  compute 1.284e11 / 6.69e14 = 0.19 ms
    """
    linear, rest = 2 * BODY * 8, 2 * HEAD * 8 + 4 * 32 * 32 * 128 * 8000
    flops = linear + rest
    nbytes = 8.03e9 * 2 + 131072 * 8000 + (131072 + ACTIVATIONS) * 8
    c = StepTime(h100_8b).breakdown((), 8, 8000)
    assert (c.flops, c.bytes) == (pytest.approx(flops, rel=1e-12), pytest.approx(nbytes, rel=1e-12))
    assert c.bound == "memory"
    # a decode step runs as a CUDA graph: H100's graph overheads, fitted on real runs (docs/fidelity-e2e.md)
    assert c.seconds == pytest.approx(blend((linear * SMALL + rest) / (H100_PEAK * 0.676), nbytes / (H100_HBM * 0.863))
                                      + H100_GRAPH_OVERHEAD, rel=1e-12)
    assert c.seconds == pytest.approx(7.58e-3, abs=3e-5)


def test_the_roofline_blends_compute_and_memory_time():
    """p = 1.5: never less than the slower side, never more than both added, and nearly the slower side far
    from the ridge; at the ridge 2^(1/1.5) = 1.59 x either."""
    from kvplan.sim.steptime import roofline

    assert roofline(1.0, 0.0) == 1.0 and roofline(0.0, 2.0) == 2.0
    assert roofline(1.0, 1.0) == pytest.approx(2 ** (1 / 1.5))
    assert 10.0 < roofline(10.0, 1.0) < 10.35
    for c, m in ((3.0, 1.0), (0.2, 0.9), (5.0, 5.0)):
        assert max(c, m) <= roofline(c, m) <= c + m


def test_a_step_with_nothing_in_it_takes_no_time(h100_8b):
    st_ = StepTime(h100_8b)
    assert st_.step((), 0, 0) == 0.0
    assert st_.breakdown((), 0, 0).seconds == 0.0
    assert st_.decode_run(0, 0, 5) == [0.0] * 5
    assert st_.decode_run(4, 100, 0) == []


def test_chunking_a_prompt_keeps_its_flops_but_one_lm_head_row_per_chunk(h100_8b):
    """Causal attention: q (c + (q+1)/2) pairs per chunk sum to N (N+1)/2 whichever way N is cut. vLLM computes
    logits for the last scheduled token of every request in a step, so each chunk adds one LM-head row."""
    st_ = StepTime(h100_8b)
    whole = st_.breakdown([(8192, 0)], 0, 0).flops
    chunks = sum(st_.breakdown([(2048, c)], 0, 0).flops for c in (0, 2048, 4096, 6144))
    assert chunks == pytest.approx(whole + 3 * 2 * HEAD, rel=1e-12)


def test_mla_counts_attention_over_the_latent(catalog):
    """DeepSeek-V2-Lite: 16 heads attend over the 512-wide latent + 64 rope dims (absorbed form);
    linear FLOPs use the 2.4e9 active parameters, not the 15.7e9 total; weights read are all 15.7e9."""
    model = catalog.llm("DeepSeek-V2-Lite")
    assert attention_dims(model) == (576, 512)
    r = on("H100-SXM", "DeepSeek-V2-Lite", 1)
    c = StepTime(r).breakdown((), 1, 1000)
    head = model.vocab_size * model.hidden_size
    assert c.flops == pytest.approx(2 * (2.4e9 - 2 * head) + 2 * head + 2 * 27 * 16 * (576 + 512) * 1000, rel=1e-12)
    heads = model.num_attention_heads + model.num_kv_heads
    activations = 27 * 2 * (10 * model.hidden_size + 2 * heads * 576 + 3 * model.intermediate_size)
    assert c.bytes == pytest.approx(int(15.7e9 * 2) + 31104 * 1001 + activations, rel=1e-12)
    assert attention_dims(catalog.llm("Llama-3.1-8B")) == (128, 128)


# ---- decode fast path

REGIMES = [
    # gpu, model, tp, seqs, context at the first step, steps
    ("H100-SXM", "Llama-3.1-8B", 1, 1, 500, 300),            # memory-bound throughout
    ("H100-SXM", "Llama-3.1-8B", 1, 1024, 16 * 1024, 1000),  # compute-bound, crosses to memory-bound
    ("A100-80GB", "Llama-3.1-70B", 4, 96, 96 * 3000, 700),
    ("H100-SXM", "DeepSeek-V2-Lite", 2, 300, 300 * 100, 2000),
    ("L40S", "Qwen2.5-7B", 2, 17, 12345, 123),
]


@pytest.mark.parametrize("gpu, model, tp, seqs, context, steps", REGIMES)
def test_decode_run_equals_stepping_one_at_a_time(gpu, model, tp, seqs, context, steps):
    st_ = StepTime(on(gpu, model, tp))
    fast = st_.decode_run(seqs, context, steps)
    total, slow = 0.0, []
    for i in range(steps):
        total += st_.step((), seqs, context + i * seqs)
        slow.append(total)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=0)


@pytest.mark.parametrize("gpu, model, tp, seqs, context, steps", REGIMES)
def test_a_run_timed_in_pieces_is_the_run_timed_at_once_bit_for_bit(gpu, model, tp, seqs, context, steps):
    """The engine times a decode run's steps as it reaches them (16, then as many again)."""
    st_ = StepTime(on(gpu, model, tp))
    ends = st_.decode_run(seqs, context, min(16, steps))
    while len(ends) < steps:
        st_.extend_run(ends, seqs, context, min(steps - len(ends), len(ends)))
    assert ends == st_.decode_run(seqs, context, steps)


def test_the_fast_path_is_tested_across_the_ridge(h100_8b):
    st_ = StepTime(h100_8b)
    first, last = st_.breakdown((), 1024, 16 * 1024), st_.breakdown((), 1024, 16 * 1024 + 999 * 1024)
    assert (first.bound, last.bound) == ("compute", "memory")


# ---- tensor parallelism

def test_tp_halves_the_flops_per_gpu_and_adds_all_reduces(catalog):
    tp1, tp2 = on("H100-SXM", "Llama-3.1-8B", 1), on("H100-SXM", "Llama-3.1-8B", 2)
    batch = ([(512, 1024)], 16, 16 * 900)
    one, two = StepTime(tp1).breakdown(*batch), StepTime(tp2).breakdown(*batch)
    assert two.flops == pytest.approx(one.flops / 2, rel=1e-12)
    assert one.allreduce_s == 0.0
    # 2 per layer x 32 layers, each 8us + 2 (2-1)/2 x 528 tokens x 4096 x 2 B / (450 GB/s x 0.688)
    per = 8e-6 + 1.0 * 528 * 4096 * 2 / (450e9 * 0.688)
    assert two.allreduce_s == pytest.approx(64 * per, rel=1e-12)
    # weights, KV and the per-rank activations are split too; the hidden state's norms and adds are not
    replicated = 528 * 32 * 2 * 10 * 4096 / 2
    assert two.bytes == pytest.approx(one.bytes / 2 + replicated, rel=1e-9)


def test_tp8_ring_cost_and_the_pcie_fallback():
    r = on("L40S", "Qwen2.5-7B", 2)                         # no NVLink: the ring runs over PCIe
    assert r.step.allreduce_bandwidth == r.device.pcie == 32e9
    st8 = StepTime(on("H100-SXM", "Llama-3.1-70B", 8))
    c = st8.breakdown([(1000, 0)], 0, 0)
    assert c.allreduce_s == pytest.approx(160 * (8e-6 + 2 * 7 / 8 * 1000 * 8192 * 2 / (450e9 * 0.688)), rel=1e-12)


# ---- monotonicity

chunks = st.lists(st.tuples(st.integers(1, 8192), st.integers(0, 65536)), max_size=4)


@settings(max_examples=300, deadline=None)
@given(prefills=chunks, seqs=st.integers(0, 512), context=st.integers(0, 2**22),
       more_q=st.integers(0, 4096), more_c=st.integers(0, 65536), extra_seqs=st.integers(0, 64),
       extra_context=st.integers(0, 2**20), which=st.sampled_from(["H100-SXM/8B/1", "A100-80GB/70B/4"]))
def test_more_tokens_never_take_less_time(prefills, seqs, context, more_q, more_c, extra_seqs, extra_context, which):
    st_ = _steptimes()[which]
    base = st_.step(prefills, seqs, context)
    grown = [(q + more_q, c + more_c) for q, c in prefills]
    assert st_.step(grown, seqs, context) >= base
    assert st_.step([*prefills, (1 + more_q, more_c)], seqs, context) >= base
    assert st_.step(prefills, seqs + extra_seqs, context + extra_context) >= base


_CACHE: dict = {}


def _steptimes() -> dict:
    if not _CACHE:
        _CACHE["H100-SXM/8B/1"] = StepTime(on("H100-SXM", "Llama-3.1-8B", 1))
        _CACHE["A100-80GB/70B/4"] = StepTime(on("A100-80GB", "Llama-3.1-70B", 4))
    return _CACHE


# ---- Mooncake FAST'25 Eq. 2

@pytest.mark.parametrize("gpu, paper_gbps", [("A100-80GB", 6.0), ("H100-SXM", 19.0)])
def test_mooncake_eq2_load_beats_recompute_threshold(gpu, paper_gbps):
    """Mooncake (FAST'25) Eq. 2: reusing a prefix's KV pays when the load bandwidth B exceeds
    KV bytes of the prefix / prefill time of the prefix. Their Table 1: LLaMA3-70B (l = 80, d = 8192,
    GQA 8, 2-byte KV), 8 GPUs of G = 312 TFLOPS (A800), an n = 8K prefix, prefill FLOPs
    l (a n^2 d + b n d^2) with a = 4, b = 22:

        paper   B > 2 d s / gqa x G / (a n d + b d^2) = 4096 B x 8 x 312e12 / (26 x 8192^2) = 5.9 GB/s  (~6)
                and with H800 (8 x 989 TFLOPS) 18.6 GB/s (~19)

    Here: the catalog's Llama-3.1-70B at TP 8 on A100-80GB (an A800 is an A100-80GB with slower NVLink;
    312 TFLOPS) and H100-SXM (an H800 has the H100's 989.4 TFLOPS), compute_efficiency 1 because the
    paper compares idealised compute (and so no small-matrix loss), and the compute side of the roofline only (the paper's G has
    no communication):

        KV bytes   = 327,680 B/token x 8192                                     = 2.684e9 B
        FLOPs/GPU  = (2 x (70.554e9 - 2 x 128256 x 8192) x 8192 + 2 x 128256 x 8192    linear, LM head once
                      + 4 x 80 x 64 x 128 x 8192 x 8193/2) / 8                        = 1.5119e14
        A100: 1.5119e14 / 312e12   = 0.4846 s -> 2.684e9 / 0.4846 = 5.54 GB/s  (-8 % of 6, -5 % of Eq. 2's 5.86)
        H100: 1.5119e14 / 989.4e12 = 0.1528 s -> 17.6 GB/s                     (-8 % of 19, -6 % of 18.6)

    This model's 2 P FLOPs per token (25.5 d^2 per layer: the embedding and LM head left out) exceed the
    paper's b = 22, while its causal attention is half the paper's a = 4: net 7 % more FLOPs than Eq. 1.
    With the TP all-reduces, the elementwise traffic and the overheads the model adds (full=True),
    recompute is slower still and loading wins from 3.7 GB/s (A100) and 9.0 GB/s (H100): Eq. 2 is the
    conservative bound.
    """
    r = on(gpu, "Llama-3.1-70B", 8, compute_efficiency=1.0, small_gemm_params=0.0)
    assert r.step.compute_efficiency == 1.0
    c = StepTime(r).breakdown([(8192, 0)], 0, 0)
    assert c.bound == "compute"
    head = 128256 * 8192                                     # the LM head: one sampled row, not 8192
    linear = 2 * (70.554e9 - 2 * head) * 8192 + 2 * head
    assert c.flops == pytest.approx((linear + 4 * 80 * 64 * 128 * 8192 * 8193 / 2) / 8, rel=1e-12)
    threshold = reuse_threshold(r, 8192)
    assert threshold == pytest.approx(327680 * 8192 / c.compute_s, rel=1e-12)
    assert threshold == pytest.approx(paper_gbps * 1e9, rel=0.15)
    full = reuse_threshold(r, 8192, full=True)
    assert full < threshold
    assert full == pytest.approx({"A100-80GB": 3.73e9, "H100-SXM": 9.02e9}[gpu], rel=0.02)


# ---- coefficients: catalog defaults, spec overrides

def test_every_accelerator_has_cited_efficiency_defaults_or_says_why_not(catalog):
    for d in catalog.devices.values():
        e = d.efficiency
        if e is None:
            assert "No efficiency block" in d.note and "serving.step_model" in d.note, d.name
            continue
        assert e.sources and all(s.url and s.date for s in e.sources), d.name
        assert 0 < e.compute_efficiency <= 1 and 0 < e.memory_efficiency <= 1
        assert 0 < e.step_overhead < 0.1 and 0 < e.allreduce_latency < 1e-3
        assert e.note, f"{d.name}: say which coefficients are assumptions"


def test_an_accelerator_without_defaults_runs_on_the_coefficients_the_spec_gives():
    with pytest.raises(SpecError) as exc:
        on("MI300X", "Llama-3.1-8B", 1)
    assert "no efficiency block for MI300X" in exc.value.render()
    r = on("MI300X", "Llama-3.1-8B", 1, compute_efficiency=0.4, memory_efficiency=0.6, step_overhead="2ms",
           allreduce_latency="20us")
    assert r.step.compute_efficiency == 0.4 and StepTime(r).prefill_seconds(2048) > 0


def test_spec_overrides_flow_into_resolved_and_change_step_times(h100_8b):
    r = on("H100-SXM", "Llama-3.1-8B", 1, compute_efficiency=1.0, step_overhead="4ms")
    assert r.step.compute_efficiency == 1.0 and r.step.step_overhead == pytest.approx(4e-3)
    assert r.step.memory_efficiency == 0.863                    # not overridden: the catalog's
    assert r.step.overridden == ["compute_efficiency", "step_overhead"]
    default, tuned = StepTime(h100_8b), StepTime(r)
    assert tuned.prefill_seconds(4096) < default.prefill_seconds(4096)       # compute-bound: faster at MFU 1
    # step_overhead is an eager step's (a prefill chunk too large for a CUDA graph); a decode step keeps the graph's
    assert tuned.breakdown(((4096, 0),), 0, 0).overhead_s == pytest.approx(
        default.breakdown(((4096, 0),), 0, 0).overhead_s + 2.1e-3)
    assert tuned.breakdown((), 1, 1000).overhead_s == default.breakdown((), 1, 1000).overhead_s

    r = on("H100-SXM", "Llama-3.1-8B", 2, memory_efficiency=0.5, allreduce_latency="20us")
    base, slow = StepTime(on("H100-SXM", "Llama-3.1-8B", 2)).breakdown((), 1, 1000), StepTime(r).breakdown((), 1, 1000)
    assert slow.memory_s == pytest.approx(base.memory_s * 0.863 / 0.5, rel=1e-12)
    assert slow.allreduce_s == pytest.approx(base.allreduce_s + 64 * 12e-6, rel=1e-12)


@pytest.mark.parametrize("bad, path", [({"compute_efficiency": 1.5}, "serving.step_model.compute_efficiency"),
                                       ({"memory_efficiency": 0}, "serving.step_model.memory_efficiency"),
                                       ({"step_overhead": "fast"}, "serving.step_model.step_overhead"),
                                       ({"mfu": 0.5}, "serving.step_model.mfu")])
def test_bad_overrides_name_the_field(bad, path):
    with pytest.raises(SpecError) as info:
        spec("codegen-70b", serving__step_model=bad)
    assert any(p.path == path for p in info.value.problems), info.value.render()


def test_a_device_without_an_efficiency_block_is_an_error_naming_it(tmp_path):
    root = tmp_path / "models"
    shutil.copytree(data_root() / "models", root)
    gpus = root / "hardware" / "gpus.yaml"
    data = yaml.safe_load(gpus.read_text())
    for row in data["gpus"]:
        if row["name"] == "H100-SXM":
            del row["efficiency"]
    gpus.write_text(yaml.safe_dump(data, sort_keys=False))
    load_catalog.cache_clear()
    try:
        cat = load_catalog(str(root))
        assert cat.devices["H100-SXM"].efficiency is None
        with pytest.raises(SpecError) as info:
            resolve(spec("codegen-70b"), cat)
        problem = next(p for p in info.value.problems if p.path == "serving.gpu")
        assert "H100-SXM" in problem.message and "efficiency" in problem.message
        assert "compute_efficiency" in problem.message and "gpus.yaml" in problem.fix
        # a spec that sets all four coefficients needs no catalog block
        r = resolve(spec("codegen-70b", serving__step_model={"compute_efficiency": 0.5, "memory_efficiency": 0.7,
                                                             "step_overhead": "1ms", "allreduce_latency": "10us"}), cat)
        assert r.step.overridden == ["compute_efficiency", "memory_efficiency", "step_overhead", "allreduce_latency"]
    finally:
        load_catalog.cache_clear()
