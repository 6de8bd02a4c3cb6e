"""A sequence: one request as a vLLM engine holds it, from its admission to its last token.

vLLM calls it a request inside the scheduler; here a `Seq` is what the simulator keeps of it
while an engine (engine.py) serves it: how far its prefill has come and how many tokens it has
emitted, the HBM blocks it holds (a `Holding` of the prefix cache) and their keys, what LMCache
holds of its prompt, where its prompt's KV came from (HBM, each LMCache tier or vLLM's native CPU tier, or
recomputation),
and the times its row of the per-request table is made of (ledger.py). While it decodes, the
engine's `DecodeSet` (decoding.py) keeps its counters for it: `since` and `ticket` are that set's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .clock import Process
from .prefix_cache import Holding

if TYPE_CHECKING:
    from .workload import Request


class Seq:
    """One request inside an engine."""

    __slots__ = ("req", "target", "computed", "generated", "holding", "blocks", "chunks", "saved",
                 "tiers", "hbm_tokens", "admitted", "first_token", "preemptions", "pending_load", "load_wait", "record",
                 "prompt", "output", "since", "ticket", "ready", "loaded")

    def __init__(self, req: "Request", record: bool):
        self.req = req
        self.target = req.prompt_tokens          # tokens to prefill (prompt, plus regenerated output after preemption)
        self.computed = 0                        # tokens whose KV is in HBM
        self.generated = 0                       # output tokens emitted
        self.holding = Holding([], 0, 0)         # nothing held (not admitted, preempted or finished)
        self.blocks: list[int] = []              # block keys of prompt + output
        self.chunks: list[int] = []              # LMCache chunk keys of the prompt
        self.saved = 0                           # chunks LMCache holds or was given
        self.tiers = {"ddr": 0, "nvme": 0, "ceph": 0}
        self.hbm_tokens = 0
        self.admitted = -1.0
        self.first_token = -1.0
        self.preemptions = 0
        self.pending_load: Process | None = None  # a retrieve process to wait for before the forward pass
        self.load_wait = 0.0                     # seconds its prefill steps waited for retrieves
        self.record = record
        self.prompt = req.prompt_tokens          # copies of the request's lengths, read every step
        self.output = req.output_tokens
        self.since = -1                          # DecodeSet clock its counters were written at; -1: not decoding there
        self.ticket = 0                          # its DecodeSet membership (heap entries of older ones are stale)
        self.ready = 0                           # the engine's step count from which it can be scheduled
        self.loaded = False                      # native offloading: its blocks came in while it waited; it is
                                                 # scheduled as a request with those tokens computed (engine._admit)

    @property
    def prefilling(self) -> bool:
        return self.computed < self.target

    @property
    def length(self) -> int:
        """Tokens in the sequence so far (prompt and emitted output)."""
        return self.prompt + self.generated
