"""What the planner knows before simulating anything: the workload at the planned rate, and bounds on every candidate.

`at_rate` sets the workload's arrival rate so that it offers the rate asked for, in requests per second (with
sessions it sets arrivals.session_rate, new sessions per second, corrected on the generated requests) and measures
it once:
`WorkloadStats`, the same for every candidate. From those, `floors` bounds what no simulation of a
candidate can beat (a roofline on engine time, latency floors from the never-cached prompt
tokens), and `behaviour` writes a candidate with every tier that never fills as "holds
everything", so that candidates that must run the same compare equal (docs/planning.md, "Planner").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..resolve import Resolved, resolve
from ..spec import Topology, from_mapping
from ..spec.slo import Slo

if TYPE_CHECKING:
    from ..sweep.cache import RunCache

NO_EVICTION_FILL = 0.8
"""A cache whose whole working set is below this share of it never evicts (MP's L1 starts at 80 %)."""
SESSION_RATE_STEPS = 4
"""Corrections of a session workload's arrival rate until its requests arrive within 2 % of the rate asked for."""


@dataclass
class WorkloadStats:
    """What every candidate's bounds need from the planned workload (the same for all of them)."""

    requests: int
    span: float
    """Seconds from the start to the last arrival."""
    compulsory: np.ndarray
    """Per request: prompt tokens no earlier request (or warm-up) had, which it must compute itself (>= 1)."""
    output: np.ndarray
    chunk_keys: int
    """Distinct full LMCache chunks of all prompts (the KV working set, in chunks)."""


def workload_stats(r: Resolved, seed: int) -> WorkloadStats:
    from ..sim import stages
    from ..sim import workload as wl

    reqs = stages.requests(r, seed)
    seen: set[int] = set()
    chunks: set[int] = set()
    chunk = r.lmcache.chunk_size if r.lmcache else None
    for w in wl.warmup(r, seed):
        seen.update(w.content.keys(r.block_size, w.prompt_tokens))
        if chunk:
            chunks.update(w.content.keys(chunk, w.prompt_tokens))
    compulsory = np.empty(len(reqs), dtype=np.int64)
    stored = (lambda q: q.prompt_tokens + q.output_tokens) if r.lmcache and r.lmcache.save_decode_cache \
        else (lambda q: q.prompt_tokens)
    for i, req in enumerate(reqs):
        keys = req.content.keys(r.block_size, req.prompt_tokens)
        hit = next((j for j, k in enumerate(keys) if k not in seen), len(keys))
        compulsory[i] = max(1, req.prompt_tokens - hit * r.block_size)
        # vLLM also caches full blocks of generated tokens: a later turn may hit them
        seen.update(req.content.keys(r.block_size, req.prompt_tokens + req.output_tokens))
        if chunk:
            chunks.update(req.content.keys(chunk, stored(req)))
    return WorkloadStats(requests=len(reqs), span=reqs[-1].arrival if reqs else 0.0, compulsory=compulsory,
                         output=np.fromiter((q.output_tokens for q in reqs), np.int64, len(reqs)), chunk_keys=len(chunks))


def at_rate(topo: Topology, rate: float, slo: Slo, seed: int,
            cache: "RunCache | None" = None) -> tuple[dict, float, WorkloadStats]:
    """The spec as a mapping with the planned SLO and an arrival rate that offers `rate` requests/s.

    With sessions, arrivals.session_rate (new sessions/s) is set so that the generated requests arrive
    at `rate` on average over the run (measured on the workload itself, so it is exact for the seed).
    The rate found and the workload's stats are kept in `cache` (generating the workload a few times
    was most of a repeated plan's time)."""
    base = topo.model_dump(mode="json")
    base["slo"] = slo.model_dump(mode="json", exclude_none=True)
    knob = session_knob(topo)
    base["workload"]["arrivals"][knob] = rate
    key = hashlib.sha256(json.dumps([topo.spec_hash(), rate, base["slo"], seed]).encode()).hexdigest()[:24]
    kept = cache.get_workload(key) if cache is not None else None
    try:
        stats = WorkloadStats(requests=kept["requests"], span=kept["span"], output=np.array(kept["output"], np.int64),
                              compulsory=np.array(kept["compulsory"], np.int64), chunk_keys=kept["chunk_keys"])
        offered, base["workload"]["arrivals"][knob] = float(kept["offered"]), float(kept["arrival_rate"])
        return base, offered, stats
    except (KeyError, TypeError, ValueError):  # none kept, or a file from elsewhere: measure it again
        pass
    from ..sim import stages
    from ..sim import workload as wl

    def offered_by(r: Resolved) -> float:
        reqs = stages.requests(r, seed)
        span = reqs[-1].arrival if reqs else 0.0
        return len(reqs) / span if span > 0 else rate

    r = resolve(from_mapping(base))
    for _ in range(SESSION_RATE_STEPS if topo.workload.sessions is not None else 0):
        offered = offered_by(r)
        if abs(offered / rate - 1) < 0.02:
            break
        # requests/s grow with sessions/s; 4 significant digits, so the winner's spec reads '4.692sessions/s'
        base["workload"]["arrivals"][knob] = float(f"{base['workload']['arrivals'][knob] * rate / offered:.4g}")
        r = resolve(from_mapping(base))
    stats = workload_stats(r, seed)
    offered = stats.requests / stats.span if stats.span > 0 else rate
    if cache is not None:
        cache.put_workload(key, {"arrival_rate": base["workload"]["arrivals"][knob], "offered": offered,
                                 "requests": stats.requests, "span": stats.span, "chunk_keys": stats.chunk_keys,
                                 "compulsory": stats.compulsory.tolist(), "output": stats.output.tolist()})
    return base, offered, stats


def session_knob(topo: Topology) -> str:
    """The arrivals field that sets an open loop's load: session_rate (new sessions/s) with sessions, else rate."""
    return "session_rate" if topo.workload.sessions is not None else "rate"


@dataclass
class Floors:
    """What no simulation of a candidate can beat."""

    load: float
    """Engine seconds the workload needs per second of traffic, per instance, at best (> 1: it cannot keep up)."""
    latency: dict[str, float]
    """SLO key -> lower bound of that percentile."""


def floors(r: Resolved, stats: WorkloadStats, slo: Slo) -> Floors:
    """Roofline bounds (docs/planning.md, "Planner"): perfect balance over instances, full batches, no context.
    Disaggregated, the prefill pool computes the never-cached prompt tokens and the decode pool the output tokens;
    the load is the busier pool's, TTFT at least the prefill's floor (and, with vLLM's NixlConnector, the decode
    instance's first step), TPOT the decode pool's step floor."""
    decode = np.maximum(stats.output - 1, 0)
    d = r.disaggregation
    if d is None:
        pool = Roofline(r)
        load = pool.load(stats.compulsory.sum(), decode.sum(), stats.span)
        ttft, step = pool.prefill(stats.compulsory), pool.step
    else:
        prefill, decoder = Roofline(d.prefill), Roofline(d.decode)
        load = max(prefill.load(stats.compulsory.sum(), 0, stats.span), decoder.load(0, decode.sum(), stats.span))
        ttft = prefill.prefill(stats.compulsory) + (decoder.step if d.connector == "nixl" else 0.0)
        step = decoder.step
    tpot = np.full(int((stats.output > 1).sum()), step)
    dists = {"ttft": ttft, "tpot": tpot, "e2e": ttft + decode * step}
    latency = {}
    for key in slo.targets():
        metric, pct = key.rsplit("_", 1)
        a = dists[metric]
        latency[key] = float(np.percentile(a, int(pct[1:]))) if a.size else 0.0
    return Floors(load=load, latency=latency)


class Roofline:
    """One pool's (or an aggregated deployment's) cheapest possible work: compute seconds per new token, attention
    left out; every step reads the weights once and pays the fixed overheads (the smaller of a step's eager and
    CUDA-graph overhead: kvplan.sim.steptime)."""

    def __init__(self, r: Resolved):
        from ..sim.steptime import StepTime

        st = StepTime(r)
        self.r = r
        self.per_token = st.linear_flops / st.flops_rate
        self.memory = st.weight_bytes / st.bytes_rate
        self.fixed = min(st.overhead, st.graph_overhead) + st.allreduce_fixed   # a small batch runs as a CUDA graph
        self.allreduce_per_token = st.allreduce_per_token
        self.step = self.memory + self.fixed + self.allreduce_per_token

    def load(self, prompt_tokens: float, decode_tokens: float, span: float) -> float:
        """Engine seconds per second of traffic on each instance, at full batches and perfect balance."""
        r = self.r
        batch = max(1, min(r.max_num_seqs, r.hbm_blocks))
        tokens = float(prompt_tokens + decode_tokens) / r.instances
        steps = max(float(decode_tokens) / r.instances / batch, tokens / r.max_num_batched_tokens)
        busy = max(tokens * self.per_token, steps * self.memory) + steps * self.fixed + tokens * self.allreduce_per_token
        return busy / span if span > 0 else 0.0

    def prefill(self, compulsory: np.ndarray) -> np.ndarray:
        """Each request's prefill alone on an idle instance."""
        k = np.ceil(compulsory / self.r.max_num_batched_tokens)
        return (np.maximum(compulsory * self.per_token, k * self.memory) + k * self.fixed
                + compulsory * self.allreduce_per_token)


def behaviour(topo: Topology, r: Resolved, stats: WorkloadStats) -> str:
    """The candidate with every tier that never fills written as 'holds everything': equal keys, equal runs."""
    data = topo.model_dump(mode="json")
    if r.lmcache is not None:
        working_set = stats.chunk_keys * r.lmcache.chunk_bytes
        for t in r.lmcache.tiers:
            if working_set <= NO_EVICTION_FILL * t.capacity_bytes:
                data["lmcache"][t.name]["size"] = "holds everything"
                data["lmcache"][t.name]["eviction"] = "never evicts"
    return repr(data)
