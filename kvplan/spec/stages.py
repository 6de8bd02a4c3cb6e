"""Load stages and closed-loop concurrency: how hard a synthetic workload pushes, and for how long.

A workload without `stages` is one load: an open loop of arrivals at `arrivals.rate`, or a closed
loop of `arrivals.concurrency` users, until `workload.requests` or `workload.duration`. With
`stages` the run is a list of such loads, one after the other on the same servers: one
simulation, so what a stage leaves in the caches (and in the queues) is there for the next.

A stage is an open loop at a `rate` (requests per second; with `sessions`, a `session_rate` of new
sessions per second) or a closed loop of `concurrency` users (one of the two). An
open loop ends at its `duration` or once it has sent `requests` requests, whichever comes first
(at least one of the two); a closed loop by one of them. The next stage starts when this one
ends, so requests still in flight finish while the next stage sends; `drain: true` makes the next
stage wait for them, and `pause` adds idle time before it.

- Open loop: session starts (plain requests without `sessions`) follow the stage's `process`,
  by default `workload.arrivals.process`; a chat session's later turns follow their think times
  from their arrival, as in a workload without stages. `rescaled_poisson` is inference-perf's
  `constant` load type (kubernetes-sigs/inference-perf, commit e8e0aa99,
  inference_perf/loadgen/load_timer.py, ConstantLoadTimer): exactly int(rate x duration) arrivals,
  whose exponential gaps are rescaled to add up to the duration, so the last one arrives as the
  stage ends; without a duration, `requests` arrivals over requests / rate.
- Closed loop (`vllm bench serve --max-concurrency`, inference-perf's `concurrent` load): a user
  sends a request, waits for its whole reply, then sends the next. With `sessions` a user is one
  person in one conversation at a time: it sends a session's turns in order, each a think time
  (`sessions.think_time`) after the reply to the one before, and starts the next session as soon
  as the last reply has come. Users take sessions in the order they are drawn.

Which of a workload's settings conflict, and why, is `problems` below; every one names the
fields and the fix. How inference-perf's and vllm bench serve's loads map onto stages is in
docs/stages.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from ..errors import Problem
from ..units import ArrivalRate, Duration, SessionArrivalRate, fmt_duration
from .base import SpecModel

if TYPE_CHECKING:
    from .topology import Topology
    from .workload import Workload

REPLAYED = {"trace": "a trace", "replay": "a per-request log"}
"""The kinds that replay their own timestamps: neither stages nor a closed loop apply to them."""

Process = Literal["poisson", "gamma", "constant", "rescaled_poisson"]
"""The open-loop arrival processes (kvplan.sim.arrivals draws them)."""

MAX_STAGES = 1000
MAX_USERS = 1_000_000
MAX_RESCALED = 10_000_000
"""The most arrivals a rescaled_poisson load may have: it draws all of its int(rate x duration) arrivals at once (to
rescale their gaps to fill the duration), 160 MB of numbers at this bound; poisson draws its arrivals as it goes."""


def without_unset(model: SpecModel, data: dict, names: tuple[str, ...]) -> dict:
    """A section's serialised `data` without the fields added with stages (workload.stages, arrivals.concurrency)
    that `model` leaves unset: every spec without them keeps the JSON, and so the hash, it had before they existed
    (its identity in run caches and rendered files)."""
    for name in names:
        if getattr(model, name) is None:
            data.pop(name, None)
    return data


class Stage(SpecModel):
    """One load stage: an open loop at `rate` or a closed loop of `concurrency` users, until its `duration` has
    passed or it has sent `requests` requests (an open loop may have both: whichever comes first)."""

    rate: ArrivalRate | None = None
    """Requests per second: an open loop (a workload without sessions), at most 1e6/s. Exclusive with concurrency."""

    session_rate: SessionArrivalRate | None = None
    """New sessions per second: an open loop of a workload with sessions, each session bringing several requests
    (at most 1e6/s). Exclusive with concurrency."""

    concurrency: int | None = Field(None, ge=1, le=MAX_USERS)
    """Users in a closed loop, each sending its next request once the reply to its last one has come. Exclusive with
    rate."""

    process: Process | None = None
    """Inter-arrival process of a rate stage; default: workload.arrivals.process."""

    cv: float | None = Field(None, ge=0.001, le=100)
    """Coefficient of variation of the gaps with process gamma; default: workload.arrivals.cv."""

    duration: Duration | None = None
    """The stage ends this long after it starts: no request of it is sent later."""

    requests: int | None = Field(None, ge=1)
    """The stage ends once it has sent this many requests (every turn, and requests rejected as too long, counted)."""

    drain: bool = False
    """Start the next stage only once every request of this one has finished (inference-perf waits so)."""

    pause: Duration = "0s"
    """Idle time between this stage's end (after its drain) and the next stage's start (inference-perf's
    load.interval)."""

    @model_serializer(mode="wrap")
    def _unset_left_out(self, handler: SerializerFunctionWrapHandler) -> dict:
        return without_unset(self, handler(self), ("session_rate",))

    def describe(self) -> str:
        """The stage's load and end in a few words: 'rate 8/s poisson, 10.0 min', 'concurrency 4, 100 requests'."""
        load = f"concurrency {self.concurrency}" if self.concurrency is not None else \
            (f"session_rate {self.session_rate:g}/s {self.process or ''}" if self.session_rate is not None
             else f"rate {self.rate:g}/s {self.process or ''}").rstrip()
        ends = [fmt_duration(self.duration) if self.duration is not None else "",
                f"{self.requests:,} requests" if self.requests is not None else ""]
        return f"{load}, {' or '.join(e for e in ends if e)}"


