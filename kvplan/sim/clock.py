"""The simulated clock: events, processes, and the loop that runs them in time order.

This is SimPy's model (simpy 4.1, which the simulator ran on until this module took over), kept
rule for rule, compiled with the rest of the core. An `Event` happens at one instant; whoever
waits for it puts a callback on it. A `Process` is a generator that yields the events it waits
for and is resumed with each one's value. The `Environment` keeps triggered events in a queue
ordered by (time, priority, insertion order) (eventqueue.py; installed, its C twin) and processes
them one at a time: the clock jumps to the event's time, and its callbacks run in the order they
were added. The order is SimPy's, so a run gives the same result, bit for bit, as it did on SimPy
(tests/test_clock.py holds the two together on random programs).

Why not SimPy itself: its loop is interpreted Python, and every event the compiled core waits on
went through it (a Timeout, a heap push, a bound method per wait, `env.now` as a property run as a
Python frame, 38 times per request). Here those are native calls on native objects.

Also here, what SimPy has no public way to do: an event at an exact instant. env.timeout(when -
env.now) lands on env.now + (when - env.now), which can differ from `when` in the last bit; the
simulator often knows the instant itself (a link's next completion, the end of the decode step an
arriving request joins), and an event a rounding early or late would make a waiter look again or
a step boundary drift.
"""

from __future__ import annotations

from typing import Callable, Final, Generator, Iterable, Optional, Union, cast

from .eventqueue import EventQueue

URGENT: Final = 0
"""Priority of a process's start: before anything else at the same instant."""
NORMAL: Final = 1


class Event:
    """Something that happens at one instant. Pending until triggered (`succeed`, `fail`, or
    scheduled at an instant); processed once its callbacks have run, when `callbacks` becomes None."""

    def __init__(self, env: Environment) -> None:
        self.env = env
        self.callbacks: Optional[list[Callback]] = []   # a process waiting is resumed; anything else is called
        self.triggered = False
        self.ok = True
        self.value: object = None
        self.defused = False                     # a failure someone handled: the loop does not raise it

    @property
    def processed(self) -> bool:
        return self.callbacks is None

    def then(self, callback: Callable[[Event], None]) -> None:
        """Call `callback(self)` when this event is processed."""
        if self.callbacks is None:
            raise RuntimeError(f"{self!r} has already been processed")
        self.callbacks.append(callback)

    def succeed(self, value: object = None) -> Event:
        """Happen now, with `value`."""
        if self.triggered:
            raise RuntimeError(f"{self!r} has already been triggered")
        self.triggered, self.value = True, value
        self.env.schedule(self, NORMAL, 0.0)
        return self

    def fail(self, exception: BaseException) -> Event:
        """Happen now, as a failure: whoever waits for it gets `exception` raised; nobody does, the loop raises it."""
        if self.triggered:
            raise RuntimeError(f"{self!r} has already been triggered")
        self.triggered, self.ok, self.value = True, False, exception
        self.env.schedule(self, NORMAL, 0.0)
        return self

    def __repr__(self) -> str:
        return f"<{type(self).__name__} at {id(self):#x}>"


class Timeout(Event):
    """An event `delay` seconds from now (triggered at once, processed then)."""

    def __init__(self, env: Environment, delay: float) -> None:
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        super().__init__(env)
        self.triggered = True
        env.schedule(self, NORMAL, delay)


class Process(Event):
    """A generator run as a process: resumed with each event it yields once that event is processed.
    As an event, it happens when the generator returns (value: what it returned) or raises (a failure)."""

    # Not callable (no __call__): mypyc lays out a subclass with __call__ differently from its base,
    # and the base's compiled methods then read the wrong fields. The loop resumes it by name instead.

    def __init__(self, env: Environment, generator: Generator[Event, object, object]) -> None:
        super().__init__(env)
        self.generator = generator
        start = Event(env)
        start.triggered = True
        start.callbacks = [self]
        env.schedule(start, URGENT, 0.0)

    def resume(self, event: Event) -> None:
        """Send `event`'s value in (raise its exception in, if it failed) and run the generator to its
        next wait on a pending event; an event already processed is answered at once, as SimPy does."""
        generator: Generator[object, object, object] = self.generator   # checked below, with a clear error
        yielded: object
        while True:
            try:
                if not event.ok:
                    event.defused = True
                    yielded = generator.throw(_failure(event))
                elif event.value is None:            # send(None), in its cheaper form
                    yielded = next(generator)
                else:
                    yielded = generator.send(event.value)
            except StopIteration as stop:
                self.triggered, self.value = True, stop.value
                self.env.schedule(self, NORMAL, 0.0)
                return
            except BaseException as error:
                self.triggered, self.ok, self.value = True, False, error
                self.env.schedule(self, NORMAL, 0.0)
                return
            if not isinstance(yielded, Event):
                raise RuntimeError(f"a process yielded {yielded!r}, not an event: "
                                   f"{getattr(generator, '__qualname__', generator)}")
            event = yielded
            callbacks = event.callbacks
            if callbacks is not None:
                callbacks.append(self)
                return


