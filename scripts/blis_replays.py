"""Turn the BLIS project's sixteen real vLLM runs into replay logs kvplan simulates, and their measured figures.

    python scripts/blis_replays.py <folder>

<folder> holds feb16_per_request.csv.gz and feb16_aggregate_bundle.json as /work/shared/traces/
blis_vllm_ground_truth/ has them (its README says where they come from; the files' sha256 are checked against it
here). For each usable run the script writes models/profiles/e2e/blis/<experiment>.jsonl.gz, a per-request log in
the format kind: replay reads (kvplan.sim.replay), and it writes runs.yaml (each run's configuration and its measured
TTFT and E2E per load stage and over the run, with inference-perf's own summaries) and SOURCE.yaml. Rerunning it
on the same files rewrites the same bytes.

How a request of the CSV becomes a line of the log:

- arrival: arrival_time_us / 10^6, seconds from the run's first request.
- output_tokens: the config's output_len. The server ran with ignore_eos, so every request generated exactly that;
  the CSV's output_tokens_reported is inference-perf's re-tokenised count and is not used.
- prompt_tokens: input_tokens, the prompt length vLLM measured (4-5 % above system_prompt_len + question_len: the
  random token ids are decoded to text and tokenised again).
- prompt: which of the groups x prompts prompts it sent. inference-perf's generator sends request k of each load
  stage the prompt k mod (groups x prompts) of one fixed order (kvplan/sim/shapes.py cites its source). The CSV
  orders requests by the time they were sent, in which requests scheduled a few microseconds apart sometimes trade
  places (1 to 2 % of them); such a request is put back on the nearest free place within SWAP_WINDOW whose prompt
  has its measured length (each place's prompt length is the one most of its sends measured). Every request must
  find one, and every place is filled once; the script stops otherwise. Two prompts of the same length that traded
  places cannot be told apart, which changes nothing the simulator sees but which of two equally long prompts came
  first.
- stage, ttft, e2e: the load stage the request was sent in (the stages follow each other: a stage's requests
  are the rows after the previous stage's rate x duration), and its measured TTFT and E2E (ttft_s, e2e_s), so a
  log carries what `kvplan calibrate --requests` fits to.
- prefix, prefix_tokens: the group whose system prompt the prompt starts with, and how many tokens of it. The log
  does not say which prompts share a system prompt (inference-perf shuffled them with an unseeded random.shuffle),
  so the groups are a reconstruction: a permutation drawn from GROUP_SEED cuts the prompts into num_groups groups
  of num_prompts_per_group. A group's system prompt is system_prompt_len tokens re-tokenised as its prompts were:
  round(system_prompt_len x the mean of measured / (system_prompt_len + question_len) over the group's prompts).

The four `reasoning` runs are left out: they overloaded the server (most requests timed out after about 300 s
without a first token, has_error = 1), so they measure the timeout, not the serving.

Measured figures: TTFT and E2E from the CSV (mean, p50, p90, p99, numpy's linear percentiles) per load stage (the
stages follow each other: a stage's requests are the rows after the previous stage's rate x duration) and over the
run; inference-perf's per-stage and summary figures as it printed them (seconds). Its output_len, TPOT, ITL and
output throughput count re-tokenised output (the CSV's output_tokens_reported), so they undercount.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import yaml

from kvplan.catalog import load_catalog

OUT = Path(__file__).resolve().parent.parent / "models" / "profiles" / "e2e" / "blis"
SHA256 = {"feb16_per_request.csv.gz": "cdd0701bb39033a4281a7f674e3dd7e2b2981a1ebea5d22e61eebd0873ae6285",
          "feb16_aggregate_bundle.json": "77e2969b532243075929bb7164296758ec34b9a39a0720919cb812fb3f14efa6"}
"""The files as the shared folder's README lists them."""
SOURCE = {
    "repository": "https://github.com/inference-sim/training",
    "licence": "Apache-2.0 (the source repository's licence; its text is in LICENSE beside this file)",
    "files": {
        "feb16_per_request.csv.gz": {
            "commit": "c4f03409b4489891482bcd63797cfe3a92fc262d",
            "paths": "replay_data/<exp>.json and replay_data/<exp>_ground_truth.json, 16 experiments, joined on index "
                     "into one CSV (151,200 rows; latencies rounded to 1 us)"},
        "feb16_aggregate_bundle.json": {
            "commit": "ed5c1d26900e6909758d5e1641a18edaf56a1caf",
            "paths": "default_args/<exp>/{exp-config.yaml, profile.yaml, results/config.yaml, "
                     "results/*_lifecycle_metrics.json} plus the config block of replay_data/<exp>.json, keyed by "
                     "experiment (a private server address and a run-local path redacted)"}},
    "hardware": "NVIDIA H100-80GB-HBM3 (SXM), one vLLM instance per run",
    "serving": "vLLM V1 (a 2026-02 build with request tracing): max_num_seqs 128, max_model_len 4096, "
               "max_num_batched_tokens 2048, prefix caching and chunked prefill on, block size 16, streaming "
               "completions with ignore_eos; vLLM's native CPU offloading on with 8 GiB (its tier receives stores "
               "but almost no hits in these runs)",
    "load_generator": "kubernetes-sigs/inference-perf at commit e8e0aa99c57f2ffa0912df7ba1fbd2a8a596a041, data type "
                      "shared_prefix, load type constant",
}
DERIVATION = ("One log line per CSV row of a run, in the CSV's order. arrival = arrival_time_us / 10^6; "
              "output_tokens = the config's output_len (ignore_eos: every request generated all of it; "
              "output_tokens_reported is re-tokenised and not used); prompt_tokens = input_tokens (vLLM's measured "
              "prompt length). prompt = k mod 100 for request k of its load stage (inference-perf's send order), "
              "corrected where two requests sent "
              "microseconds apart traded places (the nearest free place within swap_window whose prompt has the "
              "request's measured length). prefix = the prompt's group, drawn from group_seed because the records do "
              "not say which prompts share a system prompt (a reconstruction); prefix_tokens = round(system_prompt_len "
              "x the group's mean measured / configured prompt length). stage = the load stage (rate x duration rows "
              "each, in order); ttft, e2e = ttft_s, e2e_s as measured. The four reasoning runs are left out.")
