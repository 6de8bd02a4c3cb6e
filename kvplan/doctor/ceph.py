"""Diagnoses of the Ceph tier and the links under it: slow ops, a saturated NIC or OSD, a pool near full.

- `ceph-op-latency`: the mean op latency on the slowest OSD (what Ceph's op_r/op_w latency counters and
  the deployed alert measure) is above the alert's threshold (the mean over the seeds; when the 95 %
  interval still holds the threshold the symptom says so and the finding is advice, unless the mean is
  above twice the threshold). Evidence: op latency p50/p99, the busiest
  OSD host and NIC. Fixes: twice the OSDs per host, the next faster device class, the next faster NIC.
- `saturated-link`: a NIC, an OSD host or an NVMe device is busy more than SATURATED of the run.
  Fixes by kind: the next faster NIC; more OSDs per host; the next NVMe generation.
- `pool-near-full`: the ceph tier, once full (a persistent tier fills in steady state), takes more than
  NEAR_FULL of what the pool holds (raw bytes / replicas). Ceph warns at 85 % (nearfull) and stops
  writes at 95 %; LMCache's objects are then refused. Fix: the OSDs per host that bring it to 60 %.
- `osd-op-threads-advice` (advice): the note raises osd_op_num_threads_per_shard 2 -> 4 against a long
  P99. More op threads shorten only the time ops wait in an OSD's queue; where the tail reads Ceph, the
  advice is judged by how busy the OSDs are and how much of an op is queueing. The simulator has no
  thread model, so this one is judged by those numbers, not by a simulation.
"""

from __future__ import annotations

import math

import numpy as np

from ..sim.bottleneck import SATURATED     # a link busier than this share of the run is saturated, as simulate says
from ..units import fmt_bytes, fmt_duration
from .case import METRICS, Case
from .tail import against, noise, severity
from .finding import Change, Finding, Fix

NEAR_FULL = 0.75
"""The ceph tier's share of the pool above which a full tier leaves too little room below Ceph's 85 % nearfull."""
TARGET_FILL = 0.6


def _faster(table: dict, current: str, key) -> str | None:
    """The catalog entry (name -> entry) next above `current` by `key` (None at the top, or for a name not in it)."""
    if current not in table:
        return None
    better = sorted((name for name in table if key(table[name]) > key(table[current])), key=lambda n: key(table[n]))
    return better[0] if better else None


def _hardware_fixes(case: Case, metric: str, osds: bool = True, device: bool = True, nic: bool = True) -> list[Fix]:
    from ..catalog import load_catalog

    c, cat, fixes = case.topo.ceph, load_catalog(), []
    if osds:
        fixes.append(Fix(summary=f"{2 * c.osds_per_host} OSDs per host instead of {c.osds_per_host}",
                         changes=[Change(path="ceph.osds_per_host", value=2 * c.osds_per_host)], metric=metric))
    if device:
        better = _faster(cat.ceph_device_classes, c.device_class, lambda d: -d.read_latency)
        if better:
            fixes.append(Fix(summary=f"{better} OSDs instead of {c.device_class}",
                             changes=[Change(path="ceph.device_class", value=better)], metric=metric))
    if nic and c.network_bandwidth is not None:
        fixes.append(Fix(summary=f"the {c.network} class's own bandwidth instead of the override",
                         changes=[Change(path="ceph.network_bandwidth", value=None)], metric=metric))
    elif nic:
        better = _faster(cat.nics, c.network, lambda n: n.bandwidth)
        if better:
            fixes.append(Fix(summary=f"{better} instead of {c.network}", changes=[Change(path="ceph.network", value=better)],
                             metric=metric))
    return fixes


def _busiest(case: Case, prefix: str) -> tuple[str | None, float]:
    best, value = None, 0.0
    for name in sorted({link.name for res in case.results for link in res.links if link.name.startswith(prefix)}):
        u = float(np.mean([next((link.utilisation for link in res.links if link.name == name), 0.0) for res in case.results]))
        if u > value:
            best, value = name, u
    return best, value


def ceph_op_latency(case: Case) -> list[Finding]:
    r = case.resolved
    if r.ceph is None or not case.results or all(res.ceph_op_latency is None for res in case.results):
        return []
    values = [res.ceph_op_latency_slowest_osd or 0.0 for res in case.results]
    verdict = against(values, r.ceph.op_latency_alert)
    slowest = float(np.mean(values))
    if slowest <= r.ceph.op_latency_alert:
        return []
    p50 = float(np.mean([res.ceph_op_latency.p50 for res in case.results if res.ceph_op_latency]))
    p99 = float(np.mean([res.ceph_op_latency.p99 for res in case.results if res.ceph_op_latency]))
    osd, osd_busy = _busiest(case, "osds/")
    nic, nic_busy = _busiest(case, "nic-")
    return [Finding(
        code="ceph-op-latency", area="ceph", severity=severity(verdict, slowest, r.ceph.op_latency_alert),
        title="Ceph ops are slower than the alert allows",
        symptom=f"one OSD op takes {fmt_duration(slowest)} on the slowest OSD (mean), above the alert's "
                f"{fmt_duration(r.ceph.op_latency_alert)}; p50 {fmt_duration(p50)}, p99 {fmt_duration(p99)}{noise(verdict)}",
        cause=f"the busiest OSD host ({osd}) is {osd_busy:.0%} busy and the busiest NIC ({nic}) {nic_busy:.0%}: ops queue "
              "behind each other",
        evidence={"op_latency_slowest_osd_s": slowest, "alert_s": r.ceph.op_latency_alert, "op_latency_p50_s": p50,
                  "op_latency_p99_s": p99, "busiest_osd_host": osd, "osd_utilisation": osd_busy, "busiest_nic": nic,
                  "nic_utilisation": nic_busy},
        fixes=_hardware_fixes(case, "ceph_op_latency"))]


