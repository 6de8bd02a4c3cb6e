"""Links share their capacity between concurrent transfers (processor sharing)."""

from __future__ import annotations

import pytest
import simpy

from kvplan.sim.links import Joint, Link


def finish_times(starts_and_work, rate=100.0):
    env = simpy.Environment()
    link = Link(env, "l", rate)
    done = {}

    def flow(name, start, work):
        yield env.timeout(start)
        yield link.transfer(work)
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


def test_a_joint_completes_when_its_slowest_part_on_any_link_is_served():
    env = simpy.Environment()
    fast, slow = Link(env, "fast", 100.0), Link(env, "slow", 10.0)
    other = fast.transfer(100)                  # shares the fast link with the joint's part there
    done = {}

    def operation():
        joint = Joint(env)
        fast.transfer_part(100, joint)          # 2 s: it shares the link with `other`
        slow.transfer_part(30, joint)           # 3 s alone
        fast.transfer_part(0, joint)            # nothing to move: not a part
        yield joint.wait()
        done["joint"] = env.now

    env.process(operation())
    env.run()
    assert done["joint"] == pytest.approx(3.0)
    assert other.processed and fast.transfers == 3 and slow.work_done == 30


def test_a_joint_without_parts_completes_at_once():
    env = simpy.Environment()
    joint = Joint(env)
    Link(env, "l", 1.0).transfer_part(0, joint)
    env.run(joint.wait())
    assert env.now == 0


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        Link(simpy.Environment(), "bad", 0)
