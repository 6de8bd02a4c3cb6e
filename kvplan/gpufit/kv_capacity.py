"""The KV blocks that real vLLM engines reported, against kvplan's KV capacity (kvplan/kv_capacity.py).

An engine here is one vLLM configuration and the GPU KV blocks it logged at start-up: every BLIS run
(models/profiles/e2e/blis/runs.yaml, H100 at TP 1, 2 and 4) and the llm-d guide's Qwen3-32B engines
(models/profiles/kv_capacity/engines.yaml). Each is resolved from a spec of its own configuration, and
`Resolved.hbm_blocks` is compared with what it reported.

One coefficient of models/vllm_memory.yaml is fitted here, `non_torch_tp` (the memory outside torch that
tensor parallelism adds per GPU): for each configuration at TP > 1, what its reported blocks leave of the
memory vLLM requested once the weights, the activation peak, the TP 1 non-torch memory and the blocks
(half a block more: the count is rounded down) are taken; the fit is the mean over configurations, each
counted once however many runs share it, rounded to the MiB. `leave_one_model_out` refits without one
model's engines and predicts them: that held-out error is the result; the in-sample one stands beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..catalog import Catalog, load_catalog
from ..resolve import Resolved, resolve
from ..resources import data_root
from ..spec import from_mapping

MIB = 2**20
WORKLOAD = {"kind": "chat", "requests": 1, "arrivals": {"process": "poisson", "rate": "1/s"}}
"""Any workload: a spec needs one, and the KV capacity does not depend on it."""


@dataclass(frozen=True)
class Engine:
    name: str
    source: str
    model: str
    gpu: str
    tensor_parallel: int
    gpu_memory_utilization: float
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int | None
    block_size: int
    reported_blocks: int

    @property
    def configuration(self) -> tuple:
        """What decides the blocks: runs that share it are one engine configuration."""
        return (self.model, self.gpu, self.tensor_parallel, self.gpu_memory_utilization, self.max_num_seqs,
                self.max_num_batched_tokens, self.max_model_len, self.block_size)

    def spec(self) -> dict:
        serving = {"gpu": self.gpu, "gpus_per_node": self.tensor_parallel, "tensor_parallel": self.tensor_parallel,
                   "instances": 1, "block_size": self.block_size, "gpu_memory_utilization": self.gpu_memory_utilization}
        for key in ("max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, key) is not None:
                serving[key] = getattr(self, key)
        return {"name": self.name, "model": self.model, "serving": serving, "workload": WORKLOAD}

    def resolved(self, catalog: Catalog | None = None) -> Resolved:
        return resolve(from_mapping(self.spec()), catalog)


def _profiles() -> Path:
    return data_root() / "models" / "profiles"


def engines() -> list[Engine]:
    """Every engine of the data: the BLIS runs, then engines.yaml's."""
    import yaml

    table = yaml.safe_load((_profiles() / "kv_capacity" / "engines.yaml").read_text())
    blis_gmu = table["blis"]["gpu_memory_utilization"]
    out = []
    for name, r in yaml.safe_load((_profiles() / "e2e" / "blis" / "runs.yaml").read_text())["runs"].items():
        out.append(Engine(name, "BLIS", r["catalog_model"], r["gpu"], r["tensor_parallel"], blis_gmu, r["max_num_seqs"],
                          r["max_num_batched_tokens"], r["max_model_len"], r["block_size"], r["gpu_kv_blocks"]))
    for name, e in table["engines"].items():
        out.append(Engine(name, e["source"], e["catalog_model"], e["gpu"], e["tensor_parallel"],
                          e["gpu_memory_utilization"], e["max_num_seqs"], e["max_num_batched_tokens"],
                          e["max_model_len"], e["block_size"], e["gpu_kv_blocks"]))
    return out


def _with_non_torch_tp(catalog: Catalog, value: int) -> Catalog:
    return catalog.model_copy(update={"vllm_memory": catalog.vllm_memory.model_copy(update={"non_torch_tp": value})})


def left_over(engine: Engine, catalog: Catalog) -> float:
    """Bytes per GPU that the engine's reported blocks leave unexplained by every term but non_torch_tp."""
    r = engine.resolved(_with_non_torch_tp(catalog, 0))
    p = r.profiled
    if p is None:
        raise ValueError(f"{engine.name} runs on {engine.gpu}, a CPU device: vLLM does not profile there")
    return p.requested - r.weight_bytes_per_gpu - p.non_kv - (engine.reported_blocks + 0.5) * r.block_bytes_per_rank


def fit(fitted: list[Engine], catalog: Catalog | None = None) -> int:
    """non_torch_tp from `fitted` (the module docstring's procedure), in bytes."""
    catalog = catalog or load_catalog()
    configurations = {e.configuration: e for e in fitted if e.tensor_parallel > 1}
    gaps = [left_over(e, catalog) for e in configurations.values()]
    return round(sum(gaps) / len(gaps) / MIB) * MIB


@dataclass(frozen=True)
class Row:
    engine: Engine
    in_sample: int
    held_out: int

    @staticmethod
    def error(predicted: int, reported: int) -> float:
        return predicted / reported - 1


def rows(catalog: Catalog | None = None) -> list[Row]:
    """Each engine's blocks with the catalog's coefficients (in-sample) and with non_torch_tp refitted without
    its model's engines (held out)."""
    catalog = catalog or load_catalog()
    data = engines()
    held_out = {}
    for model in {e.model for e in data}:
        rest = [e for e in data if e.model != model]
        held_out[model] = _with_non_torch_tp(catalog, fit(rest, catalog))
    return [Row(e, e.resolved(catalog).hbm_blocks, e.resolved(held_out[e.model]).hbm_blocks) for e in data]


def table(table_rows: list[Row]) -> str:
    """The Markdown table of docs/kv-capacity.md: one line per engine configuration, the runs that share it
    counted."""
    lines = ["| engine (runs) | model | TP | gpu_memory_utilization | reported blocks | predicted (in-sample) | error "
             "| predicted (held out) | error |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple, list[Row]] = {}
    for row in table_rows:
        groups.setdefault(row.engine.configuration, []).append(row)
    for group in groups.values():
        row, e = group[0], group[0].engine
        label = f"{e.source} ({len(group)} run{'s' if len(group) > 1 else ''})" if e.source == "BLIS" else e.name
        lines.append(f"| {label} | {e.model} | {e.tensor_parallel} | {e.gpu_memory_utilization} | {e.reported_blocks:,} "
                     f"| {row.in_sample:,} | {Row.error(row.in_sample, e.reported_blocks):+.2%} | {row.held_out:,} "
                     f"| {Row.error(row.held_out, e.reported_blocks):+.2%} |")
    return "\n".join(lines) + "\n"
