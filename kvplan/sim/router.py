"""The router in front of the vLLM instances: which instance serves a request.

kvplan deploys vllm-project's router (the `vllm-router` package, 0.1.17) and simulates what its
policies do, so a simulated spread is the deployed one (kvplan.deploy.vllm_command.router_policy maps each
policy to its flags):

- round_robin -> `--policy round_robin`: the instances in turn.
- least_loaded -> `--policy cache_aware --cache-threshold 1.0`: no prefix match ever reaches the
  threshold, so every request goes to the instance with the fewest requests in flight (the first
  of equals).
- session_affinity -> `--policy sticky_least_loaded`, the session in an X-Session-ID header: a new
  session goes to the instance with the fewest sessions and stays there (the router forgets a
  session after two idle hours, far beyond any simulated think time); a request without a
  session goes to the instance with the fewest sessions. Between instances with as many sessions
  the router picks in its own (hash-map) order, the simulator the first: the same spread.
- prefix_aware -> `--policy cache_aware` with its default thresholds (`Resolved.router_thresholds`,
  which the deployment passes explicitly): the router keeps a tree of the prompts it has sent to
  each instance. Unless the load is out of balance (the busiest instance has more than balance_abs
  requests more than the idlest, and more than balance_rel times as many), a request whose longest
  prefix match on some instance covers more than cache_threshold of its prompt goes to that
  instance; otherwise, and when out of balance, to the least-loaded one. The tree is of routed
  prompts, not of what an instance's cache still holds: a prefix the instance has evicted still
  attracts its requests. The simulator keeps that tree at block granularity and, like the router
  between its periodic evictions, never trims it.

llm_d is not vllm-router: it is llm-d's scheduler, whose weighted scorers kvplan.sim.llmd simulates
(`Resolved.llm_d`); kvplan renders its configuration for llm-d's gateway on Kubernetes.
"""

from __future__ import annotations

from itertools import count
from typing import Iterable

from ..router_settings import LlmDScheduler, RouterThresholds
from . import workload as wl
from .clock import Environment, Steps
from .llmd import Scheduler


class Router:
    """Picks an instance for each request, as the deployed router's policy for `kind` does (prefix_aware with
    `thresholds`, the deployed router's: `Resolved.router_thresholds`)."""

    def __init__(self, kind: str, engines: list, block_size: int, thresholds: RouterThresholds,
                 llm_d: LlmDScheduler | None = None, seed: int = 0):
        self.kind, self.engines, self.block_size = kind, engines, block_size
        self.llm_d: Scheduler | None = Scheduler(llm_d, engines, block_size, seed) if llm_d is not None else None
        self.thresholds = thresholds
        self.cache_threshold: float = thresholds.cache_threshold
        self.balance_abs: int = thresholds.balance_abs
        self.balance_rel: float = thresholds.balance_rel
        self._turn = count()
        self._sessions: dict[int, int] = {}                  # session -> instance
        self._session_counts = [0] * len(engines)
        self._routed: list[set] = [set() for _ in engines]   # prefix_aware: block keys routed to each instance

    def deliver(self, env: Environment, requests: Iterable[wl.Request], offset: float) -> Steps:
        """The arrivals, as one process: each request, at its time (`offset` seconds after the start),
        to the instance `pick` chooses. One process for all of them, not one per request, which
        would hold a generator and a pending event for each of a million; the stream builds each
        request when it is reached, so a long run holds only the requests in flight."""
        engines = self.engines
        for req in requests:
            delay = req.arrival + offset - env.now
            if delay > 0:
                yield env.timeout(delay)
            engines[self.pick(req)].submit(req)

    def _least_loaded(self) -> int:
        return min(range(len(self.engines)), key=lambda i: (self.engines[i].load, i))

    def pick(self, req: wl.Request) -> int:
        n = len(self.engines)
        if n == 1:
            return 0
        if self.kind == "round_robin":
            return next(self._turn) % n
        if self.kind == "least_loaded":
            return self._least_loaded()
        if self.kind == "session_affinity":
            return self._sticky(req.session)
        if self.llm_d is not None:
            return self.llm_d.pick(req)
        return self._cache_aware(req)

    def _sticky(self, session: int) -> int:
        known = self._sessions.get(session)
        if known is not None:
            return known
        counts = self._session_counts
        fewest = counts.index(min(counts))                   # the first of those with the fewest sessions
        if session >= 0:
            self._sessions[session] = fewest
            counts[fewest] += 1
        return fewest

    def _cache_aware(self, req: wl.Request) -> int:
        loads = [e.load for e in self.engines]
        keys = req.content.keys(self.block_size, req.prompt_tokens)
        if max(loads) - min(loads) > self.balance_abs and max(loads) > self.balance_rel * min(loads):
            choice = self._least_loaded()
            known = self._match(self._routed[choice], keys)
        else:
            matched = [self._match(routed, keys) for routed in self._routed]
            best = max(range(len(self.engines)), key=lambda i: (matched[i], -loads[i], -i))
            rate = matched[best] * self.block_size / max(req.prompt_tokens, 1)
            choice = best if rate > self.cache_threshold else self._least_loaded()
            known = matched[choice]
        self._routed[choice].update(keys[known:])          # the keys before were routed there already
        return choice

    def forget(self) -> None:
        """Drop the routed keys (a run's end: run.run calls it). prefix_aware's sets hold every block key
        routed, millions on a long trace; emptied here they are freed by reference count, where the cyclic
        collector would walk each of them to free the run's objects (1.4 s of a 9 s Mooncake-trace run)."""
        for routed in self._routed:
            routed.clear()
        if self.llm_d is not None:
            self.llm_d.forget()

    @staticmethod
    def _match(routed: set, keys: list[int]) -> int:
        """Leading blocks of `keys` routed to this instance before. The keys chain the prefix and an instance
        is sent whole prompts, so a hit on block k means the instance was sent blocks 0..k: the routed
        blocks are a prefix of `keys`, found by a binary search."""
        lo, hi = 0, len(keys)            # keys[:lo] were routed here, keys[hi:] were not
        while lo < hi:
            mid = (lo + hi) // 2
            if keys[mid] in routed:
                lo = mid + 1
            else:
                hi = mid
        return lo
