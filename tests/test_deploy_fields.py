"""Every spec field is accounted for in the deployment: deployed, simulation-only, or needed by neither.

The ledger is kvplan.spec.deployment. These tests walk the whole Topology schema and hold the
ledger to it: a field no entry covers fails, so a new field cannot be added without saying what
the deployment does with it. For each deployed field a spec that sets it away from the example's
value is rendered and the value is found in the rendered files, where it was not before. For each
simulation-only field, validate refuses a spec that sets it and render refuses the same spec marked
simulate_only, naming the field and the reason. The stack facts of `Resolved` that no spec field
sets (STACK_FACTS) are held the same way: each deployed one, changed in `Resolved`, changes the render.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from urllib.parse import urlsplit
from typing import Any, Callable

import pytest
import yaml

from conftest import EXAMPLES, REPO, example_data, flags, inventory_for, shipped_inventory, with_changes
from kvplan.deploy import ansible_yaml, inventory as inventory_mod
from kvplan.deploy.render import render
from kvplan.deploy.secrets import Secrets
from kvplan.errors import SpecError
from kvplan.resolve import Resolved, resolve
from kvplan.spec import from_mapping
from kvplan.spec.base import SpecModel
from kvplan.spec.deployment import DEPLOYED, LEDGER, NOT_DEPLOYED, SIMULATION_ONLY, STACK_FACTS, entry
from kvplan.spec.topology import Topology

KEYS = Secrets(ceph_rgw_access_key="AKIAEXAMPLEEXAMPLE00", ceph_rgw_secret_key="example-secret")


def models_in(annotation) -> list[type[SpecModel]]:
    """The spec models an annotation holds (`X`, `X | None`, `list[X]`)."""
    if isinstance(annotation, type) and issubclass(annotation, SpecModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]


def schema(model: type[SpecModel] = Topology, prefix: str = "", within: tuple[type, ...] = ()) -> dict[str, bool]:
    """Every field path of the spec, recursively -> whether it is a leaf (holds no spec model). A model inside
    itself (Resolved's disaggregation holds each pool's Resolved) is walked once."""
    out: dict[str, bool] = {}
    for name, field in model.model_fields.items():
        path = prefix + name
        inner = models_in(field.annotation)
        out[path] = not inner
        for sub in inner:
            if sub not in within and sub is not model:
                out.update(schema(sub, path + ".", (*within, model)))
    return out


FIELDS = schema()
LEAVES = sorted(path for path, leaf in FIELDS.items() if leaf)


def test_the_walk_reaches_the_deep_fields():
    assert {"serving.step_model.layer_overhead", "lmcache.warmup.templates.tokens", "ceph.rgw.address",
            "workload.sessions.turns.cv", "model.sources.url"} <= set(LEAVES)
    assert len(LEAVES) > 140


def test_every_field_of_the_spec_has_exactly_one_class():
    uncovered = [path for path in LEAVES if entry(path) is None]
    assert not uncovered, f"classify these fields in kvplan/spec/deployment.py: {uncovered}"
    unknown = [key for key in LEDGER if key not in FIELDS]
    assert not unknown, f"ledger entries that name no spec field: {unknown}"
    nested = [(outer, key) for key in LEDGER for outer in LEDGER if key != outer and key.startswith(outer + ".")]
    assert not nested, f"an entry inside another gives its fields two classes: {nested}"
    for key, (kind, why) in LEDGER.items():
        assert kind in (DEPLOYED, SIMULATION_ONLY, NOT_DEPLOYED) and why.strip(), key


# ---------------------------------------------------------------------------------------------- deployed

class View:
    """A rendered private_data_dir, read the way the roles read it."""

    def __init__(self, root: Path):
        self.root = root

    def vars(self, role: str) -> dict[str, Any]:
        path = self.root / "project" / "group_vars" / "all" / f"{role}.yml"
        return ansible_yaml.load(path.read_text()) if path.is_file() else {}

    def vllm(self, flag: str) -> list[str]:
        return flags(self.vars("vllm")["vllm_args"]).get(flag, [])

    def transfer(self) -> dict[str, Any]:
        return json.loads(self.vllm("--kv-transfer-config")[0])

    def server(self, flag: str) -> list[str]:
        return flags(self.vars("lmcache")["lmcache_server_args"]).get(flag, [])

    def adapters(self) -> list[dict[str, Any]]:
        return [json.loads(a) for a in self.server("--l2-adapter")]

    def config(self) -> dict[str, Any]:
        return self.vars("lmcache")["lmcache_config"]

    def instances(self) -> dict[str, list[dict[str, Any]]]:
        return {p.stem: ansible_yaml.load(p.read_text())["vllm_instances"]
                for p in sorted((self.root / "project" / "host_vars").glob("*.yml"))}

    def pool(self, role: str) -> list[dict[str, Any]]:
        """The host_vars of one disaggregated pool's hosts ("prefill" or "decode"): the hosts whose instances the
        router lists as --prefill or --decode (none for an aggregated render)."""
        urls = flags(self.vars("router")["router_args"]).get(f"--{role}", [])
        addresses = {urlsplit(url).hostname for url in urls}
        hosts = yaml.safe_load((self.root / "inventory" / "hosts.yml").read_text())["all"]["children"]["gpu"]["hosts"]
        return [ansible_yaml.load((self.root / "project" / "host_vars" / f"{name}.yml").read_text())
                for name, host in hosts.items() if host["ansible_host"] in addresses]

    def pool_vllm(self, role: str, flag: str) -> list[list[str]]:
        """`flag`'s values in each host's vllm_args of one disaggregated pool."""
        return [flags(h["vllm_args"]).get(flag, []) for h in self.pool(role)]

    def rules(self) -> list[dict[str, Any]]:
        return self.vars("monitoring")["monitoring_rules"]["groups"][0]["rules"]

    def rule(self, alert: str) -> str:
        return next(r["expr"] for r in self.rules() if r["alert"] == alert)


def rendered(example: str, changes: dict[str, Any], tmp: Path) -> View:
    r = resolve(from_mapping(with_changes(example_data(example), **changes), base_dir=REPO / "examples"))
    out = tmp / f"render-{r.spec_hash[:12]}"
    if not out.exists():
        render(r, inventory_for(r, tmp), out, KEYS)
    return View(out)


Check = Callable[[View], bool]
PER_DRIVE = {"size": "1TB", "device": "gen4", "drives": 2, "layout": "per_drive", "paths": ["/mnt/nvme0/lm", "/mnt/nvme1/lm"]}
"""The flagship's nvme tier on two drives, a directory on each (in-process LMCache at TP 2 shards ranks over them)."""
LOCAL, FLAGSHIP, CODEGEN = "local", "chat-llama2-13b", "codegen-70b"
NATIVE = {"lmcache": None, "ceph": None, "serving__kv_offloading": {"size": "32GiB"}}
"""The flagship with vLLM's native offloading in place of LMCache."""


