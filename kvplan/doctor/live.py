"""Diagnoses of a live stack, from what `kvplan observe` reads (a Snapshot: counters since each component
started, and which components answer).

- `component-down`: a component observe found down (a vLLM instance, an LMCache server or its L2 tier,
  RGW, the Ceph pool or an OSD), with what it answered and the deploy that restarts it.
- `live-tier-undersized`: LMCache's L1 (the ddr tier) is full (MP mode evicts in batches and keeps it
  60-80 % full, so FULL of its size is full) and its lookups find less than the monitoring minimum in
  it, while L2 (nvme, ceph) serves what L1 lost, or L1 had no room for chunks (its allocation failures:
  a prefetch from L2 needs room in L1, and one that finds none is not served), or nothing hits. The fix is sized from the spec's
  workload (`kvplan size`'s 90 % point) and proven by simulation like any other.
- `live-hit-ratio`: the cache hit ratio (vLLM prefix-cache and LMCache tokens over prompt tokens) below
  monitoring.min_lmcache_hit_ratio, as the deployed alert watches it, once vLLM finished MIN_REQUESTS.
- `live-ceph-latency`: the slowest OSD's apply latency (`ceph osd perf`) above the Ceph op alert.
- `live-preemptions`: vLLM preempted requests (its KV cache did not hold the batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tier_checks import size_for
from ..units import fmt_bytes, fmt_duration
from .case import Case
from .finding import Change, Finding, Fix
from .hit_ratio import REACH

if TYPE_CHECKING:
    from ..live.observe import Snapshot

FULL = 0.6
"""L1 held at least this share of its size: MP mode's batch eviction keeps a full L1 between 60 and 80 %."""


def _redeploy(component: str, spec: str) -> str:
    tags = ("vllm" if component.startswith("vllm") else "lmcache,vllm" if component.startswith("lmcache")
            else "ceph")
    return f"kvplan deploy {spec} -i INVENTORY --tags {tags}"


def components_down(case: Case, snap: Snapshot, spec: str) -> list[Finding]:
    return [Finding(code="component-down", area="live", severity="problem", title=f"{c.name} is down",
                    symptom=f"{c.name} did not answer as it should: {c.detail}",
                    cause="the process is stopped, crashed or unreachable from here" if "refused" in c.detail.lower()
                    or "timed out" in c.detail.lower() else c.detail,
                    evidence={"component": c.name, "detail": c.detail}, action=_redeploy(c.name, spec))
            for c in snap.down()]


def _vllm_sum(snap: Snapshot, key: str) -> float:
    return sum(v.get(key, 0.0) for v in snap.vllm.values())


def live_tier_undersized(case: Case, snap: Snapshot, spec: str) -> list[Finding]:
    r, lm = case.resolved, snap.lmcache
    ddr = r.lmcache.tier("ddr") if r.lmcache else None
    if ddr is None or not lm or not lm.get("lookup_requested_tokens") or "l1_used_bytes" not in lm:
        return []
    servers = sum(1 for c in snap.components if c.name.startswith("lmcache") and c.up)
    capacity = ddr.capacity_bytes * max(servers, 1)
    fill = lm["l1_used_bytes"] / capacity
    requested = lm["lookup_requested_tokens"]
    l1, l2 = lm.get("l1_hit_tokens", 0.0) / requested, lm.get("l2_hit_tokens", 0.0) / requested
    starved = lm.get("l1_allocation_failed_chunks", 0.0)
    if fill < FULL or l1 >= r.monitoring.min_lmcache_hit_ratio or not (l2 > l1 or starved or l1 + l2 == 0):
        return []
    where_from = ""
    fixes, evidence = [], {"l1_used_bytes": lm["l1_used_bytes"], "l1_capacity_bytes": capacity, "l1_fill": fill,
                           "l1_hit_ratio": l1, "l2_hit_ratio": l2, "lookup_requested_tokens": requested,
                           "l1_allocation_failed_chunks": starved}
    view = case.sizing.tier("ddr") if case.sizing else None
    if view is not None:
        target = next(t for t in view.targets if t.share == REACH)
        evidence |= {"spec_workload_working_set_bytes": view.working_set_bytes,
                     f"spec_workload_capacity_for_{REACH}pct_bytes": target.capacity_bytes}
        if target.capacity_bytes <= ddr.capacity_bytes * ddr.caches:
            where_from = (f"; the spec's workload needs only {fmt_bytes(target.capacity_bytes)} for {REACH} % of its reuse, "
                          "so the live traffic reuses more than the spec says: bench the spec's workload (kvplan bench) "
                          "or describe the live traffic in the spec, and run doctor on it")
        else:
            fixes.append(Fix(summary=f"size ddr for {REACH} % of the spec workload's reuse",
                             changes=[Change(path="lmcache.ddr.size", value=size_for(r, ddr, target.capacity_tokens / r.instances))],
                             metric="ddr_served_share"))
    where = (f"L2 (nvme/ceph) found another {l2:.0%} of them, chunks L1 had evicted" if l2 > l1 else
             f"L2 found {l2:.0%} of them" if l2 else "nothing else holds them")
    if starved:
        where += (f"; L1 had no room for {starved:,.0f} chunks (stores, and prefetches from L2 that are then not "
                  "served: the reuse is recomputed)")
    return [Finding(code="live-tier-undersized", area="live", severity="problem",
                    title="LMCache's ddr tier (L1) is too small for the reuse it sees",
                    symptom=f"L1 answers {l1:.0%} of the tokens LMCache looks up, below the {r.monitoring.min_lmcache_hit_ratio:.0%} "
                            "minimum",
                    cause=f"L1 is full ({fmt_bytes(lm['l1_used_bytes'])} held of {fmt_bytes(capacity)}: {fill:.0%}, MP mode "
                          f"evicts at 80 %); {where}{where_from}", evidence=evidence, fixes=fixes)]


