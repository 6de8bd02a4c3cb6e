"""`kvplan render --format production-stack`: Helm values for vllm-project/production-stack that deploy the
spec's vLLM and LMCache exactly as the Ansible path does, valid under the chart's own schema; what the chart
cannot express is refused with the reason."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
import yaml

from kvplan.deploy.helm import IMAGE, LMCACHE_RELEASE, notes, values
from kvplan.deploy.stack import inprocess_config
from kvplan.deploy.vllm_command import vllm_args
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
    """Rebuilt as the chart's template builds it, the command line holds every flag of vllm_command.vllm_args but the two
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
    env = {e["name"]: e.get("value") for e in spec["env"]}
    assert spec["lmcacheConfig"]["cpuOffloadingBufferSize"] == cfg["max_local_cpu_size"] == 20      # whole GB here
    assert float(spec["lmcacheConfig"]["diskOffloadingBufferSize"]) == cfg["max_local_disk_size"]
    assert env["LMCACHE_CHUNK_SIZE"] == "512" and env["LMCACHE_CACHE_POLICY"] == "LFU"
    assert env["LMCACHE_LOCAL_DISK"] == "file:///mnt/nvme/lmcache/"
    assert spec["extraVolumes"] == [{"name": "lmcache-nvme", "hostPath": {"path": "/mnt/nvme/lmcache",
                                                                           "type": "DirectoryOrCreate"}}]
    assert spec["extraVolumeMounts"] == [{"name": "lmcache-nvme", "mountPath": "/mnt/nvme/lmcache",
                                          "subPathExpr": "$(KVPLAN_POD_NAME)"}]


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
    assert back.lmcache.nvme_paths == r.lmcache.nvme_paths


def test_importing_values_whose_cpu_buffer_was_rounded_gives_the_whole_gb_back():
    """A ddr share of 20.5 GiB per worker is written as 20 (whole GB, rounded down): the import reads what the chart
    deploys, 20 GiB per worker."""
    from kvplan.interop import from_helm_values

    r = resolve(from_mapping(with_ddr(IN_PROCESS, "41GiB")))
    back = resolve(from_mapping(from_helm_values(values(r, 8, "64Gi"), "H100-SXM").spec))
    assert r.lmcache.tier("ddr").configured_gb == 20.5 and back.lmcache.tier("ddr").configured_gb == 20


# ------------------------------------------------------------------ the chart's template, read as it reads values

TEMPLATE = (REPO / "tests" / "fixtures" / "production-stack" / "deployment-vllm-multi.lines.txt").read_text()
"""Lines of production-stack's helm/templates/deployment-vllm-multi.yaml (chart vllm-stack 0.1.12, commit a6c01db):
262-277 (vllmApiKey), 336-347 (the LMCache sizes), 440-442 (extraVolumeMounts); SOURCE.md beside it."""


def with_ddr(spec: dict, size: str, **serving) -> dict:
    return {**spec, "serving": {**spec["serving"], **serving}, "lmcache": {**spec["lmcache"], "ddr": {"size": size, "eviction": "LFU"}}}