def stages_of(w: "Workload") -> list[Stage] | None:
    """The loads a workload runs, each with its process and cv filled in: its `stages`, or the one stage its `arrivals`
    and end make when they need the staged generator (a closed loop, or rescaled_poisson arrivals). None for a
    workload that is one open loop of poisson, gamma or constant arrivals, or that replays its own timestamps (trace,
    replay): kvplan.sim.workload draws it as it always has."""
    a = w.arrivals
    if w.kind in REPLAYED:
        return None
    if w.stages is None:
        if a.concurrency is None and a.process != "rescaled_poisson":
            return None
        rate = None if a.concurrency is not None else a.starts_per_s
        listed = [Stage(rate=rate, concurrency=a.concurrency, duration=w.duration, requests=w.requests)]
    else:
        listed = [_as_started(s) for s in w.stages]
    return [s if s.concurrency is not None else
            s.model_copy(update={"process": s.process or a.process, "cv": s.cv if s.cv is not None else a.cv})
            for s in listed]


def listable(loads: list[Stage]) -> bool:
    """Whether the requests of these stages, and when each is sent, follow from the spec alone: open loops only, none
    of them draining (a closed loop sends when replies come, and a drain waits for them, which only a run knows)."""
    return not any(s.concurrency is not None or s.drain for s in loads)


def window(stage: Stage) -> float:
    """The span a rescaled_poisson stage's arrivals fill: its duration, or requests / rate without one."""
    if stage.duration is not None:
        return stage.duration
    assert stage.requests is not None and stage.rate
    return stage.requests / stage.rate


def rescaled_count(stage: Stage) -> int:
    """How many arrivals a rescaled_poisson stage has: int(rate x duration), as inference-perf counts them (its
    ConstantLoadTimer and run_stage), or `requests` without a duration."""
    if stage.duration is not None:
        assert stage.rate is not None
        return int(stage.rate * stage.duration)
    assert stage.requests is not None
    return stage.requests


def unrated(w: "Workload", what: str, fix: str) -> Problem | None:
    """Why `what`, which sets workload.arrivals.rate (or session_rate), cannot vary this workload's load (its stages set their own rates,
    a closed loop has none); None when it can. With sessions it sets workload.arrivals.session_rate."""
    knob = "workload.arrivals." + ("session_rate" if w.sessions is not None else "rate")
    if w.stages is not None:
        return Problem("workload.stages", f"{what} sets {knob}, and a staged workload's rates are its stages'", None,
                       fix=fix)
    if w.arrivals.concurrency is not None:
        return Problem("workload.arrivals.concurrency", f"{what} sets {knob}, and a closed loop has no rate: its users "
                       "send as their replies come", w.arrivals.concurrency, fix=fix)
    return None


# --------------------------------------------------------------------------- rules

