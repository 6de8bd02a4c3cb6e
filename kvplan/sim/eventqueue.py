"""The simulated clock's queue of events to come, served in (time, priority, insertion order) order.

Every event the simulator schedules passes through here once on the way in and once on the way out:
`Environment.step` takes the earliest (clock.py). Two events at the same instant go by priority (a
process's start before anything else), then first come, first served: every event has its own place
in that order, so the order in which events come out does not depend on how the queue keeps them.

This is the readable definition: a binary heap of (time, priority, insertion order, event) tuples.
The wheel ships a C twin (eventqueue.c, built by hatch_build.py) that keeps the same three keys in a
heap of C structs, compared without building or comparing tuples; once installed it shadows this
file, as keyhash.c does keyhash.py, and tests/test_eventqueue.py holds the two to the same order.
"""

from __future__ import annotations

from heapq import heappop, heappush


class EventQueue:
    """Events to come; `pop` takes the first: the earliest, then the lowest priority, then the first pushed."""

    __slots__ = ("_heap", "_pushed")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, object]] = []
        self._pushed = 0

    def push(self, when: float, priority: int, event: object) -> None:
        """Add `event`, to happen at simulated time `when` with `priority` (lower first among equal times)."""
        when = float(when)
        if when != when:
            raise ValueError("an event cannot happen at time NaN")
        self._pushed += 1
        heappush(self._heap, (when, priority, self._pushed, event))

    def pop(self) -> tuple[float, object]:
        """Take the first event off the queue: (its time, the event). IndexError when there is none."""
        if not self._heap:
            raise IndexError("pop from an empty event queue")
        when, _, _, event = heappop(self._heap)
        return when, event

    def next_time(self) -> float:
        """The time of the first event (IndexError when there is none)."""
        if not self._heap:
            raise IndexError("an empty event queue has no next time")
        return self._heap[0][0]

    def __len__(self) -> int:
        return len(self._heap)
