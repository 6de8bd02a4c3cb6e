"""No input crashes kvplan, hangs it or eats the machine.

Fuzzed inputs (tests/fuzzing.py: every example mutated, YAML texts bent out of shape, Mooncake trace
lines, replay logs, inventories, result files, and what a server answers; tests/fuzzing_fields.py: changes
that keep a field's kind, zero and extreme numbers, malformed YAML tags, hostile hosts) are each accepted or
refused with a SpecError whose rendering prints as text; anything else
escaping the library is a traceback for the user, and fails here. Most of the field-aware cases get past
validation: at least MIN_SIMULATED of the changes that keep a field's kind reach the simulator. Hypothesis runs with a fixed seed
and budget, so CI sees the same cases every time; benchmarks/fuzz.py runs many more by hand. Every
input that ever broke kvplan is kept in tests/fixtures/fuzz/ and must stay a clean error.
"""

from __future__ import annotations

import gzip
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from answering import Answering
from fuzzing import (EXAMPLES, REGRESSIONS, REPO, mutate, mutated_specs, odd_specs, replay_texts, trace_texts,
                     yaml_texts)
from fuzzing_fields import (BAD_HOSTS, HOST_FIELDS, HOSTILE, STAGES, capped, edge_specs, hostile_host_specs,
                            kept_valid_specs, reach, tagged_texts, with_tag)
from kvplan.cli.console import TextConsole
from kvplan.deploy import inventory
from kvplan.errors import SpecError
from kvplan.live.bench import Outcome, Target, check_target, stream_completion
from kvplan.live.observe import parse_lmcache_metrics, parse_metrics
from kvplan.report.inputs import load as read_result
from kvplan.resolve import resolve
from kvplan.sim.replay import read_log
from kvplan.sim.run import Bounds, run
from kvplan.sim.trace import read_trace
from kvplan.validation import from_mapping, load   # what the commands read a spec with: every problem in one round

