"""The planner: cheapest topology that meets an SLO at a rate, and why every other one lost.

The runs start from examples/local.yaml (one CPU-only node, a tiny model, ddr/nvme/ceph tiers)
with 120 requests, so a whole plan simulates a handful of candidates in a few seconds.
"""

from __future__ import annotations

import pytest
import yaml

from kvplan.errors import SpecError
from kvplan.plan.search import parse_budget_arg, parse_rate_arg, plan, simulate_all, winner_yaml
from kvplan.report.plan import plan_json, search_verdict
from kvplan.spec.slo import parse_slo_flags
from kvplan.spec import from_mapping

from conftest import REPO, spec

SLO = parse_slo_flags(["ttft_p99=300ms"])


def local():
    return spec("local", workload__requests=120)


class Counting:
    """The planner's simulate function, counting the topologies it is asked to run."""

    def __init__(self):
        self.topologies = []

    def __call__(self, topos, seeds, workers):
        self.topologies += topos
        return simulate_all(topos, seeds, workers)


@pytest.fixture(scope="module")
def planned():
    sim = Counting()
    return plan(local(), rate=32.0, slo=SLO, simulate=sim), sim


def test_the_winner_meets_the_slo_and_is_the_cheapest_simulated_candidate_that_does(planned):
    result, _ = planned
    winner = result.winner
    assert winner is not None and winner.measured["ttft_p99"] <= 0.3
    feasible = [c for c in result.candidates if c.measured and c.measured["ttft_p99"] <= 0.3]
    assert min(c.usd_per_hour for c in feasible) == winner.usd_per_hour
    assert 1 <= len(result.alternatives) <= 3
    assert all(a.usd_per_hour >= winner.usd_per_hour for a in result.alternatives)


def test_every_loser_says_why(planned):
    result, _ = planned
    for c in result.candidates:
        assert c.status and c.reason, f"#{c.index} has no verdict"
    cheaper = [c for c in result.candidates if c.status == "missed SLO" and c.usd_per_hour <= result.winner.usd_per_hour]
    assert cheaper and all(c.reason.startswith("cheaper, but p99 TTFT") and "> 300.0 ms" in c.reason for c in cheaper)
    # nothing cheaper than the winner was skipped without a reason found before simulating
    for c in result.candidates:
        if c.usd_per_hour < result.winner.usd_per_hour:
            assert c.status in ("missed SLO", "pruned", "dominated"), (c.index, c.status)


def test_pruning_happens_before_simulation(planned):
    result, sim = planned
    simulated = {id(t) for t in sim.topologies}
    assert len(sim.topologies) == result.simulations < len(result.candidates) / 20
    for c in result.candidates:
        if c.status in ("dominated", "over budget", "not simulated"):
            assert id(c.topo) not in simulated and not c.measured
    # tiers the 120 requests never fill behave like smaller ones: the larger ones are dominated
    assert any(c.status == "dominated" and "never fill" in c.reason for c in result.candidates)


def test_a_policy_twin_of_a_candidate_that_meets_the_slo_is_not_simulated():
    """Tiers small enough to fill (ddr 8 MiB) make each eviction policy a distinct candidate; once one
    of them meets the SLO, the others buy the same hardware at the same price and are not simulated."""
    sim = Counting()
    result = plan(spec("local", workload__requests=120, lmcache__ddr__size="8MiB"), rate=32.0, slo=SLO, simulate=sim,
                  limits=False)
    twins = [c for c in result.candidates if "another eviction policy" in c.reason]
    assert twins
    simulated = {id(t) for t in sim.topologies}
    by_index = {c.index: c for c in result.candidates}
    for c in twins:
        met = by_index[int(c.reason.split("#")[1].split(",")[0])]
        assert c.status == "not simulated" and id(c.topo) not in simulated
        assert met.status in ("winner", "alternative") and met.usd_per_hour == pytest.approx(c.usd_per_hour)
        assert met.describe()["eviction"] != c.describe()["eviction"]
        assert {k: v for k, v in met.describe().items() if k != "eviction"} == \
            {k: v for k, v in c.describe().items() if k != "eviction"}


