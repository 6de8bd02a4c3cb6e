"""kvplan behaves as the tools its users live in do (vLLM, Helm, kubectl, Ansible): text is printed as
text, pipes get whole lines and JSON, `-h`/`-V`/`-` work, usage lines read as usage, state lives in the
platform's user directories, and a missing deploy tool names the one command that installs it."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.table import Table

from conftest import REPO

KVPLAN = str(Path(sys.executable).parent / "kvplan")
LOCAL = REPO / "examples" / "local.yaml"
MARKUP = "[red]LRU[/red] [/b] :smile: \x1b[31mred\x1b[0m"
"""Rich markup, a closing tag that crashes a markup parser, an emoji code and a raw terminal escape."""


def kvplan(*args, env: dict | None = None, cwd: Path = REPO, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The installed `kvplan`, as a pipe sees it: not a terminal, no COLUMNS."""
    base = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([KVPLAN, *map(str, args)], cwd=cwd, env={**base, "NO_COLOR": "1", **(env or {})},
                          input=stdin, capture_output=True, text=True, timeout=300)


# ---- 1. user text is text

def test_the_consoles_print_markup_emoji_and_escapes_as_visible_text():
    from kvplan.cli.console import TextConsole, styled

    console = TextConsole(file=io.StringIO())
    table = Table()
    table.add_column("name")
    table.add_row(MARKUP)
    console.print(MARKUP)
    console.print(table)
    console.print(styled(("warning:", "bold yellow"), " ", MARKUP))
    printed = console.file.getvalue()
    assert printed.count("[red]LRU[/red] [/b] :smile:") == 3
    assert "\x1b" not in printed and printed.count("\\x1b[31mred\\x1b[0m") == 3


