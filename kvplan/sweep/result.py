"""SweepResult: the metrics of every point of a sweep, as mean and 95 % confidence interval over seeds.

A *point* is one variant of the spec (the values of the varied paths) run with each seed; its
metrics are the headline numbers of those runs summarised as `Stat`s: the mean over seeds and
the half-width of its 95 % Student-t confidence interval, computed by the same code as
`kvplan simulate --seeds N` (`kvplan.sweep.confidence.confidence`; 0 with one seed). A metric
a point cannot have (the hit ratio of a tier it does not have) is null.

Metrics, by key (latencies in seconds, shares and ratios between 0 and 1):

- `requests_per_s`, `goodput_per_s`: completed requests per second, and those meeting every SLO target;
- `ttft_p50` ... `e2e_p99`: percentiles over requests of time to first token, time per output
  token and end-to-end latency (the same keys as the spec's `slo`);
- `lmcache_hit`: LMCache's token hit ratio;
- `<tier>_share` (hbm, ddr, nvme, ceph): the share of all prompt tokens the tier served, and
  `recomputed`: the share recomputed (these add up to 1);
- `<tier>_hit`: tokens the tier served over the tokens that reached it ("tok hit" in simulate);
- `preemptions`: vLLM preemptions in the run.

The JSON (`model_dump_json`) and the CSV (`to_csv`) hold the same numbers, and the same sweep
always writes the same bytes.
"""

from __future__ import annotations

import csv
import io
from typing import Callable

from pydantic import BaseModel, ConfigDict

from ..cost import CostBreakdown
from ..sim.result import SimResult
from ..spec.overrides import RecordsOverrides
from .confidence import confidence

TIERS = ("hbm", "ddr", "nvme", "ceph")


def _tier(name: str, attr: str) -> Callable[[SimResult], float | None]:
    def get(r: SimResult) -> float | None:
        tier = r.tier(name)
        return None if tier is None else getattr(tier, attr)
    return get


def _share(tokens: int, r: SimResult) -> float:
    return tokens / r.prompt_tokens if r.prompt_tokens else 0.0


METRICS: dict[str, Callable[[SimResult], float | None]] = {
    "requests_per_s": lambda r: r.requests_per_s,
    "goodput_per_s": lambda r: r.goodput_per_s,
    **{f"{d}_{p}": (lambda r, d=d, p=p: getattr(getattr(r, d), p))
       for d in ("ttft", "tpot", "e2e") for p in ("p50", "p90", "p99")},
    "lmcache_hit": lambda r: r.lmcache_hit_ratio,
    **{f"{t}_share": _tier(t, "served_share") for t in TIERS},
    "recomputed": lambda r: _share(r.recomputed_tokens, r),
    **{f"{t}_hit": _tier(t, "token_hit_ratio") for t in TIERS},
    "preemptions": lambda r: float(r.preemptions),
}
"""Every metric of a point, in output order: key -> how to read it from one run."""

UNITS = {**{f"{d}_{p}": "s" for d in ("ttft", "tpot", "e2e") for p in ("p50", "p90", "p99")},
         "requests_per_s": "", "goodput_per_s": "", "preemptions": "",
         **{key: "ratio" for key in METRICS if key.endswith(("_share", "_hit")) or key == "recomputed"}}
"""The unit each CSV column of a metric ends in: seconds, a ratio between 0 and 1, or none (a rate or a count, whose
key names it)."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Stat(_Model):
    mean: float
    ci95: float
    """Half-width of the 95 % confidence interval of the mean (0 with a single seed)."""


def summarise(results: list[SimResult]) -> dict[str, Stat | None]:
    """Mean and 95 % CI over `results` (one per seed) of every metric in METRICS."""
    out: dict[str, Stat | None] = {}
    for key, get in METRICS.items():
        values = [get(r) for r in results]
        if any(v is None for v in values):
            out[key] = None
            continue
        mean, half = confidence(values)
        out[key] = Stat(mean=mean, ci95=half)
    return out


class SweepPoint(_Model):
    values: dict[str, str]
    """The value of each varied path, as written on the command line."""
    spec_hash: str
    """Hash of this point's full spec (its runs' key in the run cache)."""
    seeds: list[int]
    metrics: dict[str, Stat | None]
    cost: CostBreakdown | None = None
    """The point's hourly bill and $ per 1M tokens (None when a price is missing from catalog and spec)."""
    slo: dict[str, float] = {}
    """The point's SLO targets (seconds, by key such as ttft_p99), from its spec."""

    def slo_met(self) -> bool | None:
        """Whether the point's mean metrics meet every SLO target (None without targets)."""
        if not self.slo:
            return None
        return all(self.metrics.get(key) is not None and self.metrics[key].mean <= target
                   for key, target in self.slo.items())


class SweepResult(RecordsOverrides, _Model):
    name: str
    """The swept spec's name."""
    spec_hash: str
    """Hash of the spec before any variation."""
    varied: list[str]
    """The varied dotted paths, in --vary order."""
    zip: bool
    """True: the values were paired position by position; False: every combination."""
    points: list[SweepPoint]

    def to_csv(self) -> str:
        """One row per point: the varied values, spec hash, seeds; <metric>_mean and <metric>_ci95, each name ending
        in its unit (`ttft_p99_mean_s`, `ddr_share_mean_ratio`); the bill (`usd_per_hour`, `usd_per_1m_generated_tokens`); and
        each SLO target (`slo_ttft_p99_s`) with `slo_met` (true when every mean meets its target). Empty cells: no
        such value."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        targets = sorted({key for point in self.points for key in point.slo})
        writer.writerow([*self.varied, "spec_hash", "seeds",
                         *(f"{key}_{part}" + (f"_{UNITS[key]}" if UNITS[key] else "")
                           for key in METRICS for part in ("mean", "ci95")),
                         "usd_per_hour", "usd_per_1m_generated_tokens", *(f"slo_{key}_s" for key in targets), "slo_met"])
        for point in self.points:
            cells: list[str] = []
            for key in METRICS:
                stat = point.metrics.get(key)
                cells += ["", ""] if stat is None else [repr(stat.mean), repr(stat.ci95)]
            cost = point.cost
            per_token = cost.usd_per_1m_generated_tokens if cost is not None else None
            met = point.slo_met()
            writer.writerow([*(point.values[p] for p in self.varied), point.spec_hash[:12],
                             " ".join(map(str, point.seeds)), *cells,
                             "" if cost is None else repr(cost.usd_per_hour), "" if per_token is None else repr(per_token),
                             *(repr(point.slo[key]) if key in point.slo else "" for key in targets),
                             "" if met is None else str(met).lower()])
        return buffer.getvalue()


__all__ = ["METRICS", "Stat", "SweepPoint", "SweepResult", "summarise"]
