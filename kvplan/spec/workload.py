"""The traffic to simulate (and later replay against a live stack).

Synthetic kinds build prompts from shared prefixes plus new text, so cache reuse is exact:
`chat` (sessions whose history grows turn by turn, over popular system prompts), `codegen`
(shared repository context), `rag` (long, mostly unique documents). `trace` replays a Mooncake
JSONL trace. Benchmarks' workloads as the benchmarks run them: `shared_prefix` is inference-perf's
data shape of that name, `replay` a benchmark's per-request log. Every random choice is drawn from
`seed`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (Field, SerializerFunctionWrapHandler, ValidationInfo, field_validator, model_serializer,
                      model_validator)

from ..units import ArrivalRate, Duration, SessionArrivalRate
from .base import MAX_INT32, SpecModel, spec_file
from .stages import MAX_USERS, Process, Stage, without_unset

if TYPE_CHECKING:
    import numpy as np


class Dist(SpecModel):
    """A distribution of a whole number (tokens, turns). Write a bare integer for a fixed value."""

    dist: Literal["fixed", "uniform", "lognormal", "normal"] = "fixed"
    """Shape. fixed: always `mean`; uniform: between min and max; lognormal/normal: `mean` with spread `cv`."""

    mean: float | None = Field(None, gt=0, le=MAX_INT32)
    """Mean (fixed, lognormal, normal)."""

    cv: float = Field(0.0, ge=0, le=10)
    """Coefficient of variation, std/mean (lognormal, normal)."""

    min: int = Field(1, ge=0, le=MAX_INT32)
    """Smallest value drawn (draws are clipped)."""

    max: int | None = Field(None, ge=1, le=MAX_INT32)
    """Largest value drawn (draws are clipped to it, and to 2147483647 without it); required for uniform."""

    @model_validator(mode="before")
    @classmethod
    def _bare_number(cls, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return {"dist": "fixed", "mean": value}
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "Dist":
        if self.dist == "uniform":
            if self.max is None:
                raise ValueError("a uniform distribution needs max (and min); fix: add max: <tokens>")
        elif self.mean is None:
            raise ValueError(f"a {self.dist} distribution needs mean; fix: add mean: <value>")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min}); fix: make max >= min")
        return self


class Arrivals(SpecModel):
    process: Process = "poisson"
    """Inter-arrival process: poisson (exponential gaps), gamma (bursty when cv > 1), constant (equal gaps),
    rescaled_poisson (inference-perf's constant: int(rate x duration) arrivals, exponential gaps rescaled to fill
    the duration)."""

    rate: ArrivalRate = "1/s"
    """Mean arrival rate of requests, in requests per second (a workload without sessions): more than 0, at most
    1e6/s."""

    session_rate: SessionArrivalRate | None = None
    """Mean rate of new sessions, in sessions per second (a workload with sessions, whose every session brings
    several requests; 1 session/s unless given; at most 1e6/s). `kvplan plan --rate` takes requests per second and
    finds it."""

    cv: float = Field(1.0, ge=0.001, le=100)
    """Coefficient of variation of the gaps for gamma (1 = Poisson; > 1 bursty; below 0.001 use constant)."""

    concurrency: int | None = Field(None, ge=1, le=MAX_USERS)
    """A closed loop instead of arrivals: this many users, each sending its next request once the reply to its last
    one has come (vllm bench serve --max-concurrency). Exclusive with rate."""

    @model_serializer(mode="wrap")
    def _unset_left_out(self, handler: SerializerFunctionWrapHandler) -> dict:
        return without_unset(self, handler(self), ("concurrency", "session_rate"))

    @property
    def starts_per_s(self) -> float:
        """The open loop's rate of starts: new sessions per second (session_rate) or requests per second (rate)."""
        return self.session_rate if self.session_rate is not None else self.rate


