"""A `vllm serve ...` command line as a spec: the model, every serving flag kvplan simulates and deploys
(`VLLM_FLAGS`, `VLLM_SWITCHES`, --dtype, --quantization), VLLM_CPU_KVCACHE_SPACE, the LMCache connector of
--kv-transfer-config, and vLLM's native offloading (--kv-offloading-size / --kv-offloading-backend, or the
OffloadingConnector); every other flag listed with the reason."""

from __future__ import annotations

import json
import shlex
from typing import Any, Callable

from ..deploy.vllm_command import VLLM_DTYPE
from ..errors import Problem, SpecError
from ..spec.serving import QUANTIZATIONS
from ..units import exact_size
from .imported import PLACEHOLDER_WORKLOAD, Imported, read_int

DTYPES = {**{vllm: ours for ours, vllm in VLLM_DTYPE.items()}, "half": "fp16", "float": "fp32"}
"""vLLM --dtype -> serving.weights_dtype, the inverse of what the deployment passes (auto is left to the model's
own)."""

QUANTIZED_WEIGHTS = {method: dtype for dtype, methods in QUANTIZATIONS.items() for method in methods
                     if sum(method in ms for ms in QUANTIZATIONS.values()) == 1}
"""vLLM --quantization -> the one weight precision it serves (compressed-tensors serves either, so it does not say)."""


VLLM_FLAGS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--tensor-parallel-size": ("tensor_parallel", read_int), "-tp": ("tensor_parallel", read_int),
    "--block-size": ("block_size", read_int),
    "--gpu-memory-utilization": ("gpu_memory_utilization", float),
    "--kv-cache-memory-bytes": ("kv_cache_memory", lambda v: exact_size(read_int(v))),
    "--max-model-len": ("max_model_len", read_int),
    "--max-num-seqs": ("max_num_seqs", read_int),
    "--max-num-batched-tokens": ("max_num_batched_tokens", read_int),
    "--kv-cache-dtype": ("kv_cache_dtype", str),
    "--host": ("host", str), "--port": ("port", int),
}
"""vLLM flags that take a value -> the serving field it sets and how the value is read."""

VLLM_SWITCHES = {"--enable-prefix-caching": ("prefix_caching", True), "--no-enable-prefix-caching": ("prefix_caching", False),
                 "--enable-chunked-prefill": ("chunked_prefill", True),
                 "--no-enable-chunked-prefill": ("chunked_prefill", False),
                 "--async-scheduling": ("async_scheduling", True), "--no-async-scheduling": ("async_scheduling", False)}
"""vLLM's boolean flags kvplan has a setting for."""

SET_BY_KVPLAN = {"--served-model-name": "kvplan serves the model under its catalog name (the spec's model)",
                 "--enforce-eager": "kvplan sets it on CPU devices and serves GPUs with CUDA graphs"}
"""Flags kvplan's deployment writes itself: listed, not imported."""

ENV_SET_BY_KVPLAN = {name: "kvplan's deployment sets it" for name in (
    "PYTHONHASHSEED", "LMCACHE_CONFIG_FILE", "LMCACHE_TRACK_USAGE", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK",
    "VLLM_CPU_NUM_OF_RESERVED_CPU")}
"""Environment variables before the command that kvplan's deployment writes itself (VLLM_CPU_KVCACHE_SPACE is
imported: the KV space of a CPU device)."""

API_KEY_ENV = "VLLM_API_KEY"
"""The variable vLLM reads its key from (as --api-key): what an imported serving.api_key_env names."""

API_KEY_REASON = (f"a reference, not the key: serving.api_key_env: {API_KEY_ENV} names the variable the deploy reads "
                  f"the key from; export {API_KEY_ENV}=<the key> where kvplan deploy runs (production-stack: "
                  "create the Secret the render names)")
"""Why the API key is carried as a reference only (it is listed with the flag, never with its value)."""

KNOWN_SWITCHES = {"--enforce-eager", "--trust-remote-code", "--disable-log-requests", "--disable-log-stats",
                  "--enable-log-requests", "--disable-frontend-multiprocessing", "--no-enable-log-requests"}
"""Boolean flags without a value that kvplan has no setting for (so the next word is not read as their value)."""


