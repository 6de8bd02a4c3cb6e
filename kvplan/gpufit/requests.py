"""`kvplan calibrate --requests`: a device profile from a benchmark's per-request logs.

A team that ran a benchmark against its own vLLM server on its own GPU has, request by request, what was sent
and what was measured: the replay log of kvplan.sim.replay with each line's `ttft` and `e2e` (and `stage`, where
the benchmark ran load stages back to back). inference-perf's per-request lifecycle records and a `vllm bench
serve --save-detailed` file carry the same columns. From such logs the profile is fitted exactly as
docs/fidelity-e2e.md fits the catalog's H100 from the BLIS runs (kvplan.gpufit.e2e), so a team gets from its runs
the same fit the catalog got from public ones:

- each log becomes a run: the spec that was benched, its workload replaced by a replay of the log; each of its
  stages a decode point (the stage's batch by Little's law, its mean context, its measured time per output
  token) and its measured TTFT and E2E (mean, p90, p99);
- `graph_step_overhead` (the fixed cost of a CUDA-graph decode step) and `request_overhead` (the latency outside
  engine steps) are fitted by `e2e.fit`; every other coefficient stays the resolved one;
- with two logs or more, each log is also predicted by the fit of the others (leave one log out), and that
  held-out error is reported beside the in-sample one: fitting is not validating.

A stage's rate is its requests over the time between its first and last arrival; the log's stage numbers say
which requests belong together (a log without them is one stage).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..sim.replay import Log, read_log
from ..spec.profile import Profile
from ..spec.serving import StepModel
from .benchmarks import step_model
from .e2e import Figures, Run, Stage, error, fit

REPORTED = ("ttft_mean", "e2e_mean", "tpot_mean")
"""The figures whose error the profile records, per log."""
FIX_MEASURED = ('give every line the measured "ttft" and "e2e" in seconds, e.g. {"arrival": 0.5, "prompt_tokens": '
                '500, "output_tokens": 100, "ttft": 0.042, "e2e": 1.9} (docs/benchmarks.md, the replay log)')


def figures(log: Log, rows: np.ndarray) -> Figures:
    """The measured figures of the requests on `rows` (numpy's linear percentiles; TPOT the mean over requests
    that generated more than one token of (e2e - ttft) / (output tokens - 1))."""
    ttft, e2e, out = log.ttft[rows], log.e2e[rows], log.output_tokens[rows]
    several = out > 1
    tpot = float(np.mean((e2e[several] - ttft[several]) / (out[several] - 1))) if several.any() else 0.0
    p = np.percentile
    return Figures(float(ttft.mean()), float(p(ttft, 90)), float(p(ttft, 99)),
                   float(e2e.mean()), float(p(e2e, 90)), float(p(e2e, 99)), tpot)


def logged_run(spec: dict[str, Any], base_dir: Path, path: str, model: str) -> Run:
    """The run a per-request log records: `spec` (the benched deployment, as written) replaying the log, its
    stages and measured figures; SpecError for a log that does not say what was measured or has too few
    requests in a stage to give it a rate."""
    log = read_log(path)
    unmeasured = np.flatnonzero(np.isnan(log.ttft) | np.isnan(log.e2e))
    if len(unmeasured):
        line = int(log.lines[unmeasured[0]])
        raise SpecError([Problem(f"--requests {path}:{line}", f"no measured ttft and e2e on this line "
                                 f"({len(unmeasured):,} of {len(log):,} lines lack them): calibrate fits to what "
                                 "the benchmark measured", fix=FIX_MEASURED)])
    stages = []
    for number in np.unique(log.stage):
        rows = np.flatnonzero(log.stage == number)
        span = float(log.arrival[rows].max() - log.arrival[rows].min())
        if len(rows) < 2 or span <= 0:
            where = "the log" if number < 0 else f"stage {number}"
            raise SpecError([Problem(f"--requests {path}", f"{where} has {len(rows)} request(s) arriving over "
                                     f"{span:g} s: a stage needs requests spread over time to give its rate",
                                     fix="give each stage's requests with their arrival times, or leave stage out")])
        stages.append(Stage((len(rows) - 1) / span, len(rows), figures(log, rows),
                            float(log.prompt_tokens[rows].mean()), float(log.output_tokens[rows].mean())))
    workload = {"kind": "replay", "replay": {"path": str(Path(path).resolve())}}
    return Run(Path(path).name, model, {**spec, "workload": workload}, base_dir, stages,
               figures(log, np.arange(len(log))))


def fit_request_logs(r: Resolved, spec: dict[str, Any], base_dir: Path, paths: list[str],
                     workers: int = 2) -> Profile:
    """The device profile `paths` fit (see the module docstring)."""
    if r.cuda_graph_max_tokens == 0:
        raise SpecError([Problem("--requests", f"this spec runs on {r.device.name}, whose steps vLLM does not run "
                                 "as CUDA graphs: --requests fits a GPU's graph step overhead",
                                 fix="calibrate a CPU deployment from kvplan bench runs (--observed)")])
    runs = [logged_run(spec, base_dir, path, r.model.name) for path in paths]
    if len({run.name for run in runs}) < len(runs):
        raise SpecError([Problem("--requests", "two logs have the same file name", fix="give each log once")])
    whole = fit(runs, workers=workers)
    errors = {f"{run.name}: {m}": round(error(whole.predicted[run.name].get(m), run.measured.get(m)), 4)
              for run in runs for m in REPORTED}
    if len(runs) > 1:
        for run in runs:
            held = fit([other for other in runs if other is not run], [run], workers)
            for m in REPORTED:
                errors[f"{run.name}: {m} held out"] = round(error(held.predicted[run.name].get(m), run.measured.get(m)), 4)
    step = r.step.model_copy(update=whole.coefficients)
    return Profile(device=r.device.name, model=r.model.name, step_model=StepModel(**step_model(step)),
                   fitted=list(whole.coefficients),
                   fitted_on=[{"name": run.name, "started_at": None, "prompts": sum(s.requests for s in run.stages),
                               "file": str(Path(path).resolve())} for run, path in zip(runs, paths)],
                   fit=errors)


__all__ = ["fit_request_logs", "figures", "logged_run"]
