"""The step-time model against public GPU measurements (kvplan.gpufit, docs/fidelity-gpu.md): the page is
what the data gives, the catalog holds the fitted coefficients, the fits recover what they should and never
look at what they hold back, and benchmarks (public ones and `vllm bench serve` result files) replay as the
benchmark ran."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvplan.catalog import load_catalog
from kvplan.errors import SpecError
from kvplan.gpufit import operators, report
from kvplan.gpufit.benchmarks import Benchmark, Replay, public, read_vllm_result
from kvplan.resources import data_root
from kvplan.sim.steptime import StepTime
from kvplan.spec import from_mapping, load
from kvplan.step_coefficients import catalog_step

from conftest import REPO
from test_cli import run

DOC = REPO / "docs" / "fidelity-gpu.md"
FITTED = {"A100-80GB": "A100-80GB", "A100-40GB": "A100-80GB", "H100-SXM": "H100-SXM", "H200": "H100-SXM"}


@pytest.fixture(scope="module")
def fits():
    replay = Replay()
    try:
        yield {gpu: report.fit_gpu(gpu, replay) for gpu in ("A100-80GB", "H100-SXM")}
    finally:
        replay.close()


def test_the_page_is_what_the_data_gives():
    text, MARK = DOC.read_text(), report.MARK
    assert MARK in text, "docs/fidelity-gpu.md lost its generated part's marker"
    assert text.split(MARK, 1)[1] == report.document(), \
        "docs/fidelity-gpu.md is stale: python -m kvplan.gpufit.report --write docs/fidelity-gpu.md"


@pytest.mark.parametrize("gpu", sorted(FITTED))
def test_the_catalog_holds_the_fitted_coefficients(gpu, fits):
    """A100-40GB and H200 take the coefficients of the part vidur profiled (same silicon)."""
    efficiency = load_catalog().devices[gpu].efficiency
    for name, value in fits[FITTED[gpu]].coefficients.items():
        assert getattr(efficiency, name) == pytest.approx(value, rel=0.02, abs=1e-9), f"{gpu} {name}"


def test_the_operator_fit_recovers_coefficients_it_is_given():
    """Layer times made by the model itself, at known coefficients, on the profiled shapes: the fit gives them back."""
    device = load_catalog().devices["H100-SXM"]
    truth = catalog_step(device).model_copy(update={"compute_efficiency": 0.71, "memory_efficiency": 0.8,
                                                        "layer_overhead": 25e-6, "small_gemm_params": 2e6})
    measured = operators.points("h100")
    made = [replace(p, seconds=operators.predict(p, device, truth)) for p in measured]
    got = operators.fit(made, device, catalog_step(device))
    assert got["memory_efficiency"] == pytest.approx(0.8, rel=0.01)
    assert got["layer_overhead"] == pytest.approx(25e-6, rel=0.02)
    assert got["compute_efficiency"] == pytest.approx(0.71, rel=0.01)
    assert got["small_gemm_params"] == 2e6


def test_no_smooth_model_follows_a_kernel_switch():
    """Neighbouring token counts whose times jump apart bound the worst error of any model nondecreasing and at most
    linear in tokens: 512 -> 520 tokens taking 1.0 -> 1.6 ms is a jump of 1.6 / (520 / 512) = 1.575, so one of the
    two is missed by at least 0.575 / 2.575 = 22 %. Times that grow with the tokens cost nothing."""
    def layer(tokens, ms):
        return operators.LayerPoint("h100", "m", tokens, 1, ms * 1e-3)

    jump = 1.6 / (520 / 512)
    assert operators.smooth_floor([layer(512, 1.0), layer(520, 1.6)]) == pytest.approx((jump - 1) / (jump + 1))
    assert operators.smooth_floor([layer(520, 1.6), layer(512, 1.0)]) == pytest.approx((jump - 1) / (jump + 1))
    assert operators.smooth_floor([layer(512, 1.0), layer(520, 0.9)]) == pytest.approx(0.1 / 1.9)   # faster with more
    assert operators.smooth_floor([layer(n, 0.1 + n / 1000) for n in (16, 32, 64, 1024)]) == 0.0


def test_the_fastest_measured_layer_bounds_a_real_prefill():
    """No layer in vidur's H100 profiles ran its matrix multiplies above ~70 % of the peak; a GPU with no profiles
    is bounded by its peak alone."""
    assert 0.6 < operators.efficiency_ceiling("H100-SXM") < 0.75
    assert 0.6 < operators.efficiency_ceiling("A100-80GB") < 0.8
    assert operators.efficiency_ceiling("L40S") is None


def test_what_is_held_back_does_not_move_the_fit(monkeypatch, fits):
    """Doubling every held-back layer time (the catalog's models) leaves the fitted coefficients as they were."""
    real = operators.points

    def doubled(gpu):
        return [replace(p, seconds=p.seconds * 2) if p.model in report.CATALOG_MODELS else p for p in real(gpu)]

    monkeypatch.setattr(operators, "points", doubled)
    replay = Replay()
    try:
        again = report.fit_gpu("A100-80GB", replay)
    finally:
        replay.close()
    assert again.coefficients == fits["A100-80GB"].coefficients
    assert {p.model for p, _, held in again.layers if held} == {"Llama-2-7b-hf", "Llama-2-70b-hf", "Meta-Llama-3-8B",
                                                                "Meta-Llama-3-70B"}


def test_the_vidur_data_says_where_it_came_from():
    root = data_root() / "models" / "profiles" / "vidur"
    source = yaml.safe_load((root / "SOURCE.yaml").read_text())
    assert len(source["commit"]) == 40 and source["repository"] == "https://github.com/microsoft/vidur"
    assert "MIT License" in (root / "LICENSE").read_text()
    for path in (root / "compute").glob("*/*.csv"):
        assert path.stem in source["models"], path
    assert operators.points("a100") and operators.points("h100")


def test_every_public_benchmark_cites_its_source_and_names_what_kvplan_knows():
    cat = load_catalog()
    benchmarks = public()
    assert len({b.id for b in benchmarks}) == len(benchmarks)
    for b in benchmarks:
        assert b.source.get("url", "").startswith("https://"), b.id
        if b.replayable() is None:
            assert b.gpu in cat.devices and cat.llm(b.model) is not None, b.id


# ---- replaying a benchmark

def bench(**fields) -> Benchmark:
    base = dict(id="t", source={"url": "https://example.org"}, gpu="H100-SXM", model="Llama-3.1-8B", tensor_parallel=1,
                input_len=1024, output_len=64, num_prompts=4, metrics={"ttft_median_ms": 1.0})
    return Benchmark(**{**base, **fields})


def test_one_at_a_time_each_prompt_runs_alone():
    """Max concurrency 1: TTFT is one prefill step (plus request_overhead) and TPOT the decode steps' mean."""
    replay = Replay()
    try:
        b = bench(max_concurrency=1)
        r = replay.resolved(b)
        got = replay.predict(b)
    finally:
        replay.close()
    st = StepTime(r)
    assert got.ttft_median_ms == pytest.approx((r.step.request_overhead + st.prefill_seconds(1024)) * 1e3, rel=1e-6)
    decode = st.decode_run(1, 1025, 63)[-1] / 63
    assert got.tpot_median_ms == pytest.approx(decode * 1e3, rel=1e-3)


def test_all_at_once_prompts_share_steps_and_wait():
    replay = Replay()
    try:
        alone, burst = replay.predict(bench(max_concurrency=1)), replay.predict(bench(num_prompts=16))
    finally:
        replay.close()
    assert burst.ttft_median_ms > 2 * alone.ttft_median_ms
    assert burst.output_throughput > 4 * alone.output_throughput


@pytest.mark.parametrize("fields, why", [({"max_concurrency": 4, "num_prompts": 100}, "closed loop at concurrency 4"),
                                         ({"input_len": None}, "lengths not stated"),
                                         ({"tensor_parallel": None}, "tensor-parallel degree not stated"),
                                         ({"excluded": "multi-step scheduling"}, "multi-step scheduling"),
                                         ({"input_lens": [10, 20], "output_lens": [5]}, "do not pair up")])
def test_what_cannot_be_replayed_says_why(fields, why):
    assert why in bench(**fields).replayable()


def test_a_benchmark_faster_than_any_measured_gpu_is_not_replayed():
    """Llama-3.1-8B, 2048 prompt tokens on one H100: 2 x 6.979e9 x 2048 FLOPs of matrix multiplies take 28.9 ms at
    the full 989 TFLOPS, ~41 ms at the best efficiency vidur measured. A 30 ms TTFT was served from a cache."""
    replay = Replay()
    try:
        fast = replay.why_not(bench(input_len=2048, metrics={"ttft_median_ms": 30.0}))
        real = replay.why_not(bench(input_len=2048, metrics={"ttft_median_ms": 60.0}))
    finally:
        replay.close()
    assert real is None
    assert fast.startswith("too fast for a cold prefill: ttft_median_ms 30 ms means 96% of H100-SXM's 989 TFLOPS")
    assert "no layer in its operator profiles ran above" in fast


# ---- vllm bench serve result files

def result(tmp_path: Path, name: str = "r.json", **changes) -> Path:
    data = {"date": "20250101-000000", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 3, "request_rate": "inf",
            "max_concurrency": 1, "completed": 3, "total_input_tokens": 3000, "total_output_tokens": 300,
            "output_throughput": 150.0, "median_ttft_ms": 60.0, "median_tpot_ms": 8.0,
            "input_lens": [500, 1000, 1500, 9], "output_lens": [100, 100, 100, 0], "errors": ["", "", "", "timeout"]}
    data.update(changes)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def h100_spec(tmp_path: Path, **serving) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"name": "h100", "model": "Llama-3.1-8B",
                                    "serving": {"gpu": "H100-SXM", "max_model_len": 8192, **serving},
                                    "workload": {"kind": "chat", "duration": "1min", "arrivals": {"rate": "1/s"}}}))
    return path


