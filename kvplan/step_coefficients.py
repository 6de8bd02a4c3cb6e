"""The step-time coefficients: what kvplan.sim.steptime's roofline needs besides the accelerator's peaks, resolved
for one accelerator (docs/step-time.md).

- Compute, attention and memory efficiency (achieved / peak), the seconds every step, every layer and every
  request cost besides the roofline (CUDA-graph steps apart), and the all-reduce's latency and efficiency.
- They are the accelerator's catalog defaults (its efficiency block in models/hardware/gpus.yaml), with the
  serving.step_profile file's fitted step_model on top and the spec's serving.step_model on top of that; what
  nothing measured takes a stated default (no HTTP or per-layer overhead, all-reduces at the link's bandwidth,
  attention as efficient as the rest, a CUDA-graph step as costly as an eager one).
- The all-reduce ring runs over NVLink, else PCIe, else (a CPU device) host memory.
- On a GPU vLLM runs a step of at most min(2 x max_num_seqs, CUDA_GRAPH_MAX_CAPTURE) tokens as a captured CUDA
  graph (Resolved.cuda_graph_max_tokens).

A device the catalog has no efficiency block for, unless the spec sets the missing coefficients, and a step
profile fitted on another device are added to the caller's problems; `catalog_step` is the catalog's alone, what
kvplan.gpufit fits and checks.
"""

from __future__ import annotations

from .catalog import Device
from .errors import Problem, SpecError
from .spec.base import SpecModel
from .spec.profile import read_profile
from .spec.serving import StepModel


class StepCoefficients(SpecModel):
    """The step-time model's coefficients (kvplan.sim.steptime, docs/step-time.md)."""

    compute_efficiency: float
    """Achieved / peak FLOP/s of a compute-bound step."""
    attention_efficiency: float
    """Achieved / peak FLOP/s of attention over the KV cache (compute_efficiency unless measured apart)."""
    memory_efficiency: float
    """Achieved / peak memory bandwidth of a memory-bound step."""
    step_overhead: float
    """Seconds every engine step costs besides the roofline and the all-reduces."""
    allreduce_latency: float
    """Seconds one tensor-parallel all-reduce costs besides its bytes over the link."""
    request_overhead: float
    """Seconds of each request outside engine steps (HTTP, streaming), added to its TTFT and E2E."""
    layer_overhead: float
    """Seconds every transformer layer adds to every step besides the roofline (small kernels)."""
    graph_step_overhead: float
    """step_overhead of a step that runs as a captured CUDA graph (at most Resolved.cuda_graph_max_tokens tokens)."""
    graph_layer_overhead: float
    """layer_overhead of a step that runs as a captured CUDA graph."""
    allreduce_efficiency: float
    """Achieved / link bandwidth of a large all-reduce."""
    small_gemm_params: float
    """Weight parameters per layer per GPU at which the matrix multiplies run at half of compute_efficiency."""
    allreduce_bandwidth: float
    """Bytes/s one direction of the link the all-reduce ring uses: NVLink, else PCIe, else host memory."""
    overridden: list[str] = []
    """The coefficients the spec set (serving.step_model); the others are the catalog's."""



CUDA_GRAPH_MAX_CAPTURE = 512
"""vLLM's default ceiling on CUDA graph capture sizes (1024 on data-center Blackwell; vllm/config/vllm.py
`_set_cudagraph_sizes`)."""

STEP_FIELDS = ("compute_efficiency", "attention_efficiency", "memory_efficiency", "step_overhead", "allreduce_latency",
               "request_overhead", "layer_overhead", "allreduce_efficiency", "small_gemm_params", "graph_step_overhead",
               "graph_layer_overhead")


def step_coefficients(device: Device, overrides: StepModel | None, profile: str | None,
                      problems: list[Problem]) -> StepCoefficients | None:
    """The catalog's efficiency block for `device`, with the serving.step_profile file's step_model on top, and the
    spec's serving.step_model on top of that."""
    given = {k: v for k, v in (overrides.model_dump() if overrides else {}).items() if v is not None}
    if profile is not None:
        fitted = read_profile(profile, "serving.step_profile")
        if fitted.device != device.name:
            problems.append(Problem("serving.step_profile", f"the profile was fitted on {fitted.device}; this spec runs on "
                                    f"{device.name}", profile, fix=f"calibrate on {device.name}, or drop serving.step_profile"))
            return None
        given = {**{k: v for k, v in fitted.step_model.model_dump().items() if v is not None}, **given}
    default = device.efficiency.model_dump(include=set(STEP_FIELDS)) if device.efficiency else {}
    default = {k: v for k, v in default.items() if v is not None}
    # unmeasured: no HTTP or per-layer overhead, and all-reduces at the link's bandwidth
    values = {"request_overhead": 0.0, "layer_overhead": 0.0, "allreduce_efficiency": 1.0, "small_gemm_params": 0.0,
              **default, **given}
    if "compute_efficiency" in values:                         # attention as efficient as the rest unless measured
        values.setdefault("attention_efficiency", values["compute_efficiency"])
    # steps under CUDA graphs cost what eager steps do unless measured apart
    if "step_overhead" in values:
        values.setdefault("graph_step_overhead", values["step_overhead"])
    values.setdefault("graph_layer_overhead", values["layer_overhead"])
    missing = [k for k in STEP_FIELDS if k not in values]
    if missing:
        problems.append(Problem("serving.gpu", f"the catalog has no efficiency block for {device.name}, so the step-time model "
                                f"lacks {', '.join(missing)}", device.name,
                                fix=f"add an efficiency: block to {device.name} in models/hardware/gpus.yaml, or set "
                                    + ", ".join(f"serving.step_model.{k}" for k in missing)))
        return None
    return StepCoefficients(**values, allreduce_bandwidth=allreduce_link(device),
                            overridden=[k for k in STEP_FIELDS if k in given])


def allreduce_link(device: Device) -> float:
    """Bytes/s one direction of the link a tensor-parallel ring uses: NVLink, else PCIe, else (a CPU) host memory."""
    return device.nvlink or device.pcie or device.memory_bandwidth


def catalog_step(device: Device) -> StepCoefficients:
    """The catalog's step coefficients of `device`, no spec on top: what kvplan.gpufit fits and checks."""
    problems: list[Problem] = []
    step = step_coefficients(device, None, None, problems)
    if step is None:
        raise SpecError(problems)
    return step

