"""Calibrate: fit the step-time model's coefficients to bench runs, and write them as a device profile.

What is fitted, from the requests of one or more bench runs of a spec (successful ones only):

- compute_efficiency, attention_efficiency and request_overhead, from TTFT. A request's prefill
  needs L linear-layer FLOPs and A attention FLOPs for the tokens it recomputes (the simulator's
  replay of the same requests says which tokens each request found in a cache; `kvplan compare`
  checks those shares against the stack's counters). At low load its TTFT is one step, so
  TTFT = (request_overhead + step_overhead) + L / (peak x compute_efficiency)
         + A / (peak x attention_efficiency),
  fitted by least absolute deviations (the median, which a request that queued behind another or
  a stalled step does not drag), within the physical bounds: no negative intercept, no efficiency
  above 1 (the catalog's peak). Both efficiencies are fitted apart only when the runs determine
  their ratio (bootstrap resamples of the requests agree within SPLIT_RATIO_SPREAD); otherwise
  the split is noise and one shared efficiency is fitted, which the profile says.
- step_overhead, from TPOT: the median over requests of (TPOT - the decode step's roofline time at
  the fitted efficiencies). request_overhead is then the line's intercept less step_overhead.
- Then both overheads are refined by simulation (`_refine`): at a real rate requests share steps
  and queue, which the line ignores; rounds of replaying the runs move each overhead until the
  simulated median TTFT / TPOT meet the observed ones (first by the gap, then by the secant step).

memory_efficiency and allreduce_latency keep the catalog's values: a model whose weights are
read in a fraction of a millisecond has no memory-bound steps to fit, and a TP-1 instance no
all-reduce. The profile says which coefficients were fitted and how well the fit matches TTFT.

A profile is applied to a spec with `--profile` (simulate, compare): its step_model replaces the
spec's serving.step_model, for the accelerator it was fitted on only.
"""

from __future__ import annotations

import numpy as np

from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..sim.steptime import StepTime
from ..spec.profile import Profile
from ..spec.serving import StepModel
from .observed import BenchRun


