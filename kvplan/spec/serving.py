"""The vLLM serving layer: which accelerator, how many instances, and vLLM's engine settings.

Field names follow `vllm serve` flags (`--block-size`, `--max-num-seqs`, ...), so a reader who
knows vLLM recognises them; where a field is left unset, `resolve` applies vLLM's own default.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..units import Duration, Size
from .base import MAX_INT32, SpecModel, spec_file
from .grammar import HostName, ModelId
from .disaggregation import Disaggregation
from .offload import KvOffloading

Router = Literal["round_robin", "least_loaded", "session_affinity", "prefix_aware", "llm_d"]
PrefixMatch = Literal["approximate", "precise"]
WeightsDtype = Literal["auto", "fp32", "bf16", "fp16", "fp8", "int4"]
Quantization = Literal["fp8", "awq", "gptq", "compressed-tensors"]
QUANTIZATIONS: dict[str, tuple[str, ...]] = {"fp8": ("fp8", "compressed-tensors"), "int4": ("awq", "gptq", "compressed-tensors")}
"""serving.weights_dtype -> the vLLM --quantization methods whose weights it is."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
"""An environment variable's name, as serving.api_key_env gives one."""
KvCacheDtype = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2"]


class StepModel(SpecModel):
    """Overrides of the step-time model's coefficients (docs/step-time.md); each one left unset takes
    the accelerator's default from the catalog (models/hardware/gpus.yaml). Calibration fits them."""

    compute_efficiency: float | None = Field(None, gt=0, le=1)
    """Achieved / peak FLOP/s of a compute-bound step (MFU), e.g. 0.55."""

    attention_efficiency: float | None = Field(None, gt=0, le=1)
    """Achieved / peak FLOP/s of attention over the KV cache, whose kernels rarely match the linear layers'
    matrix multiplies; default: compute_efficiency. Calibration fits it apart when the runs tell them apart."""

    memory_efficiency: float | None = Field(None, gt=0, le=1)
    """Achieved / peak memory bandwidth of a memory-bound step (MBU), e.g. 0.75."""

    step_overhead: Duration | None = None
    """Fixed cost of every engine step (scheduling, input preparation, kernel launch, sampling), e.g. '1.5ms'."""

    allreduce_latency: Duration | None = None
    """Fixed cost of one tensor-parallel all-reduce besides its bytes over the link, e.g. '8us'."""

    request_overhead: Duration | None = None
    """Latency of each request outside engine steps (HTTP handling, streaming), added to TTFT and E2E, e.g. '9ms'."""

    layer_overhead: Duration | None = None
    """GPU time of every transformer layer in every step besides its roofline (the small kernels: norms, rotary,
    activation, residual adds, GEMM tails), e.g. '30us'."""

    allreduce_efficiency: float | None = Field(None, gt=0, le=1)
    """Achieved / link bandwidth of a large tensor-parallel all-reduce (bus bandwidth / one direction of NVLink), e.g. 0.75."""

    small_gemm_params: float | None = Field(None, ge=0, le=1e12)
    """Weight parameters per layer per GPU at which the matrix multiplies run at half of compute_efficiency: small
    matrices (a small model, a high tensor-parallel degree) leave part of the GPU idle, e.g. 4e6; 0 = no such loss."""

    graph_step_overhead: Duration | None = None
    """step_overhead of a step vLLM runs as a captured CUDA graph (a decode step, or any step of at most
    min(2 x max_num_seqs, 512) tokens), e.g. '0.5ms'; default: the catalog's, else step_overhead."""

    graph_layer_overhead: Duration | None = None
    """layer_overhead of a step vLLM runs as a captured CUDA graph, e.g. '5us'; default: the catalog's, else
    layer_overhead."""


