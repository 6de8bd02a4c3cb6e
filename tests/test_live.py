"""kvplan.live without a live stack: the load generator, the observer and the fit, each against fakes.

What the live package promises, and what these tests pin down:

- tokens.py turns the simulator's named token runs into token ids such that two prompts agree on
  their first (i + 1) x unit tokens exactly when the simulator says they share cache key i, so
  the real stack's block and chunk hashes hit exactly where the simulator's keys do.
- bench.py replays a workload against an OpenAI-compatible server (here a fake one on an ephemeral
  port): it measures each request, carries a chat turn's real reply into the next turn, and never
  hangs or raises for a request that fails, stalls or is cut off.
- observe.py / observed.py read counters and turn two snapshots into the simulator's terms.
- compare.py and calibrate.py put prediction and observation side by side and fit the step model.
- the CLI fails with an exit code and a fix, never a traceback.

Nothing here starts vLLM, LMCache or Ceph, and nothing talks to the ports of a real stack
(8000, 5555, 5556, 7480): every server is a fake bound to port 0, and every "unreachable" port is
one the kernel just handed out and nobody listens on. No assertion depends on how fast anything
ran; timeouts only keep a broken test from hanging.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from kvplan.errors import SpecError
from kvplan.live.bench import Bench, BenchError, Outcome, Target, check_target
from kvplan.live.calibrate import bounded_least_absolute, fit
from kvplan.spec.profile import Profile, apply_profile, read_profile, write_profile
from kvplan.live.compare import Row, check_same_spec, predict, rows
from kvplan.live.observe import (Component, Snapshot, lmcache_servers, observe_vllm, parse_lmcache_metrics, parse_metrics,
                                 snapshot)
from kvplan.live.observed import BenchRun, columns, derive, read_run, write_run
from kvplan.live.runner import bench as run_bench
from kvplan.live.tokens import FIRST_ORDINARY_TOKEN, output_identity, prompt_tokens, run_tokens
from kvplan.resolve import resolve
from kvplan.sim.run import run as simulate
from kvplan.sim.workload import OUTPUT, Segments, TraceBlocks, requests
from kvplan.spec import from_mapping, load, read_yaml

from answering import Answering
from conftest import REPO

LOCAL = REPO / "examples" / "local.yaml"
MODEL = "kvplan-tiny-llama"
"""The model examples/local.yaml serves (vocab 8000)."""
REAL_STACK_PORTS = {8000, 5555, 5556, 7480}
KVPLAN = str(Path(sys.executable).parent / "kvplan")
SALT = 12345


def unused_port() -> int:
    """A loopback port nobody listens on: one the kernel just handed out, then released."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert port not in REAL_STACK_PORTS
    return port


def local(workload: dict | None = None, *, lmcache: bool = True, step_model: dict | None = None,
          monitoring: dict | None = None):
    """examples/local.yaml resolved, with its workload (and monitoring) replaced, and optionally without LMCache
    and Ceph, so that nothing would ever look for the real LMCache server the spec names."""
    data = read_yaml(LOCAL)
    if monitoring is not None:
        data["monitoring"] = monitoring
    if workload is not None:
        data["workload"] = workload
    if not lmcache:
        data.pop("lmcache")
        data.pop("ceph")
    if step_model is not None:
        data["serving"]["step_model"] = step_model
    return resolve(from_mapping(data, base_dir=REPO / "examples"))


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def fake_outputs(reqs) -> dict[tuple[int, ...], list[int]]:
    """A stand-in for the model's real replies: distinct token ids for every OUTPUT segment of `reqs`."""
    outputs = {}
    for r in reqs:
        for ident, length in r.content.parts:
            if ident[0] == OUTPUT:
                outputs[ident] = run_tokens(999_999, ident, 0, length, 8000)
    return outputs


# ---------------------------------------------------------------------------------------------- tokens.py

def test_a_run_is_a_fixed_function_of_salt_and_identity():
    """The same salt replays the same tokens (a rerun with --salt hits the caches); another salt shares nothing."""
    a = run_tokens(7, (3, 41), 0, 200, 8000)
    assert a == run_tokens(7, (3, 41), 0, 200, 8000)
    other_salt = run_tokens(8, (3, 41), 0, 200, 8000)
    other_run = run_tokens(7, (3, 42), 0, 200, 8000)
    assert common_prefix(a, other_salt) == 0 and sum(x == y for x, y in zip(a, other_salt)) < 10
    assert common_prefix(a, other_run) == 0 and sum(x == y for x, y in zip(a, other_run)) < 10


def test_token_ids_are_ordinary_tokens_of_the_vocabulary():
    """Ids below FIRST_ORDINARY_TOKEN are the model's special tokens (<s>, </s>, ...): a prompt never contains one."""
    for vocab in (5, 6, 100, 8000, 128_256):
        ids = run_tokens(1, (1, 0), 0, 5000, vocab)
        assert min(ids) >= FIRST_ORDINARY_TOKEN and max(ids) < vocab
        assert all(type(i) is int for i in ids)
    assert len(set(run_tokens(1, (1, 0), 0, 5000, 8000))) > 3000     # spread over the vocabulary
    with pytest.raises(ValueError, match="no ordinary token"):
        run_tokens(1, (1, 0), 0, 10, FIRST_ORDINARY_TOKEN)


def test_a_shorter_piece_of_a_run_is_a_prefix_of_a_longer_one():
    """A prompt that stops inside a segment (a cut warm-up prefix, a shortened turn) still matches its start."""
    whole = run_tokens(5, (1, 2), 0, 1000, 8000)
    for m in (0, 1, 15, 16, 17, 500, 999):
        assert whole[:m] == run_tokens(5, (1, 2), 0, m, 8000)
    assert whole[300:700] == run_tokens(5, (1, 2), 300, 700, 8000)