def fit(r: Resolved, runs: list[tuple[str, BenchRun]], predicted: list) -> Profile:
    """Fit `r`'s step coefficients to `runs` (label, run); `predicted[i]` is the simulator's SimResult for
    runs[i] (it says which prompt tokens each request recomputed)."""
    st = StepTime(r)
    linear, attention, ys, tpot_rest = [], [], [], []
    for (_, run), sim in zip(runs, predicted):
        table = sim.per_request
        by_id = {int(i): k for k, i in enumerate(table.id)}
        req = run.requests
        for k, rid in enumerate(req["id"]):
            if req["error"][k] is not None or rid not in by_id:
                continue
            j = by_id[rid]
            q = int(table.recomputed_tokens[j])
            c = int(table.prompt_tokens[j]) - q
            linear.append(st.linear_flops * q / r.peak_flops)
            attention.append(st.attention_flops * q * (c + (q + 1) * 0.5) / r.peak_flops)
            ys.append(req["ttft"][k])
            out = int(req["received_tokens"][k])
            if out > 1:
                tpot_rest.append((req["tpot"][k], int(table.prompt_tokens[j]) + out // 2))     # (TPOT, mean context)
    if len(ys) < 8:
        raise SpecError([Problem("--observed", f"only {len(ys)} successful requests to fit", len(ys),
                                 fix="bench a longer workload (at least 8 requests that succeed)")])
    lin, att, y = np.asarray(linear), np.asarray(attention), np.asarray(ys)
    if np.ptp(lin) <= 0:
        raise SpecError([Problem("--observed", "every request recomputed the same number of tokens: the slope cannot be fitted",
                                 fix="bench a workload whose prompt lengths vary (workload.prompt: {dist: uniform, ...})")])
    # TTFT = a + b_lin x_lin + b_att x_att, by least absolute deviations: it fits the median, and a request that
    # queued or a stalled step does not drag it. Within the physical bounds (no negative overhead, no efficiency
    # above the catalog's peak): clamping an unbounded fit's coefficient afterwards would leave the others fitted
    # to a line the profile no longer draws.
    X = np.c_[np.ones_like(y), lin, att]
    shared = bounded_least_absolute(np.c_[np.ones_like(y), lin + att], y, lower=np.array([0.0, 1.0]))
    if least_absolute(np.c_[np.ones_like(y), lin + att], y)[1] <= 0:
        raise SpecError([Problem("--observed", "TTFT does not grow with the prefill work in these runs",
                                 fix="bench at a lower rate (queueing hides the prefill time) or with longer prompts")])
    free = least_absolute(X, y)
    ratio = split_ratio_interval(X, y, seed=runs[0][1].seed)
    split = ratio[1] / ratio[0] <= SPLIT_RATIO_SPREAD
    coef = bounded_least_absolute(X, y, lower=np.array([0.0, 1.0, 1.0])) if split else shared[[0, 1, 1]]
    compute_eff, attention_eff = 1.0 / coef[1], 1.0 / coef[2]
    # the decode step's roofline at the fitted efficiencies, not the catalog's: on a slow device (a CPU) a decode
    # step is compute-bound, and the profile must give back the TPOT it was fitted to
    dec = StepTime(r.model_copy(update={"step": r.step.model_copy(update={"compute_efficiency": compute_eff,
                                                                          "attention_efficiency": attention_eff})}))
    rest = [tpot - (dec.step((), 1, context) - dec.overhead - dec.allreduce_fixed - dec.allreduce_per_token)
            for tpot, context in tpot_rest]
    step_overhead = max(float(np.median(rest)) if rest else r.step.step_overhead, 0.0)
    request_overhead = max(float(coef[0]) - step_overhead, 0.0)
    line = coef[0] + coef[1] * lin + coef[2] * att
    rel = np.abs(line - y) / y
    step_overhead, request_overhead, medians = _refine(r, runs, compute_eff, attention_eff, step_overhead,
                                                       request_overhead)
    step = StepModel(compute_efficiency=round(compute_eff, 4), attention_efficiency=round(attention_eff, 4),
                     memory_efficiency=r.step.memory_efficiency, step_overhead=round(step_overhead, 6),
                     allreduce_latency=r.step.allreduce_latency, request_overhead=round(request_overhead, 6))
    fitted = [f"{name} (at the catalog's peak)" if b <= 1.0 else name
              for name, b in (("compute_efficiency", coef[1]), ("attention_efficiency", coef[2]))]
    if not split:
        fitted[1] = "attention_efficiency (= compute_efficiency: the runs cannot tell them apart)"
    fitted += ["step_overhead", "request_overhead"]
    return Profile(
        device=r.device.name, model=r.model.name, step_model=step, fitted=fitted,
        fitted_on=[{"run": label, "name": run.name, "spec_hash": run.spec_hash, "started_at": run.started_at,
                    "requests": run.observed.requests, "ok": run.observed.ok} for label, run in runs],
        fit={"requests": float(len(ys)), "ttft_intercept_s": float(coef[0]),
             **_efficiencies(free), "attention_to_linear_slope_p5": ratio[0], "attention_to_linear_slope_p95": ratio[1],
             "ttft_median_abs_error": float(np.median(rel)), "tpot_samples": float(len(tpot_rest)), **medians})


REFINE_ROUNDS = 8
"""At most this many replays of the runs; the refinement stops earlier once both medians are within REFINE_TOLERANCE."""
REFINE_TOLERANCE = 0.02
SENSITIVITY_BOUNDS = (0.25, 8.0)
"""How much a simulated median may move per second of overhead, as the secant step estimates it. One second more of
step_overhead adds more than a second to the median TPOT where decodes share steps with prefills and queue (2x on
the 2-core machine's chat run), so moving by the gap alone overshoots and can oscillate."""


def _refine(r: Resolved, runs, compute_eff: float, attention_eff: float, step_overhead: float,
            request_overhead: float) -> tuple[float, float, dict[str, float]]:
    """Correct the two overheads by simulating the runs: the line assumes a prefill is one step alone, but at a
    real rate requests share steps and queue. Each round replays every run with the coefficients so far and moves
    request_overhead toward the observed median TTFT, step_overhead toward the observed median TPOT: the first
    round by the gaps, later ones by the secant step (the gap over how much the last move changed the median).
    Returns the overheads of the round whose medians came nearest (the larger relative gap the smaller), and
    those medians."""
    from .compare import predict

    observed = (float(np.median(np.concatenate([_ok(run, "ttft") for _, run in runs]))),
                float(np.median(np.concatenate([_ok(run, "tpot") for _, run in runs]))))
    x = [request_overhead, step_overhead]
    previous: tuple[list[float], tuple[float, float]] | None = None
    best: tuple[float, list[float], dict[str, float]] | None = None
    for _ in range(REFINE_ROUNDS):
        step = r.step.model_copy(update={"compute_efficiency": compute_eff, "attention_efficiency": attention_eff,
                                         "request_overhead": x[0], "step_overhead": x[1]})
        trial = r.model_copy(update={"step": step})
        tables = [predict(trial, run).per_request for _, run in runs]
        simulated = tuple(float(np.median(np.concatenate([_matching(t, run, column) for t, (_, run) in zip(tables, runs)])))
                          for column in ("ttft", "tpot"))
        gap = max(abs(sim - obs) / obs for sim, obs in zip(simulated, observed))
        if best is None or gap < best[0]:
            best = (gap, x, {"ttft_p50_observed_s": observed[0], "ttft_p50_simulated_s": simulated[0],
                             "tpot_p50_observed_s": observed[1], "tpot_p50_simulated_s": simulated[1]})
        if gap <= REFINE_TOLERANCE:
            break
        moved = []
        for k in range(2):
            sensitivity = 1.0
            if previous is not None and abs(x[k] - previous[0][k]) > 1e-9:
                secant = (simulated[k] - previous[1][k]) / (x[k] - previous[0][k])
                sensitivity = min(max(secant, SENSITIVITY_BOUNDS[0]), SENSITIVITY_BOUNDS[1])
            moved.append(max(x[k] + (observed[k] - simulated[k]) / sensitivity, 0.0))
        previous = (x, simulated)
        x = moved
    _, (request_overhead, step_overhead), medians = best
    return step_overhead, request_overhead, medians


def _ok(run: BenchRun, column: str) -> np.ndarray:
    """`column` of the run's successful requests (TPOT: those with more than one token)."""
    req = run.requests
    keep = [k for k, e in enumerate(req["error"]) if e is None and (column != "tpot" or req["received_tokens"][k] > 1)]
    return np.asarray([req[column][k] for k in keep], dtype=float)


def _matching(table, run: BenchRun, column: str) -> np.ndarray:
    """The simulated `column` of the requests that succeeded in the run (by id)."""
    req = run.requests
    ok = {rid for rid, e, n in zip(req["id"], req["error"], req["received_tokens"])
          if e is None and (column != "tpot" or n > 1)}
    return np.asarray([v for rid, v in zip(table.id.tolist(), getattr(table, column).tolist()) if rid in ok], dtype=float)


SPLIT_RATIO_SPREAD = 3.0
"""The two efficiencies are fitted apart only when the runs pin their ratio down: the 5th-95th percentile range
of the attention / linear slope ratio over bootstrap resamples of the requests spans at most this factor.
Otherwise the split is noise (a 60-request chat run on the 2-core test machine gave 0.06-5.1), and one shared
efficiency, which the same runs do determine, predicts held-out workloads better (docs/fidelity.md)."""
BOOTSTRAP_RESAMPLES = 100


def split_ratio_interval(X: np.ndarray, y: np.ndarray, seed: int) -> tuple[float, float]:
    """5th and 95th percentiles of b_att / b_lin over bootstrap resamples of the requests (bounded fits; seeded,
    so the same runs give the same profile)."""
    rng = np.random.default_rng(seed)
    lower = np.array([0.0, 1.0, 1.0])
    ratios = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        pick = rng.integers(0, len(y), len(y))
        b = bounded_least_absolute(X[pick], y[pick], lower)
        ratios.append(b[2] / b[1])
    lo, hi = np.percentile(ratios, [5, 95])
    return float(lo), float(hi)


def _efficiencies(free: np.ndarray) -> dict[str, float]:
    """The unbounded fit's efficiencies (1 / slope) where its slope is positive: what the profile records next
    to the bounded ones it uses."""
    return {f"{name}_unbounded": float(1.0 / b) for name, b in
            (("compute_efficiency", free[1]), ("attention_efficiency", free[2])) if b > 0}


def bounded_least_absolute(X: np.ndarray, y: np.ndarray, lower: np.ndarray) -> np.ndarray:
    """least_absolute with b >= lower. The objective is convex, so its bounded minimum is the unbounded minimum on
    one face of the box (some coefficients at their bound, the rest free): the best feasible one of them all."""
    best, best_cost = None, np.inf
    n = X.shape[1]
    for mask in range(1 << n):
        fixed = np.array([(mask >> j) & 1 == 1 for j in range(n)])
        b = lower.astype(float).copy()
        if (~fixed).any():
            b[~fixed] = least_absolute(X[:, ~fixed], y - X[:, fixed] @ lower[fixed])
        if (b < lower - 1e-12 * np.maximum(1.0, np.abs(lower))).any():
            continue
        cost = float(np.abs(y - X @ b).sum())
        if cost < best_cost:
            best, best_cost = b, cost
    return best


def least_absolute(X: np.ndarray, y: np.ndarray, iterations: int = 100) -> np.ndarray:
    """Coefficients minimising sum |y - X b| (median regression), by iteratively reweighted least squares."""
    scale = np.abs(X).max(axis=0)
    scale[scale == 0] = 1.0
    Xs = X / scale
    b = np.linalg.lstsq(Xs, y, rcond=None)[0]
    floor = 1e-6 * (float(np.median(np.abs(y))) or 1.0)
    for _ in range(iterations):
        w = 1.0 / np.maximum(np.abs(y - Xs @ b), floor)
        sw = np.sqrt(w)
        new = np.linalg.lstsq(Xs * sw[:, None], y * sw, rcond=None)[0]
        if np.allclose(new, b, rtol=1e-9, atol=1e-12):
            b = new
            break
        b = new
    return b / scale
