"""What the tests of kvplan.live share: examples/local.yaml with its workload replaced, a fake vLLM, and
snapshots, client outcomes and bench runs made by hand.

Nothing here starts vLLM, LMCache or Ceph, and nothing talks to the ports of a real stack
(8000, 5555, 5556, 7480): every server is a fake bound to port 0, and every "unreachable" port is
one the kernel just handed out and nobody listens on. No assertion depends on how fast anything
ran; timeouts only keep a broken test from hanging.
"""

from __future__ import annotations

import itertools
import json
import socket
import ssl
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import numpy as np

from kvplan.live.bench import Outcome, Target
from kvplan.live.observe import Component, Snapshot
from kvplan.live.observed import BenchRun, columns, derive
from kvplan.resolve import resolve
from kvplan.spec import from_mapping, read_yaml

from conftest import REPO


LOCAL = REPO / "examples" / "local.yaml"
MODEL = "kvplan-tiny-llama"
"""The model examples/local.yaml serves (vocab 8000)."""
REAL_STACK_PORTS = {8000, 5555, 5556, 7480}
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


PLAIN_BENCH = {"kind": "chat", "seed": 2, "requests": 8, "arrivals": {"process": "poisson", "rate": "20/s"},
               "prompt": {"dist": "uniform", "min": 8, "max": 60}, "output": 4}


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


def bench_run(r, outs: list[Outcome], name: str | None = None, seed: int = 1) -> BenchRun:
    empty = snap(dict(ZERO))
    return BenchRun(name=name or r.name, spec_hash=r.spec_hash, seed=seed, salt=SALT, targets=["http://v"],
                    started_at="2026-11-29T19:43:00+00:00", timeout=10.0, warmup=0, requests=columns(outs),
                    before=empty, after=empty, observed=derive(outs, empty, empty, None))
