"""Honest statistics: every decision (capacity, ablation, plan) states its confidence.

One seed of a workload is one draw of a noisy latency percentile. Over several seeds a metric is
a mean with a 95 % Student-t interval (kvplan.sweep.confidence): a target is *met* when the
interval's upper end is at or below it, *missed* when its lower end is above it, and *undecided*
otherwise; two setups run on the same seeds differ *distinguishably* when the interval of their
per-seed differences excludes 0, and are *within noise* otherwise. With one seed nothing is
tested, and the output says so. The runs use examples/local.yaml cut to 40 (capacity, ablation)
or 120 (plan) requests.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from typer.testing import CliRunner

from conftest import example_data, spec, with_changes
from kvplan.cli import app
from kvplan.plan.search import plan
from kvplan.report.plan import plan_sections
from kvplan.report.sections import ablation_section
from kvplan.resolve import resolve
from kvplan.sim.ablation import ablate_seeds
from kvplan.sim.run import run
from kvplan.spec.slo import parse_slo_flags
from kvplan.sweep.capacity import search
from kvplan.sweep.confidence import classify, compare, decimals, fmt_interval

SLO = {"ttft_p99": 0.5}


@pytest.fixture
def spec_path(tmp_path):
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), workload__requests=40), sort_keys=False))
    return path


def test_a_target_inside_the_interval_is_undecided_and_one_seed_is_not_tested():
    assert classify([0.2, 0.3, 0.4], 0.35).outcome == "undecided"     # the mean meets it, the interval does not
    assert classify([0.2, 0.21, 0.22], 0.35).outcome == "met"
    assert classify([0.5, 0.51, 0.52], 0.35).outcome == "missed"
    one = classify([0.2], 0.35)
    assert one.outcome == "met" and not one.tested
    assert not compare([1.0], [2.0]).distinguishable                  # one seed: not tested, never distinguishable
    assert compare([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).mean == 0 and not compare([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]).distinguishable


def test_capacity_over_seeds_is_an_interval_around_the_rate_that_narrows_with_more_seeds(spec_path):
    widths = []
    for seeds in (3, 6):
        result, _ = search(spec_path, SLO, seeds=seeds)
        assert result.outcome == "found" and result.tested and result.seeds == list(range(1, seeds + 1))
        assert result.low <= result.rate < result.high
        assert result.met.verdict == "met" and result.missed.verdict == "missed"
        widths.append(result.high - result.low)
    assert widths[1] <= widths[0]


def test_a_probe_whose_seeds_straddle_the_target_is_undecided_not_met(spec_path):
    runs = [run(resolve(spec("local", workload__requests=40)), seed=s) for s in (1, 2, 3)]   # the spec's 1/s
    values = sorted(r.ttft.p99 for r in runs)
    assert values[0] < values[-1]
    target = sum(values) / len(values)            # the mean meets it exactly; the seeds lie on both sides
    result, _ = search(spec_path, {"ttft_p99": target}, seeds=3, low="1/s", high="1000/s")
    first = result.probes[0]
    assert first.seeds == [1, 2, 3] and first.met and first.verdict == "undecided"
    assert result.met is None or result.met.rate != first.rate


def test_capacity_prints_no_digit_its_interval_does_not_support(spec_path, tmp_path):
    out = tmp_path / "c.json"
    result = CliRunner().invoke(app, ["capacity", str(spec_path), "--slo", "ttft_p99=500ms", "--no-cache",
                                      "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    line = next(l for l in result.output.splitlines() if l.startswith("highest sustainable rate: "))
    # requests/s first (measured on each probe's workload), the new sessions/s that offer them beside
    printed = re.fullmatch(r"highest sustainable rate: ([0-9.]+) req/s \(([0-9.]+)\u2013([0-9.]+) req/s\) at ([0-9.]+) new "
                           r"sessions/s \(([0-9.]+)\u2013([0-9.]+) new sessions/s\), 95 %, .* seeds per probe", line)
    assert printed, line
    requests = {p["rate"]: p["requests_per_s"] for p in saved["probes"]}
    for numbers, low, high in ((printed.groups()[:3], requests[saved["low"]], requests[saved["high"]]),
                               (printed.groups()[3:], saved["low"], saved["high"])):
        allowed = max(0, decimals(high - low))
        for number in numbers:
            assert len(number.partition(".")[2]) <= allowed, (number, low, high)
    assert "--seeds" in result.output                  # how to ask for more


def test_ablation_marks_a_change_without_effect_as_within_noise_and_a_real_one_as_distinguishable():
    topo = spec("local", workload__requests=40)
    seeds = [1, 2, 3]
    setups = dict(ablate_seeds(topo, seeds))
    # a change with no effect: the same spec under another description, on the same seeds
    renamed = [run(resolve(topo.model_copy(update={"description": "renamed"})), seed=s) for s in seeds]
    rows = ablation_section([("spec", setups["+ ceph"]), ("renamed", renamed)]).rows
    assert rows[1][-1].startswith("within noise: ") and "differs" not in rows[1][-1]
    # a real one: the prefix cache takes recomputation from 100 % down
    rows = ablation_section([("no reuse", setups["no reuse"]), ("hbm only", setups["hbm only"])]).rows
    differs = rows[1][-1].split(";")[0]
    assert differs.startswith("differs: ") and "recomputed" in differs and "TTFT p50" in differs
    # one seed: the changes are not tested, and the table says how to test them
    one = ablation_section([(name, runs[:1]) for name, runs in setups.items()]).rows
    assert all(row[-1].startswith("not tested (1 seed; --seeds 3") for row in one[1:])


def test_the_plan_says_how_many_seeds_judged_it():
    slo = parse_slo_flags(["ttft_p99=300ms"])
    heads = {}
    for seeds in (1, 2):
        result = plan(spec("local", workload__requests=120), rate=32.0, slo=slo, seeds=seeds, limits=False)
        heads[seeds] = dict(plan_sections(result)[0].rows)["seeds"]
        for c in result.candidates:
            if c.stopped is not None:          # one seed: a run stopped at a certain miss has a bound, no sample
                assert seeds == 1 and c.status == "missed SLO" and not c.samples
            elif c.measured:
                assert len(c.samples["ttft_p99"]) == seeds
                assert c.measured["ttft_p99"] == pytest.approx(sum(c.samples["ttft_p99"]) / seeds)
                if not c.decided:
                    assert "not distinguishable" in c.reason
    assert heads[1].startswith("1 (seed 1): differences are not tested") and "--seeds 3" in heads[1]
    assert heads[2].startswith("2 (1..2): each SLO metric is the mean over them") and "--seeds N" in heads[2]


def test_the_same_seeds_give_the_same_answer(spec_path):
    first, _ = search(spec_path, SLO, seeds=3)
    again, _ = search(spec_path, SLO, seeds=3)
    assert again.model_dump_json() == first.model_dump_json()


def test_an_interval_prints_at_the_precision_its_width_supports_but_never_rounds_a_figure_to_zero():
    assert fmt_interval(7.43, 7.1, 7.8, "/s") == "7.4/s (7.1\u20137.8/s)"
    # capacity bracketed between 10 sessions/s surely met and 540 surely missed: the width alone would print 0
    assert fmt_interval(10.12, 10.12, 539.6, "/s") == "10/s (10\u2013540/s)"