def from_vllm_command(command: str, gpu: str, name: str = "imported") -> Imported:
    """The spec of the deployment `command` (`vllm serve MODEL --flag value ...`) starts on `gpu`."""
    from ..catalog import load_catalog

    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise SpecError([Problem("--vllm", f"cannot split the command line: {exc}",
                                 fix="quote the whole command once: --vllm \"vllm serve MODEL --flag value\"")]) from None
    serving: dict[str, Any] = {"gpu": gpu}
    lmcache: dict[str, Any] | None = None
    unmapped: list[tuple[str, str]] = []
    approximated: list[tuple[str, str]] = []     # the API key: carried as a reference, never as its value
    offloading: dict[str, str] = {}              # --kv-offloading-size / --kv-offloading-backend, read after the loop
    while words and "=" in words[0] and not words[0].startswith("-"):      # NAME=value before the command
        variable, value = words.pop(0).split("=", 1)
        if variable == "VLLM_CPU_KVCACHE_SPACE":
            serving["kv_cache_memory"] = f"{value}GiB"
        elif variable == API_KEY_ENV:
            serving["api_key_env"] = API_KEY_ENV
            approximated.append((variable, API_KEY_REASON))                # the name, never the value
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
        elif flag == "--api-key":
            while i < len(words) and not words[i].startswith("-"):      # vLLM takes one key or more
                i += 1
            serving["api_key_env"] = API_KEY_ENV
            approximated.append((flag, API_KEY_REASON))                    # the flag, never the key
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
                unmapped.append((shown, "kvplan simulates fp32, bf16, fp16, fp8 and int4 weights"))
        elif flag in ("--quantization", "-q") and value is not None:
            if value in QUANTIZED_WEIGHTS:
                serving["quantization"] = value
                serving["weights_dtype"] = QUANTIZED_WEIGHTS[value]
            else:
                unmapped.append((shown, "kvplan cannot tell the weights' precision from it: set serving.quantization "
                                        "and serving.weights_dtype (fp8 or int4) by hand"))
        elif flag == "--kv-transfer-config" and value is not None:
            native = _offloading_connector(value, unmapped)
            if native is not None:
                serving["kv_offloading"] = native
            else:
                lmcache = _connector(value, unmapped)
        elif flag in ("--kv-offloading-size", "--kv-offloading-backend") and value is not None:
            offloading[flag] = value
        elif flag in SET_BY_KVPLAN:
            unmapped.append((shown, SET_BY_KVPLAN[flag]))
        else:
            unmapped.append((shown, "kvplan has no setting for it (it neither simulates nor deploys it)"))
    lmcache = _kv_offloading_flags(offloading, serving, lmcache, unmapped)
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
    return Imported(spec, unmapped, approximated)


def _after_entrypoint(words: list[str]) -> list[str]:
    """The arguments after `vllm serve` (or `python -m vllm.entrypoints.openai.api_server`)."""
    for k, word in enumerate(words):
        if word == "serve" and k > 0 and words[k - 1].endswith("vllm"):
            return words[k + 1:]
        if word == "vllm.entrypoints.openai.api_server":
            return words[k + 1:]
    return words[1:] if words and words[0].endswith("vllm") else words


NATIVE_EXTRA = {"cpu_bytes_to_use": "size", "block_size": "block_size", "eviction_policy": "eviction"}
"""The OffloadingConnector's extra config keys kvplan reads -> serving.kv_offloading's keys."""


def _kv_offloading_flags(flags: dict[str, str], serving: dict[str, Any], lmcache: dict[str, Any] | None,
                         unmapped: list[tuple[str, str]]) -> dict[str, Any] | None:
    """--kv-offloading-size GiB [--kv-offloading-backend native|lmcache], as vLLM 0.32's config/vllm.py reads them
    (`_post_init_kv_transfer_config`): native -> serving.kv_offloading of those GiB, lmcache -> LMCache in MP mode
    (whose server, not vLLM, holds the bytes). Returns the lmcache section."""
    size, backend = flags.get("--kv-offloading-size"), flags.get("--kv-offloading-backend", "native")
    if size is None:
        if "--kv-offloading-backend" in flags:
            unmapped.append((f"--kv-offloading-backend {backend}", "vLLM turns offloading on only with "
                                                                    "--kv-offloading-size"))
        return lmcache
    shown = f"--kv-offloading-size {size}"
    try:
        nbytes = int(float(size) * 2 ** 30)
    except ValueError:
        unmapped.append((shown, f"'{size}' is not a size in GiB"))
        return lmcache
    if backend == "native":
        serving.setdefault("kv_offloading", {"size": exact_size(nbytes)})
        return lmcache
    if backend == "lmcache":
        unmapped.append((shown, "with --kv-offloading-backend lmcache vLLM passes no size: the LMCache server's "
                                "L1 (lmcache.ddr.size) holds the bytes; set it by hand"))
        return lmcache or {"mode": "mp"}
    unmapped.append((f"--kv-offloading-backend {backend}", "vLLM 0.32 offers native and lmcache"))
    return lmcache


def _offloading_connector(text: str, unmapped: list[tuple[str, str]]) -> dict[str, Any] | None:
    """--kv-transfer-config with vLLM's OffloadingConnector -> serving.kv_offloading (None for another connector)."""
    try:
        config = json.loads(text)
    except ValueError:
        return None                              # _connector says it is not JSON
    if not isinstance(config, dict) or config.get("kv_connector") != "OffloadingConnector":
        return None
    extra = config.get("kv_connector_extra_config") or {}
    section: dict[str, Any] = {NATIVE_EXTRA[key]: extra[key] for key in NATIVE_EXTRA if key in extra}
    if "eviction" in section:
        section["eviction"] = str(section["eviction"]).upper()
    if "size" in section:
        section["size"] = exact_size(int(float(section["size"])))
    for key in sorted(set(extra) - set(NATIVE_EXTRA)):
        unmapped.append((f"kv_connector_extra_config.{key}", "kvplan has no setting for it"))
    return section


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
