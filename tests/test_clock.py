"""The simulated clock: SimPy's order of events, events at an exact instant, waits brought forward."""

from __future__ import annotations

import random

import pytest
import simpy

from kvplan.sim import clock
from kvplan.sim.clock import AllOf, Environment, at, sooner, succeed_at


def test_an_event_at_an_instant_lands_on_it_where_a_timeout_can_miss_by_the_last_bit():
    env = Environment()
    env.run_until(0.2)
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
    env = Environment()
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
    env = Environment()
    woke = []
    timer = at(env, 10.0)

    def waiter(name):
        yield timer
        woke.append((name, env.now))

    env.process(waiter("a"))
    env.process(waiter("b"))
    env.run_until(1.0)                                   # both wait for the timer now
    moved = sooner(env, timer, 4.0)
    env.run()
    assert woke == [("a", 4.0), ("b", 4.0)]              # in the order they began to wait
    assert moved.processed and timer.processed and env.now == 10.0


# ---- the same order as SimPy, the loop it replaces

def _program(lib, env, seed: int) -> list:
    """A random program of processes waiting on timeouts (many at the same instant), on events
    other processes succeed, on child processes and on AllOf: what happened when, in order.
    `lib` is the module with AllOf: the same program runs on either loop."""
    rng = random.Random(seed)
    log: list = []
    signals = [env.event() for _ in range(4)]

    def child(name, steps):
        for _ in range(steps):
            yield env.timeout(rng.choice((0, 0.5, 1, 1.5)))
            log.append((name, env.now))
        return name

    def worker(name):
        for step in range(rng.randint(1, 6)):
            kind = rng.random()
            if kind < 0.4:
                yield env.timeout(rng.choice((0, 1, 2, 0.25)))
            elif kind < 0.6:
                signal = signals[rng.randrange(len(signals))]
                if not signal.triggered and rng.random() < 0.5:
                    signal.succeed()
                    log.append((name, "signalled", env.now))
                yield signal                    # if already processed: answered at once
            elif kind < 0.8:
                value = yield env.process(child(f"{name}.{step}", rng.randint(0, 2)))
                log.append((name, "child", value, env.now))
            else:
                yield lib.AllOf(env, [env.process(child(f"{name}/{step}.{i}", rng.randint(0, 2)))
                                      for i in range(rng.randint(0, 3))])
            log.append((name, step, env.now))

    for i in range(rng.randint(1, 8)):
        env.process(worker(f"w{i}"))
    env.run()
    for signal in signals:
        if not signal.triggered:
            signal.succeed()
    env.run()
    log.append(("end", env.now))
    return log


def test_processes_and_events_run_in_simpys_order_exactly():
    for seed in range(300):
        assert _program(clock, clock.Environment(), seed) == _program(simpy, simpy.Environment(), seed), seed


def test_a_process_that_raises_stops_the_run_unless_someone_waits_for_it():
    env = Environment()

    def broken():
        yield env.timeout(1.0)
        raise KeyError("lost")

    env.process(broken())
    with pytest.raises(KeyError, match="lost"):
        env.run()

    env = Environment()
    caught = []

    def parent():
        try:
            yield AllOf(env, [env.process(broken()), env.timeout(5.0)])
        except KeyError as error:
            caught.append((str(error), env.now))

    env.process(parent())
    env.run()
    assert caught == [("'lost'", 1.0)] and env.now == 5.0


def test_a_process_must_yield_events():
    env = Environment()

    def wrong():
        yield 3

    env.process(wrong())
    with pytest.raises(RuntimeError, match="yielded 3, not an event"):
        env.run()
