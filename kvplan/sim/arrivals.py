"""Arrival processes: when the sessions of an open loop start.

An open loop sends on a schedule of its own, whatever the servers do. Its session starts (plain
requests when the workload has no `sessions`) are drawn from the workload's random generator:

- poisson: exponential gaps with mean 1/rate.
- gamma: gamma gaps, shape k = 1/cv^2 and scale 1/(rate k): mean 1/rate, bursty when cv > 1.
- constant: equal gaps of 1/rate.
- rescaled_poisson: inference-perf's `constant` load type (kubernetes-sigs/inference-perf at
  e8e0aa99c57f2ffa0912df7ba1fbd2a8a596a041, inference_perf/loadgen/load_timer.py,
  ConstantLoadTimer.start_timer): n = int(rate x duration) exponential gaps with mean 1/rate, each
  multiplied by duration / (their sum), so that exactly n arrivals fill the stage and the last one
  comes at its end (kvplan.spec.stages.window and rescaled_count give the span and n).

The first three are drawn a batch at a time (`gaps`), as the stream needs more; rescaled_poisson
draws all its gaps at once, since the first start depends on their sum (`Rescaled`).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np


class Process(Protocol):
    """What a process is read from: `workload.arrivals`, or a load stage with its process filled in."""

    process: str | None
    rate: float | None
    cv: float | None


def gaps(arrivals: Process, rng: np.random.Generator, size: int, rate: float | None = None) -> np.ndarray:
    """`size` gaps between session starts of a poisson, gamma or constant process at `rate` starts per second
    (by default the process's own rate; workload.arrivals passes its starts_per_s, new sessions or requests)."""
    rate = arrivals.rate if rate is None else rate
    if arrivals.process == "poisson":
        return rng.exponential(1.0 / rate, size)
    if arrivals.process == "gamma":
        k = 1.0 / arrivals.cv ** 2
        return rng.gamma(k, 1.0 / (rate * k), size)
    return np.full(size, 1.0 / rate)


class Rescaled:
    """The session starts of a rescaled_poisson load: `count` arrivals filling `window` seconds from its start, the
    last exactly at `window`; handed out `size` at a time, then +inf (no more)."""

    def __init__(self, rate: float, window: float, count: int, rng: np.random.Generator):
        drawn = rng.exponential(1.0 / rate, count)
        self.starts = np.cumsum(drawn * (window / drawn.sum()))
        self.starts[-1] = window                 # their sum is the window; rounding must not move the last one past it
        self.taken = 0

    def next(self, size: int) -> np.ndarray:
        batch = self.starts[self.taken:self.taken + size]
        self.taken += len(batch)
        return np.concatenate([batch, np.full(size - len(batch), math.inf)])