CHAT_KEYS = {
    "kind": "chat", "seed": 11, "requests": 140,
    "arrivals": {"process": "poisson", "rate": "5/s"},
    "sessions": {"turns": {"dist": "uniform", "min": 1, "max": 5}, "think_time": "3s"},
    "shared_prefixes": {"count": 4, "skew": 1.0, "tokens": {"dist": "lognormal", "mean": 300, "cv": 0.5, "max": 900}},
    "prompt": {"dist": "lognormal", "mean": 60, "cv": 0.8, "max": 400},
    "output": {"dist": "lognormal", "mean": 40, "cv": 0.5, "max": 200},
}
RAG_KEYS = {
    "kind": "rag", "seed": 5, "requests": 100,
    "arrivals": {"process": "poisson", "rate": "5/s"},
    "sessions": {"turns": {"dist": "uniform", "min": 1, "max": 3}, "think_time": "2s"},
    "shared_prefixes": {"count": 6, "skew": 0.8, "tokens": {"dist": "uniform", "min": 200, "max": 900}},
    "prompt": {"dist": "uniform", "min": 10, "max": 80},
    "output": 20,
}


@pytest.mark.parametrize("workload", [CHAT_KEYS, RAG_KEYS], ids=["chat", "rag"])
def test_prompts_agree_token_for_token_exactly_where_the_simulator_keys_agree(workload):
    """The claim the bench rests on: for every pair of requests of a real workload and unit in (vLLM-ish 16,
    LMCache's 256), the materialised prompts agree on their first (i+1)*unit tokens iff keys(unit)[i] agree.
    Generated tokens come from `outputs` (here fake replies keyed by OUTPUT identity)."""
    r = local(workload)
    reqs = requests(r)
    outputs = fake_outputs(reqs)
    prompts = [prompt_tokens(q.content, q.prompt_tokens, r.model.vocab_size, SALT, outputs) for q in reqs]
    assert [len(p) for p in prompts] == [q.prompt_tokens for q in reqs]
    shared_pairs = partial_pairs = 0
    for unit in (16, 256):
        keys = [q.content.keys(unit, q.prompt_tokens) for q in reqs]
        for a, b in itertools.combinations(range(len(reqs)), 2):
            n = min(len(keys[a]), len(keys[b]))
            if n == 0:
                continue
            same_tokens = common_prefix(prompts[a], prompts[b])
            by_keys = [keys[a][i] == keys[b][i] for i in range(n)]
            by_tokens = [(i + 1) * unit <= same_tokens for i in range(n)]
            assert by_keys == by_tokens, (unit, reqs[a], reqs[b])
            shared_pairs += by_keys[0]
            partial_pairs += by_keys[0] and not by_keys[-1]
    # not vacuous: many pairs share a prefix, and many share only part of it
    assert shared_pairs > 200 and partial_pairs > 50, (shared_pairs, partial_pairs)


def test_a_later_chat_turn_carries_the_earlier_turns_real_reply():
    """Turn k+1's prompt is turn k's prompt, then the tokens the model really generated for turn k
    (output_identity names them), then new text."""
    r = local(CHAT_KEYS)
    reqs = requests(r)
    outputs = fake_outputs(reqs)                                           # replies of the turns before
    by_session: dict[int, list] = {}
    for q in reqs:
        by_session.setdefault(q.session, []).append(q)
    pairs = [(t[k], t[k + 1]) for t in by_session.values() for k in range(len(t) - 1)]
    assert len(pairs) > 20
    for earlier, later in pairs:
        ident = output_identity(earlier.content, earlier.prompt_tokens)
        assert ident is not None and ident[0] == OUTPUT
        reply = [7000 + i for i in range(earlier.output_tokens)]       # whatever the model said
        first = prompt_tokens(earlier.content, earlier.prompt_tokens, 8000, SALT, outputs)
        second = prompt_tokens(later.content, later.prompt_tokens, 8000, SALT, {**outputs, ident: reply})
        assert second[:len(first) + len(reply)] == first + reply
        assert len(second) > len(first) + len(reply)


def test_a_prompt_whose_earlier_reply_is_unknown_cannot_be_built():
    """A later turn needs its earlier turn's reply: without it (turn not finished, or failed) KeyError;
    with a reply shorter than the turn's output, ValueError naming both lengths."""
    reqs = requests(local(CHAT_KEYS))
    later = next(q for q in reqs if q.turn == 1)
    with pytest.raises(KeyError):
        prompt_tokens(later.content, later.prompt_tokens, 8000, SALT)
    ident = next(i for i, _ in later.content.parts if i[0] == OUTPUT)
    with pytest.raises(ValueError, match="has 1 real tokens"):
        prompt_tokens(later.content, later.prompt_tokens, 8000, SALT, {ident: [42]})
    first = next(q for q in reqs if q.turn == 0)
    assert prompt_tokens(first.content, first.prompt_tokens, 8000, SALT) is not None     # a first turn needs none


def test_output_identity_is_none_for_contents_without_a_reply_segment():
    assert output_identity(Segments(((((1, 0)), 50),)), 50) is None
    assert output_identity(TraceBlocks([1, 2], 20, 5, 16, 0), 20) is None
    assert output_identity(Segments((((3, 0), 10), ((4, 9), 5))), 10) == (4, 9)


def test_trace_blocks_with_the_same_hash_id_materialise_to_the_same_tokens():
    """Mooncake hash ids are prefix-chained names of blocks: equal ids, equal tokens; the prompt stops at
    input_length even inside a block; the keys claim holds for units that do not divide the block too."""
    a = TraceBlocks([10, 11, 12], 40, 5, 16, 0)
    b = TraceBlocks([10, 11, 99, 100], 60, 5, 16, 1)
    c = TraceBlocks([10, 11, 12], 48, 5, 16, 2)          # a's blocks, its last one full
    ta, tb, tc = (prompt_tokens(x, x.input_length, 8000, SALT) for x in (a, b, c))
    assert (len(ta), len(tb), len(tc)) == (40, 60, 48)
    assert ta[:32] == tb[:32] and ta[32] != tb[32]
    assert tc[:40] == ta
    assert prompt_tokens(a, 20, 8000, SALT) == ta[:20]
    assert prompt_tokens(a, 40, 8000, SALT + 1)[:32] != ta[:32]
    for unit in (5, 8, 16, 32):
        for x, y, tx, ty in ((a, b, ta, tb), (a, c, ta, tc), (b, c, tb, tc)):
            kx, ky = x.keys(unit, x.input_length), y.keys(unit, y.input_length)
            same = common_prefix(tx, ty)
            n = min(len(kx), len(ky))
            assert [kx[i] == ky[i] for i in range(n)] == [(i + 1) * unit <= same for i in range(n)], (unit, x, y)


