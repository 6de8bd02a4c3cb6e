"""Load stages and closed-loop concurrency (kvplan.spec.stages, kvplan.sim.stages, kvplan.sim.load).

A workload's `stages` run one after the other on the same servers, each an open loop at a rate
or a closed loop of users, each ending at its duration or after its requests. A closed loop
keeps exactly its users' requests in flight: a user sends the next request when the reply to
its last has come. Every result figure is also given per stage, and the stages' figures add up
to the run's. The examples run examples/local.yaml's tiny model on its CPU, a few hundred
requests each.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim import stages as staged
from kvplan.sim.run import Simulation, run
from kvplan.spec import from_mapping
from kvplan.spec.slo import Slo

from conftest import REPO, example_data

CHAT = {k: v for k, v in example_data("local")["workload"].items() if k not in ("requests", "arrivals")}
"""examples/local.yaml's chat: 4 turns a session, 2 s think time, 4 system prompts, short outputs."""
PLAIN = {k: v for k, v in CHAT.items() if k != "sessions"}
"""The same requests without sessions: every request a user's one question."""


def local(workload: dict, **serving):
    data = example_data("local")
    data["workload"] = workload
    data["serving"].update(serving)
    return from_mapping(data, base_dir=REPO / "examples")


def simulate(workload: dict, seed: int | None = None, **serving):
    return run(resolve(local(workload, **serving)), seed=seed)


def refusal(workload: dict) -> str:
    with pytest.raises(SpecError) as caught:
        local(workload)
    return caught.value.render()


def in_flight(res, first: int = 0, last: int | None = None) -> np.ndarray:
    """How many of requests first..last-1 are in flight between one event of theirs (a send, a reply) and the next,
    from their first send to their last: a request is in flight from its arrival until its reply has come (arrival +
    E2E)."""
    t = res.per_request
    sent, done = t.arrival[first:last], (t.arrival + t.e2e)[first:last]
    events = np.unique(np.concatenate([sent, done]))
    events = events[events <= sent.max()]
    middles = (events[:-1] + events[1:]) / 2
    return np.array([((sent < at) & (done > at)).sum() for at in middles])


# ------------------------------------------------------------------------------------------- the spec

def test_a_stage_is_an_open_loop_at_a_rate_or_a_closed_loop_of_users_never_both():
    both = refusal({**CHAT, "stages": [{"session_rate": "2/s", "concurrency": 4, "requests": 10}]})
    assert "workload.stages[0]: rate and concurrency are exclusive" in both
    assert "fix: keep one of the two, or make them two stages one after the other" in both
    neither = refusal({**CHAT, "stages": [{"requests": 10}]})
    assert "workload.stages[0]: a stage needs a rate (an open loop) or a concurrency" in neither


def test_a_stage_needs_an_end_and_a_closed_loop_has_exactly_one():
    assert "workload.stages[1]: a stage needs an end" in refusal(
        {**CHAT, "stages": [{"session_rate": "2/s", "requests": 10}, {"session_rate": "4/s"}]})
    both = refusal({**CHAT, "stages": [{"concurrency": 4, "requests": 10, "duration": "1min"}]})
    assert "a closed loop ends by its duration or by its requests, not both" in both
    assert "fix: keep workload.stages[0].duration or workload.stages[0].requests" in both
    local({**CHAT, "stages": [{"session_rate": "2/s", "requests": 10, "duration": "1min"}]})     # an open loop may have both


def test_stages_replace_the_workloads_own_rate_concurrency_requests_and_duration():
    text = refusal({**CHAT, "requests": 100, "duration": "1min", "arrivals": {"session_rate": "2/s"},
                    "stages": [{"session_rate": "4/s", "duration": "30s"}]})
    assert "workload.requests: conflicts with workload.stages: each stage ends by its own duration or requests" in text
    assert "fix: move it into the stages (e.g. requests: 100 on the last one), or remove workload.stages" in text
    assert "workload.duration: conflicts with workload.stages" in text
    assert "workload.arrivals.session_rate: conflicts with workload.stages: each stage sets its own rate or concurrency" in text
    # arrivals.process stays: it is every rate stage's default
    local({**CHAT, "arrivals": {"process": "gamma", "cv": 2}, "stages": [{"session_rate": "4/s", "duration": "30s"}]})


