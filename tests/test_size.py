"""`kvplan size`: each tier's hit ratio against its capacity, from one pass over the workload.

The curve of an LRU tier comes from exact LRU stack distances: one pass over the request stream
gives the hit count at every capacity. These tests check it against the caches it stands for,
run capacity by capacity: the simulator's own LRU (`kvplan.sim.eviction`) for LMCache's tiers and
the simulator's vLLM prefix cache (`kvplan.sim.prefix_cache`) for hbm, each fed the requests of
`kvplan.sim.workload` one at a time. A lookup counts only the longest held prefix (a chunk after
the first miss is no hit, even when it is resident). Tiers with another policy, or with a TTL
that fires during the workload, are replayed with their own cache class at each capacity shown.
"""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from conftest import REPO, example_data, with_changes
from kvplan.cli import app
from kvplan.resolve import resolve
from kvplan.sim import workload as wl
from kvplan.sim.eviction import LRU, make
from kvplan.sim.prefix_cache import PrefixCache
from kvplan.sim.run import run
from kvplan.sizing import size
from kvplan.sizing.stack import NEVER, Stream, hits_at, least_capacity, needs, needs_brute_force
from kvplan.spec import from_mapping
from kvplan.report.sizing import terminal_tables

SMALL = {"workload__requests": 60}


def local(**changes):
    return from_mapping(with_changes(example_data("local"), **{**SMALL, **changes}))


def hits_of(result, tier, point) -> int:
    """The hit count behind a point's hit ratio (hit ratio = hits x unit tokens / prompt tokens)."""
    return round(point.hit_ratio * result.prompt_tokens / tier.unit_tokens)


def lmcache_tier_alone(topo, tier: str, cache) -> int:
    """Chunks hit when `cache` is the only LMCache tier and the requests come one at a time: a lookup
    hits the longest held prefix and refreshes it; then the rest of the prompt is stored (ddr refreshes
    the chunks it holds already, nvme and ceph write only the ones they lack)."""
    r = resolve(topo)
    chunk, size_ = r.lmcache.chunk_size, r.lmcache.chunk_bytes
    hits = 0
    for q in wl.requests(r):
        keys = q.content.keys(chunk, q.prompt_tokens)
        cache.expire(q.arrival)
        held = cache.prefix(keys)
        hits += held
        cache.touch(keys[:held], q.arrival)
        rest = keys[held:]
        cache.store(rest if tier == "ddr" else cache.absent(rest), size_, q.arrival)
    return hits


