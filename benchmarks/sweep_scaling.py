"""Benchmark: sweep throughput on one process, on a local process pool and on a local Ray cluster.

A 32-point sweep of examples/local.yaml (serving.max_num_seqs x workload.arrivals.rate, 4 x 8
points, `--requests` requests each, a couple of seconds a point) runs through `run_tasks` in this
process, on 2 worker processes and on a local Ray cluster of 2 CPUs, and prints points per
minute, the speed-up over one process and whether every executor gave byte-identical results.
Start-up (spawning workers, starting Ray) is included: it is what a user waits for.

Usage: python benchmarks/sweep_scaling.py [--requests N] [--workers N] [--no-ray]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SEQS = (4, 8, 16, 32)
RATES = ("0.5/s", "1/s", "1.5/s", "2/s", "2.5/s", "3/s", "3.5/s", "4/s")


def tasks(requests: int):
    from kvplan.spec import read_yaml
    from kvplan.sweep.executor import Task
    from kvplan.sweep.variants import expand, parse_vary

    data = read_yaml(REPO / "examples" / "local.yaml")
    data["workload"]["requests"] = requests
    varies = [parse_vary("serving.max_num_seqs=" + ",".join(map(str, SEQS))),
              parse_vary("workload.arrivals.rate=" + ",".join(RATES))]
    return [Task(v.spec, 1) for v in expand(data, varies, base_dir=REPO / "examples")]


def timed(label: str, run, n: int, baseline: float | None) -> tuple[float, list[str]]:
    start = time.perf_counter()
    results = run()
    elapsed = time.perf_counter() - start
    speedup = f"; speed-up x{baseline / elapsed:.2f}" if baseline else ""
    print(f"{label:<24} {n} points in {elapsed:6.1f} s = {60 * n / elapsed:6.1f} points/min{speedup}", flush=True)
    return elapsed, [r.model_dump_json() for r in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10000, help="requests per point (default 10000)")
    parser.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray cluster")
    args = parser.parse_args()

    from kvplan.sweep.executor import run_tasks

    work = tasks(args.requests)
    n = len(work)
    print(f"{n} points of examples/local.yaml, {args.requests} requests each; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.2f} at the start", flush=True)
    one, reference = timed("1 process", lambda: run_tasks(work), n, None)
    _, pooled = timed(f"{args.workers} worker processes", lambda: run_tasks(work, workers=args.workers), n, one)
    same = [pooled == reference]
    if not args.no_ray:
        import ray

        def on_ray():                          # starting the cluster is part of what the user waits for
            ray.init(address="local", num_cpus=args.workers, include_dashboard=False, log_to_driver=False,
                     logging_level="WARNING")
            return run_tasks(work, ray="auto")
        try:
            _, rayed = timed(f"Ray, {args.workers} CPUs", on_ray, n, one)
        finally:
            ray.shutdown()
        same.append(rayed == reference)
    print(f"results byte-identical to the single process: {all(same)}; "
          f"load average {os.getloadavg()[0]:.2f} at the end", flush=True)


if __name__ == "__main__":
    main()
