"""Observe: what the live stack says about itself, read at one moment into a `Snapshot`.

- vLLM, per instance, from its Prometheus `/metrics`: prompt tokens by source (local_cache_hit
  = vLLM's prefix cache, external_kv_transfer = LMCache, local_compute = recomputed), prefix-cache
  and external-prefix-cache queries and hits, generated tokens, preemptions, finished requests,
  the TTFT histogram's sum and count, and KV usage; `/health` says whether it is up.
- LMCache, from its HTTP API: `/healthcheck`, `/status` (L1 bytes in use) and its own Prometheus
  `/metrics` (the MP server's OTel counters): tokens its lookups asked for and found, split into
  the tokens L1 (ddr) held and those L2 (nvme, ceph) added, and the chunks submitted to and stored
  in L2 (a store that failed, e.g. Ceph unreachable, is submitted and never completed). MP mode
  runs one server per node: with the API on every address (metrics_address 0.0.0.0) kvplan reads
  the server of each host a target is on, and adds their counters up.
- Ceph, with the `ceph` CLI where this host has it: the KV pool's objects, stored bytes and
  cumulative bytes read and written (`rados df`), OSD commit/apply latency (`ceph osd perf`), how
  many OSDs are up (`ceph osd stat`: one down makes the component "ceph osds" down) and the RGW
  bucket's object count (`radosgw-admin bucket stats`). RGW itself is up when its S3 port answers
  HTTP where LMCache reaches it (the spec's rgw address, else its DNS name).

A component that does not answer is recorded as down with the reason; observing never raises
for it. `Observed` (observed.py) is the difference of two snapshots plus the client's view.
"""

from __future__ import annotations

import http.client
import json
import math
import shutil
import subprocess
import time

from pydantic import BaseModel, ConfigDict

from ..resolve import Resolved
from .target import Target
from .bounded import Deadline, fetch, json_body

VLLM_COUNTERS = {
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prefix_cache_queries_total": "prefix_cache_queries",
    "vllm:prefix_cache_hits_total": "prefix_cache_hits",
    "vllm:external_prefix_cache_queries_total": "external_prefix_cache_queries",
    "vllm:external_prefix_cache_hits_total": "external_prefix_cache_hits",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:request_success_total": "finished_requests",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
}
"""Prometheus series kvplan reads -> its name in a snapshot (label sets are summed)."""

PROMPT_SOURCES = {"local_cache_hit": "hbm_tokens", "external_kv_transfer": "lmcache_tokens",
                  "local_compute": "computed_tokens"}
"""vllm:prompt_tokens_by_source_total{source=...} -> snapshot name."""

LMCACHE_COUNTERS = {
    "lmcache_mp_lookup_requested_tokens_total": "lookup_requested_tokens",
    "lmcache_mp_lookup_hit_tokens_total": "lookup_hit_tokens",
    "lmcache_mp_lookup_hit_l1_tokens_total": "l1_hit_tokens",
    "lmcache_mp_lookup_hit_l2_tokens_total": "l2_hit_tokens",
    "lmcache_mp_l2_store_submitted_objects_chunks_total": "l2_submitted_chunks",
    "lmcache_mp_l2_store_completed_objects_chunks_total": "l2_stored_chunks",
    "lmcache_mp_l1_allocation_failure_chunks_total": "l1_allocation_failed_chunks",
}
"""The LMCache MP server's counters kvplan reads (OTel names as its Prometheus exporter writes them: dots
to `_`, the unit, `_total`) -> their name in a snapshot, summed over label sets (model_name, cache_salt).
lookup_hit_l1 + lookup_hit_l2 = lookup_hit for every lookup (lmcache/v1/mp_observability/subscribers/
metrics/lookup.py). l1_allocation_failure counts chunks L1 had no room for, stores and prefetches from L2
alike (metrics/l1_failures.py). A counter appears at its first increment: a server that exports any lmcache_mp_
series but not these has counted zero."""


