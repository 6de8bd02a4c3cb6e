"""kvplan doctor ranks the fixes for a missed SLO by what they cost among those proven to meet it, always weighs
removing or shrinking each offload tier, and `--write` writes only what it simulated as written.

The specs are docs/examples/doctor-dear-fix.yaml (requests queue for a batch slot: more instances and a larger
batch both meet the SLO) and doctor-slow-nvme.yaml (prefills wait on a saturated gen4 NVMe tier: only removing
it meets the SLO), a few hundred requests each on three seeds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvplan.doctor import Change, Finding, Fix, diagnose, simulated_case, written
from kvplan.doctor.rank import overlaps, tier_fixes
from kvplan.resolve import resolve
from kvplan.spec import from_mapping

from conftest import REPO

EXAMPLES = REPO / "docs" / "examples"
SEEDS = [42, 43, 44]


def case_of(path: Path, seeds=SEEDS):
    data = yaml.safe_load(path.read_text())
    topo = from_mapping(data, base_dir=path.parent)
    return simulated_case(topo, resolve(topo), data, path.parent, list(seeds))


@pytest.fixture(scope="module")
def dear():
    case = case_of(EXAMPLES / "doctor-dear-fix.yaml")
    return case, diagnose(case)


@pytest.fixture(scope="module")
def slow_nvme():
    case = case_of(EXAMPLES / "doctor-slow-nvme.yaml")
    return case, diagnose(case)


def test_the_dearest_fix_ranks_after_a_cheaper_one_that_also_meets_the_slo(dear):
    _, d = dear
    (tail,) = [f for f in d.findings if f.code == "long-ttft-tail"]
    assert tail.fixes[0].changes == [Change(path="serving.instances", value=12)]      # the rule proposes it first
    first, second = d.ranking[:2]
    assert first.meets_slo and second.meets_slo
    assert first.fix.changes[0].path == "serving.max_num_seqs" and second.fix.changes[0].path == "serving.instances"
    assert first.fix.proof.usd_per_hour_after < second.fix.proof.usd_per_hour_after
    assert (second.fix.proof.nodes_before, second.fix.proof.nodes_after) == (1, 2)   # 12 instances of 1 GPU, 8 a node


def test_removing_each_tier_is_weighed_and_a_tier_that_served_nothing_is_not_halved(dear):
    case, _ = dear
    fixes = tier_fixes(case, "ttft_p99")
    assert [c for f in fixes for c in f.changes] == [Change(path="lmcache.ddr.size", value=0)]
    assert case.mean("ddr_served_share") == 0


def test_removing_a_tier_is_proposed_and_ranked_first_when_it_alone_meets_the_slo(slow_nvme):
    _, d = slow_nvme
    first = d.ranking[0]
    assert first.fix.changes == [Change(path="lmcache.nvme.size", value=0)] and first.meets_slo
    assert all(not r.meets_slo for r in d.ranking[1:])
    assert first.fix.proof.slo[0].after <= first.fix.proof.slo[0].target < first.fix.proof.before
    (half,) = [f for f in d.findings for f in f.fixes if f.summary.endswith("at half its size")]   # the dearest tier
    assert half.changes[0].path == "lmcache.ddr.size" and half.proof.verdict not in ("refused", "untested")


def test_write_leaves_out_a_fix_inside_the_tier_it_removes(slow_nvme):
    case, d = slow_nvme
    w = written(case, d)
    assert w["changes"] == [Change(path="lmcache.nvme.size", value=0)] and "nvme" not in w["data"]["lmcache"]
    assert any("lmcache.nvme.drives clashes with no nvme tier" in line for line in w["left_out"])
    assert w["proof"] == d.ranking[0].fix.proof                     # one fix: written with its own proof


def test_a_removed_tier_overlaps_every_setting_inside_it():
    remove = Change(path="lmcache.nvme.size", value=0)
    assert overlaps(remove, Change(path="lmcache.nvme.device", value="gen5"))
    assert overlaps(Change(path="serving.kv_offloading", value=None), Change(path="serving.kv_offloading.size", value="8GiB"))
    assert not overlaps(remove, Change(path="lmcache.ddr.size", value=0))
    assert not overlaps(Change(path="lmcache.nvme.size", value="1TB"), Change(path="lmcache.nvme.device", value="gen5"))


def test_the_written_spec_simulates_to_the_figures_doctor_printed(tmp_path):
    """Several fixes: the cheapest that meets the SLO and the other finding's saving, simulated together."""
    fixed = tmp_path / "fixed.yaml"
    done = subprocess.run([str(Path(sys.executable).parent / "kvplan"), "doctor", str(EXAMPLES / "doctor-dear-fix.yaml"),
                           "--json", "--write", str(fixed), "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 6, done.stderr
    wrote = json.loads(done.stdout)["written"]
    assert [c["path"] for c in wrote["changes"]] == ["serving.max_num_seqs", "lmcache.ddr.size"]
    (slo,) = wrote["proof"]["slo"]
    assert slo["met"] and slo["key"] == "ttft_p99"
    again = case_of(fixed)
    assert again.mean("ttft_p99") == pytest.approx(slo["after"], rel=1e-9)
    assert "# simulated as written: ttft_p99 " in fixed.read_text()


def test_a_combination_that_misses_the_slo_is_not_written_and_the_cheapest_proven_fix_is(dear):
    """Another finding's kept fix that wrecks the tail once applied with the cheapest fix: only the cheapest is
    written, with its own proof, and the other is named with the figures of the two simulated together."""
    case, d = dear
    tail = next(f for f in d.findings if f.code == "long-ttft-tail")
    proof = tail.fixes[0].proof.model_copy(update={"verdict": "saves"})       # kept on its own, as a rule would say
    fewer = Finding(code="fewer-instances", area="advice", severity="advice", title="t", symptom="s", cause="c",
                    evidence={}, fixes=[Fix(summary="two instances", changes=[Change(path="serving.instances", value=2)],
                                            metric="ttft_p99", goal="save", proof=proof)])
    w = written(case, d.model_copy(update={"findings": [tail, fewer]}))
    assert w["changes"] == d.ranking[0].fix.changes and w["proof"] == d.ranking[0].fix.proof
    (line,) = w["left_out"]
    assert line.startswith("two instances (together they miss the SLO (ttft_p99 ") and "against 1.0 s" in line


def test_vllms_native_cpu_tier_is_weighed_too():
    """Without LMCache the offload tier is vLLM's own: removing serving.kv_offloading, and halving it where it
    served tokens, are candidates the loader accepts."""
    from conftest import example_data, with_changes
    from kvplan.doctor.prove import changed

    data = with_changes(example_data("chat-llama2-13b"), lmcache=None, ceph=None, serving__kv_offloading={"size": "8GiB"},
                        serving__kv_cache_memory="12GiB", serving__max_num_seqs=16, workload__requests=300)
    topo = from_mapping(data, base_dir=REPO / "examples")
    case = simulated_case(topo, resolve(topo), data, REPO / "examples", [42])
    remove, half = tier_fixes(case, "ttft_p99")
    assert remove.changes == [Change(path="serving.kv_offloading", value=None)]
    assert half.changes == [Change(path="serving.kv_offloading.size", value="4GiB")]
    assert changed(case, remove.changes)[0].serving.kv_offloading is None
    assert changed(case, half.changes)[1].kv_offloading is not None
