"""`kvplan calibrate --requests`: a team's per-request logs fit its GPU's profile the way the BLIS runs fit the
catalog's H100 (kvplan.gpufit.requests)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conftest import REPO
from kvplan.errors import SpecError
from kvplan.gpufit import e2e
from kvplan.gpufit.requests import fit_request_logs, logged_run
from kvplan.resolve import resolve
from kvplan.spec import from_mapping

ROLEPLAY = "20260217-162547-llama-2-7b-tp1-roleplay"
SPEC = {"name": "bench", "model": "Llama-2-7B", "serving": {"gpu": "H100-SXM"}, "workload": {"kind": "chat", "requests": 10}}


def write_log(tmp_path, rows: list[dict]) -> str:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def request(arrival: float, stage: int | None = None, ttft: float = 0.04, e2e: float = 1.0, output: int = 101) -> dict:
    row = {"arrival": arrival, "prompt_tokens": 500, "output_tokens": output, "ttft": ttft, "e2e": e2e}
    return row if stage is None else {**row, "stage": stage}


def test_each_stage_of_a_log_is_a_decode_point_with_its_rate_and_measured_figures(tmp_path):
    rows = [request(t, 0) for t in (0.0, 1.0, 2.0)] + [request(3.0 + t / 4, 1, ttft=0.08, e2e=2.08) for t in range(5)]
    run = logged_run(SPEC, tmp_path, write_log(tmp_path, rows), "Llama-2-7B")
    first, second = run.stages
    assert (first.rate, first.requests, second.rate, second.requests) == (1.0, 3, 4.0, 5)
    assert second.measured.ttft_mean == pytest.approx(0.08) and second.measured.tpot_mean == pytest.approx(0.02)
    assert first.measured.tpot_mean == pytest.approx(0.0096)          # (1.0 - 0.04) / (101 - 1)
    assert run.measured.e2e_mean == pytest.approx((3 * 1.0 + 5 * 2.08) / 8)
    assert run.spec["workload"] == {"kind": "replay", "replay": {"path": str((tmp_path / "requests.jsonl").resolve())}}


def test_a_log_without_stage_numbers_is_one_stage(tmp_path):
    run = logged_run(SPEC, tmp_path, write_log(tmp_path, [request(t / 2) for t in range(5)]), "Llama-2-7B")
    [stage] = run.stages
    assert stage.rate == 2.0 and stage.requests == 5


def test_a_log_that_does_not_say_what_was_measured_is_refused_at_its_first_such_line(tmp_path):
    rows = [request(0.0), {"arrival": 0.5, "prompt_tokens": 500, "output_tokens": 10}, request(1.0)]
    path = write_log(tmp_path, rows)
    with pytest.raises(SpecError) as err:
        logged_run(SPEC, tmp_path, path, "Llama-2-7B")
    [problem] = err.value.problems
    assert problem.path == f"--requests {path}:2" and "1 of 3 lines" in problem.message and '"ttft"' in problem.fix


def test_a_stage_of_one_request_has_no_rate_and_is_refused(tmp_path):
    with pytest.raises(SpecError, match="stage 1 has 1 request"):
        logged_run(SPEC, tmp_path, write_log(tmp_path, [request(0.0, 0), request(1.0, 0), request(2.0, 1)]),
                   "Llama-2-7B")


def test_a_cpu_deployment_is_sent_to_bench_runs(tmp_path):
    cpu = {**SPEC, "model": "kvplan-tiny-llama", "serving": {"gpu": "cpu-epyc-2vcpu", "block_size": 32, "kv_cache_memory": "1GiB"}}
    with pytest.raises(SpecError, match="does not run as CUDA graphs") as err:
        fit_request_logs(resolve(from_mapping(cpu)), cpu, tmp_path, [write_log(tmp_path, [request(0.0), request(1.0)])])
    assert "--observed" in err.value.problems[0].fix


def test_a_blis_runs_own_log_fits_what_the_fidelity_page_fits_from_that_run():
    """The log carries the run's requests and what they measured; calibrating from it is e2e.fit on the run."""
    [run] = [r for r in e2e.blis_runs() if r.name == ROLEPLAY]
    spec = {k: v for k, v in run.spec.items() if k != "workload"}
    log = str(e2e.blis_root() / run.spec["workload"]["replay"]["path"])
    profile = fit_request_logs(run.resolved(), spec, run.base_dir, [log])
    expected = e2e.fit([run]).coefficients
    assert profile.fitted == ["graph_step_overhead", "request_overhead"]
    assert profile.step_model.graph_step_overhead == pytest.approx(expected["graph_step_overhead"], rel=0.01)
    assert profile.step_model.request_overhead == pytest.approx(expected["request_overhead"], rel=0.01)
    assert abs(profile.fit[f"{ROLEPLAY}.jsonl.gz: ttft_mean"]) < 0.02
    assert not any(k.endswith("held out") for k in profile.fit)       # one log: nothing to hold out


def test_the_command_takes_one_kind_of_benchmark(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    log = write_log(tmp_path, [request(0.0), request(1.0)])
    result = subprocess.run([sys.executable, "-m", "kvplan", "calibrate", str(spec), "--requests", log,
                             "--vllm-result", log, "-o", str(tmp_path / "p.yaml")], capture_output=True, text=True,
                            cwd=REPO)
    assert result.returncode != 0 and "one kind per profile" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "p.yaml").exists()