def problems(topo: "Topology") -> Iterator[Problem]:
    """What is wrong with the workload's load: stages and concurrency beside the fields they replace, each stage."""
    w = topo.workload
    a = w.arrivals
    given = a.model_fields_set
    yield from _one_rate(w)
    if w.stages is None:
        if a.concurrency is None:
            if a.process == "rescaled_poisson" and w.kind not in REPLAYED:
                one = Stage(rate=a.starts_per_s, duration=w.duration, requests=w.requests)
                yield from _rescaled_fits(one, "workload", "workload.duration", "workload.requests")
            return
        if w.kind in REPLAYED:
            yield Problem("workload.arrivals.concurrency", f"{REPLAYED[w.kind]} is replayed at its own timestamps, not "
                          "by users waiting for replies", a.concurrency, fix="remove arrivals.concurrency, or use a "
                          "kind that draws its requests (chat, codegen, rag, shared_prefix)")
        for name in ("rate", "session_rate"):
            if name in given:
                yield Problem(f"workload.arrivals.{name}", f"conflicts with arrivals.concurrency: {name} makes an open "
                              "loop (arrivals whatever the replies), concurrency a closed one (each user waits for its "
                              "reply)",
                              getattr(a, name), fix=f"keep one of the two: remove arrivals.{name} for a closed loop of "
                              f"{a.concurrency} users, or arrivals.concurrency for arrivals at the rate")
        yield from _no_process(given, "workload.arrivals", "arrivals.concurrency")
        if w.duration is not None and w.requests is not None:
            yield from _one_end("workload", "workload.duration", "workload.requests")
        return
    if w.kind in REPLAYED:
        yield Problem("workload.stages", f"{REPLAYED[w.kind]} is replayed at its own timestamps, so it has no load "
                      "stages", None, fix=f"remove workload.stages ({w.kind}.time_scale replays it faster or "
                      "slower), or use a kind that draws its requests (chat, codegen, rag, shared_prefix)")
    for name, value in (("requests", w.requests), ("duration", w.duration)):
        if value is not None:
            yield Problem(f"workload.{name}", f"conflicts with workload.stages: each stage ends by its own duration or "
                          "requests", value, fix=f"move it into the stages (e.g. {name}: {value:g} on the last one), "
                          "or remove workload.stages")
    for name in ("rate", "session_rate", "concurrency"):
        if name in given:
            yield Problem(f"workload.arrivals.{name}", "conflicts with workload.stages: each stage sets its own rate "
                          "or concurrency", getattr(a, name), fix=f"give each stage its {name} (stages: [{{{name}: "
                          f"{'8/s' if name != 'concurrency' else 16}, duration: 10min}}]) and remove arrivals.{name}")
    if len(w.stages) > MAX_STAGES:
        yield Problem("workload.stages", f"more than {MAX_STAGES} stages", len(w.stages), f"1..{MAX_STAGES} stages",
                      "merge stages that have the same load")
    elif not w.stages:
        yield Problem("workload.stages", "an empty list of stages sends nothing", None,
                      fix="give at least one stage, e.g. stages: [{rate: 8/s, duration: 10min}], or remove it")
    for i, stage in enumerate(w.stages):
        yield from _stage_rate(w, stage, f"workload.stages[{i}]")
        yield from _stage(_as_started(stage), f"workload.stages[{i}]", a.process)


def _as_started(s: Stage) -> Stage:
    """The stage with the rate its generator draws starts at: its session_rate (new sessions/s) as `rate`."""
    return s if s.session_rate is None else s.model_copy(update={"rate": s.session_rate})


def _stage_rate(w: "Workload", s: Stage, path: str) -> Iterator[Problem]:
    """A stage's rate counts requests; with sessions its new sessions are its session_rate, as in arrivals."""
    if w.sessions is not None and "rate" in s.model_fields_set:
        yield Problem(f"{path}.rate", "counts requests, but this workload has sessions: a stage's arrivals are new "
                      "sessions", s.rate, "session_rate (new sessions per second) with sessions",
                      f"write session_rate: {s.rate:g}sessions/s if that many sessions start per second")
    if w.sessions is None and s.session_rate is not None:
        yield Problem(f"{path}.session_rate", "counts new sessions, but this workload has no sessions", s.session_rate,
                      "rate (requests per second) without sessions", f"write rate: {s.session_rate:g}/s, or add sessions")


