"""Vidur's profiling data for an offline run, written into Vidur's own cache (for vs_vidur.py).

Vidur 0.0.26 trains its step-time predictors on profiling tables that it fetches from Hugging Face
datasets (`project-vajra/dev-staging-meta-llama-llama-3-8b-h100` and `project-vajra/dev-staging-h100-dgx`
by default) with `huggingface_hub.snapshot_download` into `<cache_dir>/profiling_data/{compute,network}/`.
kvplan's development machines reach package registries only, so this writes those two datasets into
that cache in Hugging Face's layout (refs/main naming a snapshot), and Vidur, run with
HF_HUB_OFFLINE=1, reads them as if it had downloaded them.

What the tables hold, for Llama-3-70B (Vidur's model config `meta-llama/Llama-3-70B`: 80 layers, 64
query and 8 KV heads, 8,192 wide, a 28,672-wide gated MLP; Llama-3.1-70B's layer) on an H100 DGX:

- mlp.csv: Vidur's own H100 measurements of Llama-2-70B's layer operators (models/profiles/vidur/,
  microsoft/vidur at the commit SOURCE.yaml names; the same layer shapes as Llama-3-70B, and none
  of the kept operators involves the vocabulary), relabelled with Llama-3's vocabulary size.
- all_reduce.csv: Vidur's own h100_dgx all-reduce measurements (models/profiles/vidur/network/).
- attention.csv: a STAND-IN. Vidur keeps its attention tables in Git LFS, out of reach here, so
  each row is a roofline of one attention layer on one rank (the fleet's GPU as kvplan resolved it:
  H100-SXM's dense BF16 FLOP/s and HBM bandwidth from models/hardware/gpus.yaml) plus 10 us of
  launch, and 2 us to save the KV cache: prefill chunks of 32 to 4,096 tokens after
  0 to 131,072 cached ones, decode batches of 1 to 128 sequences. Vidur's run time depends on these
  numbers only through the schedule they produce (how many steps, how full), not through their
  values, which is why a timing comparison can use them; Vidur's predictions themselves are not
  compared with anything.
- send_recv.csv: one row (Vidur asks for it only with pipeline stages, and the run uses one).
"""

from __future__ import annotations

import csv
import io
import json
import lzma
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from kvplan.resolve import Resolved

PROFILES = Path(__file__).resolve().parent.parent / "models" / "profiles" / "vidur"
COMPUTE_DATASET = "project-vajra/dev-staging-meta-llama-llama-3-8b-h100"    # Vidur's defaults
NETWORK_DATASET = "project-vajra/dev-staging-h100-dgx"
MODEL, DEVICE, NETWORK = "meta-llama/Llama-3-70B", "h100", "h100_dgx"
LAYER = yaml.safe_load((PROFILES / "SOURCE.yaml").read_text())["models"]["Meta-Llama-3-70B"]
"""Vidur's layer dimensions of Llama-3-70B (its A100 profile's; the H100 tables below are Llama-2-70B's)."""
HEAD_DIM = LAYER["n_embd"] // LAYER["n_head"]
OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "input_layernorm",
       "attn_rope", "post_attention_layernorm", "mlp_act", "add")
LAUNCH_MS, SAVE_MS = 0.01, 0.002           # the stand-in's kernel launch and KV-cache save
SNAPSHOT = "0" * 40


def _dataset(cache: Path, kind: str, repo_id: str) -> Path:
    """A snapshot folder of `repo_id` in huggingface_hub's cache layout under Vidur's cache dir."""
    org, name = repo_id.split("/")
    root = cache / "profiling_data" / kind / f"datasets--{org}--{name}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(SNAPSHOT)
    snapshot = root / "snapshots" / SNAPSHOT
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def _write_xz(path: Path, header: list[str], rows: list[list]) -> None:
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(header)
    writer.writerows(rows)
    path.write_bytes(lzma.compress(text.getvalue().encode()))


def _attention_ms(fleet: Resolved, tokens: int, cached: int, sequences: int, tp: int) -> float:
    """Roofline of one attention layer on one rank of `fleet`'s GPU: `sequences` rows of `tokens` new tokens
    each attending `cached` earlier tokens (a prefill chunk: one sequence, tokens > 1; decode: tokens = 1)."""
    q_heads, kv_heads = LAYER["n_head"] // tp, max(1, LAYER["n_kv_head"] // tp)
    flops = 4 * sequences * tokens * (cached + tokens / 2) * HEAD_DIM * q_heads
    kv_bytes = 2 * 2 * sequences * (cached + tokens) * kv_heads * HEAD_DIM
    return max(flops / fleet.peak_flops, kv_bytes / fleet.hbm_bandwidth) * 1e3 + LAUNCH_MS


def attention_rows(fleet: Resolved) -> list[list]:
    rows = []
    for tp in (1, 2, 4, 8):
        for cached in [0] + [2 ** i for i in range(4, 18)]:
            for chunk in (2 ** i for i in range(5, 13)):
                rows.append([LAYER["n_embd"], LAYER["n_head"], LAYER["n_kv_head"], fleet.block_size, tp,
                             1, cached, chunk, _attention_ms(fleet, chunk, cached, 1, tp), "", SAVE_MS])
            for batch in (2 ** i for i in range(8)):
                rows.append([LAYER["n_embd"], LAYER["n_head"], LAYER["n_kv_head"], fleet.block_size, tp,
                             batch, cached, 0, "", _attention_ms(fleet, 1, cached, batch, tp), SAVE_MS])
    return rows


def write(cache: Path, fleet: Resolved) -> None:
    """Both datasets for kvplan's `fleet` (an H100 one), into Vidur's cache dir `cache` (its
    `..._config_cache_dir`)."""
    compute = _dataset(cache, "compute", COMPUTE_DATASET)
    (compute / "config.json").write_text(json.dumps({"model": MODEL, "device_sku": DEVICE}))
    with (PROFILES / "compute" / "h100" / "Llama-2-70b-hf.csv").open() as f:
        mlp = [[*LAYER.values(), r["tensor_parallel"], r["num_tokens"], *(r[f"{op}_ms"] for op in OPS)]
               for r in csv.DictReader(f)]
    _write_xz(compute / "mlp.csv.xz", [*LAYER, "num_tensor_parallel_workers", "num_tokens",
                                        *(f"time_stats.{op}.median" for op in OPS)], mlp)
    _write_xz(compute / "attention.csv.xz",
              ["n_embd", "n_q_head", "n_kv_head", "block_size", "num_tensor_parallel_workers", "batch_size",
               "kv_cache_size", "prefill_chunk_size", "time_stats.attn_prefill.median",
               "time_stats.attn_decode.median", "time_stats.attn_kv_cache_save.median"],
              attention_rows(fleet))
    network = _dataset(cache, "network", NETWORK_DATASET)
    (network / "config.json").write_text(json.dumps({"sku": NETWORK}))
    with (PROFILES / "network" / f"{NETWORK}.csv").open() as f:
        all_reduce = [[r["num_workers"], r["num_workers"], r["size_bytes"], "all_reduce", r["all_reduce_ms"]]
                      for r in csv.DictReader(f)]
    header = ["num_workers", "devices_per_node", "size", "collective"]
    _write_xz(network / "all_reduce.csv.xz", [*header, "time_stats.all_reduce.median"], all_reduce)
    _write_xz(network / "send_recv.csv.xz", [*header, "time_stats.send_recv.median"],
              [[2, 2, 2048, "send_recv", 0.01]])