KVPLAN = str(Path(sys.executable).parent / "kvplan")
CASE_SECONDS = 20
"""A case that takes longer than this hangs (a spec is checked in milliseconds)."""
EXAMPLES_PER_TEST = int(os.environ.get("KVPLAN_FUZZ_EXAMPLES", "150"))
"""Cases each fuzz test draws (more by hand: KVPLAN_FUZZ_EXAMPLES=5000, or benchmarks/fuzz.py)."""
FUZZ = settings(derandomize=True, deadline=None, database=None, max_examples=EXAMPLES_PER_TEST,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


@contextmanager
def bounded(seconds: int = CASE_SECONDS):
    """Fail a case that runs past `seconds` instead of waiting on it."""
    def hang(signum, frame):
        raise AssertionError(f"the case ran past {seconds} s")
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def refused_cleanly(exc: SpecError) -> None:
    """A refusal prints as text: rendering it through kvplan's console neither raises nor lets markup through."""
    console = TextConsole(file=io.StringIO())
    console.print(exc.render())
    assert "Traceback" not in console.file.getvalue()


def check_spec(data, base_dir: Path) -> None:
    with bounded():
        try:
            resolve(from_mapping(data, base_dir=base_dir))
        except SpecError as exc:
            refused_cleanly(exc)


@FUZZ
@given(mutated_specs())
def test_a_mutated_example_is_accepted_or_refused_with_its_problems(case):
    name, data = case
    check_spec(data, next(p.parent for p in EXAMPLES if p.name == name))


@FUZZ
@given(yaml_texts())
def test_any_yaml_text_is_read_or_refused_within_the_limits(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spec.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        with bounded():
            try:
                resolve(load(path))
            except SpecError as exc:
                refused_cleanly(exc)


@FUZZ
@given(trace_texts())
def test_any_trace_is_read_or_refused_with_its_line(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.jsonl"
        path.write_text(text)
        with bounded():
            try:
                read_trace(str(path))
            except SpecError as exc:
                refused_cleanly(exc)


@FUZZ
@given(replay_texts(), st.booleans())
def test_any_replay_log_is_read_or_refused_with_its_line(text, packed):
    """A per-request log, plain or gzip, is read or refused line by line, never showing a line's content."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("log.jsonl.gz" if packed else "log.jsonl")
        raw = text.encode("utf-8", errors="surrogatepass")
        path.write_bytes(gzip.compress(raw, mtime=0) if packed else raw)
        with bounded():
            try:
                read_log(str(path))
            except SpecError as exc:
                refused_cleanly(exc)
                assert all(p.value is None for p in exc.problems)


@settings(FUZZ, max_examples=max(EXAMPLES_PER_TEST // 6, 10))
@given(odd_specs())
def test_a_valid_odd_spec_simulates_or_stops_at_its_bound(data):
    """A spec that validates simulates to the end, or stops at a bound with a SpecError that says why."""
    try:
        r = resolve(from_mapping(data, base_dir=REPO / "examples"))
    except SpecError:
        return
    with bounded(60):
        try:
            run(r, bounds=Bounds(max_wall=10.0))
        except SpecError as exc:
            refused_cleanly(exc)


# ---- field-aware cases (tests/fuzzing_fields.py): past validation, into resolve, the simulator, size, render

MIN_SIMULATED = 0.6
"""The share of `kept_valid_specs` cases that must reach the simulator (about 0.7 measured; benchmarks/fuzz.py)."""


def test_most_specs_changed_within_their_fields_kinds_reach_the_simulator():
    """Each case resolves, simulates and sizes, or is refused cleanly; and most are not refused at all."""
    reached: dict[str, int] = dict.fromkeys(STAGES, 0)

    @settings(FUZZ, max_examples=max(EXAMPLES_PER_TEST * 2 // 5, 10))
    @given(kept_valid_specs())
    def each(case):
        with bounded():
            reached[reach(*case)] += 1
    each()
    cases = sum(reached.values())
    assert reached["simulated"] / cases >= MIN_SIMULATED, reached


def _set_known(name: str, path: tuple, value) -> tuple[str, dict]:
    data = capped(yaml.safe_load((REPO / "examples" / name).read_text()))
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    return name, data


@settings(FUZZ, max_examples=max(EXAMPLES_PER_TEST // 4, 10))
@given(edge_specs())
@example(_set_known("codegen-70b.yaml", ("workload", "arrivals", "rate"), "0/s"))        # ZeroDivisionError once
@example(_set_known("local.yaml", ("monitoring", "scrape_interval"), "0s"))
@example(_set_known("local.yaml", ("serving", "max_num_batched_tokens"), 99999999999999999999999))
@example(_set_known("local.yaml", ("serving", "kv_cache_memory"), "0B"))                   # ZeroDivisionError once
@example(_set_known("chat-llama2-13b.yaml", ("workload", "sessions", "turns"), {"dist": "uniform", "max": 2 ** 31}))
@example(_set_known("chat-llama2-13b.yaml", ("workload", "shared_prefixes", "tokens"), 2 ** 63))  # int64 overflow
@example(_set_known("codegen-70b.yaml", ("workload", "arrivals", "rate"), "1e300/s"))     # numpy's dimension once
def test_zero_and_extreme_rates_sizes_and_counts_simulate_size_render_or_are_refused(case):
    with bounded():
        reach(*case, render=True)


@settings(FUZZ, max_examples=max(EXAMPLES_PER_TEST // 3, 10))
@given(tagged_texts())
@example(("local.yaml", with_tag("local.yaml", "max_num_seqs", "!!int 0b102")))          # ValueError once
@example(("local.yaml", with_tag("local.yaml", "model", "!!float 'x'")))                 # ValueError once
def test_a_value_tagged_as_a_kind_it_is_not_is_read_or_refused(case):
    name, text = case
    with bounded():
        reach(name, text=text)


@settings(FUZZ, max_examples=max(EXAMPLES_PER_TEST // 3, 10))
@given(hostile_host_specs())
def test_a_hostile_host_in_any_host_field_is_refused(case):
    """A host reaches /etc/hosts, Prometheus's targets and vLLM's command line: one that validates holds no line
    break, template, command or quote; every case is refused, or resolves, simulates and renders."""
    name, data, hosts = case
    with bounded():
        outcome = reach(name, data, render=True)
    if outcome != "refused":
        assert not [h for h in hosts.values() if HOSTILE.search(h)], (outcome, hosts)


@pytest.mark.parametrize("field", HOST_FIELDS, ids=".".join)
@pytest.mark.parametrize("host", ["fe80::1%eth0\n- hosts: all", "fe80::1%{{ lookup('pipe', 'id') }}", "fe80::1%$(id)"])
def test_an_ipv6_scope_id_carries_no_line_break_template_or_command(field, host):
    name, data = _set_known("cluster.yaml", field, host)
    assert host in BAD_HOSTS
    assert reach(name, data) == "refused"


@pytest.mark.parametrize("case", sorted(REGRESSIONS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_spec_that_once_broke_kvplan_is_a_clean_error_on_the_cli(case):
    """Run by the real CLI: exit 1, the problem named, no traceback, and no internal error (exit 70)."""
    done = subprocess.run([KVPLAN, "validate", str(case)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "problem" in done.stderr, done.stderr


@pytest.mark.parametrize("case", sorted(REGRESSIONS.glob("*.jsonl")), ids=lambda p: p.name)
def test_every_trace_that_once_broke_kvplan_is_a_clean_error(case):
    with bounded(), pytest.raises(SpecError) as exc:
        read_trace(str(case))
    refused_cleanly(exc.value)
    assert f"{case}:" in exc.value.render()          # the line it is on


# ---- what a server says: the remote side cannot crash the client

_server: list[Answering] = []


def canned(status: int, body: bytes) -> Target:
    """The one server of these tests, answering every path with `body`."""
    if not _server:
        _server.append(Answering())
    _server[0].default = (status, body)
    return _server[0].target()


server_lines = st.one_of(st.sampled_from([b"data: [DONE]", b"data: {}", b"data: []", b"data: null", b"data: 1",
                                          b'data: {"choices": 1}', b'data: {"choices": [1]}',
                                          b'data: {"choices": [{"token_ids": 5}]}', b'data: {"error": "[/]boom"}',
                                          b'data: {"choices": [{"token_ids": [1, 2]}]}', b"data: " + b"[" * 5000,
                                          b"data: 1" + b"0" * 5000, b"\x1b[2J", b"data: \xff\xfe"]),
                         st.binary(max_size=40).map(lambda b: b"data: " + b))


@FUZZ
@given(st.sampled_from([200, 200, 401, 500]), st.lists(server_lines, max_size=6))
def test_any_completion_stream_is_a_result_or_an_error_of_that_request(status, lines):
    out = Outcome(0, -1, 0, 0, 0.0, 10, 4)
    with bounded():
        stream_completion(canned(status, b"\n".join(lines) + b"\n"), {"prompt": [1]}, 5.0, time.monotonic, out)
    assert out.error or out.received_tokens > 0
    TextConsole(file=io.StringIO()).print(out.error or "")


@FUZZ
@given(st.one_of(st.binary(max_size=300), st.sampled_from([b"[]", b"{}", b'{"data": 1}', b'{"data": [1]}',
                                                             b'{"data": [{"id": "[/]\\u001b[31m"}]}', b"[" * 5000])))
def test_any_model_list_is_accepted_or_a_bench_error(body):
    with bounded():
        try:
            check_target(canned(200, body), "kvplan-tiny-llama")
        except SpecError as exc:             # BenchError is one
            refused_cleanly(exc)


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(["# TYPE vllm:prompt_tokens_total counter", "vllm:prompt_tokens_total 1e999",
                                           'vllm:prompt_tokens_total{a="}"} 3', "vllm:kv_cache_usage_perc nan",
                                           "lmcache_mp_lookup_hit_l1_tokens_total -1", "x{", "# TYPE x histogram",
                                           "x_bucket{le=\"+Inf\"} 1", "\x1b[2J", "x 1 2 3"]),
                          st.text(max_size=40)), max_size=8))
def test_any_metrics_text_is_read_or_refused_as_not_prometheus(lines):
    text = "\n".join(lines) + "\n"
    for parse in (parse_metrics, parse_lmcache_metrics):
        try:
            parse(text)
        except ValueError:
            pass


# ---- inventories and result files

INVENTORIES = sorted(p for p in (REPO / "inventories").glob("*/hosts.yml"))


@FUZZ
@given(st.sampled_from(INVENTORIES), st.data())
def test_any_inventory_is_read_or_refused(path, data):
    mutated = mutate(yaml.safe_load(path.read_text()), data.draw)
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "hosts.yml"
        file.write_text(yaml.safe_dump(mutated) if data.draw(st.booleans()) else data.draw(yaml_texts()))
        with bounded():
            try:
                inventory.load(file)
            except SpecError as exc:
                refused_cleanly(exc)


@FUZZ
@given(st.data())
def test_any_result_file_is_read_or_refused(data):
    text = data.draw(st.one_of(st.sampled_from(["{}", "[]", "null", '{"per_request": 1, "spec_hash": 2}',
                                                '{"kind": "plan"}', "[" * 5000, "1" + "0" * 5000]),
                               st.text(max_size=100)))
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "run.json"
        file.write_text(text)
        with bounded():
            try:
                read_result(file)
            except SpecError as exc:
                refused_cleanly(exc)
