"""Predicted against observed: the simulator's run of a spec next to a bench run of the same spec.

The prediction replays exactly the benched requests (same spec, same seed) at the times the bench
sent them, so every row compares like with like. A chat turn leaves when its earlier turn's reply
is in (it carries that reply): where the real stack replied later than the simulator would, the
turn left late (the run's `waited`), and the requests reached the router in another order than
their arrival times give. Round robin then sends a different set of turns to the host that holds
their history, which moves where prompt tokens come from by several points on a 40-request run;
replayed as sent, the simulated router sees the order the real one saw.

Latencies and throughput carry a relative error; where prompt tokens came from (hbm = vLLM's
prefix cache, ddr / nvme / ceph = LMCache's tiers, recomputed) carries the difference of the two
shares in percentage points; Ceph bytes written, a relative error.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..sim import stages
from ..sim import workload as wl
from ..sim.result import SimResult
from .observed import TIER_SOURCES, BenchRun


@dataclass(frozen=True)
class Row:
    metric: str
    unit: str
    """s, req/s, tok/s, share or bytes."""
    predicted: float | None
    observed: float | None

    @property
    def error(self) -> float | None:
        """Shares: predicted - observed in percentage points; others: (predicted - observed) / observed."""
        if self.predicted is None or self.observed is None:
            return None
        if self.unit == "share":
            return (self.predicted - self.observed) * 100.0
        if self.observed == 0:
            return 0.0 if self.predicted == 0 else None
        return (self.predicted - self.observed) / self.observed

    @property
    def error_text(self) -> str:
        e = self.error
        if e is None:
            return "-"
        return f"{e:+.1f} pp" if self.unit == "share" else f"{e * 100:+.1f} %"


def check_same_spec(r: Resolved, run: BenchRun, where: str) -> None:
    """The run benched this spec: the hash it recorded, or (when kvplan's spec schema has grown since,
    which changes every hash) the hash of the spec.yaml it saved, read by this kvplan."""
    if r.spec_hash != run.spec_hash and r.spec_hash != _saved_spec_hash(where):
        raise SpecError([Problem("--observed", f"{where} benched spec {run.name} {run.spec_hash[:12]}, not this spec "
                                 f"({r.name} {r.spec_hash[:12]})",
                                 fix=f"compare against the spec the run saved: {where}/spec.yaml")])


def rows(sim: SimResult, run: BenchRun) -> list[Row]:
    obs = run.observed
    out = [
        Row("prompt tokens", "tokens", float(sim.prompt_tokens), float(obs.prompt_tokens)),
        Row("TTFT p50", "s", sim.ttft.p50, obs.ttft.p50),
        Row("TTFT p90", "s", sim.ttft.p90, obs.ttft.p90),
        Row("TPOT p50", "s", sim.tpot.p50, obs.tpot.p50),
        Row("TPOT mean", "s", sim.tpot.mean, obs.tpot.mean),
        Row("E2E p50", "s", sim.e2e.p50, obs.e2e.p50),
        Row("throughput", "req/s", sim.requests_per_s, obs.requests_per_s),
        Row("generated tokens", "tok/s", sim.generated_tokens_per_s, obs.generated_tokens_per_s),
    ]
    for tier in TIER_SOURCES:
        if tier == "recomputed":
            predicted = sim.recomputed_tokens / sim.prompt_tokens if sim.prompt_tokens else 0.0
        else:
            t = sim.tier(tier)
            if t is None:
                continue
            predicted = t.served_share
        out.append(Row(f"prompt tokens from {tier}", "share", predicted, obs.served_share(tier)))
    ceph = sim.tier("ceph")
    if ceph is not None:
        out.append(Row("bytes written to Ceph", "bytes", float(ceph.bytes_written),
                       None if obs.ceph_bytes_written is None else float(obs.ceph_bytes_written)))
    return out


def predict(r: Resolved, run: BenchRun) -> SimResult:
    from ..sim.run import run as simulate

    return simulate(r, seed=run.seed, requests=as_sent(r, run))


def as_sent(r: Resolved, run: BenchRun) -> wl.RequestStream:
    """The run's requests, each arriving when the bench sent it (one it never sent, at its arrival time)."""
    sent = dict(zip(run.requests["id"], run.requests["sent"]))
    planned = stages.requests(r, run.seed)
    retimed = [q._replace(arrival=sent[q.id]) if sent.get(q.id, -1.0) >= 0 else q for q in planned]
    retimed.sort(key=lambda q: (q.arrival, q.id))
    return wl.RequestStream.of(wl.RequestList(retimed, planned.rejected, planned.shortened, planned.sessions_ended_early))


def _saved_spec_hash(where: str) -> str | None:
    from ..spec import load

    try:
        return load(f"{where}/spec.yaml").spec_hash()
    except SpecError:
        return None
