"""Load stages and closed loops: what each stage of a workload sends (kvplan.spec.stages says what a stage is).

- An open-loop stage is drawn as a workload without stages is (kvplan.sim.workload's `_Drawn`:
  the same sessions, lengths and length limits), from the stage's own arrival process
  (kvplan.sim.arrivals), end and random stream, at times counted from the stage's start. It ends
  at its duration or, when it reaches its `requests` first, at the arrival of the last of them.
- A closed-loop stage draws the same sessions in the same order and batches, less the arrival
  times, a batch at a time as its users take them: how many it sends depends on how fast the
  replies come, which only a run knows. A session is fitted to max_model_len by the rule of
  kvplan.sim.workload's docstring ("Length limits"): a first turn too long has its new text
  shortened, or is rejected (counted as sent, never served) when even one token does not fit;
  a later turn too long ends the session there.

Random streams: the shared prefixes' lengths are the first draws of generator(seed), as in every
workload (the warm-up redraws them). The first stage goes on drawing from that generator, as a
workload without stages does, so a one-stage workload is the workload without stages; stage k > 0
draws from a stream of its own, child k of SeedSequence(seed), so what a stage sends does not
depend on how much the stages before it drew.

Names: stage k's sessions and turns are numbered from k x STAGE_SPAN, so no two stages share a
session or a user's text; they share the shared prefixes, as all requests do. A request's id is
given when it is sent, 0.. in the order of sending, so the ids run through the stages in order.

`requests` lists every request in advance where the stages allow it: open loops only, none of
them draining (each stage's times then follow from the spec alone). Otherwise kvplan.sim.load
sends them during a simulation and kvplan bench against a live stack.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import numpy as np

from ..errors import Problem, SpecError
from ..spec.stages import Stage, listable, rescaled_count, stages_of, window
from ..spec.workload import draw, generator
from ..spec.workload import prefix_lengths as draw_prefix_lengths
from . import workload as wl
from .arrivals import Rescaled, gaps
from .content import OUTPUT, SHARED_PREFIX, USER_TEXT, Segments
from .shapes import SharedPrefixSet

STAGE_SPAN = 1 << 40
"""Sessions and turns of stage k are numbered from k x STAGE_SPAN (far more than a stage ever draws)."""

_BATCH = 1024
"""Sessions a closed-loop stage draws at a time: kvplan.sim.workload's batch, so the two draw alike."""


def stage_generator(seed: int, index: int, first: np.random.Generator) -> np.random.Generator:
    """The random stream of stage `index`: `first` (generator(seed), past the prefix lengths) for stage 0, else child
    `index` of SeedSequence(seed)."""
    if index == 0:
        return first
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(index,))))


