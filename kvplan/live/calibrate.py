"""Calibrate: fit the step-time model's coefficients to bench runs, and write them as a device profile.

What is fitted, from the requests of one or more bench runs of a spec (successful ones only):

- compute_efficiency and request_overhead, from TTFT. A request's prefill needs F FLOPs for the
  tokens it recomputes (the simulator's replay of the same requests says which tokens each
  request found in a cache; `kvplan compare` checks those shares against the stack's counters).
  At low load its TTFT is one step, so TTFT = (request_overhead + step_overhead) + F / (peak x
  compute_efficiency): a straight line in F / peak, fitted by least squares, refitted once
  without the requests whose residual is more than 4 median absolute deviations off (a request
  that queued behind another, a hiccup of the machine).
- step_overhead, from TPOT: the median over requests of (TPOT - the decode step's roofline time at
  the fitted compute_efficiency).
  request_overhead is then the line's intercept less step_overhead.

memory_efficiency and allreduce_latency keep the catalog's values: a model whose weights are
read in a fraction of a millisecond has no memory-bound steps to fit, and a TP-1 instance no
all-reduce. The profile says which coefficients were fitted and how well the line fits.

A profile is applied to a spec with `--profile` (simulate, compare): its step_model replaces the
spec's serving.step_model, for the accelerator it was fitted on only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import Problem, SpecError
from ..resolve import Resolved
from ..sim.steptime import StepTime
from ..spec.serving import StepModel
from ..spec.topology import Topology
from .observed import BenchRun


class Profile(BaseModel):
    """A device profile: step-time coefficients measured on one accelerator (and model)."""

    model_config = ConfigDict(extra="forbid")
    device: str
    model: str
    step_model: StepModel
    fitted: list[str]
    """The coefficients the fit set (the others in step_model are the catalog's at fit time)."""
    fitted_on: list[dict]
    fit: dict[str, float]


def fit(r: Resolved, runs: list[tuple[str, BenchRun]], predicted: list) -> Profile:
    """Fit `r`'s step coefficients to `runs` (label, run); `predicted[i]` is the simulator's SimResult for
    runs[i] (it says which prompt tokens each request recomputed)."""
    st = StepTime(r)
    xs, ys, tpot_rest = [], [], []
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
            flops = st.linear_flops * q + st.attention_flops * q * (c + (q + 1) * 0.5)
            xs.append(flops / r.peak_flops)
            ys.append(req["ttft"][k])
            out = int(req["received_tokens"][k])
            if out > 1:
                tpot_rest.append((req["tpot"][k], int(table.prompt_tokens[j]) + out // 2))     # (TPOT, mean context)
    if len(xs) < 8:
        raise SpecError([Problem("--observed", f"only {len(xs)} successful requests to fit", len(xs),
                                 fix="bench a longer workload (at least 8 requests that succeed)")])
    x, y = np.asarray(xs), np.asarray(ys)
    if np.ptp(x) <= 0:
        raise SpecError([Problem("--observed", "every request recomputed the same number of tokens: the slope cannot be fitted",
                                 fix="bench a workload whose prompt lengths vary (workload.prompt: {dist: uniform, ...})")])
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    mad = float(np.median(np.abs(resid - np.median(resid)))) or 1e-9
    keep = np.abs(resid - np.median(resid)) <= 4 * mad
    slope, intercept = np.polyfit(x[keep], y[keep], 1)
    if slope <= 0:
        raise SpecError([Problem("--observed", "TTFT does not grow with the prefill work in these runs",
                                 fix="bench at a lower rate (queueing hides the prefill time) or with longer prompts")])
    compute_eff = min(1.0 / slope, 1.0)
    # the decode step's roofline at the fitted compute efficiency, not the catalog's: on a slow device (a CPU)
    # a decode step is compute-bound, and the profile must give back the TPOT it was fitted to
    dec = StepTime(r.model_copy(update={"step": r.step.model_copy(update={"compute_efficiency": compute_eff})}))
    rest = [tpot - (dec.step((), 1, context) - dec.overhead - dec.allreduce_fixed - dec.allreduce_per_token)
            for tpot, context in tpot_rest]
    step_overhead = max(float(np.median(rest)) if rest else r.step.step_overhead, 0.0)
    request_overhead = max(float(intercept) - step_overhead, 0.0)
    fitted_ttft = intercept + slope * x
    rel = np.abs(fitted_ttft - y) / y
    step = StepModel(compute_efficiency=round(compute_eff, 4), memory_efficiency=r.step.memory_efficiency,
                     step_overhead=round(step_overhead, 6), allreduce_latency=r.step.allreduce_latency,
                     request_overhead=round(request_overhead, 6))
    return Profile(
        device=r.device.name, model=r.model.name, step_model=step,
        fitted=["compute_efficiency", "step_overhead", "request_overhead"],
        fitted_on=[{"run": label, "name": run.name, "spec_hash": run.spec_hash, "started_at": run.started_at,
                    "requests": run.observed.requests, "ok": run.observed.ok} for label, run in runs],
        fit={"requests": float(len(xs)), "outliers_dropped": float((~keep).sum()),
             "ttft_slope_per_peak_second": float(slope), "ttft_intercept_s": float(intercept),
             "ttft_median_abs_error": float(np.median(rel)), "tpot_samples": float(len(tpot_rest))})


def write_profile(profile: Profile, path: Path) -> None:
    s = profile.step_model
    body = {
        "device": profile.device, "model": profile.model,
        "step_model": {"compute_efficiency": s.compute_efficiency, "memory_efficiency": s.memory_efficiency,
                       "step_overhead": _ms(s.step_overhead), "allreduce_latency": _ms(s.allreduce_latency),
                       "request_overhead": _ms(s.request_overhead)},
        "fitted": profile.fitted, "fitted_on": profile.fitted_on, "fit": profile.fit,
    }
    runs = ", ".join(f"{run['name']} ({run['started_at']})" for run in profile.fitted_on)
    header = (f"# Device profile of {profile.device} serving {profile.model}, fitted by `kvplan calibrate` to the bench "
              f"run(s) {runs}.\n# Apply with `kvplan simulate|compare SPEC --profile {path.name}`, "
              "or copy step_model under the spec's serving:.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header + yaml.safe_dump(body, sort_keys=False))


def _ms(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds * 1000:.4g}ms"


def read_profile(path: str | Path) -> Profile:
    p = Path(path)
    try:
        return Profile.model_validate(yaml.safe_load(p.read_text()))
    except FileNotFoundError:
        raise SpecError([Problem("--profile", f"no profile at {p}", fix="give the file `kvplan calibrate -o` wrote")]) from None
    except (ValidationError, yaml.YAMLError, OSError, TypeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError([Problem("--profile", f"{p} is not a kvplan device profile: {first}",
                                 fix="give the file `kvplan calibrate -o` wrote")]) from None


def apply_profile(topo: Topology, profile: Profile, where: str = "--profile") -> Topology:
    """`topo` with the profile's step_model as serving.step_model; SpecError for another accelerator."""
    if profile.device != topo.serving.gpu:
        raise SpecError([Problem(where, f"the profile was fitted on {profile.device}; this spec runs on {topo.serving.gpu}",
                                 topo.serving.gpu, fix=f"calibrate on {topo.serving.gpu}, or drop --profile")])
    return topo.model_copy(update={"serving": topo.serving.model_copy(update={"step_model": profile.step_model})})