def sprig_int(value, trims_zero_decimal: bool) -> int:
    """Sprig's `int` (spf13/cast ToInt) on a values entry, which it never fails on: Helm reads every YAML number as a
    float64, which is truncated; a string is read by strconv.ParseInt(s, 0, 0) (cast 1.5.1 and later first drop a
    '.0' tail), and a string it cannot read is 0."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return int(float(value))
    text = str(value)
    if trims_zero_decimal and "." in text and set(text.split(".", 1)[1]) <= {"0"}:
        text = text.split(".", 1)[0]
    try:
        return int(text, 8) if len(text.lstrip("+-")) > 1 and text.lstrip("+-")[0] == "0" and text.lstrip("+-").isdigit() \
            else int(text, 0)                  # Go's base 0 reads a leading 0 as octal: '050' is 40
    except ValueError:
        return 0


def go_text(value) -> str:
    """`{{ value }}`: a string as it is, a number as Go prints a float64 (%v: the shortest digits, with an exponent
    from 1e+06 up)."""
    if isinstance(value, str):
        return value
    v = float(value)
    digits = Decimal(repr(v))
    if v and not -4 <= digits.adjusted() < 6:
        mantissa, exponent = f"{v:e}".split("e")
        return f"{Decimal(repr(float(mantissa))).normalize()}e{int(exponent):+03d}"
    text = format(digits, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def chart_env(lmcache_config: dict, trims_zero_decimal: bool) -> dict[str, str]:
    """The LMCACHE_* variables lines 336-347 set from lmcacheConfig."""
    env = {}
    if "cpuOffloadingBufferSize" in lmcache_config:
        if sprig_int(lmcache_config["cpuOffloadingBufferSize"], trims_zero_decimal) > 0:
            env["LMCACHE_LOCAL_CPU"] = "True"
            env["LMCACHE_MAX_LOCAL_CPU_SIZE"] = go_text(lmcache_config["cpuOffloadingBufferSize"])
    if "diskOffloadingBufferSize" in lmcache_config:
        env["LMCACHE_MAX_LOCAL_DISK_SIZE"] = go_text(lmcache_config["diskOffloadingBufferSize"])
    return env


def test_the_template_lines_say_what_the_reading_assumes():
    """If a newer chart's lines (copied into the fixture) read the sizes, mounts or key otherwise, this fails: the
    readings above must be derived again."""
    for line in ('{{-     if gt (int $modelSpec.lmcacheConfig.cpuOffloadingBufferSize) 0 }}',
                 'value: "{{ $modelSpec.lmcacheConfig.cpuOffloadingBufferSize }}"',
                 'value: "{{ $modelSpec.lmcacheConfig.diskOffloadingBufferSize }}"',
                 '{{- with $modelSpec.extraVolumeMounts }}', '{{- toYaml . | nindent 10 }}',
                 '{{- else if and (kindIs "map" $vllmApiKey) $vllmApiKey.secretName $vllmApiKey.secretKey }}',
                 'name: {{ $vllmApiKey.secretName }}', 'key: {{ $vllmApiKey.secretKey }}'):
        assert line in TEMPLATE, line


@pytest.mark.parametrize("written", ["50.0", "40.5", "0.5", 0.5])
def test_the_reading_turns_off_the_cpu_cache_of_the_sizes_kvplan_used_to_write(written):
    """The issue's reproducer, cpuOffloadingBufferSize: '50.0', and its kind: under a cast that does not trim '.0'
    (and under every cast for '40.5' and anything below 1), the chart sets no LMCACHE_LOCAL_CPU, and in-process LMCache
    runs without its CPU cache."""
    assert "LMCACHE_LOCAL_CPU" not in chart_env({"cpuOffloadingBufferSize": written}, trims_zero_decimal=False)


@pytest.mark.parametrize("trims_zero_decimal", [False, True])
@pytest.mark.parametrize("ddr, tp, per_worker", [("40GiB", 1, 10.0), ("41GiB", 1, 10.25), ("325GiB", 2, 40.625)])
def test_the_chart_reads_the_sizes_as_meant(ddr, tp, per_worker, trims_zero_decimal):
    """Read through the values file and lines 336-347, the CPU cache is on with the per-worker share in whole GB,
    rounded down (what LMCache then reads as its size), and the disk size is LMCache's exact one."""
    r = resolve(from_mapping(with_ddr(IN_PROCESS, ddr, tensor_parallel=tp, instances=4)))
    cfg = inprocess_config(r)
    assert cfg["max_local_cpu_size"] == per_worker
    written = yaml.safe_load(yaml.safe_dump(values(r, 8, "400Gi")))["servingEngineSpec"]["modelSpec"][0]["lmcacheConfig"]
    env = chart_env(written, trims_zero_decimal)
    assert env["LMCACHE_LOCAL_CPU"] == "True"
    assert float(env["LMCACHE_MAX_LOCAL_CPU_SIZE"]) == math.floor(per_worker)
    assert float(env["LMCACHE_MAX_LOCAL_DISK_SIZE"]) == cfg["max_local_disk_size"]


def test_a_cpu_buffer_below_one_gb_per_worker_is_refused_with_the_size_that_deploys():
    """Under 1 GB per worker the chart would run LMCache without its CPU cache (int of it is 0): refused."""
    with pytest.raises(SpecError) as refused:
        values(resolve(from_mapping(with_ddr(IN_PROCESS, "1GiB"))), 8, "64Gi")
    [problem] = refused.value.problems
    assert problem.path == "lmcache.ddr.size" and "0.5 GiB" in problem.message and "2GiB" in problem.fix


