"""From per-request records to the run's summary: latency percentiles, throughput, SLO, alerts.

Percentiles use numpy's default linear interpolation. Goodput counts the requests that met every
SLO target on their own; the SLO check compares each target (e.g. ttft_p99 <= 500 ms) with the
run's percentile. Alerts are the design note's monitoring thresholds (spec `monitoring`), each on
the figure the deployed Prometheus rule of the same name watches: the cache hit ratio (prompt
tokens whose KV came from vLLM's prefix cache or an LMCache tier) below its minimum, mean HBM block utilisation above its maximum, and the mean latency of one OSD op on the
slowest OSD above its maximum (the rule: max over OSDs of rate(op latency sum) / rate(op count)).
"""

from __future__ import annotations

import numpy as np

from ..resolve import Resolved
from ..units import fmt_duration
from .result import RequestRow, RequestTable, SloCheck, StageResult, Summary


def summary(values) -> Summary:
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return Summary(mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Summary(mean=float(a.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


def op_summary(latencies, counts) -> Summary:
    """Ceph op latencies recorded once per group of equal ops (`counts` ops took `latencies[i]`), as
    a distribution over single ops: mean weighted by count, percentiles of the inverted CDF."""
    a, w = np.asarray(latencies, dtype=float), np.asarray(counts, dtype=float)
    if a.size == 0 or w.sum() == 0:
        return Summary(mean=0.0, p50=0.0, p90=0.0, p99=0.0)
    p50, p90, p99 = np.percentile(a, [50, 90, 99], weights=w, method="inverted_cdf")
    return Summary(mean=float(np.average(a, weights=w)), p50=float(p50), p90=float(p90), p99=float(p99))


def slowest_mean(latencies, counts, hosts) -> float:
    """The largest per-host mean op latency: the simulator's OSDs of a host are one pooled server, so
    each of them has its host's mean, and this is the deployed rule's max over OSDs."""
    a, w, h = (np.asarray(x, dtype=float) for x in (latencies, counts, hosts))
    if a.size == 0:
        return 0.0
    ids = h.astype(np.int64)
    ops = np.bincount(ids, weights=w)
    seconds = np.bincount(ids, weights=a * w)
    seen = ops > 0
    return float((seconds[seen] / ops[seen]).max())


def latency(table: RequestTable) -> dict[str, Summary]:
    return {"ttft": summary(table.ttft), "tpot": summary(table.tpot[table.output_tokens > 1]),
            "e2e": summary(table.e2e), "queue": summary(table.queue)}


def slo_checks(r: Resolved, lat: dict[str, Summary]) -> list[SloCheck]:
    checks = []
    for key, target in r.slo.targets().items():
        metric, pct = key.rsplit("_", 1)
        value = getattr(lat[metric], pct)
        checks.append(SloCheck(key=key, target=target, value=value, met=value <= target))
    return checks


def good_requests(r: Resolved, table: RequestTable) -> int:
    good = np.ones(len(table), dtype=bool)
    for key, target in r.slo.targets().items():
        good &= getattr(table, key.rsplit("_", 1)[0]) <= target
    return int(good.sum())


def alerts(r: Resolved, cache_hit: float | None, mean_block_utilisation: float,
           ceph_op: float | None) -> list[str]:
    """`ceph_op`: mean seconds of one OSD op on the slowest OSD (`slowest_mean`), None without Ceph traffic."""
    m, out = r.monitoring, []
    if cache_hit is not None and cache_hit < m.min_lmcache_hit_ratio:
        offload = "vLLM's native CPU offloading" if r.kv_offloading is not None else "LMCache"
        out.append(f"cache hit ratio {cache_hit:.1%} (prompt tokens whose KV came from vLLM's prefix cache or "
                   f"{offload}) is below {m.min_lmcache_hit_ratio:.0%}")
    if mean_block_utilisation > m.max_block_utilization:
        out.append(f"HBM block utilisation {mean_block_utilisation:.1%} is above {m.max_block_utilization:.0%}")
    if ceph_op is not None and r.ceph is not None and ceph_op > r.ceph.op_latency_alert:
        out.append(f"Ceph op latency {fmt_duration(ceph_op)} (mean of one OSD op, slowest OSD) is above "
                   f"{fmt_duration(r.ceph.op_latency_alert)}")
    return out


def stage(r: Resolved, table: RequestTable, index: int, load: str, first: int, last: int, start: float, end: float,
          rejected: int) -> StageResult:
    """The figures of one load stage, from its requests' rows first..last-1 (ids are given in the order requests are
    sent, so a stage's requests are consecutive rows). Its span runs from its first arrival to its last completion at
    the engine, as the run's does (the run's duration ends at its last completion)."""
    part = RequestTable(**{name: getattr(table, name)[first:last] for name in RequestRow._fields})
    n = len(part)
    done = part.arrival + part.e2e - r.step.request_overhead
    span = float(done.max() - part.arrival.min()) if n else 0.0
    lat = latency(part)
    prompt, generated = int(part.prompt_tokens.sum()), int(part.output_tokens.sum())
    rate = (lambda x: x / span) if span > 0 else (lambda x: 0.0)
    return StageResult(index=index, load=load, start=start, end=end, requests=n, rejected_requests=rejected,
                       duration=span, prompt_tokens=prompt, generated_tokens=generated,
                       recomputed_tokens=int(part.recomputed_tokens.sum()), ttft=lat["ttft"], tpot=lat["tpot"],
                       e2e=lat["e2e"], queue=lat["queue"], requests_per_s=rate(n), prompt_tokens_per_s=rate(prompt),
                       generated_tokens_per_s=rate(generated), goodput_per_s=rate(good_requests(r, part)))
