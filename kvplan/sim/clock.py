"""Events at an exact instant on SimPy's clock.

SimPy schedules an event `delay` seconds from now: env.timeout(when - env.now) lands on
env.now + (when - env.now), which can differ from `when` in the last bit. The simulator often knows
the instant itself (a link's next completion, the end of the decode step an arriving request
joins), and an event a rounding early or late would make a waiter look again or a step boundary
drift. SimPy has no public way to schedule at an absolute time, so these push onto its event queue
as Environment.schedule does (time, priority, insertion order, event): the queue's order rules
are SimPy's own.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL, Event


def at(env: simpy.Environment, when: float) -> Event:
    """A new event that succeeds at simulated time `when` exactly."""
    event = Event(env)
    succeed_at(env, event, when)
    return event


def succeed_at(env: simpy.Environment, event: Event, when: float) -> None:
    """Make a pending `event` succeed (value None) at simulated time `when` (not before now): what
    event.succeed() does now, at a later instant. It counts as triggered from this call on, so it
    cannot be made to succeed twice."""
    if event.triggered:
        raise RuntimeError(f"{event} has already been triggered")
    event._ok = True
    event._value = None
    heappush(env._queue, (when, NORMAL, next(env._eid), event))


def sooner(env: simpy.Environment, event: Event, when: float) -> Event:
    """An event at `when`, before `event`'s own time, that takes over everyone waiting for `event`:
    what they wait for happens sooner. SimPy cannot take an event off its queue, so `event` still
    comes up at its time, with nobody left waiting for it."""
    moved = at(env, when)
    moved.callbacks, event.callbacks = event.callbacks, []
    return moved
