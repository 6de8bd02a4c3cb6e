"""One bench run end to end: check the targets, read the stack, replay the workload, read the stack
again, and write the run directory (observed.py) that `compare` and `calibrate` read."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from ..resolve import Resolved
from .bench import Bench, Progress
from .target import CHECK_TIMEOUT, Target, check_target
from .observe import lmcache_idle, lmcache_servers, observe_ceph, snapshot
from .observed import BenchRun, columns, derive, write_run


def default_run_dir(r: Resolved, state_dir: Path) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return state_dir / "bench" / f"{stamp}-{r.name}"


def bench(r: Resolved, spec_text: str, targets: list[Target], out_dir: Path, *, salt: int, seed: int | None = None,
          timeout: float = 120.0, progress: Progress | None = None, router: Target | None = None) -> BenchRun:
    """Replay `r`'s workload against `targets` (through `router` when given) and write `out_dir`/run.json and
    spec.yaml. The targets are the vLLM instances whatever the route: their counters are what the run observed.
    Checking a target and each read of a counter end within min(`timeout`, CHECK_TIMEOUT) seconds in all."""
    reads = min(timeout, CHECK_TIMEOUT)      # each check and each read of the counters, in all
    for target in [*targets, *([router] if router else [])]:
        check_target(target, r.model.name, reads)
    runner = Bench(r, targets, salt=salt, router=router, seed=seed, timeout=timeout, progress=progress)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    warm = runner.run_warmup()
    before = snapshot(r, targets, timeout=reads)
    outcomes = runner.run()
    settle(r, lmcache_servers(r, targets))
    after = snapshot(r, targets, timeout=reads)
    run = BenchRun(name=r.name, spec_hash=r.spec_hash, seed=runner.seed_used, salt=salt,
                   targets=[t.url for t in targets], router=router.url if router else None, started_at=started,
                   timeout=timeout, warmup=len(warm),
                   requests=columns(outcomes), before=before, after=after,
                   observed=derive(outcomes, before, after, r.lmcache))
    write_run(out_dir, run, spec_text)
    return run


def settle(r: Resolved, servers: list[Target] | None = None, limit: float = 45.0, poll: float = 3.0) -> None:
    """Wait (at most `limit` seconds) until the stack has written down what the run did: the LMCache `servers`
    (default: the spec's metrics address) have no store pending or in flight, and the Ceph pool's counters,
    which OSDs report every few seconds, hold still."""
    deadline = time.monotonic() + limit
    if r.lmcache is not None and r.lmcache.mode == "mp":
        servers = lmcache_servers(r, []) if servers is None else servers
        while not lmcache_idle(servers) and time.monotonic() < deadline:
            time.sleep(0.5)
    if r.ceph is None or r.lmcache is None or r.lmcache.tier("ceph") is None:
        return
    last = None
    while time.monotonic() < deadline:
        _, values = observe_ceph(r, 30.0)
        if values is None:
            return                                 # down: the snapshot will say so
        now = (values["pool_objects"], values["pool_write_bytes"], values.get("rgw_objects"))
        if now == last and (now[2] is None or now[0] >= now[2]):
            return
        last = now
        time.sleep(poll)
