"""Cross-field rules that mirror what the real stack accepts, checked on every Topology.

Each rule returns Problems naming the field, the value, what is allowed and a fix. Rules that
need the catalog (does the model fit in HBM, does tensor_parallel suit its KV heads) live in
`kvplan.resolve`, the one place that reads the catalog.

Eviction policies per LMCache mode (reference/lmcache-vllm.md §2): in-process LMCache offers
LRU, LFU, FIFO and MRU on LocalCPU (ddr) and LocalDisk (nvme) and never evicts from remote
storage (ceph); MP mode offers LRU, ARC, IsolatedLRU and noop on L1 (ddr) and on L2 adapters
with a capacity (nvme, ceph). Expiry by age exists only on the ceph tier, as an RGW lifecycle
rule. Anything else only the simulator can do, so it needs `simulate_only: true`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterator, cast

from ..errors import Problem
from . import disaggregation, stages
from .deployment import simulation_only

if TYPE_CHECKING:
    from .partial import Sections
    from .topology import Topology

REAL_POLICIES: dict[str, dict[str, tuple[str, ...]]] = {
    "mp": {"ddr": ("LRU", "ARC", "IsolatedLRU", "none"),
           "nvme": ("LRU", "ARC", "IsolatedLRU", "none"),
           "ceph": ("LRU", "ARC", "IsolatedLRU", "none")},
    "inprocess": {"ddr": ("LRU", "LFU", "FIFO", "MRU"),
                  "nvme": ("LRU", "LFU", "FIFO", "MRU"),
                  "ceph": ("none",)},
}
AUTH_OPTIONS = frozenset({"auth_cluster_required", "auth_service_required", "auth_client_required", "auth_supported"})
"""The Ceph options that choose how daemons and clients authenticate; `none` among their methods switches cephx off."""
TTL_TIERS = ("ceph",)
DAY = 86400.0
SIMULATE_ONLY_FIX = "or set simulate_only: true to study it in simulation only (kvplan render then refuses the spec)"


class Unparsed(Exception):
    """A rule or check read a section of a spec that did not validate (spec/partial.py; that section's own problems
    are reported by themselves)."""

    def __init__(self, section: str):
        super().__init__(f"the spec's {section} section did not validate")
        self.section = section


def check(topo: "Topology") -> list[Problem]:
    """Every rule violation in `topo`, in spec order."""
    return [p for rule in RULES for p in rule(topo)]


def check_sections(topo: "Sections") -> list[Problem]:
    """The rule violations of a spec that did not validate, among the sections that did (spec/partial.py): a rule
    stops where it reads a section that did not, keeping what it found before."""
    problems: list[Problem] = []
    for rule in RULES:
        try:
            for problem in rule(cast("Topology", topo)):
                problems.append(problem)
        except Unparsed:
            continue
    return problems


def _serving(topo: "Topology") -> Iterator[Problem]:
    s = topo.serving
    if s.block_size % 16:
        lower, upper = max(16, s.block_size // 16 * 16), (s.block_size // 16 + 1) * 16
        yield Problem("serving.block_size", "must be a positive multiple of 16 (vLLM's attention kernels work in 16-token units)",
                      s.block_size, "16, 32, 48, 64, ...", f"use {lower} or {upper}")
    if s.gpus_per_node % s.tensor_parallel:
        divisors = [d for d in range(1, s.gpus_per_node + 1) if s.gpus_per_node % d == 0]
        yield Problem("serving.tensor_parallel", f"must divide serving.gpus_per_node ({s.gpus_per_node}): "
                      "a tensor-parallel group lives on one node", s.tensor_parallel,
                      ", ".join(map(str, divisors)), "pick one of the allowed sizes or change gpus_per_node")


def _quantization(topo: "Topology") -> Iterator[Problem]:
    """What the simulation counts (serving.weights_dtype) and what vLLM loads (serving.quantization) must agree."""
    from .serving import QUANTIZATIONS
    s = topo.serving
    if s.quantization is None:
        return
    allowed = QUANTIZATIONS.get(s.weights_dtype, ())
    if s.quantization not in allowed:
        dtypes = [d for d, methods in QUANTIZATIONS.items() if s.quantization in methods]
        yield Problem("serving.quantization", f"{s.quantization} weights are {' or '.join(dtypes)}, but serving.weights_dtype "
                      f"is {s.weights_dtype}, so the simulation would count weights vLLM does not load",
                      s.quantization, ", ".join(allowed) if allowed else "none with this weights_dtype",
                      f"set serving.weights_dtype: {dtypes[0]}, or remove serving.quantization")


def _lmcache(topo: "Topology") -> Iterator[Problem]:
    lm = topo.lmcache
    if lm is None:
        return
    block = topo.serving.block_size
    if lm.chunk_size % block:
        up = (lm.chunk_size // block + 1) * block
        yield Problem("lmcache.chunk_size", f"must be a multiple of serving.block_size ({block}); LMCache maps chunks onto whole vLLM blocks",
                      lm.chunk_size, f"multiples of {block}", f"use {up}" + (f" or {lm.chunk_size // block * block}" if lm.chunk_size > block else ""))
    if lm.mode == "mp" and lm.ddr is None:
        yield Problem("lmcache.ddr", "mp mode needs a ddr tier: it is the lmcache server's L1 (--l1-size-gb)", None,
                      fix="add lmcache.ddr: {size: 64GiB, eviction: LRU}, or use mode: inprocess")
    if lm.ceph is not None and topo.ceph is None:
        yield Problem("ceph", "lmcache.ceph is set but there is no ceph section describing the cluster", None,
                      fix="add a ceph section (deploy, hosts, pool, access), or remove lmcache.ceph")
    for name in ("ddr", "nvme", "ceph"):
        tier = getattr(lm, name)
        if tier is None:
            continue
        if tier.size <= 0:
            yield Problem(f"lmcache.{name}.size", "must be greater than zero", tier.size,
                          fix=f"give the tier a capacity, or remove lmcache.{name}")
        real = REAL_POLICIES[lm.mode][name]
        if tier.eviction not in real and not topo.simulate_only:
            other = "inprocess" if lm.mode == "mp" else "mp"
            alt = f"use mode: {other}, which has {tier.eviction} on {name}; " if tier.eviction in REAL_POLICIES[other][name] else ""
            yield Problem(f"lmcache.{name}.eviction", f"{tier.eviction} is not available on the {name} tier in lmcache.mode {lm.mode}",
                          tier.eviction, ", ".join(real), f"{alt}pick an allowed policy, {SIMULATE_ONLY_FIX}")
        if tier.ttl is not None and name not in TTL_TIERS and not topo.simulate_only:
            yield Problem(f"lmcache.{name}.ttl", f"LMCache has no expiry by age on the {name} tier; only the ceph tier "
                          "expires, through an RGW lifecycle rule", tier.ttl,
                          "a ttl on lmcache.ceph only", f"remove the ttl, {SIMULATE_ONLY_FIX}")
    ceph_ttl = lm.ceph.ttl if lm.ceph is not None else None
    if ceph_ttl is not None and not topo.simulate_only:
        if topo.ceph is not None and topo.ceph.access != "s3":
            yield Problem("lmcache.ceph.ttl", "expiry is an RGW bucket lifecycle rule, which needs ceph.access: s3; "
                          "nothing expires files on a CephFS mount", ceph_ttl, "a ttl with access: s3",
                          f"use ceph.access: s3, or remove the ttl, {SIMULATE_ONLY_FIX}")
        if ceph_ttl < DAY or ceph_ttl % DAY:
            days = max(1, round(ceph_ttl / DAY))
            yield Problem("lmcache.ceph.ttl", "S3 lifecycle expiration counts whole days, so the deployed rule could not "
                          "match this ttl", ceph_ttl, "1d, 2d, 3d, ...", f"use ttl: {days}d, {SIMULATE_ONLY_FIX}")
    if (lm.mode == "inprocess" and lm.ddr is not None and lm.nvme is not None and lm.ddr.eviction != lm.nvme.eviction
            and not topo.simulate_only):
        yield Problem("lmcache.nvme.eviction", f"in-process LMCache has one cache_policy for DRAM and disk, so it must equal "
                      f"lmcache.ddr.eviction ({lm.ddr.eviction})", lm.nvme.eviction, lm.ddr.eviction,
                      f"use the same policy on both tiers, or mode: mp (per-tier policies), {SIMULATE_ONLY_FIX}")
    if lm.merging is not None and not topo.simulate_only:
        yield Problem("lmcache.merging", simulation_only("lmcache.merging"), "set", fix=f"remove lmcache.merging, {SIMULATE_ONLY_FIX}")
    if lm.mode == "mp" and not topo.simulate_only:
        for name, default in (("save_unfull_chunk", False), ("min_retrieve_tokens", 0)):
            value = getattr(lm, name)
            if value != default:
                yield Problem(f"lmcache.{name}", "the LMCache MP server has no such setting (in-process LMCache has)", value,
                              f"{default} with mode: mp", f"use mode: inprocess, or remove it, {SIMULATE_ONLY_FIX}")
    if lm.nvme is not None and lm.nvme.layout == "per_drive" and lm.mode == "mp":
        yield Problem("lmcache.nvme.layout", "the LMCache MP server writes every chunk to every L2 adapter "
                      "(--l2-store-policy default), so one fs_native adapter per drive would copy each chunk to every "
                      "drive instead of spreading them; its adapter takes one base_path", "per_drive", "raid0 with mode: mp",
                      "stripe the drives into one volume (md RAID 0 or an LVM stripe, built by you) mounted under "
                      "lmcache.nvme.path and use layout: raid0, or use mode: inprocess")
    if lm.nvme is not None and not lm.nvme.path.startswith("/"):
        yield Problem("lmcache.nvme.path", "must be an absolute directory path", lm.nvme.path, fix="e.g. /mnt/nvme0/lmcache")
    if lm.warmup is not None and lm.warmup.system_prompts:
        prefixes = topo.workload.shared_prefixes
        if prefixes is None:
            yield Problem("lmcache.warmup.system_prompts", "warm-up of shared prefixes needs workload.shared_prefixes",
                          lm.warmup.system_prompts, fix="add workload.shared_prefixes, or set system_prompts: 0")
        elif lm.warmup.system_prompts > prefixes.count:
            yield Problem("lmcache.warmup.system_prompts", f"cannot warm more prefixes than workload.shared_prefixes.count ({prefixes.count})",
                          lm.warmup.system_prompts, f"0..{prefixes.count}", f"use at most {prefixes.count}")


PACKAGES_MAX_HOSTS = 5
"""deploy: packages puts a monitor on each Ceph host; Ceph's docs advise 3 or 5 monitors for a cluster."""


