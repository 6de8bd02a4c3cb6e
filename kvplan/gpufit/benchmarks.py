"""End-to-end serving benchmarks: what `vllm bench serve` measured, replayed through the simulator.

A benchmark here is one run of a serving benchmark against one vLLM deployment: the model, GPU,
tensor-parallel degree and weight precision it served, the prompts it sent (their lengths, how
many, at what rate or concurrency) and the medians it printed (TTFT, TPOT, output throughput).
Two kinds are read:

- public measurements, kept with their sources in models/profiles/e2e/*.yaml;
- a team's own `vllm bench serve --save-result` JSON files (`read_vllm_result`), whose setup
  comes from the kvplan spec that describes the deployment they benched.

`predict` replays a benchmark through kvplan's own simulator (`kvplan.sim.run`, the engine that
plans use): the prompts become a trace of unique (uncached) prompts that arrive all at once
(request rate inf), one at a time (max concurrency 1: each starts after the last has finished),
or as a seeded Poisson stream (a request rate). A benchmark at another fixed concurrency is a
closed loop, which kvplan's open-loop workloads do not replay; `replayable` says so, with the
other reasons a benchmark cannot be replayed (lengths or prompt count not stated, a scheduler
the simulator does not model), and `Replay.why_not` adds the physical check: a TTFT below what
the prompt's matrix multiplies take at the GPU's full peak was not a cold prefill. `fit_overheads` moves step_overhead and request_overhead until
replays meet what benchmarks measured (the public fit in `report` and `kvplan calibrate
--vllm-result` both use it).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import Problem, SpecError
from ..named_file import check_regular
from ..resolve import Resolved, resolve
from ..spec import from_mapping
from ..spec.topology import Topology
from ..step_coefficients import StepCoefficients

OVERHEAD_ROUNDS = 4
ALONE_GAP_S = 3600.0
"""Seconds between the prompts of a max-concurrency-1 benchmark: each runs alone."""


class Benchmark(BaseModel):
    """One end-to-end serving benchmark (models/profiles/e2e/*.yaml, or a `vllm bench serve` result file)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    source: dict[str, str | None]
    gpu: str
    model: str
    hf_model: str | None = None
    tensor_parallel: int | None = Field(None, ge=1)
    weights_dtype: str = "bf16"
    vllm_version: str | None = None
    dataset: str | None = None
    input_len: float | None = None
    output_len: float | None = None
    input_lens: list[int] | None = None
    """Per-request prompt lengths, when the source saved them (they replace input_len)."""
    output_lens: list[int] | None = None
    max_concurrency: int | None = None
    request_rate: float | None = None
    num_prompts: int | None = None
    metrics: dict[str, float]
    assumed: str | None = None
    excluded: str | None = None
    """Why this benchmark is kept as a record but not replayed (a scheduler mode the simulator does not model)."""
    serving: dict[str, Any] = {}
    """Spec serving: settings the benchmarked server ran with besides the defaults (max_num_seqs, ...)."""

    def replayable(self) -> str | None:
        """None when `predict` can replay it, else why not."""
        if self.excluded:
            return self.excluded
        if self.tensor_parallel is None:
            return "tensor-parallel degree not stated"
        if self.input_lens is not None and len(self.input_lens) != len(self.output_lens or []):
            return "per-request prompt and output lengths do not pair up"
        if self.input_lens is None and (self.input_len is None or self.output_len is None):
            return "prompt and output lengths not stated"
        if self.input_lens is None and self.num_prompts is None:
            return "number of prompts not stated"
        c = self.max_concurrency
        if c not in (None, 1) and c < self.prompts:
            return f"closed loop at concurrency {c} (kvplan replays open-loop arrivals)"
        return None

    @property
    def prompts(self) -> int:
        return len(self.input_lens) if self.input_lens is not None else int(self.num_prompts or 0)

    def lengths(self) -> list[tuple[int, int]]:
        if self.input_lens is not None:
            return list(zip(self.input_lens, self.output_lens or []))
        return [(max(1, round(self.input_len)), max(1, round(self.output_len)))] * self.prompts

    def arrivals(self, seed: int = 0) -> np.ndarray:
        n = self.prompts
        if self.max_concurrency == 1:
            return np.arange(n) * ALONE_GAP_S
        if self.request_rate is None or self.max_concurrency is not None:
            return np.zeros(n)
        return np.cumsum(np.random.default_rng(seed).exponential(1.0 / self.request_rate, n))


@dataclass(frozen=True)
class Predicted:
    ttft_median_ms: float
    ttft_mean_ms: float
    tpot_median_ms: float
    tpot_mean_ms: float
    output_throughput: float
    """Output tokens per second over the whole run."""

    def get(self, metric: str) -> float:
        return getattr(self, metric)


METRICS = ("ttft_median_ms", "ttft_mean_ms", "tpot_median_ms", "tpot_mean_ms", "output_throughput")
"""The figures a benchmark can be compared on (a source that prints means and no medians is compared on means)."""


def compared(b: Benchmark) -> list[str]:
    """The metrics `b` is compared on: each of TTFT and TPOT by its median, else its mean; and throughput."""
    out = []
    for name in ("ttft", "tpot"):
        have = [m for m in (f"{name}_median_ms", f"{name}_mean_ms") if m in b.metrics]
        out += have[:1]
    return out + (["output_throughput"] if "output_throughput" in b.metrics else [])


def e2e_root() -> Path:
    from ..resources import data_root
    return data_root() / "models" / "profiles" / "e2e"


@lru_cache(maxsize=1)
def public() -> tuple[Benchmark, ...]:
    """Every public benchmark in models/profiles/e2e/*.yaml, in file then list order."""
    out: list[Benchmark] = []
    for path in sorted(e2e_root().glob("*.yaml")):
        for k, entry in enumerate(yaml.safe_load(path.read_text())["measurements"]):
            try:
                out.append(Benchmark.model_validate(entry))
            except ValidationError as exc:
                what = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise SpecError([Problem(f"{path.name}: measurements[{k}]", what,
                                         fix="correct the entry (fields as in the file's header)")]) from None
    return tuple(out)


def read_vllm_result(path: str | Path, topo: Topology) -> Benchmark:
    """A `vllm bench serve --save-result` JSON file as a Benchmark of the deployment `topo` describes. Per-request
    lengths are used when the file has them (saved by default up to vLLM 0.10; later with --save-detailed)."""
    p = Path(path)
    where = f"--vllm-result {p}"
    check_regular(p, where, "give the file `vllm bench serve --save-result` wrote")
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError([Problem(where, "no such file", fix="give the file `vllm bench serve --save-result` wrote")]) from None
    except (OSError, ValueError) as exc:
        raise SpecError([Problem(where, f"not a JSON file: {exc}",
                                 fix="give the file `vllm bench serve --save-result` wrote")]) from None
    if not isinstance(data, dict) or "median_ttft_ms" not in data or "completed" not in data:
        raise SpecError([Problem(where, "not a `vllm bench serve` result: it lacks median_ttft_ms and completed",
                                 fix="save the result with `vllm bench serve ... --save-result`")])
    try:
        return _benchmark(p, data, topo)
    except (KeyError, TypeError, ValueError, IndexError, ValidationError) as exc:
        what = f"lacks {exc}" if isinstance(exc, KeyError) else f"has a value kvplan cannot read ({str(exc).splitlines()[0]})"
        raise SpecError([Problem(where, f"this `vllm bench serve` result {what}",
                                 fix="give the file `vllm bench serve --save-result` wrote, unedited")]) from None


def _benchmark(p: Path, data: dict, topo: Topology) -> Benchmark:
    completed = int(data["completed"])
    if completed < 1:
        raise SpecError([Problem(f"--vllm-result {p}", "no request completed in this run",
                                 fix="bench again once the server answers")])
    lens: dict[str, list[int] | None] = {"input_lens": None, "output_lens": None}
    if isinstance(data.get("input_lens"), list) and isinstance(data.get("output_lens"), list):
        errors = data.get("errors") or [""] * len(data["input_lens"])
        keep = [k for k, e in enumerate(errors) if not e]
        lens = {key: [int(data[key][k]) for k in keep] for key in lens}
    rate = data.get("request_rate")
    s = topo.serving
    return Benchmark(
        id=p.stem, source={"url": str(p), "date": str(data.get("date", "")), "covers": "vllm bench serve --save-result"},
        gpu=s.gpu, model=topo.model if isinstance(topo.model, str) else topo.model.name,
        hf_model=data.get("model_id"), tensor_parallel=s.tensor_parallel,
        weights_dtype=s.weights_dtype if s.weights_dtype != "auto" else "bf16",
        input_len=data["total_input_tokens"] / completed, output_len=data["total_output_tokens"] / completed,
        **lens, max_concurrency=data.get("max_concurrency"),
        request_rate=None if rate in (None, "inf", float("inf")) else float(rate), num_prompts=completed,
        metrics={"ttft_median_ms": float(data["median_ttft_ms"]), "tpot_median_ms": float(data["median_tpot_ms"]),
                 "output_throughput": float(data["output_throughput"])},
        serving=s.model_dump(exclude_unset=True, mode="json"))


def topology(b: Benchmark, trace: Path, step_model: dict[str, Any] | None = None) -> Topology:
    """The spec of the benchmarked deployment, replaying `trace`."""
    lengths = b.lengths()
    serving = {"gpu": b.gpu, "tensor_parallel": b.tensor_parallel, "weights_dtype": b.weights_dtype,
               "gpus_per_node": max(8, b.tensor_parallel or 1), **b.serving}
    serving.pop("step_model", None)
    serving.setdefault("max_model_len", max(i + o for i, o in lengths) + 16)
    if step_model:
        serving["step_model"] = step_model
    return from_mapping({"name": "benchmark", "model": b.model, "serving": serving,
                         "workload": {"kind": "trace", "trace": {"path": str(trace), "block_size": 16}}})


def write_trace(b: Benchmark, folder: Path, name: str, seed: int = 0) -> Path:
    """The benchmark's prompts as a Mooncake-format trace of unique prompts (no prefix is shared)."""
    path = folder / f"{name}.jsonl"
    lines, next_id = [], 0
    for (n_in, n_out), at in zip(b.lengths(), b.arrivals(seed)):
        blocks = -(-n_in // 16)
        lines.append(json.dumps({"timestamp": int(round(at * 1000)), "input_length": n_in, "output_length": n_out,
                                 "hash_ids": list(range(next_id, next_id + blocks))}))
        next_id += blocks
    path.write_text("\n".join(lines) + "\n")
    return path


class Replay:
    """Replays benchmarks with given step coefficients; each benchmark's trace is written once."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="kvplan-bench-")
        self._traces: dict[str, Path] = {}

    def resolved(self, b: Benchmark, step_model: dict[str, Any] | None = None) -> Resolved:
        key = hashlib.sha256(b.model_dump_json().encode()).hexdigest()[:16]
        if key not in self._traces:
            self._traces[key] = write_trace(b, Path(self._dir.name), key)
        return resolve(topology(b, self._traces[key], step_model))

    def why_not(self, b: Benchmark) -> str | None:
        """None when `b` can be replayed and is physically possible, else why not."""
        return b.replayable() or self.too_fast(b)

    def too_fast(self, b: Benchmark) -> str | None:
        """Why `b` cannot have been a cold prefill, or None: its TTFT is shorter than the prompt's matrix
        multiplies alone take at the best efficiency any layer reached on that GPU in the operator profiles
        (`operators.efficiency_ceiling`; the GPU's full peak where it has none). No step model can, or
        should, meet such a figure: the prompts were served from a cache."""
        from ..sim.steptime import StepTime
        from .operators import efficiency_ceiling

        r = self.resolved(b)
        ceiling = efficiency_ceiling(r.device.name)
        tokens = float(np.median(b.input_lens)) if b.input_lens else float(b.input_len or 0)
        peak_ms = StepTime(r).linear_flops * tokens / r.peak_flops * 1e3
        for metric in ("ttft_median_ms", "ttft_mean_ms"):
            measured = b.metrics.get(metric)
            if measured is not None and measured < peak_ms / (ceiling or 1.0):
                best = (f"no layer in its operator profiles ran above {ceiling:.1%}" if ceiling
                        else "it has no operator profiles, so the bound is the peak itself")
                return (f"too fast for a cold prefill: {metric} {measured:.4g} ms means {peak_ms / measured:.0%} of "
                        f"{r.device.name}'s {r.peak_flops / 1e12:.0f} TFLOPS for the matrix multiplies of "
                        f"{tokens:.0f} prompt tokens alone, and {best}; the prompts were probably served from a cache")
        return None

    def predict(self, b: Benchmark, step_model: dict[str, Any] | None = None) -> Predicted:
        from ..sim.run import run

        table = run(self.resolved(b, step_model), seed=0).per_request
        if len(table.ttft) == 0:
            raise SpecError([Problem(b.id, "no request of this benchmark fits the replayed deployment's max_model_len",
                                     fix="raise serving.max_model_len in the spec to the benchmark's longest prompt")])
        ttft = np.asarray(table.ttft)
        tpot = np.asarray(table.tpot)[np.asarray(table.output_tokens) > 1]
        out = float(np.sum(table.output_tokens))
        first = float(np.min(table.arrival))
        last = float(np.max(np.asarray(table.arrival) + np.asarray(table.e2e)))
        seconds = sum(float(e) for e in table.e2e) if b.max_concurrency == 1 else last - first
        nan = float("nan")
        return Predicted(float(np.median(ttft)) * 1e3, float(np.mean(ttft)) * 1e3,
                         float(np.median(tpot)) * 1e3 if tpot.size else nan, float(np.mean(tpot)) * 1e3 if tpot.size else nan,
                         out / seconds if seconds > 0 else nan)

    def close(self) -> None:
        self._dir.cleanup()


def step_model(step: StepCoefficients) -> dict[str, float]:
    return step.model_dump(exclude={"allreduce_bandwidth", "overridden"})


def fit_overheads(train: list[Benchmark], replay: Replay, step: StepCoefficients) -> dict[str, float]:
    """graph_step_overhead and request_overhead: a few rounds of replaying the training benchmarks, each moving
    graph_step_overhead (the fixed cost of a decode step, which vLLM runs as a CUDA graph) by the median gap in
    TPOT and request_overhead by the median gap in TTFT."""
    step_o, req_o = step.graph_step_overhead, step.request_overhead
    for _ in range(OVERHEAD_ROUNDS):
        trial = step_model(step.model_copy(update={"graph_step_overhead": step_o, "request_overhead": req_o}))
        pred = [replay.predict(b, trial) for b in train]
        gaps: dict[str, list[float]] = {"ttft": [], "tpot": []}
        for b, p in zip(train, pred):
            for m in compared(b):
                if m.startswith(("ttft", "tpot")):
                    gaps[m[:4]].append(b.metrics[m] - p.get(m))
        ttft, tpot = gaps["ttft"], gaps["tpot"]
        step_o = max(step_o + (float(np.median(tpot)) * 1e-3 if tpot else 0.0), 0.0)
        req_o = max(req_o + (float(np.median(ttft)) * 1e-3 if ttft else 0.0), 0.0)
    return {"graph_step_overhead": round(step_o, 6), "request_overhead": round(req_o, 6)}