class OpenStage:
    """An open-loop stage: every request it sends and when, from its start (drawn in full when made). Known before
    it runs: `count` (requests it sends), `last_arrival`, `decoding` (those with more than one output token), what a
    RequestList counts (`rejected`, `shortened`, `sessions_ended_early`) and `end`.

    A synthetic kind's stage is what `_Drawn` reads to draw it: `generator`, `starts`, `requests`, `duration` (for
    rescaled_poisson its window, past which no turn arrives) and `first` (the number of its first session and turn).
    A shared_prefix stage's k-th arrival sends prompt k of the set's order (kvplan.sim.shapes: every stage starts
    again at the first, as inference-perf's do); a prompt too long for max_model_len is rejected."""

    closed = False

    def __init__(self, resolved, seed: int, index: int, stage: Stage, prompts: SharedPrefixSet | None = None,
                 after_prompts: np.random.Generator | None = None):
        self.index, self.spec, self.seed = index, stage, seed
        self.first = index * STAGE_SPAN
        self.requests = stage.requests
        self.rescaled = stage.process == "rescaled_poisson"
        self.duration = window(stage) if self.rescaled else stage.duration
        self._rescaled: Rescaled | None = None
        self.prompts = prompts
        if prompts is None:
            self.drawn = wl._Drawn(resolved, seed, stage=self)
            d = self.drawn
            arrivals = d.arrival                                # every record's, the rejected ones too
            self.count, self.decoding, self.last_arrival = d.count, d.decoding, d.last_arrival
            self.rejected, self.shortened, self.sessions_ended_early = d.rejected, d.shortened, d.sessions_ended_early
        else:
            assert after_prompts is not None
            arrivals = self._arrivals(stage_generator(seed, index, after_prompts))
            self.sent = prompts.sends(np.arange(len(arrivals)))
            prompt, out = prompts.prompt_tokens[self.sent], prompts.output_tokens[self.sent]
            fits = prompt + out <= resolved.max_model_len
            self.kept = np.flatnonzero(fits)
            self.times, self.prompt_tokens, self.output_tokens = arrivals, prompt, out
            self.count, self.decoding = len(self.kept), int((out[fits] > 1).sum())
            self.last_arrival = float(arrivals[self.kept[-1]]) if len(self.kept) else 0.0
            self.rejected, self.shortened, self.sessions_ended_early = len(arrivals) - len(self.kept), 0, 0
        reached = stage.requests is not None and len(arrivals) == stage.requests
        self.end = float(arrivals[-1]) if reached or self.duration is None else self.duration
        """Seconds from the stage's start to its end: its duration, or the arrival of its last request."""

    def generator(self, first: np.random.Generator) -> np.random.Generator:
        return stage_generator(self.seed, self.index, first)

    def starts(self, rng: np.random.Generator, t0: float, size: int) -> np.ndarray:
        """The next `size` session starts after `t0`."""
        if not self.rescaled:
            return t0 + np.cumsum(gaps(self.spec, rng, size))
        if self._rescaled is None:
            self._rescaled = Rescaled(self.spec.rate, self.duration, rescaled_count(self.spec), rng)
        return self._rescaled.next(size)

    def _arrivals(self, rng: np.random.Generator) -> np.ndarray:
        """Its arrival times, drawn _BATCH at a time until it has `requests` of them or one falls past its duration (as
        kvplan.sim.workload draws a shared_prefix workload's), then cut to those."""
        batches: list[np.ndarray] = []
        t0, count = 0.0, 0
        while True:
            times = self.starts(rng, t0, _BATCH)
            batches.append(times)
            t0, count = float(times[-1]), count + len(times)
            if self.requests is not None and count >= self.requests:
                break
            if self.duration is not None and t0 > self.duration:
                break
        every = np.concatenate(batches)
        if self.duration is not None:
            every = every[every <= self.duration]
        return every[:self.requests]

    def stream(self) -> wl.RequestStream:
        """Its requests in arrival order, each built when taken (ids from 0; the sender numbers them anew)."""
        if self.prompts is None:
            return self.drawn.stream()
        prompts, kept = self.prompts, self.kept.tolist()
        times, prompt, out, sent = (a.tolist() for a in (self.times, self.prompt_tokens, self.output_tokens, self.sent))

        def made():
            for new_id, j in enumerate(kept):
                yield wl.Request(new_id, times[j], prompt[j], out[j], prompts.content(sent[j], self.first + j))
        return wl.RequestStream(self.count, self.last_arrival, self.decoding, made(), self.rejected)


class Session(NamedTuple):
    """One conversation of a closed-loop stage, fitted to max_model_len."""

    number: int
    rank: int
    """Its shared prefix (-1: none)."""
    turns: list[tuple[int, int, int, float]]
    """(new text, output tokens, turn number, think time before the next turn) of each turn that fits."""
    rejected: bool
    """Its first turn does not fit even with one token of new text: refused, nothing else is sent."""
    shortened: bool
    ended_early: bool
    """A later turn did not fit: the conversation ends before it."""


