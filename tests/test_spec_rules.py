"""Each rule that mirrors the real stack rejects a bad spec with the field, the value and a fix.

Every test starts from a shipped example that is valid and changes one thing.
"""

from __future__ import annotations

import pytest

from kvplan.errors import SpecError
from kvplan.resolve import resolve

from conftest import spec


def problems(example: str = "chat-llama2-13b", /, **changes):
    """The problems a changed example has (load and resolve), as {path: problem}."""
    with pytest.raises(SpecError) as info:
        resolve(spec(example, **changes))
    return {p.path: p for p in info.value.problems}


def test_the_unchanged_examples_are_valid():
    for name in ("chat-llama2-13b", "codegen-70b", "mooncake-replay", "local"):
        resolve(spec(name))


def test_block_size_must_be_a_multiple_of_16():
    p = problems(serving__block_size=24)["serving.block_size"]
    assert "multiple of 16" in p.message and p.value == 24 and p.fix == "use 16 or 32"


def test_chunk_size_must_be_a_multiple_of_block_size():
    p = problems(serving__block_size=32, lmcache__chunk_size=200)["lmcache.chunk_size"]
    assert "multiple of serving.block_size (32)" in p.message
    assert p.fix == "use 224 or 192"


def test_tensor_parallel_must_divide_the_gpus_of_a_node():
    p = problems("codegen-70b", serving__tensor_parallel=3)["serving.tensor_parallel"]
    assert "divide serving.gpus_per_node (8)" in p.message and p.allowed == "1, 2, 4, 8"


def test_tensor_parallel_must_suit_the_models_heads():
    # Qwen2.5-7B has 28 query heads and 4 KV heads: TP 8 cannot split 28 heads evenly.
    p = problems("codegen-70b", model="Qwen2.5-7B", serving__tensor_parallel=8, serving__max_model_len=None)["serving.tensor_parallel"]
    assert "28 attention heads" in p.message and "4 KV heads" in p.message
    assert p.allowed == "1, 2, 4" and p.fix == "use tensor_parallel: 4"


def test_weights_must_fit_with_room_for_kv():
    # 70B in bf16 is ~141 GB: one 80 GB H100 cannot hold it.
    p = problems("codegen-70b", serving__tensor_parallel=1)["serving.tensor_parallel"]
    assert "leave no room for KV cache" in p.message
    assert p.fix.startswith("use tensor_parallel: 4")


def test_a_max_length_sequence_must_fit_in_hbm():
    # Llama-3.1-70B on 2 x H100 in bf16 leaves ~0.7 GB per GPU for KV: far below 65,536 tokens.
    p = problems("codegen-70b", serving__tensor_parallel=2, serving__gpu_memory_utilization=0.95)["serving.max_model_len"]
    assert "does not fit" in p.message and p.fix.startswith("lower max_model_len to ")


def test_max_model_len_cannot_exceed_the_models_context():
    p = problems(serving__max_model_len=8192)["serving.max_model_len"]
    assert "maximum context (4096)" in p.message


def test_inprocess_mode_has_no_arc():
    p = problems(lmcache__ddr__eviction="ARC")["lmcache.ddr.eviction"]
    assert p.allowed == "LRU, LFU, FIFO, MRU"
    assert "use mode: mp, which has ARC" in p.fix and "simulate_only: true" in p.fix


def test_mp_mode_has_no_lfu():
    p = problems("codegen-70b", lmcache__nvme__eviction="LFU")["lmcache.nvme.eviction"]
    assert p.allowed == "LRU, ARC, IsolatedLRU, none"
    assert "use mode: inprocess, which has LFU" in p.fix


def test_inprocess_ceph_tier_cannot_evict():
    p = problems(lmcache__ceph__eviction="LRU")["lmcache.ceph.eviction"]
    assert p.allowed == "none"


def test_ttl_is_only_real_on_the_ceph_tier():
    p = problems(lmcache__ddr__ttl="1h")["lmcache.ddr.ttl"]
    assert "RGW lifecycle rule" in p.message and "simulate_only" in p.fix


def test_simulate_only_admits_the_notes_lfu_plus_ttl_on_ddr():
    topo = spec(simulate_only=True, lmcache__ddr__eviction="LFU", lmcache__ddr__ttl="1h")
    assert resolve(topo).lmcache.tier("ddr").ttl_s == 3600


def test_policy_names_are_case_insensitive():
    assert spec(lmcache__ddr__eviction="lru").lmcache.ddr.eviction == "LRU"
    assert spec("codegen-70b", lmcache__ddr__eviction="noop").lmcache.ddr.eviction == "none"


def test_mp_mode_needs_a_ddr_l1():
    p = problems("codegen-70b", lmcache__ddr=None)["lmcache.ddr"]
    assert "--l1-size-gb" in p.message


