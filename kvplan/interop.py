"""Import: a kvplan spec from the configs a team already runs, and a list of what did not map.

- a `vllm serve ...` command line (`kvplan import --vllm "..."`): the model and every serving flag
  kvplan simulates and deploys (`VLLM_FLAGS`), and the LMCache connector of --kv-transfer-config;
- an LMCache engine config, the YAML that LMCACHE_CONFIG_FILE names (`--lmcache FILE`): chunk size,
  the CPU (ddr) and local-disk (nvme) tiers with their sizes and policy, and the save/retrieve
  settings (in-process mode);
- an `lmcache server ...` command line (`--lmcache-server "..."`, MP mode): the L1 (ddr) tier, the
  file-system L2 adapter (nvme), the chunk size, port and policies;
- vllm-project/production-stack Helm values (`--helm-values FILE`): one `modelSpec` entry's
  vllmConfig and extraArgs (read as the chart's template turns them into vLLM flags), replicas,
  lmcacheConfig and LMCACHE_* variables, and the router's routing logic.

It is the inverse of the deployment: what `kvplan.deploy.stack.vllm_args` and `inprocess_config`
write for a spec, imported again, gives that spec's serving and LMCache settings back (the
tests check it on every shipped example). A vLLM command does not say which accelerator it
runs on, nor what traffic it serves: `--gpu` names the accelerator, and the workload is a
placeholder the spec says to replace. Every flag or key without a kvplan setting is listed with
the reason, never dropped; what kvplan sets by itself (the served model name, --enforce-eager on
CPUs) is listed as such.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable

from .deploy.helm import CHART_FLAGS
from .deploy.stack import MP_POLICY, VLLM_DTYPE
from .errors import Problem, SpecError
from .spec.serving import QUANTIZATIONS, Serving

PLACEHOLDER_WORKLOAD = {"kind": "chat", "duration": "10min", "arrivals": {"rate": "1/s"}}
"""The workload an imported spec starts with: a vLLM command says nothing of the traffic."""

DTYPES = {**{vllm: ours for ours, vllm in VLLM_DTYPE.items()}, "half": "fp16"}
"""vLLM --dtype -> serving.weights_dtype, the inverse of what the deployment passes (auto and float32 are left to
the model's own)."""

QUANTIZED_WEIGHTS = {method: dtype for dtype, methods in QUANTIZATIONS.items() for method in methods
                     if sum(method in ms for ms in QUANTIZATIONS.values()) == 1}
"""vLLM --quantization -> the one weight precision it serves (compressed-tensors serves either, so it does not say)."""


def _int(text: str) -> int:
    """An integer as vLLM reads one, with its k/m suffixes (32k = 32768 for lengths, as vLLM's parser has it)."""
    t = text.strip().lower()
    for suffix, factor in (("k", 1024), ("m", 1024 ** 2)):
        if t.endswith(suffix):
            return int(float(t[:-1]) * factor)
    return int(t)


VLLM_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--tensor-parallel-size": ("tensor_parallel", _int), "-tp": ("tensor_parallel", _int),
    "--block-size": ("block_size", _int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--kv-cache-memory-bytes": ("kv_cache_memory", lambda v: f"{_int(v)}B"),
    "--max-model-len": ("max_model_len", _int),
    "--max-num-seqs": ("max_num_seqs", _int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", _int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--host": ("host", str), "--port": ("port", int),
}
"""vLLM flags that take a value -> the serving field it sets and how the value is read."""

VLLM_SWITCHES = {"--enable-prefix-caching": ("prefix_caching", True), "--no-enable-prefix-caching": ("prefix_caching", False),
                 "--enable-chunked-prefill": ("chunked_prefill", True),
                 "--no-enable-chunked-prefill": ("chunked_prefill", False)}
"""vLLM's boolean flags kvplan has a setting for."""

SET_BY_KVPLAN = {"--served-model-name": "kvplan serves the model under its catalog name (the spec's model)",
                 "--enforce-eager": "kvplan sets it on CPU devices and serves GPUs with CUDA graphs"}
"""Flags kvplan's deployment writes itself: listed, not imported."""

ENV_SET_BY_KVPLAN = {name: "kvplan's deployment sets it" for name in (
    "PYTHONHASHSEED", "LMCACHE_CONFIG_FILE", "LMCACHE_TRACK_USAGE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
    "VLLM_CPU_NUM_OF_RESERVED_CPU")}
"""Environment variables before the command that kvplan's deployment writes itself (VLLM_CPU_KVCACHE_SPACE is
imported: the KV space of a CPU device)."""

KNOWN_SWITCHES = {"--enforce-eager", "--trust-remote-code", "--disable-log-requests", "--disable-log-stats",
                  "--enable-log-requests", "--disable-frontend-multiprocessing", "--no-enable-log-requests"}
"""Boolean flags without a value that kvplan has no setting for (so the next word is not read as their value)."""


@dataclass
class Imported:
    """A spec mapping made from users' configs, and what did not map: (flag or key, why)."""

    spec: dict[str, Any]
    unmapped: list[tuple[str, str]] = field(default_factory=list)


def from_vllm_command(command: str, gpu: str, name: str = "imported") -> Imported:
    """The spec of the deployment `command` (`vllm serve MODEL --flag value ...`) starts on `gpu`."""
    from .catalog import load_catalog

    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise SpecError([Problem("--vllm", f"cannot split the command line: {exc}",
                                 fix="quote the whole command once: --vllm \"vllm serve MODEL --flag value\"")]) from None
    serving: dict[str, Any] = {"gpu": gpu}
    lmcache: dict[str, Any] | None = None
    unmapped: list[tuple[str, str]] = []
    while words and "=" in words[0] and not words[0].startswith("-"):      # NAME=value before the command
        variable, value = words.pop(0).split("=", 1)
        if variable == "VLLM_CPU_KVCACHE_SPACE":
            serving["kv_cache_memory"] = f"{value}GiB"
        else:
            unmapped.append((f"{variable}={value}", ENV_SET_BY_KVPLAN.get(variable, "kvplan has no setting for it")))
    words = _after_entrypoint(words)
    model = None
    i = 0
    while i < len(words):
        word = words[i]
        flag, value = (word.split("=", 1) + [None])[:2] if word.startswith("-") else (word, None)
        if not word.startswith("-"):
            if model is None:
                model = word
            else:
                unmapped.append((word, "an extra positional argument; vllm serve takes one model"))
            i += 1
            continue
        takes_value = flag not in VLLM_SWITCHES and flag not in KNOWN_SWITCHES
        if value is None and takes_value and i + 1 < len(words) and not words[i + 1].startswith("--"):
            value, i = words[i + 1], i + 1
        i += 1
        shown = flag if value is None else f"{flag} {value}"
        if flag == "--model":
            model = value
        elif flag in VLLM_FLAGS and value is not None:
            key, read = VLLM_FLAGS[flag]
            try:
                serving[key] = read(value)
            except ValueError:
                unmapped.append((shown, f"'{value}' is not a value kvplan can read for {flag}"))
        elif flag in VLLM_SWITCHES:
            key, on = VLLM_SWITCHES[flag]
            serving[key] = on
        elif flag == "--dtype" and value is not None:
            if value in DTYPES:
                serving["weights_dtype"] = DTYPES[value]
            elif value != "auto":
                unmapped.append((shown, "kvplan simulates bf16, fp16, fp8 and int4 weights"))
        elif flag in ("--quantization", "-q") and value is not None:
            if value in QUANTIZED_WEIGHTS:
                serving["quantization"] = value
                serving["weights_dtype"] = QUANTIZED_WEIGHTS[value]
            else:
                unmapped.append((shown, "kvplan cannot tell the weights' precision from it: set serving.quantization "
                                        "and serving.weights_dtype (fp8 or int4) by hand"))
        elif flag == "--kv-transfer-config" and value is not None:
            lmcache = _connector(value, unmapped)
        elif flag in SET_BY_KVPLAN:
            unmapped.append((shown, SET_BY_KVPLAN[flag]))
        else:
            unmapped.append((shown, "kvplan has no setting for it (it neither simulates nor deploys it)"))
    if model is None:
        raise SpecError([Problem("--vllm", "the command names no model",
                                 fix="give it as vllm serve does: --vllm \"vllm serve meta-llama/Llama-3.1-8B ...\"")])
    entry = load_catalog().llm(model)
    if entry is None:
        raise SpecError([Problem("--vllm", f"the catalog has no model {model!r}", model,
                                 fix="use a model `kvplan catalog` lists (its Hugging Face id works too), or write "
                                     "the spec's model: as an inline architecture")])
    spec: dict[str, Any] = {"name": name, "model": entry.name, "serving": serving}
    if lmcache is not None:
        spec["lmcache"] = lmcache
    spec["workload"] = dict(PLACEHOLDER_WORKLOAD)
    return Imported(spec, unmapped)


def _after_entrypoint(words: list[str]) -> list[str]:
    """The arguments after `vllm serve` (or `python -m vllm.entrypoints.openai.api_server`)."""
    for k, word in enumerate(words):
        if word == "serve" and k > 0 and words[k - 1].endswith("vllm"):
            return words[k + 1:]
        if word == "vllm.entrypoints.openai.api_server":
            return words[k + 1:]
    return words[1:] if words and words[0].endswith("vllm") else words


def _connector(text: str, unmapped: list[tuple[str, str]]) -> dict[str, Any] | None:
    """--kv-transfer-config -> the lmcache section of its connector (None for another connector)."""
    try:
        config = json.loads(text)
    except ValueError:
        unmapped.append((f"--kv-transfer-config {text}", "not JSON"))
        return None
    connector = config.get("kv_connector") if isinstance(config, dict) else None
    extra = config.get("kv_connector_extra_config") or {} if isinstance(config, dict) else {}
    if connector == "LMCacheConnectorV1":
        return {"mode": "inprocess"}
    if connector == "LMCacheMPConnector":
        section: dict[str, Any] = {"mode": "mp"}
        if "lmcache.mp.port" in extra:
            section["port"] = int(extra["lmcache.mp.port"])
        if extra.get("lmcache.mp.save_decode_cache"):
            section["save_decode_cache"] = True
        for key in sorted(set(extra) - {"lmcache.mp.port", "lmcache.mp.save_decode_cache", "lmcache.mp.host"}):
            unmapped.append((f"kv_connector_extra_config.{key}", "kvplan has no setting for it"))
        return section
    unmapped.append((f"--kv-transfer-config {text}", f"connector {connector!r}: kvplan deploys LMCache's "
                                                      "(LMCacheConnectorV1 or LMCacheMPConnector)"))
    return None


LMCACHE_KEYS = {"chunk_size": "chunk_size", "save_decode_cache": "save_decode_cache",
                "save_unfull_chunk": "save_unfull_chunk", "min_retrieve_tokens": "min_retrieve_tokens"}
"""LMCache engine config keys -> the lmcache field of the same meaning."""

SET_BY_KVPLAN_LMCACHE = {"remote_serde": "kvplan writes naive for its Ceph tier",
                         "pre_caching_hash_algorithm": "kvplan writes builtin (the hash vLLM and LMCache share)",
                         "extra_config": "kvplan writes the S3 settings of its own Ceph tier"}


def add_lmcache_config(imported: Imported, config: dict[str, Any], source: str) -> None:
    """Fold an LMCache engine config (LMCACHE_CONFIG_FILE's YAML, sizes in GB per GPU) into the imported spec's
    lmcache section (in-process mode, as that file configures)."""
    serving = imported.spec["serving"]
    ranks = int(serving.get("tensor_parallel", 1))
    section = imported.spec.setdefault("lmcache", {"mode": "inprocess"})
    if section.get("mode") == "mp":
        imported.unmapped.append((source, "an engine config is read by in-process LMCache; the command line's "
                                          "LMCacheMPConnector runs LMCache as a server, so the file is not used"))
        return
    section["mode"] = "inprocess"
    policy = config.get("cache_policy", "LRU")
    for key, value in config.items():
        where = f"{source}: {key}"
        if key in LMCACHE_KEYS:
            section[LMCACHE_KEYS[key]] = value
        elif key in ("local_cpu", "cache_policy", "max_local_disk_size"):
            continue                                   # read with the tier they belong to
        elif key == "max_local_cpu_size":
            if config.get("local_cpu", True):
                section["ddr"] = {"size": _gib(_gb(value) * ranks), "eviction": policy}
        elif key == "local_disk":
            path = str(value)
            path = path[len("file://"):] if path.startswith("file://") else path
            size = config.get("max_local_disk_size")
            if size is None:
                imported.unmapped.append((where, "no max_local_disk_size: give lmcache.nvme.size"))
                continue
            section["nvme"] = {"size": _gib(_gb(size) * ranks), "path": path.rstrip("/") or "/", "eviction": policy}
        elif key == "remote_url":
            imported.unmapped.append((f"{where} {value}", "a remote tier is a Ceph cluster kvplan deploys or adopts: "
                                                          "add lmcache.ceph and a ceph: section by hand"))
        elif key in SET_BY_KVPLAN_LMCACHE:
            imported.unmapped.append((where, SET_BY_KVPLAN_LMCACHE[key]))
        else:
            imported.unmapped.append((where, "kvplan has no setting for it"))


def _gib(gb: float) -> str:
    """LMCache's GB are GiB (2^30 bytes); as a spec size, to the byte."""
    return f"{round(gb * 2 ** 30)}B"


def _gb(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SpecError([Problem("--lmcache", f"size {value!r} is not a number of GB", value,
                                 fix="write sizes as LMCache reads them, in GB (max_local_cpu_size: 5.0)")]) from None


SERVER_SET_BY_KVPLAN = {"--host", "--http-host", "--http-port", "--disable-metrics", "--supported-transfer-mode",
                        "--shm-name"}
"""`lmcache server` flags kvplan's deployment writes itself."""

MP_POLICIES = {server: ours for ours, server in MP_POLICY.items()}
"""LMCache MP server policy -> kvplan's name, where they differ."""


def add_lmcache_server(imported: Imported, command: str) -> None:
    """Fold an `lmcache server ...` command line (MP mode: one server per node) into the imported spec."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise SpecError([Problem("--lmcache-server", f"cannot split the command line: {exc}",
                                 fix="quote the whole command once: --lmcache-server \"lmcache server --l1-size-gb 64\"")]) from None
    if "server" in words:
        words = words[words.index("server") + 1:]
    section = imported.spec.setdefault("lmcache", {"mode": "mp"})
    if section.get("mode") != "mp":
        imported.unmapped.append(("--lmcache-server", "vLLM's --kv-transfer-config runs LMCache in-process; the server "
                                                      "is not used"))
        return
    ddr: dict[str, Any] = {}
    pairs = [(w.split("=", 1) + [None])[:2] if w.startswith("--") else (w, None) for w in words]
    k = 0
    while k < len(pairs):
        flag, value = pairs[k]
        if value is None and flag.startswith("--") and flag != "--disable-metrics" and k + 1 < len(pairs) \
                and not pairs[k + 1][0].startswith("--"):
            value, k = pairs[k + 1][0], k + 1
        k += 1
        shown = flag if value is None else f"{flag} {value}"
        if flag == "--l1-size-gb" and value is not None:
            ddr["size"] = _gib(_gb(value))
        elif flag == "--eviction-policy" and value is not None:
            ddr["eviction"] = MP_POLICIES.get(value, value)
        elif flag == "--chunk-size" and value is not None:
            section["chunk_size"] = _int(value)
        elif flag == "--port" and value is not None:
            section["port"] = int(value)
        elif flag == "--l2-adapter" and value is not None:
            _adapter(section, value, imported.unmapped)
        elif flag in SERVER_SET_BY_KVPLAN:
            imported.unmapped.append((shown, "kvplan's deployment sets it"))
        else:
            imported.unmapped.append((shown, "kvplan has no setting for it"))
    if ddr:
        section["ddr"] = {"eviction": "LRU", **ddr}


def _adapter(section: dict[str, Any], text: str, unmapped: list[tuple[str, str]]) -> None:
    try:
        adapter = json.loads(text)
    except ValueError:
        unmapped.append((f"--l2-adapter {text}", "not JSON"))
        return
    kind = adapter.get("type") if isinstance(adapter, dict) else None
    if kind == "fs_native" and "max_capacity_gb" in adapter and "base_path" in adapter:
        policy = (adapter.get("eviction") or {}).get("eviction_policy", "LRU")
        section["nvme"] = {"size": _gib(_gb(adapter["max_capacity_gb"])), "path": str(adapter["base_path"]),
                           "eviction": MP_POLICIES.get(policy, policy)}
    elif kind == "s3":
        unmapped.append((f"--l2-adapter {text}", "an S3 tier is a Ceph cluster kvplan deploys or adopts: add "
                                                 "lmcache.ceph and a ceph: section by hand"))
    else:
        unmapped.append((f"--l2-adapter {text}", f"adapter type {kind!r}: kvplan deploys fs_native (nvme) and s3 (ceph)"))


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
    env = {str(e.get("name")): str(e.get("value")) for e in entry.get("env") or [] if isinstance(e, dict)}
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
                imported.spec["lmcache"][tier]["size"] = f"{int(size[:-1]) * per_node}B"
        imported.spec["workload"] = imported.spec.pop("workload")     # keep the placeholder last
    for name in sorted(n for n in env if not n.startswith("LMCACHE_") or not lmcache.get("enabled")):
        imported.unmapped.append((f"env {name}", "kvplan has no setting for it"))
    logic = (data.get("routerSpec") or {}).get("routingLogic", "roundrobin")
    if logic == "roundrobin":
        serving["router"] = "round_robin"
    else:
        imported.unmapped.append((f"routerSpec.routingLogic {logic}", "production-stack's own router policy; kvplan "
                                  "simulates vllm-router's, of which only round robin is the same"))
    for other in names:
        if other != entry.get("name"):
            imported.unmapped.append((f"modelSpec {other}", "a spec plans one model: import it with --model-spec"))
    return imported


def _env_value(text: str) -> Any:
    """An LMCACHE_* variable's text as the value of its config key."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text