def test_a_rate_no_candidate_can_sustain_is_pruned_by_the_roofline_without_simulating():
    sim = Counting()
    result = plan(local(), rate=400.0, slo=SLO, max_instances=2, simulate=sim, limits=False)
    assert result.winner is None and sim.topologies == []
    assert all(c.reason.startswith("pruned: cannot reach") or c.status == "dominated" for c in result.candidates)


def test_the_planner_tries_only_the_accelerators_it_can_time_unless_one_is_named():
    """MI300X has no step-time coefficients in the catalog: plan leaves it out of the alternatives it picks
    itself, and asked for by name, it says what the spec must bring."""
    sim = Counting()
    result = plan(spec("chat-llama2-13b"), rate=10000.0, slo=SLO, max_instances=1, simulate=sim, limits=False)
    tried = {c.resolved.device.name for c in result.candidates}
    assert {"H100-SXM", "H100-NVL", "GB200"} <= tried and "MI300X" not in tried and sim.topologies == []
    with pytest.raises(SpecError) as exc:
        plan(spec("chat-llama2-13b"), rate=10000.0, slo=SLO, max_instances=1, gpus=["MI300X"], simulate=sim,
             limits=False)
    text = exc.value.render()
    assert "no efficiency block for MI300X" in text and "serving.step_model.compute_efficiency" in text


def test_a_budget_leaves_out_what_costs_more():
    result = plan(local(), rate=32.0, slo=SLO, budget=0.2, simulate=Counting(), limits=False)
    assert all(c.status == "over budget" and c.reason.startswith("over budget")
               for c in result.candidates if c.usd_per_hour > 0.2)
    # hardware whose accelerators alone cost more is not even validated, only counted
    assert result.over_budget_unpriced > 0
    assert all(c.cost.tier("hbm").usd_per_hour <= 0.2 for c in result.candidates), "no candidate on dearer hardware"
    assert result.winner is None                        # one node is not enough at 32 req/s


def test_the_winner_is_a_valid_spec_that_round_trips(planned, tmp_path):
    result, _ = planned
    text = winner_yaml(result.winner, result, local())
    again = from_mapping(yaml.safe_load(text))
    assert again.model_copy(update={"description": result.winner.topo.description}) == result.winner.topo
    assert again.workload.arrivals.session_rate == pytest.approx(result.winner.topo.workload.arrivals.session_rate)
    assert again.slo.ttft_p99 == 0.3 and not again.simulate_only


def test_the_winner_is_written_as_a_person_would_write_it(planned):
    result, _ = planned
    text = winner_yaml(result.winner, result, local())
    written = yaml.safe_load(text)
    size = written["lmcache"]["ddr"]["size"]
    assert isinstance(size, str) and size[-1] == "B", "a tier size in human units, not bytes"
    assert written["serving"]["activation_memory"] == "4GiB"
    assert "gpu_memory_utilization" not in written["serving"], "a field at its default is left out"
    assert written["slo"]["ttft_p99"] == "300ms"
    description = written["description"]
    # --rate counts requests; the winner carries the new sessions/s that offer them, named so
    sessions = written["workload"]["arrivals"]["session_rate"]
    assert sessions.endswith("sessions/s") and "rate" not in written["workload"]["arrivals"]
    assert float(sessions.removesuffix("sessions/s")) == pytest.approx(result.session_rate)
    assert (plan_json(result)["rate"], plan_json(result)["session_rate"]) == (32.0, result.session_rate)
    assert description.startswith("kvplan plan's cheapest topology for 'local' at 32 req/s, judged with 25% headroom "
                                  f"at 40 req/s ({result.session_rate:.4g} new sessions/s): ")
    assert f"${result.winner.usd_per_hour:,.2f}/h" in description and "p99 TTFT" in description


