"""kvplan.live.compare: prediction and observation side by side.

compare.py checks that a bench run is of the spec being compared, simulates the requests the bench
sent as it sent them, and lists predicted and observed values with their error: percentage points
for shares, relative otherwise.
"""

from __future__ import annotations


import pytest

from kvplan.errors import SpecError
from kvplan.live.bench import Outcome
from kvplan.live.compare import Row, check_same_spec, predict, rows
from kvplan.live.observed import read_run
from kvplan.resolve import resolve
from kvplan.sim.run import run as simulate
from kvplan.sim.workload import requests
from kvplan.spec import load

from conftest import REPO
from live_fakes import PLAIN_BENCH, bench_run, local, outcome


@pytest.mark.parametrize("unit, predicted, observed, error, text", [
    ("share", 0.30, 0.25, 5.0, "+5.0 pp"),             # shares: percentage points
    ("share", 0.10, 0.40, -30.0, "-30.0 pp"),
    ("share", 0.20, 0.0, 20.0, "+20.0 pp"),            # a share observed 0 still has an error
    ("s", 0.11, 0.10, 0.1, "+10.0 %"),                 # others: relative
    ("req/s", 1.0, 2.0, -0.5, "-50.0 %"),
    ("bytes", 0.0, 0.0, 0.0, "+0.0 %"),                # nothing predicted, nothing seen: right
    ("bytes", 5.0, 0.0, None, "-"),                    # something predicted, nothing seen: no ratio
    ("s", None, 0.1, None, "-"),
    ("s", 0.1, None, None, "-"),
])
def test_row_error_is_percentage_points_for_shares_and_relative_otherwise(unit, predicted, observed, error, text):
    row = Row("m", unit, predicted, observed)
    assert row.error == (None if error is None else pytest.approx(error))
    assert row.error_text == text


def test_a_run_recorded_before_the_spec_schema_grew_still_matches_its_spec():
    # A new spec field changes every spec's hash; the recorded fidelity runs predate some fields.
    chat = resolve(load(REPO / "docs" / "fidelity" / "chat.yaml"))
    run = read_run(REPO / "docs" / "fidelity" / "run-chat")
    assert run.spec_hash != chat.spec_hash, "the recorded hash is from an older schema"
    check_same_spec(chat, run, str(REPO / "docs" / "fidelity" / "run-chat"))
    with pytest.raises(SpecError):
        check_same_spec(resolve(load(REPO / "docs" / "fidelity" / "rag.yaml")), run, str(REPO / "docs" / "fidelity" / "run-chat"))


def test_check_same_spec_names_both_specs():
    r = local(PLAIN_BENCH)
    other = local(dict(PLAIN_BENCH, seed=3))
    run = bench_run(other, [], name="yesterday")
    check_same_spec(other, run, "runs/a")                  # the spec it benched passes
    with pytest.raises(SpecError) as info:
        check_same_spec(r, run, "runs/a")
    text = info.value.render()
    assert f"runs/a benched spec yesterday {other.spec_hash[:12]}" in text and f"local {r.spec_hash[:12]}" in text
    assert "runs/a/spec.yaml" in text


def test_compare_rows_cover_latency_and_every_tier_the_spec_has():
    r = local(PLAIN_BENCH)
    sim = simulate(r)
    rows_ = rows(sim, bench_run(r, [outcome(0, sent=0.0, ttft=0.1, tokens=4)]))
    names = [x.metric for x in rows_]
    assert names[:3] == ["prompt tokens", "TTFT p50", "TTFT p90"]
    assert [n for n in names if n.startswith("prompt tokens from")] == \
        [f"prompt tokens from {t}" for t in ("hbm", "ddr", "nvme", "ceph", "recomputed")]
    assert names[-1] == "bytes written to Ceph"
    ttft = rows_[1]
    assert ttft.predicted == sim.ttft.p50 and ttft.observed == pytest.approx(0.1)


def test_compare_replays_each_request_when_the_bench_sent_it_so_round_robin_sends_it_where_the_router_did():
    """A chat turn whose earlier reply came late leaves late (`waited`), after requests that arrived after it: the
    real round-robin router gave it the next host in that order, and the prediction replays that order."""
    r = resolve(load(REPO / "examples" / "cluster.yaml"))              # two instances behind a round-robin router
    planned = requests(r)
    late = next(q for q in planned if q.turn > 0)
    passed = planned[late.id + 1]                                      # the request that arrived just after it
    sent = {q.id: q.arrival for q in planned} | {late.id: passed.arrival + 0.01}
    outs = [Outcome(q.id, q.session, q.turn, -1, q.arrival, q.prompt_tokens, q.output_tokens, sent=sent[q.id],
                    first_token=sent[q.id] + 0.2, last_token=sent[q.id] + 0.5, received_tokens=q.output_tokens,
                    waited=q.id == late.id) for q in planned]
    replayed = predict(r, bench_run(r, outs, seed=r.workload.seed)).per_request
    as_planned = simulate(r).per_request
    assert replayed.arrival[late.id] == pytest.approx(passed.arrival + 0.01)
    assert (replayed.instance[late.id], replayed.instance[passed.id]) == \
        (as_planned.instance[passed.id], as_planned.instance[late.id])  # the two swapped hosts
    others = [i for i in range(len(planned)) if i not in (late.id, passed.id)]
    assert list(replayed.instance[others]) == list(as_planned.instance[others])
