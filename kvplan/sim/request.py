"""One request as a workload makes it (its arrival, its lengths, its content, its session and turn), and a list of
them with what was left out. The workload generators (workload.py, stages.py), the trace reader (trace.py) and
the per-request log replay (replay.py) all make these; the engine consumes them."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import NamedTuple, Protocol, runtime_checkable


@runtime_checkable
class Content(Protocol):
    """What a request's tokens are (content.py: Segments, TraceBlocks)."""

    def keys(self, unit: int, length: int) -> list[int]:
        """Prefix-chained integer keys of the full `unit`-token pieces among the first `length` tokens
        (exactly length // unit keys; a trailing partial piece gets no key). Two contents share key i
        iff their first (i+1)*unit tokens are identical."""
        ...

    def forget(self) -> None:
        """Drop cached keys; later keys() calls recompute them."""
        ...


class Request(NamedTuple):
    """One request as the workload makes it (immutable; a NamedTuple, which a stream of a million
    builds in a third of a frozen dataclass's time)."""

    id: int
    """0.. in arrival order: requests()[i].id == i. Warm-up requests have ids -1, -2, ..."""
    arrival: float
    """Seconds from the start."""
    prompt_tokens: int
    output_tokens: int
    content: Content
    """Tokens of prompt + output in order: keys(unit, prompt_tokens) are the prompt's."""
    session: int = -1
    """Session id 0.. (synthetic workloads with `sessions`), -1 when none (no sessions, traces, warm-up)."""
    turn: int = 0
    """Turn within the session, from 0."""
    warmup: bool = False


class RequestList(list):
    """A list of Requests plus what was left out of it.

    rejected             -- requests that arrived but were dropped because input + output exceeds
                            max_model_len even with their new text shortened (vLLM refuses them).
    shortened            -- returned requests whose new text was shortened to fit max_model_len.
    sessions_ended_early -- sessions cut because their next turn no longer fit (not requests).
    """

    def __init__(self, items=(), rejected: int = 0, shortened: int = 0, sessions_ended_early: int = 0):
        super().__init__(items)
        self.rejected = rejected
        self.shortened = shortened
        self.sessions_ended_early = sessions_ended_early


@contextmanager
def _gc_paused():
    """Building 100k requests allocates millions of acyclic objects; Python's cyclic collector would
    rescan them over and over (5-10x the build time). Nothing built here forms a cycle."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
