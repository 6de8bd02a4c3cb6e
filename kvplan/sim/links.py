"""Links and devices as contended resources: concurrent transfers share their capacity.

A `Link` serves its transfers by processor sharing: n transfers in flight each progress at
rate/n, and every arrival or completion changes the finish times of the others. That is how a
PCIe lane, a NIC or an NVMe device divides itself between concurrent streams, and it means a
burst of loads really does slow each of them down (rather than each seeing the full bandwidth).

Work is measured in the link's own unit: bytes for a pure bandwidth link (rate in bytes/s), or
seconds of device time for a device with both a bandwidth and an IOPS limit (rate 1.0; each
transfer costs max(bytes / bandwidth, operations / IOPS)). Fixed per-operation latency (an NVMe
read, a Ceph op, a network hop) is a pure delay added by the caller, not shared capacity.

A link schedules nothing. Its state changes only when a transfer arrives or one is served, and
the next completion follows from that state (a virtual clock: below), so a link works out the
completions it owes lazily, whenever it is looked at, at exactly the instants and with exactly
the arithmetic it would have used had it woken up for each. Whoever waits for transfers (`served`)
sleeps until the time they will be served if nothing else arrives meanwhile, and, if something
did arrive and delay them, sleeps again. An operation that moves over several links at once (a
Ceph write: the client's NIC, every replica's OSD and NIC) so costs one event, not one per
link and per re-plan.
"""

from __future__ import annotations

from functools import partial
from bisect import insort
from typing import Callable, Iterator, Sequence

from .clock import Environment, Event, at

_EPS = 1e-12


class Transfer:
    """Work on one link: `end` is the simulated time it was served, -1 while it is in flight.

    `due` is when it will be served if nothing else arrives on the link, as the link planned it
    after its `plan`-th arrival (valid while no later transfer has arrived)."""

    __slots__ = ("link", "end", "due", "plan")

    def __init__(self, link: Link, end: float = -1.0):
        self.link = link
        self.end = end
        self.due = -1.0
        self.plan = -1


class Link:
    """Processor sharing by a virtual clock: V advances at rate/n while n transfers are in flight, so
    a transfer that arrives at V0 with work w finishes when V reaches V0 + w.

    The transfers in flight are `_queue[_head:]`, sorted by (virtual finish, arrival order): the order
    they are served in. A sorted list rather than a heap, so that when each will be served can be read
    off in order (`_Plan`) without sorting a copy."""

    __slots__ = ("env", "name", "rate", "_queue", "_head", "_virtual", "_last", "_next", "_next_virtual", "_seq",
                 "_planned", "busy_time", "work_done", "transfers")

    def __init__(self, env: Environment, name: str, rate: float):
        if rate <= 0:
            raise ValueError(f"link {name}: rate must be positive, got {rate}")
        self.env = env
        self.name = name
        self.rate = float(rate)
        self._queue: list[tuple[float, int, Transfer]] = []   # (virtual finish, arrival order, transfer)
        self._head = 0                            # the first in flight; those before it are served
        self._virtual = 0.0
        self._last = env.now                      # the time of the last arrival or completion
        self._next = -1.0                         # when the first in flight is served (-1: not worked out since
        self._next_virtual = 0.0                  # the last arrival or completion), and the virtual clock then
        self._seq = 0                             # arrivals so far
        self._planned: _Plan | None = None        # when those in flight are served, as far as asked
        self.busy_time = 0.0                      # seconds with at least one transfer in flight
        self.work_done = 0.0                      # total work served (bytes, or device-seconds)
        self.transfers = 0

    def transfer(self, work: float) -> Transfer:
        """Start serving `work` now, sharing the link with the transfers in flight."""
        self.transfers += 1
        now = self.env.now
        if work <= 0:
            return Transfer(self, now)
        self._settle(now)
        queue, head = self._queue, self._head
        if head > 64 and 2 * head > len(queue):  # drop the served ones (a plan's positions change: seq does too)
            del queue[:head]
            self._head = head = 0
        if head < len(queue):
            elapsed = now - self._last
            if elapsed > 0:
                self._virtual += elapsed * self.rate / (len(queue) - head)
                self.busy_time += elapsed
        self._last = now
        self._next = -1.0
        self._seq += 1
        done = Transfer(self)
        insort(queue, (self._virtual + work, self._seq, done))
        self.work_done += work
        return done

    def finish_time(self, transfer: Transfer, now: float) -> float:
        """When `transfer` is (or was) served, if nothing else arrives on the link first; `now` is env.now."""
        self._settle(now)
        if transfer.end >= 0:
            return transfer.end
        queue, head = self._queue, self._head
        if queue[head][2] is transfer:           # served first: the usual case, most links carry one transfer
            return self._next                    # _settle worked it out
        plan = self._planned
        if plan is None or plan.seq != self._seq:  # something arrived since the link last planned
            plan = self._planned = _Plan(self)
        return plan.until(self, transfer)

    def _completion(self, finish: float, virtual: float, last: float, n: int) -> tuple[float, float]:
        """The time the first of n transfers in flight, with virtual finish `finish`, is served, and
        the virtual clock then."""
        at = last + max(finish - virtual, 0.0) * n / self.rate
        elapsed = at - last
        if elapsed > 0:
            virtual += elapsed * self.rate / n
        return at, virtual

    def _settle(self, now: float) -> None:
        """Serve every transfer that finished by `now`, each at its own completion."""
        queue, head = self._queue, self._head
        while head < len(queue):
            at = self._next
            if at < 0:
                at, self._next_virtual = self._completion(queue[head][0], self._virtual, self._last, len(queue) - head)
                self._next = at
            if at > now:
                break
            virtual, self._next = self._next_virtual, -1.0
            self.busy_time += at - self._last
            self._virtual, self._last = virtual, at
            slack = virtual + _EPS * max(1.0, abs(virtual))
            queue[head][2].end = at
            head += 1
            while head < len(queue) and queue[head][0] <= slack:
                queue[head][2].end = at
                head += 1
        if head == len(queue) and head:          # all served: start the list again (no plan is asked after)
            queue.clear()
            head = 0
        self._head = head

    def utilisation(self, duration: float) -> float:
        return self.busy_time / duration if duration > 0 else 0.0


