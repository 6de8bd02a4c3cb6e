"""kvplan.live.observed: two snapshots and the client's measurements in the simulator's terms.

observed.py turns the counters read before and after a bench run, and what the client measured of
each request, into what the simulator predicts: prompt tokens served by each tier, latency and
throughput, components down. A bench run is kept as a directory that reads back as it was written;
kvplan.live.runner writes one end to end.
"""

from __future__ import annotations


import pytest

from kvplan.errors import SpecError
from kvplan.live.observe import Snapshot
from kvplan.live.observed import columns, derive, read_run, write_run
from kvplan.live.runner import bench as run_bench

from live_fakes import SALT, PLAIN_BENCH, ZERO, bench_run, fake_vllm, local, outcome, snap


def test_derive_takes_prompt_sources_from_vllm_deltas_and_latency_from_the_client():
    before = snap(dict(ZERO, prompt_tokens=5000, hbm_tokens=1000, computed_tokens=4000, preemptions=1))
    after = snap(dict(ZERO, prompt_tokens=8000, hbm_tokens=1500, computed_tokens=6500, preemptions=3))
    outs = [outcome(0, sent=0.0, ttft=0.5, tokens=11), outcome(1, sent=1.0, ttft=0.25, tokens=5),
            outcome(2, sent=2.0, ttft=0.0, tokens=0, error="HTTP 500: x"), outcome(3, sent=3.0, ttft=1.0, tokens=1)]
    o = derive(outs, before, after, None)
    assert o.served_tokens == {"hbm": 500, "ddr": 0, "nvme": 0, "ceph": 0, "recomputed": 2500}
    assert o.prompt_tokens == 3000 and o.served_share("hbm") == pytest.approx(500 / 3000)
    assert o.tier_split == "exact" and o.preemptions == 2
    assert (o.requests, o.ok, o.failed, o.errors) == (4, 3, 1, {"HTTP 500: x": 1})
    assert o.duration == pytest.approx(4.0)                   # request 3's last token, from time 0
    assert o.ttft.p50 == pytest.approx(0.5) and o.ttft.mean == pytest.approx((0.5 + 0.25 + 1.0) / 3)
    assert o.tpot.mean == pytest.approx(0.01)                 # the one-token request has no TPOT
    assert o.requests_per_s == pytest.approx(3 / 4.0) and o.generated_tokens_per_s == pytest.approx(17 / 4.0)
    assert o.ceph_bytes_written is None and o.components_down == []


def test_derive_splits_lmcache_tokens_exactly_when_every_hit_was_in_l1():
    before = snap(dict(ZERO), lmcache={"l1_hit_tokens": 2560, "l2_hit_tokens": 1024})
    after = snap(dict(ZERO, prompt_tokens=2000, lmcache_tokens=768, computed_tokens=1232),
                 lmcache={"l1_hit_tokens": 3328, "l2_hit_tokens": 1024})
    o = derive([], before, after, local().lmcache)
    assert o.served_tokens == {"hbm": 0, "ddr": 768, "nvme": 0, "ceph": 0, "recomputed": 1232}
    assert o.tier_split == "exact"


def test_derive_gives_l2_to_the_one_l2_tier_the_spec_has():
    """LMCache counts L1 and L2 apart; with ceph the only L2 tier, L2's tokens are Ceph's, whatever it read."""
    lmcache = local().lmcache.model_copy(update={"tiers": [t for t in local().lmcache.tiers if t.name != "nvme"]})
    after = snap(dict(ZERO, prompt_tokens=3000, lmcache_tokens=1024, computed_tokens=1976),
                 lmcache={"l1_hit_tokens": 768, "l2_hit_tokens": 256})
    o = derive([], snap(dict(ZERO), lmcache={"l1_hit_tokens": 0, "l2_hit_tokens": 0}), after, lmcache)
    assert o.served_tokens == {"hbm": 0, "ddr": 768, "nvme": 0, "ceph": 256, "recomputed": 1976}
    assert o.tier_split == "exact"


def test_derive_splits_l2_hits_between_ceph_and_nvme_by_pool_reads():
    """With nvme and ceph both behind L1: L2 tokens Ceph's pool served = bytes read / chunk bytes x chunk
    tokens; the rest of L2 is the nvme tier."""
    lmcache = local().lmcache
    chunk = lmcache.chunk_bytes
    before = snap(dict(ZERO), lmcache={"l1_hit_tokens": 0, "l2_hit_tokens": 0},
                  ceph={"pool_read_bytes": 10 * chunk, "pool_write_bytes": 0, "pool_objects": 5})
    after = snap(dict(ZERO, prompt_tokens=3000, lmcache_tokens=1000, computed_tokens=2000),
                 lmcache={"l1_hit_tokens": 6 * 256, "l2_hit_tokens": 4 * 256},
                 ceph={"pool_read_bytes": 12 * chunk, "pool_write_bytes": 7 * chunk, "pool_objects": 12,
                       "rgw_objects": 12, "osd_apply_latency_ms_max": 3.0})
    o = derive([], before, after, lmcache)
    assert o.served_tokens == {"hbm": 0, "ddr": 600, "nvme": 200, "ceph": 200, "recomputed": 2000}
    assert o.tier_split == "proportional"
    assert (o.ceph_bytes_read, o.ceph_bytes_written, o.ceph_objects, o.rgw_objects) == (2 * chunk, 7 * chunk, 12, 12)
    assert o.osd_apply_latency_ms_max == 3.0