def test_a_result_file_brings_its_prompts_and_the_spec_its_deployment(tmp_path):
    topo = load(h100_spec(tmp_path, tensor_parallel=2))
    b = read_vllm_result(result(tmp_path), topo)
    assert (b.gpu, b.model, b.tensor_parallel) == ("H100-SXM", "Llama-3.1-8B", 2)
    assert b.input_lens == [500, 1000, 1500] and b.output_lens == [100, 100, 100]     # the failed request is left out
    assert b.request_rate is None and b.max_concurrency == 1 and b.replayable() is None
    assert b.metrics == {"ttft_median_ms": 60.0, "tpot_median_ms": 8.0, "output_throughput": 150.0}


@pytest.mark.parametrize("content, says", [(None, "no such file"), ("{not json", "not a JSON file"),
                                           ('{"date": 1}', "not a `vllm bench serve` result"),
                                           ('{"median_ttft_ms": 1, "completed": 0}', "no request completed"),
                                           ('{"median_ttft_ms": 1, "completed": 2, "total_input_tokens": 9}',
                                            "lacks 'total_output_tokens'"),
                                           ('{"median_ttft_ms": 1, "completed": "two"}', "cannot read")])
def test_a_bad_result_file_is_an_error_naming_it(tmp_path, content, says):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SpecError) as info:
        read_vllm_result(path, load(h100_spec(tmp_path)))
    problem = info.value.problems[0]
    assert str(path) in problem.path and says in problem.message and problem.fix


