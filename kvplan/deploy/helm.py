"""production-stack: the spec's vLLM + LMCache settings as Helm values for vllm-project/production-stack.

For teams that run the vLLM layer on Kubernetes, as the design note recommends, `kvplan render
--format production-stack` writes the values of the chart's `servingEngineSpec.modelSpec` and
`routerSpec` that deploy the same engine the simulator ran:

- vLLM: the chart's `vllmConfig` fields (TP, max model length, max sequences, GPU memory
  utilization, prefix caching, chunked prefill, dtype) and, in `extraArgs`, the flags it has no
  field for (block size, batched tokens, KV-cache dtype, quantization, KV bytes), exactly as the
  Ansible path passes them (`vllm_command.vllm_args`);
- LMCache in-process (LMCacheConnectorV1, the only mode the chart runs): its CPU buffer and disk
  sizes from the same config the Ansible path writes (`stack.inprocess_config`), the rest as
  LMCACHE_* variables (chunk size, disk path, policy, save/retrieve settings). The chart reads
  the CPU buffer through Sprig's `int` (LMCACHE_LOCAL_CPU only when `int` of it is above 0, and
  `int` of a string such as '40.5' is 0), so it is written as whole GB per GPU worker, rounded
  down, and `notes` says by how much; the disk size, which the chart passes on as written, stays
  exact. The nvme tier's directory is the node's (a hostPath volume mounted at lmcache.nvme.path),
  each pod writing under its own subdirectory, named for the pod (subPathExpr), so that replicas
  on one node never share LMCache's files;
- the API key (serving.api_key_env): the chart's `servingEngineSpec.vllmApiKey`, a reference to a
  Kubernetes Secret `<name>-vllm-api-key` whose key is the variable's name (`api_key_secret`);
- one replica per vLLM instance, `requestGPU` = TP; round-robin routing, or, for serving.router: llm_d, no
  production-stack router (`enableRouter: false`) and llm-d's EndpointPickerConfig beside the values
  (kvplan.deploy.llmd), for llm-d's gateway to route to the pods.

What the chart cannot express is refused with the reason, as the Ansible render refuses
simulation-only settings: LMCache's MP server, a Ceph tier or cluster (the chart's remote tier is
its own cache server, which kvplan does not simulate), the warm-up, a CPU device, disaggregated
serving (DISAGGREGATION_REFUSED: the chart's router picks decode pods prefix-aware first), and router
policies other than round robin (the chart's router is production-stack's own, whose session
and prefix routing is not vllm-router's, which kvplan simulates). The pod's CPU and memory
requests are the user's (`--request-cpu`, `--request-memory`); a memory request below the
LMCache CPU buffer it must hold is refused.

The values are checked in the tests against the chart's own values.schema.json (a copy with its
source in tests/fixtures/production-stack/).
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import Problem, SpecError
from ..resolve import Resolved
from . import llmd
from .stack import inprocess_config
from .vllm_command import vllm_args

LMCACHE_RELEASE = "0.5.6"
"""The LMCache release whose configuration kvplan writes and checks (stack.LMCACHE_ENGINE_KEYS: the 0.5.6 wheel's
LMCacheEngineConfig)."""

IMAGE = {"repository": "lmcache/vllm-openai", "tag": f"v{LMCACHE_RELEASE}"}
"""The engine image, pinned to that release: LMCache's release workflow (LMCache/LMCache .github/workflows/publish.yml,
job publish-image) builds lmcache/vllm-openai from docker/Dockerfile at each release and pushes it tagged with the
release's git tag (v0.5.6) besides `latest`, which moves with every release. The vLLM inside is the one that
Dockerfile installs at that tag."""

CHART_FLAGS = {"tensorParallelSize": "--tensor-parallel-size", "maxModelLen": "--max-model-len",
               "maxNumSeqs": "--max-num-seqs", "gpuMemoryUtilization": "--gpu-memory-utilization", "dtype": "--dtype"}
"""The chart's vllmConfig fields -> the vLLM flag its deployment template passes for each (the other flags go to
extraArgs); `kvplan import --helm-values` reads them back through the same table."""
_FIELDS = {flag: name for name, flag in CHART_FLAGS.items()}

POD_NAME = "KVPLAN_POD_NAME"
"""The variable the pod's own name is given in (a fieldRef), which names its subdirectory of the nvme tier."""

