"""The load of a staged or closed-loop workload, sent into a simulation as it runs.

kvplan.sim.stages draws what each stage sends; `Load` is the process that sends it, one stage
after the other (kvplan.spec.stages says what a stage is):

- An open-loop stage's requests go to the router at their times, counted from the stage's start,
  as `Router.deliver` sends a workload without stages; the stage ends at its end
  (`OpenStage.end`).
- A closed-loop stage starts `concurrency` users at once. A user takes the next session (one
  prompt for shared_prefix), sends a turn, and waits until its reply has come: the engine's last token plus the run's
  request_overhead (HTTP and streaming), the same instant the result's E2E counts to. It then
  thinks for the turn's think time and sends the next turn, or takes the next session at once.
  The stage ends when it has sent its `requests`, or when its duration has passed (a closed loop
  has one of the two: the other's timer would outlive the stage); from then on no user sends, and
  a user whose session is unfinished leaves it. A request
  rejected as too long counts as sent, and the user moves on at once.
- After its end a stage with `drain: true` waits until the reply to every request it sent has
  come (the last token plus request_overhead), then `pause` passes, then the next stage starts.

The run ends when the last stage has ended and every request sent has finished (`on_done` tells
the simulation how many were sent). Each stage's span of request ids, start and end is kept in
`spans`, from which the result's per-stage figures are made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import Problem, SpecError
from . import workload as wl
from .clock import Environment, Event, Steps
from .stages import ClosedStage, OpenStage, Staged

MAX_REJECTED_IN_A_ROW = 10_000
"""Sessions a closed-loop stage may reject one after the other, at one instant, before the run is stopped: its users
would send forever without the clock moving (a rejected request takes no simulated time)."""


@dataclass
class Span:
    """What one stage sent: request ids first..end-1, from `start` to `end` (seconds from the start of traffic)."""

    index: int
    first: int
    start: float
    end: float = 0.0
    last: int = 0
    """One past its last request id."""
    rejected: int = 0
    shortened: int = 0
    sessions_ended_early: int = 0


class _Closing:
    """How far a closed-loop stage has got: requests sent (rejected ones too) and whether it has ended."""

    def __init__(self, env: Environment, stage: ClosedStage):
        self.stage = stage
        self.sent = 0
        self.rejected_in_a_row = 0
        self.ended = env.event()

    @property
    def over(self) -> bool:
        return self.ended.triggered

    def end(self) -> None:
        if not self.ended.triggered:
            self.ended.succeed()

    def count(self) -> None:
        self.sent += 1
        if self.stage.spec.requests is not None and self.sent >= self.stage.spec.requests:
            self.end()


class Load:
    """Sends `staged` into a run: `submit(request)` hands a request to the router at the current instant; times are
    simulated seconds, `offset` of them before traffic starts (the warm-up)."""

    def __init__(self, env: Environment, staged: Staged, submit: Callable[[wl.Request], None], offset: float,
                 request_overhead: float, on_done: Callable[[int], None]):
        self.env, self.staged, self.submit = env, staged, submit
        self.offset, self.overhead, self.on_done = offset, request_overhead, on_done
        self.sent = 0
        self.spans: list[Span] = []
        self._unfinished = [0] * len(staged.stages)
        self._stage_of: dict[int, int] = {}          # id -> stage, for the requests in flight
        self._replies: dict[int, Event] = {}         # id -> what its closed-loop user waits on
        self._drained: Event | None = None
        self._current: tuple[Span, OpenStage | ClosedStage, _Closing | None] | None = None

    @property
    def rejected(self) -> int:
        return sum(s.rejected for s in self.spans)

    @property
    def shortened(self) -> int:
        return sum(s.shortened for s in self.spans)

    @property
    def sessions_ended_early(self) -> int:
        return sum(s.sessions_ended_early for s in self.spans)

    def run(self) -> Steps:
        """The stages, one after the other (a process of the run)."""
        env = self.env
        for stage in self.staged.stages:
            span = Span(stage.index, self.sent, env.now - self.offset)
            self.spans.append(span)
            if isinstance(stage, OpenStage):
                self._current = (span, stage, None)
                yield from self._open(stage, span)
            else:
                closing = _Closing(env, stage)
                self._current = (span, stage, closing)
                yield from self._closed(stage, span, closing)
            span.end, span.last = env.now - self.offset, self.sent
            if stage.spec.drain and self._unfinished[stage.index]:
                self._drained = env.event()
                yield self._drained
                self._drained = None
                if self.overhead > 0:            # the last reply reaches its client request_overhead later
                    yield env.timeout(self.overhead)
            if stage.spec.pause > 0:
                yield env.timeout(stage.spec.pause)
        self._current = None
        self.on_done(self.sent)

    def progress(self) -> float:
        """The share of the stages done: those ended, and of the current one its time or its requests, whichever is
        further."""
        if self._current is None:
            return 1.0
        span, stage, closing = self._current
        spec, n = stage.spec, len(self.staged.stages)
        if closing is None:
            assert isinstance(stage, OpenStage)
            part = (self.env.now - self.offset - span.start) / stage.end if stage.end > 0 else 1.0
        else:
            part = max((self.env.now - self.offset - span.start) / spec.duration if spec.duration else 0.0,
                       closing.sent / spec.requests if spec.requests else 0.0)
        return (stage.index + min(part, 1.0)) / n

    def finished(self, req: wl.Request, now: float) -> None:
        """A request has emitted its last token at `now` (Simulation.finished)."""
        index = self._stage_of.pop(req.id)
        self._unfinished[index] -= 1
        waiting = self._replies.pop(req.id, None)
        if waiting is not None:
            waiting.succeed()
        if self._drained is not None and not self._unfinished[index] and self.spans[-1].index == index:
            self._drained.succeed()

    def _send(self, req: wl.Request, stage: int) -> None:
        self._stage_of[req.id] = stage
        self._unfinished[stage] += 1
        self.sent += 1
        self.submit(req)

    def _open(self, stage: OpenStage, span: Span) -> Steps:
        env, offset = self.env, self.offset
        start = span.start
        requests = stage.stream()
        for req in requests:
            arrival = start + req.arrival
            delay = arrival + offset - env.now
            if delay > 0:
                yield env.timeout(delay)
            self._send(req._replace(id=self.sent, arrival=arrival), stage.index)
        span.rejected, span.shortened = requests.rejected, requests.shortened
        span.sessions_ended_early = requests.sessions_ended_early
        end = start + stage.end + offset
        if end > env.now:
            yield env.timeout(end - env.now)

    def _closed(self, stage: ClosedStage, span: Span, closing: _Closing) -> Steps:
        env = self.env
        for _ in range(stage.spec.concurrency or 0):
            env.process(self._user(stage, span, closing))
        if stage.spec.duration is not None:      # a closed loop ends by its duration or its requests, never both
            yield env.timeout(stage.spec.duration)
            closing.end()
        else:
            yield closing.ended

    def _user(self, stage: ClosedStage, span: Span, closing: _Closing) -> Steps:
        """One user of a closed-loop stage: sessions one after the other, each turn after the reply before it."""
        env = self.env
        while not closing.over:
            talk = stage.take()
            if talk.rejected:
                span.rejected += 1
                closing.count()
                closing.rejected_in_a_row += 1
                if closing.rejected_in_a_row > MAX_REJECTED_IN_A_ROW:
                    raise SpecError([self._stalled(stage)])
                continue
            closing.rejected_in_a_row = 0
            span.shortened += talk.shortened
            for k in range(len(talk)):
                if closing.over:
                    return
                req = talk.request(k, self.sent, env.now - self.offset)
                reply = env.event()
                self._replies[req.id] = reply
                closing.count()
                self._send(req, stage.index)
                yield reply
                pause = self.overhead + (talk.think(k) if k + 1 < len(talk) else 0.0)
                if pause > 0:
                    yield env.timeout(pause)
            if talk.ended_early:
                span.sessions_ended_early += 1

    def _stalled(self, stage: ClosedStage) -> Problem:
        path = f"workload.stages[{stage.index}]" if self.staged.reported else "workload.arrivals.concurrency"
        return Problem(path, f"the last {MAX_REJECTED_IN_A_ROW:,} sessions its users drew were all rejected: their "
                       "first request is longer than serving.max_model_len even with one token of new text, so they "
                       "send nothing and the clock never moves", None,
                       fix="shorten the requests (workload.output, the prompts' lengths), or raise "
                           "serving.max_model_len")
