"""resolve() against numbers worked out by hand from the models' published configs."""

from __future__ import annotations

import pytest

from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.units import GIB

from conftest import spec

KIB = 1024


def on(model: str, **changes):
    """The codegen example (H100, mp mode) with another model; max_model_len left to the model."""
    return resolve(spec("codegen-70b", model=model, serving__max_model_len=None, **changes))


@pytest.mark.parametrize("model, per_token", [
    ("Llama-3.1-8B", 128 * KIB),    # 32 layers x 2 x 8 KV heads x 128 x 2 bytes
    ("Llama-2-13B", 800 * KIB),     # 40 x 2 x 40 x 128 x 2
    ("Llama-3.1-70B", 320 * KIB),   # 80 x 2 x 8 x 128 x 2
])
def test_kv_bytes_per_token_in_bf16(model, per_token):
    r = on(model, serving__tensor_parallel=8)
    assert r.kv_bytes_per_token == per_token
    assert r.kv_bytes_per_token_per_rank == per_token // 8     # each has >= 8 KV heads to split


def test_fp8_kv_cache_halves_the_bytes():
    bf16 = on("Llama-3.1-8B", serving__tensor_parallel=1)
    fp8 = on("Llama-3.1-8B", serving__tensor_parallel=1, serving__kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token // 2 == 64 * KIB
    assert fp8.lmcache.chunk_bytes == bf16.lmcache.chunk_bytes // 2


def test_a_model_released_in_fp8_counts_one_byte_per_weight_and_keeps_a_bf16_kv_cache():
    """DeepSeek-V3's checkpoint holds fp8 weights beside a config whose torch_dtype is bfloat16: vLLM loads one
    byte per weight and, with --kv-cache-dtype auto, caches the MLA latent in bf16 (61 layers x 576 x 2 bytes)."""
    r = on("DeepSeek-V3", serving__gpu="H200", serving__tensor_parallel=8)
    assert (r.weights_dtype, r.weight_bytes_per_param, r.kv_cache_dtype) == ("fp8", 1.0, "bfloat16")
    assert r.kv_bytes_per_token == 61 * 576 * 2
    assert r.peak_flops == 1978.9e12                    # H200's dense fp8 peak


def test_a_16_bit_simulation_of_a_checkpoint_released_in_fp8_is_refused():
    """vLLM serves an fp8 release as fp8 whatever --dtype says: counting it as bf16 would double its weights."""
    with pytest.raises(SpecError) as exc:
        on("DeepSeek-V3", serving__gpu="H200", serving__tensor_parallel=8, serving__weights_dtype="bf16")
    problem = next(p for p in exc.value.problems if p.path == "serving.weights_dtype")
    assert "released with fp8 weights" in problem.message and "serving.weights_dtype: auto" in problem.fix


def test_a_model_served_in_fp32_counts_four_bytes_per_weight_and_per_kv_element_at_the_fp32_peak():
    """examples/local.yaml serves the tiny model in fp32 (CPUs without bf16 arithmetic): vLLM --dtype float32 keeps
    KV in fp32 too (--kv-cache-dtype auto), twice bf16's bytes in every tier, and the steps run at the fp32 peak."""
    fp32 = resolve(spec("local"))
    bf16 = resolve(spec("local", serving__weights_dtype="bf16"))
    assert (fp32.weights_dtype, fp32.weight_bytes_per_param, fp32.kv_cache_dtype) == ("fp32", 4.0, "float32")
    assert fp32.kv_bytes_per_token == 2 * bf16.kv_bytes_per_token == 4 * 2 * 2 * 64 * 4   # 4 layers, K+V, 2 heads
    assert fp32.lmcache.chunk_bytes == 2 * bf16.lmcache.chunk_bytes == 2**20
    assert fp32.peak_flops == 0.2368e12 and bf16.peak_flops == 0.4736e12


def test_fp32_on_a_device_without_an_fp32_peak_is_refused_with_the_fix():
    with pytest.raises(SpecError) as exc:
        on("Llama-3.1-8B", serving__tensor_parallel=1, serving__weights_dtype="fp32")
    problem = next(p for p in exc.value.problems if p.path == "serving.weights_dtype")
    assert "no fp32 peak for H100" in problem.message and "fp32_tflops" in problem.fix


def test_tp4_quarters_the_per_rank_bytes_of_a_model_with_8_kv_heads():
    r = on("Llama-3.1-70B", serving__tensor_parallel=4)
    assert r.kv_bytes_per_token == 320 * KIB
    assert r.kv_heads_per_rank == 2
    assert r.kv_bytes_per_token_per_rank == 80 * KIB
    # LMCache stores one object per rank: a 256-token chunk is 20 MiB per rank, 80 MiB in all.
    assert r.lmcache.chunk_bytes_per_rank == 20 * 1024 * KIB
    assert r.lmcache.chunk_bytes == 80 * 1024 * KIB


def test_kv_heads_are_replicated_when_tp_exceeds_them():
    # Qwen2.5-72B has 8 KV heads; Qwen2.5-7B has 4, so TP 4 leaves one head per rank.
    r = on("Qwen2.5-7B", serving__tensor_parallel=4)
    assert r.kv_heads_per_rank == 1
    assert r.kv_bytes_per_token_per_rank == 28 * 2 * 1 * 128 * 2


def test_mla_caches_one_latent_and_only_rank_0_stores_it():
    r = on("DeepSeek-V2-Lite", serving__tensor_parallel=2)
    assert r.kv_bytes_per_token == 27 * 1 * 1 * (512 + 64) * 2 == 31104
    assert r.kv_bytes_per_token_per_rank == 31104          # the latent is not split over ranks
    assert r.lmcache.storing_ranks == 1
    assert r.lmcache.chunk_bytes == 31104 * 256


def test_hbm_blocks_of_the_design_notes_setup(catalog):
    r = resolve(spec("chat-llama2-13b"))
    a100 = catalog.devices["A100-80GB"]
    weights = int(r.model.params * 2)                           # bf16, TP 1
    # vLLM's profiling (docs/kv-capacity.md): 2,048 tokens x (2 x hidden 5120 + 3 x intermediate 13824) x 2 bytes
    # forward, over 32 rows x 32,000 logits x 14 bytes sampled; 0.16 GiB outside torch at TP 1
    forward, sampler, non_torch = 2048 * (2 * 5120 + 3 * 13824) * 2, 32 * 32000 * 14, round(0.16 * GIB)
    assert (r.profiled.forward_peak, r.profiled.sampler_peak, r.profiled.non_torch) == (forward, sampler, non_torch)
    kv_budget = int(a100.memory * 0.9) - weights - max(forward, sampler) - non_torch   # gpu_memory_utilization 0.9
    assert r.weight_bytes_per_gpu == weights
    assert r.kv_budget_bytes_per_gpu == kv_budget
    assert r.block_bytes_per_rank == 16 * 800 * KIB
    assert r.hbm_blocks == kv_budget // (16 * 800 * KIB)
    assert r.hbm_tokens == r.hbm_blocks * 16
    assert r.max_num_seqs == 32                                  # set in the spec
    assert r.max_num_batched_tokens == 2048                      # vLLM's default on an A100


def test_inprocess_tiers_are_per_rank(catalog):
    r = resolve(spec("chat-llama2-13b"))
    chunk = 256 * 800 * KIB                                      # 200 MiB
    ddr = r.lmcache.tier("ddr")
    assert (ddr.scope, ddr.caches) == ("instance", 4)
    assert ddr.capacity_bytes == 64 * 10**9                      # one GPU per node: the node's 64 GB
    assert ddr.capacity_chunks == 64 * 10**9 // chunk == 305
    assert ddr.configured_gb == pytest.approx(64e9 / GIB)        # max_local_cpu_size
    ceph = r.lmcache.tier("ceph")
    assert (ceph.scope, ceph.caches, ceph.configured_gb, ceph.eviction, ceph.ttl_s) == ("cluster", 1, None, "none", 86400)
    assert r.ceph.raw_bytes == 3 * 4 * 3_840_000_000_000
    assert r.ceph.usable_bytes == r.ceph.raw_bytes // 3


def test_inprocess_ranks_split_the_node_share():
    r = resolve(spec("chat-llama2-13b", serving__gpus_per_node=4))
    assert r.instances_per_node == 4 and r.nodes == 1
    assert r.lmcache.tier("ddr").configured_gb == pytest.approx(16e9 / GIB)


def test_mp_tiers_are_per_node_and_ceph_is_split_over_servers():
    r = resolve(spec("codegen-70b"))
    assert (r.gpus_total, r.nodes, r.instances_per_node) == (32, 4, 2)
    ddr, ceph = r.lmcache.tier("ddr"), r.lmcache.tier("ceph")
    assert (ddr.scope, ddr.caches, ddr.configured_gb) == ("node", 4, 512.0)     # --l1-size-gb
    assert ddr.capacity_chunks == 512 * GIB // (80 * 1024 * KIB) == 6553
    assert ddr.capacity_tokens == 6553 * 256
    assert ceph.configured_gb == pytest.approx(40e12 / 4 / GIB)               # max_capacity_gb per server


def test_vllm_batch_defaults_follow_the_gpu():
    assert (on("Llama-3.1-8B").max_num_seqs, on("Llama-3.1-8B").max_num_batched_tokens) == (1024, 8192)   # H100
    b200 = on("Llama-3.1-8B", serving__gpu="B200")                       # >= 160 GiB
    assert (b200.max_num_seqs, b200.max_num_batched_tokens) == (1024, 16384)
    a100 = on("Llama-3.1-8B", serving__gpu="A100-80GB")                  # A100s keep the small defaults
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)


