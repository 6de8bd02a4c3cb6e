"""The load generator: a spec's workload replayed against a live OpenAI-compatible endpoint.

Every request the simulator would see (`sim.workload.requests`, the same spec and seed) is sent
at its arrival time, open loop, as a streaming `/v1/completions` call whose prompt is token ids
(`tokens.py`), with `ignore_eos` and `min_tokens` so the reply is exactly the workload's output
length. A chat turn carries the earlier turn's real reply, so it waits for that reply if the
reply is late (counted as `waited`); every other request leaves on time. What each request saw is
measured at the client: TTFT (send to the first streamed token), TPOT (mean gap between later
tokens) and E2E (send to the last token), plus the error of a request that failed.

Load stages and closed loops (kvplan.spec.stages) are sent as the simulator sends them
(kvplan.sim.load): stages one after the other, each open loop's requests at their times from its
start, each closed loop's users sending the next turn once the reply to the last has come (and
its think time has passed), a draining stage's successor only after its replies. Ids then count
the requests in the order they were sent.

Nothing waits forever, and nothing a server sends is held whole or used unchecked (kvplan.live.bounded):
each request has a timeout (connect, and every read of the stream), a warm-up prefill must end
within it in all, a request still running `timeout` after the last arrival is recorded as timed
out, a line of a stream is at most bounded.MAX_LINE bytes and its token ids are checked. A target
that does not answer GET /v1/models within CHECK_TIMEOUT seconds in all (however slowly it sends),
or answers more than bounded.MAX_BODY bytes or anything but a model list, is a BenchError naming the URL
(target.py).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .. import warmup as warm
from ..errors import Problem
from ..resolve import Resolved
from ..sim import stages
from ..sim import workload as wl
from ..sim.load import MAX_REJECTED_IN_A_ROW
from ..sim.stages import ClosedStage, OpenStage, Staged
from ..spec.stages import stages_of
from .bounded import MAX_LINE, Deadline, DeadlineExceeded, connect, json_body, restart
from .target import API_KEY_ENV, CHECK_TIMEOUT, BenchError, Target, check_target  # noqa: F401 - callers import them from here too
from .tokens import output_identity, prompt_tokens


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


LATE = 0.05
"""Seconds after its arrival time a chat turn may leave before it counts as `waited`."""

Progress = Callable[[int, int, int, int], None]
"""progress(done, failed, in_flight, total)."""


def stream_completion(target: Target, body: dict, timeout: float, clock: Callable[[], float], out: Outcome,
                      session: int = -1, deadline: Deadline | None = None) -> None:
    """Send one streaming completion and fill `out` (first/last token times, tokens, error). A request of a
    session names it in an X-Session-ID header, which the router's session_affinity policy routes by.

    However slowly the server sends: the answer's headers, and then each line of the stream, must come whole
    within `timeout`; the whole request ends within (max_tokens + 2) x `timeout` (and by `deadline` when one is
    given); a line is at most bounded.MAX_LINE bytes, and a stream that sends more tokens than the request asked
    for is an error."""
    payload = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **target.headers()}
    if session >= 0:
        headers["X-Session-ID"] = str(session)
    asked = body.get("max_tokens")
    if isinstance(asked, int) and asked >= 0:
        mine = Deadline.after(timeout * (asked + 2), "the request's deadline")
        deadline = mine if deadline is None or mine.at < deadline.at else deadline
    out.sent = clock()
    try:
        conn = connect(target, timeout, deadline)
    except DeadlineExceeded as exc:
        out.error = str(exc) if exc.overall else f"timed out after {timeout:g} s without data"
        return
    except socket.timeout:
        out.error = f"timed out after {timeout:g} s without data"
        return
    except (OSError, http.client.HTTPException) as exc:
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return
    try:
        conn.request("POST", f"{target.base}/v1/completions", payload, headers)
        resp = conn.getresponse()
        if resp.status != 200:
            out.error = f"HTTP {resp.status}: {resp.read(300).decode(errors='replace').strip()}"
            return
        finished = False
        while True:
            restart(conn, timeout)                 # each line of the stream comes whole within `timeout`
            line = resp.readline(MAX_LINE + 1)
            if not line:
                break
            if len(line) > MAX_LINE:
                out.error = f"a line of the stream is longer than {MAX_LINE:,} bytes: not an OpenAI completion stream"
                return
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                finished = True
                break
            chunk = json_body(data)
            if "error" in chunk:
                out.error = f"stream error: {str(chunk['error'])[:300]}"
                return
            for choice in chunk.get("choices", ()):
                ids = choice.get("token_ids") or []
                if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                    raise TypeError("token_ids is not a list of token ids")
                if ids:
                    now = clock()
                    if out.first_token < 0:
                        out.first_token = now
                    out.last_token = now
                    out.received_tokens += len(ids)
                    out.output += ids
                    if isinstance(asked, int) and out.received_tokens > asked:
                        out.error = f"the stream sent {out.received_tokens} tokens or more, the request asked for {asked}"
                        return
        if out.received_tokens == 0:
            out.error = "the stream ended without a token"
        elif not finished:     # http.client reads a cut-off stream (chunked or not) as a clean end: only [DONE] tells
            out.error = f"the stream was cut off after {out.received_tokens} tokens (no data: [DONE])"
    except DeadlineExceeded as exc:
        out.error = str(exc) if exc.overall else f"timed out after {timeout:g} s without data"
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
        """Every request, listed in advance: a workload without stages, or whose stages are open loops without
        drain."""
        return stages.requests(self.resolved, seed=self.seed)

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
        `timeout` past the last arrival; one Outcome per request, in arrival order. A workload whose stages are not
        all open loops without drain is run stage by stage as it goes (`run_stages`)."""
        if stages_of(self.resolved.workload) is not None:
            staged = Staged(self.resolved, self.seed)
            if not staged.static:
                return self.run_stages(staged)
        reqs = self.requests()
        sending = _Sending(self, len(reqs))
        for r in reqs:
            sending.add(r)
        threads = []
        for i, req in enumerate(reqs):
            sending.sleep_until(req.arrival)
            threads.append(sending.start(i, sending.waits_on(i)))
        return sending.finish(threads)

    def run_stages(self, staged: Staged) -> list[Outcome]:
        """Send a staged or closed-loop workload as kvplan.sim.load sends it in a simulation: an open-loop stage's
        requests at their times from the stage's start; a closed loop's users each sending the next turn (or taking
        the next session) once the reply to the last has come, after the turn's think time; the next stage when this
        one ends (after its drain and pause). Ids are given in the order requests are sent. A user whose request
        failed leaves its session, whose next turn would carry the reply it did not get."""
        sending = _Sending(self, 0)
        threads: list[threading.Thread] = []
        for stage in staged.stages:
            begun = sending.clock()
            mine: list[threading.Thread] = []
            if isinstance(stage, OpenStage):
                for req in stage.stream():
                    i = sending.add(req._replace(id=len(sending.outcomes), arrival=begun + req.arrival))
                    sending.sleep_until(begun + req.arrival)
                    mine.append(sending.start(i, sending.waits_on(i)))
                sending.sleep_until(begun + stage.end)
            else:
                closing = _Users(stage)
                mine = [threading.Thread(target=self._user, args=(sending, stage, closing), daemon=True,
                                         name=f"kvplan-bench-user-{stage.index}-{u}")
                        for u in range(stage.spec.concurrency or 0)]
                for t in mine:
                    t.start()
                if stage.spec.duration is not None:
                    sending.sleep_until(begun + stage.spec.duration)
                    closing.end()
                else:
                    while not closing.ended.wait(0.25):
                        sending.report()
                if closing.stalled:
                    raise BenchError([Problem(f"workload.stages[{stage.index}]", closing.stalled,
                                              fix="shorten the requests, or raise serving.max_model_len")])
            threads += mine
            if stage.spec.drain:
                sending.join(mine)
            sending.sleep_until(sending.clock() + stage.spec.pause)
        return sending.finish(threads)

    def _user(self, sending: "_Sending", stage: ClosedStage, closing: "_Users") -> None:
        """One user of a closed-loop stage (run_stages)."""
        while True:
            with sending.lock:
                if closing.ended.is_set():
                    return
                talk = stage.take()
                if talk.rejected:
                    closing.count(rejected=True)
                    continue
                closing.count(rejected=False, sent=False)
            for k in range(len(talk)):
                with sending.lock:
                    if closing.ended.is_set():
                        return
                    req = talk.request(k, len(sending.outcomes), sending.clock())
                    i = sending.add(req)
                    closing.count(rejected=False)
                sending.send(i)
                if not sending.outcomes[i].ok:
                    break                            # its next turn would carry the reply it did not get
                if k + 1 < len(talk):
                    time.sleep(talk.think(k))

    def _report(self, counts: dict, total: int, last: float, clock) -> float:
        now = clock()
        if self.progress is not None and (last < 0 or now - last >= 1.0):
            self.progress(counts["done"], counts["failed"], counts["in_flight"], total)
            return now
        return last


