"""kvplan.live.bench: the load generator, against a fake vLLM.

bench.py replays a workload against an OpenAI-compatible server (here a fake one on an ephemeral
port): it measures each request, carries a chat turn's real reply into the next turn, and never
hangs or raises for a request that fails, stalls or is cut off. Before it starts, it checks that the
target answers and serves the spec's model, and says how to fix it when not.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from kvplan.live.bench import Bench, BenchError, Outcome, Target, check_target
from kvplan.live.observe import observe_vllm
from kvplan.resolve import resolve
from kvplan.sim.workload import requests
from kvplan.spec import from_mapping, read_yaml

from conftest import REPO
from live_fakes import LOCAL, MODEL, SALT, PLAIN_BENCH, common_prefix, fake_vllm, local, unused_port


CHAT_BENCH = {
    "kind": "chat", "seed": 4, "requests": 10,
    "arrivals": {"process": "poisson", "session_rate": "20/s"},
    "sessions": {"turns": {"dist": "uniform", "min": 2, "max": 3}, "think_time": "50ms"},
    "shared_prefixes": {"count": 2, "skew": 1.0, "tokens": 100},
    "prompt": {"dist": "uniform", "min": 8, "max": 40},
    "output": {"dist": "uniform", "min": 3, "max": 6},
}


def prompt_of(bench: Bench, req, outputs: dict | None = None) -> list[int]:
    return bench.body(req, outputs or {})["prompt"]


def test_bench_replays_a_chat_workload_and_measures_every_request():
    """Every request is sent once as a streaming token-id completion of exactly its output length, and the
    client measures TTFT <= E2E, TPOT >= 0 and the tokens it received."""
    r = local(CHAT_BENCH)
    with fake_vllm() as fake:
        bench = Bench(r, [fake.target()], salt=SALT, timeout=10.0)
        outcomes = bench.run()
    reqs = bench.requests()
    assert len(outcomes) == len(reqs) == len(fake.bodies) == 10
    assert len({o.session for o in outcomes}) < len(outcomes)            # sessions with several turns
    for o, q in zip(outcomes, reqs):
        assert o.error is None and o.ok, o
        assert (o.id, o.session, o.turn, o.prompt_tokens, o.output_tokens) == \
            (q.id, q.session, q.turn, q.prompt_tokens, q.output_tokens)
        assert o.received_tokens == o.output_tokens == len(o.output)
        assert o.sent >= 0 and 0 <= o.ttft <= o.e2e and o.tpot >= 0
        assert o.sent >= q.arrival                                       # never before its arrival time
    for body in fake.bodies:
        assert body["model"] == MODEL and body["stream"] is True and body["return_token_ids"] is True
        assert body["ignore_eos"] is True and body["min_tokens"] == body["max_tokens"] >= 1
        assert body["temperature"] == 0.0
        assert isinstance(body["prompt"], list) and all(type(t) is int for t in body["prompt"])
    assert sorted(len(b["prompt"]) for b in fake.bodies) == sorted(q.prompt_tokens for q in reqs)
    assert sorted(b["max_tokens"] for b in fake.bodies) == sorted(q.output_tokens for q in reqs)


def test_a_later_turn_sends_exactly_the_token_ids_the_server_returned_for_the_earlier_turn():
    """As a chat client would: turn k+1's prompt starts with turn k's prompt and the ids the server streamed
    back for it (here unique counter values, so nothing else could produce them)."""
    r = local(CHAT_BENCH)
    with fake_vllm() as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    prompt_for = {tuple(ids): prompt for prompt, ids in fake.replies}       # reply -> the prompt it answered
    assert len(prompt_for) == len(outcomes)
    by_session: dict[int, list[Outcome]] = {}
    for o in outcomes:
        by_session.setdefault(o.session, []).append(o)
    checked = 0
    for turns in by_session.values():
        for earlier, later in zip(turns, turns[1:]):
            assert later.turn == earlier.turn + 1
            head = prompt_for[tuple(earlier.output)] + earlier.output
            p_late = prompt_for[tuple(later.output)]
            assert p_late[:len(head)] == head and len(p_late) == later.prompt_tokens > len(head)
            assert min(earlier.output) >= 5000                            # the fake's ids, not synthetic ones
            checked += 1
    assert checked >= 3


def test_the_same_salt_replays_the_same_prompts_and_another_salt_shares_none():
    """Two runs with one salt send the same first turns (their caches would hit); a fresh salt shares no token run."""
    r = local(PLAIN_BENCH)
    reqs = requests(r)
    same = [prompt_of(Bench(r, [], salt=SALT), q) for q in reqs]
    again = [prompt_of(Bench(r, [], salt=SALT), q) for q in reqs]
    other = [prompt_of(Bench(r, [], salt=SALT + 1), q) for q in reqs]
    assert same == again
    assert all(common_prefix(a, b) < 16 for a, b in zip(same, other))


def test_requests_go_round_robin_over_several_targets():
    r = local(PLAIN_BENCH)
    with fake_vllm() as one, fake_vllm() as two:
        outcomes = Bench(r, [one.target(), two.target()], salt=SALT, timeout=10.0).run()
    assert [o.target for o in outcomes] == [i % 2 for i in range(len(outcomes))]
    assert len(one.bodies) == len(two.bodies) == len(outcomes) // 2
    assert all(o.ok for o in outcomes)


def test_a_server_with_an_api_key_is_benched_with_it_and_names_the_flag_without():
    """vLLM started with --api-key: without the key the bench stops before it starts and says which flag (or
    variable) to set; with it, every request carries the bearer token and succeeds."""
    r = local(PLAIN_BENCH)
    with fake_vllm(api_key="sk-test") as fake:
        with pytest.raises(BenchError) as refused:
            check_target(fake.target(), MODEL, timeout=5.0)
        check_target(fake.target("sk-test"), MODEL, timeout=5.0)
        outcomes = Bench(r, [fake.target("sk-test")], salt=SALT, timeout=10.0).run()
    text = refused.value.render()
    assert "answered HTTP 401" in text and "--api-key" in text and "OPENAI_API_KEY" in text
    assert len(outcomes) == 8 and all(o.ok for o in outcomes)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and its key), made with openssl as a team's own CA would."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_an_https_endpoint_is_benched_and_observed_once_its_certificate_is_trusted(certificate, monkeypatch):
    r = local(PLAIN_BENCH)
    with fake_vllm(tls=certificate) as fake:
        assert fake.url.startswith("https://")
        with pytest.raises(BenchError) as untrusted:
            check_target(fake.target(), MODEL, timeout=5.0)
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
        check_target(fake.target(), MODEL, timeout=5.0)
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
        component, counters = observe_vllm(fake.target(), timeout=5.0)
    text = untrusted.value.render()
    assert "TLS certificate is not trusted" in text and "SSL_CERT_FILE" in text
    assert all(o.ok for o in outcomes) and component.up and counters["prompt_tokens"] > 0


def test_check_target_names_the_url_that_does_not_answer():
    port = unused_port()
    with pytest.raises(BenchError) as info:
        check_target(Target.parse(f"http://127.0.0.1:{port}"), MODEL, timeout=5.0)
    text = info.value.render()
    assert f"http://127.0.0.1:{port} does not answer" in text and "fix:" in text


def test_check_target_names_both_models_when_the_server_serves_another():
    with fake_vllm(model="some-other-model") as fake:
        with pytest.raises(BenchError) as info:
            check_target(fake.target(), MODEL, timeout=5.0)
        check_target(fake.target(), "some-other-model", timeout=5.0)     # the right name passes
    text = info.value.render()
    assert "serves some-other-model, not kvplan-tiny-llama" in text and fake.url in text


@pytest.mark.parametrize("url", ["ftp://x:1", "http://", "unix:///tmp/s"])
def test_target_parse_refuses_what_is_not_an_http_url(url):
    with pytest.raises(BenchError, match="is not an http:// or https:// URL"):
        Target.parse(url)


def test_an_https_target_defaults_to_port_443_and_keeps_its_key_out_of_sight():
    t = Target.parse("https://vllm.example.org/team-a/", api_key="sk-secret")
    assert (t.url, t.port, t.base, t.tls) == ("https://vllm.example.org/team-a", 443, "/team-a", True)
    assert t.headers() == {"Authorization": "Bearer sk-secret"} and "sk-secret" not in repr(t)
    assert Target.parse("127.0.0.1:8000").headers() == {}


def test_target_parse_keeps_a_path_prefix_and_defaults_the_scheme():
    t = Target.parse("127.0.0.1:9/proxy/")
    assert (t.url, t.host, t.port, t.base) == ("http://127.0.0.1:9/proxy", "127.0.0.1", 9, "/proxy")


@pytest.mark.parametrize("framing", ["chunked", "close"])
def test_a_stream_cut_off_midway_fails_that_request_only(framing):
    """A connection that closes after two tokens, before `data: [DONE]`, is a failed request (its partial
    timings would be wrong), whether the body is chunked (uvicorn) or ends with the connection (HTTP/1.0)."""
    r = local(PLAIN_BENCH)
    victim = requests(r)[3]
    doomed = prompt_of(Bench(r, [], salt=SALT), victim)
    behave = lambda body: "drop" if body["prompt"] == doomed else "ok"      # noqa: E731
    with fake_vllm(behave=behave, framing=framing) as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    assert outcomes[3].error == "the stream was cut off after 2 tokens (no data: [DONE])", outcomes[3]
    assert [o.ok for o in outcomes] == [i != 3 for i in range(len(outcomes))], [o.error for o in outcomes]


def test_an_http_error_is_recorded_with_its_status():
    r = local(PLAIN_BENCH)
    doomed = prompt_of(Bench(r, [], salt=SALT), requests(r)[0])
    with fake_vllm(behave=lambda body: "http500" if body["prompt"] == doomed else "ok") as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    assert outcomes[0].error.startswith("HTTP 500") and "engine dead" in outcomes[0].error
    assert all(o.ok for o in outcomes[1:])


@pytest.mark.parametrize("action, message", [
    ("empty", "the stream ended without a token"),
    ("error-event", "stream error: {'message': 'KV cache full', 'code': 500}"),
])
def test_a_stream_without_tokens_or_with_an_error_event_fails(action, message):
    r = local(PLAIN_BENCH)
    doomed = prompt_of(Bench(r, [], salt=SALT), requests(r)[2])
    with fake_vllm(behave=lambda body: action if body["prompt"] == doomed else "ok") as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    assert outcomes[2].error == message and not outcomes[2].ok
    assert all(o.ok for i, o in enumerate(outcomes) if i != 2)


def test_a_stalled_request_times_out_and_the_run_still_returns():
    """A server that stops answering: the request fails 'timed out' after Bench.timeout without data, the
    others complete, and run() returns (the fake stays stalled until the test ends)."""
    r = local(PLAIN_BENCH)
    doomed = prompt_of(Bench(r, [], salt=SALT), requests(r)[1])
    with fake_vllm(behave=lambda body: "stall" if body["prompt"] == doomed else "ok") as fake:
        result: list = []
        worker = threading.Thread(target=lambda: result.append(Bench(r, [fake.target()], salt=SALT, timeout=2.0).run()),
                                  daemon=True)
        worker.start()
        worker.join(60)                                  # only a guard against a hang
        assert not worker.is_alive(), "Bench.run hung on a stalled request"
    outcomes = result[0]
    assert outcomes[1].error == "timed out after 2 s without data" and outcomes[1].first_token < 0
    assert all(o.ok for i, o in enumerate(outcomes) if i != 1)


def test_a_turn_after_a_failed_turn_is_not_sent():
    """A later turn needs the earlier reply: when that turn failed, the later ones fail 'not sent' and never
    reach the server; other sessions go on."""
    r = local(CHAT_BENCH)
    reqs = requests(r)
    first = next(q for q in reqs if q.turn == 0 and sum(x.session == q.session for x in reqs) >= 2)
    doomed = prompt_of(Bench(r, [], salt=SALT), first)
    with fake_vllm(behave=lambda body: "http500" if body["prompt"] == doomed else "ok") as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    later = [o for o in outcomes if o.session == first.session and o.turn > 0]
    assert later and all(o.error == f"not sent: turn {o.turn - 1} of its session failed" for o in later)
    assert all(o.sent < 0 for o in later)
    assert len(fake.bodies) == len(reqs) - len(later)
    assert all(o.ok for o in outcomes if o.session != first.session)


def test_warmup_prefills_are_sent_one_by_one_with_one_token_back():
    """The simulator prefills lmcache.warmup's prefixes and templates at time 0; bench sends them first,
    each asking for one token (a completion cannot ask for none)."""
    data = read_yaml(LOCAL)
    data["workload"] = PLAIN_BENCH
    data["lmcache"]["warmup"] = {"templates": [{"name": "a", "tokens": 50}, {"name": "b", "tokens": 70}]}
    r = resolve(from_mapping(data, base_dir=REPO / "examples"))
    with fake_vllm() as fake:
        warm = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run_warmup()
    assert [len(b["prompt"]) for b in fake.bodies] == [50, 70]
    assert all(b["max_tokens"] == b["min_tokens"] == 1 for b in fake.bodies)
    assert [o.ok for o in warm] == [True, True]


SHARED_PREFIX_BENCH = {"kind": "shared_prefix", "seed": 5, "requests": 12,
                       "arrivals": {"process": "poisson", "rate": "50/s"},
                       "shared_prefix": {"num_groups": 2, "num_prompts_per_group": 3, "system_prompt_len": 40,
                                         "question_len": 12, "output_len": 4}}
REPLAY_LOG = REPO / "tests" / "fixtures" / "workload" / "tiny_replay.jsonl"
REPLAY_BENCH = {"kind": "replay", "replay": {"path": str(REPLAY_LOG), "time_scale": 0.05}}


@pytest.mark.parametrize("workload", [SHARED_PREFIX_BENCH, REPLAY_BENCH], ids=["shared_prefix", "replay"])
def test_bench_sends_a_benchmarks_prompts_token_for_token_as_the_simulator_reuses_them(workload):
    """kind shared_prefix sends its 6 prompts twice, in the same order, a group's prompts starting with the same 40
    tokens; kind replay sends a repeated prompt id's prompt again, exactly. What the server receives shares a prefix
    exactly where the simulator's keys do (tests/test_live_tokens.py holds the rule for every pair)."""
    r = local(workload)
    with fake_vllm() as fake:
        bench = Bench(r, [fake.target()], salt=SALT, timeout=10.0)
        outcomes = bench.run()
    reqs = bench.requests()
    assert all(o.ok for o in outcomes) and len(fake.bodies) == len(reqs)
    sent = {tuple(b["prompt"]) for b in fake.bodies}
    prompts = [prompt_of(bench, q) for q in reqs]
    assert {tuple(p) for p in prompts} == sent
    for a, b in zip(reqs, prompts):
        for c, d in zip(reqs, prompts):
            n = min(a.prompt_tokens, c.prompt_tokens) // 4
            same_keys = sum(1 for x, y in zip(a.content.keys(4, a.prompt_tokens), c.content.keys(4, c.prompt_tokens))
                            if x == y)
            assert (common_prefix(b, d) >= 4 * n) == (same_keys == n)
    if workload is SHARED_PREFIX_BENCH:
        assert prompts[6:] == prompts[:6] and len({tuple(p) for p in prompts}) == 6
        assert len({tuple(p[:40]) for p in prompts}) == 2
    else:
        assert prompts[3] == prompts[0] and prompts[5] == prompts[0][:200]


