"""The catalog: public facts about models and hardware, each number with its source and date.

It is read from `models/` (shipped inside the installed package): `llm/*.yaml` one file per
architecture, `hardware/*.yaml` for accelerators, host memory, NVMe classes, NICs and Ceph
device classes, and `prices.yaml`. A malformed catalog file is reported like a bad spec.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import Field, ValidationError, model_validator

from .errors import Problem, SpecError, did_you_mean
from .resources import data_root
from .spec.architecture import Architecture, Source
from .spec.base import SpecModel
from .units import Bandwidth, Duration, Size


class Cited(SpecModel):
    name: str = Field(min_length=1)
    """Catalog name."""
    sources: list[Source] = Field(min_length=1)
    """Public sources of the numbers (at least one)."""
    note: str | None = None
    """How the numbers were read or derived."""


class DeviceEfficiency(SpecModel):
    """How close vLLM gets to this device's peaks: the step-time model's default coefficients
    (docs/step-time.md). A spec overrides any of them under serving.step_model; calibration fits them."""

    compute_efficiency: float = Field(gt=0, le=1)
    """Achieved / peak FLOP/s when a step is compute-bound (model FLOPs utilisation)."""
    memory_efficiency: float = Field(gt=0, le=1)
    """Achieved / peak memory bandwidth when a step is memory-bound (model bandwidth utilisation)."""
    attention_efficiency: float | None = Field(None, gt=0, le=1)
    """Achieved / peak FLOP/s of attention over the KV cache; unset: compute_efficiency."""
    step_overhead: Duration
    """Fixed cost of every engine step outside the roofline (scheduling, input preparation, launch, sampling)."""
    allreduce_latency: Duration
    """Fixed cost of one tensor-parallel all-reduce, on top of its bytes over the link."""
    request_overhead: Duration = 0.0
    """Latency of each request outside engine steps (the API server's HTTP handling and streaming), added to
    its TTFT and E2E; 0 unless measured (kvplan calibrate fits it)."""
    layer_overhead: Duration = 0.0
    """GPU time of every transformer layer in every step outside the roofline (norms, rotary, activation, adds)."""
    graph_step_overhead: Duration | None = None
    """step_overhead of a step vLLM runs as a captured CUDA graph (Resolved.cuda_graph_max_tokens); unset: step_overhead."""
    graph_layer_overhead: Duration | None = None
    """layer_overhead of a step vLLM runs as a captured CUDA graph, which launches no kernel one by one; unset:
    layer_overhead."""
    allreduce_efficiency: float = Field(1.0, gt=0, le=1)
    """Achieved bus bandwidth of a large all-reduce / the link's one-direction bandwidth."""
    small_gemm_params: float = Field(0.0, ge=0)
    """Weight parameters per layer per GPU at which the matrix multiplies run at half of compute_efficiency
    (small matrices leave part of the GPU idle); 0 unless measured."""
    sources: list[Source] = Field(min_length=1)
    """Public sources that support the numbers (at least one)."""
    note: str | None = None
    """How the numbers were read or derived; which of them are assumptions."""


class Device(Cited):
    kind: Literal["gpu", "cpu"] = "gpu"
    """gpu, or cpu for a CPU-only host running vLLM's CPU backend."""
    aliases: list[str] = []
    """Other names users write for it, as nvidia-smi and PyTorch (so vLLM's logs) print them; each cited."""
    memory: Size
    """Accelerator memory (HBM) capacity."""
    cuda_memory: Size | None = None
    """The total that CUDA reports (cudaMemGetInfo, what vLLM multiplies by gpu_memory_utilization): less than
    nvidia-smi's `memory` by what the driver reserves; unset: `memory`."""
    memory_bandwidth: Bandwidth
    """Accelerator memory bandwidth."""
    bf16_tflops: float = Field(gt=0)
    """Dense BF16 peak, TFLOP/s."""
    fp8_tflops: float | None = Field(None, gt=0)
    """Dense FP8 peak, TFLOP/s (none without FP8 tensor cores)."""
    fp32_tflops: float | None = Field(None, gt=0)
    """Dense FP32 peak, TFLOP/s: the peak of a model served in fp32 (serving.weights_dtype: fp32). Given for the CPU
    devices, which serve fp32 where they lack bf16 arithmetic; none where no spec serves fp32."""
    pcie: Bandwidth | None = None
    """Host link, one direction."""
    nvlink: Bandwidth | None = None
    """GPU-to-GPU link, one direction per GPU."""
    node_host_memory: Size | None = None
    """Host memory (RAM) of the vendor's reference server for this accelerator (DGX H100: 2 TB), the default of
    serving.host_memory; unset: the spec must say, or host memory is not checked."""
    efficiency: DeviceEfficiency | None = None
    """Default step-time coefficients (resolve refuses a device without them unless the spec sets all four)."""


class HostMemory(Cited):
    bandwidth_per_channel: Bandwidth
    channels_per_socket: int = Field(ge=1)


class NvmeClass(Cited):
    example_device: str = ""
    capacity: Size | None = None
    """The largest drive of the example device's family: a tier larger than `drives` of them cannot be built
    from drives of this class (a smaller drive of it is the user's to state inline)."""
    read_bandwidth: Bandwidth
    write_bandwidth: Bandwidth
    read_iops: int = Field(ge=1)
    write_iops: int = Field(ge=1)
    read_latency: Duration
    write_latency: Duration


class Nic(Cited):
    bandwidth: Bandwidth
    latency: Duration


class CephDeviceClass(Cited):
    osd_read_bandwidth: Bandwidth
    osd_write_bandwidth: Bandwidth
    osd_read_iops: int = Field(ge=1)
    osd_write_iops: int = Field(ge=1)
    read_latency: Duration
    write_latency: Duration


class Price(Cited):
    usd: float = Field(ge=0)
    """Price in US dollars per the unit of its list (per hour, per GB-month, per port-month)."""


class Prices(SpecModel):
    gpu_hour: list[Price]
    ddr_gb_month: list[Price]
    nvme_gb_month: list[Price]
    ceph_raw_gb_month: list[Price]
    nic_port_month: list[Price]


class VllmMemory(Cited):
    """What vLLM takes from an accelerator's memory before it sizes the KV cache: the coefficients of
    kvplan/kv_capacity.py (models/vllm_memory.yaml, docs/kv-capacity.md)."""

    forward_hidden_copies: float = Field(ge=0)
    """Tensors of hidden_size per token alive at the peak of the profiling forward pass (residual, normed input)."""
    forward_mlp_copies: float = Field(ge=0)
    """Tensors of intermediate_size / TP per token alive at that peak (gate_up output: 2, activation output: 1)."""
    sampler_bytes_per_logit: float = Field(ge=0)
    """Bytes per logit (rows x vocabulary) alive at the peak of the profiling sampler run."""
    non_torch: Size
    """Memory outside torch that an engine adds per GPU (cuBLAS workspaces and the like)."""
    non_torch_tp: Size
    """What an engine at tensor parallelism > 1 adds to `non_torch` per GPU (NCCL, custom all-reduce buffers)."""
    cuda_graphs_subtracted: Literal[False]
    """Whether vLLM subtracts an estimate of CUDA-graph memory before it sizes the KV cache: vLLM does from 0.21
    (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 by default); kvplan models the versions before it, whose engines its
    data holds, so only false is accepted."""


class CatalogLlm(Architecture):
    @model_validator(mode="after")
    def _cited(self) -> "CatalogLlm":
        if not self.sources:
            raise ValueError("a catalog model needs sources: [{url, date, covers}]")
        return self


T = TypeVar("T", bound=Cited)


class Catalog(SpecModel):
    llms: dict[str, CatalogLlm]
    devices: dict[str, Device]
    host_memory: dict[str, HostMemory]
    nvme: dict[str, NvmeClass]
    nics: dict[str, Nic]
    ceph_device_classes: dict[str, CephDeviceClass]
    prices: Prices
    vllm_memory: VllmMemory
    """What vLLM takes from accelerator memory before the KV cache (models/vllm_memory.yaml)."""
    root: str
    """Folder the catalog was read from."""

    def llm(self, name: str) -> CatalogLlm | None:
        """A model by name or alias, case-insensitively."""
        key = name.lower()
        for entry in self.llms.values():
            if entry.name.lower() == key or key in (a.lower() for a in entry.aliases):
                return entry
        return None

    def llm_names(self) -> list[str]:
        return sorted(self.llms)


def _product(name: str) -> str:
    """The product a name starts with, letters then digits, separators ignored: 'h100' of H100-SXM, 'a10' of A10G,
    'gen4' of gen-4."""
    plain = re.sub(r"[^a-z0-9]", "", name.lower())
    found = re.match(r"[a-z]*\d+", plain)
    return found.group(0) if found else plain


def lookup(table: dict[str, T], name: str, path: str, what: str) -> T:
    """`table[name]` by its name or an alias (case-insensitive), or a SpecError naming `path`.

    A name that several entries extend ('H100': H100-SXM, H100-PCIe, H100-NVL) lists them, since the
    variants differ in what kvplan models (memory bandwidth, links, price); a "did you mean" never
    crosses to another product (H100 is not a typo of H200)."""
    key = name.lower()
    for entry_name, entry in table.items():
        if entry_name.lower() == key or key in (a.lower() for a in getattr(entry, "aliases", [])):
            return entry
    variants = sorted(n for n in table if n.lower().startswith(key + "-") or n.lower().startswith(key + " "))
    if len(variants) > 1:
        raise SpecError([Problem(path, f"'{name}' is {len(variants)} {what}s in the catalog, which differ in what kvplan "
                                 "models (memory, bandwidth, links, price)", name, ", ".join(variants),
                                 "write the one you have (`kvplan catalog` lists each with its figures)")])
    if len(variants) == 1:
        return table[variants[0]]
    guess = did_you_mean(name, table)
    if guess is not None and _product(guess) != _product(name):
        guess = None
    raise SpecError([Problem(path, f"unknown {what} '{name}'", name, ", ".join(sorted(table)),
                             f"did you mean '{guess}'?" if guess else "pick one that `kvplan catalog` lists")])


@lru_cache(maxsize=4)
def load_catalog(root: str | None = None) -> Catalog:
    """Read the catalog under `root` (default: the one shipped with kvplan)."""
    from .spec.load import problems_from, read_yaml

    base = Path(root) if root else data_root() / "models"
    problems: list[Problem] = []

    def parse(model: type, data: object, file: Path, where: str = ""):
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            problems.extend(Problem(f"{file.name}:{'.'.join(filter(None, (where, p.path)))}", p.message, p.value,
                                    p.allowed, p.fix) for p in problems_from(exc, model))
            return None

    llms = {}
    for file in sorted((base / "llm").glob("*.yaml")):
        entry = parse(CatalogLlm, read_yaml(file, bounded=False), file)
        if entry is not None:
            llms[entry.name] = entry

    def table(file_name: str, key: str, model: type[T]) -> dict[str, T]:
        file = base / "hardware" / file_name
        data = read_yaml(file, bounded=False)
        rows = data.get(key) if isinstance(data, dict) else None
        if not isinstance(rows, list):
            problems.append(Problem(f"{file.name}:{key}", f"expected a list under '{key}'", fix="see models/README.md"))
            return {}
        out = {}
        for i, row in enumerate(rows):
            label = row.get("name") if isinstance(row, dict) else None
            entry = parse(model, row, file, f"{key}[{i}]" + (f"({label})" if label else ""))
            if entry is not None:
                out[entry.name] = entry
        return out

    tables = dict(devices=table("gpus.yaml", "gpus", Device),
                  host_memory=table("host_memory.yaml", "host_memory", HostMemory),
                  nvme=table("nvme.yaml", "nvme", NvmeClass),
                  nics=table("nics.yaml", "nics", Nic),
                  ceph_device_classes=table("ceph.yaml", "ceph_device_classes", CephDeviceClass))
    prices_file = base / "prices.yaml"
    price_data = read_yaml(prices_file, bounded=False)
    prices = parse(Prices, price_data.get("prices") if isinstance(price_data, dict) else None, prices_file)
    memory_file = base / "vllm_memory.yaml"
    memory_data = read_yaml(memory_file, bounded=False)
    vllm_memory = parse(VllmMemory, memory_data.get("vllm_memory") if isinstance(memory_data, dict) else None, memory_file)
    if problems or prices is None or vllm_memory is None:
        raise SpecError(problems or [Problem("prices.yaml" if prices is None else "vllm_memory.yaml", "missing")],
                        source=f"catalog {base}")
    return Catalog(llms=llms, prices=prices, vllm_memory=vllm_memory, root=str(base), **tables)
