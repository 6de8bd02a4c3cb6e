"""kvplan.live.observe: reading the stack's counters into a snapshot.

observe.py reads vLLM's /metrics and the LMCache server's HTTP API (health, status, metrics) and
sums them into one snapshot of the stack. Observing never raises for a component that does not
answer: it is listed as down with the reason, and with the fix where there is one.
"""

from __future__ import annotations

import json

import pytest

from kvplan.live.bench import Target
from kvplan.live.observe import lmcache_servers, parse_lmcache_metrics, parse_metrics, snapshot

from answering import Answering
from live_fakes import PLAIN_BENCH, fake_vllm, local, unused_port


METRICS = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="m"} 1000.0
vllm:prompt_tokens_total{engine="1",model_name="m"} 500.0
vllm:prompt_tokens_created{engine="0",model_name="m"} 1.7e+09
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 256.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1500.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_cache_hit"} 256.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="external_kv_transfer"} 512.0
vllm:prompt_tokens_by_source_total{engine="1",model_name="m",source="external_kv_transfer"} 100.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="local_compute"} 632.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="m",source="something_new"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 12.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 50.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:num_preemptions_total{engine="0",model_name="m"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6
vllm:generation_tokens_total 80
process_cpu_seconds_total 1234.5
vllm:request_success_total{finished_reason="length",model_name="a}b"} 9
"""


def test_parse_metrics_sums_counters_averages_gauges_and_maps_prompt_sources():
    """Counters add up over engines; a gauge is their mean (0.5 and 0.6: 0.55, never 1.1); a label value holding
    `}` is read as the text exposition format says."""
    m = parse_metrics(METRICS)
    assert m == {"prompt_tokens": 1500.0, "prefix_cache_hits": 256.0, "prefix_cache_queries": 1500.0,
                 "hbm_tokens": 256.0, "lmcache_tokens": 612.0, "computed_tokens": 632.0,
                 "ttft_sum": 12.5, "ttft_count": 50.0, "preemptions": 3.0, "kv_cache_usage": pytest.approx(0.55),
                 "generation_tokens": 80.0, "finished_requests": 9.0}


def test_metrics_that_are_not_prometheus_text_mark_vllm_down_with_the_reason():
    with pytest.raises(ValueError):
        parse_metrics('vllm:request_success_total{finished_reason="length"} not-a-number\n')


LMCACHE_METRICS = """\
# HELP lmcache_mp_event_bus_queue_depth Events waiting in the bus
# TYPE lmcache_mp_event_bus_queue_depth gauge
lmcache_mp_event_bus_queue_depth{otel_scope_name="lmcache.event_bus",otel_scope_schema_url="",otel_scope_version=""} 0.0
# HELP lmcache_mp_lookup_requested_tokens_total Total tokens submitted for lookup
# TYPE lmcache_mp_lookup_requested_tokens_total counter
lmcache_mp_lookup_requested_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 1024.0
lmcache_mp_lookup_requested_tokens_total{cache_salt="b}",model_name="m",otel_scope_name="lmcache.lookup"} 512.0
# HELP lmcache_mp_lookup_hit_tokens_total Total tokens found in L1+L2 during lookup
# TYPE lmcache_mp_lookup_hit_tokens_total counter
lmcache_mp_lookup_hit_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 768.0
lmcache_mp_lookup_hit_tokens_total{cache_salt="b}",model_name="m",otel_scope_name="lmcache.lookup"} 256.0
# HELP lmcache_mp_lookup_hit_l1_tokens_total Of lookup_hit: tokens served from objects L1 already held
# TYPE lmcache_mp_lookup_hit_l1_tokens_total counter
lmcache_mp_lookup_hit_l1_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 512.0
lmcache_mp_lookup_hit_l1_tokens_total{cache_salt="b}",model_name="m",otel_scope_name="lmcache.lookup"} 256.0
# HELP lmcache_mp_lookup_hit_l2_tokens_total Of lookup_hit: tokens L2 added beyond the L1-servable prefix
# TYPE lmcache_mp_lookup_hit_l2_tokens_total counter
lmcache_mp_lookup_hit_l2_tokens_total{cache_salt="a",model_name="m",otel_scope_name="lmcache.lookup"} 256.0
"""
"""A scrape of the MP server, as its OTel exporter writes it (a label value holding `}` included)."""


def test_lmcache_metrics_add_up_over_label_sets_and_count_an_unseen_counter_as_zero():
    counts = parse_lmcache_metrics(LMCACHE_METRICS)
    assert counts == {"lookup_requested_tokens": 1536, "lookup_hit_tokens": 1024, "l1_hit_tokens": 768,
                      "l2_hit_tokens": 256, "l2_submitted_chunks": 0, "l2_stored_chunks": 0,
                      "l1_allocation_failed_chunks": 0}


def test_lmcache_metrics_are_none_when_the_server_exports_none_of_its_own():
    """A server started with --disable-metrics still answers /metrics, with only Python's process series."""
    assert parse_lmcache_metrics("# TYPE process_open_fds gauge\nprocess_open_fds 32.0\n") is None


def fake_lmcache(metrics: str) -> Answering:
    """The LMCache MP server's HTTP API as observe reads it: /healthcheck, /status and /metrics."""
    return Answering({"/healthcheck": (200, b"ok"),
                      "/status": (200, b'{"storage_manager": {"l1_usage": [4096, 1073741824]}}'),
                      "/metrics": (200, metrics.encode())})


def test_snapshot_reads_lmcache_usage_and_hits_per_tier_from_its_http_api():
    server = fake_lmcache(LMCACHE_METRICS)
    try:
        snap = snapshot(local(PLAIN_BENCH), [], lmcache=[server.target()], ceph=False, timeout=5.0)
    finally:
        server.shutdown()
    assert snap.down() == []
    assert snap.lmcache["l1_used_bytes"] == 4096
    assert (snap.lmcache["l1_hit_tokens"], snap.lmcache["l2_hit_tokens"]) == (768, 256)


def test_one_lmcache_server_per_node_is_read_on_each_targets_host_and_their_counters_add_up():
    """MP mode runs a server per node; with its API on every address, observe reads the one beside each target."""
    r = local(PLAIN_BENCH, monitoring={"metrics_address": "0.0.0.0"})
    port = r.lmcache.port + 1
    targets = [Target.parse(u) for u in ("http://10.0.2.21:8000", "http://10.0.2.21:8001", "http://10.0.2.22:8000")]
    assert [s.url for s in lmcache_servers(r, targets)] == [f"http://10.0.2.21:{port}", f"http://10.0.2.22:{port}"]
    assert [s.url for s in lmcache_servers(local(PLAIN_BENCH), targets)] == [f"http://127.0.0.1:{port}"]
    servers = [fake_lmcache(LMCACHE_METRICS), fake_lmcache(LMCACHE_METRICS)]
    try:
        both = snapshot(r, [], lmcache=[s.target() for s in servers], ceph=False, timeout=5.0)
        servers.pop().shutdown()
        one_gone = snapshot(r, [], lmcache=[servers[0].target(), Target.parse(f"http://127.0.0.1:{unused_port()}")],
                            ceph=False, timeout=5.0)
    finally:
        for server in servers:
            server.shutdown()
    assert (both.lmcache["l1_hit_tokens"], both.lmcache["l2_hit_tokens"], both.lmcache["l1_used_bytes"]) == (1536, 512, 8192)
    # A sum over some of the servers would be read as the whole stack's: with one down there is none, and it is named.
    assert one_gone.lmcache is None and [c.up for c in one_gone.components] == [True, False]


def test_an_lmcache_tier_the_server_turned_off_is_reported_down_with_the_fix():
    """LMCache 0.5.6's S3 adapter turns itself off for good after 3 consecutive connection failures (Ceph
    unreachable for a moment); /healthcheck still answers, /status says so, and only a restart helps."""
    status = {"storage_manager": {"l2_adapters": [
        {"is_healthy": False, "type": "S3L2Adapter", "endpoint": "kvcache.rgw.kvplan.test:7480", "connection_failures": 7,
         "connection_disabled": True}]}}
    server = Answering({"/healthcheck": (200, b"ok"), "/status": (200, json.dumps(status).encode()),
                        "/metrics": (200, LMCACHE_METRICS.encode())})
    try:
        snap = snapshot(local(PLAIN_BENCH), [], lmcache=[server.target()], ceph=False, timeout=5.0)
    finally:
        server.shutdown()
    (down,) = snap.down()
    assert "S3L2Adapter (kvcache.rgw.kvplan.test:7480) is off after 7 connection failures" in down.detail
    assert "kvplan deploy" in down.detail
    assert snap.lmcache["l2_hit_tokens"] == 256                 # what it counted still counts


def test_snapshot_says_how_to_turn_on_lmcache_metrics_when_the_server_exports_none():
    server = fake_lmcache("# TYPE process_open_fds gauge\nprocess_open_fds 32.0\n")
    try:
        snap = snapshot(local(PLAIN_BENCH), [], lmcache=[server.target()], ceph=False, timeout=5.0)
    finally:
        server.shutdown()
    (component,) = snap.components
    assert component.up and "--disable-metrics" in component.detail and "kvplan deploy" in component.detail
    assert snap.lmcache == {"l1_used_bytes": 4096}          # what /status said; no counters to split hits by


def test_snapshot_reads_vllm_and_reports_an_unreachable_lmcache_as_down():
    """Observing never raises for a component that does not answer: it is listed as down with the reason."""
    r = local(PLAIN_BENCH)
    lmcache = Target.parse(f"http://127.0.0.1:{unused_port()}")
    with fake_vllm() as fake:
        fake.counters.update(prompt=321, generated=12, finished=3)
        snap = snapshot(r, [fake.target()], lmcache=[lmcache], ceph=False, timeout=5.0)
    assert snap.vllm[fake.url]["prompt_tokens"] == 321 and snap.vllm[fake.url]["computed_tokens"] == 321
    assert snap.vllm[fake.url]["finished_requests"] == 3
    up = {c.name: c for c in snap.components}
    assert up[f"vllm {fake.url}"].up
    down = snap.down()
    assert [c.name for c in down] == [f"lmcache http://127.0.0.1:{lmcache.port}"]
    assert "Connection" in down[0].detail or "refused" in down[0].detail.lower()
    assert snap.lmcache is None and snap.ceph is None


def test_snapshot_reports_an_unreachable_vllm_as_down():
    r = local(PLAIN_BENCH)
    port = unused_port()
    snap = snapshot(r, [Target.parse(f"http://127.0.0.1:{port}")], lmcache=[Target.parse(f"127.0.0.1:{unused_port()}")],
                    ceph=False, timeout=5.0)
    assert snap.vllm == {} and snap.lmcache is None
    names = [c.name for c in snap.down()]
    assert names[0] == f"vllm http://127.0.0.1:{port}" and names[1].startswith("lmcache http://127.0.0.1:")
