"""Workload: the stream of requests a simulation replays.

Each request's `content` (kvplan.sim.content) names its tokens by prefix-chained keys, so a
cache hit in the simulator is the same event as a hit in the real stack, never a probability.

Synthetic generation (`requests`): every random draw comes from one
numpy.random.Generator(PCG64(seed)), in a fixed order and in fixed-size batches of sessions, so
the same spec and seed give the same list, a different seed a different one, and a larger
`requests` (or `duration`) extends the same stream rather than redrawing it.

- Arrivals: `arrivals.process` generates session starts (one-turn sessions when `sessions` is
  absent, i.e. plain requests): poisson (exponential gaps, mean 1/rate), gamma (shape
  k = 1/cv^2, scale 1/(rate k)) or constant (1/rate).
- Shared prefixes: `count` prefixes, rank r (1..count) chosen with probability ∝ 1/r^skew; the
  rank-1 prefix is index 0. Each prefix's length is drawn once (the very first draws, so
  `warmup` can rebuild them: kvplan.warmup, with the draws of kvplan.spec.workload).
- chat / codegen: a session picks a shared prefix (system prompt / repository context; none when
  `shared_prefixes` is absent) and a number of turns (1 without `sessions`). Turn k's prompt is
  the prefix, every earlier turn's user text and output in order, then new user text (`prompt`
  Dist); its content is that prompt plus its output (`output` Dist), so turn k+1's prompt
  literally starts with turn k's whole content. Turn k+1 arrives an exponential think time
  (mean `sessions.think_time`) after turn k *arrived*: the loop is open, a turn may arrive before
  the previous reply is finished (a closed-loop simulator can recover each think time as the
  gap between consecutive turns of a session and re-time them from completions instead).
- rag: a document then a question. With `shared_prefixes` the document is a shared prefix picked
  by popularity (large count / low skew = mostly distinct documents) and the question's length
  is drawn from `prompt`; without it every document is unique and the whole prompt (document and
  question together, both unique text) is drawn from `prompt`. `sessions`, if given, are
  follow-up questions on the same document.
- Length limits (vLLM refuses input + output > max_model_len): the first turn of a session (or a
  single request) that is too long gets its new text shortened, never below 1 token; if even
  that does not fit, the request is rejected (counted, not returned) and its session ends. A
  later turn that does not fit ends its session (the user starts over); it is not a request.
- Stop: after `requests` requests (counted in arrival order, all turns and rejected requests
  included) and/or at `duration` (no arrival after it), whichever comes first.

Rejected requests are reported on the returned `RequestList` as `.rejected` (see there).

Speed: a content computes its keys for a unit once, on first use, and caches them; a session turn
reuses its previous turn's keys. Building pauses Python's cyclic garbage collector (nothing built
here forms a cycle; the simulator runs with it off).

Memory: the simulator takes the workload as a `RequestStream`: every draw is made first into a few
numbers per request, and a request and its content are built only when the run reaches it, so a
million-request run holds numbers for the requests to come and objects for those in flight.
"""

from __future__ import annotations

import math

import numpy as np

from .. import warmup as warm
from ..errors import Problem, SpecError
from ..spec.stages import stages_of
from ..spec.workload import draw, generator, hash_ids_needed
from ..spec.workload import prefix_lengths as _prefix_lengths
from . import replay
from .arrivals import gaps as _gaps
from .content import OUTPUT, OUTPUT_TAG, SHARED_PREFIX, TEMPLATE, TRACE_TAG, USER_TEXT, Segments, TraceBlocks
from .request import Content, Request, RequestList, _gc_paused
from .shapes import SharedPrefixSet
from .trace import read_trace

__all__ = [
    "Content", "Segments", "TraceBlocks", "Request", "RequestList", "RequestStream", "requests", "stream", "warmup",
    "read_trace",
    "draw", "zipf_cdf", "SHARED_PREFIX", "TEMPLATE", "USER_TEXT", "OUTPUT", "TRACE_TAG", "OUTPUT_TAG",
]

_BATCH = 1024
"""Sessions drawn per batch. Part of the stream's definition: changing it changes every workload."""


def requests(resolved, seed: int | None = None) -> RequestList:
    """Every request of resolved.workload, sorted by arrival (ties by id), ids 0..n-1 in that order.

    `seed` overrides workload.seed (pass the same one to `warmup`). Requests longer than
    resolved.max_model_len are not returned; `.rejected` on the result counts them. Raises SpecError
    for a bad trace before anything runs.
    """
    w = resolved.workload
    seed = w.seed if seed is None else seed
    if w.kind == "trace":
        return _replay(resolved)
    _not_staged(w)
    if w.kind in BENCHMARK_KINDS:
        with _gc_paused():
            return _benchmark(resolved, seed).listed()
    if w.requests is None and w.duration is None:
        raise SpecError([Problem("workload", "a synthetic workload needs an end: requests or duration",
                                 fix="add workload.requests: 1000 or workload.duration: 10min")])
    with _gc_paused():
        return stream(resolved, seed).listed()