def test_only_segments_and_trace_blocks_can_be_materialised():
    with pytest.raises(TypeError, match="cannot materialise list"):
        prompt_tokens([1, 2, 3], 3, 8000, SALT)


# ---------------------------------------------------------------------------------------------- a fake vLLM

class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """The client hangs up once it has read `data: [DONE]` (or gives up on a stall): not worth a traceback."""


class FakeVLLM:
    """An OpenAI-compatible server in a thread on 127.0.0.1:<ephemeral>: /v1/models, /health, /metrics and
    streaming /v1/completions (one token id per SSE chunk, then `data: [DONE]`, chunked like uvicorn).

    Every completion body is recorded in `bodies`, the ids it returned in `replies`; token ids come from one
    counter, so every reply is distinct. `behave(body)` picks what happens to a completion: "ok", "drop"
    (two tokens, then the connection closes), "stall" (no answer until the test ends), "http500", "empty"
    (`data: [DONE]` and no token) or "error-event" (an error object in the stream, as vLLM sends one).
    `framing` "close" answers HTTP/1.0-style: no chunking, the end of the body is the end of the connection.
    """

    def __init__(self, model: str = MODEL, behave: Callable[[dict], str] | None = None, framing: str = "chunked",
                 api_key: str | None = None, tls: tuple[Path, Path] | None = None):
        self.model = model
        self.api_key = api_key
        """When set, /v1/* answers 401 unless the request carries `Authorization: Bearer <api_key>` (vLLM --api-key)."""
        self.behave = behave or (lambda body: "ok")
        self.framing = framing
        self.bodies: list[dict] = []
        self.replies: list[tuple[list[int], list[int]]] = []
        self.counters = {"prompt": 0, "generated": 0, "finished": 0}
        self.release = threading.Event()
        self._ids = itertools.count(5000)
        self._lock = threading.Lock()
        self.server = QuietServer(("127.0.0.1", 0), self._handler())
        self.scheme = "http"
        if tls is not None:                    # (certificate, key): serve https
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*map(str, tls))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}"

    def target(self, api_key: str | None = None) -> Target:
        return Target.parse(self.url, api_key)

    def metrics_text(self) -> str:
        c = self.counters
        return "\n".join([
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f'vllm:prompt_tokens_total{{engine="0",model_name="{self.model}"}} {float(c["prompt"])}',
            f'vllm:generation_tokens_total{{engine="0",model_name="{self.model}"}} {float(c["generated"])}',
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="{self.model}"}} {float(c["prompt"])}',
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="{self.model}"}} 0.0',
            f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="{self.model}",source="local_compute"}} '
            f'{float(c["prompt"])}',
            f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="{self.model}",source="local_cache_hit"}} 0.0',
            f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{self.model}"}} '
            f'{float(c["finished"])}',
            "",
        ])

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if fake.framing == "chunked" else "HTTP/1.0"

            def log_message(self, *args):              # keep pytest's output clean
                pass

            def _json(self, status: int, obj) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _refused(self) -> bool:
                """vLLM's --api-key check: /v1/* needs the bearer token (the health and metrics routes do not)."""
                if fake.api_key is None or not self.path.startswith("/v1/") \
                        or self.headers.get("Authorization") == f"Bearer {fake.api_key}":
                    return False
                if self.command == "POST":
                    self.rfile.read(int(self.headers["Content-Length"]))
                self._json(401, {"error": "Unauthorized"})
                return True

            def do_GET(self):
                if self._refused():
                    return
                if self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})
                elif self.path == "/health":
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/metrics":
                    data = fake.metrics_text().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._json(404, {"detail": "Not Found"})

            def _event(self, obj) -> None:
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
                if fake.framing == "chunked":
                    data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
                self.wfile.write(data)
                self.wfile.flush()

            def do_POST(self):
                if self._refused():
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.bodies.append(body)
                action = fake.behave(body)
                if action == "stall":
                    fake.release.wait(30)
                    self.close_connection = True
                    return
                if action == "http500":
                    self._json(500, {"object": "error", "message": "engine dead"})
                    return
                if action in ("empty", "error-event"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    if action == "error-event":
                        self.wfile.write(b'data: {"error": {"message": "KV cache full", "code": 500}}\n\n')
                    self.wfile.write(b"data: [DONE]\n\n")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                if fake.framing == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                n = 2 if action == "drop" else body["max_tokens"]
                with fake._lock:
                    ids = [next(fake._ids) for _ in range(n)]
                for k, token in enumerate(ids):
                    last = k == n - 1 and action == "ok"
                    self._event({"id": "cmpl-fake", "object": "text_completion", "model": fake.model,
                                 "choices": [{"index": 0, "text": f"t{token}", "token_ids": [token],
                                              "finish_reason": "length" if last else None}]})
                if action == "drop":                   # cut off: no [DONE], no closing chunk
                    self.close_connection = True
                    return
                with fake._lock:                       # recorded before [DONE]: the client may return right after it
                    fake.replies.append((body["prompt"], ids))
                    fake.counters["prompt"] += len(body["prompt"])
                    fake.counters["generated"] += n
                    fake.counters["finished"] += 1
                self._event(b"[DONE]")
                if fake.framing == "chunked":
                    self.wfile.write(b"0\r\n\r\n")

        return Handler


@contextmanager
def fake_vllm(**kwargs):
    fake = FakeVLLM(**kwargs)
    fake.thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        fake.server.shutdown()
        fake.server.server_close()
        fake.thread.join(5)


CHAT_BENCH = {
    "kind": "chat", "seed": 4, "requests": 10,
    "arrivals": {"process": "poisson", "rate": "20/s"},
    "sessions": {"turns": {"dist": "uniform", "min": 2, "max": 3}, "think_time": "50ms"},
    "shared_prefixes": {"count": 2, "skew": 1.0, "tokens": 100},
    "prompt": {"dist": "uniform", "min": 8, "max": 40},
    "output": {"dist": "uniform", "min": 3, "max": 6},
}
PLAIN_BENCH = {"kind": "chat", "seed": 2, "requests": 8, "arrivals": {"process": "poisson", "rate": "20/s"},
               "prompt": {"dist": "uniform", "min": 8, "max": 60}, "output": 4}


def prompt_of(bench: Bench, req, outputs: dict | None = None) -> list[int]:
    return bench.body(req, outputs or {})["prompt"]


# ---------------------------------------------------------------------------------------------- bench.py

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


# ---------------------------------------------------------------------------------------------- observe.py

METRICS = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 500.0
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1500.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 256.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 512.0
vllm:prompt_tokens_by_source_total{engine="1",model_name="m",source="external_kv_transfer"} 100.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 632.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="something_new"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 12.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 50.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
vllm:generation_tokens_total 80
process_cpu_seconds_total 1234.5
vllm:request_success_total{finished_reason="length",model_name="a}b"} 9
"""


def test_parse_metrics_sums_counters_averages_gauges_and_maps_prompt_sources():
    """Counters add up over engines; a gauge is their mean (0.5 and 0.6: 0.55, never 1.1); a label value holding
    `}` is read as the text exposition format says."""
    m = parse_metrics(METRICS)
    assert m == {"prompt_tokens": 1500.0, "prefix_cache_hits": 256.0, "prefix_cache_queries": 1500.0,
                 "hbm_tokens": 256.0, "lmcache_tokens": 612.0, "computed_tokens": 632.0,
                 "ttft_sum": 12.5, "ttft_count": 50.0, "preemptions": 3.0, "kv_cache_usage": pytest.approx(0.55),
                 "generation_tokens": 80.0, "finished_requests": 9.0}


def test_metrics_that_are_not_prometheus_text_mark_vllm_down_with_the_reason():
    with pytest.raises(ValueError):
        parse_metrics('vllm:request_success_total{finished_reason="length"} not-a-number\n')


LMCACHE_METRICS = """\
# HELP lmcache_mp_event_bus_queue_depth Events waiting in the bus
# TYPE lmcache_mp_event_bus_queue_depth gauge
lmcache_mp_event_bus_queue_depth{otel_scope_name="lmcache.event_bus",otel_scope_schema_url="",otel_scope_version=""} 0.0
# HELP lmcache_mp_lookup_requested_tokens_total Total tokens submitted for lookup
# TYPE lmcache_mp_lookup_requested_tokens_total counter
lmcache_mp_lookup_requested_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 1024.0
lmcache_mp_lookup_requested_tokens_total{cache_salt="b}",model_name="m",otel_scope_name="lmcache.lookup"} 512.0
# HELP lmcache_mp_lookup_hit_tokens_total Total tokens found in L1+L2 during lookup
# TYPE lmcache_mp_lookup_hit_tokens_total counter
lmcache_mp_lookup_hit_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 768.0
lmcache_mp_lookup_hit_tokens_total{cache_salt="b}",model_name="m",otel_scope_name="lmcache.lookup"} 256.0
# HELP lmcache_mp_lookup_hit_l1_tokens_total Of lookup_hit: tokens served from objects L1 already held
# TYPE lmcache_mp_lookup_hit_l1_tokens_total counter
lmcache_mp_lookup_hit_l1_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 512.0
lmcache_mp_lookup_hit_l1_tokens_total{cache_salt="b}",model_name="m",otel_scope_name="lmcache.lookup"} 256.0
# HELP lmcache_mp_lookup_hit_l2_tokens_total Of lookup_hit: tokens L2 added beyond the L1-servable prefix
# TYPE lmcache_mp_lookup_hit_l2_tokens_total counter
lmcache_mp_lookup_hit_l2_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 256.0
"""
"""A scrape of the MP server, as its OTel exporter writes it (a label value holding `}` included)."""


def test_lmcache_metrics_add_up_over_label_sets_and_count_an_unseen_counter_as_zero():
    counts = parse_lmcache_metrics(LMCACHE_METRICS)
    assert counts == {"lookup_requested_tokens": 1536, "lookup_hit_tokens": 1024, "l1_hit_tokens": 768,
                      "l2_hit_tokens": 256, "l2_submitted_chunks": 0, "l2_stored_chunks": 0,
                      "l1_allocation_failed_chunks": 0}


def test_lmcache_metrics_are_none_when_the_server_exports_none_of_its_own():
    """A server started with --disable-metrics still answers /metrics, with only Python's process series."""
    assert parse_lmcache_metrics("# TYPE process_open_fds gauge\nprocess_open_fds 32.0\n") is None


def fake_lmcache(metrics: str) -> Answering:
    """The LMCache MP server's HTTP API as observe reads it: /healthcheck, /status and /metrics."""
    return Answering({"/healthcheck": (200, b"ok"),
                      "/status": (200, b'{"storage_manager": {"l1_usage": [4096, 1073741824]}}'),
                      "/metrics": (200, metrics.encode())})


def test_snapshot_reads_lmcache_usage_and_hits_per_tier_from_its_http_api():
    server = fake_lmcache(LMCACHE_METRICS)
    try:
        snap = snapshot(local(PLAIN_BENCH), [], lmcache=[server.target()], ceph=False, timeout=5.0)
    finally:
        server.shutdown()
    assert snap.down() == []
    assert snap.lmcache["l1_used_bytes"] == 4096
    assert (snap.lmcache["l1_hit_tokens"], snap.lmcache["l2_hit_tokens"]) == (768, 256)


def test_one_lmcache_server_per_node_is_read_on_each_targets_host_and_their_counters_add_up():
    """MP mode runs a server per node; with its API on every address, observe reads the one beside each target."""
    r = local(PLAIN_BENCH, monitoring={"metrics_address": "0.0.0.0"})
    port = r.lmcache.port + 1
    targets = [Target.parse(u) for u in ("http://10.0.2.21:8000", "http://10.0.2.21:8001", "http://10.0.2.22:8000")]
    assert [s.url for s in lmcache_servers(r, targets)] == [f"http://10.0.2.21:{port}", f"http://10.0.2.22:{port}"]
    assert [s.url for s in lmcache_servers(local(PLAIN_BENCH), targets)] == [f"http://127.0.0.1:{port}"]
    servers = [fake_lmcache(LMCACHE_METRICS), fake_lmcache(LMCACHE_METRICS)]
    try:
        both = snapshot(r, [], lmcache=[s.target() for s in servers], ceph=False, timeout=5.0)
        servers.pop().shutdown()
        one_gone = snapshot(r, [], lmcache=[servers[0].target(), Target.parse(f"http://127.0.0.1:{unused_port()}")],
                            ceph=False, timeout=5.0)
    finally:
        for server in servers:
            server.shutdown()
    assert (both.lmcache["l1_hit_tokens"], both.lmcache["l2_hit_tokens"], both.lmcache["l1_used_bytes"]) == (1536, 512, 8192)
    # A sum over some of the servers would be read as the whole stack's: with one down there is none, and it is named.
    assert one_gone.lmcache is None and [c.up for c in one_gone.components] == [True, False]


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


def test_an_lmcache_tier_the_server_turned_off_is_reported_down_with_the_fix():
    """LMCache 0.5.6's S3 adapter turns itself off for good after 3 consecutive connection failures (Ceph
    unreachable for a moment); /healthcheck still answers, /status says so, and only a restart helps."""
    status = {"storage_manager": {"l2_adapters": [
        {"is_healthy": False, "type": "S3L2Adapter", "endpoint": "kvcache.rgw.kvplan.test:7480", "connection_failures": 7,
         "connection_disabled": True}]}}
    server = Answering({"/healthcheck": (200, b"ok"), "/status": (200, json.dumps(status).encode()),
                        "/metrics": (200, LMCACHE_METRICS.encode())})
    try:
        snap = snapshot(local(PLAIN_BENCH), [], lmcache=[server.target()], ceph=False, timeout=5.0)
    finally:
        server.shutdown()
    (down,) = snap.down()
    assert "S3L2Adapter (kvcache.rgw.kvplan.test:7480) is off after 7 connection failures" in down.detail
    assert "kvplan deploy" in down.detail
    assert snap.lmcache["l2_hit_tokens"] == 256                 # what it counted still counts


def test_snapshot_says_how_to_turn_on_lmcache_metrics_when_the_server_exports_none():
    server = fake_lmcache("# TYPE process_open_fds gauge\nprocess_open_fds 32.0\n")
    try:
        snap = snapshot(local(PLAIN_BENCH), [], lmcache=[server.target()], ceph=False, timeout=5.0)
    finally:
        server.shutdown()
    (component,) = snap.components
    assert component.up and "--disable-metrics" in component.detail and "kvplan deploy" in component.detail
    assert snap.lmcache == {"l1_used_bytes": 4096}          # what /status said; no counters to split hits by


def test_snapshot_reads_vllm_and_reports_an_unreachable_lmcache_as_down():
    """Observing never raises for a component that does not answer: it is listed as down with the reason."""
    r = local(PLAIN_BENCH)
    lmcache = Target.parse(f"http://127.0.0.1:{unused_port()}")
    with fake_vllm() as fake:
        fake.counters.update(prompt=321, generated=12, finished=3)
        snap = snapshot(r, [fake.target()], lmcache=[lmcache], ceph=False, timeout=5.0)
    assert snap.vllm[fake.url]["prompt_tokens"] == 321 and snap.vllm[fake.url]["computed_tokens"] == 321
    assert snap.vllm[fake.url]["finished_requests"] == 3
    up = {c.name: c for c in snap.components}
    assert up[f"vllm {fake.url}"].up
    down = snap.down()
    assert [c.name for c in down] == [f"lmcache http://127.0.0.1:{lmcache.port}"]
    assert "Connection" in down[0].detail or "refused" in down[0].detail.lower()
    assert snap.lmcache is None and snap.ceph is None


def test_snapshot_reports_an_unreachable_vllm_as_down():
    r = local(PLAIN_BENCH)
    port = unused_port()
    snap = snapshot(r, [Target.parse(f"http://127.0.0.1:{port}")], lmcache=[Target.parse(f"127.0.0.1:{unused_port()}")],
                    ceph=False, timeout=5.0)
    assert snap.vllm == {} and snap.lmcache is None
    names = [c.name for c in snap.down()]
    assert names[0] == f"vllm http://127.0.0.1:{port}" and names[1].startswith("lmcache http://127.0.0.1:")


# ---------------------------------------------------------------------------------------------- observed.py

def snap(vllm: dict | None = None, lmcache: dict | None = None, ceph: dict | None = None,
         down: tuple[str, ...] = (), at: float = 0.0) -> Snapshot:
    components = [Component(name=n, up=False, detail=f"{n} is gone") for n in down]
    return Snapshot(taken_at=at, components=components, vllm={"http://v": vllm} if vllm is not None else {},
                    lmcache=lmcache, ceph=ceph)


def outcome(i: int, *, sent: float, ttft: float, tokens: int, tpot: float = 0.01, error: str | None = None,
            waited: bool = False) -> Outcome:
    o = Outcome(i, -1, 0, 0, sent, 100, tokens, sent=sent, waited=waited, error=error)
    if error is None:
        o.first_token = sent + ttft
        o.last_token = o.first_token + tpot * (tokens - 1)
        o.received_tokens = tokens
    return o


ZERO = {"prompt_tokens": 0, "hbm_tokens": 0, "lmcache_tokens": 0, "computed_tokens": 0, "preemptions": 0}


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


def bench_run(r, outs: list[Outcome], name: str | None = None, seed: int = 1) -> BenchRun:
    empty = snap(dict(ZERO))
    return BenchRun(name=name or r.name, spec_hash=r.spec_hash, seed=seed, salt=SALT, targets=["http://v"],
                    started_at="2026-11-29T19:43:00+00:00", timeout=10.0, warmup=0, requests=columns(outs),
                    before=empty, after=empty, observed=derive(outs, empty, empty, None))


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


# ---------------------------------------------------------------------------------------------- compare.py

@pytest.mark.parametrize("unit, predicted, observed, error, text", [
    ("share", 0.30, 0.25, 5.0, "+5.0 pp"),             # shares: percentage points
    ("share", 0.10, 0.40, -30.0, "-30.0 pp"),
    ("share", 0.20, 0.0, 20.0, "+20.0 pp"),            # a share observed 0 still has an error
    ("s", 0.11, 0.10, 0.1, "+10.0 %"),                 # others: relative
    ("req/s", 1.0, 2.0, -0.5, "-50.0 %"),
    ("bytes", 0.0, 0.0, 0.0, "+0.0 %"),                # nothing predicted, nothing seen: right
    ("bytes", 5.0, 0.0, None, "-"),                    # something predicted, nothing seen: no ratio
    ("s", None, 0.1, None, "-"),
    ("s", 0.1, None, None, "-"),
])
def test_row_error_is_percentage_points_for_shares_and_relative_otherwise(unit, predicted, observed, error, text):
    row = Row("m", unit, predicted, observed)
    assert row.error == (None if error is None else pytest.approx(error))
    assert row.error_text == text


def test_a_run_recorded_before_the_spec_schema_grew_still_matches_its_spec():
    # A new spec field changes every spec's hash; the recorded fidelity runs predate some fields.
    chat = resolve(load(REPO / "docs" / "fidelity" / "chat.yaml"))
    run = read_run(REPO / "docs" / "fidelity" / "run-chat")
    assert run.spec_hash != chat.spec_hash, "the recorded hash is from an older schema"
    check_same_spec(chat, run, str(REPO / "docs" / "fidelity" / "run-chat"))
    with pytest.raises(SpecError):
        check_same_spec(resolve(load(REPO / "docs" / "fidelity" / "rag.yaml")), run, str(REPO / "docs" / "fidelity" / "run-chat"))


def test_check_same_spec_names_both_specs():
    r = local(PLAIN_BENCH)
    other = local(dict(PLAIN_BENCH, seed=3))
    run = bench_run(other, [], name="yesterday")
    check_same_spec(other, run, "runs/a")                  # the spec it benched passes
    with pytest.raises(SpecError) as info:
        check_same_spec(r, run, "runs/a")
    text = info.value.render()
    assert f"runs/a benched spec yesterday {other.spec_hash[:12]}" in text and f"local {r.spec_hash[:12]}" in text
    assert "runs/a/spec.yaml" in text


def test_compare_rows_cover_latency_and_every_tier_the_spec_has():
    r = local(PLAIN_BENCH)
    sim = simulate(r)
    rows_ = rows(sim, bench_run(r, [outcome(0, sent=0.0, ttft=0.1, tokens=4)]))
    names = [x.metric for x in rows_]
    assert names[:3] == ["prompt tokens", "TTFT p50", "TTFT p90"]
    assert [n for n in names if n.startswith("prompt tokens from")] == \
        [f"prompt tokens from {t}" for t in ("hbm", "ddr", "nvme", "ceph", "recomputed")]
    assert names[-1] == "bytes written to Ceph"
    ttft = rows_[1]
    assert ttft.predicted == sim.ttft.p50 and ttft.observed == pytest.approx(0.1)


# ---------------------------------------------------------------------------------------------- calibrate.py

def calibration_workload(requests_: int = 40) -> dict:
    """local.yaml's workload, shorter and slow enough that requests rarely overlap: calibration assumes a
    TTFT of one prefill step, at low load."""
    w = read_yaml(LOCAL)["workload"]
    return dict(w, requests=requests_, arrivals={"process": "poisson", "rate": "0.02/s"})


def as_bench_run(base, sim) -> BenchRun:
    """A bench run whose client saw exactly what the simulator predicted, request by request."""
    t = sim.per_request
    outs = []
    for k in range(len(t.id)):
        o = Outcome(int(t.id[k]), -1, 0, 0, float(t.arrival[k]), int(t.prompt_tokens[k]), int(t.output_tokens[k]),
                    sent=float(t.arrival[k]), received_tokens=int(t.output_tokens[k]))
        o.first_token = o.sent + float(t.ttft[k])
        o.last_token = o.first_token + float(t.tpot[k]) * (o.received_tokens - 1)
        outs.append(o)
    return bench_run(base, outs)


@pytest.mark.parametrize("truth", [
    {"compute_efficiency": 0.3, "step_overhead": 0.004, "request_overhead": 0.012},
    {"compute_efficiency": 0.8, "step_overhead": 0.015, "request_overhead": 0.003},
    # a slow CPU: decode steps are compute-bound, so the decode roofline must use the fitted efficiency
    {"compute_efficiency": 0.1, "step_overhead": 0.001, "request_overhead": 0.030},
], ids=["mid", "fast", "compute-bound-decode"])
def test_fit_recovers_the_coefficients_a_simulation_ran_with(truth):
    """Simulate local.yaml with known coefficients, hand the simulated latencies to fit() as if a bench run
    had measured them, and get the coefficients back (within 15 %)."""
    base = local(calibration_workload())
    true_spec = local(calibration_workload(), step_model={k: (f"{v * 1000:g}ms" if k != "compute_efficiency" else v)
                                                          for k, v in truth.items()})
    assert true_spec.step.compute_efficiency == truth["compute_efficiency"] != base.step.compute_efficiency
    sim = simulate(true_spec)
    run = as_bench_run(base, sim)
    profile = fit(base, [("runs/x", run)], [sim])
    got = profile.step_model
    assert got.compute_efficiency == pytest.approx(truth["compute_efficiency"], rel=0.15)
    assert got.step_overhead == pytest.approx(truth["step_overhead"], rel=0.15)
    assert got.request_overhead == pytest.approx(truth["request_overhead"], rel=0.15)
    assert got.memory_efficiency == base.step.memory_efficiency           # not fitted: the catalog's
    assert profile.device == "cpu-epyc-2vcpu" and profile.model == MODEL
    assert profile.fitted_on[0]["run"] == "runs/x" and profile.fit["requests"] == len(sim.per_request.id)


def test_fit_keeps_both_efficiencies_apart_only_when_the_runs_pin_their_ratio_down():
    """Noise-free latencies give the attention efficiency back; the same latencies with +-40 % of noise (a busy
    2-core machine) cannot tell attention from the matrix multiplies, and the profile fits one shared
    efficiency instead of a split that is noise, and says so."""
    base = local(calibration_workload(60))
    sim = simulate(local(calibration_workload(60), step_model={"compute_efficiency": 0.5, "attention_efficiency": 0.15}))
    clean = fit(base, [("r", as_bench_run(base, sim))], [sim])
    assert clean.step_model.attention_efficiency == pytest.approx(0.15, rel=0.15)
    assert "attention_efficiency" in clean.fitted
    run = as_bench_run(base, sim)
    noise = np.random.default_rng(7).uniform(0.6, 1.4, len(run.requests["ttft"]))
    noisy_run = run.model_copy(update={"requests": dict(run.requests, ttft=list(np.asarray(run.requests["ttft"]) * noise))})
    noisy = fit(base, [("r", noisy_run)], [sim])
    assert noisy.step_model.attention_efficiency == noisy.step_model.compute_efficiency
    assert "attention_efficiency (= compute_efficiency: the runs cannot tell them apart)" in noisy.fitted
    lo, hi = noisy.fit["attention_to_linear_slope_p5"], noisy.fit["attention_to_linear_slope_p95"]
    assert hi / lo > 3.0


def test_bounded_least_absolute_is_the_best_line_inside_the_bounds():
    """An efficiency above the peak is not clamped after the fit: the bound is part of the fit, and the other
    coefficients are those that best draw the data with it. Checked against a brute-force search."""
    rng = np.random.default_rng(3)
    x1, x2 = rng.uniform(0, 1, 50), rng.uniform(0, 1, 50)
    y = 0.2 + 0.6 * x1 + 2.0 * x2 + rng.normal(0, 0.02, 50)        # slope 0.6 on x1: an efficiency of 1.7
    X = np.c_[np.ones(50), x1, x2]
    b = bounded_least_absolute(X, y, lower=np.array([0.0, 1.0, 1.0]))
    assert b[1] == 1.0
    grid = [(a, c) for a in np.linspace(0, 0.4, 81) for c in np.linspace(1.0, 3.0, 81)]
    cost = lambda a, c: np.abs(y - a - x1 - c * x2).sum()  # noqa: E731
    best = min(grid, key=lambda ac: cost(*ac))
    assert np.abs(y - X @ b).sum() <= cost(*best) + 1e-9


def test_fit_leaves_failed_requests_out():
    base = local(calibration_workload())
    sim = simulate(local(calibration_workload(), step_model={"compute_efficiency": 0.3}))
    run = as_bench_run(base, sim)
    requests_ = dict(run.requests, error=["HTTP 500"] * 5 + [None] * (len(run.requests["id"]) - 5))
    profile = fit(base, [("r", run.model_copy(update={"requests": requests_}))], [sim])
    assert profile.fit["requests"] == len(run.requests["id"]) - 5


def test_fit_refuses_too_few_requests():
    base = local(calibration_workload(6))
    sim = simulate(base)
    with pytest.raises(SpecError, match="only 6 successful requests to fit"):
        fit(base, [("r", as_bench_run(base, sim))], [sim])


def test_a_profile_round_trips_through_its_yaml(tmp_path):
    base = local(calibration_workload())
    sim = simulate(local(calibration_workload(), step_model={"compute_efficiency": 0.3, "step_overhead": "4ms"}))
    profile = fit(base, [("runs/x", as_bench_run(base, sim))], [sim])
    path = tmp_path / "profiles" / "cpu.yaml"
    write_profile(profile, path)
    text = path.read_text()
    assert text.startswith("# Device profile of cpu-epyc-2vcpu serving kvplan-tiny-llama")
    assert "local (2026-11-29T19:43:00+00:00)" in text.splitlines()[0]
    back = read_profile(path)
    assert (back.device, back.model, back.fitted, back.fitted_on, back.fit) == \
        (profile.device, profile.model, profile.fitted, profile.fitted_on, profile.fit)
    for name in ("compute_efficiency", "memory_efficiency", "step_overhead", "allreduce_latency", "request_overhead"):
        assert getattr(back.step_model, name) == pytest.approx(getattr(profile.step_model, name), rel=1e-3), name


def test_read_profile_names_a_missing_or_malformed_file(tmp_path):
    with pytest.raises(SpecError, match="no profile at"):
        read_profile(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: x\n")
    with pytest.raises(SpecError, match="is not a kvplan device profile"):
        read_profile(bad)


def test_a_profile_applies_only_to_the_accelerator_it_was_fitted_on():
    profile = Profile(device="cpu-epyc-2vcpu", model=MODEL, fitted=["compute_efficiency"], fitted_on=[], fit={},
                      step_model={"compute_efficiency": 0.2, "step_overhead": "3ms"})
    topo = load(LOCAL)
    applied = resolve(apply_profile(topo, profile))
    assert applied.step.compute_efficiency == 0.2 and applied.step.step_overhead == pytest.approx(0.003)
    other = load(REPO / "examples" / "chat-llama2-13b.yaml")
    with pytest.raises(SpecError) as info:
        apply_profile(other, profile)
    text = info.value.render()
    assert f"fitted on cpu-epyc-2vcpu; this spec runs on {other.serving.gpu}" in text


# ---------------------------------------------------------------------------------------------- the CLI

def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The installed `kvplan` command, importing the package from this checkout (not whatever the venv points at)."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([KVPLAN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_cli_bench_against_a_target_that_does_not_answer_exits_5_with_the_url_and_a_fix(tmp_path):
    port = unused_port()
    result = cli("bench", str(LOCAL), "--target", f"http://127.0.0.1:{port}", "--state-dir", str(tmp_path / "state"),
                 cwd=tmp_path)
    assert result.returncode == 5, result.stderr
    assert f"http://127.0.0.1:{port} does not answer" in result.stderr and "fix: start the stack" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "state").exists()                   # no run directory for a run that never started


def test_cli_bench_refuses_a_target_that_is_not_an_http_url(tmp_path):
    result = cli("bench", str(LOCAL), "--target", "ftp://127.0.0.1:1", cwd=tmp_path)
    assert result.returncode == 1 and "is not an http:// or https:// URL" in result.stderr


@pytest.mark.parametrize("command", [("compare",), ("calibrate", "-o", "profile.yaml")], ids=["compare", "calibrate"])
def test_cli_compare_and_calibrate_name_a_missing_run_directory(tmp_path, command):
    result = cli(command[0], str(LOCAL), "--observed", str(tmp_path / "missing"), *command[1:], cwd=tmp_path)
    assert result.returncode == 1
    assert f"no bench run at {tmp_path / 'missing'}" in result.stderr and "fix:" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "profile.yaml").exists()


