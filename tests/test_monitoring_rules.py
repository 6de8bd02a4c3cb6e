"""Prometheus gets the alerts the spec asks for.

The monitoring role writes the scrape configuration and the alert rules on this machine (package
and service left out); the files must pass `promtool check`, carry the spec's thresholds, and the
alerts must fire on one side of each threshold and not on the other (`promtool test rules` with
made-up series). promtool comes with Debian's prometheus package (/usr/bin/promtool).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml

from kvplan.deploy.stack import build
from kvplan.resolve import resolve
from kvplan.spec import load

from conftest import REPO

pytestmark = pytest.mark.stack

ROLES = REPO / "templates" / "roles"
PROMTOOL = "/usr/bin/promtool"
BIN = Path(sys.executable).parent

# One spec per LMCache mode: their hit-ratio alerts read different counters.
SPECS = {"inprocess": "chat-llama2-13b", "mp": "local"}


def run_role(workdir: Path, role: str, variables: dict) -> ansible_runner.Runner:
    """Apply one role to this machine as kvplan deploys it: variables in group_vars/all."""
    project = workdir / "project"
    (project / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (project / "group_vars" / "all" / "vars.yml").write_text(yaml.safe_dump(variables))
    (project / "play.yml").write_text(yaml.safe_dump(
        [{"name": f"The {role} role on this machine", "hosts": "localhost", "gather_facts": False, "roles": [role]}]))
    r = ansible_runner.run(
        private_data_dir=str(workdir), playbook="play.yml", quiet=True, suppress_env_files=True,
        inventory={"all": {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}},
        # ansible-runner runs whichever ansible-playbook is first on PATH: this virtual environment's
        envvars={"ANSIBLE_ROLES_PATH": str(ROLES), "ANSIBLE_NOCOLOR": "1", "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert r.rc == 0, r.stdout.read()
    return r


@pytest.fixture(scope="module", params=sorted(SPECS.items()), ids=lambda item: f"{item[0]} ({item[1]})")
def written(request, tmp_path_factory):
    """(resolved spec, its monitoring variables, the directory the role wrote the two files into)."""
    mode, example = request.param
    r = resolve(load(REPO / "examples" / f"{example}.yaml"))
    assert r.lmcache.mode == mode
    monitoring = build(r, [f"gpu-{i}" for i in range(r.nodes)], ["10.0.1.11"]).monitoring
    workdir = tmp_path_factory.mktemp(f"monitoring-{example}")
    config_dir = workdir / "prometheus"
    run_role(workdir, "monitoring", monitoring.model_dump() | {
        "monitoring_install": False, "monitoring_service": False, "monitoring_config_dir": str(config_dir)})
    return r, monitoring, config_dir


def _rules(config_dir: Path) -> dict[str, dict]:
    groups = yaml.safe_load((config_dir / "kvplan-rules.yml").read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _threshold(expr: str, op: str) -> float:
    match = re.search(rf"\s{re.escape(op)}\s*([0-9.e+-]+)\s*$", expr)
    assert match, f"{expr!r} does not end in a comparison with {op}"
    return float(match.group(1))


def test_promtool_accepts_both_files(written):
    _, _, config_dir = written
    rules = subprocess.run([PROMTOOL, "check", "rules", str(config_dir / "kvplan-rules.yml")], capture_output=True, text=True)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = subprocess.run([PROMTOOL, "check", "config", str(config_dir / "prometheus.yml")], capture_output=True, text=True)
    assert config.returncode == 0, config.stdout + config.stderr


def test_scrape_config_has_the_rendered_targets(written):
    r, monitoring, config_dir = written
    config = yaml.safe_load((config_dir / "prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] == monitoring.monitoring_scrape_interval
    assert config["rule_files"] == [str(config_dir / "kvplan-rules.yml")]
    jobs = {job["job_name"]: [t for sc in job["static_configs"] for t in sc["targets"]] for job in config["scrape_configs"]}
    assert jobs["vllm"] == monitoring.monitoring_vllm_targets
    assert jobs.get("lmcache", []) == monitoring.monitoring_lmcache_targets
    assert bool(jobs.get("lmcache")) == (r.lmcache.mode == "mp"), "the MP server exports its own /metrics"
    assert jobs.get("ceph", []) == monitoring.monitoring_ceph_targets


def test_alert_thresholds_are_the_specs(written):
    r, _, config_dir = written
    rules, m = _rules(config_dir), r.monitoring
    assert _threshold(rules["KVPlanLMCacheHitRatioLow"]["expr"], "<") == m.min_lmcache_hit_ratio
    assert _threshold(rules["KVPlanKVBlockUtilizationHigh"]["expr"], ">") == m.max_block_utilization
    assert _threshold(rules["KVPlanCephOpLatencyHigh"]["expr"], ">") == pytest.approx(r.ceph.op_latency_alert), \
        "ceph_osd_op_r/w_latency_sum are in seconds, as the spec is"


def test_the_hit_ratio_rule_reads_vllms_prefix_cache_counters_in_both_modes(written):
    # in-process LMCache's num_hit_tokens / num_requested_tokens count only what a retrieve asked for,
    # so that ratio is near 1 whenever anything loads; vLLM's counters are what the simulator's alert uses
    r, _, config_dir = written
    expr = _rules(config_dir)["KVPlanLMCacheHitRatioLow"]["expr"]
    assert expr == ("((sum(rate(vllm:prefix_cache_hits_total[5m])) + sum(rate(vllm:external_prefix_cache_hits_total[5m]))) / "
                    "sum(rate(vllm:prefix_cache_queries_total[5m])))"
                    f" < {r.monitoring.min_lmcache_hit_ratio}")


def _alert_test(rules: dict, alert: str, series: list[dict], fires: bool) -> dict:
    """One `promtool test rules` case: these series for 30 minutes, evaluated at minute 20."""
    rule = rules[alert]
    expected = [{"exp_labels": rule.get("labels", {}), "exp_annotations": rule.get("annotations", {})}] if fires else []
    return {"interval": "1m", "input_series": series,
            "alert_rule_test": [{"eval_time": "20m", "alertname": alert, "exp_alerts": expected}]}


def _hit_series(ratio: float) -> list[dict]:
    """vLLM's prefix-cache counters with `ratio` of the prompt tokens served from a cache: 60 % of the
    hits from its own prefix cache, the rest from LMCache beyond it."""
    queries, hbm = 1000, round(600 * ratio)
    external = round(1000 * ratio) - hbm
    return [
        {"series": 'vllm:prefix_cache_queries_total{model_name="m",engine="0"}', "values": f"0+{queries}x30"},
        {"series": 'vllm:prefix_cache_hits_total{model_name="m",engine="0"}', "values": f"0+{hbm}x30"},
        {"series": 'vllm:external_prefix_cache_queries_total{model_name="m",engine="0"}', "values": f"0+{queries - hbm}x30"},
        {"series": 'vllm:external_prefix_cache_hits_total{model_name="m",engine="0"}', "values": f"0+{external}x30"},
    ]


def _op_series(seconds: float, osds: int = 2) -> list[dict]:
    """Ceph's per-OSD op latency counters (mgr prometheus module): each OSD does 100 reads and 50 writes
    a minute; osd.0's ops take `seconds` each, the other OSDs' a tenth of it."""
    series = []
    for osd in range(osds):
        each = seconds if osd == 0 else seconds / 10
        for kind, ops in (("r", 100), ("w", 50)):
            labels = f'{{ceph_daemon="osd.{osd}"}}'
            series += [{"series": f"ceph_osd_op_{kind}_latency_sum{labels}", "values": f"0+{ops * each}x30"},
                       {"series": f"ceph_osd_op_{kind}_latency_count{labels}", "values": f"0+{ops}x30"}]
    return series


def test_alerts_fire_on_the_far_side_of_each_threshold(written, tmp_path):
    r, _, config_dir = written
    rules, m = _rules(config_dir), r.monitoring
    ceph_op = r.ceph.op_latency_alert
    tests = [
        _alert_test(rules, "KVPlanLMCacheHitRatioLow", _hit_series(m.min_lmcache_hit_ratio - 0.05), fires=True),
        _alert_test(rules, "KVPlanLMCacheHitRatioLow", _hit_series(min(1.0, m.min_lmcache_hit_ratio + 0.05)), fires=False),
        _alert_test(rules, "KVPlanKVBlockUtilizationHigh",
                    [{"series": 'vllm:kv_cache_usage_perc{engine="0"}', "values": f"{m.max_block_utilization + 0.05}x30"}], fires=True),
        _alert_test(rules, "KVPlanKVBlockUtilizationHigh",
                    [{"series": 'vllm:kv_cache_usage_perc{engine="0"}', "values": f"{m.max_block_utilization - 0.05}x30"}], fires=False),
        # the slowest OSD's mean op latency decides, however fast the others are
        _alert_test(rules, "KVPlanCephOpLatencyHigh", _op_series(ceph_op * 2), fires=True),
        _alert_test(rules, "KVPlanCephOpLatencyHigh", _op_series(ceph_op / 2), fires=False),
    ]
    unit = tmp_path / "alerts_test.yml"
    unit.write_text(yaml.safe_dump({"rule_files": [str(config_dir / "kvplan-rules.yml")], "evaluation_interval": "1m",
                                    "tests": tests}))
    result = subprocess.run([PROMTOOL, "test", "rules", str(unit)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
