"""The design note's claims, simulated: prints the tables docs/claims.md shows (tests/test_claims.py checks them).

Run from the repository root: `python examples/claims/claims.py`. Every number comes from the specs
in this folder, the catalog and kvplan's simulator and cost model; nothing here is fitted to the note.
"""

from __future__ import annotations

import math
from pathlib import Path

from kvplan.cost import cost_of
from kvplan.resolve import resolve
from kvplan.sim.run import run
from kvplan.spec import from_mapping, load

HERE = Path(__file__).resolve().parent
SETUPS = [("PyTorch-like (no paging, no reuse)", "llama2-13b-pytorch.yaml", (12, 230, 28)),
          ("vLLM single node", "llama2-13b-vllm.yaml", (45, 85, 18)),
          ("vLLM + LMCache + Ceph", "llama2-13b-lmcache-ceph.yaml", (78, 48, 14))]
LIGHT_RATE = 0.4
"""New sessions per second for the latency column (about 1 request/s): every setup keeps up."""
CODEGEN_TOKENS = 30_000_000
"""'Tens of millions of tokens' of code-generation KV, held for reuse."""


def llama_rows() -> list[dict]:
    rows = []
    for label, file, note in SETUPS:
        topo = load(HERE / file)
        r = resolve(topo)
        saturated = run(r)
        light_topo = from_mapping({**topo.model_dump(mode="json"),
                                   "workload": {**topo.workload.model_dump(mode="json"),
                                                "arrivals": {"process": "poisson",
                                                             "session_rate" if topo.workload.sessions else "rate":
                                                             LIGHT_RATE}}})
        light = run(resolve(light_topo))
        kv_in_use = saturated.mean_block_utilisation * r.kv_budget_bytes_per_gpu
        rows.append({"setup": label, "note": note, "qps": saturated.requests_per_s,
                     "ttft_p50": light.ttft.p50, "tpot_p50": light.tpot.p50, "e2e_p50": light.e2e.p50,
                     "weights_gb": r.weight_bytes_per_gpu / 1e9, "kv_in_use_gb": kv_in_use / 1e9,
                     "reserved_gb": (r.weight_bytes_per_gpu + r.kv_budget_bytes_per_gpu) / 1e9,
                     "recomputed": saturated.recomputed_tokens / saturated.prompt_tokens})
    return rows


def codegen_rows() -> list[dict]:
    rows = []
    for label, file in (("all in DRAM", "codegen-all-in-dram.yaml"), ("tiered DRAM/NVMe/Ceph", "codegen-tiered.yaml")):
        topo = load(HERE / file)
        r = resolve(topo)
        cost = cost_of(topo, r)
        held = sum(t.capacity_tokens * t.caches for t in r.lmcache.tiers)
        kv = sum(t.usd_per_hour for t in cost.tiers if t.tier != "hbm")
        rows.append({"setup": label, "tokens_held": held, "kv_usd_h": kv, "gpu_usd_h": cost.tier("hbm").usd_per_hour,
                     "total_usd_h": cost.usd_per_hour})
    r = resolve(load(HERE / "codegen-tiered.yaml"))
    per_gpu_tokens = r.hbm_tokens / r.tensor_parallel        # KV tokens one GPU's HBM holds
    gpus = math.ceil(CODEGEN_TOKENS / per_gpu_tokens)
    rows.append({"setup": "all in GPU HBM", "tokens_held": gpus * per_gpu_tokens, "gpus": gpus,
                 "kv_usd_h": gpus * cost_of(load(HERE / "codegen-tiered.yaml"), r).tier("hbm").usd_per_unit_hour,
                 "gpu_usd_h": None, "total_usd_h": None})
    return rows


def main() -> None:
    print("Llama-2-13B on one A100-80GB: note's claim | kvplan")
    print(f"{'setup':<36}{'QPS':>11}{'TTFT p50':>16}{'TPOT p50':>10}{'memory GB':>18}{'recomp.':>9}")
    for row in llama_rows():
        q, lat, mem = row["note"]
        print(f"{row['setup']:<36}{q:>4} | {row['qps']:>4.1f}{lat:>6} | {1000 * row['ttft_p50']:>5.0f}ms"
              f"{1000 * row['tpot_p50']:>8.0f}ms{mem:>6} | {row['weights_gb']:.0f}+{row['kv_in_use_gb']:.0f}"
              f" of {row['reserved_gb']:.0f}{100 * row['recomputed']:>8.0f}%")
    print(f"\nHolding {CODEGEN_TOKENS / 1e6:.0f}M tokens of Llama-3.1-70B KV (4 x H100 TP4 serving), USD per hour")
    print(f"{'setup':<24}{'tokens held':>14}{'KV storage':>12}{'GPUs':>10}{'total':>10}")
    for row in codegen_rows():
        gpu = "" if row["gpu_usd_h"] is None else f"{row['gpu_usd_h']:.2f}"
        total = "" if row["total_usd_h"] is None else f"{row['total_usd_h']:.2f}"
        extra = f"  ({row['gpus']} GPUs of HBM for KV alone)" if "gpus" in row else ""
        print(f"{row['setup']:<24}{row['tokens_held'] / 1e6:>13.1f}M{row['kv_usd_h']:>12.2f}{gpu:>10}{total:>10}{extra}")


if __name__ == "__main__":
    main()