def test_a_stage_of_a_session_workload_gives_new_sessions_as_session_rate():
    # one rate: `rate` counts requests everywhere, so a stage of sessions names its new sessions so
    text = refusal({**CHAT, "stages": [{"rate": "2/s", "requests": 10}]})
    assert "workload.stages[0].rate: counts requests, but this workload has sessions" in text
    assert "fix: write session_rate: 2sessions/s" in text
    text = refusal({**PLAIN, "stages": [{"session_rate": "2/s", "requests": 10}]})
    assert "workload.stages[0].session_rate: counts new sessions, but this workload has no sessions" in text
    staged = local({**CHAT, "stages": [{"session_rate": "2sessions/s", "requests": 10}]})
    assert staged.workload.stages[0].describe() == "session_rate 2/s, 10 requests"


def test_a_closed_loop_has_no_rate_and_no_arrival_process():
    text = refusal({**PLAIN, "requests": 40, "arrivals": {"rate": "2/s", "process": "gamma", "concurrency": 4}})
    assert "workload.arrivals.rate: conflicts with arrivals.concurrency" in text
    assert "fix: keep one of the two: remove arrivals.rate for a closed loop of 4 users" in text
    assert "workload.arrivals.process: a closed loop has no arrival process" in text
    assert "workload.stages[0].cv: a closed loop has no arrival process" in refusal(
        {**CHAT, "stages": [{"concurrency": 4, "requests": 10, "cv": 2}]})


def test_stages_and_closed_loops_are_for_synthetic_workloads_not_traces():
    trace = {"kind": "trace", "trace": {"path": "traces/mooncake-conversation-first1000.jsonl"}}
    assert "workload.stages: a trace is replayed at its own timestamps" in refusal(
        {**trace, "stages": [{"rate": "2/s", "duration": "10s"}]})
    assert "workload.arrivals.concurrency: a trace is replayed at its own timestamps" in refusal(
        {**trace, "arrivals": {"concurrency": 4}})


def test_a_rescaled_poisson_stage_with_nothing_to_send_is_refused():
    text = refusal({**CHAT, "stages": [{"session_rate": "0.5/s", "duration": "1s", "process": "rescaled_poisson"}]})
    assert "rescaled_poisson sends int(rate x duration) = int(0.5 x 1) = 0 requests" in text


# ------------------------------------------------------------------------------------------- open loops

def test_rescaled_poisson_sends_exactly_rate_times_duration_the_last_as_the_stage_ends():
    """inference-perf's `constant` load (load_timer.py, ConstantLoadTimer at e8e0aa99): int(rate x duration) exponential
    gaps rescaled to add up to the duration."""
    r = resolve(local({**PLAIN, "stages": [{"rate": "7/s", "duration": "3s", "process": "rescaled_poisson"},
                                            {"rate": "0.29/s", "duration": "100s", "process": "rescaled_poisson"}]}))
    reqs = staged.requests(r)
    times = np.array([q.arrival for q in reqs])
    assert len(reqs) == 21 + 28                       # int(7 x 3), and int(0.29 x 100) = int(28.999...) in Python
    assert times[20] == 3.0 and times[-1] == 103.0    # each stage's last arrival is its end
    gaps = np.diff(times[:21], prepend=0.0)
    assert (gaps > 0).all() and 0.2 < gaps.std() / gaps.mean() < 2.0   # exponential-like gaps, not equal ones


def test_a_one_stage_workload_is_the_workload_without_stages():
    """Stage 0 draws from the workload's own random stream, so the same load written as a stage is the same run."""
    plain = simulate({**CHAT, "requests": 120, "arrivals": {"session_rate": "2/s"}})
    one = simulate({**CHAT, "stages": [{"session_rate": "2/s", "requests": 120}]})
    for column in type(plain.per_request).model_fields:
        assert np.array_equal(getattr(plain.per_request, column), getattr(one.per_request, column)), column
    assert plain.model_dump(exclude={"per_request", "spec_hash", "steady_state"}) == \
        one.model_dump(exclude={"per_request", "spec_hash", "steady_state", "stages"})
    # the same verdict on every tier; only the advice on how to make the run longer names the stages
    assert [s.model_dump(exclude={"note"}) for s in plain.steady_state] == \
        [s.model_dump(exclude={"note"}) for s in one.steady_state]
    assert [s.requests for s in one.stages] == [120]


