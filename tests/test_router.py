"""The router kvplan deploys routes as the simulator's Router says it does.

The real vllm-router (scripts/install-router.sh; ./install.sh test installs it) runs with the
arguments kvplan renders for each policy, in front of two test-double vLLM servers that answer
slowly, so that every request is still in flight when the next one is sent. The same requests,
with the same token ids kvplan bench sends (and their X-Session-ID headers), go through it and
through kvplan.sim.router.Router, whose instances report the same requests in flight. The two
must group the requests the same way (the router numbers its workers in an order of its own, so
instance numbers are compared up to a renaming).
"""

from __future__ import annotations

import ast
import json
import random
import socket
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvplan.deploy.vllm_command import router_policy
from kvplan.live.bench import Outcome, Target, stream_completion
from kvplan.live.tokens import prompt_tokens
from kvplan.router_settings import RouterThresholds
from kvplan.sim import workload as wl
from kvplan.sim.router import Router
from kvplan.sim.workload import SHARED_PREFIX, USER_TEXT, Segments

pytestmark = pytest.mark.stack

ROUTER_BIN = Path("/opt/kvplan/router-venv/bin/vllm-router")
DELAY = 2.5
"""Seconds a test-double server takes per request: longer than the whole sequence takes to send."""
VOCAB, SALT, BLOCK = 32000, 12345, 16
THRESHOLDS = RouterThresholds()
"""prefix_aware's thresholds: vllm-router's defaults, which kvplan resolves, deploys and simulates."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend:
    """A test double of one vLLM server: /health, /v1/models, and completions answered after DELAY seconds,
    each recorded with its tag."""

    def __init__(self):
        self.tags: list[str] = []
        backend = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.startswith("/v1/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode())
                else:
                    self._send(200, b"")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self.path.startswith("/v1/completions") or self.path.endswith("/render"):
                    self._send(404, b"{}")
                    return
                backend.tags.append(body["user"])
                time.sleep(DELAY)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                chunk = {"choices": [{"text": "x", "index": 0, "token_ids": [7], "finish_reason": "stop"}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
                self.close_connection = True

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Instance:
    """What the simulator's Router asks of an engine: its requests in flight."""

    def __init__(self):
        self.load = 0


def request(i: int, session: int, prefix: int, new: int) -> wl.Request:
    """Request i: shared prefix `prefix` (300 tokens) and `new` tokens of its own, in session `session` (-1: none)."""
    content = Segments((((SHARED_PREFIX, prefix), 300), ((USER_TEXT, i), new)))
    return wl.Request(i, 0.0, 300 + new, 1, content, session=session)


def through_the_router(policy: str, requests: list[wl.Request]) -> list[int]:
    assert ROUTER_BIN.is_file(), f"{ROUTER_BIN} is missing: run scripts/install-router.sh (./install.sh test does)"
    backends = [Backend(), Backend()]
    port = free_port()
    args = [str(ROUTER_BIN), "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *[f"http://127.0.0.1:{b.port}" for b in backends], *router_policy(policy, THRESHOLDS),
            "--prometheus-port", str(free_port()), "--worker-startup-check-interval", "1"]
    router = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readiness", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline and router.poll() is None, "the router did not start"
                time.sleep(0.2)
        target = Target.parse(f"http://127.0.0.1:{port}")
        threads = []
        for req in requests:
            body = {"model": "m", "prompt": prompt_tokens(req.content, req.prompt_tokens, VOCAB, SALT), "max_tokens": 1,
                    "stream": True, "user": str(req.id)}
            out = Outcome(req.id, req.session, 0, -1, 0.0, req.prompt_tokens, 1)
            t = threading.Thread(target=stream_completion, args=(target, body, 30.0, time.monotonic, out, req.session))
            t.start()
            threads.append(t)
            time.sleep(0.25)
        for t in threads:
            t.join()
    finally:
        router.terminate()
        router.wait(10)
        for b in backends:
            b.server.shutdown()
    served = {int(tag): k for k, b in enumerate(backends) for tag in b.tags}
    assert sorted(served) == [r.id for r in requests], served
    return [served[r.id] for r in requests]


