"""The vLLM engine model: continuous batching within vLLM's limits, and decode fast-forward."""

from __future__ import annotations

import pytest

from kvplan.resolve import resolve
from kvplan.sim.engine import Probe
from kvplan.sim.run import Simulation

from conftest import spec


def simulate(example="chat-llama2-13b", fast_forward=True, on_step=None, **changes):
    sim = Simulation(resolve(spec(example, **changes)))
    if not fast_forward or on_step is not None:             # otherwise the engines run as in production
        for engine in sim.engines:
            engine.probe = Probe(fast_forward=fast_forward, on_step=on_step)
    return sim, sim.run()


def test_steps_never_exceed_max_num_seqs_batched_tokens_or_blocks():
    seen = []

    def check(engine, tokens):
        assert len(engine.running) <= engine.max_seqs
        assert tokens <= engine.budget
        assert 0 <= engine.hbm.used_blocks <= engine.hbm.num_blocks
        seen.append(len(engine.running))

    # few blocks and a small budget: the scheduler has to chunk, queue and preempt
    _, res = simulate(on_step=check, serving__max_num_seqs=16, serving__max_num_batched_tokens=512,
                      serving__gpu_memory_utilization=0.4, workload__requests=400)
    assert 1 < max(seen) <= 16
    assert res.requests == 400                                    # every request completes
    assert res.preemptions > 0


def test_tokens_are_conserved():
    _, res = simulate(workload__requests=300)
    for rec in res.per_request.rows():
        served = rec.hbm_tokens + rec.ddr_tokens + rec.nvme_tokens + rec.ceph_tokens
        assert served + rec.recomputed_tokens == rec.prompt_tokens
        assert 0 <= rec.queue <= rec.ttft <= rec.e2e


@pytest.mark.parametrize("example, changes", [
    ("chat-llama2-13b", {"workload__requests": 300}),
    ("codegen-70b", {"workload__duration": "2min"}),
    ("mooncake-replay", {"workload__trace__limit": 200}),
    ("chat-llama2-13b", {"workload__requests": 300, "serving__gpu_memory_utilization": 0.4,
                         "serving__max_num_seqs": 64}),           # with preemptions
])
def test_fast_forward_gives_the_same_latencies_as_stepping(example, changes):
    _, fast = simulate(example, fast_forward=True, **changes)
    _, slow = simulate(example, fast_forward=False, **changes)
    assert fast.requests == slow.requests
    for a, b in zip(fast.per_request.rows(), slow.per_request.rows()):
        assert a.id == b.id and a.instance == b.instance
        assert a.ttft == pytest.approx(b.ttft, rel=1e-9, abs=1e-9)
        assert a.e2e == pytest.approx(b.e2e, rel=1e-9, abs=1e-9)
    assert fast.preemptions == slow.preemptions


def test_without_prefix_cache_or_lmcache_no_block_keys_are_hashed_and_nothing_changes():
    no_caches = dict(workload__requests=200, serving__prefix_caching=False, lmcache=None, ceph=None)
    held = []

    def watch(engine, tokens):
        held.extend(len(seq.blocks) for seq in engine.running)

    sim, lean = simulate(on_step=watch, **no_caches)
    assert not sim.engines[0].keyed and held and not any(held)      # no request held a key

    keyed = Simulation(resolve(spec("chat-llama2-13b", **no_caches)))
    for engine in keyed.engines:
        engine.keyed = True                  # hash them anyway: nothing reads them, so nothing moves
    hashed = keyed.run()
    assert [(r.ttft, r.e2e) for r in lean.per_request.rows()] == [(r.ttft, r.e2e) for r in hashed.per_request.rows()]


def test_request_merging_holds_arrivals_to_prefill_them_together(tmp_path):
    trace = tmp_path / "burst.jsonl"
    trace.write_text("".join(f'{{"timestamp": {t}, "input_length": 600, "output_length": 4, "hash_ids": [{i}, {i + 100}]}}\n'
                             for i, t in enumerate((0, 10, 20))))
    # request merging is simulation-only: neither vLLM nor LMCache has the setting
    base = dict(workload__trace={"path": str(trace)}, serving__instances=1, serving__router="round_robin", simulate_only=True)
    _, plain = simulate("mooncake-replay", **base)
    _, merged = simulate("mooncake-replay", lmcache__merging={"window": "50ms", "max_tokens": 100000}, **base)
    assert plain.per_request[0].queue == pytest.approx(0)
    # held until the window of the first arrival closes, then all three go in one step
    assert [round(q, 6) for q in merged.per_request.queue] == [0.05, 0.04, 0.03]
    _, capped = simulate("mooncake-replay", lmcache__merging={"window": "50ms", "max_tokens": 1200}, **base)
    assert capped.per_request[0].queue == pytest.approx(0.01)       # 1,200 tokens waiting at 10 ms: go


