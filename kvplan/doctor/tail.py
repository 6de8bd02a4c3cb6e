"""Diagnosis of a long TTFT tail: what the slowest requests spent their time to first token on.

The tail is the requests at or above each run's TTFT p99. For them the simulator records where the time
went, request by request: waiting in the queue before first being scheduled (`queue`), prefill steps
waiting for synchronous LMCache retrieves (`load`: the forward pass waits for every load admitted with
it, from ddr, nvme or Ceph), and the rest: prefill compute and, for a request preempted before its first
token, the recomputation after it was re-queued. The shares of the tail's mean TTFT each explains
(they add up to 1, with the preempted requests' compute counted as recompute) name the cause; the share
of tail requests that read from Ceph, against all requests, says whether Ceph latency is in it.

`long-ttft-tail` fires when the ttft_p99 SLO is missed (the mean p99 over the seeds is above it; the
symptom says when its 95 % interval still holds the target, and the finding is then advice unless the
mean is above twice the target), or, without one, when p99 is more than
TAIL_RATIO x the median (the design note's "P99 far above the mean"). Fixes follow the cause:
queueing -> more instances; retrieves -> a ddr tier twice the size (fewer loads from slower tiers);
recompute -> fewer sequences per instance; compute -> more instances.

`slow-decode` fires when the tpot_p99 SLO is missed (see `slow_decode`).
"""

from __future__ import annotations

import math

import numpy as np

from ..sim.bottleneck import SATURATED
from ..units import fmt_duration
from ..sweep.confidence import classify
from .case import Case
from .disaggregation import pool_path
from .finding import Change, Finding, Fix

TAIL_RATIO = 5.0
"""Without a TTFT SLO, p99 above this many times the median is a long tail."""


def tail_shares(case: Case) -> dict[str, float]:
    """Mean TTFT of the tail requests and the share of it each cause explains, over every run."""
    parts = {k: [] for k in ("ttft", "queue", "retrieve", "recompute", "compute", "preempted", "ceph")}
    for res in case.results:
        t = res.per_request
        if not len(t):
            continue
        tail = t.ttft >= np.percentile(t.ttft, 99)
        ttft, queue, load = t.ttft[tail], t.queue[tail], t.load[tail]
        rest = np.maximum(ttft - queue - load, 0.0)
        preempted = t.preemptions[tail] > 0
        parts["ttft"].append(ttft)
        parts["queue"].append(queue)
        parts["retrieve"].append(load)
        parts["recompute"].append(np.where(preempted, rest, 0.0))
        parts["compute"].append(np.where(preempted, 0.0, rest))
        parts["preempted"].append(preempted)
        parts["ceph"].append(t.ceph_tokens[tail] > 0)
    joined = {k: np.concatenate(v) for k, v in parts.items()}
    total = float(joined["queue"].sum() + joined["retrieve"].sum() + joined["recompute"].sum() + joined["compute"].sum())
    shares = {k: float(joined[k].sum() / total) if total else 0.0 for k in ("queue", "retrieve", "recompute", "compute")}
    every_ceph = float(np.mean(np.concatenate([r.per_request.ceph_tokens > 0 for r in case.results])))
    return {"tail_requests": int(joined["ttft"].size), "tail_mean_ttft_s": float(joined["ttft"].mean()), **shares,
            "tail_preempted": float(joined["preempted"].mean()), "tail_reading_ceph": float(joined["ceph"].mean()),
            "all_reading_ceph": every_ceph}


