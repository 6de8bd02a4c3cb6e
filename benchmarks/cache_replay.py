"""Benchmark: the whole Mooncake conversation trace through kvplan's KV-cache hierarchy.

Two measurements, each in its own process so that peak RSS belongs to one of them:

  cache   the cache-only path: every request's 256-token chunk keys through one LRU tier
          (lookup of the longest held prefix, touch of the hits, insert of the rest), at several
          capacities; prints chunk lookups per second for the lookups alone and for the whole
          lookup + update loop. Target on one core: >= 5 M chunk lookups/s.
  replay  one LRU over the trace's stream of chunk accesses (every request's chunk keys in
          order): kvplan's LRU (`Cache.store`, a hit touches, a miss inserts and evicts) against a
          plain OrderedDict loop doing the same, in alternation, with the ratio pair by pair.
          Target: kvplan at least the speed of the plain loop.
  sim     the whole hierarchy with timing: examples/mooncake-replay.yaml on the full trace
          (two 8-GPU Llama-3.1-70B instances, ddr + nvme + ceph), at several ddr sizes; prints
          simulated requests per minute of wall time. Target: >= 50,000 requests/min.

Usage: python benchmarks/cache_replay.py [--trace PATH] [--part cache|replay|sim]
The trace defaults to ../shared/traces/mooncake_fast25/conversation_trace.jsonl beside the repo.
"""

from __future__ import annotations

import argparse
import gc
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
CHUNK = 256


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cache_part(trace: Path) -> None:
    from kvplan.sim.eviction import make
    from kvplan.sim.trace import read_trace

    reqs = read_trace(str(trace))
    keys = [r.content.keys(CHUNK, r.prompt_tokens) for r in reqs]
    gc.freeze()
    unique = len({k for ks in keys for k in ks})
    total = sum(len(ks) for ks in keys)
    print(f"trace: {len(reqs):,} requests, {total:,} chunk accesses, {unique:,} distinct chunks")
    print(f"{'capacity':>22} {'hit ratio':>10} {'lookups/s (prefix only)':>24} {'chunk ops/s (lookup+update)':>28}")
    for share in (0.01, 0.1, 0.5, 1.0):
        capacity = max(1, int(unique * share))
        cache = make("LRU", capacity)
        prefix, touch, insert = cache.prefix, cache.touch, cache.insert
        hits = looked = 0
        lookup_time = 0.0
        start = time.perf_counter()
        for ks in keys:
            t0 = time.perf_counter()
            n = prefix(ks)
            lookup_time += time.perf_counter() - t0
            looked += min(n + 1, len(ks))
            hits += n
            touch(ks[:n])
            for k in ks[n:]:
                insert(k, 1)
        elapsed = time.perf_counter() - start
        print(f"{capacity:>12,} chunks ({share:>4.0%}) {hits / total:>10.3f} {looked / lookup_time:>24,.0f} "
              f"{total / elapsed:>28,.0f}")
    # the lookup path alone, on a warm cache holding everything (the >= 5 M/s target)
    cache = make("LRU", unique)
    for ks in keys:
        for k in ks:
            cache.insert(k, 1)
    start = time.perf_counter()
    looked = sum(cache.prefix(ks) for ks in keys)
    elapsed = time.perf_counter() - start
    print(f"warm cache, every chunk held: {looked / elapsed:,.0f} chunk lookups/s")
    print(f"peak RSS: {peak_rss_mib():,.0f} MiB")


def plain_lru(stream: list, capacity: int) -> int:
    """The reference: an OrderedDict LRU loop over the stream; returns the hits."""
    from collections import OrderedDict

    d: OrderedDict = OrderedDict()
    hits = 0
    for k in stream:
        if k in d:
            d.move_to_end(k)
            hits += 1
        else:
            d[k] = 1
            if len(d) > capacity:
                d.popitem(last=False)
    return hits


def kvplan_lru(stream: list, capacity: int) -> int:
    from kvplan.sim.eviction import make

    stored, _ = make("LRU", capacity).store(stream, 1)
    return len(stream) - stored


def replay_part(trace: Path, pairs: int = 5) -> None:
    from kvplan.sim.trace import read_trace

    reqs = read_trace(str(trace))
    stream = [k for r in reqs for k in r.content.keys(CHUNK, r.prompt_tokens)]
    unique = len(set(stream))
    gc.freeze()
    print(f"stream: {len(stream):,} chunk accesses, {unique:,} distinct")
    for share in (0.1, 0.5):
        capacity = max(1, int(unique * share))
        ratios, plain_s, ours_s = [], [], []
        for _ in range(pairs):
            t0 = time.perf_counter()
            want = plain_lru(stream, capacity)
            t1 = time.perf_counter()
            got = kvplan_lru(stream, capacity)
            t2 = time.perf_counter()
            if got != want:
                sys.exit(f"kvplan's LRU found {got:,} hits, the plain loop {want:,}: they must agree")
            plain_s.append(t1 - t0)
            ours_s.append(t2 - t1)
            ratios.append((t1 - t0) / (t2 - t1))
        ratios.sort()
        print(f"capacity {share:>4.0%} ({capacity:,} chunks), hit ratio {want / len(stream):.3f}: plain loop "
              f"{len(stream) / min(plain_s) / 1e6:.2f} M/s, kvplan {len(stream) / min(ours_s) / 1e6:.2f} M/s; "
              f"kvplan speed / plain loop speed, pair by pair: median {ratios[len(ratios) // 2]:.2f} "
              f"({ratios[0]:.2f}-{ratios[-1]:.2f})")


def sim_part(trace: Path) -> None:
    from kvplan.resolve import resolve
    from kvplan.sim.run import run
    from kvplan.spec import from_mapping, read_yaml

    base = read_yaml(REPO / "examples" / "mooncake-replay.yaml")
    base["workload"]["trace"] = {"path": str(trace)}
    print(f"{'ddr per node':>14} {'requests':>9} {'wall s':>8} {'requests/min':>13} {'LMCache hit':>12} "
          f"{'ddr share':>10} {'recomputed':>11}")
    for ddr in ("256GiB", "1TiB", "4TiB"):
        base["lmcache"]["ddr"]["size"] = ddr
        resolved = resolve(from_mapping(base, base_dir=REPO / "examples"))
        start = time.perf_counter()
        result = run(resolved)
        elapsed = time.perf_counter() - start
        print(f"{ddr:>14} {result.requests:>9,} {elapsed:>8.1f} {result.requests / elapsed * 60:>13,.0f} "
              f"{result.lmcache_hit_ratio:>12.3f} {result.tier('ddr').served_share:>10.3f} "
              f"{result.recomputed_tokens / result.prompt_tokens:>11.3f}")
    print(f"peak RSS: {peak_rss_mib():,.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--part", choices=("cache", "replay", "sim"))
    args = parser.parse_args()
    if not args.trace.is_file():
        sys.exit(f"trace not found: {args.trace} (give --trace PATH)")
    if args.part == "cache":
        cache_part(args.trace)
    elif args.part == "replay":
        replay_part(args.trace)
    elif args.part == "sim":
        sim_part(args.trace)
    else:
        for part in ("cache", "replay", "sim"):
            print(f"== {part} ==", flush=True)
            subprocess.run([sys.executable, __file__, "--trace", str(args.trace), "--part", part], check=True)


if __name__ == "__main__":
    main()