def test_the_same_seed_gives_the_same_plan(planned):
    again = plan(local(), rate=32.0, slo=SLO, simulate=Counting(), limits=False)
    first, _ = planned
    assert [(c.status, c.reason, c.measured) for c in again.candidates] == \
           [(c.status, c.reason, c.measured) for c in first.candidates]


def test_bad_targets_name_the_flag_and_the_fix():
    with pytest.raises(SpecError) as exc:
        parse_slo_flags(["ttft_p98=500ms", "tpot_p99=fast"])
    unknown, bad = exc.value.problems
    assert (unknown.path, unknown.fix) == ("--slo", "did you mean 'ttft_p99=500ms'?")
    assert bad.path == "--slo tpot_p99" and "500ms" in bad.fix
    with pytest.raises(SpecError, match="--rate"):
        parse_rate_arg("fast")
    with pytest.raises(SpecError, match="--rate"):
        parse_rate_arg("0/s")


def test_a_bare_number_for_a_latency_or_a_rate_is_refused_with_the_units_to_write():
    # 1000 what? 1000 s would plan against a target no one meant: the unit is asked for, both ways shown
    with pytest.raises(SpecError) as exc:
        parse_slo_flags(["ttft_p99=1000"])
    [bare] = exc.value.problems
    assert bare.path == "--slo ttft_p99" and bare.fix == "write --slo ttft_p99=1000ms or --slo ttft_p99=1000s"
    with pytest.raises(SpecError) as exc:
        parse_rate_arg("20")
    assert exc.value.problems[0].fix == "write it like --rate 20/s (requests per second)"
    # --rate counts requests, whatever the workload: a rate of sessions is not one
    with pytest.raises(SpecError, match="counts sessions"):
        parse_rate_arg("5sessions/s")
    assert parse_rate_arg("20req/s") == parse_rate_arg("1200/min") == 20.0


def test_a_bare_slo_number_in_a_spec_file_is_refused_like_the_flag(tmp_path):
    from kvplan.spec import load

    data = yaml.safe_load((REPO / "examples" / "local.yaml").read_text())
    data["slo"] = {"ttft_p99": 1000, "tpot_p99": "50ms"}
    path = tmp_path / "bare.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as exc:
        load(path)
    [bare] = exc.value.problems
    assert (bare.path, bare.fix) == ("slo.ttft_p99", "write slo.ttft_p99: 1000ms or slo.ttft_p99: 1000s")
    assert parse_budget_arg("100/h") == 100.0 and parse_budget_arg("2400/day") == 100.0


def test_the_cli_reports_bad_input_with_exit_1(tmp_path):
    from typer.testing import CliRunner

    from kvplan.cli import app

    result = CliRunner().invoke(app, ["plan", "examples/local.yaml", "--rate", "8/s", "--slo", "latency=1s"])
    assert result.exit_code == 1
    assert "--slo: unknown SLO key 'latency'" in result.output and "fix:" in result.output


def test_a_search_cut_short_says_what_it_could_have_missed():
    cut = plan(local(), rate=32.0, slo=SLO, max_runs=1, simulate=Counting(), limits=False)
    full = plan(local(), rate=32.0, slo=SLO, simulate=Counting(), limits=False)
    assert full.unsearched == [] and search_verdict(full).startswith("complete")
    assert cut.unsearched, "one run cannot decide this plan"
    bound = cut.winner.usd_per_hour if cut.winner else float("inf")
    assert all(c.status == "not simulated" and c.usd_per_hour < bound for c in cut.unsearched)
    assert full.winner.usd_per_hour < bound, "what the cut-short search missed is real"
    verdict = search_verdict(cut)
    assert verdict.startswith("cut short by --max-runs") and f"${cut.unsearched[0].usd_per_hour:,.2f}/h" in verdict


