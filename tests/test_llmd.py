"""llm-d's scheduler as the router (serving.router: llm_d): its scorers, how their weighted sum picks, and the spec.

Each scorer is checked on a small state built by hand (instances that report a waiting queue, a share of KV blocks
in use, and how much of a prompt they hold in HBM and in their CPU tier), as kvplan.sim.llmd says llm-d defines
it; then the picker on those scores, and the whole simulation with the router in it.
"""

from __future__ import annotations

import pytest

from conftest import spec
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.router_settings import LlmDScheduler
from kvplan.sim import llmd
from kvplan.sim.run import run
from kvplan.sim.content import LOG_PROMPT
from kvplan.sim.workload import Request, Segments

pytestmark = pytest.mark.unit

BLOCK = 16


class Pool:
    """The blocks of an HBM pool, as the kv-cache-utilization-scorer reads them."""

    def __init__(self, used: int, num: int = 100):
        self.used_blocks, self.num_blocks = used, num


class Instance:
    """A stand-in for an engine: what llm-d's scorers read of it."""

    def __init__(self, waiting: int = 0, used: int = 0, gpu: dict | None = None, cpu: dict | None = None):
        self.waiting_count, self.hbm = waiting, Pool(used)
        self.gpu, self.cpu = gpu or {}, cpu or {}           # request id -> blocks in HBM / tokens in the CPU tier

    def gpu_prefix_blocks(self, req: Request) -> int:
        return self.gpu.get(req.id, 0)

    def cpu_prefix_tokens(self, req: Request) -> int:
        return self.cpu.get(req.id, 0)


def prompt(rid: int, text: int, tokens: int = 10 * BLOCK) -> Request:
    """Request `rid` whose prompt is text number `text` (the same text, the same blocks), `tokens` long."""
    return Request(rid, 0.0, tokens, 8, Segments((((LOG_PROMPT, text), tokens + 8),)))


def config(**weights) -> LlmDScheduler:
    base = dict(queue=0.0, kv_cache_utilization=0.0, prefix=0.0, cpu_prefix=0.0, no_hit_lru=0.0,
                prefix_match="approximate", gpu_index_blocks=1000, cpu_index_blocks=0)
    return LlmDScheduler(**{**base, **weights})


# ---------------------------------------------------------------------------------------------- each scorer

def test_the_queue_scorer_ranks_queues_between_the_shortest_and_the_longest():
    """queue-scorer: the shortest waiting queue scores 1, the longest 0, the others linearly between; equal queues
    all score 1 (no instance is preferred)."""
    assert llmd.queue_scores([0, 5, 10]) == [1.0, 0.5, 0.0]
    assert llmd.queue_scores([3, 3]) == [1.0, 1.0]


def test_the_kv_utilisation_scorer_prefers_free_blocks():
    assert llmd.kv_utilization_scores([0.0, 0.25, 1.0]) == [1.0, 0.75, 0.0]


def test_the_precise_scorer_counts_cpu_blocks_at_their_tier_weight():
    """Of a 10-block prompt, 4 blocks in HBM and 8 in the CPU tier: 4 x 1 + 4 x 0.8 = 7.2 of 10. Blocks in both
    tiers count once, at HBM's weight."""
    assert llmd.precise_scores([4, 0, 10], [8, 8, 2], 10, 0.8) == pytest.approx([0.72, 0.64, 1.0])
    assert llmd.precise_scores([3], [0], 0, 0.8) == [0.0]


def test_the_no_hit_lru_scorer_ranks_instances_by_their_last_cold_request():
    """A cold request: instances never given one first (in order), then the least recently given one; a warm
    request scores 0.5 everywhere."""
    assert llmd.no_hit_lru_scores(3, [2, 0], cold=True) == [0.0, 1.0, 0.5]
    assert llmd.no_hit_lru_scores(3, [2, 0], cold=False) == [0.5, 0.5, 0.5]


def test_the_approximate_index_counts_held_blocks_until_no_instance_holds_one():
    index = llmd.PrefixIndex(2, capacity=4)
    index.add(0, [1, 2, 3])
    index.add(1, [1, 2])
    assert index.matched([1, 2, 3, 9, 3]) == [3, 2]        # block 9 is nowhere: the walk stops there
    index.add(1, [7, 8, 9])                                # five keys for four places: the oldest, 1, goes
    assert index.matched([1, 2]) == [2, 1]                 # llm-d counts each block held along the walk: 2 still is