def pd(prefill: dict[str, Any] | None = None, decode: dict[str, Any] | None = None, **rest: Any) -> dict[str, Any]:
    """The flagship disaggregated, without LMCache (a pool's tiers are not rendered yet) on nodes of two GPUs: a
    prefill and a decode instance of TP 1 unless `prefill` and `decode` say otherwise."""
    return {"lmcache": None, "ceph": None, "serving__instances": None, "serving__tensor_parallel": None,
            "serving__max_num_seqs": None, "serving__router": None, "serving__gpus_per_node": 2,
            "serving__disaggregation": {"prefill": {"instances": 1, **(prefill or {})},
                                        "decode": {"instances": 1, **(decode or {})}, **rest}}


def nixl_everywhere(v: View) -> bool:
    """Every instance of both pools has NixlConnector and a side channel of its own; the router speaks NIXL."""
    hosts = v.pool("prefill") + v.pool("decode")
    configs = [json.loads(flags(h["vllm_args"])["--kv-transfer-config"][0]) for h in hosts]
    channels = [(i["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"], i["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"])
                for h in hosts for i in h["vllm_instances"]]
    return (bool(hosts) and all(c["kv_connector"] == "NixlConnector" for c in configs)
            and len(set(channels)) == len(channels) and router(v, "--kv-connector") == ["nixl"])


def offloading(v: View) -> dict[str, Any]:
    """The OffloadingConnector's extra config in the rendered --kv-transfer-config ({} for another connector)."""
    transfer = v.transfer()
    return transfer.get("kv_connector_extra_config", {}) if transfer["kv_connector"] == "OffloadingConnector" else {}


def inline_model(name: str, **changes: Any) -> dict[str, Any]:
    """A catalog model written out inline in the spec, with changes."""
    from kvplan.catalog import load_catalog
    return {**load_catalog().llm(name).model_dump(mode="json", exclude_none=True), **changes}