def test_progress_is_reported_after_every_batch():
    seen = []
    result = plan(local(), rate=32.0, slo=SLO, simulate=Counting(), progress=lambda *a: seen.append(a), limits=False)
    runs = [r for r, _, _ in seen]
    assert runs == sorted(runs) and runs[-1] == result.simulations and all(most == 200 for _, most, _ in seen)
    best = [b for _, _, b in seen if b is not None]
    assert best and best[-1].usd_per_hour >= result.winner.usd_per_hour


def test_alternatives_differ_in_what_a_team_buys_not_only_in_eviction_policy(planned):
    result, _ = planned
    chosen = [result.winner, *result.alternatives]
    bought = [(c.resolved.device.name, c.resolved.instances, c.describe()["ddr"], c.describe()["nvme"],
               c.describe()["ceph"]) for c in chosen]
    assert len(set(bought)) == len(bought), bought


def test_piped_the_cli_prints_a_line_per_batch_and_warns_of_a_cut_short_search():
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from conftest import REPO

    kvplan = str(Path(sys.executable).parent / "kvplan")
    done = subprocess.run([kvplan, "plan", "examples/local.yaml", "--rate", "32/s", "--slo", "ttft_p99=300ms",
                           "--max-runs", "1"], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "120"})
    line = re.search(r"plan: (\d+) runs \(--max-runs 1\); cheapest meeting the SLO so far:", done.stderr)
    assert line, done.stderr
    assert f"warning: the search was cut short by --max-runs after {line.group(1)} runs" in done.stderr


def test_a_candidate_that_certainly_misses_is_stopped_early_with_the_same_verdict(planned, tmp_path):
    """With one seed the planner stops a run once its miss is certain (kvplan.sim.slo_watch): every
    verdict is the one the finished runs gave, and a stopped candidate shows a lower bound."""
    full, _ = planned
    early = plan(local(), rate=32.0, slo=SLO, limits=False)
    assert [(c.index, c.status) for c in early.candidates] == [(c.index, c.status) for c in full.candidates]
    stopped = [c for c in early.candidates if c.stopped is not None]
    assert stopped, "the cheaper candidates cannot keep up at 32 req/s: their runs stop early"
    finished = {c.index: c for c in full.candidates}
    for c in stopped:
        value = finished[c.index].measured[c.stopped.key]
        assert value >= c.measured[c.stopped.key] > 0.3
        assert c.stopped.finished < c.stopped.requests and "(stopped: " in c.reason
    for c in early.candidates:
        if c.stopped is None and c.measured:
            assert c.measured == finished[c.index].measured      # runs that were not stopped are the same runs


def test_a_repeated_plan_takes_its_runs_from_the_cache(tmp_path, monkeypatch):
    import kvplan.sweep.cache as run_cache

    simulated = []
    real = run_cache.run_tasks
    monkeypatch.setattr(run_cache, "run_tasks", lambda tasks, **kw: simulated.extend(tasks) or real(tasks, **kw))
    cache = run_cache.RunCache(tmp_path)
    first = plan(local(), rate=32.0, slo=SLO, cache=cache, limits=False)     # the search's runs only
    files = [p.name for p in cache.folder.iterdir() if not p.name.startswith("workload-")]
    assert len(simulated) == first.simulations == len(files)
    assert any("-miss-" in name for name in files), "a stopped run is kept as its miss"
    assert len(list(cache.folder.glob("workload-*.json"))) == 1, "what the bounds measured of the workload is kept"
    import kvplan.plan.bounds

    monkeypatch.setattr(kvplan.plan.bounds, "workload_stats", lambda *a: pytest.fail("the workload was measured again"))
    again = plan(local(), rate=32.0, slo=SLO, cache=cache, limits=False)
    assert len(simulated) == first.simulations             # the repeat simulated nothing
    assert [(c.status, c.reason, c.measured) for c in again.candidates] == \
           [(c.status, c.reason, c.measured) for c in first.candidates]


