"""The installed clock's event queue (kvplan/sim/eventqueue.c) gives events back in eventqueue.py's order.

eventqueue.py is the definition: the earliest time first, then the lowest priority, then the first
pushed. The C twin keeps the same keys in C structs. Which event the clock processes next decides
every result, so on any sequence of pushes and pops the two must hand out the same events, in turn.
"""

from __future__ import annotations

import gc
import math
import weakref
from importlib.machinery import EXTENSION_SUFFIXES

import pytest
from hypothesis import given, settings, strategies as st

from conftest import source_module
from kvplan.sim import eventqueue as installed

pytestmark = pytest.mark.compiled


source = source_module("kvplan/sim/eventqueue.py", "eventqueue_source")
QUEUES = [installed.EventQueue, source.EventQueue]

# few distinct times and priorities, so that ties (broken by priority, then by push order) are common
times = st.one_of(st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0, math.inf]), st.floats(0, 1e6, allow_nan=False))
operations = st.lists(st.one_of(st.tuples(st.just("push"), times, st.integers(0, 2)), st.just(("pop",))),
                      max_size=300)


def test_the_installed_queue_is_the_c_twin():
    assert installed.__file__.endswith(tuple(EXTENSION_SUFFIXES)), installed.__file__


@settings(max_examples=300, deadline=None)
@given(ops=operations)
def test_c_and_python_hand_out_the_same_events_in_the_same_order(ops):
    c, py = installed.EventQueue(), source.EventQueue()
    for n, op in enumerate(ops):
        if op[0] == "push":
            _, when, priority = op
            c.push(when, priority, n)
            py.push(when, priority, n)
        elif len(py):
            assert c.next_time() == py.next_time()
            assert c.pop() == py.pop()
        assert len(c) == len(py)
    assert [c.pop() for _ in range(len(c))] == [py.pop() for _ in range(len(py))]


@pytest.mark.parametrize("Queue", QUEUES)
def test_order_is_time_then_priority_then_first_pushed(Queue):
    q = Queue()
    for when, priority, name in [(2.0, 1, "late"), (1.0, 1, "normal"), (1.0, 0, "urgent"), (1.0, 1, "normal, second"),
                                 (0.5, 1, "earliest")]:
        q.push(when, priority, name)
    assert q.next_time() == 0.5
    assert [q.pop() for _ in range(len(q))] == [(0.5, "earliest"), (1.0, "urgent"), (1.0, "normal"),
                                                (1.0, "normal, second"), (2.0, "late")]


@pytest.mark.parametrize("Queue", QUEUES)
def test_an_empty_queue_and_a_nan_time_are_refused_alike(Queue):
    q = Queue()
    assert not q and len(q) == 0
    with pytest.raises(IndexError, match="empty event queue"):
        q.pop()
    with pytest.raises(IndexError, match="empty event queue"):
        q.next_time()
    with pytest.raises(ValueError, match="NaN"):
        q.push(math.nan, 1, "never")
    assert len(q) == 0


def test_events_left_in_a_forgotten_queue_are_collected():
    """An event holds its environment, which holds the queue: a cycle the garbage collector must see through."""

    class Event:
        pass

    q = installed.EventQueue()
    event = Event()
    event.queue = q
    q.push(1.0, 1, event)
    gone = weakref.ref(event)
    del q, event
    gc.collect()
    assert gone() is None
