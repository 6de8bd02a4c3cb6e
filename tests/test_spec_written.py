"""A spec written back by kvplan (the planner's winner) reads as a person wrote it and loads as the same spec."""

from __future__ import annotations

import pytest
import yaml

from conftest import EXAMPLES, spec
from kvplan.spec import from_mapping, load
from kvplan.spec.written import human_mapping
from kvplan.units import spelled


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_written_back_loads_as_the_same_spec(path):
    topo = load(path)
    text = yaml.safe_dump(human_mapping(topo), sort_keys=False)
    assert from_mapping(yaml.safe_load(text), base_dir=path.parent) == topo


def test_quantities_are_in_human_units_and_defaults_are_left_out():
    written = human_mapping(spec("chat-llama2-13b", lmcache__ddr__size=2 * 10**9, ceph__osd_size=3.84e12,
                                 lmcache__merging={"window": "50ms"}, simulate_only=True))
    assert written["lmcache"]["ddr"]["size"] == "2GB"
    assert written["lmcache"]["merging"] == {}, "merging on, at its default window"
    assert written["workload"]["sessions"]["think_time"] == "20s"
    assert written["slo"] == {"ttft_p99": "500ms", "tpot_p99": "50ms"}
    assert "osd_size" not in written["ceph"], "3.84TB is the default, however it was written"
    assert "activation_memory" not in written["serving"], "unset (vLLM's profiling, modelled), however it was written"
    assert "hosts" not in written["ceph"]


@pytest.mark.parametrize("kind, value, text", [("size", 2 * 2**30, "2GiB"), ("size", 3.84e12, "3.84TB"),
                                               ("size", 12345, "12.345kB"), ("duration", 0.05, "50ms"),
                                               ("duration", 86400, "1d"), ("rate", 0.8, "0.8/s"), ("rate", 1 / 60, "1/min"),
                                               ("bandwidth", 12.5e9, "12.5GB/s")])
def test_a_quantity_takes_the_largest_unit_that_reads_back_exactly(kind, value, text):
    assert spelled(kind, value) == text


def test_a_quantity_no_unit_writes_exactly_stays_a_bare_number():
    assert spelled("rate", 0.11854922581579015) == 0.11854922581579015
    assert spelled("size", 7 * 2**30 + 1) == 7 * 2**30 + 1
