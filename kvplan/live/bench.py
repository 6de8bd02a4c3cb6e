"""The load generator: a spec's workload replayed against a live OpenAI-compatible endpoint.

Every request the simulator would see (`sim.workload.requests`, the same spec and seed) is sent
at its arrival time, open loop, as a streaming `/v1/completions` call whose prompt is token ids
(`tokens.py`), with `ignore_eos` and `min_tokens` so the reply is exactly the workload's output
length. A chat turn carries the earlier turn's real reply, so it waits for that reply if the
reply is late (counted as `waited`); every other request leaves on time. What each request saw is
measured at the client: TTFT (send to the first streamed token), TPOT (mean gap between later
tokens) and E2E (send to the last token), plus the error of a request that failed.

Nothing waits forever: each request has a timeout (connect, and every read of the stream), and a
request still running `timeout` after the last arrival is recorded as timed out. A target that
does not answer before the run starts is a BenchError naming the URL.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlsplit

from .. import warmup as warm
from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..sim import workload as wl
from .tokens import output_identity, prompt_tokens


class BenchError(SpecError):
    """The run cannot start (a target that does not answer, a model it does not serve)."""


@dataclass
class Outcome:
    """What one request saw, in seconds from the start of the run (send, first and last token)."""

    id: int
    session: int
    turn: int
    target: int
    """Index in the targets the request was sent to; -1: through the router, which chose."""
    arrival: float
    prompt_tokens: int
    output_tokens: int
    sent: float = -1.0
    first_token: float = -1.0
    last_token: float = -1.0
    received_tokens: int = 0
    error: str | None = None
    waited: bool = False
    """A chat turn that left after its arrival time because the previous turn's reply came late."""
    output: list[int] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.received_tokens > 0

    @property
    def ttft(self) -> float:
        return self.first_token - self.sent

    @property
    def e2e(self) -> float:
        return self.last_token - self.sent

    @property
    def tpot(self) -> float:
        n = self.received_tokens
        return (self.last_token - self.first_token) / (n - 1) if n > 1 else 0.0


