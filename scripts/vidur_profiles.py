"""Extract the GPU measurements kvplan fits its step-time model to from a microsoft/vidur checkout.

    python scripts/vidur_profiles.py <vidur git dir> [<commit>]

reads data/profiling/compute/{a100,h100}/*/*/mlp.csv (per-layer operator timings by token count and
tensor-parallel degree) and data/profiling/network/*/all_reduce.csv at the commit (default HEAD) with
`git show`, keeps the median columns kvplan uses, and writes them under models/profiles/vidur/ with
SOURCE.yaml naming the commit. Rerunning it on the same commit rewrites the same files.
"""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import yaml

OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
       "input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add")
DIMS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")
GPUS = ("a100", "h100")
MAX_TOKENS = 8192
SKIPPED = {"phi-2": "parallel attention and an ungated GELU MLP: not the Llama-style layer kvplan's step model counts"}
OUT = Path(__file__).resolve().parent.parent / "models" / "profiles" / "vidur"


def git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, *args], check=True, capture_output=True, text=True).stdout


def rows(repo: str, commit: str, path: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(git(repo, "show", f"{commit}:{path}"))))


def write_csv(path: Path, header: list[str], body: list[list]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        w.writerows(body)


def main(repo: str, commit: str = "HEAD") -> None:
    sha = git(repo, "rev-parse", commit).strip()
    files = git(repo, "ls-tree", "-r", "--name-only", sha, "data/profiling").split()
    models: dict[str, dict] = {}
    for path in sorted(f for f in files if f.endswith("/mlp.csv") and f.split("/")[3] in GPUS):
        gpu, model = path.split("/")[3], path.split("/")[5]
        if model in SKIPPED:
            continue
        table = rows(repo, sha, path)
        body = sorted([int(r["num_tokens"]), int(r["num_tensor_parallel_workers"]),
                       *(round(float(r[f"time_stats.{op}.median"]), 4) if f"time_stats.{op}.median" in r else ""
                         for op in OPS)]
                      for r in table if int(r["num_tokens"]) <= MAX_TOKENS)
        write_csv(OUT / "compute" / gpu / f"{model}.csv", ["num_tokens", "tensor_parallel", *(f"{op}_ms" for op in OPS)], body)
        first = table[0]
        models[model] = {k: (first[k] == "True" if k == "use_gated_mlp" else int(first[k])) for k in DIMS}
    for path in sorted(f for f in files if f.endswith("/all_reduce.csv")):
        net = path.split("/")[3]
        body = sorted([int(r["num_workers"]), int(r["size"]), round(float(r["time_stats.all_reduce.median"]), 4)]
                      for r in rows(repo, sha, path) if r["rank"] == "0")
        write_csv(OUT / "network" / f"{net}.csv", ["num_workers", "size_bytes", "all_reduce_ms"], body)
    date = git(repo, "show", "-s", "--format=%cs", sha).strip()
    source = {"repository": "https://github.com/microsoft/vidur", "commit": sha, "commit_date": date,
              "licence": "MIT (Copyright (c) Microsoft Corporation); the notice is in LICENSE beside this file",
              "paths": ["data/profiling/compute/{a100,h100}/<org>/<model>/mlp.csv", "data/profiling/network/<net>/all_reduce.csv"],
              "kept": {"compute": f"rows with num_tokens <= {MAX_TOKENS}; num_tokens, num_tensor_parallel_workers and the median "
                                  "(ms, one layer on one rank) of each operator; an operator the file lacks is left empty",
                       "network": "rank 0's rows: num_workers, size (bytes) and the median all-reduce time (ms)"},
              "skipped": SKIPPED, "models": models}
    (OUT / "SOURCE.yaml").write_text("# Written by scripts/vidur_profiles.py; do not edit by hand.\n"
                                     + yaml.safe_dump(source, sort_keys=False, width=120))
    (OUT / "LICENSE").write_text(git(repo, "show", f"{sha}:LICENSE"))


if __name__ == "__main__":
    main(*sys.argv[1:])