def test_the_index_by_holders_counts_as_walking_every_instances_lru():
    """PrefixIndex keeps, for each hash, the instances holding it; llm-d's definition asks each instance's LRU. On
    random prompts routed at random into small LRUs, the two count the same."""
    import random

    rng = random.Random(11)
    index = llmd.PrefixIndex(4, capacity=12)
    lrus: list[list[int]] = [[] for _ in range(4)]              # oldest first
    for _ in range(600):
        keys = [hash((rng.randrange(3), j)) for j in range(rng.randrange(1, 8))]
        walked = [0] * 4
        for key in keys:
            holders = [i for i in range(4) if key in lrus[i]]
            if not holders:
                break
            for i in holders:
                walked[i] += 1
        assert index.matched(keys) == walked
        i = rng.randrange(4)
        index.add(i, keys)
        for key in keys:
            if key in lrus[i]:
                lrus[i].remove(key)
            lrus[i].append(key)
        del lrus[i][:-12]


# ---------------------------------------------------------------------------------------------- the picker

def test_the_prefix_scorer_sends_a_repeated_prompt_to_the_instance_it_was_routed_to():
    """With the guide's weights and idle instances, a prompt seen before goes where it went: that instance's
    index holds its blocks; a new prompt goes to either."""
    for seed in range(5):
        instances = [Instance(), Instance(), Instance()]
        scheduler = llmd.Scheduler(config(queue=2, kv_cache_utilization=2, prefix=1), instances, BLOCK, seed)
        first = scheduler.pick(prompt(0, text=1))
        assert [scheduler.pick(prompt(i, text=1)) for i in range(1, 4)] == [first] * 3


def test_the_precise_scorer_follows_the_cpu_tier_too():
    """prefix_match precise reads what each instance holds: the request goes to the one whose CPU tier holds the
    prompt, the other instance holding none of it."""
    instances = [Instance(), Instance(cpu={0: 10 * BLOCK})]
    scheduler = llmd.Scheduler(config(queue=2, prefix=1, prefix_match="precise"), instances, BLOCK, 0)
    assert scheduler.scores(prompt(0, text=1)) == pytest.approx([2.0, 2.8])
    assert scheduler.pick(prompt(0, text=1)) == 1


def test_the_precise_scorer_reads_what_real_engines_hold_in_hbm_and_in_lmcaches_cpu_tier():
    """Real engines, as a run builds them: instance 1 has the prompt cached in HBM (a finished request's blocks),
    instance 2 holds it in LMCache's ddr tier only, instance 0 nowhere. The precise scorer sees both tiers, so
    with prefix matching alone the request goes to instance 1, and instance 2 scores 0.8 of it."""
    from kvplan.sim.run import Simulation

    r = gpu_cluster(queue=0, kv_cache_utilization=0, prefix_match="precise")
    sim = Simulation(r, seed=0)
    req = prompt(0, text=7, tokens=64 * r.block_size)
    engines = sim.engines
    keys = req.content.keys(r.block_size, req.prompt_tokens)
    held = engines[1].hbm.allocate(keys, 0, len(keys))
    engines[1].hbm.commit(held, keys, len(keys))
    engines[1].hbm.release(held)
    lm = sim.lmcache
    chunks = req.content.keys(lm.chunk_size, req.prompt_tokens)
    lm.cache("ddr", 2).store(chunks, lm.chunk_bytes)
    assert [e.gpu_prefix_blocks(req) for e in engines] == [0, 64, 0, 0]
    assert [e.cpu_prefix_tokens(req) for e in engines] == [0, 0, len(chunks) * lm.chunk_size, 0]
    scheduler = sim.router.llm_d
    assert scheduler.scores(req)[:3] == pytest.approx([0.0, 1.0, 0.8 * len(chunks) * lm.chunk_size / req.prompt_tokens])
    assert scheduler.pick(req) == 1


def test_the_queue_scorer_spreads_load_over_a_held_prefix():
    """The instance holding the prompt has the longest queue: at queue 2 and prefix 1 the request goes to the
    idle one (2 x 1 > 2 x 0 + 1); at prefix 3 it follows the prefix (3 > 2)."""
    instances = [Instance(waiting=6, gpu={0: 10}), Instance(waiting=0)]
    follow = dict(prefix_match="precise", queue=2)
    assert llmd.Scheduler(config(prefix=1, **follow), instances, BLOCK, 0).pick(prompt(0, 1)) == 1
    assert llmd.Scheduler(config(prefix=3, **follow), instances, BLOCK, 0).pick(prompt(0, 1)) == 0


def test_the_queue_scorer_alone_spreads_requests_over_equal_instances():
    """A request that joins the queue it was sent to: the queue scorer sends the next to another instance."""
    instances = [Instance(), Instance(), Instance()]
    scheduler = llmd.Scheduler(config(queue=1), instances, BLOCK, 3)
    for i in range(9):
        instances[scheduler.pick(prompt(i, text=i))].waiting_count += 1
    assert [e.waiting_count for e in instances] == [3, 3, 3]


def test_no_hit_lru_sends_cold_requests_round_the_instances():
    instances = [Instance(), Instance(), Instance()]
    scheduler = llmd.Scheduler(config(no_hit_lru=1), instances, BLOCK, 0)
    assert [scheduler.pick(prompt(i, text=i)) for i in range(6)] == [0, 1, 2, 0, 1, 2]


