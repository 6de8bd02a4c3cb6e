"""Real GPU servers end to end (docs/fidelity-e2e.md): the twelve usable BLIS runs replayed request by request,
the serving path's two end-to-end coefficients fitted on them, and the fit held out model by model.

The page is regenerated here and must be current; the catalog's H100 (and H200, the same silicon and software)
must hold what the runs fit, so a change to the model or the data that moves the fit shows here, not later.
"""

from __future__ import annotations

import pytest

from conftest import REPO
from kvplan.catalog import load_catalog
from kvplan.gpufit import e2e, e2e_report

DOC = REPO / "docs" / "fidelity-e2e.md"


@pytest.fixture(scope="module")
def runs():
    return e2e.blis_runs()


def test_every_usable_run_replays_with_the_kv_blocks_its_engine_reported(runs):
    assert len(runs) == 12
    assert len({r.model for r in runs}) == 4
    for run in runs:
        r = run.resolved()
        assert r.hbm_blocks == run.spec["serving"]["kv_cache_memory"] // (r.block_bytes // r.tensor_parallel)
        assert r.async_scheduling and r.cuda_graph_max_tokens == 2 * r.max_num_seqs


def test_the_page_is_what_the_runs_give():
    assert DOC.read_text() == e2e_report.document(), \
        "docs/fidelity-e2e.md is stale: python -m kvplan.gpufit.e2e_report --write docs/fidelity-e2e.md"


@pytest.mark.parametrize("gpu", ["H100-SXM", "H200"])
def test_the_catalog_holds_what_the_runs_fit(gpu, runs):
    fitted = {"graph_step_overhead": e2e.fit_decode_overhead([p for run in runs for p in e2e.decode_points(run)])}
    efficiency = load_catalog().devices[gpu].efficiency
    assert efficiency.graph_step_overhead == pytest.approx(fitted["graph_step_overhead"], rel=0.005)
    assert efficiency.graph_layer_overhead == 0.0
    text = DOC.read_text()      # the request overhead needs every run simulated: the page, checked above, has it
    assert f"| all 12 runs (the catalog's H100-SXM) | 1.6 ms | {efficiency.request_overhead * 1e3:.1f} ms |" in text


def test_the_decode_fit_recovers_an_overhead_it_is_given(runs):
    """Points whose measured TPOT is their step without overhead plus 1.234 ms give back 1.234 ms."""
    points = [p for run in runs[:3] for p in e2e.decode_points(run)]
    made = [e2e.DecodePoint(p.run, p.model, p.batch, p.context, p.without_overhead + 1.234e-3, p.without_overhead)
            for p in points]
    assert e2e.fit_decode_overhead(made) == pytest.approx(1.234e-3)


def test_a_step_under_cuda_graphs_pays_the_graph_overheads_and_a_larger_one_the_eager_ones(runs):
    from kvplan.sim.steptime import StepTime

    r = runs[0].resolved()
    st = StepTime(r)
    at_limit = st.breakdown(((r.cuda_graph_max_tokens, 0),), 0, 0)
    above = st.breakdown(((r.cuda_graph_max_tokens + 1, 0),), 0, 0)
    assert at_limit.overhead_s == pytest.approx(r.step.graph_step_overhead + r.model.num_layers * r.step.graph_layer_overhead)
    assert above.overhead_s == pytest.approx(r.step.step_overhead + r.model.num_layers * r.step.layer_overhead)
    assert st.decode_run(8, 8 * 600, 1)[0] == pytest.approx(st.step((), 8, 8 * 600))
