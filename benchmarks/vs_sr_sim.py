"""Benchmark: kvplan against vllm-sr-sim on the same chat workload, the two run in alternation.

kvplan simulates examples/chat-llama2-13b.yaml with `--requests` requests (100,000 by default):
four A100-80GB instances, vLLM's prefix cache, DDR, NVMe and Ceph tiers, iteration-level
scheduling. vllm-sr-sim (the vLLM Semantic Router's fleet simulator, a request-level queue model
without prefix cache or KV tiers) runs as the command you give, in its own virtual environment;
its workload is the same one as far as it can take it: the same number of requests, the same
mean arrival rate, and an empirical CDF of the very requests kvplan draws (prompt + output tokens,
the format vllm-sr-sim reads), served by one pool of as many A100s as kvplan has instances.
`--caches` says how much of the example's cache hierarchy kvplan keeps, one layer more at each level:
none (what vllm-sr-sim models: no prefix cache, LMCache or Ceph; `--no-caches` is the same), prefix
(vLLM's prefix cache), ddr, nvme, all (the example as it is, Ceph too); run at each level, it tells what
each layer costs against the same peer.
`--instances 50` makes it a fleet of 50 A100s at 12.5 times the example's arrival rate (each GPU
keeps the example's load): kvplan simulates every instance's scheduler, vllm-sr-sim one pool.

Each pair runs kvplan then vllm-sr-sim as whole processes (start-up included); the speed ratio
vllm-sr-sim seconds / kvplan seconds (above 1: kvplan is faster) is printed pair by pair, then its
median and range.

Usage:
  python -m venv /opt/srsim && /opt/srsim/bin/pip install vllm-sr-sim
  python benchmarks/vs_sr_sim.py --sr-sim /opt/srsim/bin/vllm-sr-sim [--pairs 3] [--requests N]
      [--caches none|prefix|ddr|nvme|all | --no-caches] [--instances N]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))     # its sibling modules, also under `python -P`
from paired import alternate  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "chat-llama2-13b.yaml"
CDF_POINTS = 200                                  # as vllm-sr-sim's data/README.md builds a CDF
CACHES = {"none": "without caches", "prefix": "with vLLM's prefix cache only", "ddr": "with the prefix cache and DDR",
          "nvme": "with the prefix cache, DDR and NVMe", "all": "full model"}
"""How much of the cache hierarchy kvplan keeps (--caches), each level one layer more than the one before."""
LEVELS = tuple(CACHES)


def chat_spec(requests: int, caches: str, instances: int | None = None) -> dict:
    spec = yaml.safe_load(SPEC.read_text())
    spec["workload"]["requests"] = requests
    if instances is not None:                     # a fleet: each GPU keeps the example's load
        arrivals, serving = spec["workload"]["arrivals"], spec["serving"]
        rate, unit = arrivals["rate"].split("/")
        arrivals["rate"] = f"{float(rate) * instances / serving['instances']:g}/{unit}"
        serving["instances"] = instances

    def without(level: str) -> bool:             # the layer `level` adds is not kept
        return LEVELS.index(caches) < LEVELS.index(level)

    if without("all"):                            # Ceph: its tier and its cluster
        spec.pop("ceph", None)
        spec["lmcache"].pop("ceph", None)
    if without("nvme"):
        spec["lmcache"].pop("nvme", None)
    if without("ddr"):                            # no LMCache at all
        spec.pop("lmcache")
    if without("prefix"):                         # what vllm-sr-sim models
        spec["serving"]["prefix_caching"] = False
    return spec


def workload_of(spec: dict) -> tuple[list[list[float]], float, int, int]:
    """kvplan's drawn requests as vllm-sr-sim takes a workload: (CDF of prompt + output tokens, mean
    arrivals per second, requests, instances)."""
    from kvplan.resolve import resolve
    from kvplan.sim import workload
    from kvplan.spec import from_mapping

    r = resolve(from_mapping(spec, base_dir=SPEC.parent))
    reqs = workload.stream(r)
    lengths = sorted(req.prompt_tokens + req.output_tokens for req in reqs)
    n = len(lengths)
    step = max(1, n // CDF_POINTS)
    cdf = [[int(lengths[i]), (i + 1) / n] for i in range(step - 1, n, step)]
    if cdf[-1][1] < 1.0:
        cdf.append([int(lengths[-1]), 1.0])
    return cdf, n / reqs.last_arrival, n, r.instances


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sr-sim", required=True, help="the vllm-sr-sim executable (in its own venv)")
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--caches", choices=LEVELS, default="all",
                        help="how much of the cache hierarchy kvplan keeps (default: all of the example's)")
    parser.add_argument("--no-caches", action="store_true", help="kvplan without prefix cache and KV tiers "
                        "(--caches none)")
    parser.add_argument("--instances", type=int, help="a fleet of this many A100s (one per node), the arrival rate "
                        "scaled with it so that each keeps the example's load (default: the example's 4)")
    args = parser.parse_args()
    caches = "none" if args.no_caches else args.caches
    spec = chat_spec(args.requests, caches, args.instances)
    cdf, rate, n, instances = workload_of(spec)
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, cdf_path = Path(tmp) / "chat.yaml", Path(tmp) / "chat_cdf.json"
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        cdf_path.write_text(json.dumps(cdf))
        longest = cdf[-1][0]
        ours = [sys.executable, "-P", "-m", "kvplan", "simulate", str(spec_path)]
        theirs = [args.sr_sim, "simulate", "--cdf", str(cdf_path), "--lam", f"{rate:.6f}", "--n-s", str(instances),
                  "--n-l", "0", "--b-short", str(longest), "--gpu-short", "a100", "--n-req", str(n)]
        print(f"chat: {n:,} requests at {rate:.3f}/s on {instances} A100s, prompt + output tokens up to {longest:,}; "
              f"kvplan {CACHES[caches]}\n"
              f"  kvplan: {shlex.join(ours)}\n  vllm-sr-sim: {shlex.join(theirs)}", flush=True)
        alternate(ours, theirs, "vllm-sr-sim", args.pairs)


if __name__ == "__main__":
    main()
