"""The decoding requests of one engine, advanced together without visiting each of them.

In every step of vLLM's batch each decoding request gets one token: its output and its KV grow
by one. Rather than add one to a hundred counters a step, a `DecodeSet` keeps one `clock` (the
decode steps its members have taken together) and each member remembers the clock at which its
own counters (`Seq.computed`, `Seq.generated`) were last written, `Seq.since`; its true counts
are the stored ones plus `clock - since` (`sync` writes them). What does need a member's
attention is kept in two heaps keyed by clock:

- growth: the clock at which the member's next token no longer fits its KV blocks (its
  computed tokens fill them), so the scheduler must give it a block (or preempt) first. An
  entry may be early: a run of many steps at once gives each member the blocks its steps need
  without telling the set, and `due` puts such a member back at the clock it now needs one.
  The heap is touched when a member is due, not at every block of every run;
- ends: the clock after whose step the member has emitted its last token.

The sum of the members' lengths (prompt + output so far), which the step-time model needs, is
kept incrementally: while a request decodes, its length minus the clock does not change.

A member leaves when it finishes or is preempted; heap entries carry the `Seq.ticket` of the
membership that pushed them, so entries of a former membership are recognised and dropped.
A step thus costs O(members that change) instead of O(members).

A heap entry is one int, clock << 32 | ticket: it sorts as the pair (clock, ticket) does, and
heapq compares two ints in one call where two tuples took three (the heaps are touched every
16 tokens of every request). Tickets are counted per set and stay below 2**32.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .seq import Seq

_SHIFT: Final = 32
_TICKET: Final = (1 << _SHIFT) - 1


class DecodeSet:
    """The decoding `Seq`s of one engine (see the module docstring). `members` counts them."""

    __slots__ = ("block_size", "clock", "members", "_offsets", "_growth", "_ends", "_tickets", "_seqs")

    def __init__(self, block_size: int):
        self.block_size = block_size
        self.clock = 0                      # decode steps taken by the members together
        self.members = 0
        self._offsets = 0                   # sum over members of (length - clock): constant while they decode
        self._growth: list[int] = []        # clock at which it needs a new block << _SHIFT | ticket
        self._ends: list[int] = []          # clock at which it has emitted its last token << _SHIFT | ticket
        self._tickets = 0                   # memberships so far
        self._seqs: dict[int, Seq] = {}     # ticket -> member, for its current membership only

    @property
    def context(self) -> int:
        """Tokens in all members' sequences (prompt and output so far), as of now."""
        return self._offsets + self.members * self.clock

    def join(self, seq: "Seq") -> None:
        """`seq` (explicit counters up to date, holding its blocks, not finished) starts decoding."""
        clock = self.clock
        seq.since = clock
        self._tickets = ticket = self._tickets + 1
        if ticket > _TICKET:
            raise OverflowError(f"more than {_TICKET} decode memberships in one engine")
        seq.ticket = ticket
        self._seqs[ticket] = seq
        self.members += 1
        self._offsets += seq.prompt + seq.generated - clock
        heappush(self._growth, (clock + seq.holding.blocks * self.block_size - seq.computed) << _SHIFT | ticket)
        heappush(self._ends, (clock + seq.output - seq.generated) << _SHIFT | ticket)

    def sync(self, seq: "Seq") -> None:
        """Write a member's true counters into it (it stays a member)."""
        steps = self.clock - seq.since
        if steps:
            seq.computed += steps
            seq.generated += steps
            seq.since = self.clock

    def leave(self, seq: "Seq") -> None:
        """A member stops decoding here (finished or preempted); its counters are written first."""
        self.sync(seq)
        del self._seqs[seq.ticket]
        seq.since = -1
        seq.ticket = 0
        self.members -= 1
        self._offsets -= seq.prompt + seq.generated - self.clock
        if not self.members:                # every entry left is stale
            self._growth.clear()
            self._ends.clear()

    def due(self, last: int) -> list["Seq"]:
        """Members that need a new block at some step up to clock `last` (taken off the growth heap:
        call `grew` for each once its blocks are given). One given blocks since its entry was pushed
        (a run of steps at once) goes back on the heap at the clock it now needs one."""
        heap, seqs, bs, out = self._growth, self._seqs, self.block_size, []
        limit = (last + 1) << _SHIFT
        while heap and heap[0] < limit:
            ticket = heappop(heap) & _TICKET
            seq = seqs.get(ticket)
            if seq is None:                 # a former membership's
                continue
            needs = seq.since + seq.holding.blocks * bs - seq.computed
            if needs > last:
                heappush(heap, needs << _SHIFT | ticket)
            else:
                out.append(seq)
        return out

    def _pop(self, heap: list[int], last: int) -> list["Seq"]:
        """The current members whose entries in `heap` are due by clock `last`, taken off it."""
        seqs, out = self._seqs, []
        limit = (last + 1) << _SHIFT
        while heap and heap[0] < limit:
            seq = seqs.get(heappop(heap) & _TICKET)
            if seq is not None:
                out.append(seq)
        return out

    def grew(self, seq: "Seq") -> None:
        """A member got blocks (after `due`): note when it next needs one."""
        key = seq.since + seq.holding.blocks * self.block_size - seq.computed
        heappush(self._growth, key << _SHIFT | seq.ticket)

    def next_end(self) -> int:
        """Decode steps until the first member emits its last token (members must not be empty)."""
        heap, seqs = self._ends, self._seqs
        while (heap[0] & _TICKET) not in seqs:
            heappop(heap)
        return (heap[0] >> _SHIFT) - self.clock

    def advance(self, steps: int = 1) -> list["Seq"]:
        """Every member decodes `steps` tokens; returns those that emitted their last one (they leave,
        counters written), in no particular order."""
        self.clock += steps
        out = self._pop(self._ends, self.clock)
        for seq in out:
            self.leave(seq)
        return out
