"""Diagnoses of GPU memory: no room for the batch the spec allows, and the design note's block_size advice.

vLLM does not crash when KV blocks run out mid-run: it preempts a running request (frees its blocks and
recomputes it later), which is what the note's "CUDA OOM at small batch sizes" looks like in a vLLM that
starts at all (`kvplan validate` already refuses a spec whose weights, activation memory and one
max_model_len sequence do not fit). So:

- `no-room-for-the-batch`: the runs preempt (more than 1 % of requests). Evidence: the memory budget of
  one GPU (CUDA's total x gpu_memory_utilization = weights + activation and non-torch memory + KV), KV tokens per instance against
  max_num_seqs x the workload's mean sequence and x max_model_len. Fixes: fewer sequences (what the KV
  holds at the mean sequence length), a higher gpu_memory_utilization, an fp8 KV cache.
- `block-size-advice` (advice): the note lowers block_size 32 -> 16 against OOM. A block holds
  block_size tokens of every layer, so the KV bytes per token, and what a GPU holds, do not change;
  only the partial last block of each sequence wastes fewer slots (at most block_size - 1 tokens per
  running sequence). Judged with those numbers and a simulation of block_size 16 wherever the spec has
  a larger block and a memory finding.
"""

from __future__ import annotations

from ..units import fmt_bytes
from .case import Case
from .finding import Change, Finding, Fix

PREEMPTION_SHARE = 0.01
"""Preemptions per request above which the batch is diagnosed as not fitting."""
MAX_UTILIZATION = 0.95
"""The highest gpu_memory_utilization proposed (vLLM's profiling needs some headroom)."""


def no_room_for_the_batch(case: Case) -> list[Finding]:
    r = case.resolved
    per_request = case.mean("preemptions_per_request")
    if not any(len(res.per_request) for res in case.results) or per_request <= PREEMPTION_SHARE:
        return []
    sequence = case.mean_sequence_tokens
    fits = int(r.hbm_tokens // sequence)
    evidence = {"preemptions_per_request": per_request, "gpu_memory_bytes": r.cuda_memory_bytes,
                "gpu_memory_utilization": r.gpu_memory_utilization, "weight_bytes_per_gpu": r.weight_bytes_per_gpu,
                "non_kv_bytes_per_gpu": r.non_kv_bytes_per_gpu,
                "kv_budget_bytes_per_gpu": r.kv_budget_bytes_per_gpu, "kv_tokens_per_instance": r.hbm_tokens,
                "kv_bytes_per_token_per_rank": r.kv_bytes_per_token_per_rank, "max_num_seqs": r.max_num_seqs,
                "mean_sequence_tokens": sequence, "sequences_that_fit_at_mean_length": fits,
                "max_num_seqs_x_max_model_len_tokens": r.max_num_seqs * r.max_model_len}
    fixes = []
    if 0 < fits < r.max_num_seqs:
        fixes.append(Fix(summary=f"at most {fits} sequences, what the KV cache holds at the mean length",
                         changes=[Change(path="serving.max_num_seqs", value=fits)], metric="preemptions_per_request"))
    if r.kv_cache_memory_bytes is None and r.gpu_memory_utilization < MAX_UTILIZATION:
        fixes.append(Fix(summary=f"give vLLM {MAX_UTILIZATION:.0%} of the GPU",
                         changes=[Change(path="serving.gpu_memory_utilization", value=MAX_UTILIZATION)],
                         metric="preemptions_per_request"))
    if r.kv_dtype_bytes > 1 and r.device.kind != "cpu":
        fixes.append(Fix(summary="an fp8 KV cache (half the bytes per token)",
                         changes=[Change(path="serving.kv_cache_dtype", value="fp8")], metric="preemptions_per_request"))
    return [Finding(
        code="no-room-for-the-batch", area="memory", severity="problem",
        title="the KV cache cannot hold the batch vLLM admits",
        symptom=f"{per_request:.2f} preemptions per request: requests lose their KV blocks mid-run and are recomputed",
        cause=f"each GPU has {fmt_bytes(r.kv_budget_bytes_per_gpu)} for KV ({fmt_bytes(r.cuda_memory_bytes)} x "
              f"{r.gpu_memory_utilization} - {fmt_bytes(r.weight_bytes_per_gpu)} weights - "
              f"{fmt_bytes(r.non_kv_bytes_per_gpu)} activation and non-torch memory): "
              f"{r.hbm_tokens:,} tokens per instance, {fits} sequences of this workload's mean {sequence:,.0f} tokens, "
              f"while max_num_seqs admits {r.max_num_seqs}",
        evidence=evidence, fixes=fixes)]


def block_size_advice(case: Case, earlier: list[Finding]) -> list[Finding]:
    r = case.resolved
    if r.block_size <= 16 or r.device.kind == "cpu" or not any(f.area == "memory" for f in earlier):
        return []
    per_rank = r.kv_bytes_per_token_per_rank
    tokens_16 = r.kv_budget_bytes_per_gpu // (per_rank * 16) * 16
    slack = r.max_num_seqs * (r.block_size - 16)
    return [Finding(
        code="block-size-advice", area="advice", severity="advice",
        title=f"the design note's fix, block_size {r.block_size} -> 16, does not free KV memory",
        symptom=f"a block is {r.block_size} tokens of KV; the note lowers it to 16 against out-of-memory errors",
        cause=f"KV takes {fmt_bytes(per_rank)} per token per GPU at any block size: the GPU holds {r.hbm_tokens:,} tokens "
              f"in blocks of {r.block_size} and {tokens_16:,} in blocks of 16; smaller blocks only waste fewer slots in "
              f"each sequence's last block, at most {slack:,} tokens over {r.max_num_seqs} running sequences",
        evidence={"block_size": r.block_size, "kv_bytes_per_token_per_rank": per_rank, "kv_tokens_per_instance": r.hbm_tokens,
                  "kv_tokens_per_instance_at_16": int(tokens_16), "most_tokens_saved_per_batch": slack},
        fixes=[Fix(summary="block_size 16, as the note advises", changes=[Change(path="serving.block_size", value=16)],
                   metric="preemptions_per_request")])]


RULES = [no_room_for_the_batch]
FOLLOW_UPS = [block_size_advice]
"""Rules that judge advice where another finding shows it applies (they see the findings so far)."""