class LlmD(SpecModel):
    """llm-d's scheduler (its endpoint picker, EPP) as the router: each scorer rates every instance in [0, 1], the
    scores are summed with these weights and the instance with the highest sum takes the request (kvplan.sim.llmd
    says how each scorer scores). A weight of 0 leaves its scorer out. The defaults are llm-d's tiered-prefix-cache
    guide for a CPU tier (llm-d/llm-d guides/tiered-prefix-cache/cpu/router/tiered-prefix-cache-cpu.values.yaml,
    commit c2405cdf): queue 2, KV-cache utilisation 2, GPU prefix 1, CPU prefix 1."""

    queue: float = Field(2.0, ge=0, le=1000)
    """Weight of llm-d's queue-scorer: fewer requests waiting (vLLM's num_requests_waiting) scores higher."""

    kv_cache_utilization: float = Field(2.0, ge=0, le=1000)
    """Weight of llm-d's kv-cache-utilization-scorer: 1 - the share of HBM KV blocks in use."""

    prefix: float = Field(1.0, ge=0, le=1000)
    """Weight of the GPU prefix scorer: the share of the prompt's blocks the instance holds (prefix_match says how
    the scheduler knows)."""

    cpu_prefix: float | None = Field(None, ge=0, le=1000)
    """Weight of a second prefix-cache-scorer over the CPU tier (approximate prefix_match only: precise sees the CPU
    tier itself). Default: 1 where the instances have a CPU tier (lmcache.ddr), else 0."""

    no_hit_lru: float = Field(0.0, ge=0, le=1000)
    """Weight of llm-d's no-hit-lru-scorer: a request no instance holds any of goes to the instance least recently
    given such a request (0 in llm-d's guides)."""

    prefix_match: PrefixMatch = "approximate"
    """How the prefix scorer knows what an instance holds: approximate (the scheduler remembers the prompts it
    routed to each instance, an LRU index as large as the instance's cache: approx-prefix-cache-producer) or
    precise (vLLM's KV events: what the instance's HBM and CPU tier really hold, CPU blocks weighing 0.8 of an HBM
    block: precise-prefix-cache-scorer)."""

    @model_validator(mode="after")
    def _some_weight(self) -> "LlmD":
        weights = {"queue": self.queue, "kv_cache_utilization": self.kv_cache_utilization, "prefix": self.prefix,
                   "cpu_prefix": self.cpu_prefix or 0.0, "no_hit_lru": self.no_hit_lru}
        if not any(weights.values()):
            raise ValueError("every scorer's weight is 0, so every instance would score alike; give at least one of "
                             f"{', '.join(weights)} a positive weight (llm-d's guides: queue 2, kv_cache_utilization 2, "
                             "prefix 1, cpu_prefix 1)")
        if self.prefix_match == "precise" and self.cpu_prefix:
            raise ValueError(f"cpu_prefix: {self.cpu_prefix} with prefix_match: precise; the precise scorer sees the "
                             "CPU tier itself (through vLLM's KV events), so a second CPU scorer would count it twice; "
                             "set cpu_prefix: 0, or use prefix_match: approximate")
        return self


