"""A warm start: the offload tiers filled by a warm-up of the same workload before the run, which no figure counts.

The chat example's nvme and ceph tiers need hours of traffic to fill; with workload.warm_start they start in
steady state, the measured requests are the very ones a cold run has, and the warm-up is reported apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import spec
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.sim.warm import WRITTEN_OVER

SMALL = dict(workload__requests=120, lmcache__ddr__size="16GB", lmcache__nvme__size="200GB",
             lmcache__ceph__size="2TB")
"""The chat example, short, with tiers a warm-up fills in a second."""


@pytest.fixture(scope="module")
def cold_and_warm():
    cold = run(resolve(spec("chat-llama2-13b", **SMALL)))
    warm = run(resolve(spec("chat-llama2-13b", **SMALL, workload__warm_start=True)))
    return cold, warm


def test_a_warm_run_starts_its_nvme_and_ceph_tiers_in_steady_state_where_a_cold_one_does_not(cold_and_warm):
    cold, warm = cold_and_warm
    steady_cold = {s.tier: s.steady for s in cold.steady_state}
    steady_warm = {s.tier: s for s in warm.steady_state}
    assert not steady_cold["nvme"] and not steady_cold["ceph"]
    assert steady_warm["nvme"].steady and steady_warm["ceph"].steady
    for tier in ("nvme", "ceph"):                              # full from the first request
        assert warm.tier(tier).occupancy[0][1] >= 0.9 * warm.tier(tier).capacity_bytes
        assert cold.tier(tier).occupancy[0][1] == 0


def test_the_cold_warning_says_how_to_start_warm(cold_and_warm):
    cold, _ = cold_and_warm
    note = next(s.note for s in cold.steady_state if s.tier == "nvme")
    assert "workload.warm_start: true" in note and "kvplan simulate --warm" in note


def test_the_warm_up_is_reported_and_left_out_of_every_figure(cold_and_warm):
    cold, warm = cold_and_warm
    assert warm.requests == cold.requests == 120 and warm.warmup_requests == cold.warmup_requests
    assert cold.warm_start == [] and "warm_start" not in cold.model_dump()
    filled = {w.tier: w for w in warm.warm_start}
    assert set(filled) == {"ddr", "nvme", "ceph"}
    for tier in ("ddr", "nvme", "ceph"):
        w, measured = filled[tier], warm.tier(tier)
        assert w.warm and w.requests > warm.requests and w.bytes_written >= w.used_bytes > 0
        assert measured.bytes_written < w.bytes_written       # the run's own writes, not the warm-up's
    # the warm-up wrote nvme over 1.5 times its capacity, evicting as it went; the run counts only its own evictions:
    # a full tier drops about what the run writes into it
    nvme, warmed = warm.tier("nvme"), filled["nvme"]
    assert warmed.bytes_written >= WRITTEN_OVER * warmed.capacity_bytes
    assert 0 < nvme.evicted_bytes <= nvme.bytes_written + 0.01 * nvme.capacity_bytes
    assert warm.duration == pytest.approx(cold.duration, rel=0.2)   # the clock is the run's, not the warm-up's


def test_the_measured_requests_are_the_cold_runs(cold_and_warm):
    cold, warm = cold_and_warm
    a, b = cold.per_request, warm.per_request
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens) and np.array_equal(a.output_tokens, b.output_tokens)
    assert np.allclose(a.arrival, b.arrival)
    assert warm.tier("ceph").served_tokens > 0 and warm.prompt_tokens == cold.prompt_tokens


def test_a_warm_start_is_the_same_with_the_same_seed_and_differs_with_another():
    r = resolve(spec("chat-llama2-13b", workload__requests=30, lmcache__ddr__size="4GB", lmcache__nvme__size="40GB",
                     lmcache__ceph__size="100GB", workload__warm_start=True))
    one, again, other = run(r, seed=3), run(r, seed=3), run(r, seed=4)
    assert one.warm_start == again.warm_start and np.array_equal(one.per_request.ttft, again.per_request.ttft)
    assert one.warm_start != other.warm_start


def test_a_cold_spec_keeps_its_hash():
    cold = spec("chat-llama2-13b")
    assert "warm_start" not in cold.model_dump()["workload"]
    assert spec("chat-llama2-13b", workload__warm_start=True).spec_hash() != cold.spec_hash()


def test_a_replayed_workload_cannot_start_warm():
    with pytest.raises(SpecError) as err:                     # kvplan validate says so
        spec("mooncake-replay", workload__warm_start=True)
    problem = err.value.problems[0]
    assert problem.path == "workload.warm_start" and "trace" in problem.message and problem.fix
    cold = spec("mooncake-replay")                            # and so does a run of a spec changed after validation
    warm = cold.model_copy(update={"workload": cold.workload.model_copy(update={"warm_start": True})})
    with pytest.raises(SpecError) as err:                     # (kvplan simulate --warm)
        run(resolve(warm))
    assert err.value.problems[0].path == "workload.warm_start"


def test_load_stages_cannot_start_warm():
    with pytest.raises(SpecError) as err:
        spec("chat-llama2-13b", workload__warm_start=True, workload__requests=None,
             workload__stages=[{"session_rate": "1/s", "duration": "10s"}])
    assert any(p.path == "workload.warm_start" and "stages" in p.message for p in err.value.problems)


def test_the_report_says_what_warmed_each_tier(cold_and_warm):
    from kvplan.report.sections import result_sections

    cold, warm = cold_and_warm
    head = {row[0]: row[1] for row in result_sections(warm)[0].rows}
    assert "warm start" not in {row[0] for row in result_sections(cold)[0].rows}
    assert all(f"{tier} " in head["warm start"] for tier in ("ddr", "nvme", "ceph"))
    assert "warm-up requests wrote" in head["warm start"] and head["warm start"].endswith("not counted")


def test_only_a_workload_that_can_start_warm_is_told_to():
    from kvplan.sim.steady import judge

    synthetic = judge("nvme", 100 * 2**30, 2**30, 2**30, 0, None, 60.0, warmable=True)
    replayed = judge("nvme", 100 * 2**30, 2**30, 2**30, 0, None, 60.0, warmable=False)
    assert "kvplan simulate --warm" in synthetic.note and "warm" not in replayed.note.split("simulate longer")[1]