def test_a_ceph_tier_needs_a_ceph_cluster():
    assert "no ceph section" in problems(ceph=None)["ceph"].message


def test_pool_size_cannot_exceed_hosts_for_a_host_failure_domain():
    p = problems(ceph__hosts=2)["ceph.pool.size"]
    assert "need 3 hosts" in p.message and p.allowed == "1..2"


def test_pool_min_size_cannot_exceed_size():
    assert problems(ceph__pool={"size": 2, "min_size": 3})["ceph.pool.min_size"].allowed == "1..2"


def test_pg_num_is_a_power_of_two():
    assert problems(ceph__pool={"pg_num": 100})["ceph.pool.pg_num"].fix == "use 64 or 128"


def test_ceph_tier_must_fit_in_the_pool_below_nearfull():
    p = problems(lmcache__ceph__size="20TB")["lmcache.ceph.size"]
    assert "nearfull" in p.message


def test_a_tier_must_hold_at_least_one_chunk():
    # Llama-2-13B: a 256-token chunk is 200 MiB; a 100 MB DDR share holds none.
    p = problems(lmcache__ddr__size="100MB")["lmcache.ddr.size"]
    assert "holds no whole chunk" in p.message


def test_trace_kind_needs_a_trace():
    assert "needs a trace section" in problems("mooncake-replay", workload__trace=None)["workload.trace"].message


def test_synthetic_workload_needs_an_end():
    assert "requests or duration" in problems(workload__requests=None)["workload"].message


def test_cpu_devices_need_blocks_of_32_and_a_kv_space():
    found = problems("local", serving__block_size=48, lmcache__chunk_size=240, serving__kv_cache_memory=None)
    assert "multiple of 32" in found["serving.block_size"].message
    assert "VLLM_CPU_KVCACHE_SPACE" in found["serving.kv_cache_memory"].message


def test_vllm_needs_batched_tokens_at_least_max_num_seqs():
    p = problems(serving__max_num_seqs=512, serving__max_num_batched_tokens=256)["serving.max_num_batched_tokens"]
    assert p.allowed == ">= 512"


def test_unknown_catalog_names_get_a_did_you_mean():
    found = problems(model="Llama-2-13", serving__gpu="A100-80G", lmcache__nvme__device="gen-4", ceph__network="25GE")
    assert found["model"].fix == "did you mean 'Llama-2-13B'?"
    assert found["serving.gpu"].fix == "did you mean 'A100-80GB'?"
    assert found["lmcache.nvme.device"].fix == "did you mean 'gen4'?"
    assert found["ceph.network"].fix == "did you mean '25GbE'?"


@pytest.mark.parametrize("changes, field", [
    ({"workload__sessions": None, "workload__arrivals": {"rate": "0/s"}}, "workload.arrivals.rate"),
    ({"workload__sessions": None, "workload__arrivals": {"rate": 0}}, "workload.arrivals.rate"),
    ({"workload__arrivals": {"session_rate": "0sessions/s"}}, "workload.arrivals.session_rate"),
    ({"workload__stages": [{"session_rate": "0/s", "duration": "1min"}]}, "workload.stages[0].session_rate"),
    ({"workload__sessions": None, "workload__stages": [{"rate": "2/s", "duration": "1min"},
                                                        {"rate": "0/min", "duration": "1min"}]},
     "workload.stages[1].rate"),
])
def test_a_rate_of_zero_is_refused_with_the_range_allowed(changes, field):
    # issue 49: `arrivals: {rate: 0/s}` validated and rendered, then simulate and size divided by it (exit 70)
    p = problems(**changes)[field]
    assert "must be more than 0" in p.message and p.allowed and p.fix.startswith("write it like"), p


@pytest.mark.parametrize("interval", ["0s", "0.4s", "1.5s", "2h"])
def test_a_scrape_interval_prometheus_would_not_deploy_as_written_is_refused(interval):
    # issue 49: 0s was accepted; Prometheus reads 0 as unset and its 1-minute default was deployed
    p = problems(monitoring__scrape_interval=interval)["monitoring.scrape_interval"]
    assert "whole seconds from 1s to 1h" in p.message and p.fix == "e.g. 15s", p


@pytest.mark.parametrize("field", ["serving__max_num_batched_tokens", "serving__max_num_seqs", "serving__max_model_len",
                                   "lmcache__chunk_size"])
def test_a_count_past_a_32_bit_integer_is_refused_with_the_range(field):
    # issue 49: serving.max_num_batched_tokens: 99999999999999999999999 (past int64) was accepted and rendered
    p = problems(**{field: 99999999999999999999999})[field.replace("__", ".")]
    assert p.allowed == "from 1 to 2147483647" and p.fix == "use a value from 1 to 2147483647", p