def test_more_load_never_lowers_mean_ttft_across_seeds():
    means = []
    for rate in ("0.2/s", "0.8/s", "3/s"):
        runs = [simulate(workload__requests=300, workload__seed=seed, workload__arrivals={"session_rate": rate})[1]
                for seed in range(3)]
        means.append(sum(r.ttft.mean for r in runs) / len(runs))
    assert means == sorted(means) and means[0] < means[-1]


def test_ablation_adds_one_tier_at_a_time():
    from kvplan.sim.ablation import ablate, variants

    names = [name for name, _ in variants(spec("chat-llama2-13b"))]
    assert names == ["no reuse", "hbm only", "+ ddr", "+ nvme", "+ ceph"]
    plus_ddr = dict(variants(spec("chat-llama2-13b")))["+ ddr"]
    assert plus_ddr.lmcache.nvme is None and plus_ddr.lmcache.ceph is None and plus_ddr.ceph is None
    results = dict(ablate(spec("chat-llama2-13b", workload__requests=200)))
    assert results["no reuse"].recomputed_tokens == results["no reuse"].prompt_tokens
    assert results["hbm only"].recomputed_tokens < results["no reuse"].recomputed_tokens
    assert results["+ ceph"].recomputed_tokens <= results["hbm only"].recomputed_tokens


@pytest.mark.parametrize("budget", [None, 5])
def test_visiting_only_what_changes_schedules_as_visiting_every_request(budget):
    # _schedule visits the prefilling requests and the decoding ones at a block boundary;
    # _schedule_each, its fallback, is vLLM's loop over every running request: run for every step,
    # it must give exactly the same figures. A budget of 5 (below max_num_seqs, which the spec
    # refuses) keeps every step's budget tight; gpu_memory_utilization 0.375 leaves about 5.5 GiB of KV, so
    # requests are preempted.
    def run(visit_each: bool):
        sim = Simulation(resolve(spec("chat-llama2-13b", workload__requests=300, serving__max_num_seqs=16,
                                      serving__max_num_batched_tokens=512, serving__gpu_memory_utilization=0.375)))
        for engine in sim.engines:
            engine.budget = budget or engine.budget
            engine.probe = Probe(visit_each=visit_each)
        return sim.run()

    changed = run(False)
    each = run(True)
    assert changed.preemptions > 0
    assert changed.model_dump_json() == each.model_dump_json()


def test_with_async_scheduling_an_arrival_waits_one_step_more():
    """vLLM schedules step k+1 while step k runs, so a request arriving during step k is first scheduled into
    step k+2: on a busy engine its TTFT is one decode step longer than with synchronous scheduling, and
    nothing else changes."""
    _, sync = simulate(workload__requests=300, serving__async_scheduling=False)
    _, both = simulate(workload__requests=300, serving__async_scheduling=True)
    extra = both.ttft.mean - sync.ttft.mean
    assert 0.7 * sync.tpot.mean < extra < 1.3 * sync.tpot.mean
    assert both.tpot.mean == pytest.approx(sync.tpot.mean, rel=0.05)


def test_an_idle_engine_schedules_an_arrival_at_once():
    """With nothing running there is no step under way and none scheduled ahead: a request that finds the engine
    idle has the same TTFT either way (at this load most do); one that finds it busy waits longer."""
    changes = dict(workload__requests=30, workload__arrivals__session_rate="0.02/s")
    _, sync = simulate(serving__async_scheduling=False, **changes)
    _, both = simulate(serving__async_scheduling=True, **changes)
    pairs = list(zip(sync.per_request.rows(), both.per_request.rows()))
    assert sum(a.ttft == b.ttft for a, b in pairs) >= 0.7 * len(pairs)
    assert all(b.ttft >= a.ttft for a, b in pairs)