LMCACHE_ENV = {"chunk_size": "LMCACHE_CHUNK_SIZE", "local_disk": "LMCACHE_LOCAL_DISK",
               "cache_policy": "LMCACHE_CACHE_POLICY", "save_decode_cache": "LMCACHE_SAVE_DECODE_CACHE",
               "save_unfull_chunk": "LMCACHE_SAVE_UNFULL_CHUNK", "min_retrieve_tokens": "LMCACHE_MIN_RETRIEVE_TOKENS",
               "pre_caching_hash_algorithm": "LMCACHE_PRE_CACHING_HASH_ALGORITHM",
               "local_disk_path_sharding": "LMCACHE_LOCAL_DISK_PATH_SHARDING"}
"""LMCache engine config keys the chart has no field for -> the LMCACHE_* variable LMCache reads them from."""


CHART = "production-stack chart vllm-stack 0.1.12 (commit a6c01db), helm/templates/deployment-vllm-multi.yaml"
"""The chart the values are written for and checked against (tests/fixtures/production-stack/)."""


def cpu_buffer_gb(r: Resolved) -> int:
    """cpuOffloadingBufferSize: LMCache's CPU buffer per GPU worker in whole GB (GiB), rounded down, as the chart
    compares it (`gt (int ...) 0`)."""
    return math.floor(inprocess_config(r)["max_local_cpu_size"])


def api_key_secret(r: Resolved) -> dict[str, str] | None:
    """The chart's vllmApiKey for serving.api_key_env: the Kubernetes Secret `<name>-vllm-api-key`, under the key
    named as the variable (the deploy's user creates it from that variable: `kubectl create secret`)."""
    if r.api_key_env is None:
        return None
    return {"secretName": f"{_k8s_name(r.name)}-vllm-api-key", "secretKey": r.api_key_env}


def notes(r: Resolved) -> list[str]:
    """What the values mean that the spec does not say: a tier's size is a node's in the spec and per GPU worker in
    the values, and the CPU buffer is whole GB."""
    lm = r.lmcache
    if lm is None or lm.mode != "inprocess":
        return []
    cfg, out = inprocess_config(r), []
    per_node, workers = r.instances_per_node, r.instances_per_node * r.tensor_parallel
    for tier, key in (("ddr", "max_local_cpu_size"), ("nvme", "max_local_disk_size")):
        if lm.tier(tier) is None:
            continue
        exact = cfg[key]
        out.append(f"lmcache.{tier}.size {_gb(exact * workers)} GiB is a node's ({per_node} instance"
                   f"{'s' if per_node != 1 else ''} of TP {r.tensor_parallel} on a node of {r.gpus_per_node} GPUs, as "
                   f"kvplan simulates and Ansible deploys): {_gb(exact * r.tensor_parallel)} GiB per pod, "
                   f"{_gb(exact)} GiB per GPU worker; Kubernetes places the pods, so a node holds "
                   f"{_gb(exact * workers)} GiB only with {per_node} of them on it")
    written = cpu_buffer_gb(r)
    exact = cfg["max_local_cpu_size"]
    if written != exact:
        whole = written * workers
        out.append(f"cpuOffloadingBufferSize {written}: {_gb(exact)} GiB per GPU worker rounded down to whole GB, "
                   f"as the chart reads it (int), {_gb(exact - written)} GiB per worker less than simulated; "
                   f"lmcache.ddr.size: {whole}GiB deploys exactly what is simulated")
    if lm.tier("nvme") is not None:
        out.append(f"each pod keeps LMCache's disk files under {', '.join(lm.nvme_paths)}/<pod name> on its node: a "
                   "replaced pod's directory stays there (LMCache does not read it again); remove it by hand")
    return out