@pytest.mark.parametrize("options", [{"auth_client_required": "none"}, {"auth_cluster_required": "cephx, none"},
                                     {"auth_service_required": "NONE"}, {"auth_supported": "none"}])
def test_options_that_switch_cephx_off_are_refused_unless_the_spec_says_so(options):
    # issue 49: `ceph.options: {auth_client_required: none}` was accepted without a word
    [key] = options
    p = problems("local", ceph__options=options)[f"ceph.options.{key}"]
    assert "switches cephx authentication off" in p.message and "ceph.allow_no_auth: true" in p.fix, p
    assert resolve(spec("local", ceph__options=options, ceph__allow_no_auth=True)).ceph is not None


def test_allow_no_auth_left_at_its_default_keeps_the_spec_hash():
    assert spec("local").spec_hash() == spec("local", ceph__allow_no_auth=False).spec_hash()
    assert spec("local").spec_hash() != spec("local", ceph__allow_no_auth=True).spec_hash()


def test_a_kv_cache_of_zero_bytes_is_refused_with_the_size_of_one_block():
    # issue 49: serving.kv_cache_memory: 0B resolved to zero KV blocks and the simulator divided by zero
    p = problems(serving__kv_cache_memory="0B")["serving.kv_cache_memory"]
    assert "holds no KV block: one block of 16 tokens is 12.5 MiB per rank" in p.message, p
    assert p.allowed == "at least one block's worth, 12.5 MiB" and "enough for max_model_len" in p.fix, p


def test_a_kv_cache_smaller_than_one_block_is_refused_once_on_its_own_field():
    found = problems(serving__kv_cache_memory="1MiB")
    assert "holds no KV block" in found["serving.kv_cache_memory"].message
    assert "serving.max_model_len" not in found          # not also "1..0 tokens" for the sequence length


@pytest.mark.parametrize("turns", [2 ** 31, 1001, {"dist": "uniform", "min": 1, "max": 2 ** 31}])
def test_a_session_of_more_than_a_thousand_turns_is_refused_with_the_range(turns):
    # issue 49: workload.sessions.turns.max: 2147483648 made numpy ask for 7.9 TiB
    p = problems(workload__sessions__turns=turns)["workload.sessions.turns"]
    assert "turns must be from 1 to 1000" in p.message and p.fix == "give 1000 turns or fewer", p


def test_a_lognormal_number_of_turns_needs_a_max():
    p = problems(workload__sessions__turns={"dist": "lognormal", "mean": 4, "cv": 1})["workload.sessions.turns"]
    assert "needs max (from 1 to 1000)" in p.message and p.fix == "add max: 16", p


def test_a_thousand_turns_is_allowed():
    resolve(spec(workload__sessions__turns=1000))


@pytest.mark.parametrize("field", ["workload__prompt__max", "workload__output__mean", "workload__prompt__min",
                                   "workload__shared_prefixes__tokens"])
def test_a_token_count_past_a_32_bit_integer_is_refused_with_the_range(field):
    # issue 49: workload.prompt.max, output.mean and shared_prefixes.tokens of 2^63 overflowed int64 in the draws
    found = problems(**{field: 2 ** 63})
    [p] = [p for path, p in found.items() if path.startswith(field.replace("__", "."))]
    assert p.allowed.endswith(" to 2147483647") or p.allowed.endswith("at most 2147483647"), p


@pytest.mark.parametrize("example, field, rate", [("codegen-70b", "workload__arrivals__rate", "1e300/s"),
                                                  ("chat-llama2-13b", "workload__arrivals__session_rate", "1e300/s"),
                                                  ("codegen-70b", "workload__arrivals__rate", "1000001/s")])
def test_an_arrival_rate_past_a_million_a_second_is_refused_with_the_range(example, field, rate):
    # issue 49: a rate of 1e300/s asked numpy for arrays past its largest dimension
    p = problems(example, **{field: rate})[field.replace("__", ".")]
    assert "kvplan simulates" in p.message and "more than 0 and at most 1e+06/s" in p.message, p


def test_a_stage_rate_past_a_million_a_second_is_refused_with_the_range():
    stages = [{"rate": "8/s", "duration": "1min"}, {"rate": "1e300/s", "duration": "1min"}]
    found = problems("codegen-70b", workload__stages=stages, workload__requests=None)
    [p] = [p for path, p in found.items() if path.startswith("workload.stages") and path.endswith("rate")]
    assert "at most 1e+06/s" in p.message, p


def test_a_rescaled_poisson_load_of_more_arrivals_than_it_can_draw_at_once_is_refused():
    stages = [{"rate": "1e6/s", "duration": "1h", "process": "rescaled_poisson"}]
    p = problems("codegen-70b", workload__stages=stages, workload__requests=None)["workload.stages[0]"]
    assert "int(1e+06 x 3600) is more than the 10,000,000 it draws" in p.message and "process: poisson" in p.fix, p