"""What SOURCE.yaml says of how the logs were made (the module docstring says it at length)."""
GPU = "H100-SXM"
LEFT_OUT = {"reasoning": "the server was overloaded: most requests timed out after about 300 s without a first token "
                         "(has_error = 1), so the run measures the client's timeout, not the serving"}
SWAP_WINDOW = 4
"""How far (in places of the send order) a request may have moved by being sent a few microseconds early or late."""
GROUP_SEED = 0
"""The seed of the permutation that cuts a run's prompts into groups (the log does not say which share a prefix)."""
LATENCY_KEYS = {"time_to_first_token": "ttft", "request_latency": "e2e", "time_per_output_token": "tpot",
                "inter_token_latency": "itl", "normalized_time_per_output_token": "normalized_tpot"}
STATS = ("mean", "median", "p90", "p99")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_rows(folder: Path) -> dict[str, list[dict[str, str]]]:
    rows: dict[str, list[dict[str, str]]] = defaultdict(list)
    with gzip.open(folder / "feb16_per_request.csv.gz", "rt", newline="") as f:
        for row in csv.DictReader(f):
            rows[row["experiment"]].append(row)
    for exp, run in rows.items():
        run.sort(key=lambda r: int(r["index"]))
        if [int(r["index"]) for r in run] != list(range(len(run))):
            sys.exit(f"{exp}: the CSV's index is not 0..{len(run) - 1}")
    return rows


