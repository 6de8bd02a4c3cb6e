"""`kvplan validate` warns about a tier sized so that it can hardly hit, and its fix is one that works.

A tier no larger (per instance) than the tier above it keeps only what that tier keeps; a cache
smaller than one typical prompt evicts the prompt's first chunks while storing it. Both are
warnings: the spec stays valid and validate exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from conftest import REPO, example_data, spec, with_changes
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.tier_checks import tier_warnings, typical_prompt_tokens

KVPLAN = str(Path(sys.executable).parent / "kvplan")


def warned(r) -> dict[str, list]:
    found: dict[str, list] = {}
    for w in tier_warnings(r):
        found.setdefault(w.path, []).append(w)
    return found


NOTE_DDR = "8GB"
"""The design note's DDR cache per node, which the flagship example had until validate warned about it."""


def test_a_ddr_tier_below_the_hbm_prefix_cache_is_warned_about_with_both_sizes():
    r = resolve(spec("chat-llama2-13b", lmcache__ddr__size=NOTE_DDR))
    ddr = r.lmcache.tier("ddr")
    [warning] = warned(r)["lmcache.ddr.size"]
    per_instance = ddr.capacity_tokens * ddr.caches // r.instances
    assert per_instance < r.hbm_tokens
    assert f"{per_instance:,} tokens per instance" in warning.message and f"{r.hbm_tokens:,} of the HBM" in warning.message
    assert warning.fix.startswith("raise lmcache.ddr.size above ")


def test_the_warned_tier_serves_almost_nothing_and_the_suggested_size_does():
    r = resolve(spec("chat-llama2-13b", workload__requests=1500, lmcache__ddr__size=NOTE_DDR))
    [warning] = warned(r)["lmcache.ddr.size"]
    suggested = warning.fix.split("above ")[1].split(",")[0]
    fixed = resolve(spec("chat-llama2-13b", workload__requests=1500, lmcache__ddr__size=suggested))
    assert "lmcache.ddr.size" not in warned(fixed)

    before = next(t for t in run(r).tiers if t.name == "ddr").served_share
    after = next(t for t in run(fixed).tiers if t.name == "ddr").served_share
    print(f"ddr share of prompt tokens: {before:.4%} at the warned size, {after:.4%} at {suggested}")
    assert before < 0.001 < after and after > 10 * before


def test_a_cache_smaller_than_one_prompt_is_warned_about():
    r = resolve(spec("codegen-70b", lmcache__ddr__size="2GiB"))
    prompt = typical_prompt_tokens(r.workload)
    ddr = r.lmcache.tier("ddr")
    assert ddr.capacity_tokens < prompt
    messages = [w.message for w in warned(r)["lmcache.ddr.size"]]
    assert any(f"fewer than one typical prompt of this workload ({prompt:,} tokens)" in m for m in messages), messages


def test_tiers_that_each_add_room_are_not_warned_about():
    r = resolve(spec("codegen-70b"))
    assert tier_warnings(r) == []
    assert tier_warnings(resolve(spec("chat-llama2-13b", lmcache=None, ceph=None))) == []


def test_without_vllms_prefix_cache_hbm_holds_no_reuse_to_compare_with():
    r = resolve(spec("chat-llama2-13b", serving__prefix_caching=False, lmcache__ddr__size=NOTE_DDR))
    assert not any("HBM prefix cache" in w.message for w in tier_warnings(r))


def test_a_trace_workloads_typical_prompt_is_its_median_input():
    r = resolve(spec("mooncake-replay"))
    lengths = sorted(json.loads(line)["input_length"] for line in Path(r.workload.trace.path).read_text().splitlines()
                     if line.strip())[:10_000]
    assert typical_prompt_tokens(r.workload) > 0
    assert min(lengths) <= typical_prompt_tokens(r.workload) <= max(lengths)


def test_validate_prints_warnings_and_still_exits_0(tmp_path):
    env = {**os.environ, "COLUMNS": "120"}
    data = with_changes(example_data("chat-llama2-13b"), lmcache__ddr__size=NOTE_DDR)
    path = tmp_path / "chat-llama2-13b.yaml"
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run([KVPLAN, "validate", str(path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "warning: lmcache.ddr.size: holds" in done.stdout
    as_json = subprocess.run([KVPLAN, "validate", str(path), "--json"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["name"] == "chat-llama2-13b"
    assert "warning: lmcache.ddr.size" in as_json.stderr
