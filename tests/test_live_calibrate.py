"""kvplan.live.calibrate: the step model fitted to bench runs, and the device profile it makes.

calibrate.py fits the step model's coefficients to the latencies a bench run measured (checked here
against simulations run with known coefficients); kvplan.spec.profile writes the fit as a device
profile, reads it back, and applies it only to the accelerator it was fitted on.
"""

from __future__ import annotations


import numpy as np
import pytest

from kvplan.errors import SpecError
from kvplan.live.bench import Outcome
from kvplan.live.calibrate import bounded_least_absolute, fit
from kvplan.live.observed import BenchRun
from kvplan.resolve import resolve
from kvplan.sim.run import run as simulate
from kvplan.spec import load, read_yaml
from kvplan.spec.profile import Profile, apply_profile, read_profile, write_profile

from conftest import REPO
from live_fakes import LOCAL, MODEL, bench_run, local


def calibration_workload(requests_: int = 40) -> dict:
    """local.yaml's workload, shorter and slow enough that requests rarely overlap: calibration assumes a
    TTFT of one prefill step, at low load."""
    w = read_yaml(LOCAL)["workload"]
    return dict(w, requests=requests_, arrivals={"process": "poisson", "session_rate": "0.02/s"})


def as_bench_run(base, sim) -> BenchRun:
    """A bench run whose client saw exactly what the simulator predicted, request by request."""
    t = sim.per_request
    outs = []
    for k in range(len(t.id)):
        o = Outcome(int(t.id[k]), -1, 0, 0, float(t.arrival[k]), int(t.prompt_tokens[k]), int(t.output_tokens[k]),
                    sent=float(t.arrival[k]), received_tokens=int(t.output_tokens[k]))
        o.first_token = o.sent + float(t.ttft[k])
        o.last_token = o.first_token + float(t.tpot[k]) * (o.received_tokens - 1)
        outs.append(o)
    return bench_run(base, outs)


@pytest.mark.parametrize("truth", [
    {"compute_efficiency": 0.3, "step_overhead": 0.004, "request_overhead": 0.012},
    {"compute_efficiency": 0.8, "step_overhead": 0.015, "request_overhead": 0.003},
    # a slow CPU: decode steps are compute-bound, so the decode roofline must use the fitted efficiency
    {"compute_efficiency": 0.1, "step_overhead": 0.001, "request_overhead": 0.030},
], ids=["mid", "fast", "compute-bound-decode"])
def test_fit_recovers_the_coefficients_a_simulation_ran_with(truth):
    """Simulate local.yaml with known coefficients, hand the simulated latencies to fit() as if a bench run
    had measured them, and get the coefficients back (within 15 %)."""
    base = local(calibration_workload())
    true_spec = local(calibration_workload(), step_model={k: (f"{v * 1000:g}ms" if k != "compute_efficiency" else v)
                                                          for k, v in truth.items()})
    assert true_spec.step.compute_efficiency == truth["compute_efficiency"] != base.step.compute_efficiency
    sim = simulate(true_spec)
    run = as_bench_run(base, sim)
    profile = fit(base, [("runs/x", run)], [sim])
    got = profile.step_model
    assert got.compute_efficiency == pytest.approx(truth["compute_efficiency"], rel=0.15)
    assert got.step_overhead == pytest.approx(truth["step_overhead"], rel=0.15)
    assert got.request_overhead == pytest.approx(truth["request_overhead"], rel=0.15)
    assert got.memory_efficiency == base.step.memory_efficiency           # not fitted: the catalog's
    assert profile.device == "cpu-epyc-2vcpu" and profile.model == MODEL
    assert profile.fitted_on[0]["run"] == "runs/x" and profile.fit["requests"] == len(sim.per_request.id)


def test_fit_keeps_both_efficiencies_apart_only_when_the_runs_pin_their_ratio_down():
    """Noise-free latencies give the attention efficiency back; the same latencies with +-40 % of noise (a busy
    2-core machine) cannot tell attention from the matrix multiplies, and the profile fits one shared
    efficiency instead of a split that is noise, and says so."""
    base = local(calibration_workload(60))
    sim = simulate(local(calibration_workload(60), step_model={"compute_efficiency": 0.5, "attention_efficiency": 0.15}))
    clean = fit(base, [("r", as_bench_run(base, sim))], [sim])
    assert clean.step_model.attention_efficiency == pytest.approx(0.15, rel=0.15)
    assert "attention_efficiency" in clean.fitted
    run = as_bench_run(base, sim)
    noise = np.random.default_rng(7).uniform(0.6, 1.4, len(run.requests["ttft"]))
    noisy_run = run.model_copy(update={"requests": dict(run.requests, ttft=list(np.asarray(run.requests["ttft"]) * noise))})
    noisy = fit(base, [("r", noisy_run)], [sim])
    assert noisy.step_model.attention_efficiency == noisy.step_model.compute_efficiency
    assert "attention_efficiency (= compute_efficiency: the runs cannot tell them apart)" in noisy.fitted
    lo, hi = noisy.fit["attention_to_linear_slope_p5"], noisy.fit["attention_to_linear_slope_p95"]
    assert hi / lo > 3.0


