"""Accelerator memory is the capacity the device reports (nvidia-smi, in MiB), not the vendor's "80GB".

NVIDIA sells an H100 as "80GB"; read as a size, `80GB` is 80e9 bytes, while the device reports
81559MiB = 85,520,809,984 bytes. HBM blocks, tokens per tier and every plan follow from this number,
so each catalog GPU carries the reported figure and a source that quotes it.
"""

from __future__ import annotations

import re

from kvplan.resolve import resolve
from kvplan.spec import load
from kvplan.units import GIB

from conftest import REPO

MIB = 2**20
GPUS = ["A100-40GB", "A100-80GB", "H100-SXM", "H200", "L40S", "B200"]


def _gpus(catalog):
    gpus = [d for d in catalog.devices.values() if d.kind == "gpu"]
    assert set(GPUS) <= {d.name for d in gpus}
    return gpus


def test_every_gpu_memory_is_a_whole_number_of_mib(catalog):
    for device in _gpus(catalog):
        assert device.memory % MIB == 0, f"{device.name}: {device.memory} B is not a whole number of MiB"


def test_every_gpu_memory_is_quoted_in_mib_by_one_of_its_sources(catalog):
    for device in _gpus(catalog):
        mib = device.memory // MIB
        figure = re.compile(rf"(?<![\d.,]){mib} ?MiB")
        assert any(figure.search(s.covers or "") for s in device.sources), (
            f"{device.name}: no source's covers quotes {mib}MiB")


def test_h100_hbm_is_what_the_device_reports_not_80e9(catalog):
    h100 = catalog.devices["H100-SXM"]
    assert h100.memory == 81559 * MIB == 85_520_809_984
    assert h100.memory != 80e9


def test_the_flagship_example_gets_the_larger_hbm():
    # examples/chat-llama2-13b.yaml serves Llama-2-13B on A100-80GB (not H100-SXM), which reports 81920MiB.
    r = resolve(load(REPO / "examples" / "chat-llama2-13b.yaml"))
    assert r.device.name == "A100-80GB"
    assert r.device.memory == 81920 * MIB == 85_899_345_920
    assert r.cuda_memory_bytes == r.device.memory             # the catalog has no CUDA total for A100: nvidia-smi's
    budget = int(81920 * MIB * r.gpu_memory_utilization) - r.weight_bytes_per_gpu - r.non_kv_bytes_per_gpu
    assert r.kv_budget_bytes_per_gpu == budget
    assert r.hbm_blocks == budget // r.block_bytes_per_rank == 3882   # 3748 with the 2 GiB constant before issue 47
    old_blocks = (int(80e9 * r.gpu_memory_utilization) - r.weight_bytes_per_gpu - r.non_kv_bytes_per_gpu) // r.block_bytes_per_rank
    assert old_blocks < r.hbm_blocks                           # what `memory: 80GB` (80e9 B) gave


def test_the_h100_examples_resolve_with_the_reported_hbm():
    r = resolve(load(REPO / "examples" / "codegen-70b.yaml"))
    assert r.device.name == "H100-SXM"
    assert r.device.memory == 81559 * MIB
