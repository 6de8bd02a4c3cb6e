"""The accelerator fit: how a model's weights, its activations and its KV cache sit in one accelerator's memory at
the spec's tensor parallelism, and what vLLM gives the KV cache there.

The arithmetic follows the real stack (reference/lmcache-vllm.md §6):

- KV bytes per token = layers x (2, or 1 for MLA) x KV heads x head dim x dtype bytes; with kv_cache_dtype auto
  the dtype is the one the model runs in (AUTO_KV_DTYPE).
- Per tensor-parallel rank vLLM holds max(1, KV heads // TP) heads (MLA: the whole latent); the attention heads
  must split evenly over the ranks and the KV heads split or be replicated.
- HBM for KV per GPU = CUDA's total x gpu_memory_utilization - weights/TP - what vLLM's start-up profiling
  takes (activation peak at max_num_batched_tokens, non-torch memory: kvplan/kv_capacity.py,
  docs/kv-capacity.md), or serving.activation_memory in its place when set, or kv_cache_memory when given;
  blocks = that // (block_size x per-rank bytes per token).
- max_num_seqs and max_num_batched_tokens are the spec's, else vLLM's defaults for the device; the matrix
  multiplies run at the device's dense peak at the weights' precision.

What keeps the model off its accelerator (heads that do not split over the ranks, weights that leave no room for
KV, a max-length sequence that does not fit, a CPU device without its KV space) is added to the caller's problems:
`resolve` raises them with every other, `accelerator_problems` and `catalog_problems` (kvplan/resolve.py) report
them alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Catalog, Device
from .errors import Problem
from .kv_capacity import ProfiledMemory, cuda_total, profiled_memory
from .spec.architecture import Architecture
from .units import GIB, fmt_bytes

KV_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
WEIGHT_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int4": 0.5}
AUTO_KV_DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp8": "bfloat16"}
"""The dtype a model runs in -> the KV dtype vLLM's --kv-cache-dtype auto stores: the activation dtype, which
for the checkpoints released in fp8 (DeepSeek-V3: torch_dtype bfloat16 beside an fp8 quantization_config) is bf16."""
UNQUANTISED = ("fp32", "bf16", "fp16")
"""Weight dtypes vLLM serves by --dtype: the model then runs (and keeps its KV) in that dtype, not its config's."""


@dataclass(frozen=True)
class AcceleratorMemory:
    """How the model's weights and KV cache sit in one accelerator's memory at the spec's tensor parallelism."""

    max_model_len: int
    kv_dtype: str
    kv_dtype_bytes: int
    kv_bytes: int
    kv_heads_per_rank: int
    per_rank_token: int
    block_bytes_per_rank: int
    weights_dtype: str
    weight_bytes_per_gpu: int
    non_kv: int
    profiled: ProfiledMemory | None
    kv_budget: int
    hbm_blocks: int
    hbm_tokens: int


def batch_limits(device: Device, s) -> tuple[int, int]:
    """max_num_seqs and max_num_batched_tokens: the spec's, else vLLM's defaults for the device
    (vLLM EngineArgs.get_batch_defaults, the API server's)."""
    big = device.memory >= 160 * GIB
    large_non_a100 = device.memory >= 70 * GIB and not device.name.upper().startswith("A100")
    default_seqs, default_tokens = (1024, 16384) if big else (1024, 8192) if large_non_a100 else (256, 2048)
    return s.max_num_seqs or default_seqs, s.max_num_batched_tokens or default_tokens


