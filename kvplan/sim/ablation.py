"""Ablation: the same workload with the cache hierarchy built up one tier at a time.

Variants, in the spirit of the design note's "PyTorch / vLLM / vLLM + LMCache + Ceph" table:

  no reuse     vLLM without prefix caching and without LMCache: every prompt token computed
  hbm only     vLLM's prefix cache, no LMCache
  + ddr        LMCache with the spec's ddr tier only
  + nvme       ... and its nvme tier
  + ceph       ... and the Ceph tier (the spec as written)

With vLLM's native offloading instead of LMCache, the last row is `+ ddr (vLLM native)`, the spec as written.

A variant the spec has no tier for is left out (its row would repeat the one above). Every
variant keeps the spec's mode, sizes and policies, so each row differs from the one above by
exactly one tier.

Over several seeds (`kvplan simulate SPEC --ablate --seeds N`) every variant runs the same seeds,
so each step's change can be tested seed by seed (`kvplan.sweep.confidence.compare`, the paired
difference and its 95 % interval): a change whose interval holds 0 is *within noise*, the tier
is not shown to matter for that metric. With one seed the changes are not tested.
"""

from __future__ import annotations

from ..resolve import resolve
from ..spec import Topology
from .result import SimResult
from .run import run


def variants(topo: Topology) -> list[tuple[str, Topology]]:
    serving = topo.serving.model_copy(update={"kv_offloading": None})      # HBM alone
    out = [("no reuse", topo.model_copy(update={"lmcache": None, "ceph": None,
                                                "serving": serving.model_copy(update={"prefix_caching": False})})),
           ("hbm only", topo.model_copy(update={"lmcache": None, "ceph": None, "serving": serving}))]
    if topo.serving.kv_offloading is not None:
        out.append(("+ ddr (vLLM native)", topo))
    lm = topo.lmcache
    if lm is None:
        return out
    kept: dict = {"nvme": None, "ceph": None}
    for tier in ("ddr", "nvme", "ceph"):
        if getattr(lm, tier) is None:
            continue
        kept[tier] = getattr(lm, tier)
        ceph = topo.ceph if kept["ceph"] is not None else None
        out.append((f"+ {tier}", topo.model_copy(update={"lmcache": lm.model_copy(update=kept), "ceph": ceph})))
    return out


def ablate(topo: Topology, seed: int | None = None, progress=None) -> list[tuple[str, SimResult]]:
    """Simulate every variant with the same workload and seed."""
    return [(name, runs[0]) for name, runs in ablate_seeds(topo, [seed], progress)]


def ablate_seeds(topo: Topology, seeds: list[int | None], progress=None) -> list[tuple[str, list[SimResult]]]:
    """Simulate every variant with each of the same seeds (None: the spec's), runs in seed order."""
    return [(name, [run(resolve(variant), seed=seed, progress=progress) for seed in seeds])
            for name, variant in variants(topo)]