def test_a_spec_whose_path_and_values_hold_markup_is_echoed_as_written(tmp_path):
    spec = yaml.safe_load(LOCAL.read_text())
    spec["lmcache"]["ddr"]["eviction"] = MARKUP
    (tmp_path / "[bold]x[").mkdir()
    path = tmp_path / "[bold]x[" / "] :smile:.yaml"                        # a path holding [bold]x[/] :smile:
    path.write_text(yaml.safe_dump(spec))
    result = kvplan("validate", path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "[bold]x[/] :smile:.yaml" in result.stderr                        # the path, as named
    assert "[red]LRU[/red] [/b] :smile: \\x1b[31mred" in result.stderr      # the value, visible
    assert "\x1b" not in result.stderr


def test_a_valid_spec_under_a_markup_name_is_printed_whole(tmp_path):
    (tmp_path / "[red]spec[").mkdir()
    path = tmp_path / "[red]spec[" / "red].yaml"
    path.write_text(LOCAL.read_text())
    result = kvplan("validate", path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"valid: {path}  (local, spec ")


# ---- 2. pipes get whole lines, and JSON where a table is printed

def test_piped_tables_are_never_cut_to_a_width():
    result = kvplan("catalog")
    assert result.returncode == 0
    assert "Llama-3.1-70B" in result.stdout and "A100-40GB" in result.stdout and "…" not in result.stdout


@pytest.mark.parametrize("command", [
    ("catalog",), ("validate", LOCAL), ("simulate", LOCAL), ("size", LOCAL),
    ("sweep", LOCAL, "--vary", "serving.max_num_seqs=4,8", "--no-cache"),
    ("capacity", LOCAL, "--slo", "ttft_p99=2s", "--seeds", "1", "--no-cache"),
    ("plan", LOCAL, "--rate", "1/s", "--slo", "ttft_p99=2s", "--max-runs", "2"),
], ids=lambda c: c[0])
def test_every_command_that_prints_a_table_prints_json_instead(command):
    result = kvplan(*command, "--json")
    assert result.returncode in (0, 4), result.stderr                  # plan: 4 when nothing meets the SLO
    data = json.loads(result.stdout)
    assert isinstance(data, dict) and data


def test_the_catalog_as_json_carries_numbers_sources_and_prices():
    data = json.loads(kvplan("catalog", "--json").stdout)
    h100 = data["devices"]["H100-SXM"]
    assert h100["bf16_tflops"] == 989.4 and h100["efficiency"]["small_gemm_params"] == 8e6
    assert h100["sources"] and data["llms"]["Llama-3.1-8B"]["sources"] and data["prices"]


def test_out_dash_writes_to_stdout_instead_of_the_tables():
    result = kvplan("simulate", LOCAL, "--out", "-")
    assert result.returncode == 0
    assert json.loads(result.stdout)["name"] == "local"


# ---- 3. -h, -V, completion, "-" for stdin, usage lines

def test_short_flags_and_completion_are_there():
    assert kvplan("-V").stdout.startswith("kvplan ")
    helped = kvplan("-h")
    assert helped.returncode == 0 and "-h, --help" in helped.stdout and "--install-completion" in helped.stdout
    assert kvplan("simulate", "-h").stdout.startswith("Usage: kvplan simulate [OPTIONS] SPEC\n")


def test_usage_names_values_not_python_types():
    for command in ("simulate", "sweep", "bench", "deploy", "plan", "capacity"):
        text = kvplan(command, "--help", env={"COLUMNS": "100"}).stdout
        for noise in ("<str>", "<int>", "<list[str]>", "{SPEC}", "<float>", "<int range>"):
            assert noise not in text, f"kvplan {command} --help shows {noise}"
    text = kvplan("simulate", "--help", env={"COLUMNS": "100"}).stdout
    assert "--seed N " in text and "--out FILE " in text


def test_the_command_list_cuts_no_summary():
    text = kvplan("--help", env={"COLUMNS": "80"}).stdout
    commands = text.split("Commands:", 1)[1]
    assert "..." not in commands.replace("--vary PATH=V1,V2,...", "")
    assert "Simulate the spec: where each prompt's KV came from" in " ".join(commands.split())


def test_a_dash_reads_the_spec_from_stdin():
    result = kvplan("validate", "-", stdin=LOCAL.read_text())
    assert result.returncode == 0 and result.stdout.startswith("valid: -  (local, spec ")
    simulated = kvplan("simulate", "-", "--json", stdin=LOCAL.read_text())
    assert json.loads(simulated.stdout)["name"] == "local"
    broken = kvplan("validate", "-", stdin="name: [x\n")
    assert broken.returncode == 1 and "stdin" in broken.stderr and "line 2" in broken.stderr


# ---- 4. state in the platform's user directories

def _xdg(tmp_path: Path) -> dict:
    return {"KVPLAN_STATE_DIR": "", "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_keys_go_to_the_xdg_state_directory_owner_only(tmp_path):
    work = tmp_path / "project"
    work.mkdir()
    result = kvplan("render", LOCAL, "-i", REPO / "inventories" / "local", "-o", work / "out", env=_xdg(tmp_path), cwd=work)
    assert result.returncode == 0, result.stderr
    keys = tmp_path / "state" / "kvplan" / "secrets" / "local.yml"
    assert stat.S_IMODE(keys.stat().st_mode) == 0o600
    assert not (work / ".kvplan").exists()


def test_one_variable_moves_state_and_cache(tmp_path):
    env = {**_xdg(tmp_path), "KVPLAN_STATE_DIR": str(tmp_path / "mine")}
    result = kvplan("sweep", LOCAL, "--vary", "serving.max_num_seqs=4", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "mine" / "cache").is_dir() and not (tmp_path / "cache").exists()
    default = kvplan("sweep", LOCAL, "--vary", "serving.max_num_seqs=4", env=_xdg(tmp_path), cwd=tmp_path)
    assert default.returncode == 0 and (tmp_path / "cache" / "kvplan").is_dir()


def test_a_legacy_state_folder_is_kept_and_named(tmp_path):
    (tmp_path / ".kvplan" / "secrets").mkdir(parents=True)
    result = kvplan("render", LOCAL, "-i", REPO / "inventories" / "local", "-o", tmp_path / "out", env=_xdg(tmp_path),
                    cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "warning: using .kvplan/ in this directory" in result.stderr and "mv .kvplan" in result.stderr
    assert (tmp_path / ".kvplan" / "secrets" / "local.yml").is_file()


def test_a_refused_render_writes_no_keys(tmp_path):
    result = kvplan("render", LOCAL, "-i", REPO / "inventories" / "example-cluster", "-o", tmp_path / "out",
                    env=_xdg(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert not (tmp_path / "state").exists()


# ---- 5. the deploy tools

def test_a_missing_deploy_tool_names_the_command_that_installs_it(monkeypatch, tmp_path):
    from kvplan.deploy import runner
    from kvplan.errors import SpecError

    monkeypatch.setitem(sys.modules, "ansible_runner", None)                    # import fails
    with pytest.raises(SpecError) as caught:
        runner.run(tmp_path)
    assert "./install.sh deploy" in caught.value.render() and "ansible-runner" in caught.value.render()
    usage = subprocess.run(["bash", str(REPO / "install.sh"), "nonsense"], capture_output=True, text=True)
    assert usage.returncode == 2 and "[deploy|test]" in usage.stderr


# ---- 11. the sweep's CSV and the ablation table carry cost and the SLO

def _with_slo(tmp_path: Path) -> Path:
    spec = yaml.safe_load(LOCAL.read_text())
    spec["slo"] = {"ttft_p99": "2s", "tpot_p99": "1ms"}          # TPOT 1 ms: missed on this CPU
    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_sweep_csv_names_units_and_carries_cost_and_the_slo(tmp_path):
    import csv

    result = kvplan("sweep", _with_slo(tmp_path), "--vary", "serving.max_num_seqs=4,8", "--csv", "-", "--no-cache")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 2
    for column in ("ttft_p99_mean_s", "ttft_p99_ci95_s", "ddr_share_mean_ratio", "requests_per_s_mean",
                   "usd_per_hour", "usd_per_1m_generated_tokens", "slo_ttft_p99_s", "slo_tpot_p99_s", "slo_met"):
        assert column in rows[0], column
    assert float(rows[0]["usd_per_hour"]) > 0 and rows[0]["slo_ttft_p99_s"] == "2.0"
    assert {r["slo_met"] for r in rows} == {"false"}                          # the 1 ms TPOT target is missed
    assert float(rows[0]["tpot_p99_mean_s"]) > 1e-3


def test_the_ablation_table_has_a_price_and_a_verdict_per_setup(tmp_path):
    result = kvplan("simulate", _with_slo(tmp_path), "--ablate", env={"COLUMNS": "250"})
    assert result.returncode == 0, result.stderr
    table = result.stdout.split("Ablation:", 1)[1]
    header = next(line for line in table.splitlines() if "setup" in line)
    assert "$/h" in header and "SLO" in header
    rows = [line for line in table.splitlines() if line.strip().startswith(("no reuse", "hbm only", "+ ddr"))]
    assert len(rows) == 3 and all("MISSED" in row and "tpot_p99" in row for row in rows)


# ---- 9. the JSON Schema agrees with kvplan

SPECS = sorted((REPO / "examples").glob("*.yaml")) + sorted((REPO / "docs" / "examples").glob("*.yaml"))


@pytest.fixture(scope="module")
def schema_validator():
    import jsonschema

    return jsonschema.Draft202012Validator(json.loads((REPO / "docs" / "topology.schema.json").read_text()))


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_shipped_spec_passes_a_standard_schema_validator(path, schema_validator):
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in schema_validator.iter_errors(
        yaml.safe_load(path.read_text()))]
    assert not errors, errors


def test_the_schema_lists_catalog_names_for_editors(schema_validator):
    spec = yaml.safe_load(LOCAL.read_text())
    assert not list(schema_validator.iter_errors({**spec, "workload": {**spec["workload"], "output": 32}}))
    wrong = {**spec, "serving": {**spec["serving"], "gpu": "H100-SXN"}}
    assert [e.message for e in schema_validator.iter_errors(wrong)][0].startswith("'H100-SXN' is not one of")
    schema = schema_validator.schema
    assert "Llama-3.1-8B" in next(b["enum"] for b in schema["properties"]["model"]["oneOf"] if b.get("type") == "string")