def test_cli_compare_refuses_a_run_of_another_spec(tmp_path):
    other = local(PLAIN_BENCH)
    write_run(tmp_path / "run", bench_run(other, []), "name: local\n")
    result = cli("compare", str(LOCAL), "--observed", str(tmp_path / "run"), cwd=tmp_path)
    assert result.returncode == 1 and "not this spec" in result.stderr and str(tmp_path / "run") in result.stderr


def test_compare_replays_each_request_when_the_bench_sent_it_so_round_robin_sends_it_where_the_router_did():
    """A chat turn whose earlier reply came late leaves late (`waited`), after requests that arrived after it: the
    real round-robin router gave it the next host in that order, and the prediction replays that order."""
    r = resolve(load(REPO / "examples" / "cluster.yaml"))              # two instances behind a round-robin router
    planned = requests(r)
    late = next(q for q in planned if q.turn > 0)
    passed = planned[late.id + 1]                                      # the request that arrived just after it
    sent = {q.id: q.arrival for q in planned} | {late.id: passed.arrival + 0.01}
    outs = [Outcome(q.id, q.session, q.turn, -1, q.arrival, q.prompt_tokens, q.output_tokens, sent=sent[q.id],
                    first_token=sent[q.id] + 0.2, last_token=sent[q.id] + 0.5, received_tokens=q.output_tokens,
                    waited=q.id == late.id) for q in planned]
    replayed = predict(r, bench_run(r, outs, seed=r.workload.seed)).per_request
    as_planned = simulate(r).per_request
    assert replayed.arrival[late.id] == pytest.approx(passed.arrival + 0.01)
    assert (replayed.instance[late.id], replayed.instance[passed.id]) == \
        (as_planned.instance[passed.id], as_planned.instance[late.id])  # the two swapped hosts
    others = [i for i in range(len(planned)) if i not in (late.id, passed.id)]
    assert list(replayed.instance[others]) == list(as_planned.instance[others])