class Component(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    up: bool
    detail: str = ""


class Snapshot(BaseModel):
    """Counters of the live stack at one moment (cumulative since each component started)."""

    model_config = ConfigDict(frozen=True)
    taken_at: float
    """Unix time."""
    components: list[Component]
    vllm: dict[str, dict[str, float]]
    """Target URL -> counters (VLLM_COUNTERS and PROMPT_SOURCES names); only instances that answered."""
    lmcache: dict[str, float] | None
    """l1_used_bytes (`/status`) and the LMCACHE_COUNTERS names (`/metrics`), summed over the servers read; None
    when one did not answer."""
    ceph: dict[str, float] | None
    """pool_objects, pool_stored_bytes, pool_read_bytes, pool_write_bytes, osd_apply_latency_ms_max,
    osd_commit_latency_ms_max, osds, osds_up, rgw_objects."""

    def down(self) -> list[Component]:
        return [c for c in self.components if not c.up]


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text exposition (parsed by prometheus_client) -> the VLLM_COUNTERS / PROMPT_SOURCES values.
    Counters and histogram sums and counts add up over label sets (several engines of one server); a gauge
    is their mean (kv_cache_usage_perc 0.5 and 0.6 is 0.55, not 1.1). Raises ValueError for text that is not
    Prometheus exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    gauges: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, float(sample.value)
            if name in VLLM_COUNTERS:
                key = VLLM_COUNTERS[name]
                if family.type == "gauge":
                    gauges.setdefault(key, []).append(value)
                else:
                    sums[key] = sums.get(key, 0.0) + value
            elif name == "vllm:prompt_tokens_by_source_total" and labels.get("source") in PROMPT_SOURCES:
                key = PROMPT_SOURCES[labels["source"]]
                sums[key] = sums.get(key, 0.0) + value
    return {**sums, **{key: sum(v) / len(v) for key, v in gauges.items()}}


DEADLINE_FACTOR = 3
"""A snapshot's reads of the stack end within this many times the per-request timeout (observe and doctor:
3 x --timeout); a component not read by then is down, with the deadline as the reason."""


def _get(target: Target, path: str, timeout: float, deadline: Deadline | None = None) -> tuple[int, bytes]:
    return fetch(target, path, timeout, deadline)


def misbehaving(values: dict[str, float]) -> str:
    """What is wrong with counters read from a component ("" when nothing): a count that is NaN, infinite or
    negative is a misbehaving exporter, not a measurement."""
    bad = [f"{k} {v:g}" for k, v in sorted(values.items()) if not math.isfinite(v) or v < 0]
    return f"reports {', '.join(bad)}: not a count (a misbehaving exporter)" if bad else ""


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def observe_vllm(target: Target, timeout: float, deadline: Deadline | None = None) -> tuple[Component, dict[str, float] | None]:
    name = f"vllm {target.url}"
    try:
        status, _ = _get(target, "/health", timeout, deadline)
        if status != 200:
            return Component(name=name, up=False, detail=f"/health answered HTTP {status}"), None
        status, body = _get(target, "/metrics", timeout, deadline)
    except (OSError, http.client.HTTPException) as exc:
        return Component(name=name, up=False, detail=_reason(exc)), None
    if status != 200:
        return Component(name=name, up=False, detail=f"/metrics answered HTTP {status}"), None
    try:
        values = parse_metrics(body.decode(errors="replace"))
    except ValueError as exc:
        return Component(name=name, up=False, detail=f"/metrics is not Prometheus text: {_reason(exc)}"), None
    if wrong := misbehaving(values):
        return Component(name=name, up=False, detail=f"/metrics {wrong}"), None
    return Component(name=name, up=True), values


def lmcache_endpoint(r: Resolved) -> tuple[str, int]:
    """The LMCache server's HTTP API as the deploy starts it: the spec's metrics address (loopback for 0.0.0.0)."""
    return r.lmcache.http_address, r.lmcache.http_port


def lmcache_servers(r: Resolved, targets: list[Target]) -> list[Target]:
    """The LMCache servers behind `targets`: with the API on every address (0.0.0.0), the one on each host a target
    is on (MP mode runs one per node); with it on one address, that one (loopback: this host's). None without an
    MP server (an empty list)."""
    if r.lmcache is None or r.lmcache.mode != "mp":
        return []
    port = r.lmcache.http_port
    if r.lmcache.http_host in ("0.0.0.0", "::") and targets:
        hosts = dict.fromkeys(t.host for t in targets)
        return [Target.parse(f"http://{_bracketed(host)}:{port}") for host in hosts]
    return [Target.parse("http://{}:{}".format(*lmcache_endpoint(r)))]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _storage_manager(body: bytes) -> dict:
    """LMCache's `/status` -> its storage_manager object ({} when it has none); ValueError for a body of another
    shape."""
    status = json_body(body)
    manager = status.get("storage_manager", {}) if isinstance(status, dict) else None
    if not isinstance(manager, dict):
        raise ValueError("/status is not LMCache's status object (a JSON object with a storage_manager object)")
    return manager


def _status_values(manager: dict) -> tuple[dict[str, float], list[str]]:
    """l1_used_bytes (when the status has it) and the L2 tiers that are off, from LMCache's storage_manager."""
    values: dict[str, float] = {}
    used = manager.get("l1_usage")
    if isinstance(used, list) and used:
        if isinstance(used[0], bool) or not isinstance(used[0], (int, float)):
            raise ValueError(f"/status's storage_manager.l1_usage[0] is {str(used[0])[:40]!r}, not a byte count")
        values["l1_used_bytes"] = float(used[0])
    adapters = manager.get("l2_adapters", [])
    if not isinstance(adapters, list):
        raise ValueError("/status's storage_manager.l2_adapters is not a list")
    return values, [_tier_off(a) for a in adapters if isinstance(a, dict) and a.get("is_healthy") is False]


def observe_lmcache(r: Resolved, timeout: float, api: Target | None = None,
                    deadline: Deadline | None = None) -> tuple[Component, dict | None]:
    if api is None:
        api = Target.parse("http://{}:{}".format(*lmcache_endpoint(r)))
    name = f"lmcache {api.url}"
    values: dict[str, float] = {}
    try:
        status, _ = _get(api, "/healthcheck", timeout, deadline)
        if status != 200:
            return Component(name=name, up=False, detail=f"/healthcheck answered HTTP {status}"), None
        status, body = _get(api, "/status", timeout, deadline)
        off: list[str] = []
        if status == 200:
            values, off = _status_values(_storage_manager(body))
        status, body = _get(api, "/metrics", timeout, deadline)
        counters = parse_lmcache_metrics(body.decode(errors="replace")) if status == 200 else None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return Component(name=name, up=False, detail=_reason(exc)), None
    if wrong := misbehaving({**values, **(counters or {})}):
        return Component(name=name, up=False, detail=wrong), None
    if off:
        return Component(name=name, up=False, detail="; ".join(off)), ({**values, **counters} if counters else values or None)
    if counters is None:
        return Component(name=name, up=True, detail="exports no lmcache_mp_ metrics (started with "
                                                    "--disable-metrics? `kvplan deploy` the spec again)"), values or None
    return Component(name=name, up=True), {**values, **counters}


def _tier_off(adapter: dict) -> str:
    """An L2 adapter the server reports unhealthy. LMCache 0.5.6's S3 adapter turns itself off for good after 3
    consecutive connection failures; only a restart turns it on again, which `kvplan deploy` does."""
    where = str(adapter.get("endpoint") or adapter.get("base_path") or "?")[:200]
    failures = adapter.get("connection_failures")
    why = f" after {failures} connection failures" if isinstance(failures, int) else ""
    return (f"its L2 tier {str(adapter.get('type', '?'))[:40]} ({where}) is off{why}: LMCache no longer reads or writes it "
            "until the server restarts (`kvplan deploy` the spec again restarts it)")


def parse_lmcache_metrics(text: str) -> dict[str, float] | None:
    """LMCache's `/metrics` text -> the LMCACHE_COUNTERS values (0 for one not incremented yet), or None when
    it exports no lmcache_mp_ series at all (its metrics are off). ValueError for text that is not Prometheus."""
    from prometheus_client.parser import text_string_to_metric_families

    counts = dict.fromkeys(LMCACHE_COUNTERS.values(), 0.0)
    exported = False
    for family in text_string_to_metric_families(text):
        exported = exported or family.name.startswith("lmcache_mp_")
        for sample in family.samples:
            if sample.name in LMCACHE_COUNTERS:
                counts[LMCACHE_COUNTERS[sample.name]] += float(sample.value)
    return counts if exported else None


def lmcache_idle(servers: list[Target], timeout: float = 5.0) -> bool:
    """True when no LMCache server has a store pending or in flight (one that does not answer has nothing to wait for)."""
    return all(_server_idle(server, timeout) for server in servers)


def _server_idle(server: Target, timeout: float) -> bool:
    try:
        status, body = _get(server, "/status", timeout)
        controllers = _storage_manager(body).get("store_controllers", {}) if status == 200 else {}
    except (OSError, http.client.HTTPException, ValueError):
        return True
    if not isinstance(controllers, dict):
        return True                                # not a status it can wait on
    return all(not isinstance(c, dict) or (c.get("pending_keys_count", 0) == 0 and c.get("in_flight_task_count", 0) == 0)
               for c in controllers.values())


def _ceph_json(args: list[str], timeout: float, deadline: Deadline | None = None):
    if deadline is not None:
        if deadline.left() <= 0:
            raise RuntimeError(f"not read before {deadline.what} ({deadline.seconds:g} s)")
        timeout = min(timeout, deadline.left())
    done = subprocess.run(args + ["--format", "json"], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {(done.stderr or done.stdout).strip()[-300:]}")
    return json.loads(done.stdout)


def observe_ceph(r: Resolved, timeout: float, deadline: Deadline | None = None) -> tuple[Component, dict | None]:
    pool = r.ceph.pool_name
    name = f"ceph pool {pool}"
    if shutil.which("ceph") is None:
        return Component(name=name, up=False, detail="no ceph CLI on this host (observe from a Ceph admin host)"), None
    try:
        df = _ceph_json(["rados", "df"], timeout, deadline)
        row = next((p for p in df["pools"] if p["name"] == pool), None)
        if row is None:
            return Component(name=name, up=False, detail=f"pool {pool} does not exist"), None
        values = {"pool_objects": float(row["num_objects"]), "pool_stored_bytes": float(row["size_bytes"]),
                  "pool_read_bytes": float(row["read_bytes"]), "pool_write_bytes": float(row["write_bytes"])}
        perf = _ceph_json(["ceph", "osd", "perf"], timeout, deadline)
        infos = perf.get("osdstats", perf).get("osd_perf_infos", [])
        values["osd_apply_latency_ms_max"] = float(max((i["perf_stats"]["apply_latency_ms"] for i in infos), default=0))
        stat = _ceph_json(["ceph", "osd", "stat"], timeout, deadline)
        stat = stat.get("osdmap", stat)
        values["osds"], values["osds_up"] = float(stat["num_osds"]), float(stat["num_up_osds"])
        values["osd_commit_latency_ms_max"] = float(max((i["perf_stats"]["commit_latency_ms"] for i in infos), default=0))
        if r.ceph.access == "s3" and shutil.which("radosgw-admin"):
            stats = _ceph_json(["radosgw-admin", "bucket", "stats", f"--bucket={r.ceph.rgw_bucket}"], timeout, deadline)
            values["rgw_objects"] = float(stats.get("usage", {}).get("rgw.main", {}).get("num_objects", 0))
    except (OSError, RuntimeError, ValueError, KeyError, subprocess.TimeoutExpired) as exc:
        return Component(name=name, up=False, detail=_reason(exc)), None
    except (TypeError, AttributeError) as exc:          # JSON, but not of the shape these commands print
        return Component(name=name, up=False, detail=f"the ceph CLI's JSON is not as expected ({_reason(exc)})"), None
    if wrong := misbehaving(values):
        return Component(name=name, up=False, detail=wrong), None
    return Component(name=name, up=True), values


def osds_component(values: dict) -> Component:
    """The cluster's OSDs as one component: down when any is (Ceph serves degraded, or not at all, without it)."""
    down = int(values["osds"] - values["osds_up"])
    return Component(name="ceph osds", up=down == 0,
                     detail=f"{down} of {int(values['osds'])} OSDs down (`ceph osd tree down` names them)" if down else "")


def rgw_url(r: Resolved) -> str:
    """Where LMCache reaches RGW (the spec's rgw address, else its DNS name), without the bucket."""
    return f"http://{_bracketed(r.ceph.rgw_address or r.ceph.rgw_dns_name)}:{r.ceph.rgw_port}"


def observe_rgw(r: Resolved, timeout: float, deadline: Deadline | None = None) -> Component:
    """RGW is up when its S3 port answers HTTP at all (an anonymous GET / is refused or listed: either is an answer)."""
    api = Target.parse(rgw_url(r))
    try:
        _get(api, "/", timeout, deadline)
    except (OSError, http.client.HTTPException) as exc:
        return Component(name=f"rgw {api.url}", up=False, detail=f"{_reason(exc)}: LMCache cannot read or write its ceph "
                                                                    "tier (is radosgw running? `kvplan deploy` starts it)")
    return Component(name=f"rgw {api.url}", up=True)


def snapshot(r: Resolved, targets: list[Target], *, lmcache: list[Target] | None = None, ceph: bool = True,
             timeout: float = 10.0, deadline: Deadline | None = None) -> Snapshot:
    """Read every component of `r`'s stack once: vLLM at `targets`; LMCache (the servers at `lmcache`, default
    `lmcache_servers`: their counters added up, or None when one of them did not answer) and Ceph (`ceph`: read
    it with this host's CLI) when the spec has them. Each HTTP request ends within `timeout` seconds, and all of them
    before `deadline` (default: DEADLINE_FACTOR x `timeout` from now); a component not read by then is down."""
    deadline = deadline or Deadline.after(DEADLINE_FACTOR * timeout)
    components: list[Component] = []
    vllm: dict[str, dict[str, float]] = {}
    for target in targets:
        component, values = observe_vllm(target, timeout, deadline)
        components.append(component)
        if values is not None:
            vllm[target.url] = values
    lmcache_values = None
    if r.lmcache is not None and r.lmcache.mode == "mp":
        read = [observe_lmcache(r, timeout, server, deadline) for server in (lmcache or lmcache_servers(r, targets))]
        components += [component for component, _ in read]
        if all(values is not None for _, values in read):
            lmcache_values = {}
            for _, values in read:
                for key, value in values.items():
                    lmcache_values[key] = lmcache_values.get(key, 0.0) + value
    ceph_values = None
    if ceph and r.ceph is not None and r.lmcache is not None and r.lmcache.tier("ceph") is not None:
        component, ceph_values = observe_ceph(r, timeout * 3, deadline)
        components.append(component)
        if ceph_values is not None:
            components.append(osds_component(ceph_values))
        if r.ceph.access == "s3":
            components.append(observe_rgw(r, timeout, deadline))
    return Snapshot(taken_at=time.time(), components=components, vllm=vllm, lmcache=lmcache_values, ceph=ceph_values)
