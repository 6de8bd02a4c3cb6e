"""The vLLM engine model: continuous batching within vLLM's limits, and decode fast-forward."""

from __future__ import annotations

import pytest

from kvplan.resolve import resolve
from kvplan.sim.run import Simulation

from conftest import spec


def simulate(example="chat-llama2-13b", fast_forward=True, on_step=None, **changes):
    sim = Simulation(resolve(spec(example, **changes)))
    for engine in sim.engines:
        engine.fast_forward = fast_forward
        engine.on_step = on_step
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
    for rec in res.per_request:
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
    for a, b in zip(fast.per_request, slow.per_request):
        assert a.id == b.id and a.instance == b.instance
        assert a.ttft == pytest.approx(b.ttft, rel=1e-9, abs=1e-9)
        assert a.e2e == pytest.approx(b.e2e, rel=1e-9, abs=1e-9)
    assert fast.preemptions == slow.preemptions
