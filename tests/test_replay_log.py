"""kind: replay, a benchmark's per-request log: each line says when a request arrived, how long its prompt and output
were, and which prompt and shared prefix it sent, so the replay reuses exactly what the benchmark reused.

tests/fixtures/workload/README.md lists the fixture log line by line. Sharing is checked at unit 1 (a key per
token), so "shares n keys" reads "shares n tokens".
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.sim.replay import MAX_ID, planned, read_log
from kvplan.sim.workload import requests, stream
from kvplan.spec import from_mapping

from conftest import tokens_shared

FIXTURE = Path(__file__).parent / "fixtures" / "workload" / "tiny_replay.jsonl"


def setup(replay: dict, max_model_len: int | None = None, **workload):
    """Llama-3.1-8B on one H100 replaying a log."""
    data = {"name": "replay", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"},
            "workload": {"kind": "replay", "replay": replay, **workload}}
    if max_model_len:
        data["serving"]["max_model_len"] = max_model_len
    return resolve(from_mapping(data))


@pytest.fixture(scope="module")
def tiny():
    return requests(setup({"path": str(FIXTURE)}))


def test_requests_arrive_in_time_order_and_a_tie_keeps_the_file_order(tiny):
    assert [r.arrival for r in tiny] == [0.0, 0.25, 0.5, 1.0, 1.0, 2.0, 3.0]
    assert [r.prompt_tokens for r in tiny] == [300, 400, 250, 300, 160, 200, 400]
    assert [r.output_tokens for r in tiny] == [20, 10, 30, 20, 5, 8, 10]
    assert [r.id for r in tiny] == list(range(7))
    assert all(r.session == -1 and not r.warmup for r in tiny)


def test_the_same_prompt_id_sends_the_same_tokens_and_the_same_prefix_id_its_prefix(tiny):
    first, unique, second_prompt, again, short_prefix, shorter, unique_too = tiny
    assert tokens_shared(first, again) == 300                 # prompt 1 again, as long: the whole prompt
    assert tokens_shared(first, shorter) == 200               # prompt 1, 200 tokens: its first 200
    assert tokens_shared(first, second_prompt) == 100         # another prompt after prefix 7: the prefix
    assert tokens_shared(first, short_prefix) == 60           # 60 tokens of prefix 7, then its own text
    assert tokens_shared(short_prefix, second_prompt) == 60
    assert tokens_shared(unique, unique_too) == 0             # no prompt id: text nobody else sends
    assert tokens_shared(first, unique) == 0


def test_generated_tokens_are_never_shared(tiny):
    first, again = tiny[0], tiny[3]
    whole = first.prompt_tokens + first.output_tokens
    assert first.content.keys(1, whole)[:300] == again.content.keys(1, whole)[:300]
    assert first.content.keys(1, whole)[300] != again.content.keys(1, whole)[300]


def test_the_stream_a_run_takes_is_the_list():
    r = setup({"path": str(FIXTURE)})
    s = stream(r)
    assert (len(s), s.last_arrival, s.rejected) == (7, 3.0, 0)
    assert [(q.id, q.arrival, q.prompt_tokens) for q in s] == [(q.id, q.arrival, q.prompt_tokens) for q in requests(r)]


def test_limit_time_scale_requests_and_duration():
    """limit keeps the first lines of the file, time_scale stretches the arrivals, then duration drops the later
    arrivals and requests keeps the first ones."""
    assert [q.arrival for q in requests(setup({"path": str(FIXTURE), "limit": 3}))] == [0.0, 0.25, 0.5]
    assert [q.arrival for q in requests(setup({"path": str(FIXTURE), "time_scale": 2}))][-1] == 6.0
    assert len(requests(setup({"path": str(FIXTURE)}, duration="1s"))) == 5
    assert [q.prompt_tokens for q in requests(setup({"path": str(FIXTURE)}, requests=2))] == [300, 400]


def test_a_request_longer_than_max_model_len_is_rejected_and_counted():
    reqs = requests(setup({"path": str(FIXTURE)}, max_model_len=320))     # 300 + 20 fits, 400 + 10 does not
    assert reqs.rejected == 2 and len(reqs) == 5
    assert [q.id for q in reqs] == list(range(5))


def test_a_gzip_log_reads_as_the_same_log(tmp_path):
    packed = tmp_path / "log.jsonl.gz"
    packed.write_bytes(gzip.compress(FIXTURE.read_bytes()))
    a, b = read_log(str(FIXTURE)), read_log(str(packed))
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


def test_planned_keeps_the_log_entry_of_each_request():
    log = read_log(str(FIXTURE))
    plan = planned(log)
    assert plan.entry.tolist() == [0, 2, 1, 3, 4, 5, 6]
    assert log.lines.tolist() == [1, 2, 3, 5, 6, 7, 8]


def test_kvplan_validate_finds_the_log_from_the_spec_folder(tmp_path):
    (tmp_path / "log.jsonl").write_text(FIXTURE.read_text())
    (tmp_path / "spec.yaml").write_text("name: r\nmodel: Llama-3.1-8B\nserving: {gpu: H100-SXM}\n"
                                        "workload: {kind: replay, replay: {path: log.jsonl}}\n")
    from kvplan.spec import load
    assert load(tmp_path / "spec.yaml").workload.replay.path == str((tmp_path / "log.jsonl").resolve())


# ------------------------------------------------------------------ what the reader refuses

def write(tmp_path: Path, *lines: str, name: str = "log.jsonl") -> str:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


GOOD = '{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10}'


@pytest.mark.parametrize("line, says", [
    ('{"arrival": 0, "prompt_tokens": 100', "not JSON"),
    ('[1, 2, 3]', "a JSON array, not an object"),
    ('"secret"', "a JSON string, not an object"),
    ('{"arrival": 0, "prompt_tokens": 100}', "no output_tokens"),
    ('{"prompt_tokens": 100}', "no arrival and no output_tokens"),
    ('{"arrival": "soon", "prompt_tokens": 100, "output_tokens": 10}', "arrival is a JSON string"),
    ('{"arrival": -1, "prompt_tokens": 100, "output_tokens": 10}', "arrival is out of range"),
    ('{"arrival": Infinity, "prompt_tokens": 100, "output_tokens": 10}', "arrival is out of range"),
    ('{"arrival": 0, "prompt_tokens": 100.5, "output_tokens": 10}', "prompt_tokens is a JSON number, not a whole"),
    ('{"arrival": 0, "prompt_tokens": 0, "output_tokens": 10}', "prompt_tokens is out of range"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": true}', "output_tokens is a JSON boolean"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "prompt": -3}', "prompt is out of range"),
    (f'{{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "prefix": {MAX_ID + 1}, "prefix_tokens": 5}}',
     "prefix is out of range"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "prefix": 3}', "prefix without prefix_tokens"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "prefix_tokens": 3}', "prefix_tokens without prefix"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "prefix": 3, "prefix_tokens": 101}',
     "prefix_tokens is more than prompt_tokens"),
    ('{"arrival": 0, "prompt_token": 100, "output_tokens": 10}', "1 field the format does not have (did you mean "
                                                                 "prompt_tokens?)"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "ttft_s": 0.1, "e2e": 2}', "1 field the format "
                                                                                          "does not have (did you mean ttft?)"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "ttft": 0, "e2e": 2}', "ttft is out of range"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "e2e": "2s"}', "e2e is a JSON string"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "ttft": 3, "e2e": 2}', "ttft is more than e2e"),
    ('{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "stage": 1.5}', "stage is a JSON number, not a whole"),
])
def test_a_bad_line_is_an_error_naming_file_line_and_what_is_wrong(tmp_path, line, says):
    path = write(tmp_path, GOOD, line, GOOD)
    with pytest.raises(SpecError) as err:
        read_log(path)
    [problem] = err.value.problems
    assert problem.path == f"{path}:2" and says in problem.message and problem.fix
    assert problem.value is None                          # the line itself is never shown


def test_what_a_benchmark_measured_is_read_beside_the_request_and_missing_figures_are_nan(tmp_path):
    log = read_log(write(tmp_path, '{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "stage": 2, "ttft": 0.04, '
                                   '"e2e": 0.5}', GOOD))
    assert log.stage.tolist() == [2, -1] and log.ttft[0] == 0.04 and log.e2e[0] == 0.5
    assert np.isnan(log.ttft[1]) and np.isnan(log.e2e[1])


def test_the_content_of_a_file_that_is_not_a_log_is_never_echoed(tmp_path):
    """Pointing the replay at the wrong file (a key, a config) shows where and what kind of thing is wrong, not what
    the file holds."""
    path = write(tmp_path, '{"password": "hunter2", "token": "s3cr3t-t0ken"}', "api_key=AKIAEXAMPLE",
                 '["s3cr3t-in-a-list"]')
    with pytest.raises(SpecError) as err:
        read_log(path)
    text = err.value.render()
    assert [p.path for p in err.value.problems] == [f"{path}:1", f"{path}:2", f"{path}:3"]
    for secret in ("hunter2", "s3cr3t", "AKIAEXAMPLE", "password", "api_key"):
        assert secret not in text


def test_a_prompt_id_names_one_prompt(tmp_path):
    """Two lines that send prompt 4 after different prefixes contradict each other: the second is refused, naming
    the first."""
    line = '{{"arrival": 0, "prompt_tokens": 100, "output_tokens": 10, "prompt": 4, "prefix": {}, "prefix_tokens": {}}}'
    read_log(write(tmp_path, line.format(1, 50), line.format(1, 50)))
    for prefix, tokens in ((2, 50), (1, 60)):
        with pytest.raises(SpecError) as err:
            read_log(write(tmp_path, line.format(1, 50), GOOD, line.format(prefix, tokens)))
        [problem] = err.value.problems
        assert problem.path.endswith(":3")
        assert "prompt 4 starts with another prefix here than on line 1" in problem.message
    with pytest.raises(SpecError, match="another prefix"):
        read_log(write(tmp_path, line.format(1, 50), GOOD.replace("}", ', "prompt": 4}')))


def test_every_bad_line_is_reported_at_once_up_to_ten(tmp_path):
    path = write(tmp_path, GOOD, "oops", GOOD, "{}", *["nope"] * 20)
    with pytest.raises(SpecError) as err:
        read_log(path)
    problems = err.value.problems
    assert [p.path for p in problems[:2]] == [f"{path}:2", f"{path}:4"]
    assert len(problems) == 11 and "12 more bad lines" in problems[-1].message


@pytest.mark.parametrize("content, name, says", [
    (b"", "log.jsonl", "the log has no requests"),
    (b"\n  \n", "log.jsonl", "the log has no requests"),
    (b'{"arrival": 0, "prompt_tokens": 1\xff}\n', "log.jsonl", "is not UTF-8 text (at byte offset 33)"),
    (GOOD.encode(), "log.jsonl.gz", "is named .gz but is not gzip-compressed"),
    (gzip.compress(GOOD.encode()), "log.jsonl", "is gzip-compressed but its name does not end in .gz"),
    (gzip.compress(GOOD.encode() * 50)[:30], "log.jsonl.gz", "cannot be read (EOFError)"),
])
def test_a_file_that_is_not_a_log_is_refused_whole(tmp_path, content, name, says):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SpecError) as err:
        read_log(str(path))
    [problem] = err.value.problems
    assert problem.path == str(path) and says in problem.message and problem.fix


def test_a_missing_log_is_refused_when_the_spec_is_read(tmp_path):
    with pytest.raises(SpecError, match="replay log not found"):
        setup({"path": str(tmp_path / "nope.jsonl")})
    with pytest.raises(SpecError, match="the replay log not found"):
        read_log(str(tmp_path / "nope.jsonl"))


@pytest.mark.parametrize("workload, path, says", [
    ({"kind": "replay"}, "workload.replay", "kind replay needs a replay section"),
    ({"kind": "chat", "requests": 5, "replay": {"path": str(FIXTURE)}}, "workload.replay",
     "only read with kind: replay (kind is chat)"),
    ({"kind": "replay", "replay": {"path": str(FIXTURE)}, "arrivals": {"rate": "5/s"}}, "workload.arrivals",
     "kind replay does not read workload.arrivals: its requests come from the log workload.replay names"),
    ({"kind": "replay", "replay": {"path": str(FIXTURE)}, "output": 10}, "workload.output", "does not read"),
])
def test_the_spec_says_where_a_replay_takes_its_requests_from(workload, path, says):
    with pytest.raises(SpecError) as err:
        from_mapping({"name": "r", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"}, "workload": workload})
    assert any(p.path == path and says in p.message for p in err.value.problems), err.value.render()


def test_a_replay_needs_no_end_of_its_own():
    assert len(requests(setup({"path": str(FIXTURE)}))) == 7


def test_every_line_is_read_as_json_with_the_documented_fields():
    """The fixture is the format the module docstring gives, and nothing else."""
    for line in FIXTURE.read_text().splitlines():
        if line.strip():
            assert set(json.loads(line)) <= {"arrival", "prompt_tokens", "output_tokens", "prompt", "prefix",
                                              "prefix_tokens", "stage", "ttft", "e2e"}


def test_capacity_searches_the_replay_speed_and_the_planner_refuses_a_log():
    """A log replays its own timestamps: `kvplan capacity` searches how much faster it may be replayed (time_scale),
    and `kvplan plan`, which sets an arrival rate, refuses it."""
    from kvplan.plan.search import plan
    from kvplan.spec.slo import Slo
    from kvplan.sweep.capacity import Knob

    topo = from_mapping({"name": "r", "model": "Llama-3.1-8B", "serving": {"gpu": "H100-SXM"},
                         "workload": {"kind": "replay", "replay": {"path": str(FIXTURE), "time_scale": 2}}})
    knob = Knob.of(topo)
    assert (knob.path, knob.start, knob.time_scale, knob.unit) == ("workload.replay.time_scale", 1.0, 2.0, "x")
    with pytest.raises(SpecError, match="a per-request log replays its own timestamps"):
        plan(topo, 1.0, slo=Slo(ttft_p99=0.5))
