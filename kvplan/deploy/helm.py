"""production-stack: the spec's vLLM + LMCache settings as Helm values for vllm-project/production-stack.

For teams that run the vLLM layer on Kubernetes, as the design note recommends, `kvplan render
--format production-stack` writes the values of the chart's `servingEngineSpec.modelSpec` and
`routerSpec` that deploy the same engine the simulator ran:

- vLLM: the chart's `vllmConfig` fields (TP, max model length, max sequences, GPU memory
  utilization, prefix caching, chunked prefill, dtype) and, in `extraArgs`, the flags it has no
  field for (block size, batched tokens, KV-cache dtype, quantization, KV bytes), exactly as the
  Ansible path passes them (`stack.vllm_args`);
- LMCache in-process (LMCacheConnectorV1, the only mode the chart runs): its CPU buffer and disk
  sizes from the same config the Ansible path writes (`stack.inprocess_config`), the rest as
  LMCACHE_* variables (chunk size, disk path, policy, save/retrieve settings); the nvme tier's
  directory is the node's (a hostPath volume mounted at lmcache.nvme.path);
- one replica per vLLM instance, `requestGPU` = TP; round-robin routing, or, for serving.router: llm_d, no
  production-stack router (`enableRouter: false`) and llm-d's EndpointPickerConfig beside the values
  (kvplan.deploy.llmd), for llm-d's gateway to route to the pods.

What the chart cannot express is refused with the reason, as the Ansible render refuses
simulation-only settings: LMCache's MP server, a Ceph tier or cluster (the chart's remote tier is
its own cache server, which kvplan does not simulate), the warm-up, a CPU device, and router
policies other than round robin (the chart's router is production-stack's own, whose session
and prefix routing is not vllm-router's, which kvplan simulates). The pod's CPU and memory
requests are the user's (`--request-cpu`, `--request-memory`); a memory request below the
LMCache CPU buffer it must hold is refused.

The values are checked in the tests against the chart's own values.schema.json (a copy with its
source in tests/fixtures/production-stack/).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import Problem, SpecError
from ..resolve import Resolved
from . import llmd
from .stack import inprocess_config, vllm_args

IMAGE = {"repository": "lmcache/vllm-openai", "tag": "latest"}
"""The chart's default engine image (vLLM with LMCache); pin a tag that carries the vLLM and LMCache versions
your kvplan checks its configs against (docs/deploy.md)."""

CHART_FLAGS = {"tensorParallelSize": "--tensor-parallel-size", "maxModelLen": "--max-model-len",
               "maxNumSeqs": "--max-num-seqs", "gpuMemoryUtilization": "--gpu-memory-utilization", "dtype": "--dtype"}
"""The chart's vllmConfig fields -> the vLLM flag its deployment template passes for each (the other flags go to
extraArgs); `kvplan import --helm-values` reads them back through the same table."""
_FIELDS = {flag: name for name, flag in CHART_FLAGS.items()}

LMCACHE_ENV = {"chunk_size": "LMCACHE_CHUNK_SIZE", "local_disk": "LMCACHE_LOCAL_DISK",
               "cache_policy": "LMCACHE_CACHE_POLICY", "save_decode_cache": "LMCACHE_SAVE_DECODE_CACHE",
               "save_unfull_chunk": "LMCACHE_SAVE_UNFULL_CHUNK", "min_retrieve_tokens": "LMCACHE_MIN_RETRIEVE_TOKENS",
               "pre_caching_hash_algorithm": "LMCACHE_PRE_CACHING_HASH_ALGORITHM",
               "local_disk_path_sharding": "LMCACHE_LOCAL_DISK_PATH_SHARDING"}
"""LMCache engine config keys the chart has no field for -> the LMCACHE_* variable LMCache reads them from."""


def refusals(r: Resolved) -> list[Problem]:
    """What this spec sets that production-stack cannot deploy, each with why and what to do instead."""
    out = [Problem(path, f"simulation-only: {why}", fix="remove the setting to deploy this spec")
           for path, why in r.simulation_only]
    if r.device.kind == "cpu":
        out.append(Problem("serving.gpu", "production-stack schedules GPU pods; kvplan deploys a CPU device with "
                           "Ansible", r.device.name, fix="render --format ansible (the default)"))
    lm = r.lmcache
    if lm is not None and lm.mode == "mp":
        out.append(Problem("lmcache.mode", "production-stack runs LMCache inside vLLM (LMCacheConnectorV1); it has no "
                           "LMCache server", "mp", fix="use lmcache.mode: inprocess, or deploy with Ansible"))
    if lm is not None and lm.tier("ceph") is not None:
        out.append(Problem("lmcache.ceph", "production-stack's remote tier is its own cache server, which kvplan does "
                           "not simulate; it deploys no Ceph", fix="drop the ceph tier, or deploy with Ansible"))
    elif r.ceph is not None:
        out.append(Problem("ceph", "production-stack deploys no Ceph cluster", fix="drop the ceph section, or deploy "
                           "with Ansible"))
    if lm is not None and lm.mode == "inprocess" and lm.tier("ddr") is None:
        out.append(Problem("lmcache.ddr", "production-stack turns LMCache's CPU cache on whenever it has a CPU buffer, "
                           "which in-process LMCache always needs; a spec without a ddr tier cannot be expressed",
                           fix="add lmcache.ddr, or deploy with Ansible"))
    if lm is not None and (lm.warmup_system_prompts or lm.warmup_template_tokens):
        out.append(Problem("lmcache.warmup", "production-stack has no warm-up job", fix="drop lmcache.warmup, or deploy "
                           "with Ansible"))
    out += llmd.refusals(r)
    if r.instances > 1 and r.router not in ("round_robin", "llm_d"):
        out.append(Problem("serving.router", f"production-stack's router is its own, not vllm-router: its session and "
                           f"prefix routing differ from the {r.router} policy kvplan simulates", r.router,
                           fix="use serving.router: round_robin or llm_d, or deploy with Ansible"))
    return out


def values(r: Resolved, request_cpu: int, request_memory: str) -> dict[str, Any]:
    """The Helm values, or a SpecError listing every refusal."""
    problems = refusals(r)
    cfg = inprocess_config(r) if r.lmcache is not None else None
    buffer_gib = cfg["max_local_cpu_size"] * r.tensor_parallel if cfg else 0.0
    if r.kv_offloading is not None:          # vLLM's native CPU tier lives in the pod's memory too
        buffer_gib = r.kv_offloading.capacity_bytes / 2 ** 30
    if _gib(request_memory) < buffer_gib:
        held = (f"LMCache's CPU buffer: {buffer_gib:.1f} GiB ({cfg['max_local_cpu_size']:.1f} GiB on each of "
                f"{r.tensor_parallel} GPU(s))" if cfg else f"vLLM's native CPU offloading tier: {buffer_gib:.1f} GiB")
        problems.append(Problem("--request-memory", f"the pod must hold {held}",
                                request_memory, fix=f"request at least {buffer_gib:.1f}Gi plus what vLLM needs"))
    if problems:
        raise SpecError(problems)
    config: dict[str, Any] = {}
    extra: list[str] = []
    args = vllm_args(r)
    k = 0
    while k < len(args):
        flag = args[k]
        value = args[k + 1] if k + 1 < len(args) and not args[k + 1].startswith("--") else None
        k += 2 if value is not None else 1
        if flag in _FIELDS:
            config[_FIELDS[flag]] = {"--gpu-memory-utilization": float, "--dtype": str}.get(flag, int)(value)
        elif flag in ("--enable-prefix-caching", "--no-enable-prefix-caching"):
            config["enablePrefixCaching"] = flag == "--enable-prefix-caching"
        elif flag in ("--enable-chunked-prefill", "--no-enable-chunked-prefill"):
            config["enableChunkedPrefill"] = flag == "--enable-chunked-prefill"
        elif flag == "--served-model-name" or (flag == "--kv-transfer-config" and r.kv_offloading is None):
            continue                # the chart names the model by modelURL and writes LMCache's connector itself;
                                    # vLLM's native OffloadingConnector it does not know, so it goes in extraArgs
        else:
            extra += [flag] + ([value] if value is not None else [])
    if extra:
        config["extraArgs"] = extra
    spec: dict[str, Any] = {"name": _k8s_name(r.name), **IMAGE, "modelURL": r.model_path, "replicaCount": r.instances,
                            "requestCPU": request_cpu, "requestMemory": request_memory, "requestGPU": r.tensor_parallel,
                            "vllmConfig": config}
    if cfg is not None:
        lmcache: dict[str, Any] = {"enabled": True, "cpuOffloadingBufferSize": repr(float(cfg["max_local_cpu_size"]))}
        if "max_local_disk_size" in cfg:
            lmcache["diskOffloadingBufferSize"] = repr(float(cfg["max_local_disk_size"]))
        spec["lmcacheConfig"] = lmcache
        spec["env"] = [{"name": LMCACHE_ENV[key], "value": _text(cfg[key])} for key in LMCACHE_ENV if key in cfg]
        if r.lmcache.tier("nvme") is not None:      # the node's NVMe directories, mounted where LMCache writes
            paths = r.lmcache.nvme_paths
            names = ["lmcache-nvme"] if len(paths) == 1 else [f"lmcache-nvme{i}" for i in range(len(paths))]
            spec["extraVolumes"] = [{"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
                                    for name, path in zip(names, paths)]
            spec["extraVolumeMounts"] = [{"name": name, "mountPath": path} for name, path in zip(names, paths)]
    router = {"enableRouter": False} if r.router == "llm_d" else {"routingLogic": "roundrobin"}
    return {"servingEngineSpec": {"modelSpec": [spec]}, "routerSpec": router}


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _k8s_name(name: str) -> str:
    """The spec's name as a Kubernetes object name (lower case, digits and '-')."""
    return re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")[:40] or "kvplan"


def _gib(quantity: str) -> float:
    """A Kubernetes memory quantity (16Gi, 20G, 512Mi) in GiB."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*(Ki|Mi|Gi|Ti|K|M|G|T)?\s*", quantity)
    if m is None:
        raise SpecError([Problem("--request-memory", f"{quantity!r} is not a Kubernetes memory quantity", quantity,
                                 fix="write it as Kubernetes does, e.g. 64Gi")])
    factor = {None: 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "K": 1e3, "M": 1e6, "G": 1e9,
              "T": 1e12}[m.group(2)]
    return float(m.group(1)) * factor / 2 ** 30
