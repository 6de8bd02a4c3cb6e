"""Diagnoses of vLLM's native CPU offloading (serving.kv_offloading), the engine beside LMCache.

- `native-tier-below-working-set`: beyond what the HBM prefix cache holds, the CPU tier of each instance
  holds less than the capacity at which it gets 90 % of the reuse it could ever get (`kvplan size`'s curve
  of the tier, replayed with its own policy). vLLM asks the tier only for the blocks after its HBM hit, so
  recently used blocks are in both and the first HBM-sized part of the tier adds little. Fix: the HBM's
  KV bytes plus the 90 % capacity, per instance, as serving.kv_offloading.size.
"""

from __future__ import annotations

import math

from ..units import fmt_bytes
from .case import Case
from .finding import Change, Finding, Fix
from .hit_ratio import CLEARLY, MIN_REUSE, REACH

GIB = 2 ** 30


def _size(nbytes: float) -> str:
    """A per-instance size in whole GiB (whole MiB below one GiB)."""
    return f"{math.ceil(nbytes / 2 ** 20)}MiB" if nbytes < GIB else f"{math.ceil(nbytes / GIB)}GiB"


def native_tier_below_working_set(case: Case) -> list[Finding]:
    r, sizing = case.resolved, case.sizing
    n = r.kv_offloading
    if n is None or sizing is None:
        return []
    view = sizing.tier("ddr")
    if view is None or view.configured is None or view.max_hit_ratio < MIN_REUSE:
        return []
    target = next(t for t in view.targets if t.share == REACH)
    conf = view.configured
    got = conf.simulated_hit_ratio if conf.simulated_hit_ratio is not None else conf.hit_ratio
    hbm = r.hbm_blocks * r.block_bytes if r.prefix_caching else 0    # one instance's HBM prefix cache
    beyond = conf.capacity_bytes - hbm * r.instances
    if beyond >= CLEARLY * target.capacity_bytes or (beyond > 0 and got >= REACH / 100 * view.max_hit_ratio):
        return []
    size = _size(hbm + target.capacity_bytes / r.instances)
    evidence = {"capacity_bytes": conf.capacity_bytes, "hbm_bytes": hbm * r.instances, "working_set_bytes": view.working_set_bytes,
                "hit_ratio_at_capacity": got, "max_hit_ratio": view.max_hit_ratio,
                f"capacity_for_{REACH}pct_bytes": target.capacity_bytes}
    return [Finding(
        code="native-tier-below-working-set", area="hit ratio", severity="problem",
        title="vLLM's native CPU offloading tier is smaller than this workload's reuse needs",
        symptom=f"the CPU tier hits {got:.1%} of prompt tokens on its own, of the {view.max_hit_ratio:.1%} its reuse "
                f"could give",
        cause=f"its {conf.caches} tier(s) hold {fmt_bytes(conf.capacity_bytes)} together while the workload touches "
              f"{fmt_bytes(view.working_set_bytes)} of chunks; {REACH} % of its reuse needs "
              f"{fmt_bytes(target.capacity_bytes)}, beyond the {fmt_bytes(hbm)} of each instance's HBM prefix cache that "
              f"vLLM asks first (serving.kv_offloading.size {size} per instance)",
        evidence=evidence,
        fixes=[Fix(summary=f"size the CPU tier for {REACH} % of its reuse",
                   changes=[Change(path="serving.kv_offloading.size", value=size)], metric="ddr_served_share")])]


RULES = [native_tier_below_working_set]