API_KEY_ENV = "OPENAI_API_KEY"
"""The variable `--api-key` defaults to, as OpenAI clients and `vllm bench serve` read it."""


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible endpoint: http:// or https:// (certificates verified against the system's CAs, or
    SSL_CERT_FILE), with a path prefix, and the bearer token vLLM's --api-key asks for. The token is never
    part of the URL, the repr or a saved run."""

    url: str
    host: str
    port: int
    base: str
    """Path prefix before /v1 (usually empty)."""
    tls: bool = False
    api_key: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, url: str, api_key: str | None = None) -> "Target":
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BenchError([Problem("--target", f"'{url}' is not an http:// or https:// URL",
                                      fix="give the vLLM endpoint, e.g. --target http://127.0.0.1:8000")])
        base = parts.path.rstrip("/")
        tls = parts.scheme == "https"
        return cls(f"{parts.scheme}://{parts.netloc}{base}", parts.hostname, parts.port or (443 if tls else 80), base,
                   tls, api_key or None)

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        """A connection to the endpoint (TLS for https://)."""
        if self.tls:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def headers(self) -> dict[str, str]:
        """The Authorization header vLLM's --api-key checks, when a key is given."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


LATE = 0.05
"""Seconds after its arrival time a chat turn may leave before it counts as `waited`."""

Progress = Callable[[int, int, int, int], None]
"""progress(done, failed, in_flight, total)."""


def check_target(target: Target, model: str, timeout: float = 10.0) -> None:
    """Raise BenchError unless `target` answers GET /v1/models and serves `model`."""
    try:
        conn = target.connect(timeout)
        conn.request("GET", f"{target.base}/v1/models", headers=target.headers())
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
    except ssl.SSLCertVerificationError as exc:
        raise BenchError([Problem("--target", f"{target.url}'s TLS certificate is not trusted: {exc.verify_message}",
                                  fix="trust the CA that signed it: SSL_CERT_FILE=/path/to/ca.pem kvplan ...")]) from None
    except (OSError, http.client.HTTPException) as exc:
        raise BenchError([Problem("--target", f"{target.url} does not answer: {exc or type(exc).__name__}",
                                  fix="start the stack (kvplan deploy SPEC -i INVENTORY) or point --target at "
                                      "a running vLLM (curl URL/health should print nothing and exit 0)")]) from None
    if resp.status == 401:
        raise BenchError([Problem("--api-key", f"{target.url}/v1/models answered HTTP 401: the server wants an API key"
                                  + (" and refused this one" if target.api_key else ""),
                                  fix=f"pass the key vLLM was started with: --api-key KEY, or set {API_KEY_ENV}")])
    if resp.status != 200:
        raise BenchError([Problem("--target", f"{target.url}/v1/models answered HTTP {resp.status}",
                                  fix="point --target at vLLM's OpenAI-compatible server")])
    try:
        served = [m["id"] for m in json.loads(body)["data"]]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise BenchError([Problem("--target", f"{target.url}/v1/models is not an OpenAI model list",
                                  fix="point --target at vLLM's OpenAI-compatible server")]) from None
    if model not in served:
        raise BenchError([Problem("--target", f"{target.url} serves {', '.join(served) or 'no model'}, not {model}",
                                  fix="deploy this spec there (vLLM's --served-model-name is the spec's model)")])


def stream_completion(target: Target, body: dict, timeout: float, clock: Callable[[], float], out: Outcome,
                      session: int = -1) -> None:
    """Send one streaming completion and fill `out` (first/last token times, tokens, error). A request of a
    session names it in an X-Session-ID header, which the router's session_affinity policy routes by."""
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **target.headers()}
    if session >= 0:
        headers["X-Session-ID"] = str(session)
    conn = target.connect(timeout)
    try:
        out.sent = clock()
        conn.request("POST", f"{target.base}/v1/completions", payload, headers)
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace').strip()}"
            return
        finished = False
        for line in resp:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                finished = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                out.error = f"stream error: {chunk['error']}"
                return
            for choice in chunk.get("choices", ()):
                ids = choice.get("token_ids") or []
                if ids:
                    now = clock()
                    if out.first_token < 0:
                        out.first_token = now
                    out.last_token = now
                    out.received_tokens += len(ids)
                    out.output += ids
        if out.received_tokens == 0:
            out.error = "the stream ended without a token"
        elif not finished:     # http.client reads a cut-off stream (chunked or not) as a clean end: only [DONE] tells
            out.error = f"the stream was cut off after {out.received_tokens} tokens (no data: [DONE])"
    except socket.timeout:
        out.error = f"timed out after {timeout:g} s without data"
    except (OSError, http.client.HTTPException, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except (TypeError, AttributeError, KeyError, RecursionError) as exc:    # JSON, but not an OpenAI stream chunk
        out.error = f"the stream is not an OpenAI completion stream ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        conn.close()


@dataclass
class Bench:
    """One replay of `resolved.workload` against `targets`: through `router` when given (the deployed router
    picks the instance; warm-up prefills still go to every target), else round robin over the targets."""

    resolved: Resolved
    targets: list[Target]
    salt: int
    router: Target | None = None
    seed: int | None = None
    timeout: float = 120.0
    """Seconds a request may go without data (connect, or between streamed chunks)."""
    progress: Progress | None = None

    @property
    def seed_used(self) -> int:
        return self.resolved.workload.seed if self.seed is None else self.seed

    def requests(self) -> wl.RequestList:
        return wl.requests(self.resolved, seed=self.seed)

    def body(self, req: wl.Request, outputs: dict) -> dict:
        vocab = self.resolved.model.vocab_size
        tokens = prompt_tokens(req.content, req.prompt_tokens, vocab, self.salt, outputs, warm.warmed(self.resolved))
        return self._body(tokens, req.output_tokens)

    def _body(self, prompt: list[int], output_tokens: int) -> dict:
        out = max(output_tokens, 1)       # a warm-up prefill still needs one token back
        return {"model": self.resolved.model.name, "stream": True, "return_token_ids": True, "temperature": 0.0,
                "max_tokens": out, "min_tokens": out, "ignore_eos": True, "prompt": prompt}

    def run_warmup(self) -> list[Outcome]:
        """Send the warm-up prefills (kvplan.warmup) one by one to every target: the simulator prefills each on
        every instance at time 0, before any request, and the deploy's warm-up play sent the same tokens."""
        outs = []
        for i, prefill in enumerate(warm.prompts(self.resolved, seed=self.seed)):
            body = self._body(warm.token_ids(prefill, self.resolved.model.vocab_size), 0)
            for t, target in enumerate(self.targets):
                out = Outcome(-i - 1, -1, 0, t, 0.0, prefill.tokens, 0)
                stream_completion(target, body, self.timeout, time.monotonic, out)
                outs.append(out)
        return outs

    def run(self) -> list[Outcome]:
        """Send every request at its arrival time (seconds from now) and wait for all of them, at most
        `timeout` past the last arrival; one Outcome per request, in arrival order."""
        reqs = self.requests()
        outcomes = [Outcome(r.id, r.session, r.turn, -1 if self.router else r.id % len(self.targets), r.arrival,
                            r.prompt_tokens, r.output_tokens) for r in reqs]
        done_events = [threading.Event() for _ in reqs]
        previous: dict[int, int] = {}              # session -> index of its latest turn so far
        waits_on: list[int | None] = []
        for i, r in enumerate(reqs):
            waits_on.append(previous.get(r.session) if r.session >= 0 else None)
            if r.session >= 0:
                previous[r.session] = i
        outputs: dict[tuple[int, ...], list[int]] = {}
        lock = threading.Lock()
        counts = {"done": 0, "failed": 0, "in_flight": 0}
        start = time.monotonic()
        clock = lambda: time.monotonic() - start  # noqa: E731

        def worker(i: int) -> None:
            req, out = reqs[i], outcomes[i]
            sending = False
            try:
                before = waits_on[i]
                if before is not None:
                    done_events[before].wait()
                    out.waited = clock() - req.arrival > LATE
                    if not outcomes[before].ok:
                        out.error = f"not sent: turn {outcomes[before].turn} of its session failed"
                        return
                with lock:
                    body = self.body(req, outputs)
                    counts["in_flight"] += 1
                sending = True
                stream_completion(self.router or self.targets[out.target], body, self.timeout, clock, out, req.session)
                ident = output_identity(req.content, req.prompt_tokens)
                if ident is not None and out.ok:
                    with lock:
                        outputs[ident] = out.output
            except Exception as exc:                 # a bug or an unexpected reply: record it, never hang the run
                out.error = f"{type(exc).__name__}: {exc}"
            finally:
                with lock:
                    counts["in_flight"] -= sending
                    counts["done"] += 1
                    counts["failed"] += not out.ok
                done_events[i].set()

        threads = []
        last_report = 0.0
        for i, req in enumerate(reqs):
            while True:
                now = clock()
                if now >= req.arrival:
                    break
                time.sleep(min(req.arrival - now, 0.25))
                last_report = self._report(counts, len(reqs), last_report, clock)
            t = threading.Thread(target=worker, args=(i,), name=f"kvplan-bench-{i}", daemon=True)
            t.start()
            threads.append(t)
        deadline = clock() + self.timeout + 5.0
        for t in threads:
            while t.is_alive() and clock() < deadline:
                t.join(0.25)
                last_report = self._report(counts, len(reqs), last_report, clock)
        for out, t in zip(outcomes, threads):
            if t.is_alive() and out.error is None:
                out.error = f"still running {self.timeout:g} s after the last arrival"
        self._report(counts, len(reqs), -1.0, clock)
        return outcomes

    def _report(self, counts: dict, total: int, last: float, clock) -> float:
        now = clock()
        if self.progress is not None and (last < 0 or now - last >= 1.0):
            self.progress(counts["done"], counts["failed"], counts["in_flight"], total)
            return now
        return last


def new_salt() -> int:
    """A fresh salt: 62 random bits, so a new run shares no token run with any earlier one."""
    return int.from_bytes(os.urandom(8), "big") >> 2
