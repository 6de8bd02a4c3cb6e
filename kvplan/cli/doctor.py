"""`kvplan doctor` (registered on cli.app): findings with their evidence and proven fixes, for a simulation or a
live stack (kvplan.doctor).

Exit codes besides cli.py's: 0 when nothing is wrong (advice may still be printed), 6 when doctor found a
problem, so that a cron job or a CI step can run it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import Problem, SpecError
from ..named_file import check_regular
from ..units import fmt_duration
from .common import (CACHE_HELP, ProgressBar, data_format, echo_change, emit_document, format_option, overrides, run_cache,
                     set_option, spec_words)
from . import files
from .console import err, fail as _fail, out, styled
from .files import OVERWRITE_HELP
from .live import LIVE_TIMEOUT_HELP

EXIT_FINDINGS = 6


def doctor(spec: str = typer.Argument(..., help="Topology spec (YAML)."),
           result: Optional[str] = typer.Option(None, "--result", help="A `kvplan simulate --out` file of this spec to "
                                                                      "diagnose instead of simulating it."),
           target: Optional[List[str]] = typer.Option(None, "--target", help="Diagnose the live stack: vLLM's endpoint(s), "
                                                                             "e.g. http://127.0.0.1:8000 (what observe reads)."),
           lmcache_url: Optional[List[str]] = typer.Option(None, "--lmcache-url", help="LMCache's HTTP API, once per server "
                                                                                      "(as for observe)."),
           no_ceph: bool = typer.Option(False, "--no-ceph", help="Do not read Ceph (this host is not a Ceph admin host)."),
           seed: Optional[int] = typer.Option(None, "--seed", help="First seed (default: workload.seed)."),
           seeds: int = typer.Option(3, "--seeds", min=1, max=100, help="Seeds to simulate the spec and every fix on "
                                                                        "(2 or more: fixes are tested against the noise)."),
           no_prove: bool = typer.Option(False, "--no-prove", help="Report the findings and their proposed fixes without "
                                                                    "simulating the fixes."),
           write: Optional[str] = typer.Option(None, "--write", help="Write the spec with the fixes doctor proved applied to "
                                                                    "this file: the cheapest that meets the SLO first, and "
                                                                    "several only when simulated together (with --set, "
                                                                    "the overrides are written in too)."),
           overwrite: bool = typer.Option(False, "--overwrite", help=OVERWRITE_HELP),
           as_json: bool = typer.Option(False, "--json", help="Print the diagnosis as JSON on stdout instead of tables "
                                                              "(`kvplan report` renders it as a page; --format json)."),
           fmt: str = format_option("table"),
           timeout: float = typer.Option(10.0, "--timeout", min=0.1, help=LIVE_TIMEOUT_HELP),
           workers: int = typer.Option(1, "--workers", min=1, max=256, help="Simulations run in parallel."),
           cache_dir: Optional[str] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
           no_cache: bool = typer.Option(False, "--no-cache", help="Neither read nor write the run cache."),
           sets: Optional[list[str]] = set_option()) -> None:
    """Diagnose a spec (simulated) or its live stack: symptoms, causes with evidence, and spec changes proven by simulation."""
    from ..doctor import diagnose, diagnose_live, simulated_case, written
    from ..doctor.case import Case
    from ..resolve import resolve
    from ..validation import from_mapping, read

    if result and target:
        raise typer.BadParameter("give --result or --target, not both", param_hint="--result")
    data_fmt = data_format(fmt, as_json)
    files.check(write, "--write", overwrite)
    given = overrides(sets)
    cache = run_cache(cache_dir, no_cache)
    try:
        data, _, _ = read(spec, given, echo_change)     # the spec diagnosed, fixed and written: with the overrides
        base = Path(spec).parent if spec != "-" else None
        topo = from_mapping(data, base_dir=base, source=spec, overrides=given)
        resolved = resolve(topo)
        first = resolved.workload.seed if seed is None else seed
        seed_list = [first + i for i in range(seeds)]
        with ProgressBar() as progress:
            tick = (lambda done, total: progress(done / total)) if progress else None
            if target:
                from ..live.observe import snapshot
                from .live import _targets

                snap = snapshot(resolved, _targets(target), lmcache=_targets(lmcache_url) if lmcache_url else None,
                                ceph=not no_ceph, timeout=timeout)
                case = Case(topo=topo, resolved=resolved, data=data, base_dir=base)
                diagnosis, case = diagnose_live(case, snap, spec, seed_list, cache, workers, not no_prove, tick)
            else:
                if result:
                    case = Case(topo=topo, resolved=resolved, data=data, base_dir=base, results=_results(result, resolved))
                else:
                    case = simulated_case(topo, resolved, data, base, seed_list, cache, workers)
                diagnosis = diagnose(case, cache, workers, not no_prove, tick)
    except SpecError as exc:
        _fail(exc if exc.source else exc.with_source(spec))
    wrote = None
    if write:
        try:
            wrote = _write(write, spec_words(spec, given), written(case, diagnosis, cache, workers), diagnosis, overwrite)
        except SpecError as exc:
            _fail(exc if exc.source else exc.with_source(spec))
    if data_fmt:
        payload = diagnosis.model_dump(mode="json")
        payload["healthy"] = diagnosis.healthy
        if given:
            from ..spec.overrides import recorded

            payload["overrides"] = recorded(given)
        if wrote is not None:
            payload["written"] = wrote
        emit_document("DoctorResult", payload, None, data_fmt, "diagnosis", False)
    else:
        _print(diagnosis, spec_words(spec, given), hint=wrote is None)
        if wrote is not None:
            _print_written(write, wrote)
    if not diagnosis.healthy:
        raise typer.Exit(EXIT_FINDINGS)


def _results(path: str, resolved) -> list:
    """SimResults from a `kvplan simulate --out` file (one run, or several seeds), checked against the spec."""
    from pydantic import ValidationError

    from ..sim.result import SimResult

    check_regular(path, "--result", "write it with kvplan simulate SPEC --out run.json")
    try:
        from ..report.kinds import read

        _, raw = read(json.loads(Path(path).read_text()), path)
        runs = raw["results"] if isinstance(raw, dict) and "results" in raw else [raw]
        results = [SimResult.model_validate({k: v for k, v in run.items() if k not in ("cost", "overrides")}) for run in runs]
    except (OSError, ValueError, TypeError, KeyError, AttributeError, ValidationError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"not the JSON of `kvplan simulate --out` ({type(exc).__name__})"
        raise SpecError([Problem("--result", reason, path, fix="write it with kvplan simulate SPEC --out run.json")]) from None
    other = next((r for r in results if r.spec_hash != resolved.spec_hash), None)
    if other is not None:
        raise SpecError([Problem("--result", f"it was simulated from another spec (spec {other.spec_hash[:12]}, this one "
                                             f"{resolved.spec_hash[:12]})", path,
                                 fix="simulate this spec again (kvplan simulate SPEC --out run.json), or leave --result out")])
    return results


def _write(path: str, spec: str, plan: dict, diagnosis, overwrite: bool) -> dict:
    import yaml

    changes, proof = plan["changes"], plan["proof"]
    header = [f"# written by kvplan doctor from {spec}: the fixes it proved on seeds "
              f"{', '.join(map(str, diagnosis.seeds))}"]
    header += [f"#   {c}" for c in changes] or ["#   (no fix was kept: the spec is unchanged)"]
    if changes and proof is not None:
        header.append(f"# simulated as written: {_as_written(proof)}")
    header += [f"# left out: {s}" for s in plan["left_out"]]
    files.write(path, "\n".join(header) + "\n" + yaml.safe_dump(plan["data"], sort_keys=False, width=1000), "--write",
                overwrite)
    return {"file": path, "changes": [c.model_dump(mode="json") for c in changes],
            "proof": proof.model_dump(mode="json") if changes and proof is not None else None, "left_out": plan["left_out"]}


def _as_written(p) -> str:
    """The SLO targets (or the judged metric without an SLO) and the bill, as the written spec simulated."""
    figures = [f"{c.key} {fmt_duration(c.after)} ±{fmt_duration(c.after_ci95)} (target {fmt_duration(c.target)}, "
               f"{'met' if c.met else 'missed'})" for c in p.slo] or [f"{p.label} {_figure(p.unit, p.after)}"]
    return "; ".join(figures) + f"; $/hour {_usd(p.usd_per_hour_before, p.usd_per_hour_after)}" + _nodes(p)


def _nodes(p) -> str:
    if p.nodes_before is None or p.nodes_after is None or p.nodes_before == p.nodes_after:
        return ""
    return f"; {p.nodes_after} nodes instead of {p.nodes_before}"


def _figure(unit: str, value: float) -> str:
    if unit == "s":
        return fmt_duration(value)
    if unit == "ratio":
        return f"{value:.1%}"
    return f"{value:,.3g}"


def _usd(before: float | None, after: float | None) -> str:
    if before is None or after is None:
        return "-"
    return f"{before:,.2f} -> {after:,.2f}"


def _proof(fix) -> str:
    p = fix.proof
    if p is None:
        return f"{fix.metric}: not simulated (--no-prove)"
    if p.verdict == "refused":
        return f"refused: {p.refused}"
    after = _figure(p.unit, p.after) + (f" ±{_figure(p.unit, p.after_ci95)}" if p.after_ci95 else "")
    usd = f"; $/hour {_usd(p.usd_per_hour_before, p.usd_per_hour_after)}" if p.usd_per_hour_before is not None else ""
    broken = f" ({'; '.join(p.broken)})" if p.broken else ""
    return (f"{p.label} {_figure(p.unit, p.before)} -> {after}{usd}{_nodes(p)}: " + ("kept, " if fix.kept else "")
            + p.verdict + broken)


def _print(d, spec: str, hint: bool) -> None:
    what = "live stack" if d.source == "live" else f"simulation, {len(d.seeds)} seed(s)"
    problems = d.problems
    head = ("healthy", "bold green") if d.healthy else (f"{len(problems)} problem(s)", "bold red")
    out.print(styled(f"{d.name} ({what}): ", head, f", {len(d.findings) - len(problems)} advice"))
    for f in d.findings:
        style = "bold red" if f.severity == "problem" else "bold yellow"
        out.print()
        out.print(styled((f"{f.severity}:", style), f" {f.title}  [{f.code}]"))
        out.print(f"  symptom: {f.symptom}")
        out.print(f"  cause:   {f.cause}")
        if f.action:
            out.print(f"  fix:     {f.action}")
        for fix in f.fixes:
            out.print(f"  fix:     {', '.join(str(c) for c in fix.changes)}  ({fix.summary})")
            out.print(f"           {_proof(fix)}")
    if d.ranking:
        out.print()
        out.print(styled(("fixes for the SLO, cheapest first among those that meet it:", "bold")))
        for i, r in enumerate(d.ranking, 1):
            p = r.fix.proof
            slo = ", ".join(f"{c.key} {fmt_duration(c.after)} ±{fmt_duration(c.after_ci95)}" for c in p.slo)
            meets = "meets the SLO" + ("" if all(c.outcome == "met" for c in p.slo) else " on the mean (within the noise)")
            out.print(f"  {i}. {', '.join(str(c) for c in r.fix.changes)}: {meets if r.meets_slo else 'helps, misses the SLO'}; "
                      f"{slo}; $/hour {_usd(p.usd_per_hour_before, p.usd_per_hour_after)}{_nodes(p)}")
    out.print()
    for note in d.notes:
        out.print(note)
    if hint and any(f.kept for f in d.findings):
        out.print(f"apply the kept fixes: kvplan doctor {spec} --write fixed.yaml")


def _print_written(path: str, wrote: dict) -> None:
    from ..doctor.finding import Proof

    n = len(wrote["changes"])
    err.print(f"spec with {n} change(s) written to {path}" + "".join(f"\n  {c['path']}: {c['value']}" for c in wrote["changes"]))
    if wrote["proof"] is not None:
        err.print(f"  simulated as written: {_as_written(Proof.model_validate(wrote['proof']))}")
    for line in wrote["left_out"]:
        err.print(f"  left out: {line}")


__all__ = ["EXIT_FINDINGS", "doctor"]