MAX_TURNS = 1000
"""The most turns one session may have. The longest conversations in chat logs (LMSYS-Chat-1M, ShareGPT) run to a
few hundred turns, and each turn's prompt carries the whole history, so a thousand turns is past any model's context;
the simulator draws the prompts, outputs and think times of 1024 sessions at a time, a million draws at most with this
bound (2147483648 turns asked numpy for 7.9 TiB)."""


class Sessions(SpecModel):
    """Multi-turn conversations: each turn's prompt carries the whole history before it."""

    turns: Dist = Dist(dist="fixed", mean=1)
    """Turns per session: from 1 to 1000 (a lognormal or normal number of turns needs a max of 1000 or less)."""

    @field_validator("turns", mode="before")
    @classmethod
    def _at_most_max_turns(cls, value: Any) -> Any:
        """Turns past MAX_TURNS, as written (before Dist's own bound on any whole number, 2147483647)."""
        given = value if isinstance(value, dict) else {"mean": value}
        for name in ("mean", "max"):
            most = given.get(name)
            if isinstance(most, (int, float)) and not isinstance(most, bool) and most > MAX_TURNS:
                raise ValueError(f"a session of up to {most:,} turns is more than the {MAX_TURNS} kvplan simulates "
                                 f"(chat logs' longest conversations are a few hundred turns): turns must be from 1 "
                                 f"to {MAX_TURNS}; fix: give {MAX_TURNS} turns or fewer")
        return value

    @field_validator("turns")
    @classmethod
    def _bounded_turns(cls, turns: Dist) -> Dist:
        if turns.max is None and turns.dist != "fixed":
            raise ValueError(f"a {turns.dist} number of turns needs max (from 1 to {MAX_TURNS}); fix: add max: "
                             f"{min(MAX_TURNS, max(1, math.ceil((turns.mean or 1) * 4)))}")
        return turns

    think_time: Duration = "30s"
    """Mean pause between a reply and the user's next turn (exponential)."""


class SharedPrefixes(SpecModel):
    """A set of prefixes many requests start with: system prompts in chat, repository context in
    codegen, popular documents in rag. Popularity follows a Zipf law with exponent `skew`."""

    count: int = Field(1, ge=1, le=10_000_000)
    """How many distinct prefixes exist."""

    skew: float = Field(1.0, ge=0, le=10)
    """Zipf exponent of their popularity (0 = all equally likely)."""

    tokens: Dist = Dist(dist="fixed", mean=1024)
    """Length of a prefix."""


class Trace(SpecModel):
    """A Mooncake-format JSONL trace: timestamp (ms), input_length, output_length, hash_ids."""

    path: str
    """Trace file; a relative path is read from the spec file's folder."""

    block_size: int = Field(512, ge=1)
    """Tokens per hash_id block in the trace (512 in the Mooncake traces)."""

    time_scale: float = Field(1.0, gt=0)
    """Multiply trace timestamps by this (0.5 replays twice as fast)."""

    limit: int | None = Field(None, ge=1)
    """Replay only the first N requests."""

    @field_validator("path")
    @classmethod
    def _exists(cls, value: str, info: ValidationInfo) -> str:
        return spec_file(value, info, "trace file", "point path at a Mooncake JSONL file")

    @model_validator(mode="after")
    def _blocks_fit_the_trace(self) -> "Trace":
        """The trace's first request must have ceil(input_length / block_size) hash_ids: a wrong block_size
        is caught here, not after a run has started (every line is checked when the trace is read)."""
        first = _first_request(Path(self.path))
        if first is not None:
            length, ids = first
            if hash_ids_needed(length, self.block_size) != ids:
                fits = f"from {-(-length // ids)} to {(length - 1) // (ids - 1)}" if ids > 1 else f"{length} or more"
                raise ValueError(f"block_size {self.block_size} does not fit the trace: its first request has {ids} "
                                 f"hash_ids for input_length {length}, which needs a block size {fits}; fix: set "
                                 "block_size to the trace's block size (512 for the Mooncake traces)")
        return self


MAX_SHARED_PREFIX_PROMPTS = 10_000_000
"""The most prompts a shared_prefix set may have (kvplan keeps a few numbers per prompt)."""


