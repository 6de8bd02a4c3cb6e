"""Benchmark: kvplan against Vidur on the Mooncake conversation trace, the two run in alternation.

kvplan simulates examples/mooncake-replay.yaml on the full trace (two 8-GPU Llama-3.1-70B
instances, every tier, the example's time scale; `--like-vidur` turns off what Vidur does not
model: vLLM's prefix cache and every LMCache tier). Vidur 0.0.26 (`vidur.main`, in its own virtual
environment) replays the same trace in its trace-replay format (a CSV of Date, Time,
PromptTokenCount, CompletionTokenCount: seconds from the start, prompt and output tokens) on as
many replicas of the same tensor-parallel degree, Vidur's `meta-llama/Llama-3-70B` (Llama-3.1-70B's
layer) on H100 DGX, its Sarathi scheduler (vLLM's chunked prefill) with kvplan's step budget and
sequence cap, one pipeline stage, the same block size and time scale.

Vidur trains its step-time predictors on first use and keeps them, and their predictions, in its
cache dir (`--cache`); the script runs Vidur once untimed to fill it, then runs kvplan and Vidur
`--pairs` times, each a whole process (start-up included), and prints Vidur seconds / kvplan
seconds pair by pair, then its median and range.

Vidur fetches its profiling data from Hugging Face. `--offline` writes it into the cache instead
and runs Vidur with HF_HUB_OFFLINE=1 (`vidur_offline.py` says what the tables hold: Vidur's own
layer and all-reduce measurements, and a roofline stand-in for its attention tables, which are out
of reach here).

Usage:
  python3 -m venv /opt/vidur && /opt/vidur/bin/pip install vidur==0.0.26
  python benchmarks/vs_vidur.py --vidur-python /opt/vidur/bin/python [--offline] [--pairs 3]
      [--like-vidur] [--trace PATH] [--cache DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))     # its sibling modules, also under `python -P`
import vidur_offline  # noqa: E402
from paired import alternate, timed  # noqa: E402

from kvplan.resolve import Resolved, resolve  # noqa: E402
from kvplan.spec import from_mapping, read_yaml  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_fast25" / "conversation_trace.jsonl"
EXAMPLE = REPO / "examples" / "mooncake-replay.yaml"
DATE = "2023-08-21"                  # Vidur replays the rows of one Date; any, the same on every row
MAX_TOKENS = 131072                  # Vidur's prediction tables and trace cap: above the longest request

KVPLAN_RUN = """
import sys
from pathlib import Path
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping, read_yaml

example, trace, like_vidur = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
data = read_yaml(example)
data["workload"]["trace"]["path"] = trace
if like_vidur:                      # what Vidur does not model: no prefix cache, no KV tiers
    data["serving"]["prefix_caching"] = False
    data.pop("lmcache", None)
    data.pop("ceph", None)