CASES: dict[str, tuple[str, dict[str, Any], Check]] = {
    # path: (example, changes that set it away from the example's value, what the render shows for it)
    "name": (LOCAL, {"name": "local-two"}, lambda v: v.vars("monitoring")["monitoring_rules"]["groups"][0]["name"]
             == "kvplan-local-two" and v.server("--shm-name") == ["kvplan_local_two"]),
    "model.name": (FLAGSHIP, {"model": "Llama-2-7B"}, lambda v: v.vllm("--served-model-name") == ["Llama-2-7B"]),
    "model.hf_id": (FLAGSHIP, {"model": inline_model("Llama-2-13B", hf_id="meta-llama/Llama-2-13b-chat-hf")},
                    lambda v: v.vars("vllm")["vllm_model"] == "meta-llama/Llama-2-13b-chat-hf"),
    "serving.gpus_per_node": (FLAGSHIP, {"serving__gpus_per_node": 4},
                              lambda v: [i["devices"] for i in v.instances()["gpu-1"]] == ["0", "1", "2", "3"]),
    "serving.instances": (FLAGSHIP, {"serving__instances": 2}, lambda v: len(v.instances()) == 2),
    "serving.tensor_parallel": (CODEGEN, {"serving__tensor_parallel": 8, "serving__instances": 4},
                                lambda v: v.vllm("--tensor-parallel-size") == ["8"]),
    "serving.block_size": (FLAGSHIP, {"serving__block_size": 32}, lambda v: v.vllm("--block-size") == ["32"]),
    "serving.gpu_memory_utilization": (FLAGSHIP, {"serving__gpu_memory_utilization": 0.85},
                                       lambda v: v.vllm("--gpu-memory-utilization") == ["0.85"]),
    "serving.kv_cache_memory": (FLAGSHIP, {"serving__kv_cache_memory": "40GiB"},
                                lambda v: v.vllm("--kv-cache-memory-bytes") == [str(40 * 2**30)]),
    "serving.max_model_len": (FLAGSHIP, {"serving__max_model_len": 2048}, lambda v: v.vllm("--max-model-len") == ["2048"]),
    "serving.max_num_seqs": (FLAGSHIP, {"serving__max_num_seqs": 48}, lambda v: v.vllm("--max-num-seqs") == ["48"]),
    "serving.max_num_batched_tokens": (FLAGSHIP, {"serving__max_num_batched_tokens": 4096},
                                       lambda v: v.vllm("--max-num-batched-tokens") == ["4096"]),
    "serving.disaggregation.prefill.instances": (FLAGSHIP, pd({"instances": 3}),
                                                 lambda v: len(router(v, "--prefill")) == 3
                                                 and sum(len(h["vllm_instances"]) for h in v.pool("prefill")) == 3),
    "serving.disaggregation.prefill.tensor_parallel": (FLAGSHIP, pd({"tensor_parallel": 2}, {"tensor_parallel": 2}),
                                                       lambda v: v.pool_vllm("prefill", "--tensor-parallel-size")
                                                       == [["2"]] and v.pool("prefill")[0]["vllm_tensor_parallel"] == 2),
    "serving.disaggregation.prefill.max_num_seqs": (FLAGSHIP, pd({"max_num_seqs": 48}),
                                                    lambda v: v.pool_vllm("prefill", "--max-num-seqs") == [["48"]]),
    "serving.disaggregation.prefill.max_num_batched_tokens": (
        FLAGSHIP, pd({"max_num_batched_tokens": 4096}),
        lambda v: v.pool_vllm("prefill", "--max-num-batched-tokens") == [["4096"]]),
    "serving.disaggregation.decode.instances": (FLAGSHIP, pd(decode={"instances": 3}),
                                                lambda v: len(router(v, "--decode")) == 3
                                                and sum(len(h["vllm_instances"]) for h in v.pool("decode")) == 3),
    "serving.disaggregation.decode.tensor_parallel": (FLAGSHIP, pd(decode={"tensor_parallel": 2}),
                                                      lambda v: v.pool_vllm("decode", "--tensor-parallel-size")
                                                      == [["2"]] and v.pool("decode")[0]["vllm_tensor_parallel"] == 2),
    "serving.disaggregation.decode.max_num_seqs": (FLAGSHIP, pd(decode={"max_num_seqs": 48}),
                                                   lambda v: v.pool_vllm("decode", "--max-num-seqs") == [["48"]]),
    "serving.disaggregation.decode.max_num_batched_tokens": (
        FLAGSHIP, pd(decode={"max_num_batched_tokens": 4096}),
        lambda v: v.pool_vllm("decode", "--max-num-batched-tokens") == [["4096"]]),
    "serving.disaggregation.connector": (FLAGSHIP, pd(connector="nixl"), nixl_everywhere),
    "serving.disaggregation.proxy": (FLAGSHIP, pd(proxy="round_robin"),
                                     lambda v: router(v, "--vllm-pd-disaggregation") == [""]
                                     and router(v, "--policy") == ["round_robin"]),
    "serving.weights_dtype": (FLAGSHIP, {"serving__weights_dtype": "bf16"}, lambda v: v.vllm("--dtype") == ["bfloat16"]),
    "serving.quantization": (FLAGSHIP, {"serving__weights_dtype": "fp8", "serving__quantization": "fp8"},
                             lambda v: v.vllm("--quantization") == ["fp8"] and not v.vllm("--dtype")),
    "serving.kv_cache_dtype": (FLAGSHIP, {"serving__kv_cache_dtype": "fp8"}, lambda v: v.vllm("--kv-cache-dtype") == ["fp8"]),
    "serving.prefix_caching": (FLAGSHIP, {"serving__prefix_caching": False},
                               lambda v: v.vllm("--no-enable-prefix-caching") == [""]),
    "serving.chunked_prefill": (FLAGSHIP, {"serving__chunked_prefill": False, "serving__max_num_batched_tokens": 4096},
                                lambda v: v.vllm("--no-enable-chunked-prefill") == [""]),
    "serving.async_scheduling": (FLAGSHIP, {"serving__async_scheduling": False},
                                 lambda v: v.vllm("--no-async-scheduling") == [""] and not v.vllm("--async-scheduling")),
    "serving.kv_offloading.size": (FLAGSHIP, NATIVE, lambda v: offloading(v).get("cpu_bytes_to_use") == 32 * 2 ** 30),
    "serving.kv_offloading.eviction": (FLAGSHIP, {**NATIVE, "serving__kv_offloading": {"size": "32GiB", "eviction": "ARC"}},
                                       lambda v: offloading(v).get("eviction_policy") == "arc"),
    "serving.kv_offloading.block_size": (FLAGSHIP, {**NATIVE, "serving__kv_offloading": {"size": "32GiB", "block_size": 64}},
                                         lambda v: offloading(v).get("block_size") == 64),
    "serving.router": (FLAGSHIP, {"serving__router": "prefix_aware"},
                       lambda v: flags(v.vars("router")["router_args"])["--policy"] == ["cache_aware"]),
    "serving.router_port": (FLAGSHIP, {"serving__router_port": 8100},
                            lambda v: flags(v.vars("router")["router_args"])["--port"] == ["8100"]
                            and flags(v.vars("router")["router_args"])["--prometheus-port"] == ["8101"]),
    "serving.model_path": (FLAGSHIP, {"serving__model_path": "/srv/models/llama-2-13b-chat"},
                           lambda v: v.vars("vllm")["vllm_model"] == "/srv/models/llama-2-13b-chat"),
    "serving.host": (FLAGSHIP, {"serving__host": "10.0.2.1"}, lambda v: v.vars("vllm")["vllm_host"] == "10.0.2.1"),
    "serving.port": (FLAGSHIP, {"serving__port": 9000}, lambda v: v.instances()["gpu-1"][0]["port"] == 9000),
    "serving.api_key_env": (FLAGSHIP, {"serving__api_key_env": "CHAT_API_KEY"},
                            lambda v: v.vars("vllm")["vllm_api_key_env"] == "CHAT_API_KEY"
                            and v.vars("warmup")["warmup_api_key_env"] == "CHAT_API_KEY"),

    "lmcache.mode": (FLAGSHIP, {"lmcache__mode": "mp"},
                     lambda v: v.vars("lmcache")["lmcache_mode"] == "mp" and v.transfer()["kv_connector"] == "LMCacheMPConnector"),
    "lmcache.chunk_size": (LOCAL, {"lmcache__chunk_size": 512}, lambda v: v.server("--chunk-size") == ["512"]),
    "lmcache.ddr.size": (LOCAL, {"lmcache__ddr__size": "2GiB"}, lambda v: v.server("--l1-size-gb") == ["2"]),
    "lmcache.ddr.eviction": (LOCAL, {"lmcache__ddr__eviction": "ARC"}, lambda v: v.server("--eviction-policy") == ["ARC"]),
    "lmcache.nvme.size": (LOCAL, {"lmcache__nvme__size": "3GiB"}, lambda v: v.adapters()[0]["max_capacity_gb"] == 3),
    "lmcache.nvme.eviction": (LOCAL, {"lmcache__nvme__eviction": "ARC"},
                              lambda v: v.adapters()[0]["eviction"]["eviction_policy"] == "ARC"),
    "lmcache.nvme.layout": (FLAGSHIP, {"serving__gpus_per_node": 2, "serving__tensor_parallel": 2, "lmcache__nvme": PER_DRIVE},
                            lambda v: v.config().get("local_disk_path_sharding") == "by_gpu"),
    "lmcache.nvme.paths": (FLAGSHIP, {"serving__gpus_per_node": 2, "serving__tensor_parallel": 2, "lmcache__nvme": PER_DRIVE},
                           lambda v: v.config()["local_disk"] == "file:///mnt/nvme0/lm/,file:///mnt/nvme1/lm/"
                           and v.vars("lmcache")["lmcache_nvme_paths"] == ["/mnt/nvme0/lm", "/mnt/nvme1/lm"]),
    "lmcache.nvme.path": (LOCAL, {"lmcache__nvme__path": "/srv/lmcache"}, lambda v: v.adapters()[0]["base_path"] == "/srv/lmcache"),
    "lmcache.ceph.size": (LOCAL, {"lmcache__ceph__size": "8GiB"}, lambda v: v.adapters()[1]["max_capacity_gb"] == 8),
    "lmcache.ceph.eviction": (LOCAL, {"lmcache__ceph__eviction": "ARC"},
                              lambda v: v.adapters()[1]["eviction"]["eviction_policy"] == "ARC"),
    "lmcache.ceph.ttl": (LOCAL, {"lmcache__ceph__ttl": "3d"}, lambda v: v.vars("ceph")["ceph_rgw_expiration_days"] == 3),
    "lmcache.port": (LOCAL, {"lmcache__port": 6000},
                     lambda v: v.server("--port") == ["6000"] and v.transfer()["kv_connector_extra_config"]["lmcache.mp.port"] == 6000),
    "lmcache.save_decode_cache": (LOCAL, {"lmcache__save_decode_cache": True},
                                  lambda v: v.transfer()["kv_connector_extra_config"].get("lmcache.mp.save_decode_cache") is True),
    "lmcache.save_unfull_chunk": (FLAGSHIP, {"lmcache__save_unfull_chunk": True}, lambda v: v.config()["save_unfull_chunk"] is True),
    "lmcache.min_retrieve_tokens": (FLAGSHIP, {"lmcache__min_retrieve_tokens": 512},
                                    lambda v: v.config()["min_retrieve_tokens"] == 512),
    "lmcache.warmup.system_prompts": (FLAGSHIP, {"lmcache__warmup__system_prompts": 2},
                                      lambda v: len(v.vars("warmup")["warmup_prompts"]) == 2),
    "lmcache.warmup.templates": (FLAGSHIP, {"lmcache__warmup__templates": [{"name": "faq", "tokens": 300}]},
                                 lambda v: [len(p["prompt"]) for p in v.vars("warmup")["warmup_prompts"]][-1] == 300),

    "ceph.deploy": (FLAGSHIP, {"ceph__deploy": "external"}, lambda v: v.vars("ceph")["ceph_deploy"] == "external"),
    "ceph.hosts": (FLAGSHIP, {"ceph__hosts": 4}, lambda v: [f"ceph-{i}" for i in (1, 2, 3, 4)] == ceph_hosts(v)),
    "ceph.osds_per_host": (FLAGSHIP, {"ceph__osds_per_host": 8}, lambda v: v.vars("ceph")["ceph_osds_per_host"] == 8),
    "ceph.osd_size": (LOCAL, {"ceph__osd_size": "8GiB"}, lambda v: v.vars("ceph")["ceph_osd_size"] == 8 * 2**30),
    "ceph.osd_devices": (FLAGSHIP, {"ceph__osd_devices": ["/dev/nvme1n1", "/dev/nvme2n1", "/dev/nvme3n1", "/dev/nvme4n1"]},
                         lambda v: v.vars("ceph")["ceph_osd_devices"][:1] == ["/dev/nvme1n1"]),
    "ceph.device_class": (FLAGSHIP, {"ceph__device_class": "ssd"}, lambda v: v.vars("ceph")["ceph_crush_rule"] == "kvplan-ssd-host"),
    "ceph.failure_domain": (FLAGSHIP, {"ceph__failure_domain": "osd"},
                            lambda v: v.vars("ceph")["ceph_failure_domain"] == "osd"),
    "ceph.pool.name": (LOCAL, {"ceph__pool__name": "kv2"}, lambda v: v.vars("ceph")["ceph_pool_name"] == "kv2"),
    "ceph.pool.size": (FLAGSHIP, {"ceph__pool__size": 2, "ceph__pool__min_size": 1},
                       lambda v: v.vars("ceph")["ceph_pool_size"] == 2),
    "ceph.pool.min_size": (FLAGSHIP, {"ceph__pool__min_size": 1}, lambda v: v.vars("ceph")["ceph_pool_min_size"] == 1),
    "ceph.pool.pg_num": (FLAGSHIP, {"ceph__pool__pg_num": 256}, lambda v: v.vars("ceph")["ceph_pool_pg_num"] == 256),
    "ceph.pool.adopt": (CODEGEN, {"ceph__pool__adopt": True}, lambda v: v.vars("ceph")["ceph_pool_adopt"] is True),
    "ceph.access": (LOCAL, {}, lambda v: v.vars("ceph")["ceph_access"] == "s3"),
    "ceph.rgw.port": (LOCAL, {"ceph__rgw__port": 8081}, lambda v: v.vars("ceph")["ceph_rgw_port"] == 8081
                      and v.adapters()[1]["s3_endpoint"].endswith(":8081")),
    "ceph.rgw.dns_name": (LOCAL, {"ceph__rgw__dns_name": "s3.lab.internal"},
                          lambda v: v.vars("lmcache")["lmcache_s3_host"].endswith(".s3.lab.internal")),
    "ceph.rgw.bucket": (LOCAL, {"ceph__rgw__bucket": "kv-two"}, lambda v: v.vars("ceph")["ceph_rgw_bucket"] == "kv-two"),
    "ceph.rgw.region": (LOCAL, {"ceph__rgw__region": "eu"}, lambda v: v.adapters()[1]["s3_region"] == "eu"),
    "ceph.rgw.address": (FLAGSHIP, {"ceph__rgw__address": "10.0.9.9"}, lambda v: v.vars("ceph")["ceph_rgw_address"] == "10.0.9.9"),
    "ceph.rgw.user": (LOCAL, {"ceph__rgw__user": "lmcache"}, lambda v: v.vars("ceph")["ceph_rgw_user"] == "lmcache"),
    "ceph.options": (LOCAL, {"ceph__options": {"osd_memory_target": 939524096, "osd_op_num_threads_per_shard": 4}},
                     lambda v: v.vars("ceph")["ceph_options"].get("osd_op_num_threads_per_shard") == "4"),

    "monitoring.min_lmcache_hit_ratio": (LOCAL, {"monitoring__min_lmcache_hit_ratio": 0.5},
                                         lambda v: v.rule("KVPlanLMCacheHitRatioLow").endswith("< 0.5")),
    "monitoring.max_block_utilization": (LOCAL, {"monitoring__max_block_utilization": 0.6},
                                         lambda v: v.rule("KVPlanKVBlockUtilizationHigh").endswith("> 0.6")),
    "monitoring.max_ceph_op_latency": (LOCAL, {"monitoring__max_ceph_op_latency": "20ms"},
                                       lambda v: v.rule("KVPlanCephOpLatencyHigh").endswith("> 0.02")),
    "monitoring.metrics_address": (LOCAL, {"monitoring__metrics_address": "10.0.3.1"},
                                   lambda v: v.vars("monitoring")["monitoring_web_listen_address"] == "10.0.3.1:9090"),
    "monitoring.prometheus_port": (LOCAL, {"monitoring__prometheus_port": 9091},
                                   lambda v: v.vars("monitoring")["monitoring_port"] == 9091),
    "monitoring.scrape_interval": (LOCAL, {"monitoring__scrape_interval": "30s"},
                                   lambda v: v.vars("monitoring")["monitoring_scrape_interval"] == "30s"),
}