class SharedPrefixShape(SpecModel):
    """inference-perf's `shared_prefix` data (kind: shared_prefix): `num_groups` system prompts, each followed by
    `num_prompts_per_group` questions of its own. The groups x prompts prompts are made once and sent over and over in
    one shuffled order: request k of a load stage sends prompt k mod (groups x prompts) of that order
    (kvplan.sim.shapes; docs/benchmarks.md)."""

    num_groups: int = Field(10, ge=1, le=1_000_000)
    """How many system prompts (groups) there are."""

    num_prompts_per_group: int = Field(10, ge=1, le=1_000_000)
    """How many prompts (questions) each system prompt is followed by."""

    system_prompt_len: Dist = Dist(dist="fixed", mean=100)
    """Tokens of a group's system prompt, drawn once per group (a bare integer: every group's; 100 unless given)."""

    question_len: Dist = Dist(dist="fixed", mean=50)
    """Tokens of a prompt's own question after its system prompt, drawn once per prompt (50 unless given)."""

    output_len: Dist = Dist(dist="fixed", mean=50)
    """Tokens generated for a prompt, drawn once per prompt, the same every time it is sent (50 unless given)."""

    @model_validator(mode="after")
    def _a_set_kvplan_can_hold(self) -> "SharedPrefixShape":
        if self.num_groups * self.num_prompts_per_group > MAX_SHARED_PREFIX_PROMPTS:
            raise ValueError(f"{self.num_groups} groups x {self.num_prompts_per_group} prompts is "
                             f"{self.num_groups * self.num_prompts_per_group:,} prompts, more than the "
                             f"{MAX_SHARED_PREFIX_PROMPTS:,} kvplan holds; fix: use fewer groups or prompts per group")
        return self


class Replay(SpecModel):
    """A benchmark's per-request log (kind: replay): one JSON object per line with the request's arrival, prompt and
    output tokens, and which prompt and shared prefix it used, so that reuse is exact (docs/benchmarks.md, the
    format; kvplan.sim.replay, the reader). A file ending in .gz is read as gzip."""

    path: str
    """The log; a relative path is read from the spec file's folder."""

    time_scale: float = Field(1.0, gt=0)
    """Multiply arrival times by this (0.5 replays twice as fast)."""

    limit: int | None = Field(None, ge=1)
    """Replay only the first N requests of the file."""

    @field_validator("path")
    @classmethod
    def _exists(cls, value: str, info: ValidationInfo) -> str:
        return spec_file(value, info, "replay log", "point path at a per-request log (JSON lines, .jsonl or .jsonl.gz)")


