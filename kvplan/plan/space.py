"""The planner's search space: every combination of what a buyer chooses, grouped by hardware.

`variants` varies a spec (as a mapping) along the planner's axes: the accelerator, tensor
parallelism and instances; ddr and nvme per node on a ladder around the spec's sizes; the Ceph
tier off, on, or at 2 replicas; one eviction policy for every LMCache tier among those its mode
really has; with vLLM's native offloading instead of LMCache, its CPU tier on the same size ladder with LRU
and ARC (vLLM 0.32's policies); where the plan considers them, prefill:decode splits of the same accelerators with
the same tiers (kvplan.plan.pools). `hardware_groups` gathers them by hardware choice (accelerator, TP, instances; each pool's for a split), each
with its accelerators' hourly price: a lower bound on the cost of every combination in it, known
before any of them is validated, so the planner enumerates groups cheapest first. `Specs` validates
the combinations, each distinct section once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from pydantic import ValidationError

from ..catalog import Catalog
from ..cost import gpu_hour_usd
from ..errors import SpecError
from ..spec import Topology, from_mapping
from ..spec.ceph import Ceph
from ..spec.lmcache import LMCache
from ..spec.rules import REAL_POLICIES
from ..spec.serving import Serving
from ..units import parse_size
from . import pools
from .pools import Considered

TP_LADDER = (1, 2, 4, 8)
SIZE_LADDER = (0.25, 1.0, 4.0)
"""Multiples of the spec's ddr and nvme sizes that are tried."""
SKIPPED_POLICIES = ("IsolatedLRU",)


def variants(base: dict, topo: Topology, catalog: Catalog, gpus: Sequence[str] | None,
              max_instances: int, which: Considered | None = None) -> list[dict]:
    """Every combination of the planner's axes, as spec mappings, the spec's own choices first: aggregated, then
    (as `which` says; kvplan.plan.pools) each prefill:decode split of the same accelerators and tiers."""
    which = which or Considered(True, False, "")
    s = base["serving"]
    device = next(d for k, d in catalog.devices.items() if k.lower() == s["gpu"].lower())
    priced = {p.name.lower() for p in catalog.prices.gpu_hour}
    if gpus:
        names = list(gpus)
    else:
        # the alternatives the catalog can price and time (an accelerator without an efficiency block is
        # planned only when named: its spec must bring serving.step_model)
        names = [device.name] + [d.name for d in catalog.devices.values()
                                 if d.kind == device.kind and d.name != device.name and d.efficiency is not None
                                 and (d.name.lower() in priced or topo.cost.gpu_hour is not None)]
    tps = [t for t in TP_LADDER if s["gpus_per_node"] % t == 0]
    tps = [s["tensor_parallel"]] + [t for t in tps if t != s["tensor_parallel"]]

    lm = base.get("lmcache")
    tier_options: list[dict | None] = [lm]
    if lm is not None:
        mode = lm["mode"]
        ddrs = [None] if lm.get("ddr") is None else [_scaled(lm["ddr"], f) for f in SIZE_LADDER]
        if mode == "inprocess" and lm.get("ddr") is not None:
            ddrs.append(None)
        nvmes = [None] if lm.get("nvme") is None else [_scaled(lm["nvme"], f) for f in SIZE_LADDER] + [None]
        spec_policy = (lm.get("ddr") or lm.get("nvme") or {}).get("eviction", "LRU")
        policies = [spec_policy] + [p for p in REAL_POLICIES[mode]["ddr"] if p != spec_policy and p not in SKIPPED_POLICIES]
        cephs = [lm.get("ceph")] + ([None] if lm.get("ceph") is not None else [])
        tier_options = []
        for ddr in _ordered(ddrs, lm.get("ddr")):
            for nvme in _ordered(nvmes, lm.get("nvme")):
                for ceph in cephs:
                    if ddr is None and nvme is None and ceph is None:
                        continue
                    for policy in policies:
                        new = {**lm, "ddr": _policy(ddr, policy), "nvme": _policy(nvme, policy)}
                        new["ceph"] = _policy(ceph, policy) if ceph is not None and mode == "mp" else ceph
                        tier_options.append(new)
    ceph_options = _ceph_options(base.get("ceph"), lm)
    offload_options = _native_options(s.get("kv_offloading"))

    def with_tiers(serving: dict, tiers: dict | None, cluster: dict | None) -> dict:
        spec = {**base, "serving": serving}
        if tiers is not None:
            spec["lmcache"] = tiers
        spec["ceph"] = cluster if cluster is not None else (base.get("ceph") if tiers is None else None)
        return spec

    def tier_choices():
        for tiers in tier_options:
            for cluster in (ceph_options if tiers is not None and tiers.get("ceph") is not None else [None]):
                yield tiers, cluster

    out = []
    aggregated = pools.aggregated_serving(s)
    for name in names if which.aggregated else []:
        for tp in tps:
            for tiers, cluster in tier_choices():
                for offload in offload_options:
                    for n in range(1, max_instances + 1):
                        serving = {**aggregated, "gpu": name, "tensor_parallel": tp, "instances": n}
                        if offload is not None:
                            serving["kv_offloading"] = offload
                        out.append(with_tiers(serving, tiers, cluster))
    for name in names if which.disaggregated else []:
        for split in pools.splits(tps, max_instances):
            serving = pools.disaggregated_serving(s, name, split)
            for tiers, cluster in tier_choices():
                spec = with_tiers(serving, tiers, cluster)
                out.append({**spec, "simulate_only": base.get("simulate_only", False) or pools.simulation_only(spec)})
    return out


