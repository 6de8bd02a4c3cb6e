"""KV capacity as vLLM computes it: what an engine takes from each GPU before it sizes its KV cache.

At start-up vLLM's GPU worker (vllm/v1/worker/gpu_worker.py `determine_available_memory`) loads the
weights, runs one profiling pass and gives the KV cache what is left of its share of the GPU:

    KV bytes per GPU = CUDA's total x gpu_memory_utilization
                       - weights per GPU
                       - the activation peak of the profiling pass (torch's allocated peak)
                       - non-torch memory (NCCL, cuBLAS workspaces, custom all-reduce buffers)
                       - CUDA-graph memory, where the vLLM version subtracts an estimate of it (0.21 onwards)

and the blocks it reports are that // (block_size x one rank's KV bytes per token), as resolve has them.

- CUDA's total (`cuda_total`: `Device.cuda_memory`) is what cudaMemGetInfo reports, less than nvidia-smi's figure
  by what the driver keeps; a device without it in the catalog uses its `memory`.
- The profiling pass runs the model over `max_num_batched_tokens` tokens, then the sampler over
  min(max_num_seqs, max_num_batched_tokens) rows of logits; its torch peak is the larger of the two:
  the forward peak is tokens x (forward_hidden_copies x hidden + forward_mlp_copies x intermediate / TP) x the
  activations' dtype bytes (a layer's MLP, where the widest tensors live); the sampler's is rows x vocabulary x
  sampler_bytes_per_logit (the logits gathered to the full vocabulary on every rank).
- Non-torch memory is a per-GPU constant, more at tensor parallelism > 1.

The coefficients live in models/vllm_memory.yaml with their sources (one of them is fitted:
kvplan/gpufit/kv_capacity.py, docs/kv-capacity.md). A spec that sets serving.activation_memory replaces the
activation peak, the non-torch memory and the CUDA graphs with its figure, as before; one that sets
serving.kv_cache_memory replaces the whole computation, as vLLM's --kv-cache-memory-bytes does. A CPU device does
not profile: vLLM's CPU worker takes VLLM_CPU_KVCACHE_SPACE as given (serving.kv_cache_memory, required there).
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Device, VllmMemory
from .spec.architecture import Architecture


def cuda_total(device: Device) -> int:
    """What CUDA reports as the device's memory (vLLM multiplies it by gpu_memory_utilization)."""
    return device.cuda_memory if device.cuda_memory is not None else device.memory


@dataclass(frozen=True)
class ProfiledMemory:
    """One GPU of an engine as vLLM's profiling sees it, in bytes."""

    requested: int
    """CUDA's total x gpu_memory_utilization: what the engine may use."""
    forward_peak: int
    """Torch's peak in the profiling forward pass over max_num_batched_tokens tokens."""
    sampler_peak: int
    """Torch's peak in the profiling sampler run."""
    non_torch: int
    """Memory outside torch the engine adds."""
    cuda_graphs: int
    """What vLLM subtracts for CUDA graphs before it sizes the KV cache (0 where the version does not)."""

    @property
    def activation_peak(self) -> int:
        return max(self.forward_peak, self.sampler_peak)

    @property
    def non_kv(self) -> int:
        """Everything but the weights and the KV cache: the KV cache gets requested - weights - this."""
        return self.activation_peak + self.non_torch + self.cuda_graphs


def profiled_memory(model: Architecture, device: Device, coefficients: VllmMemory, *, tensor_parallel: int,
                    gpu_memory_utilization: float, max_num_batched_tokens: int, max_num_seqs: int,
                    activation_bytes: int) -> ProfiledMemory:
    """The terms of the module docstring for one GPU of an engine; `activation_bytes` is the bytes of one element
    of the activations (the dtype the model runs in)."""
    c, tp = coefficients, tensor_parallel
    total = cuda_total(device)
    per_token = c.forward_hidden_copies * model.hidden_size + c.forward_mlp_copies * model.intermediate_size / tp
    rows = min(max_num_seqs, max_num_batched_tokens)
    return ProfiledMemory(
        requested=int(total * gpu_memory_utilization),
        forward_peak=int(max_num_batched_tokens * per_token * activation_bytes),
        sampler_peak=int(rows * model.vocab_size * c.sampler_bytes_per_logit),
        non_torch=int(c.non_torch + (c.non_torch_tp if tp > 1 else 0)),
        cuda_graphs=0)   # the catalog accepts only cuda_graphs_subtracted: false (the versions modelled)

