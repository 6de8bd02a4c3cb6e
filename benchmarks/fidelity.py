"""Fidelity: does the simulator predict the real stack? Calibrate on one workload, predict held-out ones.

Needs the stack of examples/local.yaml running on this machine:

    kvplan deploy examples/local.yaml -i inventories/local
    python benchmarks/fidelity.py [--inventory inventories/local] [--scale 0.5] [--out DIR] [--json FILE]

For each workload of examples/fidelity/workloads.yaml it writes the spec (examples/local.yaml with that
workload), benches it against the live vLLM (`kvplan bench`), then fits the step-time model to the
calibration workload's run alone (`kvplan calibrate`) and compares every run with the prediction
of the calibrated model (`kvplan compare --profile`). With --inventory it also redeploys the stack
for each variant (e.g. vLLM's prefix cache off, so that LMCache serves the reuse) and benches it
first, then deploys examples/local.yaml for the other workloads (and leaves it running). It prints
one table per workload and the
targets: prompt tokens per source within 2 percentage points, median TTFT within 15 %.
`--scale` multiplies every workload's request count (the tests use a short run), and
`--calibration-scale` the calibration workload's (default: --scale): a fit to a run too short to
pin the step model down predicts the others no better than the machine's noise allows.

The machine's own speed is read from the runs too, because on a shared machine it drifts between
runs (the tests' CI has seen every decode step take 1.6x as long in one workload as in the next,
and the median TTFT of a held-out run come out 68 % off for it). A run's decode steps are its
clock: its **speed** is its observed median TPOT over the calibrated model's prediction for it
(x1.00 for the calibration run, whose step overhead is fitted to its TPOT). The TTFT error is
printed as measured and at that speed (the predicted TTFT times the speed); the TTFT target is
judged at the speed, which separates how well the model predicts a prefill from how fast the
machine happened to be.

The fit reads a request's TTFT as one prefill step, which holds only while the engine is mostly
idle: on a machine too slow for the workloads' rates every request queues, the line fits the
queue, not the step (a 2-vCPU Zen 1 host, whose vLLM runs a prefill ~4x slower than the Zen 4 VM
the rates were chosen on, kept the chat run 6 s behind and fitted an efficiency of 0.04). So the
primed requests, sent one at a time, also time the machine: every workload's arrival rate is
scaled by `--rate-scale` (default: so that the calibration workload keeps the engine at most
UTILISATION busy by the primed requests' median time, never faster than written). The scale is
printed and kept in the specs the runs are compared with.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvplan.live.bench import Bench, Outcome, Target, new_salt, stream_completion  # noqa: E402
from kvplan.live.calibrate import fit  # noqa: E402
from kvplan.live.compare import predict, rows  # noqa: E402
from kvplan.live.observed import read_run  # noqa: E402
from kvplan.live.runner import bench, settle  # noqa: E402
from kvplan.resolve import resolve  # noqa: E402
from kvplan.spec import load  # noqa: E402
from kvplan.spec.profile import apply_profile, write_profile  # noqa: E402
from kvplan.units import parse_rate  # noqa: E402

SHARE_TARGET_PP = 2.0
TTFT_TARGET = 0.15
PRIME_REQUESTS = 8
UTILISATION = 0.3
"""The share of the time the calibration workload may keep the engine busy (rate x a lone request's time)."""


PLAN = REPO / "examples" / "fidelity" / "workloads.yaml"


def write_specs(out: Path, scale: float, calibration_scale: float,
                rate_scale: float = 1.0) -> tuple[dict[str, Path], str, dict[str, Path]]:
    """(spec per workload and variant, the calibration workload, the base spec as written). A variant keeps the
    base spec's name: it is deployed in place of the base (same secrets, same shared-memory name). Every arrival
    rate is multiplied by `rate_scale`."""
    plan = yaml.safe_load(PLAN.read_text())
    base_file = (PLAN.parent / plan["base"]).resolve()
    base = yaml.safe_load(base_file.read_text())
    specs = {}

    def write(name: str, spec: dict, what: str) -> None:
        times = calibration_scale if name == plan["calibrate_on"] else scale
        spec["workload"]["requests"] = max(8, round(spec["workload"]["requests"] * times))
        if rate_scale != 1.0:
            arrivals = spec["workload"]["arrivals"]
            key, value = arrival_rate(arrivals)
            spec["workload"]["arrivals"] = {**arrivals, key: f"{parse_rate(value) * rate_scale:.4g}/s"}
        specs[name] = out / f"{name}.yaml"
        specs[name].write_text(f"# {base_file.relative_to(REPO)} {what} of examples/fidelity/workloads.yaml\n"
                               + yaml.safe_dump(spec, sort_keys=False))

    for name, workload in plan["workloads"].items():
        write(name, dict(base, name=f"{base['name']}-{name}", workload=dict(workload)), f"with the '{name}' workload")
    for name, variant in plan.get("variants", {}).items():
        spec = dict(base, workload=dict(plan["workloads"][variant["workload"]]))
        spec["serving"] = {**base["serving"], **variant["serving"]}
        write(name, spec, f"as the '{name}' variant")
    return specs, plan["calibrate_on"], {n: specs[n] for n in plan.get("variants", {})}


def deploy(spec: Path, inventory: str, state_dir: str) -> None:
    done = subprocess.run([sys.executable, "-m", "kvplan", "deploy", str(spec), "-i", inventory, "--state-dir", state_dir],
                          cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"deploying {spec} failed:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="http://127.0.0.1:8000")
    ap.add_argument("--router", default=None, help="send the requests through the deployed router (e.g. "
                                                   "http://127.0.0.1:30000); --target is still where counters are read")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--calibration-scale", type=float, default=None, help="the calibration workload's scale (default: --scale)")
    ap.add_argument("--rate-scale", type=float, default=None, help="multiply every arrival rate by this (default: from "
                                                                  "the primed requests, at most 1)")
    ap.add_argument("--out", default=None, help="directory for specs, runs and the profile (default: a new one "
                                                "under .kvplan/fidelity)")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--reuse", action="store_true", help="fit and compare the runs already in --out; bench and write nothing")
    ap.add_argument("--inventory", default=None, help="inventory to redeploy the variants with (e.g. inventories/local); "
                                                     "without it the variants are not benched")
    ap.add_argument("--state-dir", default=".kvplan", help="kvplan deploy's --state-dir (the stack's generated keys)")
    args = ap.parse_args()

    out = Path(args.out or REPO / ".kvplan" / "fidelity" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        plan = yaml.safe_load(PLAN.read_text())
        specs = {name: out / f"{name}.yaml" for name in [*plan["workloads"], *plan.get("variants", {})]}
        runs = {name: read_run(out / f"run-{name}") for name in specs if (out / f"run-{name}").is_dir()}
        calibrate_on = plan["calibrate_on"]
    else:
        specs, calibrate_on, variants = write_specs(out, args.scale, args.calibration_scale or args.scale)
        target = Target.parse(args.target)
        router = Target.parse(args.router) if args.router else None
        base = (PLAN.parent / yaml.safe_load(PLAN.read_text())["base"]).resolve()
        # With --inventory the variants run first, each on the stack deployed for it, and the base workloads last,
        # on examples/local.yaml deployed for them: one deploy of the base both makes sure it is what runs and
        # leaves it running. (The specs' paths stay the same when the rates are scaled.)
        stacks = [(specs[name], [name]) for name in variants] if args.inventory else []
        stacks.append((base, [name for name in specs if name not in variants]))
        runs, rate_scale = {}, args.rate_scale
        for stack, names in stacks:
            if args.inventory:
                deploy(stack, args.inventory, args.state_dir)
            alone = prime(specs[calibrate_on], target)     # a (re)deployed vLLM is primed before it is measured
            if rate_scale is None:                          # the first primed requests time the machine
                rate_scale = rate_scale_for(specs[calibrate_on], alone)
                if rate_scale != 1.0:
                    specs, calibrate_on, variants = write_specs(out, args.scale, args.calibration_scale or args.scale,
                                                                rate_scale)
            settle(resolve(load(str(specs[names[0]]))))    # the primed prompts' stores must not count in the run
            runs.update({name: bench_one(name, specs[name], target, out, router) for name in names})
    for name in specs:
        if name not in runs:
            print(f"{name}: not benched (a variant needs --inventory to redeploy the stack for it)")
    report({n: p for n, p in specs.items() if n in runs}, calibrate_on, runs, out, args.json, write=not args.reuse)


def prime(path: Path, target: Target, requests: int = PRIME_REQUESTS) -> list[float]:
    """Before anything is measured, send the calibration workload's first new conversations one at a time, under a
    salt no run shares (so they leave nothing a measured prompt could reuse): the first requests a freshly
    (re)deployed vLLM serves can run slower than the rest, and the fit is to the engine's steady state. Returns how
    long each took, first token to last, alone on the engine."""
    runner = Bench(resolve(load(str(path))), [target], salt=new_salt())
    took = []
    for req in [q for q in runner.requests() if q.turn == 0][:requests]:
        out = Outcome(req.id, -1, 0, 0, 0.0, req.prompt_tokens, req.output_tokens)
        stream_completion(target, runner.body(req, {}), runner.timeout, time.monotonic, out)
        if out.ok:
            took.append(out.last_token - out.sent)
    return took


def arrival_rate(arrivals: dict) -> tuple[str, str]:
    """(the field, its value): arrivals.rate (requests/s), or arrivals.session_rate for a workload with sessions."""
    key = "session_rate" if "session_rate" in arrivals else "rate"
    return key, arrivals[key]


def rate_scale_for(path: Path, alone: list[float]) -> float:
    """The arrival-rate scale that keeps the calibration workload's engine at most UTILISATION busy, by the median
    time a primed request took alone (new conversations: no reuse, so an upper bound on a request's work)."""
    if not alone:
        raise SystemExit("no primed request succeeded: is the stack serving? (kvplan doctor says what is down)")
    rate = parse_rate(arrival_rate(yaml.safe_load(path.read_text())["workload"]["arrivals"])[1])
    took = float(np.median(alone))
    scale = max(0.01, round(min(1.0, UTILISATION / (rate * took)), 2))
    print(f"machine: a primed request took {took * 1000:.0f} ms alone (median of {len(alone)}); at {rate:g}/s the "
          f"calibration workload would keep the engine {rate * took:.0%} busy: every rate scaled by x{scale:.2f}",
          flush=True)
    return scale


def bench_one(name: str, path: Path, target: Target, out: Path, router: Target | None = None):
    t0 = time.monotonic()
    run = bench(resolve(load(str(path))), path.read_text(), [target], out / f"run-{name}", salt=new_salt(), router=router)
    o = run.observed
    print(f"benched {name}: {o.ok}/{o.requests} ok, {o.prompt_tokens:,} prompt tokens, {time.monotonic() - t0:.0f} s",
          flush=True)
    return run


def report(specs: dict[str, Path], calibrate_on: str, runs: dict, out: Path, json_file: str | None,
           write: bool = True) -> None:

    base = resolve(load(str(specs[calibrate_on])))
    cal_run = runs[calibrate_on]
    profile = fit(base, [(str(out / f"run-{calibrate_on}"), cal_run)], [predict(base, cal_run)])
    if write:
        write_profile(profile, out / "profile.yaml")
    s = profile.step_model
    print(f"\ncalibrated on {calibrate_on}: compute_efficiency {s.compute_efficiency:.3f}, "
          f"step_overhead {s.step_overhead * 1000:.2f} ms, request_overhead {s.request_overhead * 1000:.2f} ms "
          f"(line's median TTFT error {profile.fit['ttft_median_abs_error']:.1%})")

    figures = {"calibrate_on": calibrate_on, "profile": profile.step_model.model_dump(), "workloads": {}}
    for name, path in specs.items():
        r = resolve(apply_profile(load(str(path)), profile))
        table = rows(predict(r, runs[name]), runs[name])
        held_out = name != calibrate_on
        print(f"\n{name} ({'held out' if held_out else 'calibration'}; {runs[name].observed.ok} requests)")
        print(f"  {'metric':<30}{'predicted':>14}{'observed':>14}{'error':>10}")
        for row in table:
            print(f"  {row.metric:<30}{_fmt(row.unit, row.predicted):>14}{_fmt(row.unit, row.observed):>14}"
                  f"{row.error_text:>10}")
        shares = [abs(row.error) for row in table if row.unit == "share" and row.error is not None]
        ttft = next(row for row in table if row.metric == "TTFT p50")
        speed = speed_of(table)
        at_speed = ttft.predicted * speed / ttft.observed - 1.0
        print(f"  machine speed x{speed:.2f} (observed / predicted TPOT p50): TTFT p50 at that speed "
              f"{ttft.predicted * speed * 1000:.1f} ms predicted, error {at_speed * 100:+.1f} %")
        figures["workloads"][name] = {
            "held_out": held_out, "requests": runs[name].observed.requests, "ok": runs[name].observed.ok,
            "max_share_error_pp": max(shares, default=0.0), "ttft_p50_error": ttft.error, "speed": speed,
            "ttft_p50_error_at_speed": at_speed,
            "rows": [{"metric": row.metric, "unit": row.unit, "predicted": row.predicted, "observed": row.observed,
                      "error": row.error} for row in table]}

    print("\ntargets: prompt tokens per source within 2 pp, median TTFT within 15 % at the machine's measured speed")
    for name, f in figures["workloads"].items():
        share_ok = f["max_share_error_pp"] <= SHARE_TARGET_PP
        ttft_ok = abs(f["ttft_p50_error_at_speed"]) <= TTFT_TARGET
        print(f"  {name:<12} {'held out' if f['held_out'] else 'fit     '}  worst share {f['max_share_error_pp']:.2f} pp "
              f"[{'met' if share_ok else 'MISSED'}]  TTFT p50 {f['ttft_p50_error_at_speed'] * 100:+.1f} % "
              f"[{'met' if ttft_ok else 'MISSED'}] (as measured {f['ttft_p50_error'] * 100:+.1f} %, "
              f"speed x{f['speed']:.2f})")
    if write:
        print(f"\nspecs, runs and profile in {out}")
    if json_file:
        Path(json_file).write_text(json.dumps(figures, indent=1))


def speed_of(table) -> float:
    """How slow the machine ran a run, by its decode steps: observed over predicted median TPOT (1.6: every step took
    1.6x as long as the calibrated model says)."""
    tpot = next(row for row in table if row.metric == "TPOT p50")
    return tpot.observed / tpot.predicted


def _fmt(unit: str, v: float | None) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.1f} ms"
    if unit == "share":
        return f"{v:.1%}"
    if unit in ("bytes", "tokens"):
        return f"{v:,.0f}"
    return f"{v:.2f}"


if __name__ == "__main__":
    main()
