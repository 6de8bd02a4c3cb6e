"""Persistent tiers are judged in steady state: a run too short for a tier to fill says so, naming it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, spec
from kvplan.report.next_steps import cold_tiers
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.sim.steady import judge

KVPLAN = str(Path(sys.executable).parent / "kvplan")
GIB = 2**30


def test_a_tier_that_evicted_or_filled_is_steady():
    assert judge("ddr", 10 * GIB, 10 * GIB, 10 * GIB, evictions=3, ttl_s=None, duration_s=60).steady
    assert judge("ddr", 10 * GIB, 9.5 * GIB, 9 * GIB, evictions=0, ttl_s=None, duration_s=60).steady


def test_a_tier_that_held_entries_for_its_whole_ttl_is_steady():
    assert judge("ceph", 100 * GIB, GIB, GIB, evictions=0, ttl_s=3600, duration_s=7200).steady


def test_a_cold_tier_says_how_long_this_traffic_takes_to_fill_it():
    state = judge("nvme", 100 * GIB, 10 * GIB, 10 * GIB, evictions=0, ttl_s=None, duration_s=600)
    assert not state.steady and state.peak_fill == pytest.approx(0.1)
    assert state.time_to_steady_s == pytest.approx(6000)          # 10 GiB in 10 min: 100 GiB in 100 min
    assert "nvme reached 10% of its capacity" in state.note and "simulate longer" in state.note
    capped = judge("ceph", 100 * GIB, 10 * GIB, 10 * GIB, evictions=0, ttl_s=1800, duration_s=600)
    assert capped.time_to_steady_s == 1800 and "(its ttl)" in capped.note


def test_the_flagships_short_run_names_its_cold_persistent_tiers():
    result = run(resolve(spec("chat-llama2-13b", workload__requests=500)))
    states = {s.tier: s for s in result.steady_state}
    assert set(states) == {"ddr", "nvme", "ceph"}
    assert not states["nvme"].steady and not states["ceph"].steady
    nvme = next(t for t in result.tiers if t.name == "nvme")
    assert states["nvme"].peak_fill == pytest.approx(nvme.peak_used_bytes / nvme.capacity_bytes)
    warnings = cold_tiers(result)
    assert any(w.startswith("warning: nvme reached") for w in warnings)
    assert any(w.startswith("warning: ceph reached") for w in warnings)


def test_simulate_prints_the_warning():
    done = subprocess.run([KVPLAN, "simulate", "examples/chat-llama2-13b.yaml"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert "warning: nvme reached" in done.stdout
