"""`kvplan calibrate --vllm-result`: a device profile from `vllm bench serve --save-result` files.

A team that benched its own GPUs with vLLM's benchmark already has what kvplan needs: per file,
the prompts it sent and the TTFT and TPOT it measured; the spec says what was benched (GPU, model,
TP). Each file is replayed through the simulator (`benchmarks.Replay`), and:

- compute_efficiency, when the files span prompt lengths (the longest median prompt at least 4x
  the shortest and 1024 tokens or more): the efficiency at which the replay's TTFT grows from the
  shortest to the longest prompt as much as the measured TTFT did, found by bisection (the fixed
  costs cancel in that difference). attention_efficiency keeps its ratio to it;
- step_overhead and request_overhead: moved until the replays' TPOT and TTFT meet the measured
  ones (`benchmarks.fit_overheads`).

memory_efficiency, layer_overhead and the all-reduce terms stay the resolved ones (the catalog's,
fitted to public profiles, or the spec's): single-request decode cannot tell memory_efficiency
from step_overhead apart.
"""

from __future__ import annotations

import numpy as np

from ..errors import Problem, SpecError
from ..spec.profile import Profile
from ..resolve import Resolved
from ..spec.serving import StepModel
from ..spec.topology import Topology
from ..step_coefficients import StepCoefficients
from .benchmarks import Benchmark, Replay, fit_overheads, read_vllm_result, step_model

SPAN = 4.0
LONG_PROMPT = 1024
BISECTIONS = 20


def fit_vllm_results(r: Resolved, topo: Topology, paths: list[str]) -> Profile:
    results = [read_vllm_result(path, topo) for path in paths]
    replay = Replay()
    try:
        for path, b in zip(paths, results):
            for why, fix in ((b.replayable(), "bench with --max-concurrency 1, or with --request-rate and no --max-concurrency"),
                             (replay.too_fast(b) if b.replayable() is None else None,
                              "bench unique prompts on a server started with --no-enable-prefix-caching")):
                if why is not None:
                    raise SpecError([Problem(f"--vllm-result {path}", f"this benchmark cannot be replayed: {why}", fix=fix)])
        step, fitted = r.step, {}
        efficiency = compute_efficiency(results, replay, step)
        if efficiency is not None:
            ratio = step.attention_efficiency / step.compute_efficiency
            fitted = {"compute_efficiency": round(efficiency, 4),
                      "attention_efficiency": round(min(efficiency * ratio, 1.0), 4)}
            step = step.model_copy(update=fitted)
        fitted.update(fit_overheads(results, replay, step))
        step = step.model_copy(update=fitted)
        predicted = [replay.predict(b, step_model(step)) for b in results]
    finally:
        replay.close()
    errors = {f"{b.id}: {m}": round(p.get(m) / b.metrics[m] - 1, 4) for b, p in zip(results, predicted)
              for m in ("ttft_median_ms", "tpot_median_ms") if m in b.metrics}
    return Profile(device=r.device.name, model=r.model.name, step_model=StepModel(**step_model(step)),
                   fitted=list(fitted), fitted_on=[{"name": b.id, "started_at": b.source.get("date"), "prompts": b.prompts,
                                                    "file": b.source.get("url")} for b in results],
                   fit=errors)


def _prompt(b: Benchmark) -> float:
    return float(np.median(b.input_lens)) if b.input_lens else float(b.input_len or 0)


def compute_efficiency(results: list[Benchmark], replay: Replay, step: StepCoefficients) -> float | None:
    """The compute_efficiency that reproduces the TTFT growth from the shortest to the longest prompt, or None
    when the files do not span enough prompt lengths (see the module docstring)."""
    timed = [b for b in results if "ttft_median_ms" in b.metrics]
    if len(timed) < 2:
        return None
    short, long = min(timed, key=_prompt), max(timed, key=_prompt)
    if _prompt(long) < max(SPAN * _prompt(short), LONG_PROMPT):
        return None
    measured = long.metrics["ttft_median_ms"] - short.metrics["ttft_median_ms"]
    if measured <= 0:
        return None
    ratio = step.attention_efficiency / step.compute_efficiency

    def gap(efficiency: float) -> float:
        trial = step_model(step.model_copy(update={"compute_efficiency": efficiency,
                                                   "attention_efficiency": min(efficiency * ratio, 1.0)}))
        return replay.predict(long, trial).ttft_median_ms - replay.predict(short, trial).ttft_median_ms

    lo, hi = 0.02, 1.0                        # the gap shrinks as the efficiency grows
    if gap(hi) > measured:
        return hi                             # faster than the catalog's peak allows: kept at 1
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if gap(mid) > measured else (lo, mid)
    return 0.5 * (lo + hi)
