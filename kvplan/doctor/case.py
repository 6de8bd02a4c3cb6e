"""The case a doctor's rules look at: one spec, its simulated runs (one per seed), and the metrics they judge.

`Case` carries the spec three ways (the Topology, its Resolved numbers, and the mapping as the file
wrote it, which fixes change path by path), the runs, and what is costly to compute and used by several
rules only once (`sizing`: `kvplan size`'s view of the same workload). `METRICS` names every figure a fix
is judged on: how to read it from a SimResult and which way is better. Shares are of prompt tokens (the
cache hit ratio: from vLLM's prefix cache or any LMCache tier; `ddr share`: from that tier); `Ceph op
latency` is the mean op on the slowest OSD; `pool fill` the share of the pool a full ceph tier takes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Literal

import numpy as np

from ..errors import SpecError
from ..resolve import Resolved
from ..sim.result import SimResult
from ..spec import Topology


@dataclass(frozen=True)
class Metric:
    label: str
    better: Literal["lower", "higher"]
    unit: Literal["s", "ratio", "count"]
    of: Callable[[SimResult], float]
    static: Callable[[Resolved], float] | None = None
    """For a figure of the spec itself rather than of a run (then `of` is not used)."""

    def value(self, result: SimResult, resolved: Resolved) -> float:
        return self.static(resolved) if self.static else self.of(result)


def _served(tier: str) -> Callable[[SimResult], float]:
    return lambda r: r.tier(tier).served_share if r.tier(tier) else 0.0


METRICS: dict[str, Metric] = {
    "ttft_p99": Metric("TTFT p99", "lower", "s", lambda r: r.ttft.p99),
    "ttft_p50": Metric("TTFT p50", "lower", "s", lambda r: r.ttft.p50),
    "tpot_p99": Metric("TPOT p99", "lower", "s", lambda r: r.tpot.p99),
    "cache_hit_ratio": Metric("cache hit ratio", "higher", "ratio",
                              lambda r: sum(t.served_share for t in r.tiers)),
    "lmcache_hit_ratio": Metric("LMCache hit ratio", "higher", "ratio", lambda r: r.lmcache_hit_ratio or 0.0),
    "ddr_served_share": Metric("ddr share", "higher", "ratio", _served("ddr")),
    "nvme_served_share": Metric("nvme share", "higher", "ratio", _served("nvme")),
    "ceph_served_share": Metric("ceph share", "higher", "ratio", _served("ceph")),
    "preemptions_per_request": Metric("preemptions/request", "lower", "count", lambda r: r.preemptions / max(r.requests, 1)),
    "ceph_op_latency": Metric("Ceph op latency", "lower", "s",
                              lambda r: r.ceph_op_latency_slowest_osd or 0.0),
    "ceph_pool_fill": Metric("pool fill", "lower", "ratio", lambda r: 0.0,
                             static=lambda rv: (rv.ceph.kv_budget_bytes or 0) / rv.ceph.usable_bytes if rv.ceph else 0.0),
}


@dataclass
class Case:
    topo: Topology
    resolved: Resolved
    data: dict
    """The spec as its file maps it (fixes are applied to this, so units stay as the user wrote them)."""
    base_dir: Path | None
    results: list[SimResult] = field(default_factory=list)
    """One run per seed, in seed order (empty for a live case)."""

    @property
    def seeds(self) -> list[int]:
        return [r.seed for r in self.results]

    def mean(self, metric: str | Callable[[SimResult], float]) -> float:
        if isinstance(metric, str):
            return float(np.mean([METRICS[metric].value(r, self.resolved) for r in self.results]))
        return float(np.mean([metric(r) for r in self.results]))

    def tier_mean(self, tier: str, of: Callable) -> float:
        """The mean over the runs of `of(TierResult)` for `tier` (0 when no run has the tier)."""
        values = [of(res.tier(tier)) for res in self.results if res.tier(tier) is not None]
        return float(np.mean(values)) if values else 0.0

    @property
    def mean_sequence_tokens(self) -> float:
        """Prompt plus output tokens of the mean request, over every run."""
        return float(np.mean(self.column("prompt_tokens") + self.column("output_tokens")))

    def column(self, name: str) -> np.ndarray:
        """A per-request column over every run, run after run."""
        return np.concatenate([getattr(r.per_request, name) for r in self.results])

    @cached_property
    def sizing(self):
        """`kvplan size` for the first seed (None when it cannot be built, e.g. a trace it refuses)."""
        from ..sizing import size

        try:
            return size(self.topo, self.resolved, seed=self.results[0].seed if self.results else None)
        except SpecError:
            return None

    @cached_property
    def streams(self):
        """The workload's chunk and block streams for the first seed (kvplan.sizing.view.workload_streams)."""
        from ..sizing.view import workload_streams

        return workload_streams(self.resolved, self.seeds[0] if self.results else self.resolved.workload.seed)

    @cached_property
    def reuse_times(self) -> np.ndarray:
        """Seconds from each reused chunk's previous reference to its lookup (empty without LMCache)."""
        return self.streams.reuse_times() if self.resolved.lmcache is not None else np.empty(0)

    @cached_property
    def usd_per_hour(self) -> float | None:
        from ..cost import cost_of

        try:
            return cost_of(self.topo, self.resolved, self.results).usd_per_hour
        except SpecError:
            return None


__all__ = ["Case", "METRICS", "Metric"]