class ClosedStage:
    """A closed-loop stage: what its users send, taken in order (`take`): a synthetic kind's sessions, drawn a batch
    at a time as they are taken; a shared_prefix set's prompts, the k-th taken sending prompt k of the set's order."""

    closed = True

    def __init__(self, resolved, seed: int, index: int, stage: Stage, prompts: SharedPrefixSet | None = None):
        w = resolved.workload
        self.index, self.spec = index, stage
        self.first = index * STAGE_SPAN
        self.workload, self.max_len = w, resolved.max_model_len
        self.prompts = prompts
        self.taken = 0
        if prompts is None:
            first = generator(seed)
            self.prefix_lengths: list[int] = draw_prefix_lengths(w, first).tolist()
            self.rng = stage_generator(seed, index, first)
            sp = w.shared_prefixes
            self.cdf = wl.zipf_cdf(sp.count, sp.skew) if sp is not None and sp.count > 1 else None
            self.sessions = w.sessions is not None
            self._queue: deque[Session] = deque()
            self._sessions = self._turns = 0            # drawn so far

    def take(self) -> "Conversation | Prompt":
        """What the next user to be free sends: a session's turns, or one prompt."""
        k, self.taken = self.taken, self.taken + 1
        if self.prompts is not None:
            return Prompt(self.prompts, int(self.prompts.sends(np.array([k]))[0]), self.first + k, self.max_len)
        if not self._queue:
            self._draw()
        return Conversation(self._queue.popleft(), self.prefix_lengths, self.sessions)

    def _draw(self) -> None:
        """A batch of sessions, drawn as `_Drawn` draws one (its ranks, turns, new text, outputs and think times, in
        that order, less the arrival gaps), each fitted to max_model_len."""
        w, rng, size = self.workload, self.rng, _BATCH
        sp = w.shared_prefixes
        if self.cdf is not None:
            ranks = np.minimum(np.searchsorted(self.cdf, rng.random(size), side="right"), len(self.cdf) - 1).tolist()
        else:
            ranks = [0] * size if sp is not None else [-1] * size
        turns_dist = w.sessions.turns if w.sessions is not None else None
        turns = draw(turns_dist, rng, size).tolist() if turns_dist is not None else [1] * size
        total = sum(turns)
        prompts = draw(w.prompt, rng, total).tolist()
        outputs = draw(w.output, rng, total).tolist()
        thinks = rng.exponential(w.sessions.think_time, total).tolist() if w.sessions is not None else [0.0] * total
        j = 0
        for rank, n_turns in zip(ranks, turns):
            used = self.prefix_lengths[rank] if rank >= 0 else 0
            fitted: list[tuple[int, int, int, float]] = []
            rejected = shortened = ended = False
            for k in range(n_turns):
                new, out = prompts[j + k], outputs[j + k]
                if used + new + out > self.max_len:
                    if k:                        # a later turn: the conversation is over
                        ended = True
                        break
                    room = self.max_len - out - used
                    if room < 1:                 # even 1 token of new text does not fit: rejected
                        rejected = True
                        break
                    new, shortened = room, True
                fitted.append((new, out, self.first + self._turns, thinks[j + k]))
                self._turns += 1
                used += new + out
            j += n_turns
            self._queue.append(Session(self.first + self._sessions, rank, fitted, rejected, shortened, ended))
            self._sessions += 1


class Conversation:
    """A session as its user sends it: `request(k, ...)` builds turn k on turn k-1, whose content its prompt begins
    with (turns are built in order)."""

    def __init__(self, session: Session, prefix_lengths: list[int], sessions: bool):
        self.session = session
        self.rejected, self.shortened, self.ended_early = session.rejected, session.shortened, session.ended_early
        self.used = prefix_lengths[session.rank] if session.rank >= 0 else 0
        self.prefix = self.used
        self.parent: Segments | None = None
        self.label = session.number if sessions else -1

    def __len__(self) -> int:
        return len(self.session.turns)

    def think(self, k: int) -> float:
        """Seconds the user thinks between the reply to turn k and turn k + 1."""
        return self.session.turns[k][3]

    def request(self, k: int, ident: int, arrival: float) -> wl.Request:
        new, out, turn_n, _ = self.session.turns[k]
        text = (((USER_TEXT, turn_n), new), ((OUTPUT, turn_n), out))
        heir = k + 1 < len(self.session.turns)
        if self.parent is not None:
            content = Segments.after(self.parent, text, heir)
        elif self.session.rank >= 0:
            content = Segments((((SHARED_PREFIX, self.session.rank), self.prefix),) + text, heir=heir)
        else:
            content = Segments(text, heir=heir)
        self.parent = content
        prompt = self.used + new
        self.used = prompt + out
        return wl.Request(ident, arrival, prompt, out, content, self.label, k)