def vllm_alone(topo, blocks: int) -> int:
    """Blocks hit by vLLM's prefix cache of `blocks` blocks (the simulator's PrefixCache) serving the
    requests one at a time: a request reuses its cached prefix (never its last prompt token), takes
    blocks for the rest, caches every full block it computed and frees them all when done."""
    r = resolve(topo)
    bs, pool, hits = r.block_size, PrefixCache(blocks), 0
    for q in wl.requests(r):
        total = q.prompt_tokens + q.output_tokens
        keys = q.content.keys(bs, total)
        hit = min(pool.match(keys[: q.prompt_tokens // bs]), (q.prompt_tokens - 1) // bs)
        holding = pool.allocate(keys, hit, -(-total // bs))
        assert holding is not None, "the test uses pools that hold the longest request"
        pool.commit(holding, keys, len(keys))
        pool.release(holding)
        hits += hit
    return hits


@pytest.fixture(scope="module")
def small():
    topo = local()
    return topo, size(topo)


# --- the stack distances are exact ------------------------------------------------------------------

def test_an_lru_tier_curve_is_an_lru_cache_run_at_each_capacity(small):
    topo, result = small
    ddr = result.tier("ddr")
    assert ddr.method == "stack"
    checked = [p for p in ddr.curve if p.capacity_units <= ddr.working_set_units]
    assert len(checked) > 20 and checked[0].capacity_units == 1
    for point in checked:
        assert hits_of(result, ddr, point) == lmcache_tier_alone(topo, "ddr", LRU(point.capacity_bytes)), point
    # the hit ratio grows with capacity up to the working set, where it is all the reuse there is
    ratios = [p.hit_ratio for p in ddr.curve]
    assert ratios == sorted(ratios) and ratios[-1] == ddr.max_hit_ratio > 0


def test_the_hbm_curve_is_vllms_prefix_cache_serving_the_requests_one_at_a_time(small):
    topo, result = small
    hbm = result.tier("hbm")
    assert (hbm.unit, hbm.unit_tokens) == ("block", 128)
    longest = -(-resolve(topo).max_model_len // 128)
    checked = [p for p in hbm.curve if longest <= p.capacity_units <= hbm.working_set_units][::4]
    assert len(checked) >= 5
    for point in checked:
        assert hits_of(result, hbm, point) == vllm_alone(topo, point.capacity_units), point


def random_stream(rng: random.Random, requests: int, reverse: bool) -> Stream:
    """Requests that extend earlier requests' prefixes (prefix-chained keys), sometimes repeating a key."""
    prompts, keys, offsets, lookups, lookup_offsets = [], [], [0], [], [0]
    for _ in range(requests):
        base = list(rng.choice(prompts))[: rng.randint(0, 6)] if prompts and rng.random() < 0.7 else []
        chain = base + [hash((base[-1] if base else 0, rng.random(), i)) for i in range(rng.randint(0, 4))]
        prompts.append(chain)
        body = chain + ([chain[0]] if chain and rng.random() < 0.1 else [])
        start = len(keys)
        keys += body[::-1] if reverse else body
        looked = rng.randint(0, len(body))
        lookups += [start + (len(body) - 1 - i if reverse else i) for i in range(looked)]
        offsets.append(len(keys))
        lookup_offsets.append(len(lookups))
    return Stream(np.array(keys, dtype=np.int64), np.array(offsets), np.array(lookups, dtype=np.int64),
                  np.array(lookup_offsets))


@pytest.mark.parametrize("reverse", [False, True], ids=["chunks in prefix order", "blocks freed last first"])
def test_the_needs_are_those_of_an_explicit_lru_list(reverse):
    rng = random.Random(7)
    for _ in range(150):
        stream = random_stream(rng, rng.randint(1, 30), reverse)
        assert needs(stream).need.tolist() == needs_brute_force(stream).tolist()


def test_a_chunk_after_the_first_miss_is_no_hit_even_when_resident():
    a0, a1, b0 = 11, 12, 13                  # request A's two chunks, request B's one chunk
    order = [[a0, a1], [b0], [a0, a1]]
    stream = Stream(np.array([k for r in order for k in r], dtype=np.int64), np.array([0, 2, 3, 5]),
                    np.array([0, 1, 2, 3, 4]), np.array([0, 2, 3, 5]))
    cache = LRU(2)                           # two chunks of one byte: B evicted a0, a1 stayed
    for request in order[:2]:
        cache.store(request, 1)
    assert a1 in cache and a0 not in cache
    need = needs(stream).need
    assert need[3:].tolist() == [3, 3]       # a1 is one deep (it would fit in 2), but a0 is two deep
    ordered = np.sort(need)
    assert hits_at(ordered, 2) == 0 and hits_at(ordered, 3) == 2


def test_the_50_90_99_points_are_the_least_capacities_reaching_that_share():
    need = np.sort(np.array([1, 1, 2, 3, 5, 8, 8, 8, 13, NEVER, NEVER], dtype=np.int64))
    reusable = 9                             # two lookups never hit
    points = {share: least_capacity(need, share) for share in (50, 90, 99)}
    assert points == {50: 5, 90: 13, 99: 13}
    for share, capacity in points.items():
        assert hits_at(need, capacity) * 100 >= share * reusable > hits_at(need, capacity - 1) * 100
    assert least_capacity(np.array([NEVER]), 90) == 0   # nothing to reuse: no capacity helps


def test_each_tiers_points_are_monotone_and_reach_their_share(small):
    topo, result = small
    for tier in result.tiers:
        units = [t.capacity_units for t in tier.targets]
        assert [t.share for t in tier.targets] == [50, 90, 99]
        assert units == sorted(units) and 0 < units[-1] <= tier.working_set_units
        for target in tier.targets:
            assert target.hit_ratio * 100 >= target.share * tier.max_hit_ratio * (1 - 1e-12)
    ddr = result.tier("ddr")
    best = lmcache_tier_alone(topo, "ddr", LRU(10**12))
    for target in ddr.targets:             # one chunk less falls short, by a replay of the real cache
        chunk = ddr.unit_bytes
        assert lmcache_tier_alone(topo, "ddr", LRU(target.capacity_bytes)) * 100 >= target.share * best
        assert lmcache_tier_alone(topo, "ddr", LRU(target.capacity_bytes - chunk)) * 100 < target.share * best


# --- other policies, TTL, the configured size, cost --------------------------------------------------

def test_a_tier_of_another_policy_is_replayed_with_its_own_cache_at_each_point():
    topo = local(lmcache__ddr__eviction="ARC")
    result = size(topo)
    ddr, nvme = result.tier("ddr"), result.tier("nvme")
    assert (ddr.method, ddr.policy, nvme.method) == ("simulated", "ARC", "stack")
    assert len(ddr.curve) >= 10
    lm = resolve(topo).lmcache
    for point in ddr.curve:                  # MP mode: batch eviction at 80 %, 20 % at a time
        cache = make("ARC", point.capacity_bytes, watermark=lm.eviction_watermark, ratio=lm.eviction_ratio)
        assert hits_of(result, ddr, point) == lmcache_tier_alone(topo, "ddr", cache), point
    assert "ARC, simulated" in "\n".join(r[1] for r in _summary_rows(result))


def test_a_ttl_that_fires_during_the_workload_makes_the_tier_simulated():
    topo = local(lmcache__ceph__ttl="10s", simulate_only=True)   # the 60 requests arrive over about 20 s
    result = size(topo)
    ceph = result.tier("ceph")
    assert ceph.method == "simulated" and ceph.ttl_s == 10
    lm = resolve(topo).lmcache
    for point in ceph.curve[::3]:
        cache = make("LRU", point.capacity_bytes, ttl=10, watermark=lm.eviction_watermark, ratio=lm.eviction_ratio)
        assert hits_of(result, ceph, point) == lmcache_tier_alone(topo, "ceph", cache), point
    assert size(local()).tier("ceph").method == "stack"    # its 24 h ttl never fires: exact


def test_the_configured_size_is_marked_and_replayed_as_the_simulator_builds_the_tier():
    topo = local(lmcache__ddr__size="8MiB")  # far below the working set, so it evicts
    result = size(topo)
    ddr, r = result.tier("ddr"), resolve(topo)
    conf = ddr.configured
    assert conf.capacity_bytes == r.lmcache.tier("ddr").capacity_bytes and conf.caches == 1
    assert hits_of(result, ddr, conf) == lmcache_tier_alone(topo, "ddr", LRU(conf.capacity_bytes))
    batched = make("LRU", conf.capacity_bytes, watermark=r.lmcache.eviction_watermark, ratio=r.lmcache.eviction_ratio)
    assert round(conf.simulated_hit_ratio * result.prompt_tokens / 256) == lmcache_tier_alone(topo, "ddr", batched)
    assert conf.simulated_hit_ratio < conf.hit_ratio     # batches keep 60-80 % of the tier full


def test_costs_are_per_hour_from_kvplans_prices(small):
    topo, result = small
    from kvplan.cost import cost_of

    bill = cost_of(topo, resolve(topo))
    ddr = result.tier("ddr")
    point = ddr.curve[-1]
    assert ddr.usd_per_unit_hour == bill.tier("ddr").usd_per_unit_hour
    assert point.usd_per_hour == pytest.approx(point.capacity_bytes / 1e9 * bill.tier("ddr").usd_per_unit_hour)
    ceph = result.tier("ceph")               # raw bytes: the pool keeps `size` copies
    pool = resolve(topo).ceph.pool_size
    assert ceph.curve[-1].usd_per_hour == pytest.approx(
        ceph.curve[-1].capacity_bytes / 1e9 * pool * bill.tier("ceph").usd_per_unit_hour)
    hbm = result.tier("hbm")                 # whole GPUs: one instance holds all of this workload's blocks
    assert {p.usd_per_hour for p in hbm.curve} == {bill.tier("hbm").usd_per_unit_hour}


def test_size_sees_the_requests_the_simulator_runs(small):
    topo, result = small
    sim = run(resolve(topo))
    assert (result.requests, result.prompt_tokens) == (sim.requests, sim.prompt_tokens)


def test_a_trace_is_sized_from_its_chunks():
    data = example_data("mooncake-replay")
    data["workload"]["trace"]["limit"] = 200
    topo = from_mapping(data, base_dir=REPO / "examples")
    result = size(topo)
    ddr, hbm = result.tier("ddr"), result.tier("hbm")
    assert result.requests == 200 and ddr.unit_tokens == 256 and hbm.unit_tokens == 16
    # a 512-token trace block is two chunks: a lookup counts the prompt's full chunks
    assert ddr.lookups == sum(q.prompt_tokens // 256 for q in wl.requests(resolve(topo)))
    assert 0 < ddr.max_hit_ratio < 1 and ddr.configured.caches == 2


# --- the command and the report ------------------------------------------------------------------

@pytest.fixture(scope="module")
def spec_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("size") / "small.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), **SMALL)))
    return path


def kvplan(*args):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


def _summary_rows(result):
    from kvplan.report.sizing import summary_section

    return summary_section(result).rows


def test_the_command_prints_a_table_per_tier(spec_file):
    done = kvplan("size", spec_file)
    assert done.exit_code == 0, done.output
    for tier in ("hbm", "ddr", "nvme", "ceph"):
        assert f"{tier}: hit ratio by capacity" in done.output
    for row in ("50 % of max reuse", "90 % of max reuse", "99 % of max reuse", "working set", "configured",
                "replayed as configured", "exact (LRU stack distances)"):
        assert row in done.output


def test_json_parses_and_the_same_seed_gives_the_same_json(spec_file, tmp_path):
    first, again, other = kvplan("size", spec_file, "--json"), kvplan("size", spec_file, "--json"), \
        kvplan("size", spec_file, "--json", "--seed", "2")
    data = json.loads(first.output)
    assert data["kind"] == "SizeResult" and [t["tier"] for t in data["tiers"]] == ["hbm", "ddr", "nvme", "ceph"]
    assert first.output == again.output and other.output != first.output
    assert json.loads(other.output)["seed"] == 2
    out = tmp_path / "size.json"
    assert kvplan("size", spec_file, "--json", "--out", out).exit_code == 0
    assert out.read_text() == first.output


def test_a_bad_spec_is_refused_with_its_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), workload__requests=None)))
    done = kvplan("size", path)
    assert done.exit_code == 1 and "workload" in done.output


def test_text_is_printed_as_text_never_as_markup(small):
    _, result = small
    odd = result.model_copy(update={"notes": ["[bold red]not markup[/] and [link=x]y[/link]"]})
    console = Console(record=True, width=200)
    for table in terminal_tables(odd):
        console.print(table)
    assert "[bold red]not markup[/] and [link=x]y[/link]" in console.export_text()


def test_the_report_plots_every_tiers_curve_and_the_cost(spec_file, tmp_path):
    out = tmp_path / "size.json"
    assert kvplan("size", spec_file, "--out", out).exit_code == 0
    done = kvplan("report", out, "-o", tmp_path / "report.html")
    assert done.exit_code == 0, done.output
    page = (tmp_path / "report.html").read_text()
    for tier in ("hbm", "ddr", "nvme", "ceph"):
        assert re.search(rf'<title id="fig-\d+-title">{tier}: hit ratio against capacity</title>', page)
        assert f"{tier}: hit ratio by capacity" in page          # the tables the terminal prints
    assert re.search(r'<title id="fig-\d+-title">Hit ratio against cost</title>', page)
    assert page.count('<svg class="plot"') == 5
    assert "configured 1.0 GiB" in page                          # the spec's size, marked on the curve
    md = kvplan("report", out, "-o", tmp_path / "report.md")
    assert md.exit_code == 0 and "ddr: hit ratio against capacity" in (tmp_path / "report.md").read_text()