def test_derive_keeps_rounding_in_ddr_so_the_tiers_add_up():
    after = snap(dict(ZERO, prompt_tokens=1000, lmcache_tokens=1000), lmcache={"l1_hit_tokens": 1, "l2_hit_tokens": 2},
                 ceph={"pool_read_bytes": 0})
    before = snap(dict(ZERO), lmcache={"l1_hit_tokens": 0, "l2_hit_tokens": 0}, ceph={"pool_read_bytes": 0})
    o = derive([], before, after, local().lmcache)
    assert sum(o.served_tokens.values()) == 1000 and o.served_tokens["nvme"] == 667


def test_derive_without_lmcache_counters_puts_every_lmcache_token_in_ddr_and_says_unknown():
    after = snap(dict(ZERO, prompt_tokens=100, lmcache_tokens=40, computed_tokens=60))
    o = derive([], snap(dict(ZERO)), after, local().lmcache)
    assert o.served_tokens["ddr"] == 40 and o.tier_split == "unknown"


def test_l2_stores_submitted_and_never_completed_are_counted_as_failed():
    """With Ceph unreachable LMCache's S3 writes fail: submitted to L2, never stored. The run settles first, so
    nothing is still in flight when the difference is taken."""
    def snap(submitted: float, stored: float) -> Snapshot:
        return Snapshot(taken_at=0.0, components=[], vllm={}, ceph=None,
                        lmcache={"l2_submitted_chunks": submitted, "l2_stored_chunks": stored})

    r = local(PLAIN_BENCH)
    assert derive([], snap(10, 10), snap(25, 17), r.lmcache).l2_store_failed_chunks == 8
    assert derive([], snap(10, 10), snap(25, 25), r.lmcache).l2_store_failed_chunks == 0
    assert derive([], snap(10, 10), Snapshot(taken_at=0.0, components=[], vllm={}, lmcache=None, ceph=None),
                  r.lmcache).l2_store_failed_chunks is None


def test_derive_lists_components_down_before_or_after_once():
    before = snap(dict(ZERO), down=("lmcache a", "ceph pool kvcache"))
    after = snap(dict(ZERO), down=("ceph pool kvcache", "vllm b"))
    names = sorted(c.name for c in derive([], before, after, None).components_down)
    assert names == ["ceph pool kvcache", "lmcache a", "vllm b"]


def test_derive_with_no_successful_request_has_zero_duration_and_throughput():
    o = derive([outcome(0, sent=0.0, ttft=0, tokens=0, error="boom")], snap(dict(ZERO)), snap(dict(ZERO)), None)
    assert (o.ok, o.failed, o.duration, o.requests_per_s) == (0, 1, 0.0, 0.0)


def test_columns_leave_out_the_latency_of_failed_requests():
    cols = columns([outcome(0, sent=0.0, ttft=0.1, tokens=3), outcome(1, sent=0.5, ttft=0, tokens=0, error="x")])
    assert cols["ttft"][0] == pytest.approx(0.1) and cols["ttft"][1] is None and cols["e2e"][1] is None
    assert cols["error"] == [None, "x"] and cols["id"] == [0, 1]


def test_a_bench_run_round_trips_through_its_directory(tmp_path):
    r = local(PLAIN_BENCH)
    run = bench_run(r, [outcome(0, sent=0.0, ttft=0.1, tokens=3), outcome(1, sent=0.5, ttft=0, tokens=0, error="x")])
    path = write_run(tmp_path / "run", run, "name: local\n")
    assert path == tmp_path / "run" / "run.json" and (tmp_path / "run" / "spec.yaml").read_text() == "name: local\n"
    assert read_run(tmp_path / "run") == run
    assert read_run(path) == run


def test_read_run_names_the_missing_directory_and_the_fix(tmp_path):
    with pytest.raises(SpecError) as info:
        read_run(tmp_path / "nowhere")
    text = info.value.render()
    assert f"no bench run at {tmp_path / 'nowhere'}" in text and "fix: give the directory `kvplan bench` printed" in text


@pytest.mark.parametrize("content", ["{\"name\": \"x\"}", "not json at all", ""])
def test_read_run_refuses_a_file_that_is_not_a_bench_run(tmp_path, content):
    (tmp_path / "run.json").write_text(content)
    with pytest.raises(SpecError) as info:
        read_run(tmp_path)
    text = info.value.render()
    assert f"{tmp_path / 'run.json'} is not a kvplan bench run" in text and "fix:" in text


def test_runner_bench_writes_a_run_directory_from_a_fake_stack(tmp_path):
    """End to end without LMCache or Ceph in the spec (so nothing looks for them): check the target, read
    vLLM's counters before and after, replay, and write run.json that read_run gives back."""
    r = local(PLAIN_BENCH, lmcache=False)
    progress: list[tuple] = []
    with fake_vllm() as fake:
        run = run_bench(r, "name: local\n", [fake.target()], tmp_path / "run", salt=SALT, timeout=10.0,
                        progress=lambda *a: progress.append(a))
    assert read_run(tmp_path / "run") == run
    o = run.observed
    assert (o.requests, o.ok, o.failed) == (8, 8, 0)
    assert o.prompt_tokens == sum(len(b["prompt"]) for b in fake.bodies) == o.served_tokens["recomputed"]
    assert run.requests["received_tokens"] == [4] * 8 and run.salt == SALT and run.targets == [fake.url]
    assert progress[-1][0] == progress[-1][3] == 8                      # the last report: all done
