"""The deployment's Grafana dashboard: each live metric beside the simulator's prediction for the deployed spec,
in the dashboard model Grafana publishes. (tests/test_stack_local.py runs every panel's query on the live stack's
Prometheus.)"""

from __future__ import annotations

import json

import pytest

from conftest import REPO, spec
from kvplan.deploy import ansible_yaml, inventory as inventory_mod
from kvplan.deploy.dashboard import Predicted, dashboard
from kvplan.deploy.render import DASHBOARD, render
from kvplan.deploy.secrets import Secrets
from kvplan.deploy.stack import build
from kvplan.resolve import resolve

pytestmark = pytest.mark.unit

KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")
PREDICTED = Predicted(seed=7, ttft_p50=0.08, ttft_p99=0.21, tpot_p50=0.003, requests_per_s=3.2, cache_share=0.8,
                      lmcache_share=0.25, block_utilisation=0.4, l1_tokens_per_s=900.0, l2_tokens_per_s=120.0,
                      ceph_op_latency=0.004)


def board_of(name: str, predicted: Predicted | None = PREDICTED) -> dict:
    r = resolve(spec(name))
    return dashboard(r, build(r, ["gpu0"], ["ceph0"], ["10.0.0.1"]), predicted)


def lines(board: dict) -> dict[str, dict[str, str]]:
    """panel title -> legend -> query."""
    return {p["title"]: {t["legendFormat"]: t["expr"] for t in p["targets"]} for p in board["panels"]}


def test_every_live_line_has_its_prediction_beside_it():
    shown = lines(board_of("local"))
    assert shown["TTFT"] == {
        "p50 (live)": "histogram_quantile(0.5, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
        "p50 (predicted, seed 7)": "vector(0.08)",
        "p99 (live)": "histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m])))",
        "p99 (predicted, seed 7)": "vector(0.21)"}
    assert shown["Ceph op latency"]["slowest OSD (predicted, seed 7)"] == "vector(0.004)"
    assert shown["LMCache hits by level"]["L2 (nvme, ceph) tokens/s (predicted, seed 7)"] == "vector(120.0)"
    for title, queries in shown.items():
        live = [legend for legend in queries if legend.endswith("(live)")]
        assert len(live) * 2 == len(queries), (title, queries)


def test_the_hit_ratio_is_the_alert_rules_ratio():
    r = resolve(spec("local"))
    stack = build(r, ["gpu0"], ["ceph0"], ["10.0.0.1"])
    [hit_rule] = [rule for rule in stack.monitoring.monitoring_rules["groups"][0]["rules"]
                  if rule["alert"] == "KVPlanLMCacheHitRatioLow"]
    assert f"({lines(board_of('local'))['Prompt tokens from a cache']['any cache (live)']})" in hit_rule["expr"]


def test_panels_appear_only_for_the_parts_the_spec_deploys():
    local = set(lines(board_of("local")))
    assert {"LMCache hits by level", "Ceph op latency"} <= local          # MP mode, a ceph tier
    plain = spec("local")
    no_ceph = plain.model_copy(update={"ceph": None, "lmcache": plain.lmcache.model_copy(update={"ceph": None})})
    r = resolve(no_ceph)
    assert "Ceph op latency" not in lines(dashboard(r, build(r, ["gpu0"], [], ["10.0.0.1"]), PREDICTED))


def test_without_a_simulation_the_dashboard_says_so_and_draws_no_prediction():
    board = board_of("local", predicted=None)
    assert "no prediction" in board["description"]
    assert not [legend for queries in lines(board).values() for legend in queries if "predicted" in legend]


def test_the_dashboard_is_the_model_grafana_publishes():
    """Every key kvplan writes survives a round trip through Grafana's own dashboard types (grafana-foundation-sdk,
    generated from Grafana 11.6's schema), which drop what the schema does not know."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    board = board_of("local")
    again = json.loads(JSONEncoder().encode(Dashboard.from_json(board)))

    def kept(ours, theirs, path="dashboard"):
        if isinstance(ours, dict):
            assert isinstance(theirs, dict), path
            for key, value in ours.items():
                assert key in theirs, f"{path}.{key} is not in Grafana's dashboard model"
                kept(value, theirs[key], f"{path}.{key}")
        elif isinstance(ours, list):
            assert isinstance(theirs, list) and len(theirs) == len(ours), path
            for i, (a, b) in enumerate(zip(ours, theirs)):
                kept(a, b, f"{path}[{i}]")
        else:
            assert ours == theirs, (path, ours, theirs)

    kept(board, again)
    with pytest.raises(AssertionError, match="not in Grafana's dashboard model"):     # the check is not blind
        kept({**board, "panelz": []}, again)


def test_the_render_writes_it_to_import_and_for_the_monitoring_role(tmp_path):
    root = render(resolve(spec("local")), inventory_mod.load(REPO / "inventories" / "local"), tmp_path / "run", KEYS,
                  PREDICTED).root
    board = json.loads((root / DASHBOARD).read_text())
    role_vars = ansible_yaml.load((root / "project" / "group_vars" / "all" / "monitoring.yml").read_text())
    assert role_vars["monitoring_dashboard"] == board
    assert board["templating"]["list"][0] == {"type": "datasource", "name": "datasource", "label": "Prometheus",
                                              "query": "prometheus"}
    assert all(p["datasource"]["uid"] == "${datasource}" for p in board["panels"])