def warmup(resolved, seed: int | None = None) -> list[Request]:
    """The warm-up prefills, before any traffic (kvplan.warmup.prompts, which the deployment's warm-up
    play and kvplan bench send): the `warmup_system_prompts` most popular shared prefixes (indices 0..,
    the same Content prefix the real requests start with, so they hit) then each template of
    `warmup_template_tokens` (its own content, which no request shares).

    Arrival 0, output_tokens 0, warmup=True, ids -1, -2, ... A prompt longer than max_model_len is cut
    to it. Empty when lmcache or warm-up is off. `seed` must be the one given to `requests` (prefix
    lengths are drawn from it).
    """
    return [Request(-i - 1, 0.0, p.tokens, 0, Segments(((p.ident, p.tokens),)), warmup=True)
            for i, p in enumerate(warm.prompts(resolved, seed))]


# --------------------------------------------------------------------------- distributions

# `draw` (a spec Dist's numbers), `generator` (the stream's PCG64) and `prefix_lengths` (its first draws) are
# kvplan.spec.workload's, so that kvplan.warmup redraws the prefix lengths without the simulator.


def zipf_cdf(count: int, skew: float) -> np.ndarray:
    """Cumulative popularity of ranks 1..count with P(r) ∝ 1/r^skew (skew 0 = uniform); last entry 1."""
    weights = np.arange(1, count + 1, dtype=np.float64) ** -skew
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


# --------------------------------------------------------------------------- synthetic kinds

class RequestStream:
    """The requests of a workload in arrival order, each built when the stream reaches it.

    A synthetic workload's draws are all made first, in the order the module docstring gives,
    into a few numbers per request (`_Drawn`); a request and its content are built only when
    taken, on its session's previous turn. A run of a million requests so holds the requests
    to come as numbers and those in flight as objects, not a million contents; `requests` is
    this stream, listed. Known before the first request: len() (requests it yields),
    `last_arrival`, `decoding` (requests with more than one output token) and what RequestList
    counts (`rejected`, `shortened`, `sessions_ended_early`)."""

    def __init__(self, count: int, last_arrival: float, decoding: int, made, rejected: int = 0,
                 shortened: int = 0, sessions_ended_early: int = 0):
        self.count, self.last_arrival, self.decoding = count, last_arrival, decoding
        self.rejected, self.shortened, self.sessions_ended_early = rejected, shortened, sessions_ended_early
        self._made = made

    @classmethod
    def of(cls, reqs: RequestList) -> "RequestStream":
        """A list already built (a trace), as a stream that hands each request on and lets go of it."""
        def take():
            for i, req in enumerate(reqs):
                reqs[i] = None
                yield req
        return cls(len(reqs), reqs[-1].arrival if reqs else 0.0, sum(1 for q in reqs if q.output_tokens > 1), take(),
                   reqs.rejected, reqs.shortened, reqs.sessions_ended_early)

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return self._made

    def listed(self) -> RequestList:
        out = RequestList(rejected=self.rejected, shortened=self.shortened,
                          sessions_ended_early=self.sessions_ended_early)
        out.extend(self._made)
        return out


def stream(resolved, seed: int | None = None) -> RequestStream:
    """`requests`, as a RequestStream (what a simulation run takes)."""
    w = resolved.workload
    seed = w.seed if seed is None else seed
    if w.kind == "trace":
        return RequestStream.of(_replay(resolved))
    _not_staged(w)
    if w.kind in BENCHMARK_KINDS:
        return _benchmark(resolved, seed)
    if w.requests is None and w.duration is None:
        raise SpecError([Problem("workload", "a synthetic workload needs an end: requests or duration",
                                 fix="add workload.requests: 1000 or workload.duration: 10min")])
    return _Drawn(resolved, seed).stream()


def _not_staged(w) -> None:
    """Load stages and closed loops are kvplan.sim.stages' (which draws each open-loop stage with `_Drawn`): a caller
    that reached here with one would replay the workload without its stages."""
    if stages_of(w) is not None:
        raise ValueError("a staged or closed-loop workload's requests come from kvplan.sim.stages.requests")