def places(lengths: list[int], stage_sizes: list[int], count: int) -> tuple[list[int], list[int], int]:
    """(the prompt each request sent, each prompt's measured length, how many requests were put back on another place)
    for requests of stages of `stage_sizes` that send prompt k mod `count` at place k of their stage, some of them a
    few places early or late (the module docstring)."""
    slots = [k % count for size in stage_sizes for k in range(size)]
    votes = [Counter() for _ in range(count)]
    for slot, length in zip(slots, lengths):
        votes[slot][length] += 1
    length_of = [v.most_common(1)[0][0] for v in votes]
    sent: list[int] = []
    start = moved = 0
    for size in stage_sizes:
        taken = [False] * size
        for j in range(size):
            length = lengths[start + j]
            near = sorted((abs(d), d) for d in range(-SWAP_WINDOW, SWAP_WINDOW + 1)
                          if 0 <= j + d < size and not taken[j + d] and length_of[(j + d) % count] == length)
            if not near:
                sys.exit(f"request {start + j} ({length} tokens) matches no free place within {SWAP_WINDOW} of its own")
            place = j + near[0][1]
            taken[place] = True
            moved += place != j
            sent.append(place % count)
        start += size
    if Counter(sent) != Counter(slots):
        sys.exit("the requests do not send each place's prompt as often as the stages do")
    return sent, length_of, moved


def stats(values: np.ndarray) -> dict[str, float]:
    return {"mean": round(float(values.mean()), 6), "p50": round(float(np.percentile(values, 50)), 6),
            "p90": round(float(np.percentile(values, 90)), 6), "p99": round(float(np.percentile(values, 99)), 6)}


def measured(rows: list[dict[str, str]]) -> dict:
    ttft = np.array([float(r["ttft_s"]) for r in rows])
    e2e = np.array([float(r["e2e_s"]) for r in rows])
    arrival = np.array([int(r["arrival_time_us"]) for r in rows]) / 1e6
    return {"requests": len(rows), "first_arrival": round(float(arrival[0]), 6),
            "last_arrival": round(float(arrival[-1]), 6), "ttft": stats(ttft), "e2e": stats(e2e)}


def inference_perf(metrics: dict) -> dict:
    """inference-perf's figures for one stage or the run, as it printed them (seconds, tokens/s)."""
    ok = metrics["successes"]
    out = {"successes": ok["count"], "failures": metrics["failures"]["count"]}
    load = metrics.get("load_summary", {})
    out.update({k: load[k] for k in ("requested_rate", "achieved_rate", "send_duration") if k in load})
    for key, name in LATENCY_KEYS.items():
        out[name] = {s: ok["latency"][key][s] for s in STATS}
    out["prompt_len"] = {s: ok["prompt_len"][s] for s in STATS}
    out["output_len_retokenised"] = {s: ok["output_len"][s] for s in STATS}
    out["throughput"] = dict(ok["throughput"])
    return out