def test_bounded_least_absolute_is_the_best_line_inside_the_bounds():
    """An efficiency above the peak is not clamped after the fit: the bound is part of the fit, and the other
    coefficients are those that best draw the data with it. Checked against a brute-force search."""
    rng = np.random.default_rng(3)
    x1, x2 = rng.uniform(0, 1, 50), rng.uniform(0, 1, 50)
    y = 0.2 + 0.6 * x1 + 2.0 * x2 + rng.normal(0, 0.02, 50)        # slope 0.6 on x1: an efficiency of 1.7
    X = np.c_[np.ones(50), x1, x2]
    b = bounded_least_absolute(X, y, lower=np.array([0.0, 1.0, 1.0]))
    assert b[1] == 1.0
    grid = [(a, c) for a in np.linspace(0, 0.4, 81) for c in np.linspace(1.0, 3.0, 81)]
    cost = lambda a, c: np.abs(y - a - x1 - c * x2).sum()  # noqa: E731
    best = min(grid, key=lambda ac: cost(*ac))
    assert np.abs(y - X @ b).sum() <= cost(*best) + 1e-9


def test_fit_leaves_failed_requests_out():
    base = local(calibration_workload())
    sim = simulate(local(calibration_workload(), step_model={"compute_efficiency": 0.3}))
    run = as_bench_run(base, sim)
    requests_ = dict(run.requests, error=["HTTP 500"] * 5 + [None] * (len(run.requests["id"]) - 5))
    profile = fit(base, [("r", run.model_copy(update={"requests": requests_}))], [sim])
    assert profile.fit["requests"] == len(run.requests["id"]) - 5


def test_fit_refuses_too_few_requests():
    base = local(calibration_workload(6))
    sim = simulate(base)
    with pytest.raises(SpecError, match="only 6 successful requests to fit"):
        fit(base, [("r", as_bench_run(base, sim))], [sim])


def test_a_profile_round_trips_through_its_yaml(tmp_path):
    base = local(calibration_workload())
    sim = simulate(local(calibration_workload(), step_model={"compute_efficiency": 0.3, "step_overhead": "4ms"}))
    profile = fit(base, [("runs/x", as_bench_run(base, sim))], [sim])
    path = tmp_path / "profiles" / "cpu.yaml"
    write_profile(profile, path)
    text = path.read_text()
    assert text.startswith("# Device profile of cpu-epyc-2vcpu serving kvplan-tiny-llama")
    assert "local (2026-11-29T19:43:00+00:00)" in text.splitlines()[0]
    back = read_profile(path)
    assert (back.device, back.model, back.fitted, back.fitted_on, back.fit) == \
        (profile.device, profile.model, profile.fitted, profile.fitted_on, profile.fit)
    for name in ("compute_efficiency", "memory_efficiency", "step_overhead", "allreduce_latency", "request_overhead"):
        assert getattr(back.step_model, name) == pytest.approx(getattr(profile.step_model, name), rel=1e-3), name


def test_read_profile_names_a_missing_or_malformed_file(tmp_path):
    with pytest.raises(SpecError, match="no profile at"):
        read_profile(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("device: x\n")
    with pytest.raises(SpecError, match="is not a kvplan device profile"):
        read_profile(bad)


def test_a_profile_applies_only_to_the_accelerator_it_was_fitted_on():
    profile = Profile(device="cpu-epyc-2vcpu", model=MODEL, fitted=["compute_efficiency"], fitted_on=[], fit={},
                      step_model={"compute_efficiency": 0.2, "step_overhead": "3ms"})
    topo = load(LOCAL)
    applied = resolve(apply_profile(topo, profile))
    assert applied.step.compute_efficiency == 0.2 and applied.step.step_overhead == pytest.approx(0.003)
    other = load(REPO / "examples" / "chat-llama2-13b.yaml")
    with pytest.raises(SpecError) as info:
        apply_profile(other, profile)
    text = info.value.render()
    assert f"fitted on cpu-epyc-2vcpu; this spec runs on {other.serving.gpu}" in text