def test_cli_compare_prints_predicted_and_observed_for_a_run_of_the_spec(tmp_path):
    """A run of local.yaml as written by bench: compare simulates the same requests and prints each row."""
    r = resolve(load(LOCAL))
    write_run(tmp_path / "run", bench_run(r, [outcome(0, sent=0.0, ttft=0.2, tokens=32)], seed=r.workload.seed),
              LOCAL.read_text())
    result = cli("compare", str(LOCAL), "--observed", str(tmp_path / "run"), "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    table = {row["metric"]: row for row in json.loads(result.stdout)}
    assert table["TTFT p50"]["observed"] == pytest.approx(0.2)
    assert table["TTFT p50"]["error"] == pytest.approx(table["TTFT p50"]["predicted"] / 0.2 - 1)
    assert "prompt tokens from ceph" in table and "bytes written to Ceph" in table


def test_calibrating_a_run_where_decodes_share_steps_with_prefills_meets_both_medians(tmp_path):
    """A real chat run on a slow CPU (tests/fixtures/fidelity-zen1): a decode step there mostly waits for the prefill
    chunk it shares a step with, so a millisecond of step_overhead moves the simulated median TPOT by about two.
    The refinement finds the overheads at which the calibrated model gives back both the observed median TTFT
    and median TPOT of the run it was fitted to (moving by the gap alone left TPOT at 4.2 ms against 17.1 ms)."""
    recorded = REPO / "tests" / "fixtures" / "fidelity-zen1"
    profile = tmp_path / "zen1.yaml"
    fitted = cli("calibrate", str(recorded / "chat.yaml"), "--observed", str(recorded / "run-chat"), "-o", str(profile),
                 cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr
    compared = cli("compare", str(recorded / "chat.yaml"), "--observed", str(recorded / "run-chat"),
                   "--profile", str(profile), "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    rows = {row["metric"]: row for row in json.loads(compared.stdout)}
    assert abs(rows["TTFT p50"]["error"]) < 0.10, rows["TTFT p50"]
    assert abs(rows["TPOT p50"]["error"]) < 0.05, rows["TPOT p50"]


def test_cli_calibrate_writes_a_profile_that_simulate_and_compare_apply(tmp_path):
    """The recorded runs of docs/fidelity (a real bench of this machine's stack): calibrate fits them, and the
    profile reproduces the calibration run's median TTFT when compare applies it."""
    recorded = REPO / "docs" / "fidelity"
    profile = tmp_path / "cpu.yaml"
    fitted = cli("calibrate", str(recorded / "chat.yaml"), "--observed", str(recorded / "run-chat"), "-o", str(profile),
                 cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr
    assert "attention_efficiency" in fitted.stdout and read_profile(profile).device == "cpu-epyc-2vcpu"
    compared = cli("compare", str(recorded / "chat.yaml"), "--observed", str(recorded / "run-chat"),
                   "--profile", str(profile), "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    ttft = {row["metric"]: row for row in json.loads(compared.stdout)}["TTFT p50"]
    assert abs(ttft["error"]) < 0.01, ttft
    simulated = cli("simulate", str(recorded / "rag.yaml"), "--profile", str(profile), cwd=tmp_path)
    assert simulated.returncode == 0 and "Simulation of local-rag" in simulated.stdout, simulated.stderr
