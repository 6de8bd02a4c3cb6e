"""docs/disaggregation-measured.md is what the public measurements of disaggregated serving and kvplan's prediction
of them give (kvplan.gpufit.pd_measured): every published figure is read, every arm kvplan can express becomes the
published configuration, the one it cannot is shown with its reason, and the page is regenerated from them."""

from __future__ import annotations

import os

import pytest

from conftest import REPO
from kvplan.gpufit import pd_measured as pd
from kvplan.gpufit import pd_report
from kvplan.gpufit.pd_measured import Key

DOC = REPO / "docs" / "disaggregation-measured.md"


def test_every_published_arm_is_read_with_the_figures_its_source_printed():
    measured = pd.measured(pd.data())
    mooncake = {k for k in measured if k.source == "mooncake-vllm-a10"}
    assert len(mooncake) == 15                                   # five scenarios, three published arms each
    assert measured[Key("mooncake-vllm-a10", "in1024-qps2", "disaggregated")]["ttft_mean"] == 1272.55
    dynamo = measured[Key("dynamo-vllm-llama70b-h100", "in3000-out150", "aggregated")]
    assert set(dynamo) == {"ttft_mean", "tpot_mean", "output_tps_per_gpu"}   # what genai-perf's table gave


def test_each_source_cites_repository_commit_path_and_licence():
    for src in pd.data()["sources"]:
        s = src["source"]
        assert s["repository"].startswith("https://github.com/") and len(s["commit"]) == 40
        assert s["path"] and s["licence"] and s["section"]
        assert src["id"] in pd.ASSUMPTIONS and src["id"] in pd.SPECS


def test_the_disaggregated_arm_is_the_published_split_of_pools():
    d = pd.data()
    body = pd.spec(d, Key("dynamo-vllm-llama70b-h100", "in3000-out150", "disaggregated"))
    pools = body["serving"]["disaggregation"]
    assert (pools["prefill"]["instances"], pools["prefill"]["tensor_parallel"]) == (4, 2)
    assert (pools["decode"]["instances"], pools["decode"]["tensor_parallel"]) == (1, 8)
    assert body["workload"]["arrivals"] == {"concurrency": 48} and body["workload"]["requests"] == 480
    agg = pd.spec(d, Key("dynamo-vllm-llama70b-h100", "in3000-out150", "aggregated"))
    assert "disaggregation" not in agg["serving"] and agg["serving"]["tensor_parallel"] == 4


def test_an_arm_kvplan_cannot_express_is_refused_with_its_reason_not_dropped():
    d = pd.data()
    key = Key("mooncake-vllm-a10", "in256-qps2", "aggregated_unchunked")
    assert key in pd.measured(d)
    with pytest.raises(ValueError, match="always chunks"):
        pd.spec(d, key)
    assert "aggregated_unchunked | ttft_mean | 63.68 | not expressible" in DOC.read_text()


def test_the_verdict_is_read_from_each_pair_in_the_metric_s_own_direction():
    assert pd.pd_better("ttft_mean", aggregated=429.37, disaggregated=1272.55) is False
    assert pd.pd_better("tpot_p50", aggregated=34.80, disaggregated=12.46) is True
    assert pd.pd_better("output_tps_per_gpu", aggregated=56.26, disaggregated=87.56) is True


def test_the_page_is_what_the_measurements_and_the_simulator_give():
    text = pd_report.document()
    if os.environ.get("KVPLAN_UPDATE_DOCS") == "1":
        DOC.write_text(text)
    assert DOC.read_text() == text, \
        "docs/disaggregation-measured.md is stale: KVPLAN_UPDATE_DOCS=1 rewrites it (or python -m " \
        "kvplan.gpufit.pd_report --write docs/disaggregation-measured.md)"
    assert "median absolute error" in text and "comparisons" in text
