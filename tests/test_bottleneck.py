"""The bottleneck verdict: the most loaded of a run's engines, links and devices, what waits on it, and the
`next:` that points at it once it saturates (a link 80 % busy, or the engines' batches 80 % full).
`kvplan simulate` ends with it."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from conftest import example_data, spec, with_changes
from kvplan.cli import app
from kvplan.resolve import resolve
from kvplan.sim.bottleneck import SATURATED, bottleneck
from kvplan.sim.result import LinkResult
from kvplan.sim.run import run


@pytest.fixture(scope="module")
def small():
    """A small run of the local example (engines, PCIe, NVMe, NICs and OSDs), far from saturating anything."""
    return run(resolve(spec("local", workload__requests=30)))


def busy(result, engines: float, shares: dict[str, float]):
    """`result` with requests queued at full batches for the share `engines` of the run and the named links busy
    for the given shares (every other link idle)."""
    assert set(shares) <= {link.name for link in result.links}
    named = [LinkResult(name=link.name, transfers=link.transfers, work=link.work,
                        utilisation=shares.get(link.name, 0.0)) for link in result.links]
    n = len(result.engine_occupancy)
    return result.model_copy(update={"engine_waited": [engines] * n, "engine_waiting_fullness": [1.0] * n, "links": named})


def test_a_run_far_from_saturation_names_the_busiest_and_gives_no_next_step(small):
    verdict = bottleneck(small)
    assert not verdict.saturated and verdict.busy < SATURATED
    assert verdict.verdict().startswith("bottleneck: none; no link is 80% busy and requests queued at full batches "
                                        "less than 80% of the run (the most loaded: ")
    assert verdict.next_step() is None
    assert verdict.verdict(seed=2).startswith("bottleneck (seed 2): none; ")       # simulate --seeds N: whose run


def test_a_saturated_nvme_drive_is_named_with_what_waits_on_it_and_how_to_relieve_it(small):
    verdict = bottleneck(busy(small, 0.4, {"nvme/0": 0.85}))
    assert verdict.name == "nvme/0" and verdict.saturated
    assert verdict.verdict() == ("bottleneck: nvme/0 is 85% busy (saturated from 80%): reads and writes of the nvme "
                                 "tier on node 0 queue on the drive")
    assert verdict.next_step().startswith("next: relieve nvme/0: the node's other drives (lmcache.nvme.drives")
    assert "a faster NVMe class (lmcache.nvme.device" in verdict.next_step()


def test_engines_in_steps_all_the_time_are_not_saturated_until_their_batches_fill(small):
    """vLLM's engine runs a step whenever any request runs: busy 100 % with one request in a batch of 256.
    A waiting request is admitted unless the batch slots, token budget or KV blocks are full, so the
    engines' load is the share of the run requests queued at full batches."""
    n = len(small.engine_busy)
    in_steps = small.model_copy(update={"engine_busy": [1.0] * n})
    assert bottleneck(in_steps).name != "engines" or not bottleneck(in_steps).saturated
    assert small.engine_occupancy[0] < small.engine_busy[0]
    # requests waiting every step for the next step boundary, at batches a tenth full, are not a saturated engine
    at_the_boundary = small.model_copy(update={"engine_waited": [1.0] * n, "engine_waiting_fullness": [0.1] * n})
    assert not bottleneck(at_the_boundary).saturated


def test_full_batches_mean_requests_queue_for_a_batch_slot(small):
    verdict = bottleneck(busy(small, 0.97, {"nvme/0": 0.85}))
    assert verdict.name == "engines"
    assert verdict.verdict().startswith("bottleneck: engines: requests queued at full batches 97% of the run "
                                        "(saturated from 80%): ")
    assert "requests queue for a batch slot (mean wait" in verdict.verdict()
    assert "serving.max_num_seqs" in verdict.next_step()
    assert "serving.instances" in verdict.next_step() and "kvplan plan" in verdict.next_step()


def test_each_ceph_resource_points_at_its_own_fix(small):
    osds = bottleneck(busy(small, 0.1, {"osds/ceph0": 0.9}))
    assert "host 0's OSDs" in osds.verdict() and "ceph.osds_per_host" in osds.fix
    nic = bottleneck(busy(small, 0.1, {"nic-rx/node0": 0.9}))
    assert nic.name == "nic-rx/node0" and "retrieves from Ceph into serving node 0" in nic.verdict()
    assert "ceph.network" in nic.fix


def test_simulate_ends_with_the_verdict_and_a_next_step_that_points_at_it(tmp_path):
    """A rate the one CPU engine cannot keep up with: its batches fill, requests queue."""
    path = tmp_path / "busy.yaml"
    path.write_text(yaml.safe_dump(with_changes(example_data("local"), workload__requests=60,
                                                workload__arrivals__session_rate="50/s")))
    result = CliRunner().invoke(app, ["simulate", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    last = result.stdout.rstrip("\n").splitlines()[-2:]
    assert last[0].startswith("bottleneck: engines: requests queued at full batches ") and "requests queue for a batch slot" in last[0]
    assert last[1].startswith("next: relieve engines: larger batches")
