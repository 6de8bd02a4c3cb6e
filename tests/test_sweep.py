"""Sweeps: one spec, many variants (`--vary PATH=V1,V2,...`), each run with N seeds, on one
process, a local process pool or Ray, with identical results whichever runs them.

The runs use examples/local.yaml (a tiny model on one CPU host) cut to a few dozen requests,
so a run takes a fraction of a second.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import REPO, example_data, with_changes
from kvplan.cli import app
from kvplan.errors import SpecError
from kvplan.sweep.confidence import confidence
from kvplan.spec import from_mapping
from kvplan.sweep.cache import RESOLVE_MODULES, RunCache, run_cached
from kvplan.sweep.executor import Task, run_tasks
from kvplan.sweep.result import METRICS
from kvplan.sweep.sweep import sweep
from kvplan.sweep.variants import VaryUsageError, expand, parse_vary


def small(**changes) -> dict:
    """examples/local.yaml with 40 requests (and any further changes)."""
    return with_changes(example_data("local"), workload__requests=40, **changes)


def write_spec(tmp_path: Path, data: dict, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def variants(*varies: str, zip_: bool = False, data: dict | None = None):
    return expand(data or small(), [parse_vary(v) for v in varies], zip_=zip_, base_dir=REPO / "examples")


def dumps(results) -> list[str]:
    return [r.model_dump_json() for r in results]


# ---- variants -------------------------------------------------------------------------------

def test_varies_combine_into_every_combination_the_first_changing_slowest():
    points = variants("serving.max_num_seqs=2,8", "workload.arrivals.session_rate=1/s,2/s,4/s")
    assert [p.label for p in points][:4] == [
        "serving.max_num_seqs=2, workload.arrivals.session_rate=1/s", "serving.max_num_seqs=2, workload.arrivals.session_rate=2/s",
        "serving.max_num_seqs=2, workload.arrivals.session_rate=4/s", "serving.max_num_seqs=8, workload.arrivals.session_rate=1/s"]
    assert len(points) == 6
    assert [(p.spec.serving.max_num_seqs, p.spec.workload.arrivals.session_rate) for p in points[:2]] == [(2, 1.0), (2, 2.0)]


def test_zip_pairs_the_lists_position_by_position():
    points = variants("serving.max_num_seqs=2,8", "workload.arrivals.session_rate=1/s,4/s", zip_=True)
    assert [(p.spec.serving.max_num_seqs, p.spec.workload.arrivals.session_rate) for p in points] == [(2, 1.0), (8, 4.0)]
    with pytest.raises(VaryUsageError, match="serving.max_num_seqs has 2, workload.arrivals.session_rate has 3"):
        variants("serving.max_num_seqs=2,8", "workload.arrivals.session_rate=1/s,2/s,4/s", zip_=True)


def test_values_are_yaml_scalars_so_units_keep_working():
    points = variants("lmcache.nvme.size=512MiB,2GiB", "workload.output=16,64")
    assert points[0].spec.lmcache.nvme.size == 512 * 2**20
    assert [p.spec.workload.output.mean for p in points[:2]] == [16, 64]


def test_zero_removes_a_tier_and_null_restores_a_default():
    no_nvme, with_nvme = variants("lmcache.nvme.size=0,8GiB")
    assert no_nvme.spec.lmcache.nvme is None and with_nvme.spec.lmcache.nvme.size == 8 * 2**30
    assert no_nvme.spec.lmcache.ddr is not None                      # only that tier goes
    default, = variants("serving.max_num_seqs=null")
    assert default.spec.serving.max_num_seqs == from_mapping(
        with_changes(small(), serving__max_num_seqs=None)).serving.max_num_seqs


def test_an_invalid_value_is_refused_before_anything_runs_naming_the_variant_field_and_fix():
    with pytest.raises(SpecError) as caught:
        variants("lmcache.ddr.size=0,1GiB")          # mp mode: ddr is the server's L1
    problem, = caught.value.problems
    assert problem.path == "lmcache.ddr" and "(in variant lmcache.ddr.size=0)" in problem.message
    assert "use mode: inprocess" in problem.fix
    with pytest.raises(SpecError) as caught:
        variants("serving.max_num_seqs=4,lots")
    problem, = caught.value.problems
    assert problem.path == "serving.max_num_seqs" and "serving.max_num_seqs=lots" in problem.message
    assert problem.value == "lots" and problem.fix


def test_an_unknown_path_names_the_key_and_suggests_the_right_one():
    with pytest.raises(SpecError) as caught:
        variants("lmcache.dr.size=1GiB")
    problem, = caught.value.problems
    assert problem.path == "--vary lmcache.dr.size" and "unknown key 'dr' in lmcache" in problem.message
    assert problem.fix == "did you mean 'lmcache.ddr.size'?"
    with pytest.raises(SpecError, match="lmcache.ddr.size is a single value"):
        variants("lmcache.ddr.size.gb=1")


@pytest.mark.parametrize("text, message", [("serving.instances", "not PATH=V1,V2"),
                                           ("serving.instances=2,,4", "empty value"),
                                           ("serving..instances=2", "not a dotted spec path"),
                                           # issue 49: the tag's ValueError escaped as a traceback
                                           ("serving.max_num_seqs=!!int 0b102", "not a YAML scalar")])
def test_a_vary_that_cannot_be_read_is_a_usage_error(text, message):
    with pytest.raises(VaryUsageError, match=message):
        parse_vary(text)


# ---- executors ------------------------------------------------------------------------------

def trace_spec(tmp_path: Path) -> Path:
    """A spec in its own folder replaying `trace.jsonl` from that folder (a relative path)."""
    folder = tmp_path / "spec"
    folder.mkdir()
    lines = [json.dumps({"timestamp": i * 400, "input_length": 400 + 20 * (i % 5), "output_length": 8,
                         "hash_ids": [i % 3, 100 + i]}) for i in range(30)]
    (folder / "trace.jsonl").write_text("\n".join(lines) + "\n")
    data = with_changes(example_data("local"), workload={"kind": "trace",
                                                         "trace": {"path": "trace.jsonl", "block_size": 256}})
    return write_spec(folder, data)


def test_relative_trace_paths_work_in_variants_and_worker_processes(tmp_path, monkeypatch):
    spec_path = trace_spec(tmp_path)
    monkeypatch.chdir(tmp_path)                         # not the spec's folder
    result, simulated = sweep(spec_path, [parse_vary("serving.max_num_seqs=2,8")], workers=2)
    assert simulated == 2 and [p.metrics["requests_per_s"].mean > 0 for p in result.points] == [True, True]


def tasks() -> list[Task]:
    specs = [v.spec for v in variants("serving.max_num_seqs=2,8")]
    return [Task(spec, seed) for spec in specs for seed in (1, 2)]


def test_two_worker_processes_give_byte_identical_results_in_task_order():
    done = []
    local = run_tasks(tasks())
    pooled = run_tasks(tasks(), workers=2, on_done=lambda n, total: done.append((n, total)))
    assert dumps(pooled) == dumps(local)
    assert [(r.seed, r.spec_hash) for r in pooled] == [(t.seed, t.spec.spec_hash()) for t in tasks()]
    assert done == [(1, 4), (2, 4), (3, 4), (4, 4)]


def test_ray_gives_byte_identical_results():
    import ray    # an ImportError here is a failure: install the test extra (it lists ray)

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_tasks(tasks(), ray="auto")
    finally:
        ray.shutdown()
    assert dumps(on_ray) == dumps(run_tasks(tasks()))


def test_asking_for_ray_without_it_installed_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)       # what `import ray` sees when it is not installed
    with pytest.raises(SpecError) as caught:
        run_tasks(tasks(), ray="auto")
    problem, = caught.value.problems
    assert problem.path == "--ray" and "pip install 'kvplan[scale]'" in problem.fix


# ---- results and the cache -------------------------------------------------------------------

def test_a_point_holds_the_mean_and_95_ci_over_its_seeds_as_simulate_reports_them(tmp_path):
    spec_path = write_spec(tmp_path, small())
    result, _ = sweep(spec_path, [parse_vary("serving.max_num_seqs=2,8")], seeds=3)
    point = result.points[1]
    assert point.values == {"serving.max_num_seqs": "8"} and point.seeds == [1, 2, 3]
    runs = run_tasks([Task(from_mapping(small(serving__max_num_seqs=8)), s) for s in (1, 2, 3)])
    mean, half = confidence([r.ttft.p99 for r in runs])
    assert (point.metrics["ttft_p99"].mean, point.metrics["ttft_p99"].ci95) == (mean, half)
    shares = sum(point.metrics[f"{t}_share"].mean for t in ("hbm", "ddr", "nvme", "ceph")) + point.metrics["recomputed"].mean
    assert shares == pytest.approx(1.0)
    assert list(point.metrics) == list(METRICS)


def test_a_missing_tier_has_no_metrics_rather_than_zeros(tmp_path):
    result, _ = sweep(write_spec(tmp_path, small()), [parse_vary("lmcache.nvme.size=0,2GiB")])
    assert result.points[0].metrics["nvme_hit"] is None and result.points[1].metrics["nvme_hit"] is not None
    no_nvme, with_nvme = csv.DictReader(io.StringIO(result.to_csv()))
    assert (no_nvme["nvme_hit_mean_ratio"], no_nvme["nvme_hit_ci95_ratio"]) == ("", "")   # empty cells, not 0
    assert float(with_nvme["nvme_hit_mean_ratio"]) >= 0


def test_the_same_sweep_writes_the_same_bytes_and_the_cache_runs_nothing_twice(tmp_path):
    spec_path = write_spec(tmp_path, small())
    cache = RunCache(tmp_path / "cache")
    varies = [parse_vary("serving.max_num_seqs=2,8")]
    first, simulated = sweep(spec_path, varies, seeds=2, cache=cache)
    again, resimulated = sweep(spec_path, varies, seeds=2, cache=cache)
    assert (simulated, resimulated) == (4, 0)
    assert again.model_dump_json() == first.model_dump_json() and again.to_csv() == first.to_csv()
    # a different sweep that shares a point runs only the new one
    _, partly = sweep(spec_path, [parse_vary("serving.max_num_seqs=8,16")], seeds=2, cache=cache)
    assert partly == 2


def test_a_cached_result_is_the_simulated_result_byte_for_byte(tmp_path):
    cache = RunCache(tmp_path)
    fresh, _ = run_cached(tasks()[:1], cache)
    cached, simulated = run_cached(tasks()[:1], cache)
    assert simulated == 0 and dumps(cached) == dumps(fresh)



def test_the_cache_starts_afresh_when_any_module_the_resolver_joins_changes():
    """Every run reads Resolved, so the cache's fingerprint hashes every module whose numbers resolve.py joins into it
    (the spec's own modules, the ground's and the catalog's aside: the catalog is hashed as its files); a module split
    out of the resolver that the fingerprint missed would serve results computed by the old code."""
    tree = ast.parse((REPO / "kvplan" / "resolve.py").read_text())
    joined = {f"{node.module}.py" for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module
              and (REPO / "kvplan" / f"{node.module}.py").is_file() and node.module not in ("errors", "units", "catalog")}
    assert {"accelerator_fit.py", "step_coefficients.py", "resolved_tiers.py", "router_settings.py"} <= joined
    assert joined <= set(RESOLVE_MODULES)
    assert all((REPO / "kvplan" / name).is_file() for name in RESOLVE_MODULES)

# ---- the command -------------------------------------------------------------------------------

def kvplan(*args: str):
    """Run the command in this process (stdout and stderr together in .output)."""
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False, env={"COLUMNS": "120"})


def test_kvplan_sweep_prints_one_table_and_writes_json_and_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec_path = write_spec(tmp_path, small())
    result = kvplan("sweep", spec_path, "--vary", "serving.max_num_seqs=2,8", "--out", "s.json", "--csv", "s.csv",
                    "--cache-dir", "cache")
    assert result.exit_code == 0, result.output
    assert "Sweep of local over serving.max_num_seqs: 2 point(s) x 1 seed(s)" in result.output
    assert "2 run(s): 2 simulated, 0 from the cache (cache)" in result.output
    saved = json.loads((tmp_path / "s.json").read_text())
    assert saved["varied"] == ["serving.max_num_seqs"] and len(saved["points"]) == 2
    assert (tmp_path / "s.csv").read_text().startswith("serving.max_num_seqs,spec_hash,seeds,requests_per_s_mean,")


def test_kvplan_sweep_exit_codes(tmp_path):
    spec_path = write_spec(tmp_path, small())
    usage = kvplan("sweep", spec_path, "--vary", "serving.max_num_seqs")
    assert usage.exit_code == 2 and "PATH=V1,V2" in usage.output
    invalid = kvplan("sweep", spec_path, "--vary", "serving.max_num_seqs=4,lots", "--no-cache")
    assert invalid.exit_code == 1 and "Traceback" not in invalid.output
    assert "serving.max_num_seqs: " in invalid.output and "(in variant serving.max_num_seqs=lots)" in invalid.output
    assert "fix:" in invalid.output
    both = kvplan("sweep", spec_path, "--vary", "serving.max_num_seqs=4", "--workers", "2", "--ray", "auto")
    assert both.exit_code == 2 and "give one of them" in both.output
