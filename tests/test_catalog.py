"""The catalog: the entries the product promises, each number cited, malformed files refused."""

from __future__ import annotations

import shutil

import pytest

from kvplan.accelerator_fit import kv_bytes_per_token
from kvplan.catalog import load_catalog
from kvplan.errors import SpecError
from kvplan.resources import data_root

MODELS = ["Llama-2-7B", "Llama-2-13B", "Llama-2-70B", "Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.3-70B", "Mistral-7B",
          "Mixtral-8x7B", "Qwen2.5-7B", "Qwen2.5-32B", "Qwen2.5-72B", "Qwen3-8B", "Qwen3-32B", "Qwen3-30B-A3B",
          "DeepSeek-V2-Lite", "DeepSeek-V3"]
GPUS = ["A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H100-NVL", "H200", "L40S", "L4", "A10G", "B200", "GB200",
        "MI300X"]


def test_promised_models_and_hardware_are_there(catalog):
    assert set(MODELS) <= set(catalog.llms)
    assert set(GPUS) <= set(catalog.devices)
    assert {"gen4", "gen5"} <= set(catalog.nvme)
    assert {"hdd", "ssd", "nvme"} <= set(catalog.ceph_device_classes)
    assert catalog.nics and catalog.host_memory


def test_at_least_one_mla_model(catalog):
    mla = [m for m in catalog.llms.values() if m.attention == "mla"]
    assert mla and all(m.head_dim == m.kv_lora_rank + m.qk_rope_head_dim for m in mla)


def test_every_entry_cites_a_source_with_a_date(catalog):
    entries = [*catalog.llms.values(), *catalog.devices.values(), *catalog.host_memory.values(),
               *catalog.nvme.values(), *catalog.nics.values(), *catalog.ceph_device_classes.values()]
    for list_name in type(catalog.prices).model_fields:
        entries += getattr(catalog.prices, list_name)
    for entry in entries:
        assert entry.sources, entry.name
        assert all(s.url and s.date for s in entry.sources), entry.name


def test_every_accelerator_has_a_price(catalog):
    priced = {p.name for p in catalog.prices.gpu_hour}
    assert set(catalog.devices) <= priced


def test_published_kv_footprints(catalog):
    assert kv_bytes_per_token(catalog.llm("Llama-3.1-8B"), 2) == 131072
    assert kv_bytes_per_token(catalog.llm("Llama-2-13B"), 2) == 819200
    assert kv_bytes_per_token(catalog.llm("Llama-3.1-70B"), 2) == 327680
    assert kv_bytes_per_token(catalog.llm("Qwen3-30B-A3B"), 2) == 98304      # 48 x 2 x 4 x 128 x 2
    assert kv_bytes_per_token(catalog.llm("DeepSeek-V3"), 2) == 70272        # MLA: 61 x (512 + 64) x 2


def test_models_are_found_by_alias_and_case(catalog):
    assert catalog.llm("meta-llama/Llama-3.1-8B").name == "Llama-3.1-8B"
    assert catalog.llm("llama-2-13b").name == "Llama-2-13B"
    assert catalog.llm("deepseek-ai/DeepSeek-R1").name == "DeepSeek-V3"


def broken_copy(tmp_path, file: str, old: str, new: str):
    root = tmp_path / "models"
    shutil.copytree(data_root() / "models", root)
    path = root / file
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    load_catalog.cache_clear()
    return str(root)


def test_an_uncited_entry_is_refused(tmp_path):
    root = broken_copy(tmp_path, "llm/llama-2-7b.yaml", "sources:", "unused_sources:")
    with pytest.raises(SpecError) as info:
        load_catalog(root)
    assert any(p.path.startswith("llama-2-7b.yaml") for p in info.value.problems)


def test_a_bad_unit_in_the_catalog_names_file_and_field(tmp_path):
    root = broken_copy(tmp_path, "hardware/gpus.yaml", "memory_bandwidth: ", "memory_bandwidth: fast # ")
    with pytest.raises(SpecError) as info:
        load_catalog(root)
    assert info.value.problems[0].path == "gpus.yaml:gpus[0](A100-40GB).memory_bandwidth"


# ---- accelerators as users write them

def test_an_accelerator_is_found_by_the_name_nvidia_smi_prints(catalog):
    from kvplan.catalog import lookup

    assert lookup(catalog.devices, "NVIDIA H100 80GB HBM3", "serving.gpu", "accelerator").name == "H100-SXM"
    assert lookup(catalog.devices, "nvidia h200", "serving.gpu", "accelerator").name == "H200"
    assert lookup(catalog.devices, "h100-pcie", "serving.gpu", "accelerator").name == "H100-PCIe"


def test_a_name_several_accelerators_share_lists_them_instead_of_guessing(catalog):
    """nvidia-smi and vLLM's docs say "H100"; the SXM, PCIe and NVL parts differ in bandwidth, links and price."""
    from kvplan.catalog import lookup

    with pytest.raises(SpecError) as exc:
        lookup(catalog.devices, "H100", "serving.gpu", "accelerator")
    [problem] = exc.value.problems
    assert problem.allowed == "H100-NVL, H100-PCIe, H100-SXM" and "H200" not in str(exc.value)
    assert "write the one you have" in problem.fix


def test_a_suggestion_never_crosses_to_another_product(catalog):
    from kvplan.catalog import lookup

    with pytest.raises(SpecError) as exc:
        lookup(catalog.devices, "H300", "serving.gpu", "accelerator")
    assert "did you mean" not in exc.value.problems[0].fix          # H200 and H100 are other products
    with pytest.raises(SpecError) as exc:
        lookup(catalog.devices, "A10", "serving.gpu", "accelerator")
    assert exc.value.problems[0].fix == "did you mean 'A10G'?"


def test_plan_takes_the_names_the_spec_takes():
    from kvplan.plan.search import plan
    from kvplan.spec.slo import Slo
    from conftest import spec

    with pytest.raises(SpecError) as exc:
        plan(spec("local"), 1.0, slo=Slo(ttft_p99=1.0), gpus=["H100"])
    assert exc.value.problems[0].path == "--gpu" and "H100-SXM" in exc.value.problems[0].allowed
