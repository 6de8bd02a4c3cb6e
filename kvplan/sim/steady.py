"""Steady state: whether a run was long enough for each KV tier to fill, and what that means.

A tier's hit ratio depends on how full it is. A 24 h-TTL Ceph tier or a multi-TB NVMe tier
starts empty in a simulation and, over a 10-minute window, may never fill: its hits are those of
a cold cache, lower than what it gives once it holds a day of traffic. A tier is in steady state
once it is full (it evicts) or, with a ttl, once it has held entries for a whole ttl (expiry then
balances writes). For every tier that did not get there, `judge` says how full it got, and how
long this workload takes to bring it to steady state at the rate the run wrote new bytes into
it, so the result states which tiers were judged warm and which cold.

A run that started warm (kvplan.sim.warm: `workload.warm_start`) had its tiers filled by a warm-up of the same
workload before its first request; a tier the warm-up brought to steady state is judged so from the start, and the
note of a cold tier says how to start warm.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..units import fmt_duration

FULL = 0.9
"""A tier that held this share of its capacity (or evicted) is full: LRU lists are near capacity."""


LONGER = "workload.requests or workload.duration"
"""What makes a run of one arrival process longer, as a cold tier's note names it."""
WARM_HINT = "or start it warm (workload.warm_start: true, or kvplan simulate --warm)"
"""How a cold tier's note says to start warm (kvplan.sim.warm)."""


class WarmTier(BaseModel):
    """How a warm start's warm-up (kvplan.sim.warm) left one tier before the run's first request."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tier: str
    requests: int
    """Warm-up requests fed before the tier was warm (or before the warm-up stopped)."""
    bytes_written: int
    """Bytes the warm-up wrote into the tier, all its caches together."""
    used_bytes: int
    """Bytes the tier held when the run started."""
    capacity_bytes: int
    span_s: float
    """Simulated seconds of warm-up traffic before the run (first warm-up arrival to the last)."""
    warm: bool
    """The warm-up brought the tier to steady state (`reason` says how)."""
    reason: str


class TierState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tier: str
    steady: bool
    """The tier reached steady state in the run: it filled (or evicted), or it held entries for a whole ttl."""
    peak_fill: float
    """Largest share of its capacity the tier held."""
    time_to_steady_s: float | None
    """How long this workload takes to bring the tier to steady state from empty, at the run's net write
    rate (bytes still held at the end per second), capped by the ttl; None when it wrote nothing."""
    note: str


def judge(tier: str, capacity_bytes: int, peak_used_bytes: int, final_used_bytes: int, evictions: int,
          ttl_s: float | None, duration_s: float, longer: str = LONGER,
          warm: WarmTier | None = None, warmable: bool = False) -> TierState:
    """The steady-state verdict of one tier of a finished run; `longer` names what makes the run longer; `warm`
    is how a warm start left the tier (None: the run started cold); `warmable` says that the workload could start
    warm (a cold tier's note then says how)."""
    fill = peak_used_bytes / capacity_bytes if capacity_bytes else 0.0
    rate = final_used_bytes / duration_s if duration_s > 0 else 0.0
    fill_time = capacity_bytes / rate if rate > 0 else None
    to_steady = min(x for x in (fill_time, ttl_s) if x is not None) if (fill_time or ttl_s) else None
    if evictions > 0 or fill >= FULL:
        return TierState(tier=tier, steady=True, peak_fill=fill, time_to_steady_s=to_steady,
                         note=f"{tier} filled ({fill:.0%} of its capacity at its peak): its figures are a warm tier's")
    if warm is not None and warm.warm:
        return TierState(tier=tier, steady=True, peak_fill=fill, time_to_steady_s=to_steady,
                         note=f"{tier} started warm ({warm.requests:,} warm-up requests: {warm.reason})")
    if ttl_s is not None and duration_s >= ttl_s:
        return TierState(tier=tier, steady=True, peak_fill=fill, time_to_steady_s=to_steady,
                         note=f"{tier} held entries for its whole ttl ({fmt_duration(ttl_s)}): expiry balances writes")
    if to_steady is None:
        note = f"{tier} held nothing at the end of the run: no figure about it says how it behaves warm"
    else:
        note = (f"{tier} reached {fill:.0%} of its capacity in the {fmt_duration(duration_s)} run; this traffic "
                f"takes about {fmt_duration(to_steady)} to bring it to steady state"
                + (" (its ttl)" if ttl_s is not None and to_steady == ttl_s else "")
                + f", so its figures here are a cold tier's, not its steady state; simulate longer ({longer})"
                + (f" (the warm start left it {warm.reason})" if warm is not None
                   else f" {WARM_HINT}" if warmable else ""))
    return TierState(tier=tier, steady=False, peak_fill=fill, time_to_steady_s=to_steady, note=note)
