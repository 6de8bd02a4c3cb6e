"""Links share their capacity between concurrent transfers (processor sharing)."""

from __future__ import annotations

import random

import pytest
from kvplan.sim.clock import Environment

from kvplan.sim.links import Link, served


def finish_times(starts_and_work, rate=100.0):
    env = Environment()
    link = Link(env, "l", rate)
    done = {}

    def flow(name, start, work):
        yield env.timeout(start)
        yield from served(env, [link.transfer(work)])
        done[name] = env.now

    for name, (start, work) in starts_and_work.items():
        env.process(flow(name, start, work))
    env.run()
    return done, link


def test_one_transfer_gets_the_whole_link():
    done, link = finish_times({"a": (0, 100)})
    assert done["a"] == pytest.approx(1.0)
    assert link.busy_time == pytest.approx(1.0) and link.work_done == 100


def test_two_transfers_share_it_equally():
    done, _ = finish_times({"a": (0, 100), "b": (0, 100)})
    assert done == pytest.approx({"a": 2.0, "b": 2.0})


def test_a_late_arrival_slows_the_first():
    # a runs alone for 0.5 s (50 done), then both get 50/s: a needs 1 s more, b finishes its
    # remaining 50 alone at 100/s.
    done, _ = finish_times({"a": (0, 100), "b": (0.5, 100)})
    assert done == pytest.approx({"a": 1.5, "b": 2.0})


def test_idle_gaps_are_not_busy_time():
    done, link = finish_times({"a": (0, 100), "b": (5, 100)})
    assert done == pytest.approx({"a": 1.0, "b": 6.0})
    assert link.utilisation(6.0) == pytest.approx(2 / 6)


def test_zero_work_completes_at_once():
    done, _ = finish_times({"a": (1, 0)})
    assert done["a"] == 1


def test_a_wait_for_several_links_ends_when_the_slowest_part_is_served():
    env = Environment()
    fast, slow = Link(env, "fast", 100.0), Link(env, "slow", 10.0)
    other = fast.transfer(100)                  # shares the fast link with the operation's part there
    done = {}

    def operation():
        parts = [fast.transfer(100),            # 2 s: it shares the link with `other`
                 slow.transfer(30),             # 3 s alone
                 fast.transfer(0)]              # nothing to move: served at once
        yield from served(env, parts)
        done["operation"] = env.now

    env.process(operation())
    env.run()
    assert done["operation"] == pytest.approx(3.0)
    assert other.end == pytest.approx(2.0) and fast.transfers == 3 and slow.work_done == 30


def test_waiting_for_nothing_takes_no_time():
    env = Environment()
    env.run(env.process(served(env, [Link(env, "l", 1.0).transfer(0)])))
    assert env.now == 0


def test_a_waiter_wakes_at_the_exact_instant_its_transfer_is_served():
    # a sleeps until 1/3 s (alone), b's arrival pushes that back, c's again: a is served at 0.7 s
    # (0.3 alone, 0.3 beside b, 0.4 beside b and c), c at 0.7 + 0.1 / 1.5, b the last 0.2 alone
    env = Environment()
    link = Link(env, "l", 3.0)
    woke = {}

    def flow(name, start, work):
        yield env.timeout(start)
        transfer = link.transfer(work)
        yield from served(env, [transfer])
        woke[name] = (env.now, transfer.end)

    for name, start, work in (("a", 0, 1.0), ("b", 0.1, 1.0), ("c", 0.3, 0.5)):
        env.process(flow(name, start, work))
    env.run()
    assert all(now == end for now, end in woke.values())          # not a rounding later
    assert {k: now for k, (now, _) in woke.items()} == pytest.approx({"a": 0.7, "b": 0.7 + 0.1 / 1.5 + 0.2 / 3,
                                                                      "c": 0.7 + 0.1 / 1.5})
    assert link.busy_time == pytest.approx(0.7 + 0.1 / 1.5 + 0.2 / 3)


def reference_processor_sharing(arrivals: list[tuple[float, float]], rate: float) -> list[float]:
    """Finish times of (start, work) transfers on a processor-sharing server, by stepping from event
    to event with every transfer's remaining work (an independent computation: no virtual clock)."""
    remaining: dict[int, float] = {}
    finish = [0.0] * len(arrivals)
    order = sorted(range(len(arrivals)), key=lambda i: arrivals[i][0])
    now, k = 0.0, 0
    while k < len(order) or remaining:
        next_arrival = arrivals[order[k]][0] if k < len(order) else float("inf")
        if remaining:
            each = rate / len(remaining)
            first = min(remaining, key=remaining.get)
            next_finish = now + remaining[first] / each
        else:
            next_finish = float("inf")
        until = min(next_arrival, next_finish)
        for i in remaining:
            remaining[i] -= (until - now) * rate / len(remaining)
        now = until
        for i in [i for i, w in remaining.items() if w <= 1e-9]:
            finish[i] = now
            del remaining[i]
        if next_arrival <= now and k < len(order):
            remaining[order[k]] = arrivals[order[k]][1]
            k += 1
    return finish


def test_finish_times_match_a_step_by_step_processor_sharing_computation():
    rng = random.Random(7)
    arrivals = [(rng.uniform(0, 20), rng.uniform(0.1, 30)) for _ in range(60)]
    done, link = finish_times({i: a for i, a in enumerate(arrivals)}, rate=5.0)
    expected = reference_processor_sharing(arrivals, 5.0)
    assert [done[i] for i in range(len(arrivals))] == pytest.approx(expected, rel=1e-9)
    assert link.work_done == pytest.approx(sum(w for _, w in arrivals))


def test_on_a_saturated_link_every_waiter_wakes_exactly_when_its_last_part_is_served():
    # 400 operations, each over a shared link loaded beyond its rate (its queue grows to dozens) and a
    # link of its own: each wakes at the very instant its slower part is served, and the shared
    # link serves them as processor sharing does, however deep in its queue they are asked about
    rng = random.Random(11)
    env = Environment()
    shared = Link(env, "shared", 9.0)
    arrivals = [(rng.uniform(0, 200), rng.uniform(0.1, 10)) for _ in range(400)]
    woke = {}

    def operation(i, start, work):
        yield env.timeout(start)
        parts = [shared.transfer(work), Link(env, f"own{i}", 50.0).transfer(work)]
        yield from served(env, parts)
        woke[i] = (env.now, max(p.end for p in parts), parts[0].end)

    for i, (start, work) in enumerate(arrivals):
        env.process(operation(i, start, work))
    env.run()
    assert all(now == last for now, last, _ in woke.values())
    expected = reference_processor_sharing(arrivals, 9.0)
    assert [woke[i][2] for i in range(len(arrivals))] == pytest.approx(expected, rel=1e-9)


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        Link(Environment(), "bad", 0)