def accelerator_memory(model: Architecture, device: Device, s, catalog: Catalog,
                       problems: list[Problem]) -> AcceleratorMemory:
    """The part of `resolve` that reads only the model and serving: heads over ranks, bytes per
    token, weights and KV in HBM; what does not fit is added to `problems`."""
    tp = s.tensor_parallel
    problems += _check_parallelism(model, s.tensor_parallel, s.gpus_per_node)
    max_model_len = s.max_model_len or model.max_context
    if max_model_len > model.max_context:
        problems.append(Problem("serving.max_model_len", f"exceeds {model.name}'s maximum context ({model.max_context})",
                                max_model_len, f"1..{model.max_context}", f"use max_model_len: {model.max_context} or less"))
    if device.kind == "cpu":
        if s.block_size % 32:
            problems.append(Problem("serving.block_size", "vLLM's CPU backend needs a multiple of 32", s.block_size,
                                    "32, 64, 96, 128, ...", f"use {(s.block_size // 32 + 1) * 32}"))
        if s.kv_cache_memory is None:
            problems.append(Problem("serving.kv_cache_memory", f"{device.name} is a CPU device: vLLM's CPU backend needs the KV "
                                    "space set (VLLM_CPU_KVCACHE_SPACE)", None, fix="add serving.kv_cache_memory: 1GiB"))
        elif s.kv_cache_memory % GIB:
            problems.append(Problem("serving.kv_cache_memory", "VLLM_CPU_KVCACHE_SPACE counts whole GiB", s.kv_cache_memory,
                                    "1GiB, 2GiB, ...", f"use {max(1, round(s.kv_cache_memory / GIB))}GiB"))

    # ---- bytes per token, block and chunk
    weights_dtype = s.weights_dtype if s.weights_dtype != "auto" else model.weights_dtype
    runs_in = weights_dtype if weights_dtype in UNQUANTISED else model.weights_dtype
    kv_dtype = s.kv_cache_dtype if s.kv_cache_dtype != "auto" else AUTO_KV_DTYPE[runs_in]
    kv_dtype_bytes = KV_DTYPE_BYTES[kv_dtype]
    token_bytes = kv_bytes_per_token(model, kv_dtype_bytes)
    kv_heads_per_rank = model.num_kv_heads if model.attention == "mla" else max(1, model.num_kv_heads // tp)
    per_rank_token = kv_bytes_per_token(model, kv_dtype_bytes, kv_heads_per_rank)
    block_bytes_per_rank = per_rank_token * s.block_size

    # ---- accelerator memory
    as_released = s.model_path is None or s.model_path == model.hf_id
    if model.weights_dtype == "fp8" and weights_dtype in UNQUANTISED and as_released:
        problems.append(Problem("serving.weights_dtype", f"{model.name} is released with fp8 weights, which vLLM serves as "
                                f"fp8 whatever --dtype says: {weights_dtype} would count more bytes than it loads",
                                s.weights_dtype, "auto or fp8 for this checkpoint",
                                "set serving.weights_dtype: auto, or serving.model_path to a 16-bit conversion of it"))
    weight_bytes_per_gpu = int(model.params * WEIGHT_BYTES[weights_dtype] / tp)
    profiled = None
    if device.kind != "cpu":   # vLLM's CPU worker does not profile: VLLM_CPU_KVCACHE_SPACE is the KV cache
        max_num_seqs, max_batched = batch_limits(device, s)
        profiled = profiled_memory(model, device, catalog.vllm_memory, tensor_parallel=tp,
                                   gpu_memory_utilization=s.gpu_memory_utilization, max_num_batched_tokens=max_batched,
                                   max_num_seqs=max_num_seqs, activation_bytes=4 if runs_in == "fp32" else 2)
    non_kv = s.activation_memory if s.activation_memory is not None else profiled.non_kv if profiled else 0
    if s.kv_cache_memory is not None:
        kv_budget = s.kv_cache_memory
        if kv_budget < block_bytes_per_rank:    # no block at all: vLLM refuses to start, the simulator has no room
            problems.append(Problem("serving.kv_cache_memory", f"holds no KV block: one block of {s.block_size} tokens "
                                    f"is {fmt_bytes(block_bytes_per_rank)} per rank ({fmt_bytes(per_rank_token)}/token)",
                                    s.kv_cache_memory, f"at least one block's worth, {fmt_bytes(block_bytes_per_rank)}",
                                    f"give enough for max_model_len ({max_model_len} tokens = "
                                    f"{fmt_bytes(per_rank_token * max_model_len)} per rank)"
                                    + ("" if device.kind == "cpu" else ", or leave it out to let "
                                       "gpu_memory_utilization size it")))
        need = weight_bytes_per_gpu + non_kv + kv_budget
        if need > device.memory:
            problems.append(Problem("serving.kv_cache_memory", f"weights ({fmt_bytes(weight_bytes_per_gpu)} per device) + activation "
                                    f"and non-torch memory ({fmt_bytes(non_kv)}) + this KV space need {fmt_bytes(need)}, more than {device.name}'s {fmt_bytes(device.memory)}",
                                    s.kv_cache_memory, fix="lower kv_cache_memory or raise tensor_parallel"))
    else:
        kv_budget = int(cuda_total(device) * s.gpu_memory_utilization) - weight_bytes_per_gpu - non_kv
        if kv_budget <= 0:
            problems.append(_weights_do_not_fit(model, device, s, weight_bytes_per_gpu, weights_dtype, non_kv))
    kv_budget = max(kv_budget, 0)
    hbm_blocks = kv_budget // block_bytes_per_rank
    hbm_tokens = hbm_blocks * s.block_size
    if kv_budget > 0 and hbm_tokens < max_model_len and (hbm_blocks > 0 or s.kv_cache_memory is None):
        problems.append(Problem("serving.max_model_len", f"one {max_model_len}-token sequence does not fit: {device.name} has "
                                f"{fmt_bytes(kv_budget)} for KV per GPU = {hbm_tokens} tokens at "
                                f"{fmt_bytes(per_rank_token)}/token per rank", max_model_len, f"1..{hbm_tokens}",
                                f"lower max_model_len to {hbm_tokens}, raise gpu_memory_utilization or tensor_parallel, "
                                "or use kv_cache_dtype: fp8"))
    return AcceleratorMemory(max_model_len, kv_dtype, kv_dtype_bytes, token_bytes, kv_heads_per_rank, per_rank_token,
                             block_bytes_per_rank, weights_dtype, weight_bytes_per_gpu, non_kv, profiled, kv_budget,
                             hbm_blocks, hbm_tokens)


def peak_tflops(device: Device, weights_dtype: str, problems: list[Problem]) -> float:
    """The dense peak the model's matrix multiplies run at: fp8's where the weights are fp8 and the device has
    fp8 units, fp32's for a model served in fp32, bf16's otherwise (fp16 and int4 run at the 16-bit rate)."""
    if weights_dtype == "fp8" and device.fp8_tflops:
        return device.fp8_tflops
    if weights_dtype != "fp32":
        return device.bf16_tflops
    if device.fp32_tflops is None:
        problems.append(Problem("serving.weights_dtype", f"the catalog has no fp32 peak for {device.name}, so an fp32 "
                                "model's step times cannot be simulated", weights_dtype, "bf16, fp16, or fp32 on a "
                                "device with fp32_tflops", "serve bf16, or add fp32_tflops to the device in the catalog"))
        return device.bf16_tflops
    return device.fp32_tflops



def kv_bytes_per_token(model: Architecture, dtype_bytes: int, kv_heads: int | None = None) -> int:
    """layers x (2, or 1 for MLA) x KV heads x head dim x dtype bytes; `kv_heads` defaults to all of them."""
    heads = model.num_kv_heads if kv_heads is None else kv_heads
    return model.num_layers * model.kv_per_layer * heads * model.head_dim * dtype_bytes



def _check_parallelism(model: Architecture, tp: int, gpus_per_node: int) -> list[Problem]:
    """vLLM shards attention heads over TP ranks and replicates KV heads when TP exceeds them."""
    if tp == 1:
        return []
    def fits(t: int) -> bool:
        heads_ok = model.num_attention_heads % t == 0
        kv_ok = model.attention == "mla" or model.num_kv_heads % t == 0 or t % model.num_kv_heads == 0
        return heads_ok and kv_ok
    if fits(tp):
        return []
    good = [str(t) for t in range(1, gpus_per_node + 1) if gpus_per_node % t == 0 and fits(t)]
    return [Problem("serving.tensor_parallel", f"does not suit {model.name}: {model.num_attention_heads} attention heads and "
                    f"{model.num_kv_heads} KV heads must split evenly over (or be replicated across) the ranks", tp,
                    ", ".join(good), f"use tensor_parallel: {good[-1]}" if good else "use tensor_parallel: 1")]


def _weights_do_not_fit(model, device, s, weight_bytes_per_gpu, weights_dtype, non_kv) -> Problem:
    usable = cuda_total(device) * s.gpu_memory_utilization - non_kv
    total = model.params * WEIGHT_BYTES[weights_dtype]
    need_tp = next((t for t in (1, 2, 4, 8, 16, 32, 64) if total / t < usable * 0.9), None)
    fix = f"use tensor_parallel: {need_tp}" if need_tp else "use a larger accelerator"
    return Problem("serving.tensor_parallel", f"{model.name}'s weights ({fmt_bytes(weight_bytes_per_gpu)} per GPU in {weights_dtype}) "
                   f"leave no room for KV cache in {fmt_bytes(usable)} usable of {device.name} "
                   f"(gpu_memory_utilization {s.gpu_memory_utilization}, activation and non-torch memory {fmt_bytes(non_kv)})",
                   s.tensor_parallel, None, f"{fix}, weights_dtype: fp8 with quantization: fp8, or a larger accelerator")