class _Drawn:
    """Every record of a synthetic workload as numbers, in the order they were drawn (seq = index):
    arrival, prompt and output tokens, session and turn, the turn's new text, its shared prefix
    (rank, -1 none) and the running turn number that names its text and output segments; rejected
    records (even one new token does not fit) have turn_n -1."""

    FIELDS = ("prompt", "out", "session", "turn", "new", "rank", "turn_n", "short", "last")
    CHUNK = 4096
    """Records turned into Python numbers at a time, as the stream reaches them."""

    def __init__(self, resolved, seed: int, stage=None):
        w = resolved.workload
        rng = generator(seed)
        max_len = resolved.max_model_len
        self.prefix_lengths = prefix_lengths = _prefix_lengths(w, rng).tolist()
        sp = w.shared_prefixes
        cdf = zipf_cdf(sp.count, sp.skew) if sp is not None and sp.count > 1 else None
        turns_dist = w.sessions.turns if w.sessions is not None else None
        self.sessions = turns_dist is not None
        think_mean = w.sessions.think_time if w.sessions is not None else 0.0
        limit, duration = w.requests, w.duration

        arrivals: list[np.ndarray] = []
        columns: dict[str, list[np.ndarray]] = {f: [] for f in self.FIELDS}
        ended: list[float] = []                      # arrivals of turns that no longer fit
        n_records, t0, session, turn_n = 0, 0.0, 0, 0
        if stage is not None:      # one open-loop stage (kvplan.sim.stages.OpenStage): its draws, starts, end and names
            rng, limit, duration = stage.generator(rng), stage.requests, stage.duration
            session = turn_n = stage.first
        finished = False
        while not finished:
            starts = t0 + np.cumsum(_gaps(w.arrivals, rng, _BATCH, w.arrivals.starts_per_s)) if stage is None else stage.starts(rng, t0, _BATCH)
            t0 = float(starts[-1])
            if cdf is not None:
                ranks = np.minimum(np.searchsorted(cdf, rng.random(_BATCH), side="right"), len(cdf) - 1).tolist()
            else:
                ranks = [0] * _BATCH if sp is not None else [-1] * _BATCH
            turns = draw(turns_dist, rng, _BATCH).tolist() if turns_dist is not None else [1] * _BATCH
            total = sum(turns)
            prompts = draw(w.prompt, rng, total).tolist()
            outputs = draw(w.output, rng, total).tolist()
            thinks = rng.exponential(think_mean, total).tolist() if turns_dist is not None else [0.0] * total
            records: list[tuple[int, ...]] = []     # one per request, its FIELDS in order
            at: list[float] = []
            j = 0
            for start, rank, n_turns in zip(starts.tolist(), ranks, turns):
                if duration is not None and start > duration:
                    finished = True
                    break
                used = prefix_lengths[rank] if rank >= 0 else 0
                t = start
                for k in range(n_turns):
                    new, out = prompts[j + k], outputs[j + k]
                    if duration is not None and t > duration:
                        break
                    short = 0
                    if used + new + out > max_len:
                        if k:                        # a later turn: the conversation is over
                            ended.append(t)
                            break
                        room = max_len - out - used
                        if room < 1:                 # even 1 token of new text does not fit: rejected
                            at.append(t)
                            records.append((used + 1, out, session, k, 0, rank, -1, 0, 0))
                            break
                        new, short = room, 1
                    at.append(t)
                    records.append((used + new, out, session, k, new, rank, turn_n, short, 0))
                    turn_n += 1
                    used += new + out
                    t += thinks[j + k]
                if records and records[-1][2] == session:     # its last turn: "last" set
                    records[-1] = records[-1][:-1] + (1,)
                j += n_turns
                session += 1
            arrivals.append(np.array(at, dtype=np.float64))
            block = np.array(records, dtype=np.int64).reshape(len(records), len(self.FIELDS))
            for i, f in enumerate(self.FIELDS):
                columns[f].append(block[:, i])
            n_records += len(at)
            if limit is not None and n_records >= limit and not finished:
                # every later session starts after t0, so its turns sort after the limit-th arrival
                every = np.concatenate(arrivals)
                finished = np.partition(every, limit - 1)[limit - 1] <= t0

        arrival = np.concatenate(arrivals)
        order = np.argsort(arrival, kind="stable")   # by (arrival, seq)
        if limit is not None:
            order = order[:limit]
        cutoff = duration if duration is not None else math.inf
        if limit is not None and len(order) == limit:
            cutoff = min(cutoff, float(arrival[order[-1]]))
        self.arrival = arrival[order]               # every column in arrival order
        self.columns = {f: np.concatenate(columns[f])[order] for f in self.FIELDS}
        kept = self.columns["turn_n"] >= 0
        self.rejected = int((~kept).sum())
        self.shortened = int(self.columns["short"][kept].sum())
        self.sessions_ended_early = sum(1 for t in ended if t <= cutoff)
        self.count = int(kept.sum())
        self.decoding = int((self.columns["out"][kept] > 1).sum())
        self.last_arrival = float(self.arrival[kept][-1]) if self.count else 0.0

    def stream(self) -> RequestStream:
        return RequestStream(self.count, self.last_arrival, self.decoding, self._requests(), self.rejected,
                             self.shortened, self.sessions_ended_early)

    def _requests(self):
        """Requests in arrival order, ids 0.., each turn's content built on its session's previous turn."""
        previous: dict[int, Segments] = {}       # session -> its last turn taken, until its last turn
        names = ("prompt", "out", "session", "turn", "new", "rank", "turn_n", "last")
        next_id = 0
        for lo in range(0, len(self.arrival), self.CHUNK):
            rows = zip(self.arrival[lo:lo + self.CHUNK].tolist(),
                       *(self.columns[f][lo:lo + self.CHUNK].tolist() for f in names))
            for arrival, prompt, out, session, turn, new, rank, turn_n, last in rows:
                if turn_n < 0:
                    continue
                text = (((USER_TEXT, turn_n), new), ((OUTPUT, turn_n), out))
                parent = previous.pop(session, None) if turn else None
                heir = not last                  # its next turn may arrive after it has finished
                if parent is not None:
                    content = Segments.after(parent, text, heir)
                elif rank >= 0:
                    content = Segments((((SHARED_PREFIX, rank), self.prefix_lengths[rank]),) + text, heir=heir)
                else:
                    content = Segments(text, heir=heir)
                if heir:
                    previous[session] = content
                yield Request(next_id, arrival, prompt, out, content, session if self.sessions else -1, turn)
                next_id += 1