def ceph_hosts(v: View) -> list[str]:
    hosts = yaml.safe_load((v.root / "inventory" / "hosts.yml").read_text())["all"]["children"]["ceph"]["hosts"]
    return sorted(hosts)


# Fields llm-d's scheduler deploys: in the EndpointPickerConfig `render --format production-stack` writes beside the
# values (the Ansible render refuses serving.router: llm_d). (example, changes to its spec, what the config shows.)
LLM_D = {"serving__router": "llm_d"}
PickerCheck = Callable[[dict], bool]


def picker_config(example: str, changes: dict[str, Any]) -> dict:
    from kvplan.deploy.llmd import endpoint_picker_config
    return endpoint_picker_config(resolve(from_mapping(with_changes(example_data(example), **changes),
                                                       base_dir=REPO / "examples")))


def weight(cfg: dict, name: str) -> float | None:
    return next((p.get("weight") for p in cfg["schedulingProfiles"][0]["plugins"] if p["pluginRef"] == name), None)


def producer(cfg: dict, name: str) -> dict:
    return next(p["parameters"] for p in cfg["plugins"] if p["name"] == name)


LLM_D_CASES: dict[str, tuple[str, dict[str, Any], PickerCheck]] = {
    "serving.llm_d": (FLAGSHIP, {**LLM_D, "serving__llm_d": {"queue": 5, "no_hit_lru": 1, "cpu_prefix": 0.5}},
                      lambda cfg: (weight(cfg, "queue-scorer"), weight(cfg, "no-hit-lru-scorer"),
                                   weight(cfg, "cpu-prefix-cache-scorer")) == (5.0, 1.0, 0.5)),
}


