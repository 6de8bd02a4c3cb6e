"""`--set PATH=VALUE`: a spec field changed for one run, the file untouched (kvplan/spec/overrides.py).

Every command that reads a spec takes it, repeatable: the path must name a field of the spec schema (a typo is
refused with a "did you mean"), the value is read as YAML as in the file, the overrides apply left to right (the
last wins) and the spec is validated after them. Each change is echoed on stderr, and the result files keep them.
The runs use examples/local.yaml (a tiny model on one CPU host) cut to 40 requests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from conftest import example_data, with_changes
from kvplan.cli import app
from kvplan.errors import SpecError
from kvplan.spec.overrides import SetUsageError, apply, parse
from kvplan.validation import load

pytestmark = pytest.mark.unit


@pytest.fixture
def spec_path(tmp_path) -> Path:
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), workload__requests=40), sort_keys=False))
    return path


def kvplan(*args):
    """Run the command in this process; .stdout and .stderr apart."""
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False,
                                              env={"COLUMNS": "120"})


def sets(*texts: str):
    return [parse(t) for t in texts]


# ---- what an override does ---------------------------------------------------------------------

def test_overrides_apply_left_to_right_and_the_last_of_one_path_wins(spec_path):
    topo = load(spec_path, sets("serving.max_num_seqs=2", "lmcache.ddr.size=2GiB", "serving.max_num_seqs=4"))
    assert topo.serving.max_num_seqs == 4
    assert topo.lmcache.ddr.size == 2 * 2**30


def test_the_value_is_read_as_yaml_as_in_the_file_units_included(spec_path):
    topo = load(spec_path, sets("lmcache.ceph.ttl=2d", "serving.prefix_caching=false", "workload.output=16"))
    assert (topo.lmcache.ceph.ttl, topo.serving.prefix_caching, topo.workload.output.mean) == (172800.0, False, 16)


def test_a_field_the_file_leaves_to_its_default_may_be_set(spec_path):
    assert "gpu_memory_utilization" not in yaml.safe_load(spec_path.read_text())["serving"]
    topo = load(spec_path, sets("serving.gpu_memory_utilization=0.8"))
    assert topo.serving.gpu_memory_utilization == 0.8


def test_null_removes_the_key_so_its_default_applies(spec_path):
    assert load(spec_path).serving.max_num_seqs == 8
    assert load(spec_path, sets("serving.max_num_seqs=null")).serving.max_num_seqs is None   # vLLM's own default


def test_a_list_item_is_named_by_its_index(tmp_path):
    data = with_changes(example_data("local"), workload__requests=40)
    data["workload"]["stages"] = [{"duration": "10s", "session_rate": "1/s"}, {"duration": "10s", "session_rate": "2/s"}]
    del data["workload"]["requests"], data["workload"]["arrivals"]["session_rate"]
    path = tmp_path / "staged.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    topo = load(path, sets("workload.stages.1.session_rate=3/s"))
    assert [s.session_rate for s in topo.workload.stages] == [1.0, 3.0]
    with pytest.raises(SpecError) as caught:
        load(path, sets("workload.stages.2.session_rate=3/s"))
    assert "has 2 item(s); there is no item 2" in caught.value.render() and "0 to 1" in caught.value.render()


def test_the_spec_file_on_disk_is_not_touched(spec_path):
    before = spec_path.read_bytes()
    result = kvplan("validate", spec_path, "--set", "serving.max_num_seqs=2")
    assert result.exit_code == 0, result.stderr
    assert spec_path.read_bytes() == before


def test_applying_returns_a_copy_and_says_what_each_override_replaced():
    data = {"serving": {"max_num_seqs": 8}}
    changed, changes = apply(data, sets("serving.max_num_seqs=2", "serving.max_num_seqs=4", "serving.port=9000"))
    assert data == {"serving": {"max_num_seqs": 8}} and changed["serving"] == {"max_num_seqs": 4, "port": 9000}
    assert [c.line() for c in changes] == ["set: serving.max_num_seqs 8 -> 2", "set: serving.max_num_seqs 2 -> 4",
                                           "set: serving.port (not in the spec) -> 9000"]


# ---- what is refused -----------------------------------------------------------------------------

@pytest.mark.parametrize("text, words", [
    ("serving.max_num_sqs=4", ["unknown key 'max_num_sqs' in serving", "did you mean serving.max_num_seqs?",
                               "allowed: activation_memory"]),
    ("lmcache.ddr.siz=2GiB", ["unknown key 'siz' in lmcache.ddr", "did you mean lmcache.ddr.size?"]),
    ("servng.max_num_seqs=4", ["unknown key 'servng' at the top of the spec", "did you mean serving.max_num_seqs?"]),
    ("serving.max_num_seqs.low=4", ["serving.max_num_seqs is a single value, not a section"]),
    ("serving.max_num_seqs", ["is not PATH=VALUE"]),
    ("serving.max_num_seqs=", ["has no value", "=null to remove"]),
    ("serving..max_num_seqs=4", ["is not a dotted spec path"]),
    ("0.name=x", ["'0' is a list index, but the top of the spec (its sections) is not a list", "start the path"]),
])
def test_a_path_that_names_no_spec_field_is_a_usage_error_with_the_fix(text, words):
    with pytest.raises(SetUsageError) as caught:
        parse(text)
    for w in words:
        assert w in str(caught.value)


def test_the_cli_refuses_a_bad_path_with_exit_2_and_runs_nothing(spec_path):
    result = kvplan("simulate", spec_path, "--set", "serving.max_num_sqs=4")
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    assert "did you mean serving.max_num_seqs?" in result.stderr and result.stdout == ""


def test_a_bad_value_is_refused_by_the_loader_and_says_it_came_from_set(spec_path):
    result = kvplan("validate", spec_path, "--set", "serving.max_num_seqs=0", "--set", "lmcache.ddr.size=lots")
    assert result.exit_code == 1 and "Traceback" not in result.stderr
    assert "serving.max_num_seqs: Input should be greater than or equal to 1 (set by --set serving.max_num_seqs=0)" \
        in result.stderr
    assert "lmcache.ddr.size: cannot read 'lots' as a size" in result.stderr
    assert "(set by --set lmcache.ddr.size=lots)" in result.stderr


def test_a_value_that_is_text_is_printed_as_text(spec_path):
    result = kvplan("validate", spec_path, "--set", "lmcache.ddr.eviction='[red]LFU[/red]'")
    assert result.exit_code == 1 and "[red]LFU[/red]" in result.stderr


# ---- echoed, and kept in the results ------------------------------------------------------------

def test_the_echo_is_one_line_whatever_the_value(spec_path):
    result = kvplan("validate", spec_path, "--set", "description=two\nlines")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[0] == "set: description One machine, loopback only, for deploy tests and " \
                                            "calibration -> two\\nlines"


def test_each_change_is_echoed_on_stderr(spec_path):
    result = kvplan("validate", spec_path, "--set", "serving.max_num_seqs=2", "--set", "serving.max_num_seqs=4")
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines()[:2] == ["set: serving.max_num_seqs 8 -> 2", "set: serving.max_num_seqs 2 -> 4"]
    assert "set:" not in result.stdout


def test_simulate_out_keeps_the_overrides_and_report_and_doctor_read_the_file(spec_path, tmp_path):
    out = tmp_path / "run.json"
    result = kvplan("simulate", spec_path, "--set", "serving.max_num_seqs=2", "--out", out)
    assert result.exit_code == 0, result.stderr
    saved = json.loads(out.read_text())
    assert saved["overrides"] == ["serving.max_num_seqs=2"]
    assert saved["spec_hash"] == load(spec_path, sets("serving.max_num_seqs=2")).spec_hash()
    page = kvplan("report", out, "-o", tmp_path / "run.md")
    assert page.exit_code == 0, page.stderr
    assert "; with --set serving.max_num_seqs=2_" in (tmp_path / "run.md").read_text()
    diagnosed = kvplan("doctor", spec_path, "--set", "serving.max_num_seqs=2", "--result", out, "--no-prove")
    assert diagnosed.exit_code in (0, 6), diagnosed.stderr
    assert "another spec" not in diagnosed.stderr
    plain = kvplan("simulate", spec_path, "--out", tmp_path / "plain.json")
    assert plain.exit_code == 0 and "overrides" not in json.loads((tmp_path / "plain.json").read_text())


def test_the_next_steps_simulate_suggests_carry_the_overrides(spec_path):
    result = kvplan("simulate", spec_path, "--set", "serving.max_num_seqs=2")
    assert result.exit_code == 0, result.stderr
    assert f"kvplan size {spec_path} --set serving.max_num_seqs=2" in result.stdout


def test_size_keeps_the_overrides_in_its_result(spec_path):
    result = kvplan("size", spec_path, "--set", "lmcache.ddr.size=2GiB", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["overrides"] == ["lmcache.ddr.size=2GiB"]
    assert data["spec_hash"] == load(spec_path, sets("lmcache.ddr.size=2GiB")).spec_hash()


def test_sweep_varies_the_overridden_spec_and_keeps_the_overrides(spec_path, tmp_path):
    result = kvplan("sweep", spec_path, "--set", "workload.requests=20", "--vary", "serving.max_num_seqs=2,8",
                    "--no-cache", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["overrides"] == ["workload.requests=20"]
    assert "set: workload.requests 40 -> 20" in result.stderr
    assert data["spec_hash"] == load(spec_path, sets("workload.requests=20")).spec_hash()
    from kvplan.sweep.result import SweepResult

    assert SweepResult.model_validate({k: v for k, v in data.items() if k not in ("kind", "schema_version")}).overrides == [
        "workload.requests=20"]
    (tmp_path / "sweep.json").write_text(result.stdout)
    page = kvplan("report", tmp_path / "sweep.json", "-o", tmp_path / "sweep.md")
    assert page.exit_code == 0 and "; with --set workload.requests=20_" in (tmp_path / "sweep.md").read_text()


def test_capacity_searches_the_overridden_spec(spec_path, tmp_path):
    result = kvplan("capacity", spec_path, "--set", "slo.ttft_p99=1s", "--set", "workload.requests=20",
                    "--seeds", "1", "--no-cache", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["slo"] == {"ttft_p99": 1.0} and data["overrides"] == ["slo.ttft_p99=1s", "workload.requests=20"]
    assert data["spec_hash"] == load(spec_path, sets("slo.ttft_p99=1s", "workload.requests=20")).spec_hash()
    assert result.stderr.count("set: ") == 2          # echoed once, though the search reads the spec again


def test_plan_starts_from_the_overridden_spec_and_its_winner_says_so(spec_path, tmp_path):
    out = tmp_path / "winner.yaml"
    result = kvplan("plan", spec_path, "--rate", "1/s", "--set", "slo.ttft_p99=2s", "--set", "workload.requests=20",
                    "--max-runs", "4", "--max-instances", "1", "--no-cache", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "set: workload.requests 40 -> 20" in result.stderr
    text = out.read_text()
    assert text.startswith("# written by kvplan plan: ")        # kvplan's mark first: a second run may replace it
    assert f"\n# from {spec_path} with --set slo.ttft_p99=2s --set workload.requests=20\n" in text
    again = kvplan("plan", spec_path, "--rate", "1/s", "--set", "slo.ttft_p99=2s", "--set", "workload.requests=20",
                   "--max-runs", "4", "--max-instances", "1", "--no-cache", "--out", out)
    assert again.exit_code == 0, again.stderr
    assert yaml.safe_load(text)["workload"]["requests"] == 20 and yaml.safe_load(text)["slo"] == {"ttft_p99": "2s"}


def test_doctor_write_writes_the_spec_with_the_overrides_and_says_so(spec_path, tmp_path):
    fixed = tmp_path / "fixed.yaml"
    result = kvplan("doctor", spec_path, "--set", "workload.requests=20", "--seeds", "1", "--no-prove", "--no-cache",
                    "--write", fixed)
    assert result.exit_code in (0, 6), result.stderr
    text = fixed.read_text()
    assert text.startswith(f"# written by kvplan doctor from {spec_path} --set workload.requests=20:")
    assert yaml.safe_load(text)["workload"]["requests"] == 20


@pytest.mark.parametrize("command", ["validate", "simulate", "size", "sweep", "capacity", "plan", "doctor", "render",
                                     "deploy", "bench", "observe", "compare", "calibrate"])
def test_every_command_that_reads_a_spec_takes_set(command):
    result = kvplan(command, "--help")
    assert "--set PATH=VALUE" in result.stdout


def test_a_catalog_problem_of_an_overridden_field_says_it_came_from_set(spec_path):
    result = kvplan("validate", spec_path, "--set", "serving.gpu=H100-SMX")
    assert result.exit_code == 1
    assert "serving.gpu: unknown accelerator 'H100-SMX' (set by --set serving.gpu=H100-SMX)" in result.stderr
    assert "did you mean 'H100-SXM'?" in result.stderr


def test_a_problem_of_a_field_no_override_set_is_not_blamed_on_set(tmp_path):
    data = with_changes(example_data("local"), serving__max_num_seqs=0)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = kvplan("validate", path, "--set", "lmcache.ddr.size=2GiB")
    assert result.exit_code == 1 and "serving.max_num_seqs: Input should be greater than or equal to 1" in result.stderr
    assert "(set by" not in result.stderr


def test_render_renders_the_overridden_spec():
    result = kvplan("render", "docs/examples/production-stack.yaml", "--format", "production-stack", "--request-cpu", "8",
                    "--request-memory", "64Gi", "-o", "-", "--set", "serving.max_num_seqs=7")
    assert result.exit_code == 0, result.stderr
    assert "set: serving.max_num_seqs 64 -> 7" in result.stderr and "maxNumSeqs: 7" in result.stdout


def test_a_bench_run_keeps_the_spec_as_benched_so_compare_finds_the_same_spec(spec_path, tmp_path):
    from kvplan.cli.live import _benched_text
    from kvplan.spec.load import read_text

    given = tuple(sets("serving.max_num_seqs=2"))
    saved = tmp_path / "spec.yaml"
    saved.write_text(_benched_text(str(spec_path), given, read_text))
    assert saved.read_text().startswith(f"# written by kvplan bench: {spec_path} with --set serving.max_num_seqs=2\n")
    assert load(saved).spec_hash() == load(spec_path, given).spec_hash() != load(spec_path).spec_hash()
    assert _benched_text(str(spec_path), (), read_text) == spec_path.read_text()


def test_a_result_file_whose_overrides_are_not_path_value_strings_is_refused_by_report(spec_path, tmp_path):
    out = tmp_path / "run.json"
    assert kvplan("simulate", spec_path, "--set", "serving.max_num_seqs=2", "--out", out).exit_code == 0
    out.write_text(out.read_text().replace('"overrides": [\n  "serving.max_num_seqs=2"\n ]', '"overrides": 5'))
    page = kvplan("report", out, "-o", tmp_path / "run.md")
    assert page.exit_code == 1 and "`overrides` is not a list of PATH=VALUE strings" in page.stderr
