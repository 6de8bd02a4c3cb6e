"""Observed: what one bench run measured on the live stack, in the simulator's terms.

A bench run directory holds `spec.yaml` (the spec as benched) and `run.json`: the run's settings,
one row per request as the client saw it, the snapshots of the stack before and after
(observe.py), and the `Observed` record derived from them:

- latency (client side, successful requests): TTFT, TPOT, E2E summaries; throughput.
- where prompt tokens came from, from vLLM's counters: `hbm` (its prefix cache), LMCache's
  tokens split over `ddr` / `nvme` / `ceph`, and `recomputed`. vLLM counts LMCache's tokens as one
  number; LMCache's own counters split its hits into the tokens L1 (the ddr tier) held and those L2
  added, in its lookups' proportion. L2 is the one L2 tier the spec has; with both nvme and ceph,
  Ceph's pool counters say how much came from Ceph (bytes read from the KV pool / chunk bytes =
  chunks) and the rest of L2 is nvme. `tier_split` says which: exact (at most one L2 tier served),
  proportional (nvme and ceph told apart by Ceph's bytes read), unknown (LMCache exported no counters).
- Ceph: bytes written to and read from the KV pool, objects, the bucket's object count, OSD latency.
- components: which were down before or after the run, and why.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ..errors import Problem, SpecError
from ..named_file import check_regular
from ..resolved_tiers import ResolvedLMCache
from ..sim.metrics import summary
from ..sim.result import Summary
from .bench import Outcome
from .observe import Component, Snapshot

TIER_SOURCES = ("hbm", "ddr", "nvme", "ceph", "recomputed")


class Observed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: int
    ok: int
    failed: int
    waited: int
    """Chat turns sent after their arrival time because the previous turn's reply came late."""
    errors: dict[str, int]
    """Error message -> requests that failed with it."""
    duration: float
    """Seconds from the run's start (arrival time 0) to the last token, as the simulator counts its duration."""
    ttft: Summary
    tpot: Summary
    e2e: Summary
    requests_per_s: float
    generated_tokens_per_s: float
    prompt_tokens: int
    """vLLM's count of prompt tokens in the run."""
    served_tokens: dict[str, int]
    """hbm, ddr, nvme, ceph, recomputed -> prompt tokens."""
    tier_split: str
    """How LMCache's tokens were split over its tiers: exact, proportional (nvme vs ceph by Ceph's bytes read),
    or unknown (no LMCache counters: all of them are counted as ddr)."""
    preemptions: int
    ceph_bytes_written: int | None
    ceph_bytes_read: int | None
    ceph_objects: int | None
    rgw_objects: int | None
    osd_apply_latency_ms_max: float | None
    components_down: list[Component]
    l2_store_failed_chunks: int | None = None
    """Chunks LMCache submitted to its L2 tiers (nvme, ceph) that were never stored (the run settles first, so
    none is still in flight): failed writes, e.g. with Ceph unreachable. None without LMCache's counters."""

    def served_share(self, tier: str) -> float:
        return self.served_tokens[tier] / self.prompt_tokens if self.prompt_tokens else 0.0