def test_open_stages_run_back_to_back_each_within_its_window():
    res = simulate({**PLAIN, "stages": [{"rate": "4/s", "duration": "10s"},
                                        {"rate": "1/s", "requests": 8, "pause": "5s"},
                                        {"rate": "6/s", "duration": "5s", "process": "constant"}]})
    first, second, third = res.stages
    assert (first.start, first.end) == (0.0, 10.0)
    assert second.start == 10.0 and second.requests == 8
    assert third.start == pytest.approx(second.end + 5.0) and third.end == pytest.approx(third.start + 5.0)
    assert third.requests == 30                       # constant: equal gaps of 1/6 s, the last one at the end
    arrivals = res.per_request.arrival
    lo = 0
    for st in res.stages:
        mine = arrivals[lo:lo + st.requests]
        assert (mine > st.start).all() and (mine <= st.end + 1e-9).all()
        lo += st.requests
    assert arrivals[lo - 1] == pytest.approx(third.end)


def test_a_later_stage_sends_the_same_requests_whatever_the_stages_before_it_drew():
    """Stage k > 0 draws from its own random stream (child k of the seed's SeedSequence)."""
    short = staged.requests(resolve(local({**PLAIN, "stages": [{"rate": "2/s", "requests": 5},
                                                                {"rate": "2/s", "requests": 20}]})))
    long = staged.requests(resolve(local({**PLAIN, "stages": [{"rate": "2/s", "requests": 50},
                                                               {"rate": "2/s", "requests": 20}]})))
    lengths = lambda reqs: [(q.prompt_tokens, q.output_tokens) for q in reqs]   # noqa: E731
    assert lengths(short[5:]) == lengths(long[50:])
    assert lengths(short[:5]) == lengths(long[:5])


def test_a_draining_stage_starts_the_next_only_after_its_last_reply_and_the_pause():
    res = simulate({**PLAIN, "stages": [{"rate": "20/s", "duration": "3s", "drain": True, "pause": "1s"},
                                        {"rate": "2/s", "duration": "3s"}]})
    t = res.per_request
    first = res.stages[0]
    last_reply = float((t.arrival + t.e2e)[:first.requests].max())     # E2E counts until the reply has come
    assert last_reply > first.end                     # it was still serving when its arrivals stopped
    assert res.stages[1].start == pytest.approx(last_reply + 1.0)


# ------------------------------------------------------------------------------------------- closed loops

def test_a_closed_loop_keeps_exactly_its_users_requests_in_flight_never_more():
    res = simulate({**PLAIN, "stages": [{"concurrency": 3, "requests": 60}, {"concurrency": 8, "requests": 80}]})
    assert [s.requests for s in res.stages] == [60, 80]
    for st, lo, users in ((res.stages[0], 0, 3), (res.stages[1], 60, 8)):
        # the users start together, each later send answers a reply at once: never more, never fewer while it sends
        assert (in_flight(res, lo, lo + st.requests) == users).all()


def test_each_user_sends_its_next_request_the_moment_its_reply_has_come():
    res = simulate({**PLAIN, "arrivals": {"concurrency": 2}, "requests": 30})
    t = res.per_request
    replies = np.sort(t.arrival + t.e2e)
    later = t.arrival[2:]                              # every send after the first two answers a reply
    assert np.allclose(later, replies[:len(later)], atol=1e-9)


def test_a_user_runs_a_sessions_turns_in_order_each_a_think_time_after_the_reply_before():
    spec = resolve(local({**CHAT, "arrivals": {"concurrency": 3}, "requests": 40}))
    sim = Simulation(spec)
    sent = []
    submit = sim._submit
    sim._submit = lambda req: (sent.append(req), submit(req))
    res = sim.run()
    t = res.per_request
    by_session: dict[int, list] = {}
    for req in sent:
        by_session.setdefault(req.session, []).append(req)
    assert len(by_session) >= 3 and any(len(turns) > 1 for turns in by_session.values())
    for turns in by_session.values():
        assert [q.turn for q in turns] == list(range(len(turns)))
        for before, after in zip(turns, turns[1:]):
            reply = t.arrival[before.id] + t.e2e[before.id]
            assert after.arrival > reply                   # thought (think time 2 s on average) after the reply
            whole = before.prompt_tokens + before.output_tokens          # the turn before, its reply included
            assert after.prompt_tokens > whole and after.content.keys(128, whole) == before.content.keys(128, whole)
    assert in_flight(res).max() <= 3                  # with think times, some users are thinking


def test_a_closed_loop_stage_by_duration_sends_nothing_after_it():
    res = simulate({**PLAIN, "stages": [{"concurrency": 4, "duration": "5s"}, {"rate": "1/s", "requests": 3}]})
    first, second = res.stages
    assert first.end == 5.0 and second.start == 5.0
    assert (res.per_request.arrival[:first.requests] <= 5.0).all()