def test_calibrate_from_vllm_results_writes_a_profile_a_spec_can_name(tmp_path):
    """Two result files of one-at-a-time runs (128- and 4096-token prompts, ~10 ms more TTFT and ~0.5 ms more TPOT
    than the catalog predicts, the same TTFT growth between them): the fitted efficiency and overheads make the
    replay meet both within a few %, and a spec that names the profile simulates with it."""
    files = [result(tmp_path, "short.json", input_lens=[128] * 4, output_lens=[128] * 4, errors=[""] * 4,
                    median_ttft_ms=20.0, median_tpot_ms=9.0),
             result(tmp_path, "long.json", input_lens=[4096] * 4, output_lens=[128] * 4, errors=[""] * 4,
                    median_ttft_ms=112.0, median_tpot_ms=9.2)]
    spec_path, profile = h100_spec(tmp_path), tmp_path / "p.yaml"
    done = run("calibrate", str(spec_path), *[a for f in files for a in ("--vllm-result", str(f))], "-o", str(profile))
    assert done.returncode == 0, done.stderr
    written = yaml.safe_load(profile.read_text())
    assert written["fitted"] == ["compute_efficiency", "attention_efficiency", "graph_step_overhead", "request_overhead"]
    assert written["step_model"]["compute_efficiency"] == pytest.approx(0.676, abs=0.02)    # the catalog's H100 figure
    assert all(abs(err) < 0.05 for err in written["fit"].values()), written["fit"]
    overheads = {k: float(v.rstrip("ms")) for k, v in written["step_model"].items() if k.endswith("_overhead")}
    assert overheads["request_overhead"] == pytest.approx(10, abs=1.5)          # ms
    named = from_mapping({**yaml.safe_load(spec_path.read_text()),
                          "serving": {"gpu": "H100-SXM", "max_model_len": 8192, "step_profile": "p.yaml"}},
                         base_dir=tmp_path)
    from kvplan.resolve import resolve

    r = resolve(named)
    assert r.step.step_overhead == pytest.approx(float(written["step_model"]["step_overhead"].rstrip("ms")) * 1e-3)
    assert "step_overhead" in r.step.overridden