def _replay(resolved) -> RequestList:
    w = resolved.workload
    t = w.trace
    trace = read_trace(t.path, t.block_size, t.time_scale, t.limit)
    if w.duration is not None:
        trace = [r for r in trace if r.arrival <= w.duration]
    if w.requests is not None:
        trace = trace[: w.requests]
    result = RequestList()
    max_len = resolved.max_model_len
    for r in trace:
        if r.prompt_tokens + r.output_tokens > max_len:
            result.rejected += 1
        else:
            result.append(Request(len(result), r.arrival, r.prompt_tokens, r.output_tokens, r.content))
    return result


# --------------------------------------------------------------------------- benchmark kinds

BENCHMARK_KINDS = ("shared_prefix", "replay")
"""Kinds whose prompts a benchmark defines: inference-perf's shared_prefix (kvplan.sim.shapes), a per-request log
(kvplan.sim.replay)."""


def _benchmark(resolved, seed: int) -> RequestStream:
    """kind shared_prefix or replay as a stream: every request's numbers first, in arrival order, its content built
    when the run reaches it. A request whose prompt and output exceed max_model_len is rejected (counted, not
    returned), as vLLM refuses it; ids count the requests returned.

    shared_prefix: the prompt set's draws (kvplan.sim.shapes) then the arrivals of workload.arrivals, one load stage:
    the k-th arrival sends the k-th prompt of the set's order. replay: the log's requests (kvplan.sim.replay)."""
    w = resolved.workload
    if w.kind == "replay":
        log = replay.read_log(w.replay.path)
        plan = replay.planned(log, w.replay.time_scale, w.replay.limit, w.requests, w.duration)
        arrival, prompt, out, entry = plan.arrival, plan.prompt_tokens, plan.output_tokens, plan.entry.tolist()

        def content(j: int) -> Segments:
            return log.content(entry[j])
    else:
        rng = generator(seed)
        prompts = SharedPrefixSet(w.shared_prefix, rng)
        arrival = _open_loop_arrivals(w, rng)
        sent = prompts.sends(np.arange(len(arrival))).tolist()
        prompt, out = prompts.prompt_tokens[sent], prompts.output_tokens[sent]

        def content(j: int) -> Segments:
            return prompts.content(sent[j], j)
    fits = prompt + out <= resolved.max_model_len
    kept = np.flatnonzero(fits).tolist()
    times, prompt_list, out_list = arrival.tolist(), prompt.tolist(), out.tolist()

    def made():
        for new_id, j in enumerate(kept):
            yield Request(new_id, times[j], prompt_list[j], out_list[j], content(j))
    return RequestStream(len(kept), times[kept[-1]] if kept else 0.0, int((out[fits] > 1).sum()), made(),
                         len(times) - len(kept))


def _open_loop_arrivals(w, rng: np.random.Generator) -> np.ndarray:
    """Arrival times of workload.arrivals from time 0 (the first one gap after it), drawn in batches of _BATCH gaps,
    until workload.requests of them or the last one at or before workload.duration."""
    batches: list[np.ndarray] = []
    t0, count = 0.0, 0
    while True:
        times = t0 + np.cumsum(_gaps(w.arrivals, rng, _BATCH, w.arrivals.starts_per_s))
        batches.append(times)
        t0, count = float(times[-1]), count + len(times)
        if (w.requests is not None and count >= w.requests) or (w.duration is not None and t0 > w.duration):
            break
    every = np.concatenate(batches)
    if w.duration is not None:
        every = every[every <= w.duration]
    return every[:w.requests]