def test_inline_architecture_is_used_as_given():
    model = {"name": "mine", "attention": "gqa", "num_layers": 10, "hidden_size": 1024, "num_attention_heads": 8,
             "num_kv_heads": 2, "head_dim": 128, "intermediate_size": 4096, "vocab_size": 32000, "params": 1e9,
             "max_context": 8192}
    r = on(model)
    assert r.model.name == "mine" and r.kv_bytes_per_token == 10 * 2 * 2 * 128 * 2


def test_same_spec_same_hash_and_numbers():
    a, b = resolve(spec("codegen-70b")), resolve(spec("codegen-70b"))
    assert a == b and a.spec_hash == b.spec_hash
    assert resolve(spec("codegen-70b", workload__seed=8)).spec_hash != a.spec_hash


def test_storage_network_bandwidth_can_be_overridden():
    assert resolve(spec()).ceph.network.bandwidth == 25e9 / 8                      # 25GbE from the catalog
    assert resolve(spec(ceph__network_bandwidth="50Gbit")).ceph.network.bandwidth == 50e9 / 8


def test_block_and_hbm_bytes_cover_every_rank_and_instance():
    r = resolve(spec("codegen-70b"))
    assert r.block_bytes == r.block_bytes_per_rank * 4 == 16 * 320 * KIB
    assert r.hbm_bytes == r.hbm_blocks * r.block_bytes * 8