def test_every_deployed_field_has_a_rendering_case():
    deployed = {key for key, (kind, _) in LEDGER.items() if kind == DEPLOYED}
    cases = set(CASES) | set(LLM_D_CASES)
    assert deployed == cases, (f"no case: {sorted(deployed - cases)}", f"not deployed: {sorted(cases - deployed)}")


@pytest.mark.parametrize("path", sorted(LLM_D_CASES))
def test_a_deployed_field_reaches_llm_ds_scheduler_config(path):
    example, changes, shows = LLM_D_CASES[path]
    assert shows(picker_config(example, changes)), f"{path}: the EndpointPickerConfig does not carry the value set"
    assert not shows(picker_config(example, LLM_D)), f"{path}: the example's own config already shows it"


@pytest.mark.parametrize("path", sorted(CASES))
def test_a_deployed_field_reaches_the_rendered_stack(path, tmp_path):
    example, changes, shows = CASES[path]
    assert shows(rendered(example, changes, tmp_path)), f"{path}: the render does not carry the value set"
    if changes:
        assert not shows(rendered(example, {}, tmp_path)), f"{path}: the example's own render already shows it"


# ---------------------------------------------------------------------------------------------- stack facts

def with_fact(r: SpecModel, path: str, value: Any) -> Any:
    """`r` with the field at the dotted `path` set to `value` (the models above it copied, none changed)."""
    head, _, rest = path.partition(".")
    return r.model_copy(update={head: with_fact(getattr(r, head), rest, value) if rest else value})