result = run(resolve(from_mapping(data, base_dir=example.parent)))
print(f"kvplan: {result.requests} requests, TTFT p50 {result.ttft.p50:.3f} s")
"""


def vidur_trace(trace: Path, out: Path) -> tuple[int, int]:
    """The Mooncake trace (timestamps in ms) as Vidur's trace-replay CSV; returns the number of
    requests and the longest one in tokens."""
    rows = longest = 0
    with trace.open() as src, out.open("w") as dst:
        dst.write("Date,Time,PromptTokenCount,CompletionTokenCount\n")
        for line in src:
            if line.strip():
                r = json.loads(line)
                prompt, output = int(r["input_length"]), max(1, int(r["output_length"]))
                dst.write(f"{DATE},{r['timestamp'] / 1000:.6f},{prompt},{output}\n")
                rows += 1
                longest = max(longest, prompt + output)
    return rows, longest


def vidur_command(python: str, fleet: Resolved, csv: Path, cache: Path, out: Path, offline: bool) -> list[str]:
    """Vidur's run of kvplan's `fleet` on `csv`: its Sarathi scheduler (vLLM's chunked prefill) with
    vLLM's step budget, sequence cap and memory share as kvplan resolved them. Vidur's default outputs
    but two: its request, batch and utilisation metrics are written, its Chrome trace and plots not."""
    predictor = "--random_forrest_execution_time_predictor_config_"
    env = ["env", "WANDB_MODE=disabled"] + (["HF_HUB_OFFLINE=1"] if offline else [])
    return env + [
        python, "-m", "vidur.main",
        "--cluster_config_num_replicas", str(fleet.instances),
        "--replica_config_model_name", vidur_offline.MODEL,
        "--replica_config_device", vidur_offline.DEVICE,
        "--replica_config_network_device", vidur_offline.NETWORK,
        "--replica_config_tensor_parallel_size", str(fleet.tensor_parallel),
        "--replica_config_num_pipeline_stages", "1",
        "--replica_config_gpu_memory_utilization", str(fleet.gpu_memory_utilization),
        "--replica_scheduler_config_type", "sarathi",
        "--sarathi_scheduler_config_chunk_size", str(fleet.max_num_batched_tokens),
        "--sarathi_scheduler_config_batch_size_cap", str(fleet.max_num_seqs),
        "--cache_config_block_size", str(fleet.block_size),
        "--request_generator_config_type", "trace_replay",
        "--trace_request_generator_config_trace_file", str(csv),
        "--trace_request_generator_config_date", DATE,
        "--trace_request_generator_config_max_tokens", str(MAX_TOKENS),
        "--trace_request_generator_config_time_scale_factor", str(fleet.workload.trace.time_scale),
        f"{predictor}cache_dir", str(cache),
        f"{predictor}prediction_max_tokens_per_request", str(MAX_TOKENS),
        f"{predictor}prediction_max_batch_size", str(fleet.max_num_seqs),
        f"{predictor}prediction_max_prefill_chunk_size", str(fleet.max_num_batched_tokens),
        "--metrics_config_output_dir", str(out),
        "--no-metrics_config_enable_chrome_trace",   # a 258 MB debugging trace and plots: kvplan
        "--no-metrics_config_store_plots",           # `simulate` writes neither
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vidur-python", required=True, help="the Python of the venv Vidur 0.0.26 is installed in")
    parser.add_argument("--offline", action="store_true",
                        help="write Vidur's profiling data into its cache (vidur_offline.py) instead of fetching it")
    parser.add_argument("--cache", type=Path, default=Path(".vidur_cache"),
                        help="Vidur's cache dir: its trained predictors are kept there between runs")
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--like-vidur", action="store_true", help="kvplan without prefix cache and KV tiers")
    args = parser.parse_args()
    if not args.trace.is_file():
        sys.exit(f"trace not found: {args.trace} (give --trace PATH)")
    cache = args.cache.resolve()
    with tempfile.TemporaryDirectory() as tmp:
        csv = Path(tmp) / "mooncake_conversation_vidur.csv"
        n, longest = vidur_trace(args.trace, csv)
        if longest > MAX_TOKENS:
            sys.exit(f"the trace's longest request has {longest:,} tokens; Vidur's tables here stop at {MAX_TOKENS:,}")
        fleet = resolve(from_mapping(read_yaml(EXAMPLE), base_dir=EXAMPLE.parent))
        if args.offline:
            vidur_offline.write(cache, fleet)
        ours = [sys.executable, "-P", "-c", KVPLAN_RUN, str(EXAMPLE), str(args.trace), "1" if args.like_vidur else "0"]
        theirs = vidur_command(args.vidur_python, fleet, csv, cache, Path(tmp) / "vidur-out", args.offline)
        print(f"trace: {n:,} requests; kvplan {'like Vidur (no caches)' if args.like_vidur else 'full model'}")
        print(f"Vidur's first run (trains or loads its predictors into {cache}, not timed in the pairs): "
              f"{timed(theirs):.1f} s", flush=True)
        alternate(ours, theirs, "Vidur", args.pairs)


if __name__ == "__main__":
    main()