# ---- load stages and closed loops (kvplan.spec.stages): bench sends them as the simulator does

def overlap(outcomes: list[Outcome]) -> int:
    """The most requests in flight at once, as the client saw them: from sending to the last token."""
    events = sorted([(o.sent, 1) for o in outcomes] + [(o.last_token, -1) for o in outcomes])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def slowly(body: dict) -> str:
    """A server that takes a little while per request, so that a closed loop's users overlap."""
    import time
    time.sleep(0.02)
    return "ok"


def test_bench_runs_a_closed_loop_with_exactly_its_users_in_flight():
    r = local({**PLAIN_BENCH, "requests": 24, "arrivals": {"concurrency": 3}})
    with fake_vllm(behave=slowly) as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    assert len(outcomes) == len(fake.bodies) == 24 and all(o.ok for o in outcomes)
    assert [o.id for o in outcomes] == list(range(24))                  # ids in the order they were sent
    assert overlap(outcomes) == 3


def test_a_closed_loop_user_sends_a_chat_turn_after_the_reply_before_it_carrying_that_reply():
    r = local({**CHAT_BENCH, "requests": 12, "arrivals": {"concurrency": 2}})
    with fake_vllm() as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    assert len(outcomes) == 12 and all(o.ok for o in outcomes) and overlap(outcomes) <= 2
    prompt_of = {tuple(ids): prompt for prompt, ids in fake.replies}     # each reply's ids are unique
    by_session: dict[int, list[Outcome]] = {}
    for o in outcomes:
        by_session.setdefault(o.session, []).append(o)
    assert any(len(turns) > 1 for turns in by_session.values())
    for turns in by_session.values():
        assert [o.turn for o in turns] == list(range(len(turns)))
        for before, after in zip(turns, turns[1:]):
            assert after.sent >= before.last_token                       # after the reply, and its think time
            carried = prompt_of[tuple(before.output)] + before.output    # its prompt, then the reply it got
            assert prompt_of[tuple(after.output)][:len(carried)] == carried


def test_bench_runs_stages_one_after_the_other_and_a_drain_waits_for_the_replies():
    plain = {k: v for k, v in PLAIN_BENCH.items() if k not in ("requests", "arrivals")}
    r = local({**plain, "stages": [{"rate": "40/s", "requests": 6, "drain": True}, {"concurrency": 2, "requests": 6},
                                   {"rate": "40/s", "requests": 4}]})
    with fake_vllm(behave=slowly) as fake:
        outcomes = Bench(r, [fake.target()], salt=SALT, timeout=10.0).run()
    assert len(outcomes) == len(fake.bodies) == 16 and all(o.ok for o in outcomes)
    first, closed = outcomes[:6], outcomes[6:12]
    assert min(o.sent for o in closed) >= max(o.last_token for o in first)   # the first stage drained
    assert overlap(closed) == 2
