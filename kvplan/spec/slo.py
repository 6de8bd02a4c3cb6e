"""Targets: the latency SLO a deployment must meet, and the alert thresholds it is watched by.

SLO keys are `<metric>_<percentile>` (ttft_p99, tpot_p50, e2e_p90, ...), the same names the
planner's `--slo ttft_p99=500ms` flag uses. Monitoring defaults come from the design note:
LMCache hit ratio >= 0.8, vLLM block utilisation <= 0.7, Ceph op latency <= 5 ms.
"""

from __future__ import annotations

from typing import Sequence

from pydantic import Field, field_validator

from ..errors import Problem, SpecError, did_you_mean
from ..units import Duration, is_bare_number, parse_duration
from .base import SpecModel
from .grammar import HostName


class Slo(SpecModel):
    ttft_p50: Duration | None = None
    """Median time to first token."""
    ttft_p90: Duration | None = None
    """90th-percentile time to first token."""
    ttft_p99: Duration | None = None
    """99th-percentile time to first token."""
    tpot_p50: Duration | None = None
    """Median time per output token (after the first)."""
    tpot_p90: Duration | None = None
    """90th-percentile time per output token."""
    tpot_p99: Duration | None = None
    """99th-percentile time per output token."""
    e2e_p50: Duration | None = None
    """Median end-to-end request latency."""
    e2e_p90: Duration | None = None
    """90th-percentile end-to-end request latency."""
    e2e_p99: Duration | None = None
    """99th-percentile end-to-end request latency."""

    def targets(self) -> dict[str, float]:
        """The set targets only, by key, in seconds."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


SCRAPE_INTERVAL_MAX_S = 3600
"""The longest scrape interval kvplan deploys (an hour; Prometheus's staleness window is 5 minutes)."""


class Monitoring(SpecModel):
    min_lmcache_hit_ratio: float = Field(0.8, ge=0, le=1)
    """Alert when the cache hit ratio (prompt tokens whose KV came from vLLM's prefix cache or LMCache, vLLM's
    prefix_cache and external_prefix_cache counters) falls below this."""

    max_block_utilization: float = Field(0.7, ge=0, le=1)
    """Alert when vLLM's HBM KV block utilisation rises above this."""

    max_ceph_op_latency: Duration | None = None
    """Alert when the mean latency of one OSD op (a RADOS read or write, Ceph's op_r/op_w_latency) on the
    slowest OSD rises above this. Default: twice the slowest op this cluster serves unloaded (from the
    catalog's device class and network, for the spec's chunk size), so the alert means the OSDs queue."""

    metrics_address: HostName = "127.0.0.1"
    """Address the LMCache server's admin and metrics endpoints bind to: loopback unless Prometheus scrapes from elsewhere."""

    prometheus_port: int = Field(9090, ge=1, le=65535)
    """Port of the Prometheus server on the monitoring host."""

    scrape_interval: Duration = "15s"
    """How often Prometheus scrapes vLLM, LMCache and Ceph: whole seconds, from 1s to 1h."""

    @field_validator("scrape_interval")
    @classmethod
    def _whole_seconds(cls, value: float) -> float:
        """Prometheus reads 0 as unset (its 1-minute default would be deployed), and kvplan writes whole seconds."""
        if not (1 <= value <= SCRAPE_INTERVAL_MAX_S and float(value).is_integer()):
            raise ValueError("a scrape interval is whole seconds from 1s to 1h "
                             "(Prometheus reads 0 as unset and deploys its 1-minute default); fix: e.g. 15s")
        return value


def bare_fix(prefix: str, value: object) -> str:
    """'write 1000ms or 1000s': the number with either unit a latency target is usually given in."""
    n = f"{float(str(value)):g}"
    return f"write {prefix}{n}ms or {prefix}{n}s"


def bare_slo_problems(data: object) -> list[Problem]:
    """A spec's slo targets written as bare numbers (read from the user's file, before validation): each is refused,
    as --slo refuses them, for a latency target in seconds or milliseconds is one slip away from the other."""
    section = data.get("slo") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        return []
    return [Problem(f"slo.{key}", "a bare number: is it milliseconds or seconds?", value,
                    "a duration such as 500ms or 2s", bare_fix(f"slo.{key}: ", value))
            for key, value in section.items() if key in Slo.model_fields and is_bare_number(value)]


def parse_slo_flags(items: Sequence[str]) -> Slo:
    """`--slo ttft_p99=500ms ...` flags (kvplan plan, capacity) -> Slo; every bad item is a Problem with a fix."""
    keys = list(Slo.model_fields)
    values: dict[str, float] = {}
    problems = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in keys:
            guess = did_you_mean(key, keys) if key else None
            problems.append(Problem("--slo", f"unknown SLO key '{key}'" if sep else "expected KEY=DURATION", item,
                                    ", ".join(keys), f"did you mean '{guess}={value or '500ms'}'?" if guess
                                    else "write it like --slo ttft_p99=500ms"))
            continue
        if is_bare_number(value):
            problems.append(Problem(f"--slo {key}", "a bare number: is it milliseconds or seconds?", value,
                                    "a duration such as 500ms or 2s", bare_fix(f"--slo {key}=", value.strip())))
            continue
        try:
            values[key] = parse_duration(value.strip())
        except Exception:
            problems.append(Problem(f"--slo {key}", "not a duration", value, "a duration such as 500ms or 2s",
                                    f"write it like --slo {key}=500ms"))
    if problems:
        raise SpecError(problems)
    return Slo(**values)
