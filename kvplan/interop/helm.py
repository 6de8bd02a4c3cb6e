"""vllm-project/production-stack Helm values as a spec: one `servingEngineSpec.modelSpec` entry read as the chart's
template turns it into a vLLM command line (vllmConfig, extraArgs), replicas, lmcacheConfig with the LMCACHE_*
variables, and the router's routing logic."""

from __future__ import annotations

import shlex
from typing import Any

from ..deploy.helm import CHART_FLAGS, POD_NAME
from ..errors import Problem, SpecError
from ..spec.serving import Serving
from ..units import exact_size, parse_size
from .imported import Imported
from .lmcache import add_lmcache_config
from .vllm import API_KEY_ENV, from_vllm_command

CHART_RESOURCES = {"repository", "tag", "requestCPU", "requestMemory", "requestGPUType", "pvcStorage", "storageClass",
                   "runtimeClassName", "nodeSelectorTerms", "tolerations", "labels", "annotations"}
"""modelSpec keys about the pod, not the engine: kvplan neither simulates nor sets them."""


def from_helm_values(data: dict[str, Any], gpu: str, model_spec: str | None = None) -> Imported:
    """The spec of one `servingEngineSpec.modelSpec` entry of vllm-project/production-stack Helm values (the one named
    `model_spec`, else the first): its vllmConfig and extraArgs as the chart's template turns them into vLLM flags,
    replicaCount as instances, lmcacheConfig and LMCACHE_* variables as in-process LMCache, routingLogic."""
    serving_spec = data.get("servingEngineSpec") if isinstance(data, dict) else None
    entries = serving_spec.get("modelSpec") if isinstance(serving_spec, dict) else None
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise SpecError([Problem("--helm-values", "no servingEngineSpec.modelSpec list",
                                 fix="give the values file of a production-stack release")])
    names = [str(e.get("name")) for e in entries]
    if model_spec is not None and model_spec not in names:
        raise SpecError([Problem("--model-spec", f"no modelSpec named {model_spec!r}", model_spec,
                                 fix=f"pick one of {', '.join(names)}")])
    entry = entries[names.index(model_spec) if model_spec is not None else 0]
    config = entry.get("vllmConfig") or {}
    words = ["vllm", "serve", str(entry.get("modelURL", ""))] if entry.get("modelURL") else ["vllm", "serve"]
    for key, flag in CHART_FLAGS.items():
        if key in config:
            words += [flag, str(config[key])]
    words.append("--enable-prefix-caching" if config.get("enablePrefixCaching") else "--no-enable-prefix-caching")
    if "enableChunkedPrefill" in config:
        words.append("--enable-chunked-prefill" if config["enableChunkedPrefill"] else "--no-enable-chunked-prefill")
    words += [str(a) for a in config.get("extraArgs") or []]
    imported = from_vllm_command(shlex.join(words), gpu, name=str(entry.get("name") or "imported"))
    serving = imported.spec["serving"]
    if "replicaCount" in entry:
        serving["instances"] = int(entry["replicaCount"])
    if str(entry.get("requestGPU", serving.get("tensor_parallel", 1))) != str(serving.get("tensor_parallel", 1)):
        imported.unmapped.append((f"requestGPU {entry['requestGPU']}", "kvplan gives each instance tensor_parallel GPUs"))
    for key in sorted(set(config) - set(CHART_FLAGS) - {"enablePrefixCaching", "enableChunkedPrefill", "extraArgs"}):
        imported.unmapped.append((f"vllmConfig.{key}", "kvplan has no setting for it"))
    for key in sorted(set(entry) - {"name", "modelURL", "replicaCount", "requestGPU", "vllmConfig", "lmcacheConfig", "env",
                                    "extraVolumes", "extraVolumeMounts"}):
        imported.unmapped.append((f"modelSpec.{key}", "the pod's, not the engine's: kvplan neither simulates nor sets it"
                                  if key in CHART_RESOURCES else "kvplan has no setting for it"))
    lmcache = entry.get("lmcacheConfig") or {}
    env = {str(e.get("name")): str(e.get("value")) for e in entry.get("env") or []
           if isinstance(e, dict) and e.get("name") != POD_NAME}      # the pod's name: its nvme subdirectory
    if lmcache.get("enabled"):
        imported.spec["lmcache"] = {"mode": "inprocess"}
        engine: dict[str, Any] = {}
        if "cpuOffloadingBufferSize" in lmcache:
            engine.update(local_cpu=True, max_local_cpu_size=lmcache["cpuOffloadingBufferSize"])
        if "diskOffloadingBufferSize" in lmcache:
            engine["max_local_disk_size"] = lmcache["diskOffloadingBufferSize"]
        for name, value in env.items():
            if name.startswith("LMCACHE_"):
                engine[name[len("LMCACHE_"):].lower()] = _env_value(value)
        for key in sorted(set(lmcache) - {"enabled", "cpuOffloadingBufferSize", "diskOffloadingBufferSize"}):
            imported.unmapped.append((f"lmcacheConfig.{key}", "kvplan has no setting for it"))
        add_lmcache_config(imported, engine, "LMCache")
        # A pod is one instance; a kvplan tier is a node's, shared by the instances kvplan packs on it.
        tp = int(serving.get("tensor_parallel", 1))
        gpus_per_node = Serving.model_fields["gpus_per_node"].default       # the import sets no other
        per_node = min(int(serving.get("instances", 1)), max(1, gpus_per_node // tp))
        for tier in ("ddr", "nvme"):
            if tier in imported.spec["lmcache"]:
                size = imported.spec["lmcache"][tier]["size"]
                imported.spec["lmcache"][tier]["size"] = exact_size(parse_size(size) * per_node)
        imported.spec["workload"] = imported.spec.pop("workload")     # keep the placeholder last
    for name in sorted(n for n in env if not n.startswith("LMCACHE_") or not lmcache.get("enabled")):
        imported.unmapped.append((f"env {name}", "kvplan has no setting for it"))
    _api_key(serving_spec.get("vllmApiKey"), imported)
    router = data.get("routerSpec") or {}
    logic = router.get("routingLogic", "roundrobin")
    if router.get("enableRouter") is False:
        imported.unmapped.append(("routerSpec.enableRouter false", "another router fronts the pods (kvplan renders this "
                                  "for llm-d's gateway, whose EndpointPickerConfig the import does not read): set "
                                  "serving.router and serving.llm_d yourself"))
    elif logic == "roundrobin":
        serving["router"] = "round_robin"
    else:
        imported.unmapped.append((f"routerSpec.routingLogic {logic}", "production-stack's own router policy; kvplan "
                                  "simulates vllm-router's, of which only round robin is the same"))
    for other in names:
        if other != entry.get("name"):
            imported.unmapped.append((f"modelSpec {other}", "a spec plans one model: import it with --model-spec"))
    return imported


def _api_key(reference: Any, imported: Imported) -> None:
    """servingEngineSpec.vllmApiKey as serving.api_key_env: a Secret's key names the variable (the render refers to
    the Secret `<name>-vllm-api-key` under that key); a key written into the values is never carried, only named as
    VLLM_API_KEY for the deploy to read."""
    from ..spec.serving import ENV_NAME

    if not reference:
        return
    serving = imported.spec["serving"]
    where = "servingEngineSpec.vllmApiKey"
    if isinstance(reference, dict) and ENV_NAME.fullmatch(str(reference.get("secretKey", ""))):
        key, name = str(reference["secretKey"]), str(reference.get("secretName", ""))
        serving["api_key_env"] = key
        imported.approximated.append((f"{where}.secretName {name}", f"serving.api_key_env: {key} names the key; kvplan's "
                                  f"render refers to the Secret <name>-vllm-api-key: create it from ${key}"))
    elif isinstance(reference, str):
        serving["api_key_env"] = API_KEY_ENV
        imported.approximated.append((where, f"the values hold the key itself, which a spec never does: serving.api_key_env: "
                                  f"{API_KEY_ENV} names the variable the deploy reads it from; export it, or create the "
                                  "Secret the render names"))
    else:
        imported.unmapped.append((where, "not a Secret reference kvplan can read (secretName, and a secretKey that is "
                                  "a variable's name): set serving.api_key_env by hand"))


def _env_value(text: str) -> Any:
    """An LMCACHE_* variable's text as the value of its config key."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text