def test_the_render_says_what_a_nodes_ddr_size_is_per_pod_and_per_worker_and_the_rounding():
    """The spec's ddr tier is a node's (400 GiB for 4 instances of TP 2 on 8 GPUs); the chart's buffer is per GPU
    worker: 100 GiB per pod, 50 per worker. 325 GiB is 40.625 per worker, written as 40."""
    said = notes(resolve(from_mapping(with_ddr(IN_PROCESS, "400GiB", tensor_parallel=2, instances=4))))
    assert said[0].startswith("lmcache.ddr.size 400 GiB is a node's (4 instances of TP 2 on a node of 8 GPUs")
    assert "100 GiB per pod, 50 GiB per GPU worker" in said[0]
    assert not any("rounded down" in line for line in said)
    said = notes(resolve(from_mapping(with_ddr(IN_PROCESS, "325GiB", tensor_parallel=2, instances=4))))
    [rounded] = [line for line in said if "rounded down" in line]
    assert rounded.startswith("cpuOffloadingBufferSize 40: 40.62 GiB per GPU worker rounded down to whole GB")
    assert "lmcache.ddr.size: 320GiB deploys exactly what is simulated" in rounded


def test_replicas_on_one_node_write_to_directories_of_their_own():
    """Four replicas, one hostPath: each pod's mount is its own subdirectory, named by the pod's name (a fieldRef the
    values define), so two pods on one node never share LMCache's files."""
    r = resolve(from_mapping(with_ddr(IN_PROCESS, "40GiB", instances=4)))
    spec = values(r, 8, "64Gi")["servingEngineSpec"]["modelSpec"][0]
    [mount], [volume] = spec["extraVolumeMounts"], spec["extraVolumes"]
    [pod_name] = [e for e in spec["env"] if e["name"] == "KVPLAN_POD_NAME"]
    assert pod_name["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert mount["subPathExpr"] == "$(KVPLAN_POD_NAME)" and mount["name"] == volume["name"]
    on_the_node = {volume["hostPath"]["path"] + "/" + mount["subPathExpr"].replace("$(KVPLAN_POD_NAME)", pod)
                   for pod in ("chat-0-abc12", "chat-0-def34", "chat-0-ghi56", "chat-0-jkl78")}
    assert len(on_the_node) == 4


def test_the_engine_image_is_the_lmcache_release_kvplan_writes_configs_for():
    assert IMAGE == {"repository": "lmcache/vllm-openai", "tag": f"v{LMCACHE_RELEASE}"} and LMCACHE_RELEASE == "0.5.6"
    spec = values(resolve(from_mapping(IN_PROCESS)), 8, "64Gi")["servingEngineSpec"]["modelSpec"][0]
    assert spec["tag"] == "v0.5.6"


def test_the_api_key_is_a_secret_reference_the_chart_reads(tmp_path):
    """serving.api_key_env: the chart's vllmApiKey names a Secret and the key in it (lines 262-277, the map branch),
    and the render says how to create it from the variable; the values hold no key."""
    spec = {**IN_PROCESS, "serving": {**IN_PROCESS["serving"], "api_key_env": "CHAT_API_KEY"}}
    written = values(resolve(from_mapping(spec)), 8, "64Gi")
    assert written["servingEngineSpec"]["vllmApiKey"] == {"secretName": "chat-inprocess-vllm-api-key",
                                                          "secretKey": "CHAT_API_KEY"}
    jsonschema.Draft202012Validator(SCHEMA).validate(written)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    done = subprocess.run([KVPLAN, "render", str(path), "--format", "production-stack", "--request-cpu", "8",
                           "--request-memory", "64Gi", "-o", str(tmp_path / "values.yaml")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "CHAT_API_KEY": "sk-never-seen"})
    assert done.returncode == 0, done.stderr
    assert ('kubectl create secret generic chat-inprocess-vllm-api-key --from-literal=CHAT_API_KEY="$CHAT_API_KEY"'
            in done.stdout)
    assert "sk-never-seen" not in done.stdout + done.stderr + (tmp_path / "values.yaml").read_text()
    from kvplan.interop import from_helm_values

    back = from_helm_values(written, "H100-SXM")
    assert back.spec["serving"]["api_key_env"] == "CHAT_API_KEY"