def long_ttft_tail(case: Case) -> list[Finding]:
    r = case.resolved
    if not any(len(res.per_request) for res in case.results):
        return []
    p99, p50 = case.mean("ttft_p99"), case.mean("ttft_p50")
    target = r.slo.ttft_p99
    said = ""
    level = "problem"
    if target is not None:
        verdict = against([res.ttft.p99 for res in case.results], target)
        if p99 <= target:
            return []
        level = severity(verdict, p99, target)
        said = noise(verdict)
        symptom = (f"TTFT p99 {fmt_duration(p99)} misses its SLO of {fmt_duration(target)} (median {fmt_duration(p50)})"
                   + said)
    elif p99 > TAIL_RATIO * p50 and p99 > 0:
        symptom = f"TTFT p99 {fmt_duration(p99)} is {p99 / p50:.0f}x the median ({fmt_duration(p50)})"
    else:
        return []
    shares = tail_shares(case)
    full = float(np.mean([np.mean(res.engine_waiting_fullness) for res in case.results if res.engine_waiting_fullness]
                         or [0.0]))     # how full the batches were while requests waited
    waiting = "waiting in the queue for a batch slot" if full >= SATURATED else "waiting in the queue for the next step"
    causes = {"queue": waiting, "retrieve": "synchronous LMCache retrieves",
              "recompute": "recomputing requests that were preempted", "compute": "prefill compute"}
    main = max(causes, key=shares.get)
    cause = (f"the slowest {shares['tail_requests']:,} requests (mean TTFT {fmt_duration(shares['tail_mean_ttft_s'])}) spent "
             + ", ".join(f"{shares[k]:.0%} {v}" for k, v in causes.items())
             + f"; {shares['tail_preempted']:.0%} of them were preempted, and {shares['tail_reading_ceph']:.0%} read from "
               f"Ceph (of all requests {shares['all_reading_ceph']:.0%})"
             + ("" if full >= SATURATED else f"; while requests waited the engines' batches were {full:.0%} full, so "
                                             "slow steps held the queue, not a lack of slots"))
    seqs = _more_sequences(case)
    fixes = {
        "queue": [_more_instances(r, "ttft_p99")]
                 + ([Fix(summary=f"max_num_seqs {seqs} instead of {r.max_num_seqs}: a batch the KV cache holds",
                         changes=[Change(path=pool_path(r, "max_num_seqs", "prefill")[0], value=seqs)],
                         metric="ttft_p99")] if seqs else []),
        "compute": [_more_instances(r, "ttft_p99")],
        "recompute": [Fix(summary=f"at most {max(1, r.max_num_seqs // 2)} sequences per instance",
                          changes=[Change(path=pool_path(r, "max_num_seqs", "prefill")[0],
                                          value=max(1, r.max_num_seqs // 2))], metric="ttft_p99")],
        "retrieve": [],
    }
    ddr = case.topo.lmcache.ddr if case.topo.lmcache else None
    if ddr is not None:
        fixes["retrieve"].append(Fix(summary="a ddr tier twice the size, so fewer loads come from slower tiers",
                                     changes=[Change(path="lmcache.ddr.size", value=f"{math.ceil(2 * ddr.size / 2**30)}GiB")],
                                     metric="ttft_p99"))
    return [Finding(code="long-ttft-tail", area="tail", severity=level, title=f"the TTFT tail comes from {causes[main]}",
                    symptom=symptom, cause=cause, evidence={"ttft_p99_s": p99, "ttft_p50_s": p50, "main_cause": main, **shares},
                    fixes=fixes[main])]


def slow_decode(case: Case) -> list[Finding]:
    """`slow-decode`: the tpot_p99 SLO is missed. Every running request emits one token per engine step, so TPOT is
    the step time, which grows with the batch (its weights are read once per step, its KV per sequence) and with
    prefill chunks mixed into the step. The sequences running on average come from Little's law (their time from
    admission to the last token, summed, over the run's duration). Fixes: max_num_seqs half of that average
    (shorter steps), 50 % more instances (fewer requests each)."""
    target = case.resolved.slo.tpot_p99
    if target is None or not any(len(res.per_request) for res in case.results):
        return []
    seqs_path, r = pool_path(case.resolved, "max_num_seqs", "decode")     # disaggregated: the decode pool's
    tpot = case.mean("tpot_p99")
    if tpot <= target:
        return []
    verdict = against([res.tpot.p99 for res in case.results], target)
    busy = float(np.mean([np.mean(res.engine_busy) for res in case.results]))
    running = float(np.mean([float((res.per_request.e2e - res.per_request.queue).sum()) / res.duration / r.instances
                             for res in case.results if res.duration > 0]))   # Little's law: sequences in flight
    fixes = [_more_instances(case.resolved, "tpot_p99")]
    fewer = min(r.max_num_seqs // 2, max(1, int(running / 2)))
    if fewer >= 1 and fewer < r.max_num_seqs:
        fixes.insert(0, Fix(summary=f"at most {fewer} sequences per instance (half of the {running:.0f} running on average):"
                                    " shorter steps",
                            changes=[Change(path=seqs_path, value=fewer)], metric="tpot_p99"))
    return [Finding(code="slow-decode", area="tail", severity=severity(verdict, tpot, target),
                    title="decode steps are slower than the TPOT SLO allows",
                    symptom=f"TPOT p99 {fmt_duration(tpot)} misses its SLO of {fmt_duration(target)} (median "
                            f"{fmt_duration(case.mean(lambda res: res.tpot.p50))}){noise(verdict)}",
                    cause=f"a request emits one token per engine step, so TPOT is the step time: the engines are busy "
                          f"{busy:.0%} of the run with {running:.1f} sequences running on average (max_num_seqs "
                          f"{r.max_num_seqs}), prefill chunks mixed in",
                    evidence={"tpot_p99_s": tpot, "engine_busy": busy, "mean_running_per_instance": running,
                              "max_num_seqs": r.max_num_seqs,
                              "max_num_batched_tokens": r.max_num_batched_tokens},
                    fixes=fixes)]


def _more_instances(r, metric: str) -> Fix:
    """50 % more instances (rounded up), judged on `metric`; disaggregated, of the pool that makes it (prefill for
    TTFT, decode for TPOT)."""
    path, pool = pool_path(r, "instances", "decode" if metric.startswith("tpot") else "prefill")
    more = pool.instances + math.ceil(pool.instances / 2)
    role = "" if pool is r else f" {path.split('.')[2]}"
    return Fix(summary=f"{more}{role} instances instead of {pool.instances}", changes=[Change(path=path, value=more)],
               metric=metric)


def _more_sequences(case: Case) -> int | None:
    """A larger max_num_seqs (up to 4x) that the KV cache holds at the workload's mean sequence length, when the
    runs did not preempt (a full KV cache is not what the queue waits for); None when there is none."""
    r = case.resolved
    if case.mean("preemptions_per_request") > 0:
        return None
    sequence = case.mean_sequence_tokens
    fits = min(4 * r.max_num_seqs, int(r.hbm_tokens // sequence), r.max_num_batched_tokens)
    return fits if fits > r.max_num_seqs else None


def against(values: list[float], target: float):
    """classify a latency against its target on the log scale (its noise is relative; see kvplan.doctor.prove)."""
    if min(values) > 0 and target > 0:
        return classify([math.log(v) for v in values], math.log(target))
    return classify(values, target)


def severity(verdict, mean: float, target: float) -> str:
    """A target missed beyond the noise (or by more than twice itself) is a problem; a mean above it that the
    seeds' 95 % interval still holds is advice: it may be noise, and more seeds decide."""
    return "problem" if verdict.outcome == "missed" or mean > 2 * target else "advice"


def noise(verdict) -> str:
    """How sure a missed target is, said after the symptom."""
    if not verdict.tested:
        return "; one seed, not tested against the noise"
    if verdict.outcome == "undecided":
        return f"; within the noise of {verdict.seeds} seeds (more seeds decide)"
    return ""


RULES = [long_ttft_tail, slow_decode]
