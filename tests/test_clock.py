"""Events at an exact instant on SimPy's clock, and waits brought forward."""

from __future__ import annotations

import pytest
import simpy

from kvplan.sim.clock import at, sooner, succeed_at


def test_an_event_at_an_instant_lands_on_it_where_a_timeout_can_miss_by_the_last_bit():
    env = simpy.Environment()
    env.run(until=0.2)
    when = 0.9
    assert env.now + (when - env.now) != when           # the rounding `at` avoids
    woke = []

    def waiter():
        yield at(env, when)
        woke.append(env.now)

    env.process(waiter())
    env.run()
    assert woke == [when]


def test_an_event_made_to_succeed_later_counts_as_triggered_at_once_and_only_once():
    env = simpy.Environment()
    event = env.event()
    succeed_at(env, event, 2.0)
    assert event.triggered and not event.processed
    with pytest.raises(RuntimeError, match="already been triggered"):
        succeed_at(env, event, 3.0)
    with pytest.raises(RuntimeError):
        event.succeed()
    env.run()
    assert env.now == 2.0 and event.processed


def test_a_wait_brought_forward_wakes_its_waiters_sooner_and_the_old_event_wakes_nobody():
    env = simpy.Environment()
    woke = []
    timer = at(env, 10.0)

    def waiter(name):
        yield timer
        woke.append((name, env.now))

    env.process(waiter("a"))
    env.process(waiter("b"))
    env.run(until=1.0)                                   # both wait for the timer now
    moved = sooner(env, timer, 4.0)
    env.run()
    assert woke == [("a", 4.0), ("b", 4.0)]              # in the order they began to wait
    assert moved.processed and timer.processed and env.now == 10.0
