"""Benchmark: what a warm start (workload.warm_start, kvplan.sim.warm) costs and what it changes, on the shipped
examples whose workload can start warm.

For each example, shortened to --requests requests: the warm-up alone (its wall time, the requests and bytes that
warmed each tier), then a cold and a warm run of the same requests (wall time, each tier's steady-state verdict and
token hit ratio, and how much simulated traffic a cold run would need to fill the tier).

Usage: python benchmarks/warm_start.py [--requests N] [--example NAME ...]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = ("chat-llama2-13b", "codegen-70b", "cluster")


def main() -> None:
    from kvplan.resolve import resolve
    from kvplan.sim import warm
    from kvplan.sim.run import Simulation, run
    from kvplan.spec import load
    from kvplan.units import fmt_bytes, fmt_duration

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--example", action="append", default=None)
    args = parser.parse_args()
    for name in args.example or EXAMPLES:
        topo = load(REPO / "examples" / f"{name}.yaml")
        if topo.workload.kind not in ("chat", "codegen", "rag") or topo.workload.stages is not None:
            print(f"{name}: a {topo.workload.kind} workload cannot start warm; skipped")
            continue
        runs = {}
        for warm_start in (False, True):
            changed = topo.workload.model_copy(update={"requests": args.requests, "warm_start": warm_start})
            runs[warm_start] = resolve(topo.model_copy(update={"workload": changed}))
        sim = Simulation(runs[True])
        start = time.perf_counter()
        tiers, clock = warm.fill(sim, sim.seed)
        fill_s = time.perf_counter() - start
        print(f"{name} ({args.requests:,} requests): warm-up {fill_s:.1f} s wall, {fmt_duration(clock)} of traffic")
        for w in tiers:
            print(f"  {w.tier:5} {w.requests:>9,} warm-up requests wrote {fmt_bytes(w.bytes_written):>10} into "
                  f"{fmt_bytes(w.capacity_bytes):>10}, {w.used_bytes / w.capacity_bytes:6.1%} full: {w.reason}")
        results = {}
        for warm_start, resolved in runs.items():
            start = time.perf_counter()
            results[warm_start] = run(resolved)
            print(f"  {'warm' if warm_start else 'cold'} run {time.perf_counter() - start:.1f} s wall, "
                  f"{results[warm_start].requests:,} requests, {fmt_duration(results[warm_start].duration)} simulated")
        cold, hot = results[False], results[True]
        for c, h in zip(cold.steady_state, hot.steady_state):
            need = fmt_duration(c.time_to_steady_s) if c.time_to_steady_s else "-"
            print(f"  {c.tier:5} steady cold {str(c.steady):5} warm {str(h.steady):5}; token hit ratio cold "
                  f"{cold.tier(c.tier).token_hit_ratio:6.1%} warm {hot.tier(c.tier).token_hit_ratio:6.1%}; a cold run "
                  f"needs about {need} of traffic")
        print(f"  TTFT p99 cold {cold.ttft.p99 * 1000:.1f} ms, warm {hot.ttft.p99 * 1000:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