def _native_options(native: dict | None) -> list[dict | None]:
    """vLLM's native CPU tier on the size ladder with each of its policies, the spec's own first."""
    if native is None:
        return [None]
    own = str(native.get("eviction", "LRU")).upper()
    size = parse_size(native["size"])
    factors = sorted(SIZE_LADDER, key=lambda f: f != 1.0)
    return [{**native, "size": max(1, int(size * f)), "eviction": p}
            for f in factors for p in [own] + [q for q in ("LRU", "ARC") if q != own]]


def _ordered(options: list, first) -> list:
    """`options` with the spec's own value first (the ladder's x 1 entry)."""
    return sorted(options, key=lambda o: 0 if (o is not None and first is not None and o["size"] == first["size"]) else 1)


def _scaled(tier: dict, factor: float) -> dict:
    return {**tier, "size": max(1, int(tier["size"] * factor))}


def _policy(tier: dict | None, policy: str) -> dict | None:
    return None if tier is None else {**tier, "eviction": policy}


def _ceph_options(cluster: dict | None, lm: dict | None) -> list[dict]:
    """The spec's cluster at its pool size, and at 2 replicas; an owned cluster's OSDs scale with replicas."""
    if cluster is None:
        return []
    size = cluster["pool"]["size"]
    out = [cluster]
    if size > 2 and not cluster.get("osd_devices"):
        pool = {**cluster["pool"], "size": 2, "min_size": min(cluster["pool"]["min_size"], 1)}
        new = {**cluster, "pool": pool}
        if cluster["deploy"] != "external":
            new["osds_per_host"] = max(1, math.ceil(cluster["osds_per_host"] * 2 / size))
        out.append(new)
    return out


@dataclass
class HardwareGroup:
    """The combinations on one hardware choice (accelerator, TP, instances): their accelerators' hourly
    price is a lower bound on the cost of each, known before any of them is validated."""

    hardware: tuple
    gpu_usd_per_hour: float
    variants: list[tuple[int, dict]]


def hardware_groups(variants: list[dict], topo: Topology, catalog: Catalog) -> list[HardwareGroup]:
    by_hardware: dict[tuple, HardwareGroup] = {}
    for index, spec in enumerate(variants):
        s = spec["serving"]
        d = s.get("disaggregation")
        if d is None:
            key: tuple = (s["gpu"].lower(), s["tensor_parallel"], s["instances"])
            gpus = s["tensor_parallel"] * s["instances"]
        else:
            p, dec = d["prefill"], d["decode"]
            key = (s["gpu"].lower(), p["tensor_parallel"], p["instances"], dec["tensor_parallel"], dec["instances"])
            gpus = p["tensor_parallel"] * p["instances"] + dec["tensor_parallel"] * dec["instances"]
        group = by_hardware.get(key)
        if group is None:
            group = by_hardware[key] = HardwareGroup(key, gpu_hour_usd(topo, key[0], catalog) * gpus, [])
        group.variants.append((index, spec))
    return sorted(by_hardware.values(), key=lambda g: (g.gpu_usd_per_hour, g.variants[0][0]))


class Specs:
    """The combinations as Topology objects, each distinct section validated once.

    Combinations share every section but serving, lmcache and ceph, and those take few values
    (thousands of combinations, a few hundred sections). Pydantic takes an already validated
    section as it is, so a combination is validated as its spec-wide rules only. A section that
    does not validate sends the combination through `from_mapping` whole, for its errors' paths."""

    SECTIONS = {"serving": Serving, "lmcache": LMCache, "ceph": Ceph}

    def __init__(self, base: Topology):
        self.shared = {k: getattr(base, k) for k in Topology.model_fields if k not in self.SECTIONS}
        self.validated: dict[tuple[str, str], object] = {}

    def topology(self, spec: dict) -> Topology:
        try:
            sections = {k: self._section(k, spec.get(k)) for k in self.SECTIONS}
            return Topology.model_validate({**self.shared, **sections})
        except (ValidationError, SpecError):
            return from_mapping(spec)          # the same problems, worded as validate words them

    def _section(self, name: str, value: dict | None):
        if value is None:
            return None
        key = (name, repr(value))
        found = self.validated.get(key)
        if found is None:
            found = self.validated[key] = self.SECTIONS[name].model_validate(value)
        return found