class _Sending:
    """What one bench run's requests share while they are sent: their outcomes (index = id), the real outputs later
    chat turns carry, the counts progress reports, and the clock (seconds from the run's start)."""

    def __init__(self, bench: Bench, total: int):
        self.bench, self.total = bench, total
        self.outcomes: list[Outcome] = []
        self.requests: list[wl.Request] = []
        self.done: list[threading.Event] = []
        self.before: list[int | None] = []
        self._latest: dict[int, int] = {}        # session -> index of its latest turn so far
        self.outputs: dict[tuple[int, ...], list[int]] = {}
        self.lock = threading.Lock()
        self.counts = {"done": 0, "failed": 0, "in_flight": 0}
        self.start_time = time.monotonic()
        self.last_report = 0.0

    def clock(self) -> float:
        return time.monotonic() - self.start_time

    def add(self, req: wl.Request) -> int:
        """Take `req` on (its id must be the next index); returns that index."""
        b = self.bench
        self.outcomes.append(Outcome(req.id, req.session, req.turn, -1 if b.router else req.id % len(b.targets),
                                     req.arrival, req.prompt_tokens, req.output_tokens))
        self.requests.append(req)
        self.done.append(threading.Event())
        self.before.append(self._latest.get(req.session) if req.session >= 0 else None)
        if req.session >= 0:
            self._latest[req.session] = req.id
        self.total = max(self.total, len(self.outcomes))
        return req.id

    def waits_on(self, i: int) -> int | None:
        """The index of the latest earlier turn of request i's session, which it carries (None: its first)."""
        return self.before[i]

    def sleep_until(self, when: float) -> None:
        while True:
            now = self.clock()
            if now >= when:
                return
            time.sleep(min(when - now, 0.25))
            self.report()

    def start(self, i: int, before: int | None) -> threading.Thread:
        """Send request i in a thread of its own, after the turn `before` it carries has finished."""
        t = threading.Thread(target=self.send, args=(i, before), name=f"kvplan-bench-{i}", daemon=True)
        t.start()
        return t

    def send(self, i: int, before: int | None = None) -> None:
        """Send request i now (once `before` has finished) and record what it saw; never raises."""
        req, out = self.requests[i], self.outcomes[i]
        sending = False
        try:
            if before is not None:
                self.done[before].wait()
                out.waited = self.clock() - req.arrival > LATE
                if not self.outcomes[before].ok:
                    out.error = f"not sent: turn {self.outcomes[before].turn} of its session failed"
                    return
            with self.lock:
                body = self.bench.body(req, self.outputs)
                self.counts["in_flight"] += 1
            sending = True
            b = self.bench
            stream_completion(b.router or b.targets[out.target], body, b.timeout, self.clock, out, req.session)
            ident = output_identity(req.content, req.prompt_tokens)
            if ident is not None and out.ok:
                with self.lock:
                    self.outputs[ident] = out.output
        except Exception as exc:                 # a bug or an unexpected reply: record it, never hang the run
            out.error = f"{type(exc).__name__}: {exc}"
        finally:
            with self.lock:
                self.counts["in_flight"] -= sending
                self.counts["done"] += 1
                self.counts["failed"] += not out.ok
            self.done[i].set()

    def join(self, threads: list[threading.Thread]) -> None:
        """Wait for `threads`, at most the request timeout (and a margin) from now."""
        deadline = self.clock() + self.bench.timeout + 5.0
        for t in threads:
            while t.is_alive() and self.clock() < deadline:
                t.join(0.25)
                self.report()

    def finish(self, threads: list[threading.Thread]) -> list[Outcome]:
        """Wait for every request, at most `timeout` past the last send; a request still running is timed out."""
        self.join(threads)
        with self.lock:
            for out, done in zip(self.outcomes, self.done):
                if not done.is_set() and out.error is None:
                    out.error = f"still running {self.bench.timeout:g} s after the last arrival"
        self.report(final=True)
        return list(self.outcomes)

    def report(self, final: bool = False) -> None:
        self.last_report = self.bench._report(self.counts, self.total, -1.0 if final else self.last_report, self.clock)


class _Users:
    """How far a closed-loop stage of a bench run has got: requests sent (rejected ones too), and whether it has
    ended (its `requests` sent, or its duration passed). Changed under the run's lock."""

    def __init__(self, stage: ClosedStage):
        self.stage = stage
        self.sent = 0
        self.rejected_in_a_row = 0
        self.stalled: str | None = None
        self.ended = threading.Event()

    def end(self) -> None:
        self.ended.set()

    def count(self, rejected: bool, sent: bool = True) -> None:
        """A request sent (`sent`), or a session taken whose first request is `rejected` (sent and refused)."""
        self.rejected_in_a_row = self.rejected_in_a_row + 1 if rejected else 0
        if self.rejected_in_a_row > MAX_REJECTED_IN_A_ROW:
            self.stalled = (f"the last {MAX_REJECTED_IN_A_ROW:,} sessions its users drew were all longer than "
                            "serving.max_model_len")
            self.end()
        if sent:
            self.sent += 1
            if self.stage.spec.requests is not None and self.sent >= self.stage.spec.requests:
                self.end()


def new_salt() -> int:
    """A fresh salt: 62 random bits, so a new run shares no token run with any earlier one."""
    return int.from_bytes(os.urandom(8), "big") >> 2
