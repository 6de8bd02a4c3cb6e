"""run(resolved, seed) -> SimResult: the workload through vLLM instances and the KV-cache hierarchy.

Requests arrive as the workload says, a router picks an instance, and each instance's engine
(`engine.py`) schedules them iteration by iteration as vLLM v1 does: its prefix cache, LMCache's
tiers (`lmcache.py`), the links they move over (`fabric.py`) and the step-time model
(`steptime.py`) decide when each request gets its first token and when it finishes. Where the KV
of every prompt token came from — HBM, ddr, nvme, ceph, or recomputation — is recorded per
request and per tier.

vLLM details copied (reference/lmcache-vllm.md §6 "Partial hit with vLLM"): the HBM hit is
whole blocks and stops one token short of the prompt; LMCache loads only the tokens beyond what
HBM already has; on a full-prompt LMCache hit one token is still recomputed; nothing is loaded
when the extra hit is below min_retrieve_tokens.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable

import math

from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..spec.rules import can_start_warm
from ..spec.stages import stages_of
from . import metrics, steady
from . import workload as wl
from .clock import Environment, Event
from .disagg import Pools
from .engine import Engine
from .fabric import Fabric
from .ledger import Ledger
from .load import Load
from .lmcache import TIERS, LMCacheModel
from .native import NativeOffload
from .prefix_cache import PrefixCache
from .router import Router
from .seq import Seq
from .slo_watch import SloWatch
from .stages import Staged
from .steady import WarmTier
from .steptime import StepTime

from .result import LinkResult, RequestTable, SimResult, TierResult

Progress = Callable[[float], None]

MAX_SAMPLES = 2_000
"""Occupancy samples a run keeps (a run samples about 100 times over its arrivals' span)."""


@dataclass(frozen=True)
class Bounds:
    """How far one run may go before it is stopped with SimulationStopped."""

    max_wall: float | None = 1800.0
    """Seconds of this machine's time; None: no bound."""
    max_sim_time: float | None = None
    """Simulated seconds after traffic starts; None: 100 times the arrivals' span (at least an hour), which
    only a run whose instances serve far slower than requests arrive reaches. Both bounds are looked at with
    each occupancy sample (about 100 over the arrivals' span): a run stops within one sample of either."""

    def sim_limit(self, span: float) -> float:
        return self.max_sim_time if self.max_sim_time is not None else max(100 * span, 3600.0)


class SimulationStopped(SpecError):
    """A run stopped at a bound: what happened, how far it got, and what to change."""

    def __init__(self, flag: str, message: str, fix: str):
        super().__init__([Problem(flag, message, fix=fix)])
        self.args = (flag, message, fix)        # what pickling (a process pool, Ray) rebuilds it from


class Simulation:
    def __init__(self, r: Resolved, seed: int | None = None, progress: Progress | None = None,
                 bounds: Bounds = Bounds(), stop_at_miss: dict[str, float] | None = None,
                 requests: wl.RequestStream | None = None):
        self.r = r
        self.requests = requests                 # None: the spec's workload (wl.stream, or a Load of its stages)
        self.load: Load | None = None            # a staged or closed-loop workload's sender
        self.bounds = bounds
        self.stop_at_miss = stop_at_miss
        self.watch: SloWatch | None = None
        self.started = 0.0                       # time.monotonic() when the run began
        self.sim_limit = 0.0                     # simulated seconds the run may reach
        self.seed = r.workload.seed if seed is None else seed
        self.progress = progress
        self.request_overhead = r.step.request_overhead     # HTTP and streaming: a pure delay, outside the engine
        self.env = Environment()
        self._build(r)
        self.ledger = Ledger(0, 0.0, self.request_overhead)   # the per-request table (sized once the requests are known)
        self.finished_count = 0
        self.offset = 0.0                        # traffic starts after the warm-up
        self.finished_event: Event | None = None
        self.expected = 0
        self.warm_left = 0
        self.occupancy: dict[str, list[tuple[float, int]]] = {t: [] for t in ("hbm", *TIERS)}
        self.block_utilisation: list[tuple[float, float]] = []
        self.peak: dict[str, int] = {}
        self.done = False
        self.warm: list[WarmTier] = []           # how a warm start left each tier (kvplan.sim.warm); [] cold
        self.warm_counts: dict[str, tuple[int, int, int]] = {}   # tier -> the warm-up's evictions, bytes, expiries
        self.sessions = 0                        # sessions whose first turn finished (workloads with sessions)

    def _build(self, r: Resolved) -> None:
        """The instances and what they share: links, HBM prefix caches, the offload engine, the router; or, for a
        spec with serving.disaggregation, its prefill and decode pools and the proxy (kvplan.sim.disagg)."""
        self.pools: Pools | None = None
        if r.disaggregation is not None:
            self.pools = pools = Pools(self, r)
            self.fabric, self.hbm, self.lmcache, self.engines = pools.fabric, pools.hbm, pools.lmcache, pools.engines
            self.native = None                   # refused beside a P/D connector (kvplan.spec.disaggregation)
            self.offload, self.router = self.lmcache, pools     # the proxy stands for the router
            return
        self.fabric = Fabric(self.env, r)
        self.hbm = [PrefixCache(r.hbm_blocks) for _ in range(r.instances)]
        self.lmcache = LMCacheModel(self.env, r, self.fabric) if r.lmcache else None
        self.native = NativeOffload(self.env, r, self.fabric) if r.kv_offloading else None
        self.offload = self.lmcache or self.native         # the offload engine, LMCache or vLLM's native (or none)
        self.engines = [Engine(r, i, self.env, self.hbm[i], self.lmcache, StepTime(r), self.finished, self.native)
                        for i in range(r.instances)]
        self.router = Router(r.router, self.engines, r.block_size, r.router_thresholds, r.llm_d, self.seed)

    def links(self) -> list:
        """Every link of the run, for its result."""
        return self.fabric.links() + (self.pools.links() if self.pools is not None else [])

    # ---- requests
    def finished(self, instance: int, seq: Seq, now: float) -> None:
        """Called by an engine when a request has emitted its last token."""
        if not seq.record:
            self.warm_left -= 1
            if self.warm_left == 0:
                self.finished_event.succeed()
            return
        ledger = self.ledger
        ledger.record(instance, seq, now)
        self.finished_count += 1
        if seq.req.turn == 0 and seq.req.session >= 0:
            self.sessions += 1
        if self.watch is not None:
            i = seq.req.id
            self.watch.see(ledger.ttft[i], ledger.tpot[i], ledger.e2e[i], seq.req.output_tokens)
        if self.load is not None:
            self.load.finished(seq.req, now)
        if self.finished_count == self.expected:
            self.finished_event.succeed()

    def _submit(self, req: wl.Request) -> None:
        """A request of a Load, to the instance the router picks (its row made room for first)."""
        self.ledger.grow(req.id + 1)
        if self.pools is not None:
            self.pools.submit(req)
            return
        self.engines[self.router.pick(req)].submit(req)

    def _load_done(self, sent: int) -> None:
        """The Load has sent its last request: the run ends once all `sent` have finished."""
        self.expected = sent
        if self.finished_count == sent:
            self.finished_event.succeed()

    # ---- the run
    def sample(self, interval: float, end_hint: float):
        """Record occupancy, report progress and look at the bounds every `interval` until the last request is
        done (a stopped run's SimulationStopped leaves env.run from here). A run that
        lasts far longer than its arrivals (instances far slower than the traffic) keeps at most MAX_SAMPLES:
        at that many it drops every other sample and samples half as often, so time and memory stay bounded."""
        while not self.done:
            self._sample()
            self._within_bounds()
            if len(self.block_utilisation) >= MAX_SAMPLES:
                interval *= 2
                for samples in (*self.occupancy.values(), self.block_utilisation):
                    samples[:] = samples[::2]
            if self.progress and self.load is not None:
                self.progress(self.load.progress())
            elif self.progress and end_hint > 0:
                self.progress(min(1.0, self.env.now / end_hint))
            yield self.env.timeout(interval)

    def _sample(self) -> None:
        now = self.env.now
        used = {"hbm": sum(c.cached_blocks for c in self.hbm) * self.r.block_bytes}
        if self.offload:
            for tier in self.offload.order:
                for cache in self.offload.caches[tier]:
                    cache.expire(now)
                used[tier] = self.offload.used_bytes(tier)
        t = round(now - self.offset, 9)
        for tier, value in used.items():
            self.occupancy[tier].append((t, value))
            self.peak[tier] = max(self.peak.get(tier, 0), value)
        held = sum(c.used_blocks / c.num_blocks for c in self.hbm) / len(self.hbm)
        self.block_utilisation.append((t, held))

    def run(self) -> SimResult:
        env, r = self.env, self.r
        if r.workload.warm_start:                # tiers filled before any event; the clock starts after the warm-up
            from . import warm as warm_start

            self.warm, start = warm_start.fill(self, self.seed)
            self.warm_counts = warm_start.baseline(self)
            env.run_until(start)
        for engine in self.engines:
            env.process(engine.loop())
        warm = wl.warmup(r, self.seed)
        if warm:   # prefill the templates on every instance before traffic
            self.warm_left = len(warm) * len(self.engines)
            self.finished_event = env.event()
            for engine in self.engines:
                for w in warm:
                    engine.submit(w, record=False)
            env.run(self.finished_event)
        self.started = time.monotonic()
        self.offset = offset = env.now
        for engine in self.engines:              # their request merging times a window from an arrival
            engine.offset = offset
        self.finished_event = env.event()
        if self.requests is None and stages_of(r.workload) is not None:
            reqs = self._start_load(offset)
            span = self.load.staged.span()
            if span is None:                     # a closed loop paces itself: only --max-sim-time bounds it
                self.sim_limit = self.bounds.max_sim_time if self.bounds.max_sim_time is not None else math.inf
            else:
                self.sim_limit = self.bounds.sim_limit(span)
            last = span if span is not None else 1.0
        else:
            reqs = wl.stream(r, self.seed) if self.requests is None else self.requests
            self.expected = len(reqs)
            self.ledger = Ledger(len(reqs), offset, self.request_overhead)
            if self.stop_at_miss:
                self.watch = SloWatch(self.stop_at_miss, len(reqs), reqs.decoding)
            last = reqs.last_arrival
            env.process(self.router.deliver(env, reqs, offset))
            self.sim_limit = self.bounds.sim_limit(last)
        env.process(self.sample(max(last / 100, 1e-3), last + offset))
        if self.expected:
            env.run(self.finished_event)
        duration = env.now - offset
        self.done = True
        env.run()                                # idle engines wait on nothing: this lets in-flight writes land
        self._sample()
        return self._result(reqs, warm, duration)

    def _start_load(self, offset: float) -> Load:
        """Send a staged or closed-loop workload (kvplan.sim.load): how many requests it has is known once it has sent
        them, so the run ends when the Load says so (`_load_done`)."""
        staged = Staged(self.r, self.seed)
        if self.stop_at_miss:
            counts = staged.counts()
            if counts is None:
                raise SpecError([Problem("workload", "stopping a run at its first certain SLO miss needs its requests "
                                         "known in advance, which a closed loop's or a draining stage's are not", None,
                                         fix="search a workload of rate stages without drain")])
            self.watch = SloWatch(self.stop_at_miss, *counts)
        self.expected = -1
        self.ledger = Ledger(0, offset, self.request_overhead)
        self.load = Load(self.env, staged, self._submit, offset, self.request_overhead, self._load_done)
        self.env.process(self.load.run())
        return self.load

    def _progress(self) -> str:
        done = self.finished_count
        return f"simulated time {self.env.now - self.offset:,.1f} s, {done:,} of {self.expected:,} requests finished"

    def _within_bounds(self) -> None:
        wall = time.monotonic() - self.started
        if self.bounds.max_wall is not None and wall > self.bounds.max_wall:
            raise SimulationStopped("--max-wall", f"the run took more than {self.bounds.max_wall:g} s of wall time "
                                                  f"and was stopped at {self._progress()}",
                                    "give it longer (--max-wall), or simulate fewer requests (workload.requests)")
        if self.env.now - self.offset > self.sim_limit:
            raise SimulationStopped("--max-sim-time", f"the run passed {self.sim_limit:,.0f} s of simulated time "
                                                      f"({self._progress()}): the instances serve far slower than "
                                                      "requests arrive, or a step takes far longer than it should",
                                    "check serving.step_model and the arrival rate against `kvplan capacity`, or "
                                    "allow more (--max-sim-time)")

    def _table(self) -> RequestTable:
        return RequestTable(**self.ledger.columns(self.load.sent if self.load is not None else -1))

    def _result(self, reqs, warm, duration: float) -> SimResult:
        r, recs = self.r, self._table()
        prompt = int(recs.prompt_tokens.sum())
        hbm_served = int(recs.hbm_tokens.sum())
        reached, tiers = prompt, []
        evictions = sum(c.evictions for c in self.hbm)
        tiers.append(TierResult(
            name="hbm", caches=r.instances, capacity_bytes=r.hbm_bytes,
            served_tokens=hbm_served, served_share=_ratio(hbm_served, prompt), token_hit_ratio=_ratio(hbm_served, reached),
            lookup_chunks=0, hit_chunks=0, chunk_hit_ratio=0.0, relookup_chunks=0, relookup_hit_chunks=0,
            relookup_chunk_hit_ratio=0.0, bytes_read=0, bytes_written=0, stored_chunks=0,
            refused_chunks=0, promoted_chunks=0, evictions=evictions, evicted_bytes=evictions * r.block_bytes,
            expired=0, peak_used_bytes=self.peak.get("hbm", 0), final_used_bytes=self.occupancy["hbm"][-1][1],
            occupancy=self.occupancy["hbm"]))
        reached -= hbm_served
        lm_hit = relookup_hit = None
        relookups = 0
        if self.offload:
            lm = self.offload
            for tier in lm.order:
                c, caches = lm.counters[tier], lm.caches[tier]
                evicted, evicted_bytes, expired = self.warm_counts.get(tier, (0, 0, 0))   # the warm-up's, left out
                served = int(getattr(recs, f"{tier}_tokens").sum())
                tiers.append(TierResult(
                    name=tier, caches=len(caches), capacity_bytes=sum(x.capacity for x in caches),
                    served_tokens=served, served_share=_ratio(served, prompt),
                    token_hit_ratio=_ratio(served, reached), lookup_chunks=c.lookup_chunks,
                    hit_chunks=c.hit_chunks, chunk_hit_ratio=_ratio(c.hit_chunks, c.lookup_chunks),
                    relookup_chunks=c.relookup_chunks, relookup_hit_chunks=c.relookup_hit_chunks,
                    relookup_chunk_hit_ratio=_ratio(c.relookup_hit_chunks, c.relookup_chunks),
                    bytes_read=c.bytes_read, bytes_written=c.bytes_written, stored_chunks=c.stored_chunks,
                    refused_chunks=c.refused_chunks, promoted_chunks=c.promoted_chunks,
                    evictions=sum(x.evictions for x in caches) - evicted,
                    evicted_bytes=sum(x.evicted_bytes for x in caches) - evicted_bytes,
                    expired=sum(getattr(x, "expired", 0) for x in caches) - expired,
                    peak_used_bytes=self.peak.get(tier, 0),
                    final_used_bytes=lm.used_bytes(tier), occupancy=self.occupancy[tier]))
                reached -= served
            lm_hit = _ratio(lm.hit_tokens, lm.requested_tokens)              # first lookups only
            relookups, relookup_hit = lm.relookups, _ratio(lm.relookup_hit_tokens, lm.relookup_tokens)
        # The "LMCache hit ratio" alert's figure, as vLLM's counters give it live: prompt tokens whose KV came
        # from a cache (vLLM's prefix cache or an LMCache tier) over all prompt tokens.
        cache_hit = _ratio(sum(t.served_tokens for t in tiers), prompt) if self.offload else None
        lat = metrics.latency(recs)
        warm_of = {w.tier: w for w in self.warm}
        f = self.fabric
        ceph_ops = slowest = None
        if f.ceph_op_counts:
            ceph_ops = metrics.op_summary(f.ceph_op_latencies, f.ceph_op_counts)
            slowest = metrics.slowest_mean(f.ceph_op_latencies, f.ceph_op_counts, f.ceph_op_hosts)
        samples = [u for t, u in self.block_utilisation if 0 <= t <= duration]
        mean_util = sum(samples) / len(samples) if samples else 0.0
        generated = int(recs.output_tokens.sum())
        span = self.env.now - self.offset           # the links worked until the last write landed
        links = [LinkResult(name=link.name, transfers=link.transfers, work=link.work_done,
                            utilisation=link.utilisation(span)) for link in self.links()]
        return SimResult(
            name=r.name, spec_hash=r.spec_hash, seed=self.seed, lmcache_mode=r.lmcache.mode if r.lmcache else None,
            requests=len(recs), warmup_requests=len(warm), rejected_requests=reqs.rejected,
            duration=duration, prompt_tokens=prompt, recomputed_tokens=int(recs.recomputed_tokens.sum()),
            preemptions=sum(e.preemptions for e in self.engines), ttft=lat["ttft"], tpot=lat["tpot"], e2e=lat["e2e"],
            queue=lat["queue"], requests_per_s=_ratio(len(recs), duration),
            sessions_per_s=_ratio(self.sessions, duration) if r.workload.sessions is not None else None,
            prompt_tokens_per_s=_ratio(prompt, duration),
            generated_tokens_per_s=_ratio(generated, duration),
            goodput_per_s=_ratio(metrics.good_requests(r, recs), duration), slo=metrics.slo_checks(r, lat),
            block_utilisation=self.block_utilisation, mean_block_utilisation=mean_util,
            engine_steps=[e.steps for e in self.engines], engine_busy=[_ratio(e.busy, duration) for e in self.engines],
            engine_occupancy=[_ratio(e.occupied, duration) for e in self.engines],
            engine_waited=[_ratio(e.waited, duration) for e in self.engines],
            engine_waiting_fullness=[_ratio(e.waited_full, e.waited) for e in self.engines],
            ceph_op_latency=ceph_ops, ceph_op_latency_slowest_osd=slowest,
            alerts=metrics.alerts(r, cache_hit, mean_util, slowest), lmcache_hit_ratio=lm_hit,
            relookups=relookups, relookup_hit_ratio=relookup_hit, tiers=tiers,
            steady_state=[steady.judge(t.name, t.capacity_bytes, t.peak_used_bytes, t.final_used_bytes, t.evictions,
                                       self._ttl(t.name), duration, self._longer(), warm_of.get(t.name),
                                       can_start_warm(r.workload))
                          for t in tiers if t.name != "hbm"],
            warm_start=self.warm,
            links=links, stages=self._stages(recs), per_request=recs,
            disaggregation=self.pools.result(span) if self.pools is not None else None)

    def _ttl(self, tier: str) -> float | None:
        """A tier's expiry (LMCache's ceph tier only; vLLM's native CPU tier has none)."""
        found = self.r.lmcache.tier(tier) if self.r.lmcache else None
        return found.ttl_s if found else None

    def _longer(self) -> str:
        """What makes this run longer, for the steady-state notes: the stages' ends, when the spec lists stages."""
        staged = self.load is not None and self.load.staged.reported
        return "workload.stages' durations or requests" if staged else steady.LONGER

    def _stages(self, recs: RequestTable) -> list:
        """Each stage's figures, when the spec lists stages (kvplan.sim.load keeps what each sent)."""
        if self.load is None or not self.load.staged.reported:
            return []
        return [metrics.stage(self.r, recs, s.index, self.load.staged.stages[s.index].spec.describe(), s.first, s.last,
                              s.start, s.end, s.rejected) for s in self.load.spans]


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def run(r: Resolved, seed: int | None = None, progress: Progress | None = None, bounds: Bounds = Bounds(),
        stop_at_miss: dict[str, float] | None = None, requests: wl.RequestStream | None = None) -> SimResult:
    """Simulate the resolved spec's workload through its instances and KV-cache hierarchy.

    `requests` replaces the workload's stream (each id 0..n-1 once, sorted by arrival): `kvplan
    compare` replays a bench run's requests at the times they were sent.

    `bounds` stops a run that would not end in reasonable time (SimulationStopped says why);
    `stop_at_miss` (SLO key -> target seconds) stops it with SloMissed as soon as it has certainly
    missed one of those targets (kvplan.sim.slo_watch). The cyclic
    garbage collector is paused for the run: the workload's millions of small
    objects would otherwise be rescanned again and again, and the run creates no cycles
    worth collecting before it ends. When it ends the router forgets its routed keys, so that the
    collector's first pass over the run's objects does not walk them.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        sim = Simulation(r, seed, progress, bounds, stop_at_miss, requests)
        try:
            return sim.run()
        finally:
            sim.router.forget()
    finally:
        if was_enabled:
            gc.enable()
