"""Links and devices as contended SimPy resources: concurrent transfers share their capacity.

A `Link` serves its transfers by processor sharing: n transfers in flight each progress at
rate/n, and every arrival or completion re-plans the finish times. That is how a PCIe lane, a
NIC or an NVMe device divides itself between concurrent streams, and it means a burst of loads
really does slow each of them down (rather than each seeing the full bandwidth).

Work is measured in the link's own unit: bytes for a pure bandwidth link (rate in bytes/s), or
seconds of device time for a device with both a bandwidth and an IOPS limit (rate 1.0; each
transfer costs max(bytes / bandwidth, operations / IOPS)). Fixed per-operation latency (an NVMe
read, a Ceph op, a network hop) is a pure delay added by the caller, not shared capacity.

An operation that moves over several links at once (a Ceph write: the client's NIC, every replica's
OSD and NIC) waits for all of them through one `Joint`: the links count its parts down, and only
the last part's completion is an event (what SimPy's AllOf gives, without an event per part).
"""

from __future__ import annotations

from functools import partial
from heapq import heappop, heappush

import simpy
from simpy.events import Event, Timeout

_EPS = 1e-12


class Joint:
    """One event for several transfers, on any links: it succeeds when the last of them has been served."""

    __slots__ = ("event", "parts")

    def __init__(self, env: simpy.Environment):
        self.event = Event(env)
        self.parts = 0                            # transfers still in flight

    def succeed(self) -> None:
        """A link served one part (links call this as they call Event.succeed)."""
        self.parts -= 1
        if self.parts == 0:
            self.event.succeed()

    def wait(self) -> simpy.Event:
        """The event to yield once every part is on its link (one already served when none is left)."""
        if self.parts == 0 and not self.event.triggered:
            self.event.succeed()
        return self.event


class Link:
    """Processor sharing in O(log n): a virtual clock V advances at rate/n while n transfers are in
    flight, so a transfer that arrives at V0 with work w finishes when V reaches V0 + w."""

    __slots__ = ("env", "name", "rate", "_heap", "_virtual", "_last", "_generation", "_seq",
                 "busy_time", "work_done", "transfers")

    def __init__(self, env: simpy.Environment, name: str, rate: float):
        if rate <= 0:
            raise ValueError(f"link {name}: rate must be positive, got {rate}")
        self.env = env
        self.name = name
        self.rate = float(rate)
        self._heap: list[tuple[float, int, simpy.Event | Joint]] = []   # (virtual finish, arrival order, done)
        self._virtual = 0.0
        self._last = env.now
        self._generation = 0
        self._seq = 0
        self.busy_time = 0.0                      # seconds with at least one transfer in flight
        self.work_done = 0.0                      # total work served (bytes, or device-seconds)
        self.transfers = 0

    def transfer(self, work: float) -> simpy.Event:
        """An event that succeeds when `work` has been served, sharing the link with others."""
        self.transfers += 1
        done = Event(self.env)
        if work <= 0:
            done.succeed()
        else:
            self._enqueue(work, done)
        return done

    def transfer_part(self, work: float, joint: Joint) -> None:
        """Serve `work` as one part of `joint` (no work: not a part)."""
        self.transfers += 1
        if work > 0:
            joint.parts += 1
            self._enqueue(work, joint)

    def _enqueue(self, work: float, done: simpy.Event | Joint) -> None:
        env, heap = self.env, self._heap
        if heap:                                  # _advance, written out: this is the hot path
            elapsed = env.now - self._last
            if elapsed > 0:
                self._virtual += elapsed * self.rate / len(heap)
                self.busy_time += elapsed
        self._last = env.now
        self._seq += 1
        heappush(heap, (self._virtual + work, self._seq, done))
        self.work_done += work
        self._plan()

    def _advance(self) -> None:
        now = self.env.now
        elapsed = now - self._last
        if elapsed > 0 and self._heap:
            self._virtual += elapsed * self.rate / len(self._heap)
            self.busy_time += elapsed
        self._last = now

    def _plan(self) -> None:
        """Schedule a wake-up at the next completion; older wake-ups become stale."""
        self._generation += 1
        if not self._heap:
            return
        delay = max(self._heap[0][0] - self._virtual, 0.0) * len(self._heap) / self.rate
        Timeout(self.env, delay).callbacks.append(partial(self._wake, self._generation))

    def _wake(self, generation: int, _event=None) -> None:
        if generation != self._generation:
            return
        self._advance()
        heap, slack = self._heap, _EPS * max(1.0, abs(self._virtual))
        heappop(heap)[2].succeed()                # the one this wake-up was planned for
        while heap and heap[0][0] <= self._virtual + slack:
            heappop(heap)[2].succeed()
        self._plan()

    def utilisation(self, duration: float) -> float:
        return self.busy_time / duration if duration > 0 else 0.0
