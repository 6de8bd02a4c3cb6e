"""Fidelity: does the simulator predict the real stack? Calibrate on one workload, predict held-out ones.

Needs the stack of examples/local.yaml running on this machine:

    kvplan deploy examples/local.yaml -i inventories/local
    python benchmarks/fidelity.py [--scale 0.5] [--out DIR] [--json FILE]

For each workload of examples/fidelity/workloads.yaml it writes the spec (examples/local.yaml with that
workload), benches it against the live vLLM (`kvplan bench`), then fits the step-time model to the
calibration workload's run alone (`kvplan calibrate`) and compares every run with the prediction
of the calibrated model (`kvplan compare --profile`). It prints one table per workload and the
targets: prompt tokens per source within 2 percentage points, median TTFT within 15 %.
`--scale` multiplies every workload's request count (the tests use a short run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvplan.live.bench import Target, new_salt  # noqa: E402
from kvplan.live.calibrate import apply_profile, fit, write_profile  # noqa: E402
from kvplan.live.compare import predict, rows  # noqa: E402
from kvplan.live.observed import read_run  # noqa: E402
from kvplan.live.runner import bench  # noqa: E402
from kvplan.resolve import resolve  # noqa: E402
from kvplan.spec import load  # noqa: E402

SHARE_TARGET_PP = 2.0
TTFT_TARGET = 0.15


def write_specs(out: Path, scale: float) -> tuple[dict[str, Path], str]:
    plan_file = REPO / "examples" / "fidelity" / "workloads.yaml"
    plan = yaml.safe_load(plan_file.read_text())
    base_file = (plan_file.parent / plan["base"]).resolve()
    base = yaml.safe_load(base_file.read_text())
    specs = {}
    for name, workload in plan["workloads"].items():
        spec = dict(base, name=f"{base['name']}-{name}", workload=dict(workload))
        spec["workload"]["requests"] = max(8, round(workload["requests"] * scale))
        path = out / f"{name}.yaml"
        path.write_text(f"# {base_file.relative_to(REPO)} with the '{name}' workload of examples/fidelity/workloads.yaml\n"
                        + yaml.safe_dump(spec, sort_keys=False))
        specs[name] = path
    return specs, plan["calibrate_on"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="http://127.0.0.1:8000")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--out", default=None, help="directory for specs, runs and the profile (default: a new one "
                                                "under .kvplan/fidelity)")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    ap.add_argument("--reuse", action="store_true", help="fit and compare the runs already in --out; bench and write nothing")
    args = ap.parse_args()

    out = Path(args.out or REPO / ".kvplan" / "fidelity" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True, exist_ok=True)
    if args.reuse:
        plan = yaml.safe_load((REPO / "examples" / "fidelity" / "workloads.yaml").read_text())
        specs, calibrate_on = {name: out / f"{name}.yaml" for name in plan["workloads"]}, plan["calibrate_on"]
        runs = {name: read_run(out / f"run-{name}") for name in specs}
    else:
        specs, calibrate_on = write_specs(out, args.scale)
        runs = bench_all(specs, Target.parse(args.target), out)
    report(specs, calibrate_on, runs, out, args.json, write=not args.reuse)


def bench_all(specs: dict[str, Path], target: Target, out: Path) -> dict:
    runs = {}
    for name, path in specs.items():
        r = resolve(load(str(path)))
        t0 = time.monotonic()
        runs[name] = bench(r, path.read_text(), [target], out / f"run-{name}", salt=new_salt())
        o = runs[name].observed
        print(f"benched {name}: {o.ok}/{o.requests} ok, {o.prompt_tokens:,} prompt tokens, "
              f"{time.monotonic() - t0:.0f} s", flush=True)
    return runs


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
        figures["workloads"][name] = {
            "held_out": held_out, "requests": runs[name].observed.requests, "ok": runs[name].observed.ok,
            "max_share_error_pp": max(shares, default=0.0), "ttft_p50_error": ttft.error,
            "rows": [{"metric": row.metric, "unit": row.unit, "predicted": row.predicted, "observed": row.observed,
                      "error": row.error} for row in table]}

    print("\ntargets: prompt tokens per source within 2 pp, median TTFT within 15 %")
    for name, f in figures["workloads"].items():
        share_ok = f["max_share_error_pp"] <= SHARE_TARGET_PP
        ttft_ok = f["ttft_p50_error"] is not None and abs(f["ttft_p50_error"]) <= TTFT_TARGET
        print(f"  {name:<8} {'held out' if f['held_out'] else 'fit     '}  worst share {f['max_share_error_pp']:.2f} pp "
              f"[{'met' if share_ok else 'MISSED'}]  TTFT p50 {f['ttft_p50_error'] * 100:+.1f} % "
              f"[{'met' if ttft_ok else 'MISSED'}]")
    if write:
        print(f"\nspecs, runs and profile in {out}")
    if json_file:
        Path(json_file).write_text(json.dumps(figures, indent=1))


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