class _Plan:
    """When each transfer in flight on a link will be served if nothing else arrives, worked out in the
    order and with the arithmetic of `Link._settle`, as far as `Link.finish_time` has asked.

    Completions since the plan began leave it as it was (they are the steps it took), so it holds until
    the link's next arrival (`seq`): on a saturated link, where thousands wait and each is woken when
    arrivals delayed it, they share one plan per arrival, where each sorted the link's queue.
    """

    __slots__ = ("seq", "start", "end", "next", "virtual", "last", "slack")

    def __init__(self, link: Link):
        self.seq = link._seq
        self.start, self.end = link._head, len(link._queue)   # the transfers in flight: positions in the queue
        self.next = self.start                    # the first not visited yet
        self.virtual, self.last = link._virtual, link._last
        self.slack = 0.0                          # a transfer finishing by this virtual time ends with the last one

    def until(self, link: Link, transfer: Transfer) -> float:
        """Visit transfers in serving order, noting when each is served, up to `transfer`; its time."""
        queue, seq, end = link._queue, self.seq, self.end
        i, virtual, last, slack = self.next, self.virtual, self.last, self.slack
        while transfer.plan != seq:
            finish = queue[i][0]
            if i == self.start or finish > slack:   # not served together with the one before
                last, virtual = link._completion(finish, virtual, last, end - i)
                slack = virtual + _EPS * max(1.0, abs(virtual))
            served = queue[i][2]
            served.due, served.plan = last, seq
            i += 1
        self.next, self.virtual, self.last, self.slack = i, virtual, last, slack
        return transfer.due


def served(env: Environment, transfers: Sequence[Transfer]) -> Iterator[Event]:
    """Wait until every one of `transfers` (on any links) has been served, as steps of the caller's
    process (`yield from`): one event for the time they will be served unless something else
    arrives on their links first, and another whenever something did."""
    while True:
        end = planned_end(env, transfers)
        if end <= env.now:
            return
        yield at(env, end)


def when_served(env: Environment, transfers: Sequence[Transfer], then: Callable[[], None]) -> None:
    """Call `then()` once every one of `transfers` has been served, as `served` waits but without a
    process: for work nothing waits for (a write in the background)."""
    end = planned_end(env, transfers)
    if end <= env.now:
        then()
    else:
        at(env, end).then(partial(_again, env, transfers, then))


def _again(env: Environment, transfers: Sequence[Transfer], then: Callable[[], None], _: Event) -> None:
    when_served(env, transfers, then)


def planned_end(env: Environment, transfers: Sequence[Transfer]) -> float:
    """When the last of `transfers` will be served if nothing else arrives on their links first (env.now
    when every one of them already has been)."""
    now = env.now
    end = now
    for t in transfers:
        served_at = t.end if t.end >= 0 else t.link.finish_time(t, now)
        if served_at > end:
            end = served_at
    return end