def test_hardware_too_dear_to_matter_is_never_validated_and_really_costs_more(planned):
    """Combinations are priced by their accelerators first: those whose accelerators alone cost more than
    the winner and its alternatives are left out unvalidated, and each of them, priced in full, does."""
    from kvplan.catalog import load_catalog
    from kvplan.cost import cost_of
    from kvplan.plan.bounds import at_rate
    from kvplan.plan.space import variants
    from kvplan.resolve import resolve

    result, _ = planned
    assert result.not_enumerated > 0
    found = [result.winner, *result.alternatives]
    assert max(c.usd_per_hour for c in found) < result.not_enumerated_from
    catalog, topo = load_catalog(), local()
    base, _, _ = at_rate(topo, 32.0, SLO, topo.workload.seed)
    enumerated = {c.index for c in result.candidates}
    left_out = [v for i, v in enumerate(variants(base, topo, catalog, None, 8)) if i not in enumerated]
    assert len(left_out) >= result.not_enumerated
    for spec in left_out[::7]:
        try:
            t = from_mapping(spec)
            cost = cost_of(t, resolve(t, catalog), catalog=catalog).usd_per_hour
        except SpecError:
            continue                                    # an invalid combination (counted when enumerated)
        assert cost >= result.not_enumerated_from


def _chat_groups(groups: int):
    from kvplan.catalog import load_catalog
    from kvplan.plan.bounds import at_rate
    from kvplan.plan.space import hardware_groups, variants

    catalog, topo = load_catalog(), spec("chat-llama2-13b")
    base, _, _ = at_rate(topo, 4.0, topo.slo, topo.workload.seed)
    return catalog, base, hardware_groups(variants(base, topo, catalog, None, 8), topo, catalog)[:groups]


def test_combinations_validated_section_by_section_are_the_specs_validated_whole():
    """The planner validates each distinct serving, LMCache and Ceph section once (kvplan.plan.space.Specs):
    every combination comes out as the very spec `from_mapping` makes of it, and an invalid one fails alike."""
    from kvplan.plan.space import Specs

    catalog, base, groups = _chat_groups(4)
    specs = Specs(from_mapping(base))
    checked = 0
    for group in groups:
        for _, mapping in group.variants:
            whole = from_mapping(mapping)
            assert specs.topology(mapping).model_dump() == whole.model_dump()
            checked += 1
    assert checked == sum(len(g.variants) for g in groups) > 500
    broken = {**groups[0].variants[0][1], "lmcache": {**base["lmcache"], "chunk_size": -1}}
    with pytest.raises(SpecError) as by_sections:
        specs.topology(broken)
    with pytest.raises(SpecError) as whole:
        from_mapping(broken)
    assert str(by_sections.value) == str(whole.value)


def test_a_hardware_choice_the_model_does_not_fit_is_ruled_out_whole_for_the_reason_each_combination_gives():
    """Llama-2-13B's fp16 weights leave no KV room on one L4 or A10G: `accelerator_problems` says so once
    for the group, and resolving any of its combinations fails with those very problems."""
    from kvplan.resolve import accelerator_problems, resolve

    catalog, _, groups = _chat_groups(6)
    unfit = [g for g in groups if accelerator_problems(from_mapping(g.variants[0][1]), catalog)]
    assert {g.hardware[0] for g in unfit} == {"l4", "a10g"} and len(unfit) < len(groups)
    for group in groups:
        problems = accelerator_problems(from_mapping(group.variants[0][1]), catalog)
        for _, mapping in group.variants[::17]:
            if not problems:
                resolve(from_mapping(mapping), catalog)
                continue
            with pytest.raises(SpecError) as exc:
                resolve(from_mapping(mapping), catalog)
            assert [p.message for p in problems] == [p.message for p in exc.value.problems]
