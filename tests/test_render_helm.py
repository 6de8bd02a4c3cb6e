"""`kvplan render --format production-stack`: Helm values for vllm-project/production-stack that deploy the
spec's vLLM and LMCache exactly as the Ansible path does, valid under the chart's own schema; what the chart
cannot express is refused with the reason."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from kvplan.deploy.helm import values
from kvplan.deploy.stack import inprocess_config, vllm_args
from kvplan.errors import SpecError
from kvplan.resolve import resolve
from kvplan.spec import from_mapping, load

from conftest import REPO

KVPLAN = str(Path(sys.executable).parent / "kvplan")
SCHEMA = json.loads((REPO / "tests" / "fixtures" / "production-stack" / "values.schema.json").read_text())
IN_PROCESS = {"name": "chat-inprocess", "model": "Llama-3.1-8B",
              "serving": {"gpu": "H100-SXM", "instances": 2, "max_num_seqs": 64, "block_size": 32},
              "lmcache": {"mode": "inprocess", "chunk_size": 512, "ddr": {"size": "40GiB", "eviction": "LFU"},
                          "nvme": {"size": "500GB", "path": "/mnt/nvme/lmcache", "eviction": "LFU"}},
              "workload": {"kind": "chat", "duration": "5min", "arrivals": {"rate": "2/s"}}}
TEMPLATE_FLAGS = {"tensorParallelSize": "--tensor-parallel-size", "maxModelLen": "--max-model-len",
                  "maxNumSeqs": "--max-num-seqs", "gpuMemoryUtilization": "--gpu-memory-utilization", "dtype": "--dtype"}
"""How the chart's deployment template turns vllmConfig fields into vLLM flags (helm/templates/deployment-vllm-multi.yaml)."""


def test_the_values_pass_the_charts_own_schema():
    jsonschema.Draft202012Validator(SCHEMA).validate(values(resolve(from_mapping(IN_PROCESS)), 8, "64Gi"))


def test_the_chart_starts_vllm_with_the_flags_the_ansible_path_passes():
    """Rebuilt as the chart's template builds it, the command line holds every flag of stack.vllm_args but the two
    the chart writes itself (the served model name: modelURL; the LMCache connector: lmcacheConfig.enabled)."""
    r = resolve(from_mapping(IN_PROCESS))
    spec = values(r, 8, "64Gi")["servingEngineSpec"]["modelSpec"][0]
    config = spec["vllmConfig"]
    chart = list(config.get("extraArgs", []))
    for field, flag in TEMPLATE_FLAGS.items():
        if field in config:
            chart += [flag, str(config[field])]
    chart.append("--enable-prefix-caching" if config["enablePrefixCaching"] else "--no-enable-prefix-caching")
    chart.append("--enable-chunked-prefill" if config["enableChunkedPrefill"] else "--no-enable-chunked-prefill")
    ours = vllm_args(r)
    for skipped in ("--served-model-name", "--kv-transfer-config"):
        i = ours.index(skipped)
        del ours[i:i + 2]
    assert sorted(chart) == sorted(ours)
    assert spec["replicaCount"] == r.instances and spec["requestGPU"] == r.tensor_parallel
    assert spec["modelURL"] == r.model_path


def test_lmcache_gets_the_config_the_ansible_path_writes():
    r = resolve(from_mapping(IN_PROCESS))
    spec = values(r, 8, "64Gi")["servingEngineSpec"]["modelSpec"][0]
    cfg = inprocess_config(r)
    env = {e["name"]: e["value"] for e in spec["env"]}
    assert float(spec["lmcacheConfig"]["cpuOffloadingBufferSize"]) == pytest.approx(cfg["max_local_cpu_size"], rel=1e-5)
    assert float(spec["lmcacheConfig"]["diskOffloadingBufferSize"]) == pytest.approx(cfg["max_local_disk_size"], rel=1e-5)
    assert env["LMCACHE_CHUNK_SIZE"] == "512" and env["LMCACHE_CACHE_POLICY"] == "LFU"
    assert env["LMCACHE_LOCAL_DISK"] == "file:///mnt/nvme/lmcache/"
    assert spec["extraVolumes"] == [{"name": "lmcache-nvme", "hostPath": {"path": "/mnt/nvme/lmcache",
                                                                           "type": "DirectoryOrCreate"}}]
    assert spec["extraVolumeMounts"] == [{"name": "lmcache-nvme", "mountPath": "/mnt/nvme/lmcache"}]


@pytest.mark.parametrize("example, fields", [
    ("chat-llama2-13b", {"lmcache.ceph", "lmcache.warmup", "serving.router", "--request-memory"}),
    ("local", {"serving.gpu", "lmcache.mode", "lmcache.ceph"}),
])
def test_what_the_chart_cannot_express_is_refused_with_the_reason(example, fields):
    with pytest.raises(SpecError) as refused:
        values(resolve(load(REPO / "examples" / f"{example}.yaml")), 8, "16Gi")
    assert {p.path for p in refused.value.problems} == fields
    assert all(p.fix for p in refused.value.problems)


def test_the_command_writes_the_values_or_names_what_it_needs(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(IN_PROCESS))
    out = tmp_path / "values.yaml"
    done = subprocess.run([KVPLAN, "render", str(spec), "--format", "production-stack", "--request-cpu", "8",
                           "--request-memory", "64Gi", "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "helm install chat-inprocess" in done.stdout
    jsonschema.Draft202012Validator(SCHEMA).validate(yaml.safe_load(out.read_text()))
    missing = subprocess.run([KVPLAN, "render", str(spec), "--format", "production-stack", "-o", "-"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and "--request-cpu and --request-memory" in missing.stderr


def test_importing_the_values_gives_the_spec_back():
    """kvplan import --helm-values reads the chart's values as its template does: the spec it makes resolves to the
    same engine, tiers and router as the one rendered."""
    from kvplan.interop import from_helm_values

    r = resolve(from_mapping(IN_PROCESS))
    back = resolve(from_mapping(from_helm_values(values(r, 8, "64Gi"), "H100-SXM").spec))
    for field in ("instances", "tensor_parallel", "block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                  "kv_cache_dtype", "gpu_memory_utilization", "prefix_caching", "chunked_prefill", "weights_dtype",
                  "router"):
        assert getattr(back, field) == getattr(r, field), field
    assert back.lmcache.mode == "inprocess" and back.lmcache.chunk_size == 512
    for tier in ("ddr", "nvme"):
        assert back.lmcache.tier(tier).configured_gb == pytest.approx(r.lmcache.tier(tier).configured_gb, rel=1e-6)
        assert back.lmcache.tier(tier).eviction == "LFU"