class Serving(SpecModel):
    gpu: str
    """Accelerator, by catalog name (`kvplan catalog` lists them), e.g. H100-SXM."""

    gpus_per_node: int = Field(8, ge=1, le=64)
    """Accelerators per node. A tensor-parallel group never spans nodes."""

    host_memory: Size | None = None
    """Host memory (RAM) of each node, which must hold the ddr tier and native offloading; unset: the catalog's
    reference server for serving.gpu (DGX H100: 2TB), or no check where the catalog has none."""

    instances: int = Field(1, ge=1, le=4096)
    """Number of vLLM instances (engines), each tensor_parallel GPUs wide."""

    tensor_parallel: int = Field(1, ge=1, le=64)
    """vLLM --tensor-parallel-size."""

    block_size: int = Field(16, ge=1, le=MAX_INT32)
    """vLLM --block-size: tokens per PagedAttention block (a positive multiple of 16)."""

    gpu_memory_utilization: float = Field(0.92, gt=0, le=1)
    """vLLM --gpu-memory-utilization: share of accelerator memory vLLM may use (vLLM default 0.92)."""

    kv_cache_memory: Size | None = None
    """KV-cache memory per accelerator, overriding gpu_memory_utilization (vLLM --kv-cache-memory-bytes;
    VLLM_CPU_KVCACHE_SPACE on a CPU device, where it is required). At least one KV block (block_size tokens of the
    model's KV per rank); enough for max_model_len to serve a whole sequence."""

    activation_memory: Size | None = None
    """Memory per accelerator that is neither weights nor KV cache (activation peak, non-torch memory such as
    communication buffers, CUDA graphs). Default: what vLLM's start-up profiling takes, modelled from the model,
    max_num_batched_tokens, max_num_seqs and tensor_parallel (docs/kv-capacity.md). vLLM logs what it measured;
    set this from that log line to override the model."""

    max_model_len: int | None = Field(None, ge=1, le=MAX_INT32)
    """vLLM --max-model-len. Default: the model's maximum context."""

    max_num_seqs: int | None = Field(None, ge=1, le=MAX_INT32)
    """vLLM --max-num-seqs. Default: vLLM's per-GPU default (256, or 1024 on >= 70 GiB non-A100 GPUs)."""

    max_num_batched_tokens: int | None = Field(None, ge=1, le=MAX_INT32)
    """vLLM --max-num-batched-tokens. Default: vLLM's per-GPU default (2048, 8192 or 16384)."""

    weights_dtype: WeightsDtype = "auto"
    """Weight precision: auto (as released), fp32, bf16, fp16, fp8 or int4 (AWQ/GPTQ). fp8 and int4 need
    serving.quantization, unless the model is released in that precision (model.weights_dtype). fp32 is for CPUs
    without bf16 arithmetic (AVX2 only: vLLM's bf16 matrix multiplies run about 7x slower than fp32 there); its
    KV cache is fp32 too, twice the bytes of bf16."""

    quantization: Quantization | None = None
    """vLLM --quantization: how the checkpoint's weights are quantised. fp8 also quantises a 16-bit checkpoint as
    vLLM loads it; awq, gptq and compressed-tensors need a checkpoint quantised that way (serving.model_path)."""

    kv_cache_dtype: KvCacheDtype = "auto"
    """vLLM --kv-cache-dtype. auto stores KV in the dtype the model runs in (serving.weights_dtype when it is fp32,
    bf16 or fp16, else the model's own); fp8 halves KV bytes."""

    prefix_caching: bool = True
    """vLLM --enable-prefix-caching: keep finished requests' blocks in HBM for reuse."""

    chunked_prefill: bool = True
    """vLLM --enable-chunked-prefill: split long prefills across steps and mix them with decodes."""

    async_scheduling: bool = True
    """vLLM --async-scheduling: the engine schedules the next step while the current one runs (vLLM's default
    since late 2025), so a request that arrives during a step joins the step after the next one."""

    kv_offloading: KvOffloading | None = None
    """vLLM's native KV offloading to host memory (the OffloadingConnector), a second offload engine beside the
    lmcache section: one or the other. Absent: off."""

    router: Router = "round_robin"
    """How requests are spread over instances, by the router kvplan deploys in front of them (vllm-router;
    docs/deploy.md): round_robin, least_loaded (fewest requests in flight), session_affinity (a session stays
    on one instance) or prefix_aware (follow the longest routed prefix, unless the load is out of balance); or
    llm_d, llm-d's scheduler with the weighted scorers of serving.llm_d (deployed by llm-d's gateway on Kubernetes:
    `kvplan render --format production-stack` writes its EndpointPickerConfig; the Ansible render refuses it)."""

    llm_d: LlmD | None = None
    """The scorers' weights of llm-d's scheduler (serving.router: llm_d); unset: llm-d's guide defaults."""

    router_port: int = Field(30000, ge=1, le=65535)
    """Port of the router's OpenAI API (on the first gpu host); its Prometheus metrics are on the next port."""

    model_path: ModelId | None = None
    """What vLLM serves: a Hugging Face id (org/name) or an absolute local directory (default: the catalog model's hf_id)."""

    host: HostName = "0.0.0.0"
    """Address vLLM's OpenAI API (and its /metrics) listens on (a host name or IP address)."""

    port: int = Field(8000, ge=1, le=65535)
    """Port of the first vLLM instance on a node; further instances on the node take the next ports."""

    api_key_env: str | None = None
    """The environment variable, on the machine that runs `kvplan deploy`, that holds the API key vLLM then asks of
    every client (vLLM's --api-key, given as VLLM_API_KEY): a reference to the secret, never the key. The deploy
    passes it to each instance through its private environment file (mode 0600) and the warm-up sends it; the
    production-stack render points the chart's vllmApiKey at a Kubernetes Secret holding it. Unset: vLLM serves
    without authentication."""

    step_model: StepModel | None = None
    """Step-time coefficients that override the accelerator's catalog defaults (any subset)."""

    disaggregation: Disaggregation | None = None
    """Prefill/decode disaggregation: separate prefill and decode pools, the prompt's KV sent between them
    (docs/disaggregation.md); deployed with connector: nixl (vLLM's NixlConnector behind vllm-router). Absent:
    aggregated serving."""

    step_profile: str | None = None
    """A device profile file (`kvplan calibrate -o`) whose step_model the simulator uses for this accelerator;
    step_model keys set here win over it. A relative path is read from the spec file's folder."""

    @model_validator(mode="after")
    def _llm_d_needs_its_router(self) -> "Serving":
        if self.llm_d is not None and self.router != "llm_d":
            raise ValueError(f"serving.llm_d weighs llm-d's scorers, but serving.router is {self.router}, which has "
                             "none; set router: llm_d, or remove serving.llm_d")
        return self

    @field_validator("api_key_env")
    @classmethod
    def _an_environment_variable(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not the name of an environment variable: it names the variable that "
                             "holds the key (letters, digits and _, not starting with a digit), never the key itself; "
                             "write e.g. api_key_env: VLLM_API_KEY")
        return value

    @field_validator("step_profile")
    @classmethod
    def _profile_exists(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        return spec_file(value, info, "device profile", "give the file `kvplan calibrate -o` wrote")