def test_ties_are_broken_by_the_seed_and_only_by_it():
    """llm-d shuffles tied instances at random; the simulator draws from the run's seed: the same seed, the same
    choices; another seed, other choices."""
    def picks(seed: int) -> list[int]:
        scheduler = llmd.Scheduler(config(kv_cache_utilization=1), [Instance() for _ in range(4)], BLOCK, seed)
        return [scheduler.pick(prompt(i, text=i)) for i in range(20)]

    assert picks(1) == picks(1)
    assert picks(1) != picks(2)
    assert set(picks(1)) == {0, 1, 2, 3}


# ---------------------------------------------------------------------------------------------- spec and run

def test_the_spec_defaults_are_llm_ds_tiered_cpu_guide_with_a_cpu_tier_and_without_its_cpu_scorer_otherwise():
    with_ddr = resolve(spec("chat-llama2-13b", serving__router="llm_d")).llm_d
    assert (with_ddr.queue, with_ddr.kv_cache_utilization, with_ddr.prefix, with_ddr.cpu_prefix) == (2, 2, 1, 1)
    assert with_ddr.cpu_index_blocks > 0 and with_ddr.prefix_match == "approximate"
    without = resolve(spec("chat-llama2-13b", serving__router="llm_d", lmcache=None)).llm_d
    assert without.cpu_prefix == 0 and without.cpu_index_blocks == 0


@pytest.mark.parametrize("changes, path, says", [
    ({"serving__llm_d": {"queue": -1}}, "serving.llm_d.queue", "greater than or equal to 0"),
    ({"serving__llm_d": {"lru": 1}}, "serving.llm_d.lru", "allowed: cpu_prefix, kv_cache_utilization, no_hit_lru"),
    ({"serving__llm_d": {"queue": 0, "kv_cache_utilization": 0, "prefix": 0, "cpu_prefix": 0}}, "serving.llm_d",
     "at least one of queue, kv_cache_utilization, prefix, cpu_prefix, no_hit_lru"),
    ({"serving__llm_d": {"prefix_match": "precise", "cpu_prefix": 1}}, "serving.llm_d", "count it twice"),
    ({"serving__llm_d": {"prefix_match": "exact"}}, "serving.llm_d.prefix_match", "approximate"),
])
def test_bad_scorer_settings_name_the_field_and_what_is_allowed(changes, path, says):
    with pytest.raises(SpecError) as exc:
        spec("chat-llama2-13b", serving__router="llm_d", **changes)
    assert any(p.path.startswith(path) for p in exc.value.problems), exc.value.render()
    assert says in exc.value.render()


def test_scorer_weights_without_the_llm_d_router_are_refused_not_dropped():
    with pytest.raises(SpecError) as exc:
        spec("chat-llama2-13b", serving__llm_d={"queue": 1})
    assert "set router: llm_d" in exc.value.render()


def test_a_cpu_scorer_without_a_cpu_tier_is_refused():
    with pytest.raises(SpecError) as exc:
        resolve(spec("chat-llama2-13b", serving__router="llm_d", serving__llm_d={"cpu_prefix": 1}, lmcache=None))
    assert [p.path for p in exc.value.problems] == ["serving.llm_d.cpu_prefix"]


def test_a_simulation_with_llm_ds_router_is_repeatable_and_routes_otherwise_than_round_robin():
    small = dict(workload__requests=300)
    r = resolve(spec("chat-llama2-13b", serving__router="llm_d", **small))
    a, b = run(r, seed=5), run(r, seed=5)
    assert (a.engine_steps, a.ttft, a.lmcache_hit_ratio) == (b.engine_steps, b.ttft, b.lmcache_hit_ratio)
    rr = run(resolve(spec("chat-llama2-13b", serving__router="round_robin", **small)), seed=5)
    assert a.engine_steps != rr.engine_steps


# ---------------------------------------------------------------------------------------------- deployment

KNOWN_PLUGIN_TYPES = {"queue-scorer", "kv-cache-utilization-scorer", "approx-prefix-cache-producer",
                      "prefix-cache-scorer", "precise-prefix-cache-scorer", "no-hit-lru-scorer", "active-request-scorer",
                      "single-profile-handler", "max-score-picker", "random-picker", "weighted-random-picker"}
"""Plugin types llm-d's scheduler registers (the `...Type = "..."` constants under pkg/epp/framework/plugins of
llm-d/llm-d-inference-scheduler at 520af47896e5f06e43d09aca281a1149187b0ffd), of those a routing config uses."""
SCORERS = {"queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "precise-prefix-cache-scorer",
           "no-hit-lru-scorer", "active-request-scorer"}
