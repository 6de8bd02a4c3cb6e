"""Benchmark: kvplan against Vidur on the Mooncake conversation trace, the two run in alternation.

kvplan simulates examples/mooncake-replay.yaml on the full trace (two 8-GPU Llama-3.1-70B
instances; `--like-vidur` turns off what Vidur does not model: vLLM's prefix cache and every
LMCache tier). Vidur runs as the command you give, in its own virtual environment; `{trace}` in
it is replaced by the trace written in Vidur's trace-replay format (a CSV with the columns Time,
PromptTokenCount, CompletionTokenCount: seconds from the start, prompt and output tokens).
Each pair runs kvplan then Vidur as whole processes (start-up included); the ratio Vidur
seconds / kvplan seconds is printed pair by pair, then its median and range.

Vidur needs its profiling data: Vidur 0.0.26 (PyPI) fetches it from Hugging Face datasets on
first use, and the GitHub repository (microsoft/vidur) keeps it under data/profiling (its
attention tables in Git LFS). Neither is reachable from kvplan's development machines, so no
figure from this script is recorded in benchmarks/README.md; benchmarks/README.md says how to run it.

Usage:
  python benchmarks/vs_vidur.py --vidur "/opt/vidur/bin/python -m vidur.main ... {trace} ..." [--pairs 3]
      [--like-vidur] [--trace PATH]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from paired import alternate

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"

KVPLAN_RUN = """
import sys
from pathlib import Path
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping, read_yaml

repo, trace, like_vidur = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
data = read_yaml(repo / "examples" / "mooncake-replay.yaml")
data["workload"]["trace"] = {"path": trace}
if like_vidur:                      # what Vidur does not model: no prefix cache, no KV tiers
    data["serving"]["prefix_caching"] = False
    data.pop("lmcache", None)
    data.pop("ceph", None)
result = run(resolve(from_mapping(data, base_dir=repo / "examples")))
print(f"kvplan: {result.requests} requests, TTFT p50 {result.ttft.p50:.3f} s")
"""


def vidur_trace(trace: Path, out: Path) -> int:
    """The Mooncake trace (timestamps in ms) as Vidur's trace-replay CSV; returns the number of requests."""
    rows = 0
    with trace.open() as src, out.open("w") as dst:
        dst.write("Time,PromptTokenCount,CompletionTokenCount\n")
        for line in src:
            if line.strip():
                r = json.loads(line)
                dst.write(f"{r['timestamp'] / 1000:.6f},{int(r['input_length'])},{max(1, int(r['output_length']))}\n")
                rows += 1
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vidur", required=True, help="Vidur's command line; {trace} is replaced by the CSV's path")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--like-vidur", action="store_true", help="kvplan without prefix cache and KV tiers")
    args = parser.parse_args()
    if not args.trace.is_file():
        sys.exit(f"trace not found: {args.trace} (give --trace PATH)")
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "mooncake_conversation_vidur.csv"
        n = vidur_trace(args.trace, csv)
        ours = [sys.executable, "-P", "-c", KVPLAN_RUN, str(REPO), str(args.trace), "1" if args.like_vidur else "0"]
        theirs = shlex.split(args.vidur.replace("{trace}", str(csv)))
        print(f"trace: {n:,} requests; kvplan {'like Vidur (no caches)' if args.like_vidur else 'full model'}")
        alternate(ours, theirs, "Vidur", args.pairs)


if __name__ == "__main__":
    main()
