"""After a simulation that missed its SLO or left a tier idle, kvplan says what to run next."""

from __future__ import annotations

from conftest import spec
from kvplan.report.next_steps import next_steps
from kvplan.resolve import resolve
from kvplan.sim.run import run


def test_a_missed_slo_names_the_targets_and_the_commands_that_answer_it():
    result = run(resolve(spec("local", workload__requests=60, slo={"ttft_p99": "1ms"})))
    lines = next_steps("examples/local.yaml", result)
    assert lines[0].startswith("next: the SLO is missed (ttft_p99 ")
    assert any(line.lstrip().startswith("kvplan size examples/local.yaml") for line in lines)
    assert any("kvplan plan examples/local.yaml --rate " in line and "--slo ttft_p99=1.0ms" in line for line in lines)
    assert any("--ablate --seeds 3" in line for line in lines)


def test_a_tier_that_served_nothing_is_named():
    result = run(resolve(spec("local", workload__requests=60, workload__shared_prefixes=None, workload__sessions=None,
                              workload__arrivals={"rate": "1/s"},
                              slo={"ttft_p99": "60s"})))
    idle = [t.name for t in result.tiers if t.name != "hbm" and t.served_tokens == 0]
    assert idle, "no reuse at all: the offload tiers serve nothing"
    assert f"the {idle[0]}" in next_steps("x.yaml", result)[0]


def test_a_run_that_meets_its_slo_with_every_tier_serving_needs_no_advice():
    result = run(resolve(spec("local", workload__requests=60, lmcache=None, ceph=None, slo={"ttft_p99": "60s"})))
    assert next_steps("x.yaml", result) == []


def test_a_trace_is_pointed_at_capacity_not_at_the_planner():
    result = run(resolve(spec("local", workload__requests=60, slo={"ttft_p99": "1ms"})))
    lines = next_steps("trace.yaml", result, trace=True)
    assert any(line.lstrip().startswith("kvplan capacity trace.yaml") for line in lines)
    assert not any("kvplan plan" in line for line in lines), "the planner refuses a trace: it sets its own rate"
