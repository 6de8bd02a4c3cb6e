"""Real vLLM servers end to end: measured runs replayed request by request, the serving path's coefficients
fitted to them, and the fit checked on models it has not seen.

A run is one vLLM instance serving one benchmark: every request's arrival, prompt and output tokens and
which prompt it repeated (a replay log, kvplan.sim.replay), the server's configuration, and what the
client measured (TTFT and E2E per request, summarised per load stage and for the whole run). The runs
kept in models/profiles/e2e/blis/ are sixteen vLLM runs on H100 published by the BLIS project (twelve
usable; their SOURCE.yaml cites them).

What a replay predicts comes from kvplan's own simulator with the catalog's coefficients, except two
that only end-to-end runs can measure (docs/fidelity-e2e.md explains both):

- `graph_step_overhead`: the fixed cost of a decode step, which vLLM runs as a captured CUDA graph
  (Resolved.cuda_graph_max_tokens). A decode step's time is the roofline of its weights, KV reads and
  FLOPs (the per-operator fit of docs/fidelity-gpu.md) plus all-reduces plus this overhead, so the
  overhead is what the measured time per output token leaves once the rest is subtracted. Each load
  stage gives one point: its batch by Little's law (rate x mean E2E), its mean context (prompt plus
  half the output), its measured TPOT; the fit is the least-squares constant (`fit_decode_overhead`).
- `request_overhead`: the latency outside engine steps (the API server's tokenising, HTTP and
  streaming path), added to every TTFT and E2E. The fit is the median, over runs, of the measured
  mean TTFT less the simulated one without it (`fit`).

`leave_one_model_out` refits both without one model's runs and predicts that model's runs with the
refit: the held-out error is the result; the in-sample error stands beside it.
"""

from __future__ import annotations

import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..resolve import Resolved, resolve
from ..spec import from_mapping

FITTED = ("graph_step_overhead", "request_overhead")
"""The coefficients the end-to-end runs fit; every other one is the catalog's."""
METRICS = ("ttft_mean", "ttft_p90", "ttft_p99", "e2e_mean", "e2e_p90", "e2e_p99", "tpot_mean")


@dataclass(frozen=True)
class Figures:
    """A run's (or a stage's) latency figures, in seconds."""

    ttft_mean: float
    ttft_p90: float
    ttft_p99: float
    e2e_mean: float
    e2e_p90: float
    e2e_p99: float
    tpot_mean: float

    def get(self, metric: str) -> float:
        return float(getattr(self, metric))


@dataclass(frozen=True)
class Stage:
    """One load stage of a run, as it was measured."""

    rate: float
    """Requests per second sent."""
    requests: int
    measured: Figures
    prompt_tokens: float
    """Mean prompt tokens of the stage's requests."""
    output_tokens: float
    """Mean output tokens of the stage's requests."""


@dataclass(frozen=True)
class Run:
    """A measured run and the spec that replays it (its workload a replay of the run's own requests)."""

    name: str
    model: str
    """The catalog's name of the model served."""
    spec: dict[str, Any]
    base_dir: Path
    """Where the spec's relative paths (the replay log) are read from."""
    stages: list[Stage]
    measured: Figures

    def resolved(self, overrides: dict[str, float] | None = None) -> Resolved:
        """The run's spec resolved, with `overrides` as serving.step_model coefficients (seconds)."""
        spec = dict(self.spec)
        if overrides:
            serving = dict(spec["serving"])
            serving["step_model"] = {**serving.get("step_model", {}), **{k: f"{v * 1e6:.3f}us" for k, v in overrides.items()}}
            spec["serving"] = serving
        return resolve(from_mapping(spec, base_dir=self.base_dir))


@dataclass(frozen=True)
class DecodePoint:
    """One load stage seen as a decode step: what the roofline and all-reduces predict without the fixed
    overhead, against the measured time per output token."""

    run: str
    model: str
    batch: float
    context: float
    measured_tpot: float
    without_overhead: float


def blis_root() -> Path:
    from ..resources import data_root

    return data_root() / "models" / "profiles" / "e2e" / "blis"


def _figures(measured: dict, output_tokens: int) -> Figures:
    ttft, e2e = measured["ttft"], measured["e2e"]
    # every request generated output_tokens, so the mean TPOT is the difference of the means over output_tokens - 1
    return Figures(ttft["mean"], ttft["p90"], ttft["p99"], e2e["mean"], e2e["p90"], e2e["p99"],
                   (e2e["mean"] - ttft["mean"]) / (output_tokens - 1))


def _blis_table() -> dict[str, dict]:
    import yaml

    return yaml.safe_load((blis_root() / "runs.yaml").read_text())["runs"]


def fitted_gpus() -> set[str]:
    """The GPUs whose end-to-end coefficients these runs fit."""
    return {r["gpu"] for r in _blis_table().values()}


