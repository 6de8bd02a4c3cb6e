"""A certain SLO miss: stop a run as soon as no later request can bring a percentile back under its target.

The planner only needs to know whether a candidate meets its latency targets. A candidate far
below the traffic (one GPU where three are needed) builds a queue for the whole run, and
simulating every request of it to learn that its TTFT p99 is an hour rather than 500 ms is most
of a plan's time. A percentile decides earlier than that: the run's p-th percentile (numpy's
linear interpolation over the n finished requests, kvplan.sim.metrics) lies between the sorted
values at positions floor(h) and ceil(h), h = (n - 1) p / 100. Once k requests have a value
above the target and k >= n - floor(h), both of those values are among them, so the percentile
is above the target whatever the other requests do: the run has missed, exactly as the finished
run would have said, and it stops there with `SloMissed`.

The smallest of those k values is a lower bound on the percentile (at least k requests lie at or
above it), which is what a stopped run reports instead of the percentile itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

METRICS = ("ttft", "tpot", "e2e")


class SloMissed(Exception):
    """A run stopped at a certain miss of `key` (e.g. 'ttft_p99'): its percentile is at least `at_least` seconds."""

    def __init__(self, key: str, at_least: float, over: int, requests: int, finished: int):
        super().__init__(key, at_least, over, requests, finished)
        self.key, self.at_least, self.over, self.requests, self.finished = key, at_least, over, requests, finished

    @property
    def miss(self) -> "SloMiss":
        return SloMiss(self.key, self.at_least, self.over, self.requests, self.finished)


@dataclass(frozen=True)
class SloMiss:
    """What a stopped run says: `over` of its `requests` requests (`finished` of them done) were above the
    target of `key`, enough that its percentile is above it; the percentile is at least `at_least`."""

    key: str
    at_least: float
    over: int
    requests: int
    finished: int


class SloWatch:
    """Counts, request by request, the values above each target; raises SloMissed once a miss is certain."""

    def __init__(self, targets: dict[str, float], requests: int, multi_token: int):
        """`requests` in the run, `multi_token` of them with more than one output token (TPOT's population)."""
        self.requests = requests
        self.finished = 0
        self._watched = []                          # (key, metric, target, values over it that make a miss certain)
        for key, target in sorted(targets.items()):
            metric, pct = key.rsplit("_", 1)
            if metric not in METRICS:
                raise ValueError(f"cannot watch {key!r}: the metric must be one of {', '.join(METRICS)}")
            n = multi_token if metric == "tpot" else requests
            if n:
                h = (n - 1) * float(pct[1:]) / 100
                self._watched.append((key, metric, target, n - math.floor(h)))
        self._over: dict[str, list[float]] = {key: [] for key, *_ in self._watched}

    def see(self, ttft: float, tpot: float, e2e: float, output_tokens: int) -> None:
        """One finished request's latencies (its TPOT counts only with more than one output token, as in
        kvplan.sim.metrics)."""
        self.finished += 1
        values = {"ttft": ttft, "tpot": tpot if output_tokens > 1 else None, "e2e": e2e}
        for key, metric, target, needed in self._watched:
            value = values[metric]
            if value is not None and value > target:
                over = self._over[key]
                over.append(value)
                if len(over) >= needed:
                    raise SloMissed(key, min(over), len(over), self.requests, self.finished)