def router(v: View, flag: str) -> list[str]:
    return flags(v.vars("router")["router_args"]).get(flag, [])


PREFIX_AWARE = {"serving__router": "prefix_aware"}
STACK_CASES: dict[str, tuple[str, dict[str, Any], Any, Check]] = {
    # path in Resolved: (example, changes to its spec, another value in Resolved, what the render shows for it)
    "lmcache.eviction_watermark": (LOCAL, {}, 0.9, lambda v: v.server("--eviction-trigger-watermark") == ["0.9"]
                                   and [a["eviction"]["trigger_watermark"] for a in v.adapters()] == [0.9, 0.9]),
    "lmcache.eviction_ratio": (LOCAL, {}, 0.25, lambda v: v.server("--eviction-ratio") == ["0.25"]
                               and [a["eviction"]["eviction_ratio"] for a in v.adapters()] == [0.25, 0.25]),
    "router_thresholds.cache_threshold": (FLAGSHIP, PREFIX_AWARE, 0.5, lambda v: router(v, "--cache-threshold") == ["0.5"]),
    "router_thresholds.balance_abs": (FLAGSHIP, PREFIX_AWARE, 16, lambda v: router(v, "--balance-abs-threshold") == ["16"]),
    "router_thresholds.balance_rel": (FLAGSHIP, PREFIX_AWARE, 2.0, lambda v: router(v, "--balance-rel-threshold") == ["2.0"]),
    "lmcache.http_port": (LOCAL, {}, 6001, lambda v: v.server("--http-port") == ["6001"]
                          and v.vars("lmcache")["lmcache_http_port"] == 6001
                          and [t.rsplit(":", 1)[1] for t in v.vars("monitoring")["monitoring_lmcache_targets"]] == ["6001"]),
    "lmcache.http_address": (LOCAL, {}, "10.0.2.1", lambda v: v.vars("lmcache")["lmcache_http_url_host"] == "10.0.2.1"),
}


