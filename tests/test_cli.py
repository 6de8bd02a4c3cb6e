"""The `kvplan` command as users run it: exit codes, output, and no traceback for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO

KVPLAN = str(Path(sys.executable).parent / "kvplan")


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    return subprocess.run([KVPLAN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_version():
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("kvplan ")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_validates(example):
    result = run("validate", str(example.relative_to(REPO)))
    assert result.returncode == 0, result.stderr
    assert "valid:" in result.stdout and "KV bytes/token" in result.stdout


def test_validate_works_from_any_directory(tmp_path):
    result = run("validate", str(REPO / "examples" / "mooncake-replay.yaml"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "HBM blocks per instance" in result.stdout


def test_validate_json_prints_the_resolved_numbers():
    result = run("validate", "--json", "examples/chat-llama2-13b.yaml")
    resolved = json.loads(result.stdout)
    assert resolved["kv_bytes_per_token"] == 819200
    assert [t["name"] for t in resolved["lmcache"]["tiers"]] == ["ddr", "nvme", "ceph"]


def test_invalid_spec_exits_1_with_field_and_fix(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / "examples" / "chat-llama2-13b.yaml").read_text().replace("eviction: LRU", "eviction: ARC"))
    result = run("validate", str(bad))
    assert result.returncode == 1
    assert "lmcache.ddr.eviction: ARC is not available" in result.stderr
    assert "fix: use mode: mp" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.parametrize("text", ["name: [unclosed\n", "", "just a string\n", "name: x\nname: y\n",
                                  "name: x\nmodel: nope\nserving: {gpu: H100-SXM}\nworkload: {kind: chat, requests: 1}\n"])
def test_no_bad_input_reaches_the_user_as_a_traceback(tmp_path, text):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    result = run("validate", str(bad))
    assert result.returncode == 1
    assert "invalid:" in result.stderr and "Traceback" not in result.stderr


def test_missing_file_is_invalid_input():
    result = run("validate", "no/such/spec.yaml")
    assert result.returncode == 1 and "file not found" in result.stderr


@pytest.mark.parametrize("args", [("validate",), ("no-such-command",), ("validate", "--no-such-flag", "x.yaml")])
def test_usage_errors_exit_2(args):
    assert run(*args).returncode == 2


def test_schema_is_json_schema_of_the_spec():
    schema = json.loads(run("schema").stdout)
    assert schema["title"] == "Topology"
    assert {"name", "model", "serving", "lmcache", "ceph", "workload"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_catalog_lists_models_and_hardware():
    out = run("catalog").stdout
    for name in ("Llama-2-13B", "DeepSeek-V2-Lite", "H100-SXM", "gen5", "100GbE", "nvme"):
        assert name in out


def test_simulate_prints_tiers_and_writes_json(tmp_path):
    out = tmp_path / "result.json"
    result = run("simulate", "examples/chat-llama2-13b.yaml", "--out", str(out))
    assert result.returncode == 0, result.stderr
    for text in ("Where prompt KV came from", "ddr", "nvme", "ceph", "recomputed", "LMCache hit ratio"):
        assert text in result.stdout
    data = json.loads(out.read_text())
    assert data["requests"] == 5000 and [t["name"] for t in data["tiers"]] == ["hbm", "ddr", "nvme", "ceph"]
    assert len(data["per_request"]["ttft"]) == 5000


def test_same_spec_and_seed_give_byte_identical_json(tmp_path):
    files = [tmp_path / f"{i}.json" for i in range(3)]
    run("simulate", "examples/chat-llama2-13b.yaml", "--seed", "3", "--out", str(files[0]))
    run("simulate", "examples/chat-llama2-13b.yaml", "--seed", "3", "--out", str(files[1]))
    run("simulate", "examples/chat-llama2-13b.yaml", "--seed", "4", "--out", str(files[2]))
    assert files[0].read_bytes() == files[1].read_bytes()
    assert files[0].read_bytes() != files[2].read_bytes()


def test_a_bad_trace_line_stops_the_run_with_file_and_line(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\nnot json\n')
    spec = tmp_path / "spec.yaml"
    spec.write_text((REPO / "examples" / "mooncake-replay.yaml").read_text()
                    .replace("traces/mooncake-conversation-first1000.jsonl", str(trace)))
    result = run("simulate", str(spec))
    assert result.returncode == 1
    assert f"{trace}:2" in result.stderr and "Traceback" not in result.stderr


def test_simulate_ablation_as_markdown():
    result = run("simulate", "examples/local.yaml", "--ablate", "--format", "md")
    assert result.returncode == 0, result.stderr
    assert "### Ablation: the same workload, one tier at a time" in result.stdout
    assert "| no reuse |" in result.stdout and "| + ceph |" in result.stdout


def test_simulate_across_seeds_reports_confidence_intervals(tmp_path):
    out = tmp_path / "seeds.json"
    result = run("simulate", "examples/local.yaml", "--seeds", "2", "--out", str(out))
    assert result.returncode == 0 and "Across 2 seeds (1..2)" in result.stdout
    assert [r["seed"] for r in json.loads(out.read_text())["results"]] == [1, 2]


def test_simulate_rejects_an_unknown_format():
    assert run("simulate", "examples/local.yaml", "--format", "html").returncode == 2
