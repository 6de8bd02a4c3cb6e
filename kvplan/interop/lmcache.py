"""LMCache's own configs folded into an imported spec: an engine config (LMCACHE_CONFIG_FILE's YAML, in-process
mode, sizes in GB per GPU) and an `lmcache server ...` command line (MP mode: the L1 tier, the fs_native L2 adapter,
chunk size, port and policies)."""

from __future__ import annotations

import json
import math
import shlex
from typing import Any

from ..deploy.stack import MP_POLICY
from ..errors import Problem, SpecError, did_you_mean
from ..resolved_tiers import MP_EVICTION_RATIO, MP_EVICTION_WATERMARK
from ..units import exact_size
from .imported import Imported, read_int

LMCACHE_KEYS = {"chunk_size": "chunk_size", "save_decode_cache": "save_decode_cache",
                "save_unfull_chunk": "save_unfull_chunk", "min_retrieve_tokens": "min_retrieve_tokens"}
"""LMCache engine config keys -> the lmcache field of the same meaning."""

SET_BY_KVPLAN_LMCACHE = {"remote_serde": "kvplan writes naive for its Ceph tier",
                         "pre_caching_hash_algorithm": "kvplan writes builtin (the hash vLLM and LMCache share)",
                         "extra_config": "kvplan writes the S3 settings of its own Ceph tier"}


READ_WITH_A_TIER = ("local_cpu", "max_local_cpu_size", "local_disk", "max_local_disk_size", "cache_policy", "remote_url")
"""LMCache engine config keys kvplan reads into a tier (ddr, nvme) or names as one it cannot import (remote_url)."""

OTHER_LMCACHE_KEYS = ("enable_blending", "blend_recompute_ratio", "blend_min_tokens", "blend_special_str", "enable_p2p",
                      "lookup_url", "distributed_url", "enable_controller", "lmcache_instance_id", "controller_url",
                      "lmcache_worker_port", "error_handling", "use_layerwise", "enable_pd", "pd_role",
                      "internal_api_server_enabled", "numa_mode", "blocking_timeout_secs", "external_lookup_client")
"""Keys of LMCache's engine config that kvplan has no setting for (listed as not imported when given)."""

KNOWN_LMCACHE_KEYS = (*LMCACHE_KEYS, *READ_WITH_A_TIER, *SET_BY_KVPLAN_LMCACHE, *OTHER_LMCACHE_KEYS)


def an_lmcache_config_at_all(config: Any, source: str) -> dict[str, Any]:
    """`config`, refused unless it is a mapping with at least one key LMCache reads (or close to one): any other
    file given as --lmcache (a password file reads as one key per line) would have its lines listed as keys not
    imported. It is described by its kind and number of keys, never quoted."""
    if not isinstance(config, dict):
        kind = "an empty file" if config is None else f"a YAML {type(config).__name__}"
        raise SpecError([Problem("--lmcache", f"{source} is not an LMCache config: an LMCache config is a YAML mapping "
                                 f"of settings, and this is {kind}",
                                 fix="give the file LMCACHE_CONFIG_FILE names (chunk_size: 256, local_cpu: true, ...)")])
    if any(isinstance(key, str) and (key in KNOWN_LMCACHE_KEYS or did_you_mean(key, KNOWN_LMCACHE_KEYS))
           for key in config):
        return config
    keys = "its one top-level key is not" if len(config) == 1 else f"none of its {len(config)} top-level keys is"
    raise SpecError([Problem("--lmcache", f"{source} is not an LMCache config: {keys} a setting LMCache reads "
                             "(chunk_size, local_cpu, max_local_cpu_size, ...) or close to one",
                             fix="give the file LMCACHE_CONFIG_FILE names")])


def add_lmcache_config(imported: Imported, config: dict[str, Any], source: str) -> None:
    """Fold an LMCache engine config (LMCACHE_CONFIG_FILE's YAML, sizes in GB per GPU) into the imported spec's
    lmcache section (in-process mode, as that file configures). A file that is not one is refused unquoted
    (an_lmcache_config_at_all)."""
    config = an_lmcache_config_at_all(config, source)
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
    """LMCache's GB are GiB (2^30 bytes); as a spec size, to the byte, in the largest unit that holds it exactly
    (200 -> '200GiB', 0.5 -> '512MiB')."""
    return exact_size(round(gb * 2 ** 30))