def test_every_stack_fact_is_a_field_of_resolved_and_no_spec_field():
    fields = schema(Resolved)
    assert not [key for key in STACK_FACTS if key not in fields], "STACK_FACTS entries that name no field of Resolved"
    for key, (kind, why) in STACK_FACTS.items():
        assert kind in (DEPLOYED, NOT_DEPLOYED) and why.strip(), key
        assert key not in FIELDS, f"{key} is a spec field: its class belongs in LEDGER"


LLM_D_STACK_CASES: dict[str, tuple[Any, PickerCheck]] = {
    # path in Resolved: (another value there, what llm-d's EndpointPickerConfig shows for it); FLAGSHIP with llm_d
    "llm_d.gpu_index_blocks": (1234, lambda cfg: producer(cfg, "gpu-prefix-cache-producer")["lruCapacityPerServer"] == 1234),
    "llm_d.cpu_index_blocks": (4321, lambda cfg: producer(cfg, "cpu-prefix-cache-producer")["lruCapacityPerServer"] == 4321),
    "llm_d.max_prefix_blocks": (64, lambda cfg: {producer(cfg, n)["maxPrefixBlocksToMatch"] for n in
                                                 ("gpu-prefix-cache-producer", "cpu-prefix-cache-producer")} == {64}),
}


