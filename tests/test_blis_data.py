"""The BLIS project's real H100 runs, kept as replay logs with what they measured (models/profiles/e2e/blis/).

scripts/blis_replays.py made them from the shared folder's CSV and bundle (its docstring says how); these tests hold
the kept files to what the runs were: the load stages' request counts, the fixed set of 100 prompts sent round and
round, every request's output length, and the measured figures beside them.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from kvplan.sim.replay import read_log

from conftest import REPO

BLIS = REPO / "models" / "profiles" / "e2e" / "blis"
RUNS = yaml.safe_load((BLIS / "runs.yaml").read_text())["runs"]
SHARED = Path("/work/shared/traces/blis_vllm_ground_truth")


def test_twelve_runs_are_kept_and_the_four_overloaded_ones_are_left_out_with_the_reason():
    data = yaml.safe_load((BLIS / "runs.yaml").read_text())
    assert len(RUNS) == 12 and len(data["left_out"]) == 4
    assert all(exp.endswith("-reasoning") and "overloaded" in why for exp, why in data["left_out"].items())
    source = yaml.safe_load((BLIS / "SOURCE.yaml").read_text())
    assert source["licence"].startswith("Apache-2.0") and "Apache License" in (BLIS / "LICENSE").read_text()
    assert set(source["logs"]) == {run["replay"] for run in RUNS.values()}


@pytest.mark.parametrize("exp", sorted(RUNS))
def test_each_log_is_the_run_it_came_from(exp):
    run = RUNS[exp]
    path = BLIS / run["replay"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == run["sha256"]
    log = read_log(str(path))
    sizes = [s["requests"] for s in run["load"]["stages"]]
    assert sizes == [int(s["rate"] * s["duration"]) for s in run["load"]["stages"]]
    assert len(log) == sum(sizes) == run["measured"]["run"]["requests"]
    assert np.all(np.diff(log.arrival) >= 0)
    assert set(log.output_tokens.tolist()) == {run["shared_prefix"]["output_len"]}       # ignore_eos: all of it
    # 100 prompts, each as long every time it is sent, each sent equally often
    count = run["shared_prefix"]["num_groups"] * run["shared_prefix"]["num_prompts_per_group"]
    lengths = defaultdict(set)
    for prompt, tokens in zip(log.prompt.tolist(), log.prompt_tokens.tolist()):
        lengths[prompt].add(tokens)
    assert sorted(lengths) == list(range(count)) and all(len(v) == 1 for v in lengths.values())
    assert set(np.bincount(log.prompt).tolist()) == {len(log) // count}
    # request k of each stage sends prompt k mod 100, but for the few sent a few microseconds out of turn
    k = np.concatenate([np.arange(n) for n in sizes])
    out_of_turn = int((log.prompt != k % count).sum())
    assert out_of_turn == run["reconstructed"]["requests_moved_back"] < 0.02 * len(log)
    # a group's prompts share its system prompt, as long for all of them, a little longer than configured
    per_group = defaultdict(set)
    for prefix, tokens in zip(log.prefix.tolist(), log.prefix_tokens.tolist()):
        per_group[prefix].add(tokens)
    assert sorted(per_group) == list(range(run["shared_prefix"]["num_groups"]))
    assert [next(iter(per_group[g])) for g in sorted(per_group)] == run["reconstructed"]["prefix_tokens"]
    nominal = run["shared_prefix"]["system_prompt_len"]
    assert all(nominal <= t <= 1.07 * nominal for t in run["reconstructed"]["prefix_tokens"])


@pytest.mark.parametrize("exp", sorted(RUNS))
def test_the_measured_figures_agree_with_inference_perfs_own(exp):
    """The per-request CSV and inference-perf's printed summaries are two records of the same requests."""
    run = RUNS[exp]
    for mine, theirs in zip([*run["measured"]["stages"], run["measured"]["run"]],
                            [*run["inference_perf"]["stages"], run["inference_perf"]["run"]]):
        assert mine["requests"] == theirs["successes"]
        for key in ("ttft", "e2e"):
            assert mine[key]["mean"] == pytest.approx(theirs[key]["mean"], abs=2e-6)
            assert mine[key]["p50"] == pytest.approx(theirs[key]["median"], abs=2e-6)
            assert mine[key]["p99"] == pytest.approx(theirs[key]["p99"], abs=2e-6)


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared BLIS folder is not on this machine")
def test_the_script_rewrites_the_same_bytes(tmp_path, monkeypatch):
    from conftest import source_module

    script = source_module("scripts/blis_replays.py", "blis_replays")
    monkeypatch.setattr(script, "OUT", tmp_path)
    script.main(str(SHARED))
    for path in BLIS.iterdir():
        if path.name != "LICENSE":
            assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name