GPU_CLUSTER = {"name": "chat-llm-d", "model": "Llama-3.1-8B",
               "serving": {"gpu": "H100-SXM", "instances": 4, "router": "llm_d"},
               "lmcache": {"mode": "inprocess", "chunk_size": 256, "ddr": {"size": "40GiB", "eviction": "LRU"}},
               "workload": {"kind": "chat", "duration": "5min", "arrivals": {"rate": "2/s"}}}


def gpu_cluster(**llm_d):
    from kvplan.spec import from_mapping
    data = {**GPU_CLUSTER, "serving": {**GPU_CLUSTER["serving"], **({"llm_d": llm_d} if llm_d else {})}}
    return resolve(from_mapping(data))


def test_the_ansible_render_refuses_llm_d_and_says_why(tmp_path):
    from conftest import inventory_for
    from kvplan.deploy.render import render
    from kvplan.deploy.secrets import Secrets

    r = resolve(spec("chat-llama2-13b", serving__router="llm_d"))
    with pytest.raises(SpecError) as exc:
        render(r, inventory_for(r, tmp_path), tmp_path / "run", Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00",
                                                                        ceph_rgw_secret_key="example-secret"))
    why = {p.path: p.message for p in exc.value.problems}
    assert "vllm-router, which has no weighted scorers" in why["serving.router"]
    assert "--format production-stack" in exc.value.render()


def test_the_scheduler_config_is_well_formed_and_weighs_as_the_simulator_does():
    """Every plugin is one llm-d registers, every reference names a plugin, every scorer the profile uses has the
    weight the simulator gave it, and the producers are told the index sizes it simulated."""
    from kvplan.deploy.llmd import endpoint_picker_config

    r = gpu_cluster(no_hit_lru=0.5)
    cfg = endpoint_picker_config(r)
    assert (cfg["apiVersion"], cfg["kind"]) == ("llm-d.ai/v1alpha1", "EndpointPickerConfig")
    types = {p["name"]: p["type"] for p in cfg["plugins"]}
    assert set(types.values()) <= KNOWN_PLUGIN_TYPES and len(types) == len(cfg["plugins"])
    [profile] = cfg["schedulingProfiles"]
    refs = {p["pluginRef"]: p.get("weight") for p in profile["plugins"]}
    assert set(refs) <= set(types)
    assert all((weight is not None) == (types[name] in SCORERS) for name, weight in refs.items())
    c = r.llm_d
    assert refs == {"queue-scorer": c.queue, "kv-cache-utilization-scorer": c.kv_cache_utilization,
                    "gpu-prefix-cache-scorer": c.prefix, "cpu-prefix-cache-scorer": c.cpu_prefix,
                    "no-hit-lru-scorer": c.no_hit_lru, "max-score-picker": None}
    params = {p["name"]: p.get("parameters", {}) for p in cfg["plugins"]}
    assert params["gpu-prefix-cache-producer"] == {"autoTune": False, "blockSizeTokens": r.block_size,
                                                   "lruCapacityPerServer": r.hbm_blocks, "maxPrefixBlocksToMatch": 256}
    assert params["cpu-prefix-cache-producer"]["lruCapacityPerServer"] == r.lmcache.tier("ddr").capacity_tokens // r.block_size


def test_a_zero_weight_leaves_its_scorer_out():
    from kvplan.deploy.llmd import endpoint_picker_config

    cfg = endpoint_picker_config(gpu_cluster(kv_cache_utilization=0, cpu_prefix=0))
    assert {p["type"] for p in cfg["plugins"]} == {"queue-scorer", "approx-prefix-cache-producer", "prefix-cache-scorer",
                                                   "single-profile-handler", "max-score-picker"}


def test_production_stack_values_leave_routing_to_llm_d_and_precise_matching_is_refused():
    import json

    import jsonschema

    from conftest import REPO
    from kvplan.deploy.helm import values

    rendered = values(gpu_cluster(), 8, "64Gi")
    assert rendered["routerSpec"] == {"enableRouter": False}
    chart = json.loads((REPO / "tests/fixtures/production-stack/values.schema.json").read_text())
    jsonschema.Draft202012Validator(chart).validate(rendered)
    with pytest.raises(SpecError) as exc:
        values(gpu_cluster(prefix_match="precise"), 8, "64Gi")
    assert [p.path for p in exc.value.problems] == ["serving.llm_d.prefix_match"]
    assert "KV-events publisher" in exc.value.render()


def test_importing_values_that_leave_routing_to_llm_d_says_the_router_did_not_map():
    from kvplan.deploy.helm import values
    from kvplan.interop import from_helm_values

    imported = from_helm_values(values(gpu_cluster(), 8, "64Gi"), "H100-SXM")
    assert "router" not in imported.spec["serving"]
    assert any(what == "routerSpec.enableRouter false" for what, _ in imported.unmapped)
