"""Benchmark: `kvplan size` on the whole Mooncake conversation trace (12,031 requests).

The spec is examples/mooncake-replay.yaml (two 8-GPU Llama-3.1-70B instances, ddr, nvme and ceph,
MP mode) reading the full trace instead of its 1,000-request excerpt: 9.3 M vLLM block references
(16-token blocks, outputs included) and 560 k LMCache chunk lookups (256-token chunks).

It prints the wall time of the command as a user runs it (`kvplan size SPEC`, a fresh process,
imports included), then the same work in-process split into its parts, and the peak RSS.
Usage: python benchmarks/size_trace.py [--trace PATH] [--runs N]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"


def spec_file(trace: Path, folder: Path) -> Path:
    from kvplan.spec import read_yaml

    data = read_yaml(REPO / "examples" / "mooncake-replay.yaml")
    data["workload"]["trace"]["path"] = str(trace.resolve())
    path = folder / "mooncake-full.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def command(spec: Path) -> float:
    kvplan = Path(sys.executable).parent / "kvplan"
    start = time.perf_counter()
    subprocess.run([str(kvplan), "size", str(spec), "--out", str(spec.with_suffix(".json"))], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def parts(spec: Path) -> None:
    from kvplan.resolve import resolve
    from kvplan.sim import workload as wl
    from kvplan.sizing import size, stack, view
    from kvplan.spec import load

    topo = load(spec)
    r = resolve(topo)
    t0 = time.perf_counter()
    reqs = wl.requests(r)
    t1 = time.perf_counter()
    streams = view._Streams(r, [], reqs)
    t2 = time.perf_counter()
    blocks = stack.needs(streams.block_stream())
    t3 = time.perf_counter()
    chunks = stack.needs(streams.chunk_stream())
    t4 = time.perf_counter()
    result = size(topo, r)
    t5 = time.perf_counter()
    print(f"  read the trace: {t1 - t0:.2f} s; block and chunk keys: {t2 - t1:.2f} s "
          f"({streams.block_stream().references:,} block references, {len(streams.chunk_stream().lookups):,} "
          f"chunk lookups)")
    print(f"  stack distances: blocks {t3 - t2:.2f} s (working set {blocks.distinct:,}), chunks {t4 - t3:.2f} s "
          f"(working set {chunks.distinct:,})")
    print(f"  the whole size() again, replays as configured included: {t5 - t4:.2f} s")
    for t in result.tiers:
        c = t.configured
        print(f"  {t.tier}: {t.method}; max {t.max_hit_ratio:.1%}; 90 % at {t.targets[1].capacity_bytes / 1e12:.2f} TB; "
              f"configured {c.hit_ratio:.1%}" + (f", replayed {c.simulated_hit_ratio:.1%}"
                                                 if c.simulated_hit_ratio is not None else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--runs", type=int, default=3, help="runs of the command (the best and worst are printed)")
    args = parser.parse_args()
    if not args.trace.is_file():
        sys.exit(f"trace not found: {args.trace} (give --trace PATH)")
    with tempfile.TemporaryDirectory() as tmp:
        spec = spec_file(args.trace, Path(tmp))
        times = [command(spec) for _ in range(args.runs)]
        print(f"kvplan size, full Mooncake conversation trace (12,031 requests), {args.runs} run(s): "
              f"{min(times):.1f}-{max(times):.1f} s wall")
        parts(spec)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"  peak RSS: the command {child:,.0f} MiB, in-process {rss:,.0f} MiB")


if __name__ == "__main__":
    main()
