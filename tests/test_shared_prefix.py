"""kind: shared_prefix, inference-perf's data shape: groups of prompts that share a system prompt, made once and sent
over and over in one shuffled order (kvplan/sim/shapes.py cites the generator it copies).

Sharing is checked at unit 1 (a key per token), so "shares n keys" reads "shares n tokens".
"""

from __future__ import annotations

from collections import Counter

import pytest

from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.shapes import SharedPrefixSet
from kvplan.sim.workload import Request, requests, stream
from kvplan.spec import from_mapping
from kvplan.spec.workload import generator

from conftest import tokens_shared

SHAPE = {"num_groups": 3, "num_prompts_per_group": 4, "system_prompt_len": 100, "question_len": 40, "output_len": 25}


def setup(shape: dict | None = None, max_model_len: int | None = None, **workload):
    """Llama-3.1-8B on one H100 sending a shared_prefix set: 30 requests at 5/s unless told otherwise."""
    w = {"kind": "shared_prefix", "requests": 30, "arrivals": {"rate": "5/s"}, "shared_prefix": shape or SHAPE,
         **workload}
    data = {"name": "sp", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"}, "workload": w}
    if max_model_len:
        data["serving"]["max_model_len"] = max_model_len
    return resolve(from_mapping(data))


def sent(r: Request) -> int:
    """The prompt a request sends, by its content's question run: (QUESTION, prompt)."""
    return r.content.parts[1][0][1]


def group(r: Request) -> int:
    return r.content.parts[0][0][1]


@pytest.fixture(scope="module")
def reqs():
    return requests(setup())


def test_every_request_sends_the_next_prompt_of_one_fixed_order_round_and_round(reqs):
    """3 groups x 4 prompts: the first 12 requests send each prompt once, then the same 12 again, in the same order,
    as inference-perf's get_request(k) sends prompt k mod 12."""
    order = [sent(r) for r in reqs]
    assert sorted(order[:12]) == list(range(12))
    assert order[12:24] == order[:12] and order[24:] == order[:6]
    order_drawn = SharedPrefixSet(setup().workload.shared_prefix, generator(0)).order.tolist()
    assert order[:12] == order_drawn


def test_the_order_is_shuffled_not_group_by_group(reqs):
    """inference-perf shuffles the prompts it made group by group; the groups interleave."""
    groups = [group(r) for r in reqs[:12]]
    assert groups != sorted(groups)
    assert Counter(groups) == {0: 4, 1: 4, 2: 4}


def test_prompts_of_a_group_share_exactly_their_system_prompt(reqs):
    first = reqs[:12]
    for a in first:
        for b in first:
            if a is b:
                continue
            assert tokens_shared(a, b) == (100 if group(a) == group(b) else 0)


def test_a_prompt_sent_again_is_the_same_prompt_token_for_token_but_its_reply_is_new(reqs):
    for a, b in zip(reqs[:12], reqs[12:24]):
        assert sent(a) == sent(b) and tokens_shared(a, b) == a.prompt_tokens == 140
        whole = a.prompt_tokens + a.output_tokens
        assert a.content.keys(1, whole)[140] != b.content.keys(1, whole)[140]


def test_arrivals_follow_the_workloads_arrival_process(reqs):
    assert len(reqs) == 30 and [r.id for r in reqs] == list(range(30))
    gaps = [b.arrival - a.arrival for a, b in zip(reqs, reqs[1:])]
    assert all(g > 0 for g in gaps) and len(set(gaps)) == len(gaps)      # poisson by default
    constant = requests(setup(arrivals={"process": "constant", "rate": "4/s"}))
    assert [r.arrival for r in constant[:3]] == [0.25, 0.5, 0.75]
    timed = requests(setup(requests=None, duration="3s", arrivals={"process": "constant", "rate": "4/s"}))
    assert [r.arrival for r in timed][-1] == 3.0 and len(timed) == 12


def test_lengths_may_be_distributions_drawn_per_group_and_per_prompt():
    """system_prompt_len is drawn once per group, question_len and output_len once per prompt (as the newest
    inference-perf does): a prompt keeps its lengths every time it is sent."""
    shape = {**SHAPE, "system_prompt_len": {"dist": "uniform", "min": 50, "max": 300},
             "question_len": {"dist": "uniform", "min": 10, "max": 90},
             "output_len": {"dist": "uniform", "min": 5, "max": 60}}
    reqs = requests(setup(shape, requests=36))
    by_prompt: dict[int, set] = {}
    system: dict[int, set] = {}
    for r in reqs:
        by_prompt.setdefault(sent(r), set()).add((r.prompt_tokens, r.output_tokens))
        system.setdefault(group(r), set()).add(r.content.parts[0][1])
    assert all(len(v) == 1 for v in by_prompt.values()) and len(by_prompt) == 12
    assert all(len(v) == 1 for v in system.values()) and len({next(iter(v)) for v in system.values()}) == 3
    assert len({next(iter(v)) for v in by_prompt.values()}) > 6


def test_the_same_seed_gives_the_same_requests_and_another_seed_another_order():
    def fingerprint(rs):
        return [(r.arrival, r.prompt_tokens, r.output_tokens, tuple(r.content.keys(16, r.prompt_tokens))) for r in rs]
    assert fingerprint(requests(setup())) == fingerprint(requests(setup()))
    assert [sent(r) for r in requests(setup(seed=1))] != [sent(r) for r in requests(setup())]


def test_a_prompt_longer_than_max_model_len_is_rejected_every_time_it_is_sent():
    shape = {**SHAPE, "question_len": {"dist": "uniform", "min": 10, "max": 400}}
    reqs = requests(setup(shape, max_model_len=300, requests=24))
    drawn = SharedPrefixSet(setup(shape).workload.shared_prefix, generator(0))
    too_long = int(sum(drawn.prompt_tokens + drawn.output_tokens > 300))
    assert 0 < too_long < 12
    assert reqs.rejected == 2 * too_long and len(reqs) == 24 - 2 * too_long
    assert all(r.prompt_tokens + r.output_tokens <= 300 for r in reqs)


def test_the_stream_a_run_takes_is_the_list():
    r = setup()
    s = stream(r)
    listed = requests(r)
    assert (len(s), s.last_arrival, s.rejected) == (len(listed), listed[-1].arrival, 0)
    assert [(q.arrival, q.content.parts) for q in s] == [(q.arrival, q.content.parts) for q in listed]


@pytest.mark.parametrize("workload, path, says", [
    ({"kind": "shared_prefix", "requests": 5}, "workload.shared_prefix", "kind shared_prefix needs a shared_prefix "
                                                                         "section"),
    ({"kind": "chat", "requests": 5, "shared_prefix": SHAPE}, "workload.shared_prefix",
     "only read with kind: shared_prefix (kind is chat)"),
    ({"kind": "shared_prefix", "shared_prefix": SHAPE}, "workload", "needs an end: requests or duration"),
    ({"kind": "shared_prefix", "requests": 5, "shared_prefix": SHAPE, "prompt": 100}, "workload.prompt",
     "kind shared_prefix does not read workload.prompt: its requests come from workload.shared_prefix"),
    ({"kind": "shared_prefix", "requests": 5, "shared_prefix": SHAPE, "sessions": {"turns": 3}}, "workload.sessions",
     "does not read"),
    ({"kind": "shared_prefix", "requests": 5, "shared_prefix": SHAPE,
      "shared_prefixes": {"count": 3}}, "workload.shared_prefixes", "does not read"),
    ({"kind": "shared_prefix", "requests": 5, "shared_prefix": {"num_groups": 5000, "num_prompts_per_group": 5000}},
     "workload.shared_prefix", "25,000,000 prompts, more than the 10,000,000 kvplan holds"),
])
def test_the_spec_says_what_a_shared_prefix_workload_needs(workload, path, says):
    with pytest.raises(SpecError) as err:
        from_mapping({"name": "sp", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"}, "workload": workload})
    assert any(p.path == path and says in p.message for p in err.value.problems), err.value.render()