def blis_runs() -> list[Run]:
    """The BLIS runs (models/profiles/e2e/blis/runs.yaml), each with the spec that replays it: one instance of
    the run's model, GPU and scheduler limits, its KV cache exactly the GPU blocks the engine reported, and its
    own replay log as the workload."""
    root = blis_root()
    runs = []
    for name, r in _blis_table().items():
        tp = r["tensor_parallel"]
        out = r["shared_prefix"]["output_len"]
        spec = {"name": name, "model": r["catalog_model"],
                "serving": {"gpu": r["gpu"], "gpus_per_node": tp, "tensor_parallel": tp, "instances": 1,
                            "block_size": r["block_size"], "max_model_len": r["max_model_len"],
                            "max_num_seqs": r["max_num_seqs"], "max_num_batched_tokens": r["max_num_batched_tokens"]},
                "workload": {"kind": "replay", "replay": {"path": r["replay"]}}}
        # vLLM's --kv-cache-memory is per GPU: the reported blocks times one rank's bytes of a block, as resolve has it
        block_bytes_per_rank = resolve(from_mapping(spec, base_dir=root)).block_bytes_per_rank
        spec["serving"]["kv_cache_memory"] = r["gpu_kv_blocks"] * block_bytes_per_rank
        measured = r["measured"]
        stages = [Stage(load["rate"], m["requests"], _figures(m, out), ip["prompt_len"]["mean"], out)
                  for load, m, ip in zip(r["load"]["stages"], measured["stages"], r["inference_perf"]["stages"])]
        runs.append(Run(name, r["catalog_model"], spec, root, stages, _figures(measured["run"], out)))
    return runs


def decode_points(run: Run) -> list[DecodePoint]:
    """A point per load stage (see the module docstring): the batch by Little's law, the mean context, the
    step time without its fixed overhead from the catalog's coefficients."""
    from ..sim.steptime import StepTime

    st = StepTime(run.resolved({"graph_step_overhead": 0.0}))   # a decode step then pays only layers x graph_layer_overhead
    points = []
    for s in run.stages:
        batch = s.rate * s.measured.e2e_mean
        context = s.prompt_tokens + s.output_tokens / 2
        seqs = max(1, round(batch))
        points.append(DecodePoint(run.name, run.model, batch, context, s.measured.tpot_mean,
                                  st.step((), seqs, round(seqs * context))))
    return points


def fit_decode_overhead(points: Sequence[DecodePoint]) -> float:
    """The constant that, added to every point's step time without overhead, best meets the measured TPOTs
    (least squares: the mean gap)."""
    return statistics.fmean(p.measured_tpot - p.without_overhead for p in points)


def simulate(run: Run, overrides: dict[str, float]) -> Figures:
    """The run replayed through kvplan's simulator with `overrides`: the whole run's figures."""
    from ..sim.run import run as simulate_run

    res = simulate_run(run.resolved(overrides))
    return Figures(res.ttft.mean, res.ttft.p90, res.ttft.p99, res.e2e.mean, res.e2e.p90, res.e2e.p99, res.tpot.mean)


def _simulate(job: tuple[Run, dict[str, float]]) -> Figures:
    return simulate(*job)


@dataclass
class Fit:
    """Coefficients fitted on some runs, and every run's figures predicted with them."""

    coefficients: dict[str, float]
    trained_on: list[str]
    """The runs the coefficients were fitted on."""
    predicted: dict[str, Figures] = field(default_factory=dict)


def fit(runs: Sequence[Run], predict: Sequence[Run] = (), workers: int = 2) -> Fit:
    """graph_step_overhead and request_overhead fitted on `runs` (see the module docstring), and the figures of
    `runs` and `predict` with them."""
    graph = max(0.0, fit_decode_overhead([p for run in runs for p in decode_points(run)]))
    everything = [*runs, *(r for r in predict if r not in runs)]
    overrides = {"graph_step_overhead": graph, "request_overhead": 0.0}
    with ProcessPoolExecutor(workers) as pool:
        bare = dict(zip((r.name for r in everything), pool.map(_simulate, [(r, overrides) for r in everything])))
    request = max(0.0, statistics.median(r.measured.ttft_mean - bare[r.name].ttft_mean for r in runs))
    coefficients = {"graph_step_overhead": graph, "request_overhead": request}
    predicted = {name: _shifted(f, request) for name, f in bare.items()}
    return Fit(coefficients, [r.name for r in runs], predicted)


def _shifted(f: Figures, request: float) -> Figures:
    """Figures with `request` more latency outside the engine on every request (TTFT and E2E alike)."""
    return Figures(f.ttft_mean + request, f.ttft_p90 + request, f.ttft_p99 + request,
                   f.e2e_mean + request, f.e2e_p90 + request, f.e2e_p99 + request, f.tpot_mean)


def leave_one_model_out(runs: Sequence[Run], workers: int = 2) -> dict[str, Fit]:
    """For each model: the fit without its runs, and its runs predicted by that fit."""
    folds = {}
    for model in sorted({r.model for r in runs}):
        train = [r for r in runs if r.model != model]
        held = [r for r in runs if r.model == model]
        folds[model] = fit(train, held, workers)
    return folds


def error(predicted: float, measured: float) -> float:
    return predicted / measured - 1.0


__all__ = ["DecodePoint", "Figures", "Fit", "FITTED", "METRICS", "Run", "Stage", "blis_runs", "decode_points", "error",
           "fit", "fit_decode_overhead", "fitted_gpus", "leave_one_model_out", "simulate"]