def _gb(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


DISAGGREGATION_REFUSED = (
    "production-stack's router picks a disaggregated request's decode pod otherwise than kvplan simulates: its "
    "disaggregated_prefill_orchestrated logic (src/vllm_router/routers/routing_logic.py, "
    "DisaggregatedPrefillOrchestratedRouter.select_decode_endpoint) tries kv-aware, then prefix-aware routing and "
    "falls back to round robin only without a prefix match, and its disaggregated_prefill logic drives LMCache's PD "
    "mode (lmcacheConfig kvRole, enableNixl), which kvplan does not deploy; the chart's routerSpec has no field for "
    "the prefill and decode model labels either")
"""Why render --format production-stack refuses serving.disaggregation."""


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
    if lm is not None and lm.mode == "inprocess" and lm.tier("ddr") is not None and cpu_buffer_gb(r) < 1:
        share = inprocess_config(r)["max_local_cpu_size"]
        out.append(Problem("lmcache.ddr.size", f"production-stack turns LMCache's CPU cache on only for a buffer of at "
                           f"least 1 GB per GPU worker (it compares int of cpuOffloadingBufferSize with 0); this spec "
                           f"gives each worker {_gb(share)} GiB", fix=f"raise lmcache.ddr.size to at least "
                           f"{r.instances_per_node * r.tensor_parallel}GiB, or deploy with Ansible"))
    if lm is not None and lm.mode == "inprocess" and lm.tier("ddr") is None:
        out.append(Problem("lmcache.ddr", "production-stack turns LMCache's CPU cache on whenever it has a CPU buffer, "
                           "which in-process LMCache always needs; a spec without a ddr tier cannot be expressed",
                           fix="add lmcache.ddr, or deploy with Ansible"))
    if lm is not None and (lm.warmup_system_prompts or lm.warmup_template_tokens):
        out.append(Problem("lmcache.warmup", "production-stack has no warm-up job", fix="drop lmcache.warmup, or deploy "
                           "with Ansible"))
    if r.disaggregation is not None:
        out.append(Problem("serving.disaggregation", DISAGGREGATION_REFUSED, "set",
                           fix="render --format ansible (the default), which deploys the pools behind vllm-router's "
                               "P/D mode with --policy round_robin, as kvplan simulates them"))
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
    buffer_gib = math.floor(cfg["max_local_cpu_size"]) * r.tensor_parallel if cfg else 0.0
    if r.kv_offloading is not None:          # vLLM's native CPU tier lives in the pod's memory too
        buffer_gib = r.kv_offloading.capacity_bytes / 2 ** 30
    if _gib(request_memory) < buffer_gib:
        held = (f"LMCache's CPU buffer: {buffer_gib:.1f} GiB ({math.floor(cfg['max_local_cpu_size'])} GiB on each of "
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
        # whole GB: the chart turns the CPU cache on only where `int` of it is above 0 (CHART, lines 336-342)
        lmcache: dict[str, Any] = {"enabled": True, "cpuOffloadingBufferSize": cpu_buffer_gb(r)}
        if "max_local_disk_size" in cfg:          # passed on as written (lines 344-347): exact
            lmcache["diskOffloadingBufferSize"] = repr(float(cfg["max_local_disk_size"]))
        spec["lmcacheConfig"] = lmcache
        spec["env"] = [{"name": LMCACHE_ENV[key], "value": _text(cfg[key])} for key in LMCACHE_ENV if key in cfg]
        if r.lmcache.tier("nvme") is not None:      # the node's NVMe directories, mounted where LMCache writes
            paths = r.lmcache.nvme_paths
            names = ["lmcache-nvme"] if len(paths) == 1 else [f"lmcache-nvme{i}" for i in range(len(paths))]
            spec["extraVolumes"] = [{"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
                                    for name, path in zip(names, paths)]
            # each pod its own subdirectory of the node's: replicas on one node never share LMCache's files
            spec["env"].append({"name": POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
            spec["extraVolumeMounts"] = [{"name": name, "mountPath": path, "subPathExpr": f"$({POD_NAME})"}
                                         for name, path in zip(names, paths)]
    router = {"enableRouter": False} if r.router == "llm_d" else {"routingLogic": "roundrobin"}
    engine: dict[str, Any] = {"modelSpec": [spec]}
    if r.api_key_env is not None:
        engine["vllmApiKey"] = api_key_secret(r)
    return {"servingEngineSpec": engine, "routerSpec": router}


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
