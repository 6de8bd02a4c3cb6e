"""Planning disaggregated serving (issue 51): plan searches prefill:decode splits beside aggregated candidates,
capacity and sweep take a disaggregated spec, and doctor says whether disaggregation pays, proven by simulation.

The planner considers splits of the same accelerators (each pool's TP from the ladder, the decode pool's a multiple
of the prefill pool's, the instance counts together at most --max-instances) when the SLO has a TPOT target, the
one figure a decode pool without prefills improves; `--disaggregated on|only|off` says otherwise.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from kvplan.doctor import diagnose, simulated_case
from kvplan.errors import SpecError
from kvplan.plan import pools
from kvplan.plan.bounds import at_rate, floors
from kvplan.plan.search import plan
from kvplan.report.plan import disaggregation_verdict, plan_json
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping

from conftest import REPO, with_changes

LONG_PROMPTS = {
    "name": "long-prompts", "model": "Llama-3.1-70B",
    "serving": {"gpu": "H100-SXM", "max_model_len": 16384, "tensor_parallel": 4},
    "workload": {"kind": "rag", "seed": 7, "requests": 200, "arrivals": {"process": "poisson", "rate": "2/s"},
                 "prompt": {"dist": "lognormal", "mean": 6000, "cv": 0.4, "max": 16000},
                 "output": {"dist": "lognormal", "mean": 200, "cv": 0.5, "max": 800}},
    "slo": {"ttft_p99": "2s", "tpot_p99": "30ms"},
}
"""Llama-3.1-70B on H100s, 6,000-token prompts and a tight TPOT target: where a decode pool without prefills pays."""

EXAMPLE = REPO / "docs" / "examples" / "disaggregated.yaml"


def spec(**changes):
    return from_mapping(with_changes(LONG_PROMPTS, **changes))


@pytest.fixture(scope="module")
def long_prompt_plan():
    return plan(spec(), 2.0, gpus=["H100-SXM"], max_instances=4)


# ---------------------------------------------------------------------------------------------- plan

def test_with_long_prompts_and_a_tight_tpot_target_a_split_of_the_same_gpus_wins_for_less(long_prompt_plan):
    p = long_prompt_plan
    assert p.considered.aggregated and p.considered.disaggregated and "TPOT target" in p.considered.why
    winner = p.winner
    d = winner.resolved.disaggregation
    assert d is not None, "a decode pool without prefills meets 30 ms where aggregated batches need more GPUs"
    assert winner.describe()["accelerator"] == pools.accelerators(winner.resolved)
    assert winner.describe()["accelerator"].startswith("P ") and " + D " in winner.describe()["accelerator"]
    aggregated = [c for c in p.candidates if c.status in ("alternative", "meets SLO") and c.resolved.disaggregation is None]
    assert aggregated and min(c.usd_per_hour for c in aggregated) > winner.usd_per_hour
    verdict = disaggregation_verdict(p)
    assert verdict.startswith("pays: ") and f"${winner.usd_per_hour:,.2f}/h" in verdict
    assert "less than the cheapest aggregated candidate meeting it" in verdict
    # the cheaper aggregated ones miss the TPOT target, the reason the split wins
    assert any(c.resolved.disaggregation is None and c.status == "missed SLO" and "TPOT" in c.reason
               and c.usd_per_hour < winner.usd_per_hour for c in p.candidates)


def test_the_plan_json_names_each_candidates_pools_and_the_verdict(long_prompt_plan):
    data = plan_json(long_prompt_plan)
    assert data["disaggregated"]["disaggregated_searched"] and data["disaggregated"]["verdict"].startswith("pays")
    winner = next(c for c in data["candidates"] if c["index"] == data["winner"])
    assert winner["disaggregation"]["connector"] == "nixl"
    assert {"accelerator", "tensor_parallel", "instances"} <= set(winner["disaggregation"]["prefill"])
    assert all(c["disaggregation"] is None for c in data["candidates"] if not c["choices"]["accelerator"].startswith("P "))


def test_every_split_keeps_to_the_ladder_and_max_instances(long_prompt_plan):
    for c in long_prompt_plan.candidates:
        d = c.resolved.disaggregation
        if d is None:
            continue
        assert d.decode.tensor_parallel % d.prefill.tensor_parallel == 0, "each decode rank reads one prefill rank"
        assert d.prefill.instances + d.decode.instances <= 4
        assert d.prefill.device.name == d.decode.device.name == "H100-SXM"


def test_the_winner_written_by_plan_validates_and_simulates_as_planned(long_prompt_plan, tmp_path):
    from kvplan.plan.search import winner_yaml

    path = tmp_path / "winner.yaml"
    path.write_text(winner_yaml(long_prompt_plan.winner, long_prompt_plan))
    written = from_mapping(yaml.safe_load(path.read_text()))
    assert written.serving.disaggregation == long_prompt_plan.winner.topo.serving.disaggregation
    assert not written.simulate_only and written.lmcache is None, "NixlConnector pools without tiers deploy"
    assert run(resolve(written)).disaggregation is not None


def test_a_pd_floor_never_exceeds_what_the_candidate_simulates(long_prompt_plan):
    p = long_prompt_plan
    base, _, stats = at_rate(spec(), p.judged_rate, p.slo, p.seeds[0])
    for c in [c for c in p.candidates if c.resolved.disaggregation is not None and c.measured and not c.stopped][:3]:
        bound = floors(c.resolved, stats, p.slo)
        for key, value in bound.latency.items():
            assert value <= c.measured[key], (c.index, key, value, c.measured[key])


def test_without_a_tpot_target_no_split_is_considered_and_the_plan_is_the_one_before():
    ttft_only = spec(slo={"ttft_p99": "2s"})
    auto = plan(ttft_only, 2.0, gpus=["H100-SXM"], max_instances=3, limits=False)
    off = plan(ttft_only, 2.0, gpus=["H100-SXM"], max_instances=3, limits=False, disaggregated="off")
    assert not auto.considered.disaggregated and "no TPOT target" in auto.considered.why
    assert all(c.resolved.disaggregation is None for c in auto.candidates)
    strip = lambda data: {k: v for k, v in data.items() if k != "disaggregated"}
    assert strip(plan_json(auto)) == strip(plan_json(off))


@pytest.mark.parametrize("mode, aggregated, split", [("on", True, True), ("only", False, True), ("off", True, False)])
def test_the_flag_says_which_candidates_are_searched(mode, aggregated, split):
    p = plan(spec(slo={"ttft_p99": "3s"}), 1.0, gpus=["H100-SXM"], max_instances=2, limits=False, disaggregated=mode)
    kinds = {c.resolved.disaggregation is not None for c in p.candidates}
    assert (True in kinds, False in kinds) == (split, aggregated)


@pytest.mark.parametrize("key", ["tpot_p50", "tpot_p90", "tpot_p99"])
def test_any_tpot_target_brings_the_splits_in(key):
    topo = spec(slo={"ttft_p99": "2s", key: "30ms"})
    assert pools.considered(topo, topo.slo, "auto").disaggregated


def test_a_spec_with_native_offloading_gets_no_split_and_is_told_why():
    native = spec(serving__kv_offloading={"size": "64GiB"})
    assert "native connector" in pools.considered(native, native.slo, "auto").why
    with pytest.raises(SpecError) as err:
        pools.considered(native, native.slo, "only")
    assert err.value.problems[0].path == "serving.kv_offloading"


def test_a_bad_flag_value_names_the_flag_and_the_choices():
    done = subprocess.run([sys.executable, "-m", "kvplan", "plan", str(EXAMPLE), "--rate", "2/s", "--disaggregated",
                           "maybe"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 1 and "--disaggregated" in done.stderr and "auto, on, only, off" in done.stderr, done.stderr


def test_a_disaggregated_spec_is_planned_from_both_sides():
    p = plan(from_mapping(yaml.safe_load(EXAMPLE.read_text())), 2.0, gpus=["H100-SXM"], max_instances=3, limits=False)
    assert "the spec is disaggregated" in p.considered.why
    assert {c.resolved.disaggregation is None for c in p.candidates} == {True, False}


# ---------------------------------------------------------------------------------------------- capacity and sweep

def test_capacity_bisects_a_disaggregated_spec_from_a_start_that_misses():
    done = subprocess.run([sys.executable, "-m", "kvplan", "capacity", str(EXAMPLE), "--seeds", "1", "--no-cache"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "probe  1     2 req/s" in done.stdout and "MISSED" in done.stdout, "the example's own rate misses its TTFT"
    assert "\n met " in done.stdout and "\n missed " in done.stdout


def test_sweep_varies_the_prefill_decode_ratio():
    done = subprocess.run([sys.executable, "-m", "kvplan", "sweep", str(EXAMPLE), "--vary",
                           "serving.disaggregation.prefill.instances=1,3", "--no-cache", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    import json

    points = json.loads(done.stdout)["points"]
    one, three = (p["metrics"]["ttft_p99"]["mean"] for p in points)
    assert three < one, "three prefill instances queue prompts less than one"


# ---------------------------------------------------------------------------------------------- doctor

def _diagnosis(topo):
    r = resolve(topo)
    seeds = [topo.workload.seed + i for i in range(3)]          # as kvplan doctor: a fix is tested on 3 seeds
    case = simulated_case(topo, r, topo.model_dump(mode="json", exclude_unset=True), None, seeds)
    return diagnose(case)


def _fix(diagnosis, start: str):
    return next(fix for f in diagnosis.findings for fix in f.fixes if fix.summary.startswith(start))


def test_doctor_weighs_the_same_gpus_disaggregated_against_a_missed_tpot_target():
    topo = spec(serving__instances=2)
    fix = _fix(_diagnosis(topo), "disaggregated: the same 8 GPUs as 1 prefill instance(s) of TP 4 and 1 decode")
    assert fix.proof is not None and fix.proof.verdict not in ("refused", "untested")
    tpot = next(c for c in fix.proof.slo if c.key == "tpot_p99")
    assert tpot.met, "no prefill in the decode batches: TPOT within 30 ms"
    assert any(c.path == "serving.disaggregation" for c in fix.changes)
    assert {c.path for c in fix.changes if c.value is None} >= {"serving.instances", "serving.tensor_parallel"}


def test_doctor_weighs_a_disaggregated_spec_merged_back_and_aims_pool_fixes_at_their_pool():
    topo = from_mapping(with_changes(yaml.safe_load(EXAMPLE.read_text()), slo={"ttft_p99": "2s", "tpot_p99": "15ms"}))
    diagnosis = _diagnosis(topo)
    merged = _fix(diagnosis, "aggregated: the same 8 GPUs as 2 instance(s) of TP 4")
    assert merged.proof.verdict != "refused"
    paths = {c.path for f in diagnosis.findings for fix in f.fixes for c in fix.changes}
    assert "serving.disaggregation.decode.instances" in paths and "serving.disaggregation.prefill.instances" in paths
    assert "serving.instances" not in {c.path for f in diagnosis.findings for fix in f.fixes
                                       if not fix.summary.startswith("aggregated") for c in fix.changes}


def test_doctor_gives_no_split_to_a_spec_with_native_offloading():
    from kvplan.doctor.disaggregation import shape_fixes

    topo = spec(serving__instances=2, serving__kv_offloading={"size": "64GiB"})
    r = resolve(topo)
    case = simulated_case(topo, r, topo.model_dump(mode="json", exclude_unset=True), None, [7])
    assert shape_fixes(case, "tpot_p99") == []



def test_a_warm_started_disaggregated_spec_warms_the_prefill_pools_tiers():
    """doctor's split of a warm-started spec with LMCache tiers crashed: the warm-up fed an instance per request of
    both pools, and the tiers are the prefill pool's (kvplan.sim.warm)."""
    topo = from_mapping({**yaml.safe_load((REPO / "docs" / "examples" / "walkthrough" / "sre-chat-peak.yaml").read_text()),
                         "simulate_only": True})
    data = topo.model_dump(mode="json", exclude_unset=True)
    data["serving"] = pools.disaggregated_serving(data["serving"], topo.serving.gpu, (1, 6, 1, 2))
    split = from_mapping(with_changes(data, workload__requests=200))
    result = run(resolve(split))
    assert result.warm_start and result.disaggregation is not None
    assert sum(t.served_tokens for t in result.tiers if t.name != "hbm") > 0, "the warmed tiers serve prompts"