def _offload(topo: "Topology") -> Iterator[Problem]:
    """vLLM's native offloading (spec/offload.py): one connector per instance, whole blocks per chunk."""
    n = topo.serving.kv_offloading
    if n is None:
        return
    if topo.lmcache is not None:
        yield Problem("serving.kv_offloading", "vLLM runs one KV connector per instance: its native offloading "
                      "(OffloadingConnector) or LMCache, not both", "set",
                      "one of serving.kv_offloading and lmcache",
                      "remove the lmcache section to offload with vLLM alone, or remove serving.kv_offloading")
    if n.size <= 0:
        yield Problem("serving.kv_offloading.size", "must be greater than zero", n.size,
                      fix="give the CPU tier a capacity, or remove serving.kv_offloading")
    block = topo.serving.block_size
    if n.block_size is not None and n.block_size % block:
        up = (n.block_size // block + 1) * block
        yield Problem("serving.kv_offloading.block_size", f"must be a multiple of serving.block_size ({block}): vLLM "
                      "offloads whole blocks", n.block_size, f"multiples of {block}", f"use {up}")


def _ceph(topo: "Topology") -> Iterator[Problem]:
    c = topo.ceph
    if c is None:
        return
    if c.pool.min_size > c.pool.size:
        yield Problem("ceph.pool.min_size", f"cannot exceed pool.size ({c.pool.size})", c.pool.min_size,
                      f"1..{c.pool.size}", f"use min_size: {max(1, c.pool.size - 1)}")
    domains = c.hosts if c.failure_domain == "host" else c.hosts * c.osds_per_host
    if c.pool.size > domains:
        unit = "hosts" if c.failure_domain == "host" else "OSDs"
        yield Problem("ceph.pool.size", f"{c.pool.size} replicas need {c.pool.size} {unit} (failure domain {c.failure_domain}), "
                      f"but the cluster has {domains}; the pool would never become clean", c.pool.size,
                      f"1..{domains}", f"add hosts (ceph.hosts: {c.pool.size}) or lower pool.size to {domains}")
    if c.pool.pg_num & (c.pool.pg_num - 1):
        low = 1 << (c.pool.pg_num.bit_length() - 1)
        yield Problem("ceph.pool.pg_num", "must be a power of two", c.pool.pg_num, "1, 2, 4, ..., 65536",
                      f"use {low} or {low * 2}")
    if c.deploy == "packages" and c.hosts > PACKAGES_MAX_HOSTS and not topo.simulate_only:
        yield Problem("ceph.hosts", f"deploy: packages runs a monitor on every host, and a quorum of more than "
                      f"{PACKAGES_MAX_HOSTS} monitors slows every cluster map update", c.hosts,
                      f"1..{PACKAGES_MAX_HOSTS} with deploy: packages", f"use deploy: cephadm for {c.hosts} hosts, or "
                      "deploy: external for a cluster you already run")
    if c.access == "cephfs" and not topo.simulate_only:
        yield Problem("ceph.access", "kvplan does not deploy CephFS (no filesystem, MDS or client mount is created), so "
                      "LMCache would write to a local directory named like the mount", c.access, "s3",
                      f"use access: s3 (RGW, which kvplan deploys), {SIMULATE_ONLY_FIX}")
    elif c.cephfs_mount != type(c).model_fields["cephfs_mount"].default and not topo.simulate_only:
        yield Problem("ceph.cephfs_mount", simulation_only("ceph.cephfs_mount"), c.cephfs_mount,
                      fix=f"remove it, {SIMULATE_ONLY_FIX}")
    for key in sorted(AUTH_OPTIONS & set(c.options)):
        methods = re.split(r"[;,= \t]+", str(c.options[key]).lower())      # Ceph's list separators
        if "none" in methods and not c.allow_no_auth:
            yield Problem(f"ceph.options.{key}", "switches cephx authentication off: anyone who reaches the cluster's "
                          "network could read and write every pool, the KV cache's prompts included", c.options[key],
                          "cephx", f"remove ceph.options.{key}, or set ceph.allow_no_auth: true if the cluster is "
                          "meant to run without authentication")
    if c.osd_devices and len(c.osd_devices) != c.osds_per_host:
        yield Problem("ceph.osd_devices", f"lists {len(c.osd_devices)} devices but osds_per_host is {c.osds_per_host}",
                      c.osd_devices, f"{c.osds_per_host} device paths", f"list one device per OSD, or set osds_per_host: {len(c.osd_devices)}")


def _workload(topo: "Topology") -> Iterator[Problem]:
    w = topo.workload
    if w.kind == "trace" and w.trace is None:
        yield Problem("workload.trace", "kind trace needs a trace section", None,
                      fix="add workload.trace: {path: <file.jsonl>}")
    if w.kind != "trace" and w.trace is not None:
        yield Problem("workload.trace", f"a trace is only replayed with kind: trace (kind is {w.kind})", None,
                      fix="set kind: trace, or remove workload.trace")
    if w.kind not in ("trace", "replay") and w.stages is None and w.requests is None and w.duration is None:
        yield Problem("workload", "a synthetic workload needs an end: requests or duration", None,
                      fix="add workload.requests: 1000 or workload.duration: 10min")
    yield from warm_start(w)
    yield from _benchmark_shapes(topo)


WARM_KINDS = ("chat", "codegen", "rag")
"""The kinds a warm start (kvplan.sim.warm) can draw more of: the synthetic ones."""


def can_start_warm(w) -> bool:
    """Whether the workload `w` could start warm: a synthetic kind, one open-loop arrival process."""
    return w.kind in WARM_KINDS and stages.stages_of(w) is None


def warm_start(w) -> Iterator[Problem]:
    """workload.warm_start draws a warm-up from one open-loop arrival process of a synthetic kind."""
    if not w.warm_start:
        return
    if w.kind not in WARM_KINDS:
        yield Problem("workload.warm_start", f"a warm start draws more of a synthetic workload, and a {w.kind} "
                      "workload replays fixed requests: a warm-up of them would be the run itself", w.kind,
                      allowed=", ".join(WARM_KINDS),
                      fix="remove workload.warm_start (or --warm), or use a chat, codegen or rag workload shaped "
                          "like these requests")
    elif stages.stages_of(w) is not None:
        yield Problem("workload.warm_start", "a warm start is drawn from one open-loop arrival process; this "
                      "workload has load stages, a closed loop or rescaled_poisson arrivals", True,
                      fix="remove workload.warm_start (or --warm), or simulate one poisson, gamma or constant "
                          "arrival process")


OWN_SECTION = {"shared_prefix": "shared_prefix", "replay": "replay"}
"""The benchmark kinds and the workload section each one takes its requests from."""

NOT_FOR = {"shared_prefix": ("sessions", "shared_prefixes", "prompt", "output"),
           "replay": ("arrivals", "sessions", "shared_prefixes", "prompt", "output")}
"""The workload fields each benchmark kind has no use for: its own section (or its log) says what they would."""


def _benchmark_shapes(topo: "Topology") -> Iterator[Problem]:
    """kind shared_prefix takes its prompts from workload.shared_prefix, kind replay its requests from the log that
    workload.replay names: each needs its section, the section means nothing to another kind, and a field the kind
    does not read is refused rather than ignored."""
    w = topo.workload
    for kind, section in OWN_SECTION.items():
        given = getattr(w, section) is not None
        if w.kind == kind and not given:
            example = {"shared_prefix": "{num_groups: 10, num_prompts_per_group: 10}",
                       "replay": "{path: <log.jsonl>}"}[kind]
            yield Problem(f"workload.{section}", f"kind {kind} needs a {section} section", None,
                          fix=f"add workload.{section}: {example}")
        elif w.kind != kind and given:
            yield Problem(f"workload.{section}", f"workload.{section} is only read with kind: {kind} (kind is "
                          f"{w.kind})", None, fix=f"set kind: {kind}, or remove workload.{section}")
    where = {"shared_prefix": "workload.shared_prefix", "replay": "the log workload.replay names"}.get(w.kind)
    for name in NOT_FOR.get(w.kind, ()):
        if name in w.model_fields_set:
            yield Problem(f"workload.{name}", f"kind {w.kind} does not read workload.{name}: its requests come from "
                          f"{where}", None, fix=f"remove workload.{name}")


RULES = (_serving, _quantization, _lmcache, _offload, _ceph, _workload, stages.problems, disaggregation.problems)