MIN_REQUESTS = 20
"""Requests vLLM must have finished before its cumulative hit ratio is judged (a stack that served one prompt has
no hit ratio to speak of)."""


def live_hit_ratio(case: Case, snap: Snapshot, spec: str) -> list[Finding]:
    r = case.resolved
    prompt = _vllm_sum(snap, "prompt_tokens")
    if (not prompt or _vllm_sum(snap, "finished_requests") < MIN_REQUESTS
            or "computed_tokens" not in next(iter(snap.vllm.values()), {})):
        return []
    hit = 1 - _vllm_sum(snap, "computed_tokens") / prompt
    if hit >= r.monitoring.min_lmcache_hit_ratio:
        return []
    return [Finding(code="live-hit-ratio", area="live", severity="problem", title="the cache hit ratio is below its alert",
                    symptom=f"{hit:.1%} of prompt tokens came from vLLM's prefix cache or LMCache, below "
                            f"{r.monitoring.min_lmcache_hit_ratio:.0%}",
                    cause=f"of {prompt:,.0f} prompt tokens since vLLM started, {_vllm_sum(snap, 'hbm_tokens'):,.0f} came from "
                          f"its prefix cache and {_vllm_sum(snap, 'lmcache_tokens'):,.0f} from LMCache",
                    evidence={"prompt_tokens": prompt, "cache_hit_ratio": hit})]


def live_ceph_latency(case: Case, snap: Snapshot, spec: str) -> list[Finding]:
    r = case.resolved
    if r.ceph is None or not snap.ceph or "osd_apply_latency_ms_max" not in snap.ceph:
        return []
    latency = snap.ceph["osd_apply_latency_ms_max"] / 1000
    if latency <= r.ceph.op_latency_alert:
        return []
    return [Finding(code="live-ceph-latency", area="live", severity="problem", title="an OSD is slower than the alert allows",
                    symptom=f"the slowest OSD applies an op in {fmt_duration(latency)}, above the alert's "
                            f"{fmt_duration(r.ceph.op_latency_alert)}",
                    cause="its device or its queue is slow (`ceph osd perf` names it)",
                    evidence={"osd_apply_latency_max_s": latency, "alert_s": r.ceph.op_latency_alert})]


def live_preemptions(case: Case, snap: Snapshot, spec: str) -> list[Finding]:
    preempted, finished = _vllm_sum(snap, "preemptions"), _vllm_sum(snap, "finished_requests")
    if not finished or preempted / finished <= 0.01:
        return []
    return [Finding(code="live-preemptions", area="live", severity="problem", title="vLLM preempts requests",
                    symptom=f"{preempted:,.0f} preemptions over {finished:,.0f} finished requests",
                    cause="its KV cache does not hold the batch it admits: preempted requests are recomputed",
                    evidence={"preemptions": preempted, "finished_requests": finished})]


RULES = [components_down, live_tier_undersized, live_hit_ratio, live_ceph_latency, live_preemptions]