def simulated(policy: str, requests: list[wl.Request]) -> list[int]:
    instances = [Instance(), Instance()]
    router = Router(policy, instances, BLOCK, THRESHOLDS)
    picks = []
    for req in requests:
        k = router.pick(req)
        instances[k].load += 1           # still in flight when the next one is routed
        picks.append(k)
    return picks


def grouping(picks: list[int]) -> list[int]:
    """Instance numbers renamed in order of first use."""
    names: dict[int, int] = {}
    return [names.setdefault(p, len(names)) for p in picks]


SEQUENCES = {
    "round_robin": [request(i, -1, i % 2, 20) for i in range(6)],
    "least_loaded": [request(i, -1, 0, 20) for i in range(6)],
    # between instances with as many sessions each the router picks in an order of its own (a hash map's), so
    # the sequence opens no third session while the two instances are even
    "session_affinity": [request(i, s, 0, 20) for i, s in enumerate([0, 1, 0, 1, 1, 0, 1])],
    "prefix_aware": [request(i, -1, p, 20) for i, p in enumerate([0, 1, 0, 1, 0, 2, 1])],
}


@pytest.mark.parametrize("policy", sorted(SEQUENCES))
def test_the_deployed_router_groups_requests_as_the_simulator_does(policy):
    requests = SEQUENCES[policy]
    sim = grouping(simulated(policy, requests))
    assert len(set(sim)) == 2, f"{policy}: the sequence should use both instances ({sim})"
    assert grouping(through_the_router(policy, requests)) == sim


def test_prefix_aware_counts_the_routed_prefix_of_a_prompt():
    """An instance is sent whole prompts and block keys chain their prefix, so the blocks routed to an
    instance are a prefix of any prompt's keys; Router._match finds its length by a binary search,
    which must agree with walking the keys one by one."""
    rng = random.Random(7)
    for _ in range(200):
        prompts = [[rng.randrange(3) for _ in range(rng.randrange(1, 12))] for _ in range(rng.randrange(1, 6))]
        chained = [[hash(tuple(p[:i + 1])) for i in range(len(p))] for p in prompts]
        routed = set().union(*chained[:-1])
        keys = chained[-1]
        walked = next((i for i, key in enumerate(keys) if key not in routed), len(keys))
        assert Router._match(routed, keys) == walked


def test_the_thresholds_kvplan_resolves_are_the_routers_defaults():
    """kvplan passes the router its thresholds explicitly; they are vllm-router's own defaults (RouterArgs in
    vllm_router/router_args.py of the router kvplan installs), so a router started by hand routes the same way."""
    source = next(ROUTER_BIN.parent.parent.glob("lib/python*/site-packages/vllm_router/router_args.py"), None)
    assert source is not None, f"no vllm_router beside {ROUTER_BIN}: run scripts/install-router.sh"
    tree = ast.parse(source.read_text())
    router_args = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "RouterArgs")
    defaults = {n.target.id: n.value.value for n in router_args.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.value, ast.Constant)}
    assert (defaults["cache_threshold"], defaults["balance_abs_threshold"], defaults["balance_rel_threshold"]) == \
           (THRESHOLDS.cache_threshold, THRESHOLDS.balance_abs, THRESHOLDS.balance_rel)


def test_prefix_aware_follows_the_cache_by_the_thresholds_it_is_given():
    """The second request shares 288 of its 310 tokens (18 blocks) with the first: at vllm-router's default
    cache_threshold (0.3) it follows them to the busier instance; at 0.95 the match is too short, and it goes
    to the idler one. The thresholds are Resolved.router_thresholds, which the deployed router is given too."""
    def picks(thresholds: RouterThresholds) -> list[int]:
        instances = [Instance(), Instance()]
        router = Router("prefix_aware", instances, BLOCK, thresholds)
        out = []
        for req in (request(0, -1, 0, 10), request(1, -1, 0, 10)):
            out.append(router.pick(req))
            instances[out[-1]].load += 1
        return out

    assert picks(THRESHOLDS) == [0, 0]
    assert picks(THRESHOLDS.model_copy(update={"cache_threshold": 0.95})) == [0, 1]
