"""Benchmark: the whole simulator (vLLM engines, LMCache tiers, links) on big workloads.

  trace   the whole Mooncake conversation trace (12,031 requests) on two 8-GPU
          Llama-3.1-70B instances with ddr, nvme and ceph (examples/mooncake-replay.yaml at the
          trace's own rate). Target on one core: >= 1,500 simulated requests per wall-second.
  chat    a 1,000,000-request synthetic chat run (examples/chat-llama2-13b.yaml scaled to 1 M
          requests). Target: < 2 GB peak RSS.

Each part runs in its own process so that its peak RSS is its own.
Usage: python benchmarks/simulate_trace.py [--trace PATH] [--part trace|chat] [--requests N]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"


def report(label: str, requests: int, elapsed: float) -> None:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{label}: {requests:,} requests in {elapsed:.1f} s wall = {requests / elapsed:,.0f} requests/s; "
          f"peak RSS {rss:,.0f} MiB", flush=True)


def simulate(data: dict, label: str) -> None:
    from kvplan.resolve import resolve
    from kvplan.sim.run import run
    from kvplan.spec import from_mapping
    from kvplan.units import fmt_duration

    resolved = resolve(from_mapping(data, base_dir=REPO / "examples"))
    start = time.perf_counter()
    result = run(resolved)
    elapsed = time.perf_counter() - start
    report(label, result.requests, elapsed)
    print(f"  simulated {fmt_duration(result.duration)}; TTFT p50 {fmt_duration(result.ttft.p50)}, "
          f"p99 {fmt_duration(result.ttft.p99)}; LMCache hit {result.lmcache_hit_ratio:.1%}; "
          f"preemptions {result.preemptions:,}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--part", choices=("trace", "chat"))
    parser.add_argument("--requests", type=int, default=1_000_000, help="requests in the chat run")
    args = parser.parse_args()
    from kvplan.spec import read_yaml

    if args.part == "trace":
        if not args.trace.is_file():
            sys.exit(f"trace not found: {args.trace} (give --trace PATH)")
        data = read_yaml(REPO / "examples" / "mooncake-replay.yaml")
        data["workload"]["trace"] = {"path": str(args.trace)}
        simulate(data, "Mooncake conversation trace, 2 x TP8 Llama-3.1-70B, all tiers")
    elif args.part == "chat":
        data = read_yaml(REPO / "examples" / "chat-llama2-13b.yaml")
        data["workload"]["requests"] = args.requests
        simulate(data, f"synthetic chat, {args.requests:,} requests")
    else:
        for part in ("trace", "chat"):
            subprocess.run([sys.executable, __file__, "--trace", str(args.trace), "--part", part,
                            "--requests", str(args.requests)], check=True)


if __name__ == "__main__":
    main()
