"""The design note's claims as kvplan simulates them (docs/claims.md draws these conclusions).

The tables come from examples/claims/claims.py; tests/test_docs.py checks that docs/claims.md
shows its current output, and this file checks what the page concludes from it.
"""

from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def claims():
    spec = importlib.util.spec_from_file_location("claims", REPO / "examples" / "claims" / "claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def llama(claims):
    return {row["setup"].split(" (")[0]: row for row in claims.llama_rows()}


def test_paging_and_prefix_reuse_give_vllm_about_three_times_the_pytorch_like_throughput(llama):
    ratio = llama["vLLM single node"]["qps"] / llama["PyTorch-like"]["qps"]
    assert 2.0 < ratio < 4.0                     # the note: 45 / 12 = 3.75x, "up to 3x"


def test_lmcache_and_ceph_do_not_add_the_notes_73_percent_on_one_gpu(llama):
    vllm, tiered = llama["vLLM single node"]["qps"], llama["vLLM + LMCache + Ceph"]["qps"]
    assert abs(tiered / vllm - 1) < 0.15         # the note: 45 -> 78


def test_prefix_reuse_cuts_ttft_but_lmcache_adds_nothing_at_light_load(llama):
    assert llama["PyTorch-like"]["ttft_p50"] > 2.5 * llama["vLLM single node"]["ttft_p50"]
    assert llama["vLLM + LMCache + Ceph"]["ttft_p50"] == pytest.approx(llama["vLLM single node"]["ttft_p50"], rel=0.2)


def test_the_notes_memory_figures_are_below_the_bf16_weights_alone(llama):
    for row in llama.values():
        assert row["weights_gb"] == pytest.approx(26.0, abs=0.1)
        assert row["weights_gb"] > 18 > 14


def test_tiering_cuts_kv_storage_cost_by_more_than_60_percent_but_not_the_whole_bill(claims):
    dram, tiered, hbm = claims.codegen_rows()
    for row in (dram, tiered):
        assert row["tokens_held"] >= claims.CODEGEN_TOKENS
    assert tiered["kv_usd_h"] < 0.4 * dram["kv_usd_h"]
    assert tiered["total_usd_h"] > 0.95 * dram["total_usd_h"]
    assert hbm["kv_usd_h"] > 10 * tiered["total_usd_h"]