def test_requests_too_long_count_as_sent_and_a_loop_that_only_draws_them_is_stopped():
    # a 1,024-token system prompt and max_model_len 1,200: an output of 176 tokens or more leaves no room for a question
    sometimes = {**PLAIN, "output": {"dist": "uniform", "min": 100, "max": 300}}
    res = simulate({**sometimes, "arrivals": {"concurrency": 2}, "requests": 50}, max_model_len=1200)
    assert res.requests + res.rejected_requests == 50 and res.rejected_requests > 10
    never = {**PLAIN, "output": 300}
    with pytest.raises(SpecError) as caught:
        simulate({**never, "arrivals": {"concurrency": 2}, "duration": "10s"}, max_model_len=1200)
    assert "workload.arrivals.concurrency: the last 10,000 sessions its users drew were all rejected" \
        in caught.value.render()


# ------------------------------------------------------------------------------------------- shared_prefix

SHAPE = {"num_groups": 3, "num_prompts_per_group": 4, "system_prompt_len": 300, "question_len": 60, "output_len": 20}


def prompt_of(req) -> int:
    """The shared_prefix prompt a request sends: its content's (QUESTION, prompt) run."""
    return req.content.parts[1][0][1]


def test_a_shared_prefix_load_as_one_stage_is_the_same_run():
    plain = simulate({"kind": "shared_prefix", "shared_prefix": SHAPE, "requests": 40, "arrivals": {"rate": "4/s"}})
    one = simulate({"kind": "shared_prefix", "shared_prefix": SHAPE, "stages": [{"rate": "4/s", "requests": 40}]})
    for column in type(plain.per_request).model_fields:
        assert np.array_equal(getattr(plain.per_request, column), getattr(one.per_request, column)), column


def test_every_shared_prefix_stage_starts_again_at_the_first_prompt_of_the_order():
    """inference-perf numbers each stage's requests from 0 and sends prompt k mod (groups x prompts) of one order."""
    reqs = staged.requests(resolve(local({"kind": "shared_prefix", "shared_prefix": SHAPE, "stages": [
        {"rate": "4/s", "requests": 15}, {"rate": "8/s", "duration": "2s", "process": "rescaled_poisson"}]})))
    order = [prompt_of(q) for q in reqs]
    assert len(reqs) == 15 + 16 and sorted(order[:12]) == list(range(12))
    assert order[15:] == order[:12] + order[:4]
    assert reqs[15].content.keys(1, reqs[15].prompt_tokens) == reqs[0].content.keys(1, reqs[0].prompt_tokens)
    assert reqs[15].content.keys(1, len(reqs[15].content)) != reqs[0].content.keys(1, len(reqs[0].content))  # outputs


def test_a_closed_loop_of_shared_prefix_users_sends_the_prompts_in_order():
    spec = resolve(local({"kind": "shared_prefix", "shared_prefix": SHAPE, "arrivals": {"concurrency": 4},
                          "requests": 30}))
    sim = Simulation(spec)
    sent = []
    submit = sim._submit
    sim._submit = lambda req: (sent.append(req), submit(req))
    res = sim.run()
    listed = staged.requests(resolve(local({"kind": "shared_prefix", "shared_prefix": SHAPE, "requests": 30,
                                            "arrivals": {"rate": "1/s"}})))
    assert [prompt_of(q) for q in sent] == [prompt_of(q) for q in listed]
    assert (in_flight(res) == 4).all()


# ------------------------------------------------------------------------------------------- results

def test_the_stages_figures_add_up_to_the_whole_runs():
    res = simulate({**CHAT, "stages": [{"session_rate": "1/s", "duration": "20s"}, {"concurrency": 6, "requests": 50},
                                       {"session_rate": "3/s", "requests": 40, "process": "rescaled_poisson"}]})
    st = res.stages
    assert sum(s.requests for s in st) == res.requests == len(res.per_request)
    assert sum(s.rejected_requests for s in st) == res.rejected_requests
    assert sum(s.prompt_tokens for s in st) == res.prompt_tokens
    assert sum(s.recomputed_tokens for s in st) == res.recomputed_tokens
    assert sum(s.generated_tokens for s in st) == int(res.per_request.output_tokens.sum())
    for name in ("ttft", "e2e", "queue"):
        weighted = sum(getattr(s, name).mean * s.requests for s in st) / res.requests
        assert weighted == pytest.approx(getattr(res, name).mean)
    lo, weighted, decoding = 0, 0.0, 0                # TPOT is over requests with more than one output token
    for s in st:
        d = int((res.per_request.output_tokens[lo:lo + s.requests] > 1).sum())
        weighted, decoding, lo = weighted + s.tpot.mean * d, decoding + d, lo + s.requests
    assert weighted / decoding == pytest.approx(res.tpot.mean)
    assert max(s.start + s.duration for s in st) == pytest.approx(res.duration, abs=1.0)