def test_every_deployed_stack_fact_has_a_rendering_case():
    assert {key for key, (kind, _) in STACK_FACTS.items() if kind == DEPLOYED} == set(STACK_CASES) | set(LLM_D_STACK_CASES)


@pytest.mark.parametrize("path", sorted(LLM_D_STACK_CASES))
def test_a_stack_fact_changed_in_resolved_changes_llm_ds_scheduler_config(path):
    from kvplan.deploy.llmd import endpoint_picker_config

    value, shows = LLM_D_STACK_CASES[path]
    r = resolve(from_mapping(with_changes(example_data(FLAGSHIP), **LLM_D), base_dir=REPO / "examples"))
    assert shows(endpoint_picker_config(with_fact(r, path, value))), f"{path}: the config does not carry the value"
    assert not shows(endpoint_picker_config(r)), f"{path}: the example's own config already shows it"


@pytest.mark.parametrize("path", sorted(STACK_CASES))
def test_a_stack_fact_changed_in_resolved_changes_the_render(path, tmp_path):
    example, changes, value, shows = STACK_CASES[path]
    r = resolve(from_mapping(with_changes(example_data(example), **changes), base_dir=REPO / "examples"))
    changed = with_fact(r, path, value)
    render(changed, inventory_for(changed, tmp_path), tmp_path / "changed", KEYS)
    assert shows(View(tmp_path / "changed")), f"{path}: the render does not carry the value set in Resolved"
    render(r, inventory_for(r, tmp_path), tmp_path / "as-resolved", KEYS)
    assert not shows(View(tmp_path / "as-resolved")), f"{path}: the example's own render already shows it"


# ---------------------------------------------------------------------------------------------- simulation-only

SIMULATION_ONLY_CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "lmcache.ddr.ttl": (LOCAL, {"lmcache__ddr__ttl": "1h"}),
    "lmcache.nvme.ttl": (LOCAL, {"lmcache__nvme__ttl": "1h"}),
    "lmcache.merging": (LOCAL, {"lmcache__merging": {"window": "20ms"}}),
    "ceph.cephfs_mount": (LOCAL, {"ceph__cephfs_mount": "/mnt/fs/kv"}),
    "serving.disaggregation.buffer_size": (FLAGSHIP, pd(connector="lmcache", buffer_size="4GiB")),
}


def test_every_simulation_only_field_has_a_case():
    assert {key for key, (kind, _) in LEDGER.items() if kind == SIMULATION_ONLY} == set(SIMULATION_ONLY_CASES)


@pytest.mark.parametrize("path", sorted(SIMULATION_ONLY_CASES))
def test_a_simulation_only_field_is_refused_unless_the_spec_is_simulate_only(path, tmp_path):
    example, changes = SIMULATION_ONLY_CASES[path]
    data = with_changes(example_data(example), **changes)
    with pytest.raises(SpecError) as exc:
        from_mapping(data, base_dir=REPO / "examples")
    assert path in {p.path for p in exc.value.problems} and "simulate_only: true" in exc.value.render()
    r = resolve(from_mapping(dict(data, simulate_only=True), base_dir=REPO / "examples"))
    with pytest.raises(SpecError) as exc:
        render(r, inventory_for(r, tmp_path), tmp_path / "run", KEYS)
    why = {p.path: p.message for p in exc.value.problems}
    assert why[path].startswith("simulation-only: "), why


# ---------------------------------------------------------------------------------------------- every example

@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_against_the_shipped_inventory_it_names(example, tmp_path):
    """(tests/test_roles_lint.py lints each of these renders and syntax-checks its playbooks.)"""
    from kvplan.spec import load

    r = resolve(load(example))
    root = render(r, inventory_mod.load(shipped_inventory(example)), tmp_path / "run", KEYS).root
    assert len(View(root).instances()) == r.nodes