def test_file_names_are_printed_as_text(tmp_path):
    """A result file named like console markup keeps its brackets in calibrate's report."""
    name = "[bold]run.json"
    path = result(tmp_path, name, input_lens=[512] * 4, output_lens=[32] * 4, errors=[""] * 4)
    out = tmp_path / "[red]p.yaml"
    done = run("calibrate", str(h100_spec(tmp_path)), "--vllm-result", str(path), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert "[bold]run: ttft_median_ms" in done.stdout and "[red]p.yaml" in done.stdout


def test_a_refused_file_is_named_as_text(tmp_path):
    bad = tmp_path / "[bold]x.json"
    bad.write_text("{}")
    done = run("calibrate", str(h100_spec(tmp_path)), "--vllm-result", str(bad), "-o", str(tmp_path / "p.yaml"))
    assert done.returncode == 1 and "[bold]x.json" in done.stderr


def test_results_of_one_prompt_length_fit_only_the_overheads(tmp_path):
    from kvplan.gpufit.calibrate import fit_vllm_results
    from kvplan.resolve import resolve

    topo = load(h100_spec(tmp_path))
    files = [str(result(tmp_path, f"r{k}.json", input_lens=[1024] * 4, output_lens=[64] * 4, errors=[""] * 4))
             for k in range(2)]
    profile = fit_vllm_results(resolve(topo), topo, files)
    assert profile.fitted == ["graph_step_overhead", "request_overhead"]
    assert profile.step_model.compute_efficiency == 0.676


def test_calibrate_refuses_a_closed_loop_result_and_asks_for_one_kind(tmp_path):
    spec_path = h100_spec(tmp_path)
    closed = result(tmp_path, max_concurrency=2)
    done = run("calibrate", str(spec_path), "--vllm-result", str(closed), "-o", str(tmp_path / "p.yaml"))
    assert done.returncode == 1 and "closed loop at concurrency 2" in done.stderr and "--max-concurrency 1" in done.stderr
    assert not (tmp_path / "p.yaml").exists()
    done = run("calibrate", str(spec_path), "-o", str(tmp_path / "p.yaml"))
    assert done.returncode == 1 and "--observed" in done.stderr and "--vllm-result" in done.stderr


def test_calibrate_refuses_a_result_too_fast_for_the_gpu(tmp_path):
    fast = result(tmp_path, input_lens=[4096] * 3, output_lens=[64] * 3, errors=[""] * 3, total_input_tokens=3 * 4096,
                  median_ttft_ms=20.0)
    done = run("calibrate", str(h100_spec(tmp_path)), "--vllm-result", str(fast), "-o", str(tmp_path / "p.yaml"))
    assert done.returncode == 1 and "too fast for a cold prefill" in done.stderr
    assert "--no-enable-prefix-caching" in done.stderr and not (tmp_path / "p.yaml").exists()


def test_a_profile_for_another_gpu_or_a_missing_one_is_refused(tmp_path):
    profile = tmp_path / "a100.yaml"
    profile.write_text(yaml.safe_dump({"device": "A100-80GB", "model": "Llama-3.1-8B", "step_model": {"step_overhead": "2ms"},
                                       "fitted": ["step_overhead"], "fitted_on": [], "fit": {}}))
    with pytest.raises(SpecError) as info:
        from kvplan.resolve import resolve
        resolve(load(h100_spec(tmp_path, step_profile="a100.yaml")))
    problem = next(p for p in info.value.problems if p.path == "serving.step_profile")
    assert "A100-80GB" in problem.message and "H100-SXM" in problem.fix
    with pytest.raises(SpecError) as info:
        load(h100_spec(tmp_path, step_profile="nowhere.yaml"))
    assert any(p.path == "serving.step_profile" and "nowhere.yaml" in p.message for p in info.value.problems)


def test_the_spec_step_model_wins_over_its_profile(tmp_path):
    from kvplan.resolve import resolve

    profile = tmp_path / "h100.yaml"
    profile.write_text(yaml.safe_dump({"device": "H100-SXM", "model": "Llama-3.1-8B",
                                       "step_model": {"step_overhead": "2ms", "request_overhead": "5ms"},
                                       "fitted": [], "fitted_on": [], "fit": {}}))
    r = resolve(load(h100_spec(tmp_path, step_profile="h100.yaml", step_model={"step_overhead": "3ms"})))
    assert r.step.step_overhead == pytest.approx(3e-3) and r.step.request_overhead == pytest.approx(5e-3)
    assert np.isclose(r.step.memory_efficiency, 0.863)                          # neither set it: the catalog's
