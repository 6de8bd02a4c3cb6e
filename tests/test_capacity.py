"""The capacity search: the highest arrival rate at which a spec still meets its SLO.

It bisects on the workload's rate (arrivals per second, or a trace's replay speed) between a rate
whose 95 % interval surely meets every target and one that surely misses (one seed: the values
as they are), and every run goes through the run cache, so asking again simulates nothing. The
runs use examples/local.yaml cut to 40 requests. tests/test_statistics.py covers the intervals.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import example_data, with_changes
from kvplan.cli import app
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping, load
from kvplan.sweep.cache import RunCache
from kvplan.spec.slo import parse_slo_flags
from kvplan.sweep.capacity import Knob, search
from kvplan.sweep.sweep import sweep
from kvplan.sweep.variants import parse_vary

SLO = {"ttft_p99": 0.5}


@pytest.fixture
def spec_path(tmp_path) -> Path:
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), workload__requests=40), sort_keys=False))
    return path


def test_the_rate_found_lies_between_a_probe_surely_met_and_one_surely_missed(spec_path, tmp_path):
    result, simulated = search(spec_path, SLO, cache=RunCache(tmp_path / "cache"))
    assert result.outcome == "found" and simulated == sum(len(p.seeds) for p in result.probes)
    assert (result.met.verdict, result.missed.verdict) == ("met", "missed")
    assert result.low == result.met.rate <= result.rate < result.missed.rate == result.high
    # the interval's low end is ordinary simulations at that rate: rerun its seeds by hand
    data = with_changes(yaml.safe_load(spec_path.read_text()), workload__arrivals__session_rate=result.met.rate)
    by_hand = [run(resolve(from_mapping(data)), seed=s) for s in result.met.seeds]
    stat = result.met.metrics["ttft_p99"]
    assert sum(r.ttft.p99 for r in by_hand) / len(by_hand) == pytest.approx(stat.mean)
    assert stat.mean + stat.ci95 <= SLO["ttft_p99"]
    assert by_hand[0].spec_hash == result.met.spec_hash


def test_on_one_seed_the_probe_just_above_the_rate_misses_within_tolerance(spec_path):
    result, simulated = search(spec_path, SLO, seeds=1)
    assert result.outcome == "found" and simulated == len(result.probes) and not result.tested
    assert result.met.met and not result.missed.met
    assert result.rate == result.met.rate < result.missed.rate <= result.rate * 1.05


def test_probes_double_from_the_specs_own_rate_then_bisect(spec_path):
    result, _ = search(spec_path, SLO, seeds=1)
    rates = [p.rate for p in result.probes]
    first_miss = next(i for i, p in enumerate(result.probes) if not p.met)
    assert rates[:first_miss + 1] == [1.0 * 2**i for i in range(first_miss + 1)]   # from the spec's 1/s
    between = rates[first_miss + 1:]                          # then only rates inside the bracket, each once
    assert all(rates[first_miss - 1] < r < rates[first_miss] for r in between) and len(set(between)) == len(between)


def test_a_second_search_runs_no_simulation_and_gives_the_same_answer(spec_path, tmp_path):
    cache = RunCache(tmp_path / "cache")
    first, _ = search(spec_path, SLO, seeds=2, cache=cache)
    again, simulated = search(spec_path, SLO, seeds=2, cache=cache)
    assert simulated == 0 and again.model_dump_json() == first.model_dump_json()


def test_a_sweep_over_probed_rates_reuses_the_searchs_runs(spec_path, tmp_path):
    cache = RunCache(tmp_path / "cache")
    result, _ = search(spec_path, SLO, cache=cache)
    probed = ",".join(f"{p.rate:g}/s" for p in result.probes[:2])
    _, simulated = sweep(spec_path, [parse_vary(f"workload.arrivals.session_rate={probed}")], cache=cache)
    assert simulated == 0


def test_bounds_that_do_not_bracket_the_answer_are_reported_not_guessed(spec_path):
    too_high, _ = search(spec_path, SLO, low="50/s")
    assert (too_high.outcome, too_high.rate, too_high.missed.rate) == ("below_low", None, 50.0)
    too_low, _ = search(spec_path, SLO, high="0.5/s")
    assert (too_low.outcome, too_low.rate, too_low.missed) == ("above_high", 0.5, None)


def test_a_trace_is_searched_by_replay_speed_through_its_time_scale(tmp_path):
    lines = [json.dumps({"timestamp": i * 250, "input_length": 400, "output_length": 8, "hash_ids": [i % 3, 100 + i]})
             for i in range(30)]
    (tmp_path / "trace.jsonl").write_text("\n".join(lines) + "\n")
    data = with_changes(example_data("local"), serving__weights_dtype="bf16",    # the prefill times the SLO was set by
                        workload={"kind": "trace", "trace": {"path": "trace.jsonl", "block_size": 256, "time_scale": 2.0}})
    path = tmp_path / "trace.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    knob = Knob.of(load(path))
    assert (knob.path, knob.unit, knob.value(4.0)) == ("workload.trace.time_scale", "x", 0.5)
    result, _ = search(path, {"ttft_p99": 0.045}, low="1", high="64x")
    assert result.knob == "workload.trace.time_scale" and result.unit == "x"
    assert result.outcome == "found" and result.met.met and not result.missed.met


def test_slo_flags_use_the_specs_keys_and_units():
    assert parse_slo_flags(["ttft_p99=500ms", "tpot_p50=20ms"]).targets() == {"ttft_p99": 0.5, "tpot_p50": 0.02}
    with pytest.raises(SpecError) as caught:
        parse_slo_flags(["ttft_p95=500ms"])
    problem, = caught.value.problems
    assert problem.path == "--slo" and "did you mean" in problem.fix
    with pytest.raises(SpecError, match="KEY=DURATION"):
        parse_slo_flags(["ttft_p99"])


def test_kvplan_capacity_prints_each_probe_and_the_bracket(spec_path, tmp_path):
    result = CliRunner().invoke(app, ["capacity", str(spec_path), "--slo", "ttft_p99=500ms", "--cache-dir",
                                      str(tmp_path / "cache"), "--out", str(tmp_path / "c.json")],
                                catch_exceptions=False, env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    saved = json.loads((tmp_path / "c.json").read_text())
    lines = result.output.splitlines()
    assert lines[0].startswith("Capacity of ") and "ttft_p99 <= 500.0 ms" in lines[0]
    assert sum(line.startswith("probe ") for line in lines) == len(saved["probes"])
    headline = next(line for line in lines if line.startswith("highest sustainable rate: "))
    assert "95 %" in headline and "seeds per probe" in headline
    assert "Bracketing probes" in result.output
    # one rate: the answer is in requests/s, measured on each probe's workload, its new sessions/s beside it
    found = next(p for p in saved["probes"] if p["rate"] == saved["rate"])
    assert saved["knob"] == "workload.arrivals.session_rate" and found["requests_per_s"] > found["rate"]
    assert " req/s (" in headline and " at " in headline and "new sessions/s" in headline
    assert headline.index("req/s") < headline.index("sessions/s")


@pytest.mark.parametrize("args, code, text", [
    (["--slo", "ttft_p99"], 1, "KEY=DURATION"),
    (["--slo", "ttft_p99=500ms", "--low", "fast"], 2, "not a rate"),
    (["--slo", "ttft_p99=soon"], 1, "--slo ttft_p99"),
    (["--slo", "ttft_p99=1000"], 1, "write --slo ttft_p99=1000ms or --slo ttft_p99=1000s"),
    (["--slo", "ttft_p99=500ms", "--low", "2"], 2, "bare number"),
    (["--slo", "ttft_p99=500ms", "--low", "2req/s"], 2, "counts requests"),
    ([], 1, "there is no SLO to search against"),
])
def test_kvplan_capacity_exit_codes(spec_path, args, code, text):
    result = CliRunner().invoke(app, ["capacity", str(spec_path), "--no-cache", *args], catch_exceptions=False)
    assert result.exit_code == code and text in result.output, result.output
