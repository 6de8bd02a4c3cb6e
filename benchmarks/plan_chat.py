"""Benchmark: `kvplan plan` on the chat example, as a user runs it (a fresh process, imports included).

The spec is examples/chat-llama2-13b.yaml (5,000 requests of multi-turn chat), planned at 4 req/s
against its SLO. Two figures, each against issue 19's target:

- cold: `--no-cache`, every candidate the search needs is simulated (target: 30 s on 2 cores);
- repeated: the same command with a run cache the first run filled (target: 3 s).

Each run's wall time, the runs the plan made (from its `--json` output) and the peak RSS of the
largest process are printed; quote the medians.
Usage: python benchmarks/plan_chat.py [--runs N] [--rate R]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "chat-llama2-13b.yaml"
TARGETS = {"cold": 30.0, "repeated": 3.0}


def plan_once(rate: str, cache: list[str]) -> tuple[float, dict]:
    kvplan = Path(sys.executable).parent / "kvplan"
    start = time.perf_counter()
    done = subprocess.run([str(kvplan), "plan", str(SPEC), "--rate", rate, "--json", *cache],
                          check=True, capture_output=True, text=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of each kind (default 3)")
    ap.add_argument("--rate", default="4/s", help="the planned rate (default 4/s)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvplan-plan-bench-") as cache_dir:
        plan_once(args.rate, ["--cache-dir", cache_dir])           # fills the cache for the repeated runs
        for kind, cache in (("cold", ["--no-cache"]), ("repeated", ["--cache-dir", cache_dir])):
            walls = []
            for _ in range(args.runs):
                wall, result = plan_once(args.rate, cache)
                walls.append(wall)
                print(f"{kind:<9} {wall:7.2f} s  {result['simulations']} runs  winner #{result['winner']}", flush=True)
            median = statistics.median(walls)
            verdict = "met" if median <= TARGETS[kind] else "NOT met"
            print(f"{kind:<9} median {median:.2f} s (min {min(walls):.2f}, max {max(walls):.2f}) of {args.runs}; "
                  f"target {TARGETS[kind]:g} s: {verdict}", flush=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS of the largest plan process: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