class BenchRun(BaseModel):
    """run.json of a bench run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    spec_hash: str
    seed: int
    salt: int
    targets: list[str]
    router: str | None = None
    """The router the requests went through (kvplan bench --router), None when they went to the targets directly."""
    started_at: str
    timeout: float
    warmup: int
    requests: dict[str, list]
    """Columns: id, session, turn, target, arrival, sent, prompt_tokens, output_tokens, received_tokens,
    ttft, tpot, e2e, waited, error (null when it succeeded)."""
    before: Snapshot
    after: Snapshot
    observed: Observed


def columns(outcomes: list[Outcome]) -> dict[str, list]:
    names = ("id", "session", "turn", "target", "arrival", "sent", "prompt_tokens", "output_tokens",
             "received_tokens", "ttft", "tpot", "e2e", "waited", "error")
    rows = {n: [] for n in names}
    for o in outcomes:
        for n in names:
            rows[n].append(None if n in ("ttft", "tpot", "e2e") and not o.ok else getattr(o, n))
    return rows


def _delta(before: dict | None, after: dict | None, key: str) -> float | None:
    if not before or not after or key not in before or key not in after:
        return None
    return after[key] - before[key]


def _vllm_delta(before: Snapshot, after: Snapshot, key: str) -> float:
    return sum(v.get(key, 0.0) - before.vllm.get(url, {}).get(key, 0.0) for url, v in after.vllm.items())


def derive(outcomes: list[Outcome], before: Snapshot, after: Snapshot, lmcache: ResolvedLMCache | None) -> Observed:
    ok = [o for o in outcomes if o.ok]
    duration = max((o.last_token for o in ok), default=0.0)    # the clock starts at arrival time 0, as the simulator's
    generated = sum(o.received_tokens for o in ok)
    errors = Counter(o.error for o in outcomes if not o.ok)

    hbm = _vllm_delta(before, after, "hbm_tokens")
    lmc = _vllm_delta(before, after, "lmcache_tokens")
    computed = _vllm_delta(before, after, "computed_tokens")
    prompt = _vllm_delta(before, after, "prompt_tokens")
    l1 = _delta(before.lmcache, after.lmcache, "l1_hit_tokens")
    l2 = _delta(before.lmcache, after.lmcache, "l2_hit_tokens")
    ceph_read = _delta(before.ceph, after.ceph, "pool_read_bytes")
    served = {"hbm": int(hbm), "ddr": 0, "nvme": 0, "ceph": 0, "recomputed": int(computed)}
    if lmc <= 0:
        split = "exact"
    elif lmcache is not None and l1 is not None and l2 is not None and l1 + l2 > 0:
        has_nvme, has_ceph = lmcache.tier("nvme") is not None, lmcache.tier("ceph") is not None
        if has_nvme and has_ceph and l2 > 0:
            from_ceph = min(ceph_read / lmcache.chunk_bytes * lmcache.chunk_size, l2) if ceph_read is not None else 0.0
            split = "proportional"
        else:
            from_ceph = l2 if has_ceph else 0.0
            split = "exact"
        shares = {"ddr": l1, "nvme": l2 - from_ceph, "ceph": from_ceph}
        for tier, tokens in shares.items():
            served[tier] = int(round(lmc * tokens / (l1 + l2)))
        served["ddr"] += int(lmc) - sum(served[t] for t in shares)       # rounding stays in L1
    else:
        served["ddr"] = int(lmc)
        split = "unknown"
    down = {c.name: c for c in before.down()}
    down.update({c.name: c for c in after.down()})

    def count(key: str) -> int | None:
        value = (after.ceph or {}).get(key)
        return None if value is None else int(value)

    def grew(key: str) -> int | None:
        value = _delta(before.ceph, after.ceph, key)
        return None if value is None else int(value)

    return Observed(
        requests=len(outcomes), ok=len(ok), failed=len(outcomes) - len(ok), waited=sum(o.waited for o in outcomes),
        errors=dict(errors.most_common()), duration=duration,
        ttft=summary([o.ttft for o in ok]), tpot=summary([o.tpot for o in ok if o.received_tokens > 1]),
        e2e=summary([o.e2e for o in ok]),
        requests_per_s=len(ok) / duration if duration > 0 else 0.0,
        generated_tokens_per_s=generated / duration if duration > 0 else 0.0,
        prompt_tokens=int(prompt), served_tokens=served, tier_split=split,
        preemptions=int(_vllm_delta(before, after, "preemptions")),
        ceph_bytes_written=grew("pool_write_bytes"), ceph_bytes_read=grew("pool_read_bytes"),
        ceph_objects=count("pool_objects"), rgw_objects=count("rgw_objects"),
        osd_apply_latency_ms_max=(after.ceph or {}).get("osd_apply_latency_ms_max"),
        l2_store_failed_chunks=_store_failures(before, after),
        components_down=list(down.values()))


def _store_failures(before: Snapshot, after: Snapshot) -> int | None:
    submitted = _delta(before.lmcache, after.lmcache, "l2_submitted_chunks")
    stored = _delta(before.lmcache, after.lmcache, "l2_stored_chunks")
    return None if submitted is None or stored is None else max(0, int(submitted - stored))


def write_run(directory: Path, run: BenchRun, spec_text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spec.yaml").write_text(spec_text)
    path = directory / "run.json"
    path.write_text(run.model_dump_json(indent=1) + "\n")
    return path


def read_run(path: str | Path) -> BenchRun:
    """A bench run from its directory or its run.json; SpecError naming the file when it is not one."""
    p = Path(path)
    file = p / "run.json" if p.is_dir() else p
    check_regular(file, "--observed", "give the directory `kvplan bench` printed (it holds run.json)")
    try:
        return BenchRun.model_validate_json(file.read_text())
    except FileNotFoundError:
        raise SpecError([Problem("--observed", f"no bench run at {p} (looked for {file})",
                                 fix="give the directory `kvplan bench` printed (it holds run.json)")]) from None
    except (ValueError, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError([Problem("--observed", f"{file} is not a kvplan bench run: {first}",
                                 fix="give the directory `kvplan bench` printed")]) from None