def test_a_stages_throughput_is_its_requests_over_its_first_arrival_to_last_completion():
    res = simulate({**PLAIN, "stages": [{"rate": "4/s", "duration": "10s"}]})
    t, st = res.per_request, res.stages[0]
    overhead = resolve(local(PLAIN | {"requests": 1})).step.request_overhead   # E2E's HTTP time after the last token
    assert st.duration == pytest.approx(float((t.arrival + t.e2e - overhead).max() - t.arrival.min()))
    assert st.requests_per_s == pytest.approx(st.requests / st.duration)


def test_a_run_without_stages_has_no_stages_in_its_json_and_one_with_them_has():
    plain = simulate({**PLAIN, "requests": 10, "arrivals": {"rate": "2/s"}})
    closed = simulate({**PLAIN, "requests": 10, "arrivals": {"concurrency": 2}})
    stages = simulate({**PLAIN, "stages": [{"rate": "2/s", "requests": 10}]})
    assert "stages" not in plain.model_dump(mode="json") and "stages" not in plain.fields()
    assert "stages" not in closed.model_dump(mode="json")   # one closed loop is the whole run, not a stage of it
    assert stages.model_dump(mode="json")["stages"][0]["requests"] == 10 and "stages" in stages.fields()


def test_the_same_seed_gives_the_same_staged_run_and_another_seed_another():
    workload = {**CHAT, "stages": [{"session_rate": "2/s", "duration": "10s"}, {"concurrency": 4, "requests": 30}]}
    a, b, c = simulate(workload), simulate(workload), simulate(workload, seed=7)
    assert a.model_dump_json() == b.model_dump_json()
    assert a.model_dump_json() != c.model_dump_json()


# ------------------------------------------------------------------------------------------- other consumers

def test_a_closed_loop_cannot_be_listed_in_advance_and_says_who_can_run_it():
    with pytest.raises(SpecError) as caught:
        staged.requests(resolve(local({**PLAIN, "stages": [{"rate": "2/s", "requests": 5},
                                                           {"concurrency": 2, "requests": 5}]})))
    text = caught.value.render()
    assert "workload.stages[1]: is a closed loop, whose users send when their replies come" in text
    assert "fix: kvplan simulate and kvplan bench run it" in text


def test_the_planner_and_the_capacity_search_refuse_a_load_whose_rate_they_cannot_set():
    from kvplan.plan.search import plan
    from kvplan.sweep.capacity import Knob

    closed = local({**PLAIN, "arrivals": {"concurrency": 2}, "requests": 10})
    with pytest.raises(SpecError) as caught:
        plan(closed, 4.0, Slo(ttft_p99="1s"))
    assert "workload.arrivals.concurrency: the planner sets workload.arrivals.rate, and a closed loop has no rate" \
        in caught.value.render()
    with pytest.raises(SpecError) as caught:
        Knob.of(local({**PLAIN, "stages": [{"rate": "2/s", "requests": 5}]}))
    assert "workload.stages: kvplan capacity sets workload.arrivals.rate" in caught.value.render()


def test_kvplan_simulate_reports_stages_in_its_json_and_its_markdown_only_for_a_staged_spec():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    kvplan = str(Path(sys.executable).parent / "kvplan")
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}

    def simulate_cli(*args: str) -> str:
        done = subprocess.run([kvplan, "simulate", *args], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout

    staged = json.loads(simulate_cli("docs/examples/stages.yaml", "--json"))
    assert [s["requests"] for s in staged["stages"]] == [20, 50, 100]      # int(rate x 10 s) each: rescaled_poisson
    assert sum(s["requests"] for s in staged["stages"]) == staged["requests"]
    assert set(staged["stages"][0]) >= {"ttft", "tpot", "e2e", "requests_per_s", "start", "end", "load", "duration"}
    assert "## Stages" in simulate_cli("docs/examples/stages.yaml", "--format", "md")
    closed = simulate_cli("docs/examples/closed-loop.yaml", "--format", "md")
    assert "Stages" not in closed
    assert "stages" not in json.loads(simulate_cli("docs/examples/closed-loop.yaml", "--json"))
