"""The per-request table while a run writes it: one row per request, written once, when it finishes.

Requests finish in any order, so row i (request i) is written in place. Each column is an
`array` of 8-byte values (C double or long long) from the start: storing a Python number into it
costs a fraction of numpy's per-element assignment, which goes through numpy's general
conversion of a scalar, and at the end numpy reads the same memory as `RequestTable`'s columns
without copying them. The row's arithmetic (what `RequestRow`'s fields mean) is in `record`, and
only there.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from .result import FLOAT_COLUMNS, RequestRow

if TYPE_CHECKING:
    from .seq import Seq


def _column(name: str, rows: int) -> array:
    return array("d" if name in FLOAT_COLUMNS else "q", bytes(8 * rows))


class Ledger:
    """RequestRow's columns for `rows` requests; times are taken from `offset`, when traffic starts,
    and the reported latencies include `request_overhead` (HTTP and streaming)."""

    def __init__(self, rows: int, offset: float, request_overhead: float):
        self.offset = offset
        self.request_overhead = request_overhead
        self.id = _column("id", rows)
        self.instance = _column("instance", rows)
        self.arrival = _column("arrival", rows)
        self.prompt_tokens = _column("prompt_tokens", rows)
        self.output_tokens = _column("output_tokens", rows)
        self.hbm_tokens = _column("hbm_tokens", rows)
        self.ddr_tokens = _column("ddr_tokens", rows)
        self.nvme_tokens = _column("nvme_tokens", rows)
        self.ceph_tokens = _column("ceph_tokens", rows)
        self.recomputed_tokens = _column("recomputed_tokens", rows)
        self.queue = _column("queue", rows)
        self.load = _column("load", rows)
        self.ttft = _column("ttft", rows)
        self.tpot = _column("tpot", rows)
        self.e2e = _column("e2e", rows)
        self.preemptions = _column("preemptions", rows)

    def record(self, instance: int, seq: "Seq", now: float) -> None:
        """Write the row of `seq`'s request, which emitted its last token at `now`."""
        req = seq.req
        i: int = req.id
        prompt: int = req.prompt_tokens
        output: int = req.output_tokens
        tiers = seq.tiers
        ddr, nvme, ceph = tiers["ddr"], tiers["nvme"], tiers["ceph"]
        arrival = req.arrival + self.offset
        overhead = self.request_overhead
        row: Any = i                              # the index, boxed once for the 16 stores
        self.id[row] = i
        self.instance[row] = instance
        self.arrival[row] = req.arrival
        self.prompt_tokens[row] = prompt
        self.output_tokens[row] = output
        self.hbm_tokens[row] = seq.hbm_tokens
        self.ddr_tokens[row] = ddr
        self.nvme_tokens[row] = nvme
        self.ceph_tokens[row] = ceph
        self.recomputed_tokens[row] = prompt - (seq.hbm_tokens + (ddr + nvme + ceph))
        self.queue[row] = seq.admitted - arrival
        self.load[row] = seq.load_wait
        self.ttft[row] = seq.first_token - arrival + overhead
        self.tpot[row] = (now - seq.first_token) / (output - 1) if output > 1 else 0.0
        self.e2e[row] = now - arrival + overhead
        self.preemptions[row] = seq.preemptions

    def grow(self, rows: int) -> None:
        """Make room for at least `rows` rows, doubling: a staged or closed-loop run learns how many requests it has as
        it sends them (kvplan.sim.load)."""
        have = len(self.id)
        if rows <= have:
            return
        zeros = bytes(8 * (max(rows, 2 * have) - have))
        for name in RequestRow._fields:
            column: array = getattr(self, name)
            column.frombytes(zeros)

    def columns(self, rows: int = -1) -> dict[str, np.ndarray]:
        """RequestTable's columns, over the same memory (row i is request i): the first `rows` rows (-1: all)."""
        out = {}
        for name in RequestRow._fields:
            column = getattr(self, name)
            values = np.frombuffer(column, dtype=column.typecode)   # numpy reads "d" as float64, "q" as int64
            out[name] = values if rows < 0 else values[:rows]
        return out
