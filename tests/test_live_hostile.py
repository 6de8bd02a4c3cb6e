"""A hostile server cannot hold kvplan's live commands, fill its memory or crash them (issue 49).

`kvplan observe`, `kvplan bench` and `kvplan doctor --target` read servers through one bounded read
(kvplan/live/bounded.py): a deadline for the whole request that a server dripping its answer cannot
stretch, a 16 MiB cap on a body, and JSON checked for type and shape before it is used. A counter that
is NaN, infinite or negative is a misbehaving component, not health. Each attack below is one an earlier
round found.

The servers are tests/hostile_server.py's: raw sockets on ephemeral loopback ports. Timings are bounds
far from what the attack would take unbounded (each dripped answer takes 37 s), never speed asserts.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.live.bench import BenchError, Outcome, Target, check_target, stream_completion
from kvplan.live.bounded import MAX_BODY, Deadline, DeadlineExceeded, fetch
from kvplan.live.observe import snapshot

from hostile_server import HostileServer, canned, drip, endless_line, heartbeat, huge
from live_fakes import LOCAL, MODEL, PLAIN_BENCH, local
from test_live_cli import cli

HEALTHY_METRICS = (b'vllm:prompt_tokens_total{engine="0"} 10\nvllm:prefix_cache_queries_total{engine="0"} 10\n'
                   b'vllm:prefix_cache_hits_total{engine="0"} 2\n')
LMCACHE_METRICS = b"lmcache_mp_lookup_requested_tokens_total 10\n"


def _vllm(**answers) -> dict:
    base = {"/health": canned(200, b""), "/metrics": canned(200, HEALTHY_METRICS, "text/plain"),
            "/v1/models": canned(200, json.dumps({"data": [{"id": MODEL}]}).encode())}
    return {**base, **answers}


def _lmcache(**answers) -> dict:
    base = {"/healthcheck": canned(200, b""), "/status": canned(200, b'{"storage_manager": {"l1_usage": [1024]}}'),
            "/metrics": canned(200, LMCACHE_METRICS, "text/plain")}
    return {**base, **answers}


# ---- a drip is cut at the deadline

def test_a_drip_is_cut_at_the_request_deadline_though_every_read_gets_a_byte():
    """One byte every 50 ms never trips a per-read timeout; the whole request still ends at its 0.5 s."""
    with HostileServer(default=drip()) as server:
        begun = time.monotonic()
        with pytest.raises(DeadlineExceeded, match="no complete answer within 0.5 s"):
            fetch(Target.parse(server.url), "/metrics", timeout=0.5)
        assert time.monotonic() - begun < 3.0


def test_the_command_deadline_ends_the_next_request_before_it_starts():
    with HostileServer(default=canned(200, b"{}")) as server:
        with pytest.raises(DeadlineExceeded, match=r"the command's deadline \(0 s\)"):
            fetch(Target.parse(server.url), "/health", timeout=5, deadline=Deadline.after(0))


def test_a_snapshot_of_drip_servers_ends_at_its_overall_deadline():
    """Four vLLM instances that drip: each request is cut at --timeout, the whole read at 3 x --timeout, and the
    instances not read by then are down with that deadline as the reason."""
    with HostileServer(default=drip()) as server:
        targets = [Target.parse(f"{server.url}/v{i}") for i in range(4)]
        begun = time.monotonic()
        snap = snapshot(local(PLAIN_BENCH, lmcache=False), targets, ceph=False, timeout=0.4)
        assert time.monotonic() - begun < 1.2 + 2.0
    assert [c.up for c in snap.components] == [False] * 4
    assert "within 0.4 s" in snap.components[0].detail
    assert "the command's deadline (1.2 s)" in snap.components[-1].detail


@pytest.mark.parametrize("command", ["observe", "doctor", "bench"])
def test_a_live_command_against_a_drip_server_ends_near_its_deadline(tmp_path, command):
    """The reproducer: a server that drips one byte at a time (headers and body) held observe, bench and doctor
    past 90 s. With --timeout 1 each ends within its deadline (observe, doctor: 3 x --timeout; bench: its check of
    the target, --timeout in all) and says so; the process start is most of the margin."""
    with HostileServer(default=drip()) as server:
        args = {"observe": ("observe", str(LOCAL), "--target", server.url, "--no-ceph", "--lmcache-url", server.url),
                "doctor": ("doctor", str(LOCAL), "--target", server.url, "--no-ceph", "--lmcache-url", server.url,
                           "--no-prove", "--json"),
                "bench": ("bench", str(LOCAL), "--target", server.url, "--state-dir", str(tmp_path))}[command]
        begun = time.monotonic()
        result = cli(*args, "--timeout", "1", cwd=tmp_path)
        took = time.monotonic() - begun
    assert result.returncode == {"observe": 5, "doctor": 6, "bench": 5}[command], result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert "within 1 s" in result.stdout + result.stderr
    assert took < 3 + 20            # one request's drip lasts 37 s, and observe makes several


def test_a_completion_stream_that_drips_is_cut_when_a_line_takes_longer_than_the_timeout():
    """Each line of a stream must come whole within --timeout: a byte every 50 ms does not keep the request."""
    with HostileServer(default=drip(_stream(b'{"choices": [{"token_ids": [7]}]}', b"[DONE]"))) as server:
        out = Outcome(0, -1, 0, 0, 0.0, 4, 4)
        begun = time.monotonic()
        stream_completion(Target.parse(server.url), {"prompt": [1], "max_tokens": 4}, 0.5, time.monotonic, out)
        assert time.monotonic() - begun < 3.0
    assert out.error == "timed out after 0.5 s without data"


def test_a_stream_of_empty_lines_on_time_is_cut_at_the_request_deadline():
    """A server that sends an empty line every 50 ms never lets a 0.2 s timeout fire; the request still ends at its
    deadline, (max_tokens + 2) x timeout."""
    with HostileServer(default=heartbeat()) as server:
        out = Outcome(0, -1, 0, 0, 0.0, 4, 1)
        begun = time.monotonic()
        stream_completion(Target.parse(server.url), {"prompt": [1], "max_tokens": 1}, 0.2, time.monotonic, out)
        assert time.monotonic() - begun < 0.6 + 2.5
    assert out.error == "not answered before the request's deadline (0.6 s)"


# ---- a huge body is refused, never held

@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_2_gb_model_list_is_refused_with_a_clear_error_without_reading_it(chunked):
    """The reproducer: a 2.6 GB /v1/models took bench to 5.2 GB. Announced by its length it is refused before a
    byte of it is read; sent chunked, after MAX_BODY bytes."""
    with HostileServer({"/v1/models": huge(2 * 2**30, chunked)}) as server:
        url = server.url
        with pytest.raises(BenchError) as exc:
            check_target(Target.parse(url), MODEL)
        sent = server.sent
    message = exc.value.render()
    assert f"{url}/v1/models is refused: its answer is" in message
    assert ("2,147,483,648 bytes, more than the 16,777,216" if not chunked else "longer than the 16,777,216") in message
    assert sent < 2 * 2**30 / 10          # the server stopped long before the end: nobody read it


@pytest.mark.parametrize("path", ["/health", "/metrics"])
def test_a_huge_health_or_metrics_answer_marks_vllm_down_at_the_cap(path):
    """The reproducer: on /health or /metrics, observe and doctor were still reading at 90 s."""
    with HostileServer(_vllm(**{path: huge(2 * 2**30, chunked=True, start=b"")})) as server:
        snap = snapshot(local(PLAIN_BENCH, lmcache=False), [Target.parse(server.url)], ceph=False, timeout=5)
    (vllm,) = snap.components
    assert not vllm.up and f"longer than the {MAX_BODY:,} bytes kvplan reads" in vllm.detail


def test_a_stream_line_that_never_ends_fails_that_request_at_the_line_cap():
    with HostileServer(default=endless_line()) as server:
        out = Outcome(0, -1, 0, 0, 0.0, 4, 4)
        stream_completion(Target.parse(server.url), {"prompt": [1], "max_tokens": 4}, 5.0, time.monotonic, out)
    assert out.error == "a line of the stream is longer than 1,048,576 bytes: not an OpenAI completion stream"


# ---- what a server says is checked before it is used

def _stream(*events: bytes) -> bytes:
    return b"".join(b"data: " + e + b"\n\n" for e in events)


@pytest.mark.parametrize("events, error", [
    ((b'{"choices": [{"token_ids": ["a", "b"]}]}', b"[DONE]"), "token_ids is not a list of token ids"),
    ((b'{"choices": [{"token_ids": [true]}]}', b"[DONE]"), "token_ids is not a list of token ids"),
    ((b'{"choices": [{"token_ids": [1, 2, 3, 4, 5]}]}', b"[DONE]"), "the stream sent 5 tokens or more, the request "
                                                                    "asked for 4"),
], ids=["strings", "booleans", "more-than-asked"])
def test_a_completion_stream_of_the_wrong_shape_fails_that_request(events, error):
    with HostileServer(default=canned(200, _stream(*events), "text/event-stream")) as server:
        out = Outcome(0, -1, 0, 0, 0.0, 4, 4)
        stream_completion(Target.parse(server.url), {"prompt": [1], "max_tokens": 4}, 5.0, time.monotonic, out)
    assert error in out.error and not out.output[5:]


@pytest.mark.parametrize("body, why", [
    (b'{"data": [{"id": 5}]}', "data[0] is not a model with a name"),
    (b'{"data": [null]}', "data[0] is not a model with a name"),
    (b'{"data": {"id": "m"}}', "it has no data list"),
    (b"[" * 100_000, "its JSON nests too deep"),
    (b"null", "it has no data list"),
], ids=["id-a-number", "null-model", "data-an-object", "deep", "null"])
def test_a_model_list_of_the_wrong_shape_is_a_bench_error_naming_it(body, why):
    """The reproducer: `{"data": [{"id": 5}]}` was a TypeError traceback in bench."""
    with HostileServer({"/v1/models": canned(200, body)}) as server:
        with pytest.raises(BenchError) as exc:
            check_target(Target.parse(server.url), MODEL)
    assert f"/v1/models is not an OpenAI model list: {why}" in exc.value.render()


def _observe_lmcache(**answers):
    with HostileServer(_lmcache(**answers)) as server:
        return snapshot(local(PLAIN_BENCH), [], lmcache=[Target.parse(server.url)], ceph=False, timeout=5)


@pytest.mark.parametrize("status, why", [
    (b"[" * 100_000, "its JSON nests too deep"),
    (b"null", "not LMCache's status object"),
    (b'{"storage_manager": null}', "not LMCache's status object"),
    (b'{"storage_manager": {"l1_usage": ["lots"]}}', "l1_usage[0] is 'lots', not a byte count"),
    (b'{"storage_manager": {"l2_adapters": 3}}', "l2_adapters is not a list"),
], ids=["deep", "null", "manager-null", "usage-text", "adapters-number"])
def test_an_lmcache_status_of_the_wrong_shape_marks_it_down_with_what_is_wrong(status, why):
    """The reproducer: a /status of 100,000 `[` (RecursionError) or `null` (AttributeError) was a traceback in
    observe and doctor."""
    snap = _observe_lmcache(**{"/status": canned(200, status)})
    (lm,) = snap.components
    assert not lm.up and why in lm.detail and snap.lmcache is None


@pytest.mark.parametrize("command", ["observe", "doctor"])
@pytest.mark.parametrize("status", [b"[" * 100_000, b"null"], ids=["deep", "null"])
def test_observe_and_doctor_report_a_hostile_lmcache_status_as_lmcache_down(tmp_path, command, status):
    """The same reproducer through the real commands: exit 5 (observe) or 6 (doctor), the reason, no traceback."""
    with HostileServer({**_vllm(), **_lmcache(**{"/status": canned(200, status)})}) as server:
        extra = ("--no-prove",) if command == "doctor" else ()
        result = cli(command, str(LOCAL), "--target", server.url, "--lmcache-url", server.url, "--no-ceph",
                     "--timeout", "5", *extra, cwd=tmp_path)
    said = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == {"observe": 5, "doctor": 6}[command], said
    assert "Traceback" not in said and "internal error" not in said
    assert ("its JSON nests too deep" if status != b"null" else "not LMCache's status object") in said


@pytest.mark.parametrize("hits, queries", [("+Inf", "NaN"), ("-5", "10")])
def test_nan_inf_or_negative_counters_are_a_misbehaving_vllm_not_health(hits, queries):
    """The reproducer: "prefix_cache_hits inf, prefix_cache_queries nan" was printed as a healthy stack, exit 0."""
    metrics = (f'vllm:prefix_cache_hits_total{{engine="0"}} {hits}\n'
               f'vllm:prefix_cache_queries_total{{engine="0"}} {queries}\n').encode()
    with HostileServer(_vllm(**{"/metrics": canned(200, metrics, "text/plain")})) as server:
        snap = snapshot(local(PLAIN_BENCH, lmcache=False), [Target.parse(server.url)], ceph=False, timeout=5)
    (vllm,) = snap.components
    assert not vllm.up and "not a count (a misbehaving exporter)" in vllm.detail and not snap.vllm
    assert f"prefix_cache_hits {float(hits):g}" in vllm.detail


def test_an_lmcache_counter_that_is_nan_marks_lmcache_down():
    snap = _observe_lmcache(**{"/metrics": canned(200, b"lmcache_mp_lookup_hit_tokens_total NaN\n", "text/plain")})
    assert not snap.components[0].up and "lookup_hit_tokens nan" in snap.components[0].detail


def test_observe_cli_reports_nan_counters_as_a_component_down_and_exits_5(tmp_path):
    metrics = b'vllm:prefix_cache_hits_total{engine="0"} +Inf\nvllm:prefix_cache_queries_total{engine="0"} NaN\n'
    with HostileServer(_vllm(**{"/metrics": canned(200, metrics, "text/plain")})) as server:
        result = cli("observe", str(LOCAL), "--target", server.url, "--no-ceph", "--lmcache-url", server.url,
                     "--timeout", "2", cwd=tmp_path)
    assert result.returncode == 5, result.stdout + result.stderr
    assert "prefix_cache_hits inf, prefix_cache_queries nan: not a count" in result.stdout


# ---- any hostile server: a result or a component down, never a traceback or a hang

BEHAVIOURS = {
    "drip": lambda: drip(interval=0.05),
    "huge-length": lambda: huge(2 * 2**30),
    "huge-chunked": lambda: huge(2 * 2**30, chunked=True),
    "deep": lambda: canned(200, b"[" * 100_000),
    "null": lambda: canned(200, b"null"),
    "wrong-types": lambda: canned(200, b'{"storage_manager": {"l1_usage": [{}], "l2_adapters": [1, null], '
                                       b'"store_controllers": 5}, "data": [{"id": []}]}'),
    "nan": lambda: canned(200, b"vllm:prompt_tokens_total NaN\nlmcache_mp_lookup_hit_tokens_total +Inf\n", "text/plain"),
    "not-text": lambda: canned(200, b"\xff\xfe\x00\x1b[2J"),
    "http-500": lambda: canned(500, b"boom"),
    "healthy": lambda: canned(200, b""),
}
PATHS = ["/health", "/metrics", "/healthcheck", "/status", "/v1/models"]
hostile_servers = st.fixed_dictionaries({path: st.sampled_from(sorted(BEHAVIOURS)) for path in PATHS})
"""One behaviour per path a live command reads: a Hypothesis strategy of hostile servers."""


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(hostile_servers)
def test_any_hostile_server_is_read_or_reported_within_the_deadline(paths):
    """observe/doctor's snapshot and bench's check against a server whose every path misbehaves in its own way:
    each component is up or down with a reason, bench's check passes or is a BenchError, and the whole read ends
    within its deadline (3 x 0.3 s for the snapshot, 0.3 s for the check)."""
    with HostileServer({path: BEHAVIOURS[name]() for path, name in paths.items()}) as server:
        target = Target.parse(server.url)
        begun = time.monotonic()
        snap = snapshot(local(PLAIN_BENCH), [target], lmcache=[target], ceph=False, timeout=0.3)
        try:
            check_target(target, "m", timeout=0.3)
        except BenchError as exc:
            assert "Traceback" not in exc.render()
        assert time.monotonic() - begun < 0.9 + 0.3 + 3.0
    assert all(c.up or c.detail for c in snap.components)


# ---- the Ceph CLI's JSON is checked as well

@pytest.mark.parametrize("rados_df, why", [
    ('{"pools": 5}', "the ceph CLI's JSON is not as expected"),
    ('[]', "the ceph CLI's JSON is not as expected"),
    ('{"pools": [{"name": "kvcache", "num_objects": NaN, "size_bytes": 1, "read_bytes": 1, "write_bytes": 1}]}',
     "pool_objects nan: not a count"),
], ids=["pools-a-number", "a-list", "nan"])
def test_ceph_json_of_the_wrong_shape_marks_the_pool_down(tmp_path, monkeypatch, rados_df, why):
    from kvplan.live.observe import observe_ceph

    r = local(PLAIN_BENCH)
    pool = r.ceph.pool_name
    rados_df = rados_df.replace("kvcache", pool)
    osd = '{"osd_perf_infos": [], "num_osds": 1, "num_up_osds": 1}'
    for name, printed in (("rados", rados_df), ("ceph", osd), ("radosgw-admin", "{}")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{printed}\nEOF\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    component, values = observe_ceph(r, 5.0)
    assert not component.up and why in component.detail and values is None