def _gb(value: Any, where: str = "--lmcache", fix: str = "write sizes as LMCache reads them, in GB "
                                                             "(max_local_cpu_size: 5.0)") -> float:
    try:
        gb = float(value)
    except (TypeError, ValueError, OverflowError):
        gb = math.nan
    if isinstance(value, bool) or not math.isfinite(gb) or gb < 0:
        raise SpecError([Problem(where, f"size {value!r} is not a number of GB", value, "a finite number, 0 or more",
                                 fix=fix)]) from None
    return gb


def _server_int(flag: str, value: str, low: int, high: int, example: str) -> int:
    """An integer flag of `lmcache server`, within what the spec field it maps to allows."""
    try:
        number = read_int(value)
    except (ValueError, OverflowError):
        number = None
    if number is None or not low <= number <= high:
        raise SpecError([Problem("--lmcache-server", f"{flag} {value!r} is not a whole number from {low} to {high}",
                                 value, f"{low} to {high}", fix=f"write it as LMCache reads it, e.g. {flag} {example}")])
    return number


SERVER_SET_BY_KVPLAN = {"--host", "--http-host", "--http-port", "--disable-metrics", "--supported-transfer-mode",
                        "--shm-name"}
"""`lmcache server` flags kvplan's deployment writes itself (its metrics are always on: `observe` reads them)."""

BATCH_EVICTION = {"--eviction-trigger-watermark": MP_EVICTION_WATERMARK, "--eviction-ratio": MP_EVICTION_RATIO}
"""`lmcache server` flags kvplan writes with the value it simulates (LMCache's default), which no spec field changes."""

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
            ddr["size"] = _gib(_gb(value, "--lmcache-server", "write --l1-size-gb as LMCache reads it, in GB: "
                                                              "--l1-size-gb 64"))
        elif flag == "--eviction-policy" and value is not None:
            ddr["eviction"] = MP_POLICIES.get(value, value)
        elif flag == "--chunk-size" and value is not None:
            section["chunk_size"] = _server_int(flag, value, 1, 2 ** 31 - 1, "256")
        elif flag == "--port" and value is not None:
            section["port"] = _server_int(flag, value, 1, 65535, "5555")
        elif flag == "--l2-adapter" and value is not None:
            _adapter(section, value, imported.unmapped)
        elif flag in SERVER_SET_BY_KVPLAN:
            imported.unmapped.append((shown, "kvplan's deployment sets it"))
        elif flag in BATCH_EVICTION:
            imported.unmapped.append((shown, _batch_eviction(flag, value)))
        else:
            imported.unmapped.append((shown, "kvplan has no setting for it"))
    if ddr:
        section["ddr"] = {"eviction": "LRU", **ddr}


def _batch_eviction(flag: str, value: str | None) -> str:
    ours = BATCH_EVICTION[flag]
    try:
        same = value is not None and float(value) == ours
    except ValueError:
        same = False
    if same:
        return "kvplan's deployment sets it, to the same value"
    return f"kvplan simulates and deploys LMCache's default, {flag} {ours:g}; it has no setting for another value"


def _adapter(section: dict[str, Any], text: str, unmapped: list[tuple[str, str]]) -> None:
    try:
        adapter = json.loads(text)
    except ValueError:
        unmapped.append((f"--l2-adapter {text}", "not JSON"))
        return
    kind = adapter.get("type") if isinstance(adapter, dict) else None
    if kind == "fs_native" and "max_capacity_gb" in adapter and "base_path" in adapter:
        eviction = adapter.get("eviction") or {}
        policy = eviction.get("eviction_policy", "LRU") if isinstance(eviction, dict) else eviction
        size = _gb(adapter["max_capacity_gb"], "--lmcache-server", "write the adapter's max_capacity_gb in GB, e.g. 100")
        section["nvme"] = {"size": _gib(size), "path": str(adapter["base_path"]),
                           "eviction": MP_POLICIES.get(policy, policy) if isinstance(policy, str) else policy}
    elif kind == "s3":
        unmapped.append((f"--l2-adapter {text}", "an S3 tier is a Ceph cluster kvplan deploys or adopts: add "
                                                 "lmcache.ceph and a ceph: section by hand"))
    else:
        unmapped.append((f"--l2-adapter {text}", f"adapter type {kind!r}: kvplan deploys fs_native (nvme) and s3 (ceph)"))