def _stage(s: Stage, path: str, default_process: str) -> Iterator[Problem]:
    if s.rate is None and s.concurrency is None:
        yield Problem(path, "a stage needs a rate (an open loop) or a concurrency (a closed loop of users)", None,
                      fix=f"add rate: 8/s or concurrency: 16 to {path}")
    if s.rate is not None and s.concurrency is not None:
        yield Problem(path, "rate and concurrency are exclusive: a stage is an open loop at a rate or a closed loop of "
                      "users", {"rate": s.rate, "concurrency": s.concurrency},
                      fix="keep one of the two, or make them two stages one after the other")
    if s.rate is not None and s.rate <= 0:
        yield Problem(f"{path}.rate", "must be above 0 arrivals per second", s.rate, "> 0, like 8/s",
                      fix="give a positive rate, or remove the stage")
    if s.duration is None and s.requests is None:
        yield Problem(path, "a stage needs an end: a duration or requests (an open loop may have both: whichever "
                      "comes first)", None,
                      fix=f"add duration: 10min or requests: 1000 to {path}")
    if s.duration is not None and s.duration <= 0:
        yield Problem(f"{path}.duration", "must be above 0 s", s.duration, "> 0, like 10min",
                      fix="give a positive duration, or remove it and end the stage by requests")
    if s.concurrency is not None and s.rate is None:
        yield from _no_process(s.model_fields_set, path, "its concurrency")
        if s.duration is not None and s.requests is not None:
            yield from _one_end(path, f"{path}.duration", f"{path}.requests")
    elif s.rate is not None and s.rate > 0 and s.duration is not None and s.duration > 0 \
            and (s.process or default_process) == "rescaled_poisson" and int(s.rate * s.duration) < 1:
        yield Problem(path, f"rescaled_poisson sends int(rate x duration) = int({s.rate:g} x {s.duration:g}) = 0 "
                      "requests", None, fix="raise the rate or the duration, or use process: poisson")
    elif s.rate is not None and s.rate > 0 and (s.process or default_process) == "rescaled_poisson":
        yield from _rescaled_fits(s, path, f"{path}.duration", f"{path}.requests")


def _rescaled_fits(s: Stage, path: str, duration: str, requests: str) -> Iterator[Problem]:
    """A rescaled_poisson load draws all its arrivals at once: at most MAX_RESCALED of them."""
    if s.duration is None and s.requests is None:
        return                                   # no end: reported as such
    n = s.rate * s.duration if s.duration is not None else s.requests
    if n > MAX_RESCALED:
        how = f"int(rate x duration) = int({s.rate:g} x {s.duration:g})" if s.duration is not None else \
            f"its requests, {s.requests}"
        yield Problem(path, f"rescaled_poisson draws all its arrivals at once, and {how} is more than the "
                      f"{MAX_RESCALED:,} it draws", None, f"rate x duration (or requests) from 1 to {MAX_RESCALED:,}",
                      f"shorten {duration} or lower {requests}, lower the rate, or use process: poisson (drawn as it "
                      "goes)")


def _one_rate(w: "Workload") -> Iterator[Problem]:
    """A rate counts requests; with sessions the rate of new sessions is arrivals.session_rate, named so."""
    a = w.arrivals
    if w.sessions is not None and "rate" in a.model_fields_set:
        yield Problem("workload.arrivals.rate", "counts requests, but this workload has sessions: its arrivals are new "
                      f"sessions, each bringing {requests_per_session(w.sessions)} requests", a.rate,
                      "arrivals.session_rate (new sessions per second) with sessions",
                      f"write arrivals.session_rate: {a.rate:g}sessions/s if that many sessions start per second, or "
                      "give requests per second to kvplan plan --rate, which finds the session rate that offers them")
    if w.sessions is None and a.session_rate is not None:
        yield Problem("workload.arrivals.session_rate", "counts new sessions, but this workload has no sessions",
                      a.session_rate, "arrivals.rate (requests per second) without sessions",
                      f"write arrivals.rate: {a.session_rate:g}/s, or add sessions")


def requests_per_session(s) -> str:
    """'4' or 'a mean of about 4.5' or 'several': a session's requests (its turns, a workload's `Sessions`), in words."""
    t = s.turns
    if t.dist == "fixed" and t.mean is not None:
        return f"{int(t.mean)}"
    return f"a mean of about {t.mean:g}" if t.mean is not None else "several"


def _no_process(given: set[str], path: str, what: str) -> Iterator[Problem]:
    """process and cv make no sense for a closed loop: its requests leave when replies come, not on a schedule."""
    for name in ("process", "cv"):
        if name in given:
            yield Problem(f"{path}.{name}", f"a closed loop has no arrival process: with {what} each user sends its "
                          "next request when the reply to its last one has come", None,
                          fix=f"remove {path}.{name}, or use a rate for arrivals on a schedule")


def _one_end(path: str, duration: str, requests: str) -> Iterator[Problem]:
    """A closed loop ends by its duration or by its requests: its users' pace decides which would come first."""
    yield Problem(path, "a closed loop ends by its duration or by its requests, not both (how fast its users send "
                  "depends on the replies, so neither can stand in for the other)", None,
                  fix=f"keep {duration} or {requests}")