class AllOf(Event):
    """Happens (value None) once every one of `events` has, at once if there are none; fails with
    the first of them that fails."""

    def __init__(self, env: Environment, events: Iterable[Event]) -> None:
        super().__init__(env)
        self.events = list(events)
        self.count = 0
        if not self.events:
            self.succeed()
            return
        for event in self.events:
            if event.callbacks is None:
                self.check(event)
            else:
                event.callbacks.append(self.check)

    def check(self, event: Event) -> None:
        if self.triggered:
            return
        self.count += 1
        if not event.ok:
            event.defused = True
            self.fail(_failure(event))
        elif self.count == len(self.events):
            self.succeed()


Callback = Union[Callable[[Event], None], Process]
Steps = Generator[Event, object, None]
"""What a process runs (the body of a generator function): the events it waits for, in order."""


def _failure(event: Event) -> BaseException:
    """What a failed event failed with."""
    value = event.value
    assert isinstance(value, BaseException)
    return value


class Environment:
    """The clock and the events to come: `now` is the simulated time in seconds."""

    def __init__(self) -> None:
        self.now = 0.0
        self.queue = EventQueue()                # by (time, priority, insertion order)

    def schedule(self, event: Event, priority: int, delay: float) -> None:
        self.schedule_at(event, self.now + delay, priority)

    def schedule_at(self, event: Event, when: float, priority: int) -> None:
        self.queue.push(when, priority, event)

    def event(self) -> Event:
        return Event(self)

    def timeout(self, delay: float) -> Timeout:
        return Timeout(self, delay)

    def process(self, generator: Generator[Event, object, object]) -> Process:
        return Process(self, generator)

    def step(self) -> None:
        """Process the next event: the clock moves to its time and its callbacks run in order."""
        self.now, first = self.queue.pop()
        event = cast(Event, first)
        callbacks = event.callbacks
        event.callbacks = None
        assert callbacks is not None
        for callback in callbacks:
            if isinstance(callback, Process):
                callback.resume(event)
            else:
                callback(event)
        if not event.ok and not event.defused:
            raise _failure(event)

    def run(self, until: Optional[Event] = None) -> None:
        """Process events until `until` has been processed, or, without it, until none is left."""
        queue = self.queue
        if until is None:
            while queue:
                self.step()
            return
        while until.callbacks is not None:
            if not queue:
                raise RuntimeError(f"no events left, and {until!r} has not happened")
            self.step()

    def run_until(self, when: float) -> None:
        """Process every event before simulated time `when`; the clock then reads `when`."""
        if when < self.now:
            raise ValueError(f"{when} is in the past (now is {self.now})")
        queue = self.queue
        while queue and queue.next_time() < when:
            self.step()
        self.now = when


def at(env: Environment, when: float) -> Event:
    """A new event that succeeds at simulated time `when` exactly."""
    event = Event(env)
    succeed_at(env, event, when)
    return event


def succeed_at(env: Environment, event: Event, when: float) -> None:
    """Make a pending `event` succeed (value None) at simulated time `when` (not before now): what
    event.succeed() does now, at a later instant. It counts as triggered from this call on, so it
    cannot be made to succeed twice."""
    if event.triggered:
        raise RuntimeError(f"{event!r} has already been triggered")
    event.triggered = True
    env.schedule_at(event, when, NORMAL)


def sooner(env: Environment, event: Event, when: float) -> Event:
    """An event at `when`, before `event`'s own time, that takes over everyone waiting for `event`:
    what they wait for happens sooner. An event cannot be taken off the queue, so `event` still
    comes up at its time, with nobody left waiting for it."""
    moved = at(env, when)
    moved.callbacks, event.callbacks = event.callbacks, []
    return moved