class Prompt:
    """One prompt of a shared_prefix set as a closed-loop user sends it: one request, its output named `number`;
    rejected when its prompt and output exceed max_model_len."""

    shortened = ended_early = False

    def __init__(self, prompts: SharedPrefixSet, prompt: int, number: int, max_len: int):
        self.prompts, self.prompt, self.number = prompts, prompt, number
        self.prompt_tokens, self.output_tokens = int(prompts.prompt_tokens[prompt]), int(prompts.output_tokens[prompt])
        self.rejected = self.prompt_tokens + self.output_tokens > max_len

    def __len__(self) -> int:
        return 1

    def think(self, k: int) -> float:
        return 0.0

    def request(self, k: int, ident: int, arrival: float) -> wl.Request:
        return wl.Request(ident, arrival, self.prompt_tokens, self.output_tokens,
                          self.prompts.content(self.prompt, self.number))


class Staged:
    """A staged or closed-loop workload: its stages, each ready to send (`stages_of` says which workloads are)."""

    def __init__(self, resolved, seed: int | None = None):
        w = resolved.workload
        self.seed = w.seed if seed is None else seed
        loads = stages_of(w)
        assert loads is not None, "a workload without stages or a closed loop is kvplan.sim.workload's"
        self.reported = w.stages is not None
        """Whether the spec lists its stages (a result then reports each); a closed loop or rescaled_poisson arrivals
        without `stages` is one stage, the whole run."""
        prompts = after = None
        if w.kind == "shared_prefix":            # one prompt set for every stage, drawn first as without stages
            after = generator(self.seed)
            prompts = SharedPrefixSet(w.shared_prefix, after)
        self.stages: list[OpenStage | ClosedStage] = [
            ClosedStage(resolved, self.seed, i, s, prompts) if s.concurrency is not None else
            OpenStage(resolved, self.seed, i, s, prompts, after) for i, s in enumerate(loads)]

    @property
    def static(self) -> bool:
        """Every stage's requests and times follow from the spec: open loops only, none of them draining."""
        return listable([s.spec for s in self.stages])

    def span(self) -> float | None:
        """Seconds from the start of traffic to the last arrival, where the spec alone says; None where a closed loop
        ends by its requests (how long that takes only a run knows). Known for a static workload: the last arrival."""
        start, last = 0.0, 0.0
        for s in self.stages:
            if s.closed and s.spec.duration is None:
                return None
            if isinstance(s, OpenStage) and s.count:
                last = start + s.last_arrival
            start += (s.end if not s.closed else s.spec.duration) + s.spec.pause
        return last if self.static else start

    def counts(self) -> tuple[int, int] | None:
        """(requests, of them with more than one output token) of a static workload, known before it runs; None for
        one whose closed loop or drain decides them as it runs."""
        if not self.static:
            return None
        open_stages = [s for s in self.stages if isinstance(s, OpenStage)]
        return sum(s.count for s in open_stages), sum(s.decoding for s in open_stages)

    def listed(self) -> wl.RequestList:
        """Every request of a static workload, in arrival order, ids 0..; SpecError for one that is not."""
        if not self.static:
            raise SpecError([self._dynamic()])
        out = wl.RequestList()
        start = 0.0
        for s in self.stages:
            assert isinstance(s, OpenStage)
            for req in s.stream():
                out.append(req._replace(id=len(out), arrival=start + req.arrival))
            out.rejected += s.rejected
            out.shortened += s.shortened
            out.sessions_ended_early += s.sessions_ended_early
            start += s.end + s.spec.pause
        return out

    def _dynamic(self) -> Problem:
        s = next(s for s in self.stages if s.closed or s.spec.drain)
        path = f"workload.stages[{s.index}]" if self.reported else "workload.arrivals.concurrency"
        why = "is a closed loop, whose users send when their replies come" if s.closed else \
            "drains, so the next stage starts when its last reply has come"
        return Problem(path, f"{why}: when its requests are sent is known only as a run goes, so they cannot be "
                       "listed before one", None, fix="kvplan simulate and kvplan bench run it; to list the requests "
                       "in advance, give every stage a rate and no drain")


def requests(resolved, seed: int | None = None) -> wl.RequestList:
    """Every request of the workload, in arrival order, ids 0..: kvplan.sim.workload.requests for a workload without
    stages, the static stages' requests back to back for one with them (SpecError where a closed loop or a drain makes
    their times known only as a run goes)."""
    if stages_of(resolved.workload) is None:
        return wl.requests(resolved, seed)
    with wl._gc_paused():
        return Staged(resolved, seed).listed()