def saturated_link(case: Case) -> list[Finding]:
    if not case.results:
        return []
    found = []
    for prefix, what in (("nic-", "NIC"), ("osds/", "OSD host"), ("nvme/", "NVMe device")):
        name, busy = _busiest(case, prefix)
        if name is None or busy <= SATURATED:
            continue
        if prefix == "nvme/":
            nvme = case.topo.lmcache.nvme
            fixes = [Fix(summary="a gen5 NVMe device", changes=[Change(path="lmcache.nvme.device", value="gen5")],
                         metric="ttft_p99")] if nvme.device != "gen5" else []
            if nvme.layout == "raid0":      # the node's drives striped: each doubling halves every drive's share
                fixes.append(Fix(summary=f"{2 * nvme.drives} NVMe drives per node striped into one volume (raid0)",
                                 changes=[Change(path="lmcache.nvme.drives", value=2 * nvme.drives)], metric="ttft_p99"))
        elif case.topo.ceph is not None:
            fixes = _hardware_fixes(case, "ttft_p99", osds=prefix == "osds/", device=prefix == "osds/", nic=prefix == "nic-")
        else:
            fixes = []
        found.append(Finding(
            code="saturated-link", area="ceph" if prefix != "nvme/" else "tail", severity="problem",
            title=f"the {what} link {name} is saturated",
            symptom=f"{name} is busy {busy:.0%} of the run: transfers queue on it",
            cause=f"more bytes (or ops) reach it than it moves; above {SATURATED:.0%} its queue grows quickly",
            evidence={"link": name, "utilisation": busy}, fixes=fixes))
    return found


def pool_near_full(case: Case) -> list[Finding]:
    r = case.resolved
    if r.ceph is None or not r.ceph.kv_budget_bytes:
        return []
    fill = METRICS["ceph_pool_fill"].static(r)
    if fill <= NEAR_FULL:
        return []
    c = case.topo.ceph
    osds = math.ceil(r.ceph.kv_budget_bytes * c.pool.size / TARGET_FILL / c.osd_size / c.hosts)
    return [Finding(
        code="pool-near-full", area="ceph", severity="problem",
        title="the Ceph pool will be near full when the ceph tier fills",
        symptom=f"a full ceph tier takes {fill:.0%} of what the pool holds; Ceph warns at 85 % and stops writes at 95 %",
        cause=f"the tier is {fmt_bytes(r.ceph.kv_budget_bytes)}; the pool holds {fmt_bytes(r.ceph.usable_bytes)} "
              f"({r.ceph.osds} OSDs x {fmt_bytes(r.ceph.osd_size)} / {r.ceph.pool_size} replicas), and a persistent "
              "tier fills in steady state",
        evidence={"tier_bytes": r.ceph.kv_budget_bytes, "pool_usable_bytes": r.ceph.usable_bytes, "fill_when_full": fill},
        fixes=[Fix(summary=f"{osds} OSDs per host, for {TARGET_FILL:.0%} fill",
                   changes=[Change(path="ceph.osds_per_host", value=osds)], metric="ceph_pool_fill")])]


def osd_op_threads_advice(case: Case, earlier: list[Finding]) -> list[Finding]:
    tail = next((f for f in earlier if f.code == "long-ttft-tail"), None)
    if tail is None or case.resolved.ceph is None or tail.evidence.get("tail_reading_ceph", 0) == 0:
        return []
    from ..resolved_tiers import unloaded_op_latency

    r = case.resolved
    osd, busy = _busiest(case, "osds/")
    mean_op = float(np.mean([res.ceph_op_latency.mean for res in case.results if res.ceph_op_latency] or [0.0]))
    object_bytes = r.lmcache.chunk_bytes_per_rank if r.lmcache else 0
    unloaded = unloaded_op_latency(r.ceph.device_class, r.ceph.network, r.ceph.pool_size, object_bytes)
    queued = max(mean_op - unloaded, 0.0)
    judged = (f"the OSDs are at most {busy:.0%} busy and an op waits {fmt_duration(queued)} of its "
              f"{fmt_duration(mean_op)} in queues (unloaded: {fmt_duration(unloaded)})")
    verdict = "more op threads can remove at most that wait" if busy >= SATURATED else \
              "more op threads would not shorten the tail: the OSDs are not what it waits for"
    return [Finding(
        code="osd-op-threads-advice", area="advice", severity="advice",
        title="the design note's fix for a long P99, osd_op_num_threads_per_shard 2 -> 4, judged",
        symptom=tail.symptom, cause=f"{judged}; {verdict}",
        evidence={"osd_utilisation": busy, "busiest_osd_host": osd, "op_latency_mean_s": mean_op,
                  "op_queueing_s": queued, "tail_retrieve_share": tail.evidence.get("retrieve")})]


RULES = [ceph_op_latency, saturated_link, pool_near_full]
FOLLOW_UPS = [osd_op_threads_advice]
