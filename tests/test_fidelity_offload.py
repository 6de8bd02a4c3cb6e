"""docs/fidelity-offload.md is what llm-d's published CPU-offload benchmark and kvplan's prediction of it give
(kvplan.gpufit.llmd_offload): the rows are the published ones, each spec the published configuration."""

from __future__ import annotations

from conftest import REPO
from kvplan.gpufit import llmd_offload, offload_report


def test_every_published_row_is_read_with_its_five_figures():
    measured = llmd_offload.measured(llmd_offload.benchmark())
    assert set(measured) == {(w, a) for w in offload_report.WORKLOADS for a in ("hbm_only", "cpu_offload")}
    assert measured[("memory_bound", "cpu_offload")].ttft_mean == 6.7


def test_each_arm_is_the_published_configuration_with_its_own_offload_engine():
    bench = llmd_offload.benchmark()
    hbm, native, lmcache = (llmd_offload.spec(bench, "memory_bound", arm) for arm in llmd_offload.ARMS)
    assert hbm["serving"]["router"] == "llm_d" and hbm["workload"]["arrivals"] == {"concurrency": 45}
    assert "kv_offloading" not in hbm["serving"] and "lmcache" not in hbm
    cpu_bytes = int(native["serving"]["kv_offloading"]["size"].removesuffix("B"))
    assert cpu_bytes == 41000 * llmd_offload.block_bytes(hbm)              # the published CPU blocks, as bytes
    assert lmcache["lmcache"]["ddr"]["size"] == f"{2 * cpu_bytes}B"          # per node: two engines' worth


def test_the_page_is_what_the_benchmark_and_the_simulator_give():
    assert (REPO / "docs" / "fidelity-offload.md").read_text() == offload_report.document(), \
        "docs/fidelity-offload.md is stale: run python -m kvplan.gpufit.offload_report --write docs/fidelity-offload.md"
