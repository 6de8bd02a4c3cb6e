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
from heapq import heappop, heappush
from typing import Callable, Iterator, Sequence

from .clock import Environment, Event, at

_EPS = 1e-12


class Transfer:
    """Work on one link: `end` is the simulated time it was served, -1 while it is in flight."""

    __slots__ = ("link", "end")

    def __init__(self, link: Link, end: float = -1.0):
        self.link = link
        self.end = end


class Link:
    """Processor sharing in O(log n): a virtual clock V advances at rate/n while n transfers are in
    flight, so a transfer that arrives at V0 with work w finishes when V reaches V0 + w."""

    __slots__ = ("env", "name", "rate", "_heap", "_virtual", "_last", "_seq", "busy_time", "work_done", "transfers")

    def __init__(self, env: Environment, name: str, rate: float):
        if rate <= 0:
            raise ValueError(f"link {name}: rate must be positive, got {rate}")
        self.env = env
        self.name = name
        self.rate = float(rate)
        self._heap: list[tuple[float, int, Transfer]] = []   # (virtual finish, arrival order, transfer)
        self._virtual = 0.0
        self._last = env.now                      # the time of the last arrival or completion
        self._seq = 0
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
        heap = self._heap
        if heap:
            elapsed = now - self._last
            if elapsed > 0:
                self._virtual += elapsed * self.rate / len(heap)
                self.busy_time += elapsed
        self._last = now
        self._seq += 1
        done = Transfer(self)
        heappush(heap, (self._virtual + work, self._seq, done))
        self.work_done += work
        return done

    def finish_time(self, transfer: Transfer, now: float) -> float:
        """When `transfer` is (or was) served, if nothing else arrives on the link first; `now` is env.now."""
        self._settle(now)
        if transfer.end >= 0:
            return transfer.end
        heap = self._heap
        if heap[0][2] is transfer:                # served first: the usual case, most links carry one transfer
            return self._completion(heap[0][0], self._virtual, self._last, len(heap))[0]
        pending = sorted(heap)                    # the order the heap would serve them in
        virtual, last, i = self._virtual, self._last, 0
        while True:
            last, virtual = self._completion(pending[i][0], virtual, last, len(pending) - i)
            slack = virtual + _EPS * max(1.0, abs(virtual))
            while True:
                if pending[i][2] is transfer:
                    return last
                i += 1
                if i == len(pending) or pending[i][0] > slack:
                    break

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
        heap = self._heap
        while heap:
            at, virtual = self._completion(heap[0][0], self._virtual, self._last, len(heap))
            if at > now:
                return
            self.busy_time += at - self._last
            self._virtual, self._last = virtual, at
            slack = virtual + _EPS * max(1.0, abs(virtual))
            heappop(heap)[2].end = at
            while heap and heap[0][0] <= slack:
                heappop(heap)[2].end = at

    def utilisation(self, duration: float) -> float:
        return self.busy_time / duration if duration > 0 else 0.0


def served(env: Environment, transfers: Sequence[Transfer]) -> Iterator[Event]:
    """Wait until every one of `transfers` (on any links) has been served, as steps of the caller's
    process (`yield from`): one event for the time they will be served unless something else
    arrives on their links first, and another whenever something did."""
    while True:
        end = _end(env, transfers)
        if end <= env.now:
            return
        yield at(env, end)


def when_served(env: Environment, transfers: Sequence[Transfer], then: Callable[[], None]) -> None:
    """Call `then()` once every one of `transfers` has been served, as `served` waits but without a
    process: for work nothing waits for (a write in the background)."""
    end = _end(env, transfers)
    if end <= env.now:
        then()
    else:
        at(env, end).then(partial(_again, env, transfers, then))


def _again(env: Environment, transfers: Sequence[Transfer], then: Callable[[], None], _: Event) -> None:
    when_served(env, transfers, then)


def _end(env: Environment, transfers: Sequence[Transfer]) -> float:
    """When the last of `transfers` will be served if nothing else arrives on their links first (env.now
    when every one of them already has been)."""
    now = env.now
    end = now
    for t in transfers:
        served_at = t.end if t.end >= 0 else t.link.finish_time(t, now)
        if served_at > end:
            end = served_at
    return end