def convert(exp: str, rows: list[dict[str, str]], bundle: dict) -> dict:
    config = yaml.safe_load(bundle["results/config.yaml"])
    server = yaml.safe_load(bundle["exp-config.yaml"])
    shape = config["data"]["shared_prefix"]
    stages = config["load"]["stages"]
    sizes = [int(s["rate"] * s["duration"]) for s in stages]
    if sum(sizes) != len(rows):
        sys.exit(f"{exp}: its stages send {sum(sizes)} requests, the CSV has {len(rows)}")
    if any(int(r["has_error"]) for r in rows):
        sys.exit(f"{exp}: a request failed; this script keeps runs whose every request succeeded")
    groups, per_group = shape["num_groups"], shape["num_prompts_per_group"]
    count = groups * per_group
    system, question, output = shape["system_prompt_len"], shape["question_len"], shape["output_len"]
    lengths = [int(r["input_tokens"]) for r in rows]
    sent, length_of, moved = places(lengths, sizes, count)
    member = np.random.default_rng(GROUP_SEED).permutation(count)
    group_of = [0] * count
    for position, prompt in enumerate(member.tolist()):
        group_of[prompt] = position // per_group
    ratio = [length_of[p] / (system + question) for p in range(count)]
    prefix_tokens = [round(system * float(np.mean([ratio[p] for p in range(count) if group_of[p] == g])))
                     for g in range(groups)]
    stage_of = np.repeat(np.arange(len(sizes)), sizes).tolist()
    lines = []
    for row, prompt, stage in zip(rows, sent, stage_of):
        g = group_of[prompt]
        line = {"arrival": int(row["arrival_time_us"]) / 1e6, "prompt_tokens": int(row["input_tokens"]),
                "output_tokens": output, "prompt": prompt, "prefix": g, "prefix_tokens": prefix_tokens[g],
                "stage": stage, "ttft": float(row["ttft_s"]), "e2e": float(row["e2e_s"])}
        lines.append(json.dumps(line, separators=(", ", ": ")))
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / f"{exp}.jsonl.gz"
    with log.open("wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as packed:
        packed.write(("\n".join(lines) + "\n").encode())
    bounds = np.cumsum([0, *sizes])
    stage_rows = [rows[a:b] for a, b in zip(bounds, bounds[1:])]
    metrics = bundle["metrics"]
    hf_model = server["model"]
    entry = load_catalog().llm(hf_model)
    return {
        "replay": log.name, "sha256": sha256(log),
        "model": hf_model, "catalog_model": entry.name if entry else None, "gpu": GPU,
        "tensor_parallel": server["tensor_parallelism"], "max_num_seqs": server["max_num_seqs"],
        "max_num_batched_tokens": server["max_num_batched_tokens"], "max_model_len": server["max_model_len"],
        "block_size": bundle["replay_config"]["block_size"],
        "gpu_kv_blocks": bundle["replay_config"]["kv_blocks_total_gpu"],
        "preset": exp.rsplit("-", 1)[1],
        "shared_prefix": {k: shape[k] for k in ("num_groups", "num_prompts_per_group", "system_prompt_len",
                                                "question_len", "output_len")},
        "load": {"type": config["load"]["type"],
                 "stages": [{"rate": s["rate"], "duration": s["duration"], "requests": n}
                            for s, n in zip(stages, sizes)]},
        "reconstructed": {"prefix_tokens": prefix_tokens,
                          "prompt_tokens_over_nominal": round(float(np.mean(ratio)), 4),
                          "requests_moved_back": moved},
        "measured": {"stages": [measured(s) for s in stage_rows], "run": measured(rows)},
        "inference_perf": {"stages": [inference_perf(metrics[f"stage_{i}_lifecycle_metrics.json"])
                                      for i in range(len(stages))],
                           "run": inference_perf(metrics["summary_lifecycle_metrics.json"])},
    }


def main(folder: str) -> None:
    base = Path(folder)
    for name, digest in SHA256.items():
        if sha256(base / name) != digest:
            sys.exit(f"{base / name} is not the file the README lists (sha256 differs)")
    bundle = json.loads((base / "feb16_aggregate_bundle.json").read_text())
    rows = read_rows(base)
    runs, left_out = {}, {}
    for exp in sorted(bundle):
        preset = exp.rsplit("-", 1)[1]
        if preset in LEFT_OUT:
            left_out[exp] = LEFT_OUT[preset]
            continue
        runs[exp] = convert(exp, rows[exp], bundle[exp])
    header = ("# Written by scripts/blis_replays.py; do not edit by hand. The runs' configuration and what they "
              "measured\n# (seconds); SOURCE.yaml says where they come from and how the replay logs were made.\n")
    (OUT / "runs.yaml").write_text(header + yaml.safe_dump({"runs": runs, "left_out": left_out}, sort_keys=False,
                                                            default_flow_style=None, width=120))
    source = {**SOURCE, "files": {name: {**info, "sha256": SHA256[name]} for name, info in SOURCE["files"].items()},
              "derived_by": "scripts/blis_replays.py (its docstring says how a CSV row becomes a log line)",
              "derivation": DERIVATION,
              "group_seed": GROUP_SEED, "swap_window": SWAP_WINDOW,
              "logs": {f"{exp}.jsonl.gz": run["sha256"] for exp, run in runs.items()}, "left_out": left_out}
    (OUT / "SOURCE.yaml").write_text("# Written by scripts/blis_replays.py; do not edit by hand.\n"
                                     + yaml.safe_dump(source, sort_keys=False, width=120))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