def hash_ids_needed(input_length: int, block_size: int) -> int:
    """How many hash_ids a trace request of `input_length` tokens has: one per block, the last one partial."""
    return -(-input_length // block_size)


def _first_request(path: Path) -> tuple[int, int] | None:
    """(input_length, number of hash_ids) of the trace's first line, or None where that line is not a
    well-formed request (the trace reader then says what is wrong, line by line)."""
    try:
        with path.open(encoding="utf-8") as lines:
            line = next((line for line in lines if line.strip()), "")
        row = json.loads(line)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(row, dict):
        return None
    length, ids = row.get("input_length"), row.get("hash_ids")
    if type(length) is not int or length < 1 or not isinstance(ids, list) or not ids:
        return None
    return length, len(ids)


class Workload(SpecModel):
    kind: Literal["chat", "codegen", "rag", "trace", "shared_prefix", "replay"]
    """chat, codegen, rag (synthetic), trace (replay a trace file), shared_prefix (inference-perf's data shape) or
    replay (a benchmark's per-request log)."""

    seed: int = Field(0, ge=0)
    """Seed for every random choice; the same spec and seed give the same result."""

    requests: int | None = Field(None, ge=1)
    """Stop after this many requests."""

    duration: Duration | None = None
    """Stop generating arrivals after this much simulated time."""

    arrivals: Arrivals = Arrivals()
    """Arrival process (synthetic kinds)."""

    sessions: Sessions | None = None
    """Multi-turn sessions (chat)."""

    shared_prefixes: SharedPrefixes | None = None
    """Shared prefixes: system prompts, repository context or popular documents."""

    prompt: Dist = Dist(dist="lognormal", mean=512, cv=0.5, max=32768)
    """New prompt text per request or turn, in tokens (after any shared prefix and history)."""

    output: Dist = Dist(dist="lognormal", mean=256, cv=0.5, max=4096)
    """Generated tokens per request."""

    trace: Trace | None = None
    """The trace to replay (kind: trace)."""

    shared_prefix: SharedPrefixShape | None = None
    """The groups of prompts to send (kind: shared_prefix)."""

    replay: Replay | None = None
    """The per-request log to replay (kind: replay)."""

    stages: list[Stage] | None = None
    """Loads run one after the other on the same servers, each a rate or a concurrency until a duration or a number
    of requests (docs/stages.md). Replaces arrivals.rate, arrivals.concurrency, requests and duration."""

    warm_start: bool = False
    """Start the simulation with the offload tiers in steady state: filled by a warm-up of this workload (its own
    draws), left out of every figure (docs/simulator.md, "Warm start"). A simulation choice: the deployed stack warms
    with its own traffic. chat, codegen and rag without load stages."""

    @model_serializer(mode="wrap")
    def _unset_left_out(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = without_unset(self, handler(self), ("stages",))
        if self.sessions is not None and isinstance(data.get("arrivals"), dict):
            data["arrivals"].pop("rate", None)    # never given with sessions (see _one_rate): read back, it is refused
        if not self.warm_start:          # a cold spec keeps the JSON, and so the hash, it had before warm starts
            data.pop("warm_start", None)
        return data


# --------------------------------------------------------------------------- draws
# How a synthetic workload's random numbers are drawn. The simulator's request stream
# (kvplan.sim.workload) draws everything with them; the warm-up (kvplan.warmup) redraws the shared
# prefixes' lengths, the stream's first draws, for the simulator, kvplan bench and the deployment
# alike, so they live here, below all three. numpy is imported when a draw is made, not with the spec.

def generator(seed: int) -> np.random.Generator:
    """The random generator a synthetic workload's stream draws from: PCG64 seeded with `seed`."""
    import numpy as np

    return np.random.Generator(np.random.PCG64(seed))


def draw(dist: Dist, rng: np.random.Generator, size: int) -> np.ndarray:
    """`size` whole numbers from a spec Dist, as int64: fixed -> int(mean) (no draw); uniform ->
    integers in [min, max]; lognormal with mean m and cv -> sigma^2 = ln(1 + cv^2),
    mu = ln(m) - sigma^2/2; normal -> std cv x mean. Rounded, then clipped to [min, max] (max 2147483647 when not
    given, the most a Dist allows) and to >= 1."""
    import numpy as np

    lo = max(dist.min, 1)
    hi = dist.max if dist.max is not None else MAX_INT32
    if dist.dist == "fixed":
        return np.full(size, min(max(int(dist.mean), lo), hi), dtype=np.int64)
    if dist.dist == "uniform":
        values = rng.integers(dist.min, dist.max, size=size, endpoint=True).astype(np.float64)
    elif dist.dist == "lognormal":
        sigma2 = math.log1p(dist.cv ** 2)
        values = rng.lognormal(math.log(dist.mean) - sigma2 / 2, math.sqrt(sigma2), size)
    else:
        values = rng.normal(dist.mean, dist.cv * dist.mean, size)
    return np.clip(np.rint(values), lo, hi).astype(np.int64)


def prefix_lengths(w: Workload, rng: np.random.Generator) -> np.ndarray:
    """The first draws of every synthetic stream: one length per shared prefix."""
    import numpy as np

    sp = w.shared_prefixes
    return draw(sp.tokens, rng, sp.count) if sp is not None else np.zeros(0, dtype=np.int64)
